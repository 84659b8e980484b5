"""The differential cases: generated families (every op over every dtype, every Python scalar
kind against every tensor dtype, reductions, gradients) plus the edge cases of issue 19.

Each case is ``(case_id, family, source)``; the source is one expression over ``tf``, ``np`` and
``grad`` (see ``runner.py``). Ids are stable: the recorded TensorFlow results are keyed by them.
"""
import itertools

# Literal inputs per dtype: exactly representable, with edge values where the dtype has them.
VALUES = {
    "float16": "[-1.5, 0.0, 2.25, 7.0]", "bfloat16": "[-1.5, 0.0, 2.25, 7.0]",
    "float32": "[-1.5, 0.0, 2.25, 7.0]", "float64": "[-1.5, 0.0, 2.25, 7.0]",
    "int8": "[-3, 0, 2, 7]", "int16": "[-3, 0, 2, 7]", "int32": "[-3, 0, 2, 7]", "int64": "[-3, 0, 2, 7]",
    "uint8": "[0, 1, 2, 200]", "bool": "[True, False, True, False]",
}
SPECIAL = "[nan, inf, -inf, -0.0]"


def t(dtype, values=None):
    return f"tf.constant({values or VALUES[dtype]}, dtype=tf.{dtype})"


def _promotion():
    """A tensor of each dtype against Python scalars of each kind, through each binary operator."""
    scalars = {"int": "2", "float": "2.0", "frac": "2.5", "bool": "True", "bigint": "300"}
    ops = {"add": "{x} + {s}", "radd": "{s} + {x}", "mul": "{x} * {s}", "div": "{x} / {s}",
           "floordiv": "{x} // {s}", "less": "{x} < {s}", "eq": "tf.equal({x}, {s})", "max": "tf.maximum({x}, {s})"}
    for dtype, (sk, s), (ok, o) in itertools.product(("int32", "int64", "float32", "float16", "uint8", "bool"),
                                                      scalars.items(), ops.items()):
        yield f"promote/{dtype}/{ok}/{sk}", "promotion", o.format(x=t(dtype), s=s)


def _mixed():
    """Two tensors of different dtypes: TF never converts."""
    pairs = [("int32", "float32"), ("float32", "float64"), ("int32", "int64"), ("float16", "float32"),
             ("bool", "int32")]
    ops = {"add": "tf.add({a}, {b})", "matmul": "tf.matmul(tf.reshape({a}, [2, 2]), tf.reshape({b}, [2, 2]))",
           "where": "tf.where([True, False, True, False], {a}, {b})", "add_n": "tf.add_n([{a}, {b}])",
           "concat": "tf.concat([{a}, {b}], 0)", "stack": "tf.stack([{a}, {b}])"}
    for (da, db), (ok, o) in itertools.product(pairs, ops.items()):
        yield f"mixed/{da}-{db}/{ok}", "mixed dtypes", o.format(a=t(da), b=t(db))


UNARY = ["abs", "negative", "sign", "square", "sqrt", "exp", "math.log", "sigmoid", "tanh", "floor", "round",
         "math.ceil", "math.reciprocal", "math.rsqrt", "nn.relu", "nn.softplus", "logical_not", "math.erf",
         "math.is_nan", "math.rint", "math.log1p", "math.expm1", "sin", "cos", "math.atan"]


def _unary():
    for op, dtype in itertools.product(UNARY, ("float32", "float64", "float16", "int32", "int64", "uint8", "bool")):
        yield f"unary/{op}/{dtype}", "unary dtypes", f"tf.{op}({t(dtype)})"
    for op in UNARY:
        yield f"unary/{op}/special", "unary edge values", f"tf.{op}({t('float32', SPECIAL)})"


def _binary_values():
    ops = ["add", "subtract", "multiply", "divide", "math.floordiv", "math.floormod", "pow", "maximum", "minimum",
           "math.squared_difference", "math.divide_no_nan", "truncatediv", "truncatemod",
           "math.xdivy", "math.xlogy", "math.xlog1py", "math.atan2", "math.multiply_no_nan"]
    pairs = {"float32": ("[-7.5, 0.0, 3.0, 7.0]", "[2.0, 0.0, -2.0, 0.5]"),
             "int32": ("[-7, 0, 3, 7]", "[2, 1, -2, 3]")}
    for op, (dtype, (a, b)) in itertools.product(ops, pairs.items()):
        yield f"binary/{op}/{dtype}", "binary values", f"tf.{op}({t(dtype, a)}, {t(dtype, b)})"


def _bitwise():
    a, b = "[12, -7, 0, 255]", "[10, 3, 5, 1]"
    for op, dtype in itertools.product(("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"),
                                       ("int32", "int64", "uint8", "float32")):
        va = a.replace("-7", "7") if dtype == "uint8" else a
        yield f"bitwise/{op}/{dtype}", "bitwise", f"tf.bitwise.{op}({t(dtype, va)}, {t(dtype, b)})"
    for dtype in ("int32", "int8", "uint8", "bool"):
        yield f"bitwise/invert_op/{dtype}", "bitwise", f"~{t(dtype)}"
        yield f"bitwise/and_op/{dtype}", "bitwise", f"{t(dtype)} & {t(dtype)}"
    yield "bitwise/invert/int16", "bitwise", f"tf.bitwise.invert({t('int16')})"


def _reductions():
    ops = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_any", "reduce_all",
           "argmax", "argmin", "math.reduce_euclidean_norm", "math.reduce_logsumexp", "math.count_nonzero"]
    for op, dtype in itertools.product(ops, ("float32", "int32", "bool")):
        yield f"reduce/{op}/{dtype}", "reductions", f"tf.{op}(tf.reshape({t(dtype)}, [2, 2]), 1)"
    for op in ops:
        yield f"reduce/{op}/empty", "reductions", f"tf.{op}(tf.zeros([0, 3]), 0)"
        yield f"reduce/{op}/nan", "reductions", f"tf.{op}({t('float32', '[1.0, nan, 3.0]')}, 0)"


def _names():
    """TF names that must exist, each with a small call."""
    f = t("float32", "[[4.0, 1.0], [1.0, 3.0]]")
    v = t("float32", "[1.0, 2.0, 3.0, 4.0]")
    ids = t("int32", "[0, 0, 1, 1]")
    calls = {
        "math.cumulative_logsumexp": f"tf.math.cumulative_logsumexp({v})",
        "math.log_sigmoid": f"tf.math.log_sigmoid({v})",
        "math.bincount": f"tf.math.bincount({t('int32', '[1, 1, 3, 0]')})",
        "math.segment_sum": f"tf.math.segment_sum({v}, {ids})",
        "math.segment_mean": f"tf.math.segment_mean({v}, {ids})",
        "math.segment_max": f"tf.math.segment_max({v}, {ids})",
        "math.segment_min": f"tf.math.segment_min({v}, {ids})",
        "math.segment_prod": f"tf.math.segment_prod({v}, {ids})",
        "math.unsorted_segment_sum": f"tf.math.unsorted_segment_sum({v}, {ids}, 3)",
        "math.unsorted_segment_max": f"tf.math.unsorted_segment_max({v}, {ids}, 3)",
        "math.unsorted_segment_min": f"tf.math.unsorted_segment_min({v}, {ids}, 3)",
        "math.unsorted_segment_mean": f"tf.math.unsorted_segment_mean({v}, {ids}, 3)",
        "math.unsorted_segment_prod": f"tf.math.unsorted_segment_prod({v}, {ids}, 3)",
        "math.unsorted_segment_sqrt_n": f"tf.math.unsorted_segment_sqrt_n({v}, {ids}, 3)",
        "tensor_scatter_nd_max": f"tf.tensor_scatter_nd_max({v}, [[0], [2]], [9.0, -9.0])",
        "tensor_scatter_nd_min": f"tf.tensor_scatter_nd_min({v}, [[0], [2]], [9.0, -9.0])",
        "strided_slice": f"tf.strided_slice({v}, [1], [4], [2])",
        "unique": f"tf.unique({t('int32', '[3, 1, 3, 2, 1]')})",
        "unique_with_counts": f"tf.unique_with_counts({t('int32', '[3, 1, 3, 2, 1]')})",
        "math.divide_no_nan": f"tf.math.divide_no_nan({v}, {v})",
        "math.l2_normalize": f"tf.math.l2_normalize({v})",
        "math.truediv": f"tf.math.truediv({v}, {v})",
        "math.multiply_no_nan": f"tf.math.multiply_no_nan({v}, {v})",
        "math.sqrt": f"tf.math.sqrt({v})",
        "math.top_k": f"tf.math.top_k({v}, 2)",
        "math.argmax": f"tf.math.argmax({v})",
        "math.cumsum": f"tf.math.cumsum({v})",
        "math.cumprod": f"tf.math.cumprod({v})",
        "math.softplus": f"tf.math.softplus({v})",
        "math.sigmoid": f"tf.math.sigmoid({v})",
        "math.tanh": f"tf.math.tanh({v})",
        "math.log_softmax": f"tf.math.log_softmax({v})",
        "math.softmax": f"tf.math.softmax({v})",
        "math.abs": f"tf.math.abs({v})",
        "math.negative": f"tf.math.negative({v})",
        "math.reduce_variance": f"tf.math.reduce_variance({v})",
        "math.reduce_std": f"tf.math.reduce_std({v})",
        "math.logical_xor": "tf.math.logical_xor([True, False], [True, True])",
        "math.not_equal": f"tf.math.not_equal({v}, 2.0)",
        "math.greater_equal": f"tf.math.greater_equal({v}, 2.0)",
        "math.add_n": f"tf.math.add_n([{v}, {v}])",
        "math.square": f"tf.math.square({v})",
        "math.exp": f"tf.math.exp({v})",
        "math.sign": f"tf.math.sign({v})",
        "math.floor": f"tf.math.floor({v})",
        "math.round": f"tf.math.round({v})",
        "math.pow": f"tf.math.pow({v}, 2.0)",
        "math.maximum": f"tf.math.maximum({v}, 2.0)",
        "math.equal": f"tf.math.equal({v}, 2.0)",
        "math.sin": f"tf.math.sin({v})",
        "math.tan": f"tf.math.tan({v})",
        "math.asin": f"tf.math.asin({t('float32', '[0.5, -0.25]')})",
        "math.acos": f"tf.math.acos({t('float32', '[0.5, -0.25]')})",
        "math.sinh": f"tf.math.sinh({v})",
        "math.cosh": f"tf.math.cosh({v})",
        "math.asinh": f"tf.math.asinh({v})",
        "math.atanh": f"tf.math.atanh({t('float32', '[0.5, -0.25]')})",
        "math.acosh": f"tf.math.acosh({v})",
        "math.lgamma": f"tf.math.lgamma({v})",
        "math.digamma": f"tf.math.digamma({v})",
        "math.erfc": f"tf.math.erfc({v})",
        "math.log_softmax_axis": f"tf.nn.log_softmax({f}, axis=0)",
        "linalg.cholesky": f"tf.linalg.cholesky({f})",
        "linalg.solve": f"tf.linalg.solve({f}, {t('float32', '[[1.0], [2.0]]')})",
        "linalg.qr": f"tf.linalg.qr({f})",
        "linalg.svd": f"tf.linalg.svd({f}, compute_uv=False)",
        "linalg.eigh": f"tf.linalg.eigh({f})[0]",
        "linalg.slogdet": f"tf.linalg.slogdet({f})",
        "linalg.triangular_solve": f"tf.linalg.triangular_solve({f}, {t('float32', '[[1.0], [2.0]]')})",
        "linalg.band_part": f"tf.linalg.band_part({f}, 0, -1)",
        "linalg.lstsq": f"tf.linalg.lstsq({f}, {t('float32', '[[1.0], [2.0]]')})",
        "linalg.pinv": f"tf.linalg.pinv({f})",
        "linalg.inv": f"tf.linalg.inv({f})",
        "linalg.det": f"tf.linalg.det({f})",
        "linalg.trace": f"tf.linalg.trace({f})",
        "linalg.diag_part": f"tf.linalg.diag_part({f})",
        "linalg.matmul": f"tf.linalg.matmul({f}, {f})",
        "linalg.norm": f"tf.linalg.norm({v})",
        "linalg.l2_normalize": f"tf.linalg.l2_normalize({v})",
        "linalg.matrix_transpose": f"tf.linalg.matrix_transpose({f})",
        "linalg.einsum": f"tf.linalg.einsum('ij,jk->ik', {f}, {f})",
        "linalg.tensordot": f"tf.linalg.tensordot({f}, {f}, 1)",
        "linalg.eye": "tf.linalg.eye(2)",
        "linalg.adjoint": f"tf.linalg.adjoint({f})",
        "linalg.logdet": f"tf.linalg.logdet({f})",
        "linalg.cross": f"tf.linalg.cross({t('float32', '[1.0, 0.0, 0.0]')}, {t('float32', '[0.0, 1.0, 0.0]')})",
        "linalg.matvec": f"tf.linalg.matvec({f}, {t('float32', '[1.0, 2.0]')})",
        "linalg.global_norm": f"tf.linalg.global_norm([{f}, {v}])",
        "linalg.normalize": f"tf.linalg.normalize({v})",
        "linalg.tensor_diag": f"tf.linalg.tensor_diag({v})",
        "linalg.tensor_diag_part": f"tf.linalg.tensor_diag_part({f})",
        "linalg.matrix_rank": f"tf.linalg.matrix_rank({f})",
        "linalg.matrix_rank_deficient": "tf.linalg.matrix_rank(tf.ones([3, 3]))",
        "linalg.eigvalsh": f"tf.linalg.eigvalsh({f})",
        "linalg.cholesky_solve": f"tf.linalg.cholesky_solve(tf.linalg.cholesky({f}), {t('float32', '[[1.0], [2.0]]')})",
        "math.accumulate_n": f"tf.math.accumulate_n([{v}, {v}])",
        "math.reciprocal_no_nan": f"tf.math.reciprocal_no_nan({t('float32', '[0.0, 2.0]')})",
        "math.scalar_mul": f"tf.math.scalar_mul(2.0, {v})",
        "math.polyval": f"tf.math.polyval([1.0, 0.0, -1.0], {v})",
        "math.lbeta": f"tf.math.lbeta({f})",
        "math.zero_fraction": f"tf.math.zero_fraction({t('int32', '[0, 1, 0, 3]')})",
        "math.in_top_k": f"tf.math.in_top_k({t('int32', '[1, 0]')}, {f}, 1)",
        "math.invert_permutation": f"tf.math.invert_permutation({t('int32', '[2, 0, 1]')})",
        "math.is_non_decreasing": f"tf.math.is_non_decreasing({v})",
        "math.is_strictly_increasing": f"tf.math.is_strictly_increasing({t('int32', '[1, 2, 2]')})",
        "math.confusion_matrix": "tf.math.confusion_matrix([0, 1, 1, 2], [0, 0, 1, 2])",
        "math.real": f"tf.math.real({v})", "math.imag": f"tf.math.imag({v})", "math.conj": f"tf.math.conj({v})",
        "math.angle": f"tf.math.angle({t('float32', '[-1.0, 2.0]')})",
        "math.erfinv": f"tf.math.erfinv({t('float32', '[0.5, -0.25]')})",
        "math.ndtri": f"tf.math.ndtri({t('float32', '[0.9, 0.25]')})",
        "math.bessel_i0": f"tf.math.bessel_i0({v})", "math.bessel_i0e": f"tf.math.bessel_i0e({v})",
        "math.bessel_i1": f"tf.math.bessel_i1({v})", "math.bessel_i1e": f"tf.math.bessel_i1e({v})",
        "math.polygamma": f"tf.math.polygamma({t('float32', '[0.0, 1.0, 2.0, 1.0]')}, {v})",
        "math.zeta": f"tf.math.zeta({t('float32', '[2.0, 3.0, 2.0, 4.0]')}, {v})",
        "math.igamma": f"tf.math.igamma({t('float32', '[2.0, 3.0, 0.5, 1.0]')}, {v})",
        "math.igammac": f"tf.math.igammac({t('float32', '[2.0, 3.0, 0.5, 1.0]')}, {v})",
        "math.softsign": f"tf.math.softsign({v})",
        "clip_by_norm": f"tf.clip_by_norm({f}, 2.0)",
        "clip_by_norm_axes": f"tf.clip_by_norm({f}, 2.0, axes=[1])",
        "clip_by_global_norm": f"tf.clip_by_global_norm([{f}, {v}], 2.0)",
        "searchsorted": f"tf.searchsorted({v}, {t('float32', '[0.0, 2.0, 9.0]')})",
        "searchsorted_right": f"tf.searchsorted({v}, {t('float32', '[0.0, 2.0, 9.0]')}, side='right')",
        "histogram_fixed_width": f"tf.histogram_fixed_width({t('float32', '[-1.0, 0.0, 1.5, 2.0, 5.0]')}, [0.0, 5.0], nbins=5)",
        "broadcast_static_shape": "tf.broadcast_static_shape(tf.TensorShape([2, 1]), tf.TensorShape([3]))",
        "broadcast_dynamic_shape": "tf.broadcast_dynamic_shape([2, 1], [3])",
        "ensure_shape_bad": f"tf.ensure_shape({f}, [3, 2])",
        "identity_n": f"tf.identity_n([{f}, {v}])",
        "parallel_stack": f"tf.parallel_stack([{v}, {v}])",
        "realdiv": f"tf.realdiv({v}, {v})",
        "realdiv_int": f"tf.realdiv({ids}, {ids})",
        "scalar_mul": f"tf.scalar_mul(2.0, {v})",
        "shape_n": f"tf.shape_n([{f}, {v}])",
        "is_tensor": f"tf.is_tensor({v})",
    }
    for name, src in calls.items():
        yield f"name/{name}", "names", src


def _gradients():
    g = {
        "sqrt_where": "grad(lambda x: tf.where(x > 0, tf.sqrt(x), 0.0), [4.0, 0.0, -1.0])",
        "rsqrt_where": "grad(lambda x: tf.where(x > 0, tf.math.rsqrt(x), 0.0), [4.0, 0.0, -1.0])",
        "reciprocal_where": "grad(lambda x: tf.where(x != 0, tf.math.reciprocal(x), 0.0), [2.0, 0.0])",
        "div_where": "grad(lambda x, y: tf.where(y != 0, x / y, 0.0), [1.0, 2.0], [2.0, 0.0])",
        "log_where": "grad(lambda x: tf.where(x > 0, tf.math.log(x), 0.0), [2.0, 0.0])",
        "sqrt_zero": "grad(tf.sqrt, [0.0])",
        "cumprod_zero": "grad(tf.math.cumprod, [2.0, 0.0, 3.0, 4.0])",
        "cumprod": "grad(tf.math.cumprod, [2.0, 0.5, 3.0, 4.0])",
        "cumprod_exclusive": "grad(lambda x: tf.math.cumprod(x, exclusive=True, reverse=True), [2.0, 0.5, 3.0])",
        "floor": "grad(tf.floor, [1.5])", "round": "grad(tf.round, [1.5])", "ceil": "grad(tf.math.ceil, [1.5])",
        "rint": "grad(tf.math.rint, [1.5])", "sign": "grad(tf.sign, [1.5, 0.0])",
        "relu_at_0": "grad(tf.nn.relu, [-1.0, 0.0, 1.0])", "abs_at_0": "grad(tf.abs, [-1.0, 0.0, 1.0])",
        "relu6": "grad(tf.nn.relu6, [-1.0, 0.0, 3.0, 6.0, 7.0])",
        "maximum_tie": "grad(tf.maximum, [1.0, 2.0], [1.0, 1.0])",
        "minimum_tie": "grad(tf.minimum, [1.0, 2.0], [1.0, 1.0])",
        "reduce_max_tie": "grad(tf.reduce_max, [1.0, 3.0, 3.0])",
        "reduce_min_tie": "grad(tf.reduce_min, [1.0, 1.0, 3.0])",
        "reduce_prod_zero": "grad(tf.reduce_prod, [2.0, 0.0, 3.0])",
        "reduce_prod_two_zeros": "grad(tf.reduce_prod, [2.0, 0.0, 0.0])",
        "pow_zero_base": "grad(tf.pow, [0.0, 2.0], [2.0, 2.0])",
        "pow_zero_exp": "grad(tf.pow, [0.0, 2.0], [0.0, 0.0])",
        "sigmoid": "grad(tf.sigmoid, [-1.0, 0.0, 2.0])", "tanh": "grad(tf.tanh, [-1.0, 0.0, 2.0])",
        "softplus": "grad(tf.nn.softplus, [-1.0, 0.0, 2.0])",
        "softmax": "grad(lambda x: tf.nn.softmax(x) * [1.0, 2.0, 3.0], [1.0, 2.0, 3.0])",
        "log_softmax": "grad(lambda x: tf.nn.log_softmax(x) * [1.0, 2.0, 3.0], [1.0, 2.0, 3.0])",
        "matmul": "grad(lambda a, b: tf.matmul(a, b), [[1.0, 2.0]], [[3.0], [4.0]])",
        "sort": "grad(lambda x: tf.sort(x) * [1.0, 2.0, 3.0], [3.0, 1.0, 2.0])",
        "clip": "grad(lambda x: tf.clip_by_value(x, 0.0, 1.0), [-1.0, 0.0, 0.5, 1.0, 2.0])",
        "square": "grad(tf.square, [-1.0, 3.0])", "exp": "grad(tf.exp, [0.0, 1.0])",
        "log1p": "grad(tf.math.log1p, [0.0, 1.0])", "atan": "grad(tf.math.atan, [0.0, 1.0])",
        "erf": "grad(tf.math.erf, [0.0, 1.0])", "elu": "grad(tf.nn.elu, [-1.0, 0.0, 1.0])",
        "leaky_relu": "grad(tf.nn.leaky_relu, [-1.0, 0.0, 1.0])",
        "div_no_nan": "grad(tf.math.divide_no_nan, [1.0, 2.0], [0.0, 4.0])",
        "floormod": "grad(tf.math.floormod, [5.0, -5.0], [3.0, 3.0])",
        "squared_difference": "grad(tf.math.squared_difference, [1.0, 2.0], [3.0, 5.0])",
        "reduce_mean": "grad(tf.reduce_mean, [1.0, 2.0, 3.0])",
        "logsumexp": "grad(tf.math.reduce_logsumexp, [1.0, 2.0, 3.0])",
        "l2_normalize": "grad(tf.math.l2_normalize, [3.0, 4.0])",
        "norm_zero": "grad(tf.norm, [0.0, 0.0])",
        "xlogy": "grad(tf.math.xlogy, [0.0, 2.0], [0.0, 3.0])",
        "xdivy": "grad(tf.math.xdivy, [0.0, 2.0], [0.0, 3.0])",
        "atan2": "grad(tf.math.atan2, [1.0, 2.0], [3.0, -1.0])",
        "log_sigmoid": "grad(tf.math.log_sigmoid, [-1.0, 0.0, 2.0])",
        "erfinv": "grad(tf.math.erfinv, [0.5, -0.25])", "ndtri": "grad(tf.math.ndtri, [0.9, 0.25])",
        "bessel_i0": "grad(tf.math.bessel_i0, [0.0, 1.5])", "bessel_i1": "grad(tf.math.bessel_i1, [0.0, 1.5])",
        "bessel_i0e": "grad(tf.math.bessel_i0e, [-1.0, 1.5])", "bessel_i1e": "grad(tf.math.bessel_i1e, [-1.0, 1.5])",
        "igamma": "grad(lambda x: tf.math.igamma(2.0, x), [0.5, 1.5])",
        "zeta": "grad(lambda q: tf.math.zeta(2.0, q), [0.5, 1.5])",
        "polygamma": "grad(lambda x: tf.math.polygamma(1.0, x), [0.5, 1.5])",
        "lbeta": "grad(tf.math.lbeta, [[1.0, 2.0]])",
        "asin": "grad(tf.math.asin, [0.5])", "acosh": "grad(tf.math.acosh, [1.5])", "lgamma": "grad(tf.math.lgamma, [0.5, 3.0])",
        "digamma": "grad(tf.math.digamma, [0.5, 3.0])", "erfc": "grad(tf.math.erfc, [0.5])",
        "segment_max": "grad(lambda x: tf.math.segment_max(x, [0, 0, 1]), [1.0, 1.0, 2.0])",
        "unsorted_segment_prod": "grad(lambda x: tf.math.unsorted_segment_prod(x, [0, 0, 0, 1], 2), [2.0, 0.0, 3.0, 5.0])",
        "tensor_scatter_nd_max": "grad(lambda t, u: tf.tensor_scatter_nd_max(t, [[0], [2]], u), [1.0, 2.0, 3.0], [5.0, 1.0])",
        "qr": "grad(lambda a: tf.linalg.qr(a)[1], [[3.0, 1.0], [1.0, 2.0]], dtype='float64')",
        "svd_s": "grad(lambda a: tf.linalg.svd(a, compute_uv=False), [[3.0, 1.0], [1.0, 2.0]], dtype='float64')",
        "eigh_e": "grad(lambda a: tf.linalg.eigh(a)[0] * [1.0, 2.0], [[3.0, 1.0], [1.0, 2.0]], dtype='float64')",
        "triangular_solve": "grad(lambda a: tf.linalg.triangular_solve(a, [[1.0], [2.0]]), [[3.0, 0.0], [1.0, 2.0]])",
        "band_part": "grad(lambda a: tf.linalg.band_part(a, 0, -1) * [[1.0, 2.0], [3.0, 4.0]], [[3.0, 1.0], [1.0, 2.0]])",
        "pinv": "grad(tf.linalg.pinv, [[3.0, 1.0], [1.0, 2.0]], dtype='float64')",
        "lstsq": "grad(lambda a: tf.linalg.lstsq(a, tf.constant([[1.0], [2.0], [0.5]], tf.float64)), "
                 "[[3.0, 1.0], [1.0, 2.0], [0.0, 1.0]], dtype='float64')",
        "cumulative_logsumexp": "grad(tf.math.cumulative_logsumexp, [1.0, 2.0, 3.0])",
        "reduce_euclidean_norm": "grad(tf.math.reduce_euclidean_norm, [3.0, 4.0])",
        "cholesky": "grad(tf.linalg.cholesky, [[4.0, 1.0], [1.0, 3.0]], dtype='float64')",
        "solve": "grad(tf.linalg.solve, [[4.0, 1.0], [1.0, 3.0]], [[1.0], [2.0]], dtype='float64')",
        "det": "grad(tf.linalg.det, [[4.0, 1.0], [1.0, 3.0]], dtype='float64')",
        "inv": "grad(tf.linalg.inv, [[4.0, 1.0], [1.0, 3.0]], dtype='float64')",
        "slogdet": "grad(lambda a: tf.linalg.slogdet(a)[1], [[4.0, 1.0], [1.0, 3.0]], dtype='float64')",
        "cumsum": "grad(lambda x: tf.cumsum(x) * [1.0, 2.0, 3.0], [1.0, 2.0, 3.0])",
        "gather": "grad(lambda x: tf.gather(x, [0, 0, 2]), [1.0, 2.0, 3.0])",
        "segment_sum": "grad(lambda x: tf.math.unsorted_segment_sum(x, [0, 0, 1], 2) * [1.0, 2.0], [1.0, 2.0, 3.0])",
        "where_nan_branch": "grad(lambda x: tf.where(x > 0, x, tf.math.log(x)), [1.0, -1.0])",
    }
    for name, src in g.items():
        yield f"grad/{name}", "gradients", src


def _edges():
    """The individual differences of issue 19 and related rules."""
    e = {
        "uint8_plus_300": f"{t('uint8')} + 300",
        "constant_2_63": "tf.constant(2**63)",
        "constant_2_31": "tf.constant(2**31)",
        "constant_neg_2_63": "tf.constant(-2**63)",
        "constant_float_int32": "tf.constant(1.0, dtype=tf.int32)",
        "constant_int_float": "tf.constant(1, dtype=tf.float32)",
        "constant_empty_int": "tf.constant([], dtype=tf.int32)",
        "matmul_1d": "tf.matmul(tf.ones([2]), tf.ones([2]))",
        "matmul_transpose_adjoint": "tf.matmul(tf.ones([2, 2]), tf.ones([2, 2]), transpose_a=True, adjoint_a=True)",
        "matmul_int8": "tf.matmul(tf.ones([2, 2], tf.int8), tf.ones([2, 2], tf.int8))",
        "matmul_batch_broadcast": "tf.matmul(tf.ones([3, 1, 2, 4]), tf.ones([5, 4, 2]))",
        "logical_and_int": "tf.logical_and(tf.constant([1, 0]), tf.constant([1, 1]))",
        "reshape_empty_minus1": "tf.reshape(tf.zeros([0, 3]), [0, -1])",
        "reshape_empty_minus1_b": "tf.reshape(tf.zeros([0, 3]), [-1, 3])",
        "stack_empty": "tf.stack([])",
        "eq_unbroadcastable": "tf.ones([2]) == tf.ones([3])",
        "ne_unbroadcastable": "tf.ones([2]) != tf.ones([3])",
        "equal_fn_unbroadcastable": "tf.equal(tf.ones([2]), tf.ones([3]))",
        "eq_none": "tf.ones([2]) == None",
        "avg_pool_big_window": "tf.nn.avg_pool2d(tf.ones([1, 2, 2, 1]), 3, 1, 'VALID')",
        "moments_int": "tf.nn.moments(tf.constant([1, 2, 4]), [0])",
        "argmax_nan": f"tf.argmax({t('float32', '[1.0, nan, 3.0]')})",
        "argmin_nan": f"tf.argmin({t('float32', '[1.0, nan, 0.0]')})",
        "sort_desc_nan": f"tf.sort({t('float32', '[1.0, nan, 3.0]')}, direction='DESCENDING')",
        "sort_asc_nan": f"tf.sort({t('float32', '[1.0, nan, 3.0]')})",
        "log_softmax_inf": f"tf.nn.log_softmax({t('float32', '[1.0, inf, 3.0]')})",
        "softmax_inf": f"tf.nn.softmax({t('float32', '[1.0, inf, 3.0]')})",
        "cumsum_float16": "tf.cumsum(tf.fill([3000], tf.constant(0.1, tf.float16)))[-1]",
        "clip_inverted": f"tf.clip_by_value({t('float32')}, 2.0, 1.0)",
        "depthwise_dilated_strided": "tf.nn.depthwise_conv2d(tf.ones([1, 9, 9, 1]), tf.ones([3, 3, 1, 1]), "
                                     "[1, 2, 2, 1], 'VALID', dilations=[2, 2]).shape",
        "depthwise_dilated_strided_same": "tf.nn.depthwise_conv2d(tf.ones([1, 10, 10, 1]), tf.ones([3, 3, 1, 1]), "
                                          "[1, 2, 2, 1], 'SAME', dilations=[2, 2]).shape",
        "depthwise_dilated_strided_valid10": "tf.nn.depthwise_conv2d(tf.ones([1, 10, 10, 1]), tf.ones([3, 3, 1, 1]), "
                                             "[1, 2, 2, 1], 'VALID', dilations=[2, 2]).shape",
        "depthwise_dilated_strided_values": "tf.nn.depthwise_conv2d(tf.reshape(tf.range(49.0), [1, 7, 7, 1]), "
                                            "tf.ones([2, 2, 1, 1]), [1, 2, 2, 1], 'VALID', dilations=[2, 2])",
        "zeros_negative": "tf.zeros((-1, 2))",
        "ones_float_dims": "tf.ones((2.5, 2))",
        "fill_huge": "tf.fill([2**62, 4], 1.0)",
        "reduce_sum_float_axis": "tf.reduce_sum(tf.ones([2, 2]), axis=1.5)",
        "matmul_string": "tf.matmul('abc', tf.ones([2, 2]))",
        "zeros_huge": "tf.zeros((2**40, 2**40))",
        "int_div_zero": "tf.constant([1, 2]) // tf.constant([0, 1])",
        "int_mod_zero": "tf.math.floormod(tf.constant([1, 2]), tf.constant([0, 1]))",
        "float_div_zero": "tf.constant([1.0, -1.0, 0.0]) / 0.0",
        "int_truediv": "tf.constant([1, 2]) / tf.constant([2, 4])",
        "int8_truediv": "tf.constant([1, 2], tf.int8) / tf.constant([2, 4], tf.int8)",
        "int_pow_negative": "tf.pow(tf.constant([2]), tf.constant([-1]))",
        "cast_float_int": f"tf.cast({t('float32', '[-1.7, 1.7, 2.5]')}, tf.int32)",
        "cast_nan_int": f"tf.cast({t('float32', SPECIAL)}, tf.int32)",
        "cast_bool": f"tf.cast({t('float32', '[0.0, 0.5, -1.0]')}, tf.bool)",
        "round_half_even": f"tf.round({t('float32', '[0.5, 1.5, 2.5, -0.5]')})",
        "floordiv_negative": "tf.constant([-7, 7]) // tf.constant([2, -2])",
        "floormod_negative": "tf.constant([-7, 7]) % tf.constant([2, -2])",
        "floormod_float": f"{t('float32', '[-7.5, 7.5]')} % 2.0",
        "top_k_ties": f"tf.math.top_k({t('float32', '[1.0, 3.0, 3.0, 2.0]')}, 2)",
        "one_hot_negative": "tf.one_hot([-1, 1], 3)",
        "gather_out_of_range": "tf.gather([1, 2, 3], [5])",
        "range_float": "tf.range(2.5)",
        "range_negative_delta": "tf.range(5, 1, -2)",
        "linspace": "tf.linspace(0.0, 1.0, 5)",
        "concat_scalar": "tf.concat([tf.constant(1.0), tf.constant(2.0)], 0)",
        "squeeze_non1": "tf.squeeze(tf.ones([2, 3]), 0)",
        "expand_dims_neg": "tf.expand_dims(tf.ones([2, 3]), -1)",
        "transpose_default": "tf.transpose(tf.ones([2, 3, 4])).shape",
        "tile_zero": "tf.tile(tf.ones([2, 3]), [0, 2])",
        "pad_reflect": "tf.pad(tf.constant([[1, 2], [3, 4]]), [[1, 1], [1, 1]], 'REFLECT')",
        "where_one_arg": "tf.where([[True, False], [False, True]])",
        "where_broadcast": "tf.where([True, False], 1.0, tf.zeros([2, 2]))",
        "reduce_mean_int": "tf.reduce_mean(tf.constant([1, 2]))",
        "reduce_sum_bool": "tf.reduce_sum(tf.constant([True, True]))",
        "reduce_prod_int_overflow": "tf.reduce_prod(tf.constant([65536, 65536]))",
        "add_int_overflow": "tf.constant([2**31 - 1]) + 1",
        "abs_int_min": "tf.abs(tf.constant([-2**31]))",
        "sqrt_negative": "tf.sqrt(tf.constant([-1.0]))",
        "log_zero": "tf.math.log(tf.constant([0.0]))",
        "sigmoid_large": "tf.sigmoid(tf.constant([-100.0, 100.0]))",
        "softplus_large": "tf.nn.softplus(tf.constant([-100.0, 100.0]))",
        "l2_normalize_zero": "tf.math.l2_normalize(tf.zeros([3]))",
        "norm_inf": "tf.norm(tf.constant([3.0, -4.0]), ord=np.inf)",
        "einsum_trace": "tf.einsum('ii->', tf.constant([[1.0, 2.0], [3.0, 4.0]]))",
        "tensordot_axes0": "tf.tensordot(tf.ones([2]), tf.ones([3]), 0).shape",
        "boolean_mask": "tf.boolean_mask([1, 2, 3], [True, False, True])",
        "sequence_mask": "tf.sequence_mask([1, 3], 4)",
        "scatter_nd_duplicates": "tf.scatter_nd([[0], [0]], [1.0, 2.0], [3])",
        "unsorted_segment_sum_neg": "tf.math.unsorted_segment_sum([1.0, 2.0], [-1, 0], 2)",
        "divide_int_scalar": "tf.constant([1, 2]) / 2",
        "saturate_cast": "tf.dtypes.saturate_cast(tf.constant([300.0, -5.0]), tf.uint8)",
        "is_finite_int": "tf.math.is_finite(tf.constant([1]))",
        "cast_int_to_float_overflow": "tf.cast(tf.constant([2**24 + 1]), tf.float32)",
        "size_dtype": "tf.size(tf.ones([2, 3]))",
        "shape_dtype": "tf.shape(tf.ones([2, 3]))",
        "rank": "tf.rank(tf.ones([2, 3]))",
        "zeros_like_bool": "tf.zeros_like(tf.constant([True]))",
        "ones_like_dtype": "tf.ones_like(tf.constant([1, 2]), dtype=tf.float32)",
        "fill_int": "tf.fill([2], 7)",
        "identity_n": "tf.identity(tf.constant([1, 2]))",
        "convert_nested_tensor": "tf.convert_to_tensor([tf.constant(1.0), 2.0])",
        "constant_bool_int": "tf.constant(True) + tf.constant(1)",
        "constant_mixed_list": "tf.constant([1, 2.5])",
        "float16_overflow": "tf.constant([60000.0], tf.float16) * 2.0",
        "add_n_single": "tf.add_n([tf.constant([1, 2])])",
        "maximum_nan": f"tf.maximum({t('float32', '[nan, 1.0]')}, 0.0)",
        "reduce_max_nan": f"tf.reduce_max({t('float32', '[nan, 1.0]')})",
    }
    for name, src in e.items():
        yield f"edge/{name}", "edge cases", src


def _more_cases():
    """Case families kept in their own modules (imported as a package or from this directory)."""
    try:
        from . import kops_cases
    except ImportError:
        import kops_cases
    return kops_cases.all_cases()


def all_cases():
    """Every case, in a stable order."""
    out = []
    for family in (_promotion, _mixed, _unary, _binary_values, _bitwise, _reductions, _names, _gradients, _edges):
        out.extend(family())
    out.extend(_more_cases())
    ids = [c[0] for c in out]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return out
