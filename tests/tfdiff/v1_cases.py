"""Differential cases for ``tf.compat.v1`` (issue 15): each source runs with ``tf`` bound to
TensorFlow's ``tf.compat.v1`` (recorded in ``tf1_results.json`` by ``generate.py --v1``) and to
``tensorweave.compat.v1`` (``tests/test_tf1_differential.py``), and the results must agree.

Sources are one expression over ``tf``, ``np``, ``grad`` and ``graph_run`` (``graph_run(build)``
runs ``build()`` in a fresh graph and session after the variable initializers, as TF1 programs do).
Random ops are compared by shape and dtype only (the generators differ).
"""
import itertools

F = "tf.constant([[0.5, -1.25, 2.0], [3.0, 0.25, -0.75]])"
P = "tf.constant([[0.5, 0.25, 2.0], [3.0, 1.5, 0.75]])"         # positive
U = "tf.constant([[0.5, -0.25, 0.0], [0.75, 0.25, -0.5]])"      # inside (-1, 1)
I = "tf.constant([[7, -3, 2], [-8, 5, 4]])"
SP = "tf.SparseTensor([[0, 0], [0, 2], [1, 1]], [1.0, 2.0, 3.0], [2, 3])"
SP2 = "tf.SparseTensor([[0, 1], [1, 1]], [10.0, -2.0], [2, 3])"
SPD = "tf.SparseTensor([[0, 0], [1, 1], [2, 3]], [1.5, -2.0, 4.0], [3, 4])"
SPD_DENSE = f"tf.sparse_tensor_to_dense({SPD})"
SPD_PARTS = f"(lambda s: [s.indices, s.values, s.dense_shape])"
M = "tf.constant([[4.0, 1.0, 0.5], [1.0, 3.0, 0.25], [0.5, 0.25, 2.0]])"   # symmetric positive definite


def _top_level_math():
    unary = {"acos": U, "acosh": "tf.constant([1.0, 1.5, 3.0])", "asin": U, "asinh": F, "atanh": U, "cosh": F,
             "sinh": F, "digamma": P, "erfc": F, "lgamma": P, "rint": "tf.constant([0.5, 1.5, 2.5, -0.5, -1.7])",
             "is_inf": "tf.constant([1.0, np.inf, -np.inf, np.nan])", "invert_permutation": "tf.constant([2, 0, 1])",
             "is_non_decreasing": "tf.constant([1, 2, 2, 5])", "is_strictly_increasing": "tf.constant([1, 2, 2, 5])",
             "lbeta": P, "angle": F, "real": F, "imag": F, "conj": F, "to_int32": F, "to_bfloat16": F,
             "to_complex64": F, "to_complex128": F, "reduce_all": "tf.constant([[True, False], [True, True]])",
             "reduce_any": "tf.constant([[True, False], [False, False]])"}
    for op, x in unary.items():
        yield f"v1/math/{op}", "top-level math", f"tf.{op}({x})"
    yield "v1/math/reduce_all_axis", "top-level math", \
        "tf.reduce_all(tf.constant([[True, False], [True, True]]), reduction_indices=1, keep_dims=True)"
    binary = {"atan2": (F, P), "div": (I, "tf.constant([[2, 2, -3], [3, -2, 3]])"), "mod": (I, "3"),
              "truediv": (I, "tf.constant([[2, 2, -3], [3, -2, 3]])"), "div_float": (F, P),
              "igamma": (P, "tf.constant([[1.0, 0.5, 3.0], [2.0, 0.1, 1.0]])"),
              "igammac": (P, "tf.constant([[1.0, 0.5, 3.0], [2.0, 0.1, 1.0]])"),
              "zeta": ("tf.constant([2.0, 3.0, 4.5])", "tf.constant([1.0, 2.0, 0.5])"),
              "polygamma": ("tf.constant([0.0, 1.0, 2.0])", "tf.constant([1.5, 2.0, 0.5])")}
    for op, (a, b) in binary.items():
        yield f"v1/math/{op}", "top-level math", f"tf.{op.split('_')[0]}({a}, {b})"
    yield "v1/math/igamma_kw", "top-level math", "tf.igamma(a=tf.constant([2.0]), x=tf.constant([1.0]))"
    yield "v1/math/zeta_kw", "top-level math", "tf.zeta(x=tf.constant([2.0]), q=tf.constant([1.0]))"
    yield "v1/math/cumprod", "top-level math", f"tf.cumprod({F}, axis=1, exclusive=True, reverse=True)"
    yield "v1/math/accumulate_n", "top-level math", f"tf.accumulate_n([{F}, {P}, {F}])"
    yield "v1/math/saturate_cast", "top-level math", "tf.saturate_cast(tf.constant([300.0, -5.0, 7.5]), tf.uint8)"
    yield "v1/math/get_static_value", "top-level math", "tf.constant(tf.get_static_value(tf.constant([1, 2])))"
    for seg in ("max", "mean", "min", "prod", "sum"):
        yield f"v1/segment/{seg}", "segments", f"tf.segment_{seg}({F}, tf.constant([0, 0]))"
        yield f"v1/segment/{seg}_3", "segments", f"tf.segment_{seg}(tf.constant([1.0, 2.0, -3.0, 4.0]), [0, 0, 1, 3])"
    for seg in ("max", "mean", "min", "prod", "sqrt_n"):
        yield f"v1/unsorted_segment/{seg}", "segments", \
            f"tf.unsorted_segment_{seg}(tf.constant([1.0, 2.0, -3.0, 4.0]), [2, 0, 2, 0], 3)"
    yield "v1/math/bincount", "top-level math", "tf.bincount(tf.constant([1, 1, 3, 0]), minlength=5)"
    yield "v1/math/bincount_weights", "top-level math", \
        "tf.bincount(tf.constant([1, 1, 3]), weights=tf.constant([0.5, 1.0, 2.0]), maxlength=3, dtype=tf.float32)"
    yield "v1/math/confusion_matrix", "top-level math", "tf.confusion_matrix([0, 1, 2, 1], [0, 2, 2, 1], 3, tf.int64)"


def _top_level_linalg():
    cases = {"cholesky": f"tf.cholesky({M})", "cholesky_solve": f"tf.cholesky_solve(tf.cholesky({M}), tf.ones([3, 1]))",
             "matrix_band_part": f"tf.matrix_band_part({M}, 0, 1)",
             "matrix_solve": f"tf.matrix_solve({M}, tf.constant([[1.0], [2.0], [3.0]]))",
             "matrix_solve_adjoint": f"tf.matrix_solve({M} + tf.constant([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], "
                                     f"[0.0, 0.0, 0.0]]), tf.ones([3, 2]), adjoint=True)",
             "matrix_solve_ls": f"tf.matrix_solve_ls({F}[:, :2] + tf.eye(2), tf.ones([2, 1]))",
             "matrix_triangular_solve": f"tf.matrix_triangular_solve(tf.cholesky({M}), tf.ones([3, 1]))",
             "qr_r_abs": f"tf.abs(tf.qr({M})[1])",
             "svd_s": f"tf.svd({M}, compute_uv=False)",
             "self_adjoint_eigvals": f"tf.self_adjoint_eigvals({M})",
             "self_adjoint_eig_values": f"tf.self_adjoint_eig({M})[0]"}
    for k, src in cases.items():
        yield f"v1/linalg/{k}", "top-level linalg", src
    for f in ("fft", "ifft"):
        yield f"v1/fft/{f}", "fft", f"tf.{f}(tf.complex(tf.constant([1.0, 2.0, 0.0, -1.0]), tf.constant([0.5, 0.0, 1.0, 0.0])))"
        yield f"v1/fft/{f}2d", "fft", f"tf.{f}2d(tf.complex({F}, {P}))"
        yield f"v1/fft/{f}3d", "fft", f"tf.{f}3d(tf.complex(tf.reshape(tf.range(8.0), [2, 2, 2]), tf.zeros([2, 2, 2])))"


def _top_level_scatter():
    t = "tf.constant([1.0, 2.0, 3.0, 4.0])"
    for op in ("update", "add", "sub"):
        yield f"v1/tensor_scatter/{op}", "scatter", f"tf.tensor_scatter_{op}({t}, [[1], [3]], [10.0, 20.0])"


def _sparse():
    cases = {
        "to_dense": f"tf.sparse_tensor_to_dense({SP})",
        "reorder": f"tf.sparse_tensor_to_dense(tf.sparse_reorder(tf.SparseTensor([[1, 1], [0, 0]], [3.0, 1.0], [2, 3])))",
        "reshape": f"tf.sparse_tensor_to_dense(tf.sparse_reshape({SP}, [3, 2]))",
        "retain": f"tf.sparse_tensor_to_dense(tf.sparse_retain({SP}, [True, False, True]))",
        "slice": f"tf.sparse_tensor_to_dense(tf.sparse_slice({SPD}, [1, 1], [2, 3]))",
        "softmax": f"tf.sparse_tensor_to_dense(tf.sparse_softmax({SP}))",
        "dense_matmul": f"tf.sparse_tensor_dense_matmul({SP}, tf.ones([3, 2]))",
        "dense_matmul_adj": f"tf.sparse_tensor_dense_matmul({SP}, tf.ones([2, 2]), adjoint_a=True)",
        "to_indicator": "tf.sparse_to_indicator(tf.SparseTensor([[0, 0], [0, 1], [1, 0]], [0, 3, 1], [2, 2]), 4)",
        "transpose": f"tf.sparse_tensor_to_dense(tf.sparse_transpose({SP}))",
        "maximum": f"tf.sparse_tensor_to_dense(tf.sparse_maximum({SP}, {SP2}))",
        "minimum": f"tf.sparse_tensor_to_dense(tf.sparse_minimum({SP}, {SP2}))",
        "fill_empty_rows": f"tf.sparse_tensor_to_dense(tf.sparse_fill_empty_rows({SPD}, -1.0)[0])",
        "fill_empty_rows_ind": "tf.sparse_fill_empty_rows(tf.SparseTensor([[0, 0], [2, 1]], [1.0, 2.0], [4, 2]), 7.0)[1]",
        "reset_shape": f"tf.sparse_reset_shape({SP}, [4, 5]).dense_shape",
        "add": f"tf.sparse_tensor_to_dense(tf.sparse_add({SP}, {SP2}))",
        "add_dense": f"tf.sparse_add({SP}, tf.ones([2, 3]))",
        "add_thresh": f"tf.sparse_tensor_to_dense(tf.sparse_add({SP}, {SP2}, thresh=2.5))",
        "concat": f"tf.sparse_tensor_to_dense(tf.sparse_concat(1, [{SP}, {SP2}]))",
        "concat_expand": f"tf.sparse_tensor_to_dense(tf.sparse_concat(0, [{SP}, {SPD}], expand_nonconcat_dim=True))",
        "reduce_sum": f"tf.sparse_reduce_sum({SP}, 1)",
        "reduce_sum_all": f"tf.sparse_reduce_sum({SP})",
        "reduce_sum_keep": f"tf.sparse_reduce_sum({SP}, reduction_axes=0, keep_dims=True)",
        "reduce_max": f"tf.sparse_reduce_max({SP}, 1)",
        "reduce_sum_sparse": f"tf.sparse_tensor_to_dense(tf.sparse_reduce_sum_sparse({SP}, 0))",
        "reduce_max_sparse": f"tf.sparse_tensor_to_dense(tf.sparse_reduce_max_sparse({SP}, 1))",
        "split": f"[tf.sparse_tensor_to_dense(s) for s in tf.sparse_split(sp_input={SPD}, num_split=2, axis=1)]",
        "split_0": f"[tf.sparse_tensor_to_dense(s) for s in tf.sparse_split(sp_input={SPD}, num_split=3, axis=0)]",
        "mask": "tf.sparse_mask(tf.IndexedSlices(tf.constant([[1.0], [2.0], [3.0]]), tf.constant([0, 4, 7])), "
                "tf.constant([4])).indices",
        "value_ctor": "tf.sparse_tensor_to_dense(tf.SparseTensor.from_value(tf.SparseTensorValue([[0, 1]], [2.0], [2, 2])))",
    }
    for k, src in cases.items():
        yield f"v1/sparse/{k}", "sparse v1 spellings", src
    for f in ("mean", "sum", "sqrt_n"):
        yield f"v1/sparse_segment/{f}", "sparse v1 spellings", \
            f"tf.sparse_segment_{f}({F}, tf.constant([0, 1, 0]), tf.constant([0, 0, 1]))"
        yield f"v1/sparse_segment/{f}_n", "sparse v1 spellings", \
            f"tf.sparse_segment_{f}({F}, tf.constant([0, 1]), tf.constant([0, 2]), num_segments=4)"


def _strings():
    s = "tf.constant(['  hello World ', 'TensorFlow 1 '])"
    cases = {"regex_replace": f"tf.regex_replace({s}, 'o+', '0')",
             "string_join": "tf.string_join([tf.constant(['a', 'b']), tf.constant(['x', 'y'])], separator='-')",
             "string_strip": f"tf.string_strip({s})",
             "hash_fast": "tf.string_to_hash_bucket_fast(tf.constant(['a', 'hello', '']), 100)",
             "hash_strong": "tf.string_to_hash_bucket_strong(tf.constant(['a', 'hello']), 100, [1, 2])",
             "to_number": "tf.string_to_number(tf.constant(['1.5', '-2e3']))",
             "to_number_int": "tf.string_to_number(string_tensor=tf.constant(['12', '-3']), out_type=tf.int32)",
             "reduce_join": "tf.reduce_join(tf.constant([['a', 'b'], ['c', 'd']]), 1, separator='.')",
             "reduce_join_keep": "tf.reduce_join(tf.constant([['a', 'b'], ['c', 'd']]), reduction_indices=0, "
                                 "keep_dims=True)",
             "reduce_join_all": "tf.reduce_join(tf.constant([['a', 'b'], ['c', 'd']]))",
             "substr": "tf.substr(tf.constant(['hello', 'world']), 1, 3)",
             "encode_base64": "tf.encode_base64(tf.constant(['hi there', 'tf1']))",
             "decode_base64": "tf.decode_base64(tf.encode_base64(tf.constant(['hi there', 'tf1']), pad=True))",
             "decode_raw": "tf.decode_raw(tf.constant(['\\x01\\x02\\x03\\x04']), tf.uint8)",
             "decode_raw_bytes": "tf.decode_raw(bytes=tf.constant([b'\\x01\\x00\\x02\\x00']), out_type=tf.int16)",
             "decode_csv": "tf.decode_csv(tf.constant(['1,2.5,x', '3,,y']), [[0], [0.0], ['']])",
             "decode_csv_na": "tf.decode_csv(tf.constant(['1;NA']), [[0], [7]], field_delim=';', na_value='NA')",
             "serialize_parse_tensor": "tf.parse_tensor(tf.serialize_tensor(tf.constant([1.5, 2.0])), tf.float32)"}
    for k, src in cases.items():
        yield f"v1/strings/{k}", "strings and decoding", src


def _random():
    cases = {"random_normal": "tf.random_normal([3, 4], seed=1)",
             "random_uniform": "tf.random_uniform([2, 5], minval=1, maxval=9, dtype=tf.int32, seed=1)",
             "truncated_normal": "tf.truncated_normal([4], stddev=0.5, seed=2)",
             "multinomial": "tf.multinomial(tf.log([[0.5, 0.5], [0.1, 0.9]]), 5, seed=3)",
             "multinomial_int32": "tf.multinomial(tf.log([[0.5, 0.5]]), 3, output_dtype=tf.int32)",
             "random_shuffle": "tf.random_shuffle(tf.range(6), seed=4)"}
    for k, src in cases.items():
        yield f"v1/random/{k}", "random (shape and dtype)", f"(lambda t: (t.shape, t.dtype.name))({src})"


def _asserts():
    v = "tf.Variable([1.0, 2.0, -3.0])"       # not a constant: the check runs in the session
    binary = {"equal": ("tf.constant([1, 2])", "tf.constant([1, 2])", "tf.constant([1, 3])"),
              "none_equal": ("tf.constant([1, 2])", "tf.constant([3, 4])", "tf.constant([1, 4])"),
              "less": ("tf.constant([1.0])", "tf.constant([2.0])", "tf.constant([2.0])"),
              "less_equal": ("tf.constant([2.0])", "tf.constant([2.0])", "tf.constant([1.0])"),
              "greater": ("tf.constant([3])", "tf.constant([2])", "tf.constant([2])"),
              "greater_equal": ("tf.constant([2])", "tf.constant([2])", "tf.constant([3])"),
              "near": ("tf.constant([1.0])", "tf.constant([1.0000001])", "tf.constant([1.01])")}
    for op, (x, ok, bad) in binary.items():
        yield f"v1/assert/{op}_ok", "asserts", f"tf.assert_{op}({x}, {ok})"
        yield f"v1/assert/{op}_fails", "asserts", f"tf.assert_{op}({x}, {bad})"
        yield f"v1/assert/{op}_graph", "asserts", \
            f"graph_run(lambda: (lambda x: tf.tuple([x], control_inputs=[tf.assert_{op}(x, {ok})]))(tf.Variable({x})))"
        yield f"v1/assert/{op}_graph_fails", "asserts", \
            f"graph_run(lambda: (lambda x: tf.tuple([x], control_inputs=[tf.assert_{op}(x, {bad})]))(tf.Variable({x})))"
    for op, good in (("positive", True), ("negative", False), ("non_negative", True), ("non_positive", False)):
        yield f"v1/assert/{op}_ok", "asserts", f"tf.assert_{op}(tf.constant([{'2.0' if good else '-2.0'}, 0.5 * {'1' if good else '-1'}]))"
        yield f"v1/assert/{op}_graph_fails", "asserts", \
            f"graph_run(lambda: (lambda x: tf.tuple([x], control_inputs=[tf.assert_{op}(x)]))({v}))"
    cases = {"integer_ok": "tf.assert_integer(tf.constant([1]))", "integer_fails": "tf.assert_integer(tf.constant([1.0]))",
             "type_ok": "tf.assert_type(tf.constant([1.0]), tf.float32)",
             "type_fails": "tf.assert_type(tf.constant([1]), tf.float32)",
             "rank_ok": "tf.assert_rank(tf.ones([2, 3]), 2)", "rank_fails": "tf.assert_rank(tf.ones([2, 3]), 1)",
             "rank_at_least_ok": "tf.assert_rank_at_least(tf.ones([2, 3]), 1)",
             "rank_at_least_fails": "tf.assert_rank_at_least(tf.ones([2]), 2)",
             "rank_in_ok": "tf.assert_rank_in(tf.ones([2, 3]), [1, 2])",
             "rank_in_fails": "tf.assert_rank_in(tf.ones([2, 3]), [0, 1])",
             "scalar_ok": "tf.assert_scalar(tf.constant(3.0))", "scalar_fails": "tf.assert_scalar(tf.constant([3.0]))",
             "same_float_dtype": "tf.assert_same_float_dtype([tf.constant([1.0]), tf.constant(2.0)]).name",
             "same_float_dtype_fails": "tf.assert_same_float_dtype([tf.constant([1.0]), tf.constant(2.0, tf.float64)])",
             "same_float_dtype_none": "tf.assert_same_float_dtype().name",
             "proper_iterable_ok": "tf.assert_proper_iterable([1, 2])",
             "proper_iterable_fails": "tf.assert_proper_iterable(tf.constant([1, 2]))",
             "proper_iterable_str": "tf.assert_proper_iterable('ab')",
             "is_numeric_tensor": "[tf.is_numeric_tensor(tf.constant(x)) for x in (1.0, 1, True, 'a')] + "
                                  "[tf.is_numeric_tensor(1.0)]",
             "Assert_ok": "tf.Assert(tf.constant(True), [tf.constant([1, 2])])",
             "Assert_fails": "tf.Assert(tf.constant(False), ['bad', tf.constant([1, 2])])",
             "Assert_graph_fails": f"graph_run(lambda: (lambda x: tf.tuple([x], control_inputs=[tf.Assert("
                                   f"tf.reduce_all(x > 0), [x])]))({v}))",
             "check_numerics_ok": "tf.check_numerics(tf.constant([1.0, 2.0]), 'msg')",
             "check_numerics_nan": "tf.check_numerics(tf.constant([1.0, np.nan]), 'msg')",
             "check_numerics_graph": "graph_run(lambda: tf.check_numerics(tf.Variable([1.0, np.inf]) * 0.0, 'msg'))",
             "check_numerics_grad": "grad(lambda x: tf.check_numerics(x * x, 'm'), [1.0, 3.0])",
             "verify_finite": "tf.verify_tensor_all_finite(tf.constant([1.0, 2.0]), 'msg')",
             "verify_finite_fails": "tf.verify_tensor_all_finite(x=tf.constant([np.inf]), message='msg')",
             "add_check_numerics_ops": "graph_run(lambda: (lambda y: tf.tuple([y], control_inputs=["
                                       "tf.add_check_numerics_ops()]))(tf.log(tf.Variable([1.0, 0.0]))))",
             "add_check_numerics_ok": "graph_run(lambda: (lambda y: tf.tuple([y], control_inputs=["
                                      "tf.add_check_numerics_ops()]))(tf.exp(tf.Variable([1.0, 0.0]))))"}
    for k, src in cases.items():
        yield f"v1/assert/{k}", "asserts", src


def _state_ops():
    v = "tf.Variable([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])"
    upd = "[[10.0, 20.0], [0.5, 4.0], [2.0, 2.0]]"
    for op in ("update", "add", "sub", "mul", "div", "min", "max"):
        yield f"v1/state/scatter_{op}", "variable updates", \
            f"graph_run(lambda: tf.scatter_{op}({v}, [3, 0, 3] if '{op}' != 'update' else [3, 0, 1], {upd}))"
        yield f"v1/state/scatter_{op}_eager", "variable updates", \
            f"tf.scatter_{op}({v}, tf.constant([2, 1]), [[1.0, 1.0], [2.0, 0.5]])"
    yield "v1/state/scatter_div_int", "variable updates", \
        "graph_run(lambda: tf.scatter_div(tf.Variable([7, -7, 9]), [0, 1, 1], [2, 2, 3]))"
    yield "v1/state/scatter_add_scalar_rows", "variable updates", \
        "graph_run(lambda: tf.scatter_add(tf.Variable([1, 2, 3]), [[0, 1], [2, 0]], [[1, 1], [1, 1]]))"
    yield "v1/state/scatter_bad_index", "variable updates", f"graph_run(lambda: tf.scatter_update({v}, [4], {upd}[:1]))"
    for op in ("update", "add", "sub"):
        yield f"v1/state/scatter_nd_{op}", "variable updates", \
            f"graph_run(lambda: tf.scatter_nd_{op}({v}, [[0, 1], [3, 0], [0, 1]] if '{op}' != 'update' else "\
            f"[[0, 1], [3, 0]], [1.0, 2.0, 3.0] if '{op}' != 'update' else [1.0, 2.0]))"
        yield f"v1/state/scatter_nd_{op}_rows", "variable updates", \
            f"graph_run(lambda: tf.scatter_nd_{op}({v}, [[2], [1]], [[9.0, 9.0], [8.0, 8.0]]))"
    yield "v1/state/batch_scatter_update", "variable updates", \
        "graph_run(lambda: tf.batch_scatter_update(tf.Variable([[1, 2, 3], [4, 5, 6]]), [[0, 2], [1, 0]], [[7, 8], [9, 10]]))"
    yield "v1/state/count_up_to", "variable updates", \
        "graph_run(lambda: tf.count_up_to(tf.Variable(1), 3))"
    yield "v1/state/count_up_to_limit", "variable updates", "graph_run(lambda: tf.count_up_to(tf.Variable(3), 3))"
    yield "v1/state/count_up_to_eager", "variable updates", "(lambda c: [tf.count_up_to(c, 5), tf.count_up_to(c, 5)])(tf.Variable(1))"
    two = "(lambda a, b: ([a.initializer], {q}))(tf.Variable(1.0, name='a'), tf.Variable([2], name='b'))"
    yield "v1/state/report_uninitialized", "variable updates", \
        "graph_run(lambda: " + two.format(q="tf.report_uninitialized_variables()") + ", initialize=False)"
    yield "v1/state/report_uninitialized_list", "variable updates", \
        "graph_run(lambda: " + two.format(q="tf.report_uninitialized_variables([a])") + ", initialize=False)"
    yield "v1/state/is_variable_initialized", "variable updates", \
        "graph_run(lambda: " + two.format(q="[tf.is_variable_initialized(a), tf.is_variable_initialized(b)]") + \
        ", initialize=False)"
    yield "v1/state/assert_variables_initialized_ok", "variable updates", \
        "graph_run(lambda: tf.tuple([tf.constant(1)], control_inputs=[tf.assert_variables_initialized([tf.Variable(2)])]))"


def _functional():
    x = "tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, -6.0]])"
    cases = {
        "map_fn": f"tf.map_fn(lambda r: r * 2.0 + 1.0, {x})",
        "map_fn_nested": f"tf.map_fn(lambda ab: ab[0] * ab[1], ({x}, {x}), dtype=tf.float32)",
        "map_fn_nested_needs_dtype": f"tf.map_fn(lambda ab: ab[0] * ab[1], ({x}, {x}))",
        "map_fn_nested_same": f"tf.map_fn(lambda ab: (ab[1], ab[0] + 1.0), ({x}, {x}))",
        "map_fn_dtype": f"tf.map_fn(lambda r: (tf.reduce_sum(r), tf.cast(r[0] > 2.0, tf.int32)), {x}, "
                        f"dtype=(tf.float32, tf.int32))",
        "map_fn_grad": "grad(lambda x: tf.map_fn(lambda r: r * r, x), [[1.0, 2.0], [3.0, 4.0]])",
        "map_fn_graph_placeholder": "graph_run(lambda: (lambda p: tf.map_fn(lambda r: r * r, p))("
                                    "tf.placeholder_with_default(tf.constant([[1.0, 2.0], [3.0, 4.0]]), [None, 2])))",
        "scan": f"tf.scan(lambda a, r: a + r, {x})",
        "scan_init": f"tf.scan(lambda a, r: a * r, {x}, initializer=tf.ones([2]))",
        "scan_reverse": f"tf.scan(lambda a, r: a + r, {x}, reverse=True)",
        "scan_nested": f"tf.scan(lambda a, r: (a[0] + r, a[1] * 2.0), {x}, initializer=(tf.zeros([2]), tf.constant(1.0)))",
        "scan_grad": "grad(lambda x: tf.scan(lambda a, r: a * r, x), [[1.0, 2.0], [3.0, 4.0], [0.5, 2.0]])",
        "scan_graph_placeholder": "graph_run(lambda: (lambda p: tf.scan(lambda a, r: a + r, p, reverse=True))("
                                  "tf.placeholder_with_default(tf.constant([1.0, 2.0, 3.0]), [None])))",
        "foldl": "tf.foldl(lambda a, x: a * 10 + x, tf.constant([1, 2, 3]))",
        "foldl_init": "tf.foldl(lambda a, x: a - x, tf.constant([1.0, 2.0, 3.0]), initializer=tf.constant(10.0))",
        "foldr": "tf.foldr(lambda a, x: a * 10 + x, tf.constant([1, 2, 3]))",
        "foldr_grad": "grad(lambda x: tf.foldr(lambda a, v: a * v + 1.0, x), [2.0, 3.0, 4.0])",
    }
    for k, src in cases.items():
        yield f"v1/functional/{k}", "map_fn / scan / fold", src


def _array_ops():
    img = "tf.reshape(tf.range(32.0), [2, 4, 4, 1])"
    cases = {
        "space_to_depth": f"tf.space_to_depth({img}, 2)",
        "depth_to_space": f"tf.depth_to_space(tf.reshape(tf.range(32.0), [2, 1, 2, 8]), 2)",
        "depth_to_space_grad": "grad(lambda x: tf.depth_to_space(x, 2) * tf.range(16.0, dtype=tf.float32)[None, :, None, None]"
                               "[:, :4, :, :1], np.ones([1, 2, 2, 4]))",
        "space_to_batch_nd": f"tf.space_to_batch_nd({img}, [2, 2], [[0, 0], [2, 0]])",
        "space_to_batch_nd_1d": "tf.space_to_batch_nd(tf.reshape(tf.range(12), [2, 6, 1]), [3], [[0, 0]])",
        "space_to_batch": f"tf.space_to_batch({img}, [[1, 1], [1, 1]], 2)",
        "batch_to_space_nd": f"tf.batch_to_space_nd(tf.reshape(tf.range(32.0), [8, 2, 2, 1]), [2, 2], [[0, 1], [1, 0]])",
        "batch_to_space": f"tf.batch_to_space(tf.space_to_batch({img}, [[1, 1], [1, 1]], 2), [[1, 1], [1, 1]], 2)",
        "space_to_batch_grad": "grad(lambda x: tf.space_to_batch_nd(x, [2], [[1, 1]]) * tf.constant([1.0, 2.0, 3.0, 4.0])"
                               "[:, None, None], np.ones([2, 2, 1]))",
        "required_paddings": "tf.required_space_to_batch_paddings([5, 7], [2, 3], [[1, 0], [0, 2]])",
        "required_paddings_default": "tf.required_space_to_batch_paddings([5, 6], [2, 4])",
        "dynamic_partition": "tf.dynamic_partition(tf.constant([[1, 2], [3, 4], [5, 6]]), [2, 0, 2], 3)",
        "dynamic_partition_2d": "tf.dynamic_partition(tf.constant([[1, 2], [3, 4]]), [[0, 1], [1, 1]], 2)",
        "dynamic_partition_grad": "grad(lambda x: tf.dynamic_partition(x, [1, 0, 1], 2)[1] * 3.0, [1.0, 2.0, 3.0])",
        "dynamic_stitch": "tf.dynamic_stitch([[0, 4, 1], [2, 3]], [[[1.0, 1.5], [2.0, 2.5], [3.0, 3.5]], [[4.0, 4.5], "
                          "[5.0, 5.5]]])",
        "dynamic_stitch_dup": "tf.dynamic_stitch([[0, 1], [1, 2]], [[10, 20], [30, 40]])",
        "dynamic_stitch_scalar_idx": "tf.dynamic_stitch([1, [0, 2]], [[7.0, 8.0], [[1.0, 2.0], [5.0, 6.0]]])",
        "setdiff1d": "tf.setdiff1d([1, 2, 3, 4, 5, 6], [1, 3, 5])",
        "setdiff1d_int64": "tf.setdiff1d(tf.constant([4.0, 1.0, 4.0, 2.0]), [1.0], index_dtype=tf.int64)",
        "batch_gather": "tf.batch_gather(tf.constant([[1, 2, 3], [4, 5, 6]]), tf.constant([[2, 0], [1, 1]]))",
        "batch_gather_3d": "tf.batch_gather(tf.reshape(tf.range(12), [2, 3, 2]), tf.constant([[2], [0]]))",
        "sparse_to_dense": "tf.sparse_to_dense([[0, 1], [2, 3]], [3, 4], [5.0, 6.0])",
        "sparse_to_dense_vector": "tf.sparse_to_dense([0, 3], [5], 1, default_value=-1)",
        "sparse_to_dense_scalar": "tf.sparse_to_dense(2, [4], 9)",
        "sparse_to_dense_unsorted": "tf.sparse_to_dense([[2], [0]], [4], [1, 2])",
        "sparse_to_dense_unsorted_ok": "tf.sparse_to_dense([[2], [0]], [4], [1, 2], validate_indices=False)",
        "sparse_matmul": "tf.sparse_matmul(tf.constant([[1.0, 0.0], [0.0, 2.0]]), tf.constant([[3.0], [4.0]]), "
                         "a_is_sparse=True)",
        "histogram_bins": "tf.histogram_fixed_width_bins([-1.0, 0.0, 1.5, 2.0, 5.0, 15.0], [0.0, 5.0], nbins=5)",
        "clip_by_average_norm": "tf.clip_by_average_norm(tf.constant([[3.0, 4.0], [0.0, 12.0]]), 1.0)",
        "clip_by_average_norm_noop": "tf.clip_by_average_norm(tf.constant([0.1, 0.2]), 5.0)",
        "convert_indexed_slices": "tf.convert_to_tensor(tf.convert_to_tensor_or_indexed_slices("
                                  "tf.IndexedSlices(tf.constant([[1.0]]), tf.constant([1]), tf.constant([2, 1]))))",
        "convert_or_sparse": "tf.sparse_tensor_to_dense(tf.convert_to_tensor_or_sparse_tensor("
                             "tf.SparseTensorValue([[1]], [3], [2])))",
        "convert_or_sparse_dense": "tf.convert_to_tensor_or_sparse_tensor([1, 2])",
        "guarantee_const": "tf.guarantee_const(tf.constant([1.0, 2.0]))",
    }
    for k, src in cases.items():
        yield f"v1/array/{k}", "array functions", src


def _framework():
    tmpl = ("(lambda t: [t(tf.constant([1.0, 2.0])), t(tf.constant([3.0, 4.0])), "
            "tf.constant([v.name for v in tf.global_variables()])])(tf.make_template('lin', lambda x, k: x * "
            "tf.get_variable('w', [2], initializer=tf.constant_initializer([0.5, -1.0])) + k, k=1.0))")
    cases = {
        "hessians": "graph_run(lambda: (lambda x: tf.hessians(tf.reduce_sum(x * x * x) + x[0] * x[1], x))"
                    "(tf.Variable([1.0, 2.0])))",
        "hessians_matrix": "graph_run(lambda: (lambda x: tf.hessians(tf.reduce_prod(x), [x])[0])"
                           "(tf.Variable([[1.0, 2.0], [3.0, 0.5]])))",
        "make_template": f"graph_run(lambda: {tmpl})",
        "make_template_scope_now": "graph_run(lambda: (lambda t: [t(), t(), tf.constant([v.name for v in "
                                   "tf.global_variables()])])(tf.make_template('m', lambda: tf.get_variable('v', [], "
                                   "initializer=tf.zeros_initializer()) + 1.0, create_scope_now_=True)))",
        "make_template_unique": "graph_run(lambda: (lambda a, b: [a(), b(), a(), tf.constant([v.name for v in "
                                "tf.global_variables()])])(*[tf.make_template('t', lambda: tf.get_variable('v', [], "
                                "initializer=tf.ones_initializer()) * 2.0) for _ in range(2)]))",
        "unconnected_zero": "graph_run(lambda: (lambda x, y: tf.gradients(x * 2.0, [x, y], "
                            "unconnected_gradients=tf.UnconnectedGradients.ZERO))(tf.Variable(1.0), tf.Variable([3.0, 4.0])))",
        "aggregation_method": "graph_run(lambda: (lambda x: tf.gradients(x * x + x, x, "
                              "aggregation_method=tf.AggregationMethod.EXPERIMENTAL_TREE))(tf.Variable(3.0)))",
        "dimension_value": "[tf.dimension_value(d) for d in tf.TensorShape([3, None])]",
        "eager_outside_functions": "tf.executing_eagerly_outside_functions()",
        "resource_variables_enabled": "tf.resource_variables_enabled()",
        "control_flow_v2_enabled": "tf.control_flow_v2_enabled()",
        "no_regularizer": "tf.no_regularizer(tf.constant(1.0))",
        "tables_initializer": "graph_run(lambda: tf.tuple([tf.constant(1)], control_inputs=[tf.tables_initializer()]))",
        "initialize_all_tables": "graph_run(lambda: tf.tuple([tf.constant(2)], control_inputs=[tf.initialize_all_tables()]))",
        "timestamp": "(lambda t: (t.dtype.name, t.shape, bool(t.numpy() > 1.7e9)))(tf.timestamp())",
        "timestamp_graph": "(lambda t: (t.dtype.name, bool(t.numpy() > 1.7e9)))(graph_run(lambda: tf.timestamp()))",
        "get_seed": "tf.get_seed(5)[1]",
        "aggregation_constants": "[tf.AggregationMethod.ADD_N, tf.AggregationMethod.DEFAULT, "
                                 "tf.AggregationMethod.EXPERIMENTAL_TREE, tf.AggregationMethod.EXPERIMENTAL_ACCUMULATE_N]",
        "unconnected_values": "[tf.UnconnectedGradients.NONE.value, tf.UnconnectedGradients.ZERO.value]",
    }
    for k, src in cases.items():
        yield f"v1/framework/{k}", "framework", src


def _examples_and_files():
    ex = ("tf.train.Example(features=tf.train.Features(feature={'a': tf.train.Feature(float_list=tf.train.FloatList("
          "value=[1.5, 2.0])), 'b': tf.train.Feature(int64_list=tf.train.Int64List(value=[3])), 'c': tf.train.Feature("
          "bytes_list=tf.train.BytesList(value=[b'x', b'yz']))})).SerializeToString()")
    seq = ("tf.train.SequenceExample(context=tf.train.Features(feature={'n': tf.train.Feature(int64_list="
           "tf.train.Int64List(value=[7]))}), feature_lists=tf.train.FeatureLists(feature_list={'t': "
           "tf.train.FeatureList(feature=[tf.train.Feature(float_list=tf.train.FloatList(value=[1.0, 2.0])), "
           "tf.train.Feature(float_list=tf.train.FloatList(value=[3.0, 4.0]))])})).SerializeToString()")
    tmp = "__import__('tempfile').mkdtemp()"
    cases = {
        "parse_single_example": f"(lambda f: [f['a'], f['b'], tf.sparse_tensor_to_dense(f['c'], default_value='')])("
                                f"tf.parse_single_example({ex}, {{'a': tf.FixedLenFeature([2], tf.float32), "
                                f"'b': tf.FixedLenFeature([], tf.int64), 'c': tf.VarLenFeature(tf.string)}}))",
        "parse_example": f"tf.parse_example([{ex}, {ex}], {{'a': tf.FixedLenFeature([2], tf.float32)}})['a']",
        "parse_example_default": f"tf.parse_example([{ex}], {{'z': tf.FixedLenFeature([1], tf.float32, "
                                 f"default_value=[-1.0])}})['z']",
        "sparse_feature": f"tf.sparse_tensor_to_dense(tf.parse_single_example({ex}, {{'s': tf.SparseFeature("
                          f"index_key='i', value_key='a', dtype=tf.float32, size=5)}})['s'])",
        "parse_single_sequence_example": f"(lambda r: [r[0]['n'], r[1]['t']])(tf.parse_single_sequence_example({seq}, "
                                         f"context_features={{'n': tf.FixedLenFeature([], tf.int64)}}, "
                                         f"sequence_features={{'t': tf.FixedLenSequenceFeature([2], tf.float32)}}))",
        "decode_json_example": "tf.parse_single_example(tf.decode_json_example(tf.constant(["
                               "'{\"features\": {\"feature\": {\"a\": {\"floatList\": {\"value\": [1.5]}}}}}']))[0], "
                               "{'a': tf.FixedLenFeature([1], tf.float32)})['a']",
        "decode_compressed_none": "tf.decode_compressed(tf.constant(['abc', 'de']))",
        "decode_compressed_zlib": "tf.decode_compressed(tf.constant([__import__('zlib').compress(b'hello world')]), "
                                  "compression_type='ZLIB')",
        "serialize_many_sparse": "tf.sparse_tensor_to_dense(tf.deserialize_many_sparse(tf.serialize_many_sparse("
                                 "tf.SparseTensor([[0, 1], [1, 0], [1, 2]], [1.0, 2.0, 3.0], [2, 3])), tf.float32))",
        "serialize_sparse_shape": f"tf.serialize_sparse({SP}).shape",
        "read_write_file": f"(lambda d: (tf.write_file(d + '/f.txt', 'hello'), tf.read_file(d + '/f.txt'))[1])({tmp})",
        "matching_files": f"(lambda d: (tf.write_file(d + '/a.txt', 'x'), tf.write_file(d + '/b.txt', 'y'), "
                          f"tf.size(tf.matching_files(d + '/*.txt')))[2])({tmp})",
    }
    for k, src in cases.items():
        yield f"v1/io/{k}", "examples and files", src


def _misc_top_level():
    cases = {
        "DType": "[isinstance(tf.float32, tf.DType), tf.as_dtype('int64') == tf.int64]",
        "DeviceSpec": "(lambda d: [d.job, d.device_type, d.device_index])(tf.DeviceSpec.from_string('/job:w/device:CPU:1'))",
        "GraphOptions": "tf.GraphOptions(optimizer_options=tf.OptimizerOptions(opt_level=tf.OptimizerOptions.L0))"
                        ".optimizer_options.opt_level",
        "QueueBase": "isinstance(tf.FIFOQueue(3, tf.float32), tf.QueueBase)",
        "VariableScope": "isinstance(tf.get_variable_scope(), tf.VariableScope)",
        "case": "tf.case([(tf.constant(False), lambda: tf.constant(1)), (tf.constant(True), lambda: tf.constant(2))], "
                "default=lambda: tf.constant(3))",
        "case_default": "tf.case([(tf.constant(False), lambda: tf.constant(1))], default=lambda: tf.constant(3))",
        "config": "tf.config.list_physical_devices('CPU')[0].device_type",
        "double_half": "[tf.constant([1.0], tf.double), tf.constant([1.5], dtype=tf.half)]",
        "uint32": "tf.constant([1, 4000000000], tf.uint32)",
        "resource_variant": "[tf.resource.name, tf.variant.name]",
        "newaxis": "tf.constant([1, 2])[tf.newaxis, :, tf.newaxis]",
        "nest": "tf.nest.flatten({'a': 1, 'b': [2, 3]})",
        "print": "tf.print(tf.constant([1, 2]), output_stream=__import__('sys').stdout)",
        "random_crop": "tf.random_crop(tf.reshape(tf.range(24), [4, 6]), [2, 3], seed=1).shape",
        "reverse_sequence": "tf.reverse_sequence(tf.reshape(tf.range(12), [3, 4]), [1, 2, 4], seq_axis=1, batch_axis=0)",
        "reverse_sequence_dims": "tf.reverse_sequence(tf.reshape(tf.range(12), [4, 3]), [2, 3, 1], seq_dim=0, batch_dim=1)",
        "get_local_variable": "graph_run(lambda: (lambda v: [v, tf.constant([x.name for x in tf.local_variables()]), "
                              "tf.constant(len(tf.trainable_variables()))])(tf.get_local_variable('lv', [2], "
                              "initializer=tf.ones_initializer())))",
        "orthogonal_initializer": "(lambda w: tf.matmul(w, w, transpose_a=True))(tf.orthogonal_initializer(seed=3)([4, 4]))",
        "orthogonal_initializer_gain": "(lambda w: tf.matmul(w, w, transpose_b=True))(tf.orthogonal_initializer("
                                       "gain=2.0, seed=3)([2, 5]))",
        "glorot_normal_initializer": "(lambda w: (w.shape, w.dtype.name))(tf.glorot_normal_initializer(seed=1)([3, 4]))",
        "min_max_variable_partitioner": "graph_run(lambda: tf.constant([v.name for v in tf.get_variable('p', [4, 2], "
                                        "partitioner=tf.min_max_variable_partitioner(max_partitions=2, "
                                        "min_slice_size=8))]))",
        "variables_initializer": "graph_run(lambda: (lambda v: ([tf.variables_initializer([v])], v.read_value()))"
                                 "(tf.Variable(3.0)), initialize=False)",
        "enable_switches": "[tf.enable_control_flow_v2(), tf.enable_resource_variables()]",
    }
    for k, src in cases.items():
        yield f"v1/misc/{k}", "misc top level", src
    inits = {"zeros": "tf.initializers.zeros()([2])", "ones": "tf.initializers.ones()([2], tf.int32)",
             "constant": "tf.initializers.constant([1.0, 2.0])([2])",
             "constant_scalar": "tf.initializers.constant(0.5)([2, 2])",
             "identity": "tf.initializers.identity()([2, 3])", "identity_gain": "tf.initializers.identity(gain=3.0)([2, 2])",
             "random_uniform": "tf.initializers.random_uniform(-1.0, 1.0, seed=1)([3]).shape",
             "random_normal": "tf.initializers.random_normal(0.0, 2.0, seed=1)([3]).shape",
             "truncated_normal": "tf.initializers.truncated_normal(stddev=0.1, seed=1)([2, 2]).dtype.name",
             "variance_scaling": "tf.initializers.variance_scaling(2.0, 'fan_in', 'uniform', seed=1)([3, 3]).shape",
             "glorot_uniform": "tf.initializers.glorot_uniform(seed=1)([2, 5]).shape",
             "glorot_normal": "tf.initializers.glorot_normal(seed=1)([2, 5]).shape",
             "he_normal": "tf.initializers.he_normal(seed=1)([2, 5]).shape",
             "he_uniform": "tf.initializers.he_uniform(seed=1)([2, 5]).shape",
             "lecun_normal": "tf.initializers.lecun_normal(seed=1)([2, 5]).shape",
             "lecun_uniform": "tf.initializers.lecun_uniform(seed=1)([2, 5]).shape",
             "orthogonal": "(lambda w: tf.matmul(w, w, transpose_a=True))(tf.initializers.orthogonal(seed=2)([3, 3]))",
             "global_variables": "graph_run(lambda: (lambda v: ([tf.initializers.global_variables()], v.read_value()))("
                                 "tf.Variable(2.0)), initialize=False)",
             "local_variables": "graph_run(lambda: (lambda v: ([tf.initializers.local_variables()], v.read_value()))("
                                "tf.get_local_variable('l', [], initializer=tf.ones_initializer())), initialize=False)",
             "variables": "graph_run(lambda: (lambda v: ([tf.initializers.variables([v])], v.read_value()))"
                          "(tf.Variable(4)), initialize=False)",
             "uniform_unit_scaling": "(lambda w: (w.shape, bool(tf.reduce_max(tf.abs(w)) <= 3.0 ** 0.5 * 1.5 / 3.0 ** 0.5)))"
                                     "(tf.uniform_unit_scaling_initializer(1.5, seed=1)([3, 4]))",
             "uniform_unit_scaling_ns": "tf.initializers.uniform_unit_scaling(seed=2)([2, 2]).shape"}
    for k, src in inits.items():
        yield f"v1/initializers/{k}", "initializers", src


def _nn_more():
    x4 = "tf.reshape(tf.range(32.0) / 8.0, [1, 4, 4, 2])"
    x5 = "tf.reshape(tf.range(54.0) / 10.0, [1, 3, 3, 3, 2])"
    cases = {
        "atrous_conv2d": f"tf.nn.atrous_conv2d({x4}, tf.ones([2, 2, 2, 1]) * 0.5, 2, 'SAME')",
        "avg_pool3d": f"tf.nn.avg_pool3d({x5}, [1, 2, 2, 2, 1], [1, 1, 1, 1, 1], 'VALID')",
        "max_pool3d": f"tf.nn.max_pool3d({x5}, [1, 2, 2, 2, 1], [1, 1, 1, 1, 1], 'SAME')",
        "avg_pool_v2": f"tf.nn.avg_pool_v2({x4}, 2, 2, 'VALID')",
        "max_pool_v2": f"tf.nn.max_pool_v2({x4}, [2, 2], [1, 1], 'SAME')",
        "conv1d_transpose": "tf.nn.conv1d_transpose(tf.reshape(tf.range(6.0), [1, 3, 2]), tf.ones([2, 3, 2]), [1, 6, 3], 2)",
        "conv3d_transpose": f"tf.nn.conv3d_transpose({x5}, tf.ones([2, 2, 2, 1, 2]), [1, 6, 6, 6, 1], [1, 2, 2, 2, 1])",
        "conv3d_transpose_value": f"tf.nn.conv3d_transpose(value={x5}, filter=tf.ones([1, 1, 1, 1, 2]), "
                                  f"output_shape=[1, 3, 3, 3, 1], strides=[1, 1, 1, 1, 1], padding='VALID')",
        "silu": f"tf.nn.silu({F})", "swish": f"tf.nn.swish({F})", "softsign": f"tf.nn.softsign({F})",
        "tanh": f"tf.nn.tanh({F})",
        "xw_plus_b": f"tf.nn.xw_plus_b({F}, tf.ones([3, 2]), tf.constant([0.5, -0.5]))",
        "zero_fraction": "tf.nn.zero_fraction(tf.constant([[0.0, 1.0], [0.0, 0.0]]))",
    }
    for k, src in cases.items():
        yield f"v1/nn/{k}", "tf.nn", src


def _nn_extra():
    x4 = "tf.reshape(tf.sin(tf.range(48.0)), [2, 3, 4, 2])"
    img = "tf.reshape(tf.cos(tf.range(50.0)), [1, 5, 5, 2])"
    sp_ids = "tf.SparseTensor([[0, 0], [0, 1], [2, 0], [2, 1], [2, 2]], tf.constant([1, 3, 0, 0, 2], tf.int64), [4, 3])"
    sp_w = "tf.SparseTensor([[0, 0], [0, 1], [2, 0], [2, 1], [2, 2]], [2.0, 0.5, 1.0, 1.0, 3.0], [4, 3])"
    emb = "tf.reshape(tf.range(12.0), [4, 3])"
    cases = {
        "crelu": f"tf.nn.crelu({F})", "crelu_axis0": f"tf.nn.crelu({F}, axis=0)",
        "relu_layer": f"tf.nn.relu_layer({F}, tf.constant([[1.0, -1.0], [0.5, 2.0], [-1.0, 1.0]]), [0.1, -0.2])",
        "lrn": f"tf.nn.lrn({x4})", "lrn_args": f"tf.nn.local_response_normalization({x4}, 1, 2.0, 0.5, 0.75)",
        "lrn_grad": "grad(lambda x: tf.nn.lrn(x, 1, 1.0, 1.0, 0.5), np.linspace(-1.0, 1.0, 8).reshape([1, 1, 2, 4]))",
        "sufficient_statistics": f"tf.nn.sufficient_statistics({x4}, [0, 1, 2])[:3]",
        "sufficient_statistics_shift": f"tf.nn.sufficient_statistics({x4}, [1], shift=0.5, keep_dims=True)",
        "normalize_moments": f"tf.nn.normalize_moments(*tf.nn.sufficient_statistics({x4}, [0, 1, 2]))",
        "normalize_moments_shift": f"tf.nn.normalize_moments(*tf.nn.sufficient_statistics({x4}, [0], shift=0.25))",
        "weighted_moments": f"tf.nn.weighted_moments({F}, [1], tf.constant([[1.0, 2.0, 0.0], [0.5, 0.5, 1.0]]))",
        "weighted_moments_keep": f"tf.nn.weighted_moments({F}, [0], tf.constant([[2.0], [0.0]]), keep_dims=True)",
        "batch_norm_global": f"tf.nn.batch_norm_with_global_normalization({F}, tf.constant([0.5, 0.0, 1.0]), "
                             f"tf.constant([1.0, 2.0, 0.5]), tf.constant([0.1, 0.2, 0.3]), tf.constant([2.0, 1.0, 3.0]), "
                             f"0.001, True)",
        "batch_norm_global_noscale": f"tf.nn.batch_norm_with_global_normalization(t={F}, m=tf.constant([0.5, 0.0, 1.0]), "
                                     f"v=tf.constant([1.0, 2.0, 0.5]), beta=tf.constant([0.1, 0.2, 0.3]), "
                                     f"gamma=tf.constant([2.0, 1.0, 3.0]), variance_epsilon=0.001, "
                                     f"scale_after_normalization=False)",
        "scale_regularization_loss": "tf.nn.scale_regularization_loss(tf.constant([1.5, 2.0]))",
        "compute_average_loss": "tf.nn.compute_average_loss(tf.constant([1.0, 2.0, 3.0, 6.0]))",
        "compute_average_loss_weighted": "tf.nn.compute_average_loss(tf.constant([1.0, 2.0]), sample_weight=[0.5, 2.0], "
                                         "global_batch_size=8)",
        "approx_max_k": f"tf.nn.approx_max_k({F}, 2)",
        "embedding_lookup_sparse": f"tf.nn.embedding_lookup_sparse({emb}, {sp_ids}, None)",
        "embedding_lookup_sparse_sum": f"tf.nn.embedding_lookup_sparse({emb}, {sp_ids}, {sp_w}, combiner='sum')",
        "embedding_lookup_sparse_sqrtn": f"tf.nn.embedding_lookup_sparse({emb}, {sp_ids}, {sp_w}, combiner='sqrtn')",
        "embedding_lookup_sparse_mean": f"tf.nn.embedding_lookup_sparse({emb}, {sp_ids}, {sp_w}, combiner='mean')",
        "safe_embedding_lookup_sparse": f"tf.nn.safe_embedding_lookup_sparse({emb}, tf.SparseTensor([[0, 0], [0, 1], "
                                        f"[2, 0]], tf.constant([1, -1, 2], tf.int64), [4, 2]))",
        "safe_embedding_lookup_sparse_default": f"tf.nn.safe_embedding_lookup_sparse({emb}, {sp_ids}, {sp_w}, "
                                                f"combiner='sum', default_id=3)",
        "safe_embedding_lookup_sparse_3d": f"tf.nn.safe_embedding_lookup_sparse({emb}, tf.SparseTensor([[0, 1, 0], "
                                           f"[1, 0, 1]], tf.constant([2, 1], tf.int64), [2, 2, 2]))",
        "depthwise_conv2d_native": f"tf.nn.depthwise_conv2d_native({img}, tf.reshape(tf.range(12.0) / 10.0, [2, 3, 2, 1]), "
                                   f"[1, 1, 1, 1], 'SAME')",
        "depthwise_native_backprop_input": f"tf.nn.depthwise_conv2d_native_backprop_input([1, 5, 5, 2], "
                                           f"tf.reshape(tf.range(16.0) / 10.0, [2, 2, 2, 2]), tf.ones([1, 2, 2, 4]), "
                                           f"[1, 2, 2, 1], 'VALID')",
        "depthwise_native_backprop_filter": f"tf.nn.depthwise_conv2d_native_backprop_filter({img}, [3, 3, 2, 1], "
                                            f"tf.ones([1, 5, 5, 2]), [1, 1, 1, 1], 'SAME')",
        "depthwise_backprop_input": f"tf.nn.depthwise_conv2d_backprop_input([1, 5, 5, 2], tf.ones([3, 3, 2, 1]), "
                                    f"tf.ones([1, 3, 3, 2]), [1, 1, 1, 1], 'VALID')",
        "depthwise_backprop_filter": f"tf.nn.depthwise_conv2d_backprop_filter({img}, [2, 2, 2, 1], tf.ones([1, 4, 4, 2]), "
                                     f"[1, 1, 1, 1], 'VALID')",
        "conv3d_backprop_filter": "tf.nn.conv3d_backprop_filter(tf.reshape(tf.range(54.0) / 10.0, [1, 3, 3, 3, 2]), "
                                  "[2, 2, 2, 2, 1], tf.ones([1, 2, 2, 2, 1]), [1, 1, 1, 1, 1], 'VALID')",
        "conv3d_backprop_filter_v2": "tf.nn.conv3d_backprop_filter_v2(tf.reshape(tf.range(54.0) / 10.0, [1, 3, 3, 3, 2]), "
                                     "[1, 1, 1, 2, 3], tf.ones([1, 2, 2, 2, 3]), [1, 2, 2, 2, 1], 'SAME')",
        "atrous_conv2d_transpose": f"tf.nn.atrous_conv2d_transpose({img}, tf.ones([2, 2, 1, 2]), [1, 5, 5, 1], 2, 'SAME')",
        "space_to_depth": "tf.nn.space_to_depth(tf.reshape(tf.range(16), [1, 2, 2, 4]), 2)",
        "depth_to_space": "tf.nn.depth_to_space(tf.reshape(tf.range(16), [1, 2, 2, 4]), 2)",
        "space_to_batch": "tf.nn.space_to_batch(tf.reshape(tf.range(16), [1, 4, 4, 1]), [[0, 0], [0, 0]], 2)",
    }
    for k, src in cases.items():
        yield f"v1/nn/{k}", "tf.nn", src


def _train():
    def step_graph(expr):
        return f"graph_run(lambda: (lambda step: {expr})(tf.Variable(STEP, dtype=tf.int64)))"
    decays = {
        "cosine_decay_restarts": "tf.train.cosine_decay_restarts(0.1, step, 10)",
        "cosine_decay_restarts_tmul1": "tf.train.cosine_decay_restarts(0.1, step, 10, t_mul=1.0, m_mul=0.5, alpha=0.1)",
        "cosine_decay_restarts_mmul": "tf.train.cosine_decay_restarts(0.5, step, 4, t_mul=3.0, m_mul=0.8)",
        "linear_cosine_decay": "tf.train.linear_cosine_decay(0.1, step, 20)",
        "linear_cosine_decay_args": "tf.train.linear_cosine_decay(0.1, step, 20, num_periods=2.0, alpha=0.1, beta=0.01)",
        "noisy_linear_cosine_decay_shape": "tf.shape(tf.train.noisy_linear_cosine_decay(0.1, step, 20))",
        "natural_exp_decay": "tf.train.natural_exp_decay(0.1, step, 5, 0.5)",
        "natural_exp_decay_staircase": "tf.train.natural_exp_decay(0.1, step, 5, 0.5, staircase=True)",
        "piecewise_constant_decay": "tf.train.piecewise_constant_decay(step, [5, 15], [1.0, 0.5, 0.1])",
        "exponential_decay": "tf.train.exponential_decay(0.1, step, 5, 0.5, staircase=True)",
    }
    for k, expr in decays.items():
        for st in (0, 7, 25):
            yield f"v1/train/{k}/{st}", "train", step_graph(expr).replace("STEP", str(st))
    yield "v1/train/decay_eager_callable", "train", \
        "tf.train.cosine_decay_restarts(0.1, tf.Variable(12, dtype=tf.int64), 10)()"
    opts = {"proximal_gd": "tf.train.ProximalGradientDescentOptimizer(0.1)",
            "proximal_gd_l1l2": "tf.train.ProximalGradientDescentOptimizer(0.1, l1_regularization_strength=0.05, "
                                "l2_regularization_strength=0.1)",
            "proximal_adagrad": "tf.train.ProximalAdagradOptimizer(0.3)",
            "proximal_adagrad_l1l2": "tf.train.ProximalAdagradOptimizer(0.3, initial_accumulator_value=0.5, "
                                     "l1_regularization_strength=0.02, l2_regularization_strength=0.05)"}
    for k, opt in opts.items():
        yield f"v1/train/{k}", "train", f"minimize_steps(lambda: {opt}, 4)"
    cases = {
        "assert_global_step_ok": "tf.train.assert_global_step(tf.Variable(1, dtype=tf.int64))",
        "assert_global_step_float": "tf.train.assert_global_step(tf.Variable(1.0))",
        "assert_global_step_vector": "tf.train.assert_global_step(tf.Variable([1, 2]))",
        "create_global_step": "graph_run(lambda: (lambda s: [s, tf.constant(s.name)])(tf.train.create_global_step()))",
        "create_global_step_twice": "graph_run(lambda: [tf.train.create_global_step(), tf.train.create_global_step()])",
    }
    for k, src in cases.items():
        yield f"v1/train/{k}", "train", src


def _namespaces():
    sp_split = "(lambda s: [s.indices, s.values, s.dense_shape])"
    cases = {
        "compat_as_bytes": "[tf.compat.as_bytes('h\\u00e9'), tf.compat.as_bytes(b'x'), tf.compat.as_text(b'abc'), "
                           "tf.compat.as_str(b'q'), tf.compat.as_str_any(3), tf.compat.path_to_str('p')]",
        "compat_as_bytes_bad": "tf.compat.as_bytes(3)",
        "compat_types": "[isinstance(3, tf.compat.integral_types), isinstance(2.5, tf.compat.real_types), "
                        "isinstance(b'', tf.compat.bytes_or_text_types), isinstance(1j, tf.compat.complex_types)]",
        "compat_forward_compatible": "[tf.compat.forward_compatible(2019, 1, 1)]",
        "compat_dimension": "[tf.compat.dimension_value(tf.TensorShape([4, None])[0]), "
                            "tf.compat.dimension_at_index(tf.TensorShape([4, None]), 1).value]",
        "Dimension": "[(tf.Dimension(3) * 2).value, (tf.Dimension(3) + tf.Dimension(None)).value, "
                     "tf.Dimension(3).is_compatible_with(4), tf.Dimension(None).merge_with(5).value, "
                     "tf.Dimension(6) // 4 == tf.Dimension(1), str(tf.Dimension(None)), int(tf.Dimension(7))]",
        "Dimension_negative": "tf.Dimension(-1)",
        "Dimension_merge_incompatible": "tf.Dimension(2).merge_with(3)",
        "dimension_at_index": "tf.dimension_at_index(tf.TensorShape([2, 3]), 1).value",
        "logging_levels": "[tf.logging.DEBUG, tf.logging.INFO, tf.logging.WARN, tf.logging.ERROR, tf.logging.FATAL]",
        "logging_verbosity": "(tf.logging.set_verbosity(tf.logging.ERROR), tf.logging.get_verbosity(), "
                             "tf.logging.set_verbosity(tf.logging.WARN), tf.logging.info('x %d', 1), "
                             "tf.logging.log_first_n(tf.logging.INFO, "
                             "'z', 1), tf.logging.log_if(tf.logging.INFO, 'w', False))[1]",
        "python_io_roundtrip": "(lambda p: (lambda w: (w.write(b'abc'), w.write(b'de'), w.close()))"
                               "(tf.python_io.TFRecordWriter(p)) and None or list(tf.python_io.tf_record_iterator(p)))"
                               "(__import__('tempfile').mkdtemp() + '/r.tfrecord')",
        "python_io_gzip": "(lambda p: (lambda w: (w.write(b'abc'), w.close()))(tf.python_io.TFRecordWriter(p, "
                          "tf.python_io.TFRecordOptions(tf.python_io.TFRecordCompressionType.GZIP))) and None or "
                          "list(tf.python_io.tf_record_iterator(p, tf.python_io.TFRecordOptions("
                          "tf.python_io.TFRecordCompressionType.GZIP))))(__import__('tempfile').mkdtemp() + '/g.tfrecord')",
        "queue_fifo": "graph_run(lambda: (lambda q: (lambda e: tf.tuple([q.dequeue()], control_inputs=[e]))("
                      "q.enqueue_many([[1.0, 2.0]])))(tf.queue.FIFOQueue(3, tf.float32)))",
        "priority_queue": "graph_run(lambda: (lambda q: (lambda e: tf.tuple(q.dequeue_many(4), control_inputs=[e]))("
                          "q.enqueue_many([[3, 1, 2, 0], [[3.0], [1.0], [2.0], [0.5]], [b'c', b'a', b'b', b'z']])))("
                          "tf.queue.PriorityQueue(5, [tf.float32, tf.string], shapes=[[1], []])))",
        "priority_queue_top": "graph_run(lambda: (lambda q: (lambda e: tf.tuple(q.dequeue(), control_inputs=[e]))("
                              "q.enqueue_many([tf.constant([7, 2, 5], tf.int64), [1, 2, 3]])))(tf.PriorityQueue(3, tf.int32, "
                              "shapes=[[]])))",
        "queue_classes": "[c.__name__ for c in (tf.queue.PaddingFIFOQueue, tf.queue.RandomShuffleQueue, tf.queue.QueueBase)]",
        "spectral_rfft": "tf.spectral.rfft(tf.constant([1.0, 2.0, 0.0, -1.0]))",
        "spectral_dct": "tf.spectral.dct(tf.constant([1.0, 2.0, 0.0, -1.0]))",
        "spectral_irfft2d": "tf.spectral.irfft2d(tf.spectral.rfft2d(tf.reshape(tf.range(8.0), [2, 4])))",
        "manip_roll": "tf.manip.roll(tf.constant([1, 2, 3, 4]), 1, 0)",
        "manip_tile": "tf.manip.tile(tf.constant([[1, 2]]), [2, 1])",
        "manip_misc": "[tf.manip.reverse(tf.constant([1, 2, 3]), [0]), tf.manip.gather_nd(tf.constant([[1, 2], [3, 4]]), "
                      "[[1, 0]]), tf.manip.scatter_nd([[1]], [5], [3]), tf.manip.reshape(tf.range(4), [2, 2])]",
        "debugging_checks": "[tf.debugging.is_finite(tf.constant([1.0, np.inf])), tf.debugging.is_nan(tf.constant([np.nan])),"
                            " tf.debugging.assert_equal(1, 1), tf.debugging.is_numeric_tensor(tf.constant(1))]",
        "debugging_fails": "tf.debugging.assert_less(tf.constant(3), 2)",
        "debugging_all_finite": "tf.debugging.assert_all_finite(tf.constant([1.0, np.nan]), 'bad')",
        "dtypes": "[tf.dtypes.as_dtype('float64').name, tf.dtypes.cast(tf.constant([1.7]), tf.dtypes.int32), "
                  "tf.dtypes.double.name, tf.dtypes.saturate_cast(tf.constant([300]), tf.dtypes.uint8)]",
        "flags_define": "(lambda f: (f.DEFINE_integer('tw_case_flag', 7, 'help'), f.FLAGS(['prog', '--tw_case_flag=9']), "
                        "f.FLAGS.tw_case_flag, f.FLAGS.unparse_flags(), delattr(f.FLAGS, 'tw_case_flag'))[2])(tf.flags)",
        "app_flags": "tf.app.flags is tf.flags",
        "summary_protos": "[tf.Summary(value=[tf.Summary.Value(tag='a', simple_value=1.5)]).value[0].simple_value, "
                          "tf.Event(step=3).step, tf.SessionLog(status=tf.SessionLog.STOP).status, "
                          "tf.HistogramProto(min=1.0).min, tf.SummaryMetadata(display_name='d').display_name, "
                          "tf.LogMessage(message='m').message]",
        "variable_enums": "[tf.VariableSynchronization.ON_READ.value, tf.VariableAggregation.MEAN.value, "
                          "tf.VariableAggregation.ONLY_FIRST_TOWER.value]",
        "variable_with_enums": "tf.Variable(2.0, synchronization=tf.VariableSynchronization.AUTO, "
                               "aggregation=tf.VariableAggregation.NONE).read_value()",
        "is_symbolic_tensor": "[tf.is_symbolic_tensor(tf.constant(1.0)), graph_run(lambda: tf.constant("
                              "tf.is_symbolic_tensor(tf.constant(1.0))))]",
        "grad_pass_through": "grad(lambda x: tf.grad_pass_through(tf.round)(x) * 3.0, [1.3, 2.7])",
        "grad_pass_through_value": "tf.grad_pass_through(tf.round)(tf.constant([1.3, 2.7]))",
        "recompute_grad": "grad(lambda x: tf.recompute_grad(lambda a: tf.sin(a) * a)(x), [1.3, -0.4])",
        "vectorized_map": "tf.vectorized_map(lambda r: tf.reduce_sum(r * r), tf.constant([[1.0, 2.0], [3.0, 4.0]]))",
        "vectorized_map_nested": "tf.vectorized_map(lambda r: (r, r * 2.0), tf.constant([1.0, 2.0]))",
        "approx_top_k": f"tf.approx_top_k({F}, 2)",
        "sparse_merge": "tf.sparse_tensor_to_dense(tf.sparse_merge(tf.SparseTensor([[0, 0], [0, 1], [1, 0]], "
                        "tf.constant([3, 1, 2], tf.int64), [2, 2]), tf.SparseTensor([[0, 0], [0, 1], [1, 0]], "
                        "[0.5, 1.5, -1.0], [2, 2]), 5))",
        "bitcast_float_to_bytes": "tf.bitcast(tf.constant([1.0, -2.5]), tf.uint8)",
        "bitcast_bytes_to_int": "tf.bitcast(tf.constant([[1, 0, 0, 0], [0, 1, 0, 0]], tf.uint8), tf.int32)",
        "bitcast_same_size": "tf.bitcast(tf.constant([1.0]), tf.int32)",
        "bitcast_bad_shape": "tf.bitcast(tf.constant([1, 2, 3], tf.uint8), tf.int32)",
        "string_split": f"{sp_split}(tf.string_split(['a b  c', 'de', '']))",
        "string_split_keep_empty": f"{sp_split}(tf.string_split(['a,b,,c'], delimiter=',', skip_empty=False))",
        "string_split_chars": f"{sp_split}(tf.string_split(['a-b_c'], sep='-_'))",
        "string_split_empty_delim": f"{sp_split}(tf.string_split(['abc'], delimiter=''))",
        "string_split_ragged": "tf.string_split(['a b', 'c'], result_type='RaggedTensor').to_tensor()",
        "variable_axis_size_partitioner": "[tf.variable_axis_size_partitioner(16)(tf.TensorShape([10, 2]), tf.float32), "
                                          "tf.variable_axis_size_partitioner(64, axis=1, max_shards=3)(tf.TensorShape([4, 20]), "
                                          "tf.float64), tf.variable_axis_size_partitioner(40)(tf.TensorShape([3, 2]), tf.string)]",
        "variable_axis_size_partitioner_bad": "tf.variable_axis_size_partitioner(0)",
        "edit_distance": "tf.edit_distance(tf.SparseTensor([[0, 0, 0], [1, 0, 0], [1, 0, 1]], ['a', 'b', 'c'], [2, 1, 2]), "
                         "tf.SparseTensor([[0, 0, 0], [0, 0, 1], [1, 0, 0]], ['a', 'x', 'b'], [2, 1, 2]))",
        "edit_distance_raw": "tf.edit_distance(tf.SparseTensor([[0, 0], [0, 1], [0, 2], [1, 0]], [1, 2, 3, 4], [3, 3]), "
                             "tf.SparseTensor([[0, 0], [0, 1], [2, 0]], [2, 3, 9], [3, 2]), normalize=False)",
        "edit_distance_empty_truth": "tf.edit_distance(tf.SparseTensor([[0, 0], [1, 0]], [1, 2], [3, 1]), "
                                     "tf.SparseTensor([[1, 0]], [2], [3, 1]))",
        "sets_intersection": "(lambda s: [s.indices, s.values, s.dense_shape])(tf.sets.set_intersection("
                             "[[1, 2, 3], [4, 5, 6]], [[2, 3, 9], [7, 7, 4]]))",
        "sets_union_sparse": "(lambda s: [s.indices, s.values, s.dense_shape])(tf.sets.set_union([[3, 1], [2, 2]], "
                             "tf.SparseTensor([[0, 0], [1, 1]], [5, 1], [2, 3])))",
        "sets_difference": "(lambda s: [s.indices, s.values, s.dense_shape])(tf.sets.set_difference([[1, 2, 3], "
                           "[4, 5, 6]], [[2, 2, 2], [4, 0, 0]]))",
        "sets_difference_bminusa": "(lambda s: [s.indices, s.values, s.dense_shape])(tf.sets.set_difference([[1, 2]], "
                                   "[[2, 7]], aminusb=False))",
        "sets_size": "tf.sets.set_size(tf.SparseTensor([[0, 0], [0, 1], [0, 2], [2, 0]], [3, 3, 1, 4], [3, 3]))",
        "sets_strings": "(lambda s: [s.values, s.dense_shape])(tf.sets.intersection([['a', 'b']], [['b', 'c']]))",
        "sets_dtype_mismatch": "tf.sets.union([[1]], [[1.0]])",
        "partitioned_variable": "graph_run(lambda: tf.constant([v.name for v in tf.get_variable('pv', [6, 2], "
                                "partitioner=tf.variable_axis_size_partitioner(24))]))",
    }
    for k, src in cases.items():
        yield f"v1/ns/{k}", "namespaces", src


def _image():
    img = "tf.reshape(tf.sin(tf.range(60.0)) * 10.0 + 20.0, [1, 5, 6, 2])"   # away from 0: float32 rounding
    u8 = "tf.cast(tf.reshape(tf.range(48) * 5, [4, 4, 3]), tf.uint8)"
    cases = {}
    for fn in ("resize_bilinear", "resize_nearest_neighbor", "resize_bicubic"):
        for size in ("[3, 4]", "[8, 9]", "[5, 6]", "[1, 1]"):
            tag = size.strip("[]").replace(", ", "x")
            cases[f"{fn}/{tag}"] = f"tf.image.{fn}({img}, {size})"
            cases[f"{fn}/{tag}/align"] = f"tf.image.{fn}({img}, {size}, align_corners=True)"
            cases[f"{fn}/{tag}/half"] = f"tf.image.{fn}({img}, {size}, half_pixel_centers=True)"
    for size in ("[3, 4]", "[2, 3]", "[8, 9]"):
        tag = size.strip("[]").replace(", ", "x")
        cases[f"resize_area/{tag}"] = f"tf.image.resize_area({img}, {size})"
    cases.update({
        "resize_images_default": f"tf.image.resize_images({img}, [3, 4])",
        "resize_images_methods": f"[tf.image.resize_images({img}, [7, 3], method=m) for m in (0, 1, 2, 3)]",
        "resize_images_enum": f"tf.image.resize_images({img}, [3, 3], tf.image.ResizeMethod.NEAREST_NEIGHBOR, True)",
        "resize_images_uint8": f"tf.image.resize_images({u8}, [2, 3])",
        "resize_images_uint8_nearest": f"tf.image.resize_images({u8}, [2, 3], method=1)",
        "resize_images_same_size": f"tf.image.resize_images({u8}, [4, 4])",
        "resize_images_aspect": f"tf.image.resize_images({img}, [4, 4], preserve_aspect_ratio=True)",
        "resize_images_grad": "grad(lambda x: tf.image.resize_images(x, [3, 5]) * tf.reshape(tf.range(15.0), [1, 3, 5, 1]), "
                              "np.linspace(0.0, 1.0, 16).reshape([1, 4, 4, 1]))",
        "resize_bilinear_grad": "grad(lambda x: tf.image.resize_bilinear(x, [6, 7], align_corners=True) * "
                                "tf.reshape(tf.range(42.0), [1, 6, 7, 1]), np.ones([1, 4, 4, 1]))",
        "resize_image_with_pad": f"tf.image.resize_image_with_pad({img}, 4, 4)",
        "resize_image_with_pad_nearest": f"tf.image.resize_image_with_pad({u8}, 6, 3, method=1)",
        "resize_image_with_crop_or_pad": f"tf.image.resize_image_with_crop_or_pad({u8}, 3, 6)",
        "crop_and_resize_box_ind": f"tf.image.crop_and_resize({img}, [[0.0, 0.1, 0.8, 0.9]], box_ind=[0], crop_size=[3, 3])",
        "extract_image_patches": f"tf.extract_image_patches({img}, ksizes=[1, 2, 2, 1], strides=[1, 2, 2, 1], "
                                 f"rates=[1, 1, 1, 1], padding='VALID')",
        "image_extract_image_patches": f"tf.image.extract_image_patches({img}, [1, 3, 3, 1], [1, 1, 2, 1], [1, 1, 1, 1], "
                                       f"'SAME')",
        "transpose_image": f"tf.image.transpose_image({u8})",
        "draw_bounding_boxes": "tf.image.draw_bounding_boxes(tf.zeros([1, 6, 6, 3]), [[[0.2, 0.2, 0.8, 0.8], "
                               "[0.0, 0.0, 0.5, 0.5], [0.5, 0.1, 1.0, 0.6]]])",
        "draw_bounding_boxes_gray": "tf.image.draw_bounding_boxes(tf.zeros([1, 4, 4, 1]), [[[0.0, 0.0, 1.0, 1.0]]])",
        "draw_bounding_boxes_colors": "tf.image.draw_bounding_boxes(tf.zeros([1, 4, 4, 3]), [[[0.0, 0.0, 1.0, 1.0]]], "
                                      "colors=[[0.2, 0.4, 0.6, 1.0]])",
        "sample_distorted_bounding_box": "(lambda r: [t.shape for t in r])(tf.image.sample_distorted_bounding_box("
                                         "[10, 10, 3], tf.constant([[[0.1, 0.1, 0.9, 0.9]]]), seed=1, seed2=2))",
        "tf2_names_still_there": f"[tf.image.flip_left_right({u8}), tf.image.rgb_to_grayscale({u8})]",
    })
    for k, src in cases.items():
        yield f"v1/image/{k}", "tf.image", src


def _readers():
    text = "{'a.txt': b'h1\\nx,1\\ny,2\\n', 'b.txt': b'h2\\r\\nz,3'}"
    binary = "{'d.bin': bytes(range(20)), 'e.bin': bytes(range(100, 112))}"
    recs = "{'r1.tfrecord': [b'abc', b'', b'defg'], 'r2.tfrecord': [b'xyz']}"
    cases = {
        "text_line": f"reader_run(lambda: tf.TextLineReader(), {text}, 7)",
        "text_line_skip_header": f"reader_run(lambda: tf.TextLineReader(skip_header_lines=1), {text}, 5)",
        "text_line_up_to": f"reader_run(lambda: tf.TextLineReader(skip_header_lines=1), {text}, 3, up_to=2)",
        "whole_file": f"reader_run(lambda: tf.WholeFileReader(), {text}, 3)",
        "identity": f"reader_run(lambda: tf.IdentityReader(), {text}, 3)",
        "fixed_length": f"reader_run(lambda: tf.FixedLengthRecordReader(4, header_bytes=2, footer_bytes=1), {binary}, 9)",
        "fixed_length_hop": f"reader_run(lambda: tf.FixedLengthRecordReader(4, hop_bytes=3), {binary}, 12)",
        "tfrecord": f"reader_run(lambda: tf.TFRecordReader(), {recs}, 5, records=True)",
        "tfrecord_gzip": f"reader_run(lambda: tf.TFRecordReader(options=tf.python_io.TFRecordOptions("
                         f"tf.python_io.TFRecordCompressionType.GZIP)), {recs}, 5, records=True, "
                         f"options=tf.python_io.TFRecordOptions(tf.python_io.TFRecordCompressionType.GZIP))",
        "tfrecord_up_to": f"reader_run(lambda: tf.TFRecordReader(), {recs}, 3, records=True, up_to=3)",
    }
    for k, src in cases.items():
        yield f"v1/readers/{k}", "readers", src


def _losses_metrics_layers():
    labels = "tf.constant([[2, 5], [1, 4]], tf.int64)"
    pred_idx = "tf.constant([[2, 3, 5], [0, 1, 2]], tf.int64)"
    scores = "tf.constant([[0.1, 0.2, 0.9, 0.3, 0.0, 0.5], [0.7, 0.6, 0.1, 0.0, 0.2, 0.3]])"
    cases = {
        "losses/compute_weighted_loss": "tf.losses.compute_weighted_loss(tf.constant([1.0, 2.0, 3.0]), [1.0, 0.0, 2.0])",
        "losses/compute_weighted_loss_sum": "tf.losses.compute_weighted_loss(tf.constant([[1.0, 2.0], [3.0, 4.0]]), "
                                            "[[0.5], [2.0]], reduction=tf.losses.Reduction.SUM)",
        "losses/compute_weighted_loss_none": "tf.losses.compute_weighted_loss(tf.constant([1.0, 2.0]), 3.0, "
                                             "reduction=tf.losses.Reduction.NONE)",
        "losses/get_regularization_losses": "graph_run(lambda: (tf.get_variable('w', initializer=tf.constant([1.0, -2.0]), "
                                            "regularizer=lambda w: tf.reduce_sum(tf.abs(w))), "
                                            "tf.losses.get_regularization_losses())[1])",
        "metrics/recall_at_top_k": f"metric_run(lambda: tf.metrics.recall_at_top_k({labels}, {pred_idx}))",
        "metrics/recall_at_top_k_class": f"metric_run(lambda: tf.metrics.recall_at_top_k({labels}, {pred_idx}, k=2, "
                                         f"class_id=2), 2)",
        "metrics/sparse_precision_at_k": f"metric_run(lambda: tf.metrics.sparse_precision_at_k({labels}, {scores}, 2))",
        "metrics/sparse_precision_at_k_class": f"metric_run(lambda: tf.metrics.sparse_precision_at_k({labels}, {scores}, 3, "
                                               f"class_id=5))",
        "metrics/sparse_average_precision_at_k": f"metric_run(lambda: tf.metrics.sparse_average_precision_at_k({labels}, "
                                                 f"{scores}, 3), 2)",
        "layers/separable_conv1d": "graph_run(lambda: tf.layers.separable_conv1d(tf.reshape(tf.range(12.0), [1, 6, 2]), 3, 2, "
                                   "strides=2, depthwise_initializer=tf.constant_initializer(0.5), "
                                   "pointwise_initializer=tf.constant_initializer(-0.25), "
                                   "bias_initializer=tf.constant_initializer(0.1)))",
        "layers/SeparableConv1D": "graph_run(lambda: (lambda l: [l(tf.ones([2, 5, 3])), tf.constant([v.name for v in "
                                  "l.weights])])(tf.layers.SeparableConv1D(4, 3, padding='same', depth_multiplier=2, "
                                  "depthwise_initializer=tf.ones_initializer(), pointwise_initializer=tf.ones_initializer())))",
    }
    for k, src in cases.items():
        yield f"v1/{k}", "losses, metrics, layers", src


def all_cases():
    out = []
    for family in (_top_level_math, _top_level_linalg, _top_level_scatter, _sparse, _strings, _random, _asserts,
                   _state_ops, _functional, _array_ops, _framework, _examples_and_files, _misc_top_level, _nn_more,
                   _nn_extra, _train, _namespaces, _image, _readers, _losses_metrics_layers):
        out.extend(family())
    ids = [c[0] for c in out]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return out
