"""Specific tests for indexing, sort and linalg ops (and the array ops they build on):
error messages, sparse gradients, static shapes with unknown dimensions, dtype rules."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.errors import InvalidArgumentError


def _graph_run(build, feeds=None):
    g = tw.Graph()
    with g.as_default():
        out = build()
    with tw.Session(graph=g) as s:
        return out, s.run(out, feeds or {})


# ---- out-of-range indices name the bad index -------------------------------------------------
@pytest.mark.parametrize("fn, text", [
    (lambda: tw.gather(tw.constant([1.0, 2.0, 3.0]), [[0, 2], [3, 1]]), "indices[1,0] = 3 is not in [0, 3)"),
    (lambda: tw.gather(tw.constant([1.0, 2.0, 3.0]), [0, -1]), "indices[1] = -1 is not in [0, 3)"),
    (lambda: tw.gather_nd(tw.ones([3, 4]), [[0, 1], [2, 4]]),
     "indices[1] = [2, 4] does not index into param shape [3,4]"),
    (lambda: tw.gather_nd(tw.ones([2, 3]), [[[1]], [[5]]], batch_dims=1), "indices[1,0] = [1, 5]"),
    (lambda: tw.scatter_nd([[1], [7]], [1.0, 2.0], [4]), "indices[1] = [7] does not index into shape [4]"),
    (lambda: tw.tensor_scatter_nd_update(tw.zeros([2, 2]), [[0, -1]], [1.0]), "indices[0] = [0, -1]"),
    (lambda: tw.tensor_scatter_nd_add(tw.zeros([2]), [[0], [2]], [1.0, 1.0]), "indices[1] = [2]"),
    (lambda: tw.unsorted_segment_sum(tw.ones([3]), [0, 4, 1], 3), "segment_ids[1] = 4 is not in [0, 3)"),
    (lambda: tw.unsorted_segment_sum(tw.ones([3]), [0, 3, 1], 3), "segment_ids[1] = 3 is not in [0, 3)"),
    (lambda: tw.gather(tw.constant([1.0, 2.0, 3.0]), [0, 7]), "indices[1] = 7 is not in [0, 3)"),
    (lambda: tw.unravel_index([1, 6], [2, 3]), "indices[1] = 6 is out of range for dims [2, 3]"),
])
def test_out_of_range_indices_name_the_bad_index(fn, text):
    with pytest.raises(InvalidArgumentError) as e:
        fn()
    msg = str(e.value)
    assert text in msg
    assert "test_indexing.py" in msg  # the user's source line


def test_out_of_range_index_in_a_session_names_the_node():
    g = tw.Graph()
    with g.as_default():
        i = tw.placeholder(tw.int32, [None, 2])
        y = tw.gather_nd(tw.ones([3, 4]), i, name="lookup")
    with tw.Session(graph=g) as s:
        with pytest.raises(InvalidArgumentError) as e:
            s.run(y, {i: np.array([[0, 0], [3, 0]], np.int32)})
    assert "indices[1] = [3, 0] does not index into param shape [3,4]" in str(e.value)
    assert "lookup" in str(e.value)


# ---- sparse gradients ------------------------------------------------------------------------
@pytest.mark.parametrize("params_shape, indices_shape, axis, batch_dims", [
    ((0, 3), (0, 2), 1, 1), ((2, 0, 3), (2, 0, 4), 2, 2), ((0, 2, 3), (0, 5), 2, 1), ((2, 3, 4), (2, 5), 1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_batched_gather_shapes_and_dtypes_with_empty_batches(params_shape, indices_shape, axis, batch_dims, dtype):
    """Matches TF's output shape params[:axis] + indices[batch_dims:] + params[axis+1:], also
    when a batch dimension is 0 (nothing to gather), and keeps the params' dtype."""
    params = np.arange(int(np.prod(params_shape)), dtype=dtype).reshape(params_shape)
    rng = np.random.default_rng(0)
    indices = rng.integers(0, max(params_shape[axis], 1), size=indices_shape).astype(np.int32)
    got = tw.gather(params, indices, axis=axis, batch_dims=batch_dims).numpy()
    want_shape = params_shape[:axis] + indices_shape[batch_dims:] + params_shape[axis + 1:]
    assert got.shape == want_shape and got.dtype == dtype
    for b in np.ndindex(*params_shape[:batch_dims]):
        np.testing.assert_array_equal(got[b], np.take(params[b], indices[b], axis=axis - batch_dims))


def test_gather_gradient_is_indexed_slices_and_densifies_with_duplicates():
    v = tw.Variable(np.arange(12.0).reshape(4, 3))
    idx = tw.constant([3, 0, 3])
    w = tw.constant(np.arange(9.0).reshape(3, 3))
    with tw.GradientTape() as tape:
        loss = tw.reduce_sum(tw.gather(v, idx) * w)
    g = tape.gradient(loss, v)
    assert isinstance(g, tw.IndexedSlices)
    assert g.values.shape == (3, 3)
    want = np.zeros((4, 3))
    np.add.at(want, [3, 0, 3], np.arange(9.0).reshape(3, 3))
    np.testing.assert_allclose(tw.convert_to_tensor(g).numpy(), want)
    np.testing.assert_allclose(np.asarray(g), want)


def test_gather_gradient_wrt_a_tensor_densifies_correctly():
    x = tw.constant(np.arange(6.0).reshape(3, 2))
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = tw.reduce_sum(tw.gather(x, [[2, 2], [0, 1]]))
    g = tape.gradient(y, x)
    if isinstance(g, tw.IndexedSlices):  # as in TF: rows 2, 2, 0, 1 of a [3, 2] gradient
        assert g.indices.numpy().tolist() == [2, 2, 0, 1]
        g = tw.convert_to_tensor(g)
    np.testing.assert_allclose(g.numpy(), [[1, 1], [1, 1], [2, 2]])
    # the sparse gradient flows on through further ops (densified where needed)
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = tw.reduce_sum(tw.gather(x * x, [2, 2]))
    np.testing.assert_allclose(tw.convert_to_tensor(tape.gradient(y, x)).numpy(), [[0, 0], [0, 0], [16, 20]])


def test_two_gathers_aggregate_into_one_sparse_gradient():
    v = tw.Variable(np.zeros((5, 2)))
    with tw.GradientTape() as tape:
        loss = tw.reduce_sum(tw.gather(v, [1, 2])) + 2 * tw.reduce_sum(tw.gather(v, [2, 4]))
    g = tape.gradient(loss, v)
    assert isinstance(g, tw.IndexedSlices)
    np.testing.assert_allclose(np.asarray(g), [[0, 0], [1, 1], [3, 3], [0, 0], [2, 2]])


def test_gather_gradient_in_a_graph():
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float64, [None, 2])
        y = tw.reduce_sum(tw.gather(x, [0, 0, 1]))
        (dx,) = tw.gradients(y, [x])
        dense = tw.convert_to_tensor(dx)
    with tw.Session(graph=g) as s:
        out = s.run(dense, {x: np.ones((3, 2))})
    np.testing.assert_allclose(out, [[2, 2], [1, 1], [0, 0]])


def test_stop_gradient_has_no_gradient():
    x = tw.constant([1.0, 2.0])
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = tw.reduce_sum(tw.stop_gradient(x * x))
    assert tape.gradient(y, x) is None
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = tw.reduce_sum(x + tw.stop_gradient(x * x))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [1.0, 1.0])


def test_unsorted_segment_sum_drops_negative_ids_and_their_gradient():
    x = tw.constant([1.0, 2.0, 3.0])
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = tw.unsorted_segment_sum(x, [0, -1, 1], 2)
    np.testing.assert_allclose(y.numpy(), [1.0, 3.0])
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [1.0, 0.0, 1.0])


def test_reduce_prod_gradient_with_zeros():
    x = tw.constant([[2.0, 0.0, 3.0], [0.0, 0.0, 1.0]])
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = tw.reduce_sum(tw.reduce_prod(x, axis=1))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [[0.0, 6.0, 0.0], [0.0, 0.0, 0.0]])


def test_top_k_gradient_scatters_back_to_the_indices():
    x = tw.constant([[1.0, 4.0, 3.0, 2.0]])
    with tw.GradientTape() as tape:
        tape.watch(x)
        values, indices = tw.math.top_k(x, k=2)
        y = tw.reduce_sum(values * tw.constant([[10.0, 1.0]]))
    assert indices.numpy().tolist() == [[1, 2]] and indices.dtype == tw.int32
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [[0.0, 10.0, 1.0, 0.0]])


# ---- static shapes at graph construction -----------------------------------------------------
def test_static_shapes_with_unknown_dimensions():
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [None, 3])
        i = tw.placeholder(tw.int32, [None, 5, 1])
        n = tw.placeholder(tw.int32, [])
        assert tw.gather_nd(x, i).shape == tw.TensorShape([None, 5, 3])
        assert tw.pad(x, [[1, 1], [0, 2]]).shape == tw.TensorShape([None, 5])
        assert tw.pad(x, [[1, 1], [1, 1]], "REFLECT").shape == tw.TensorShape([None, 5])
        assert tw.tile(x, [2, 3]).shape == tw.TensorShape([None, 9])
        assert tw.slice(x, [0, 1], [-1, 2]).shape == tw.TensorShape([None, 2])
        assert tw.reverse(x, [0]).shape == tw.TensorShape([None, 3])
        assert tw.one_hot(tw.placeholder(tw.int32, [None]), 4).shape == tw.TensorShape([None, 4])
        assert tw.one_hot(tw.placeholder(tw.int32, [2]), n).shape == tw.TensorShape([2, None])
        assert tw.range(n).shape == tw.TensorShape([None])
        assert tw.range(2, 11, 3).shape == tw.TensorShape([3])
        assert tw.repeat(x, [1, 2, 3], axis=1).shape == tw.TensorShape([None, 6])
        assert tw.roll(x, 1, 0).shape == tw.TensorShape([None, 3])
        assert tw.boolean_mask(x, tw.placeholder(tw.bool, [None])).shape == tw.TensorShape([None, 3])
        assert tw.sequence_mask(tw.placeholder(tw.int32, [4]), 6).shape == tw.TensorShape([4, 6])
        assert tw.einsum("bij,jk->bik", tw.placeholder(tw.float32, [None, 2, 3]), tw.ones([3, 4])).shape == \
            tw.TensorShape([None, 2, 4])
        assert tw.einsum("...ij->...ji", tw.placeholder(tw.float32, None)).shape == tw.TensorShape(None)
        assert tw.tensordot(x, tw.ones([3, 4]), 1).shape == tw.TensorShape([None, 4])
        assert tw.norm(x, axis=1).shape == tw.TensorShape([None])
        assert tw.sort(x).shape == tw.TensorShape([None, 3])
        v, ix = tw.math.top_k(x, 2)
        assert v.shape == ix.shape == tw.TensorShape([None, 2])
        assert tw.cumsum(x, axis=1).shape == tw.TensorShape([None, 3])
        assert tw.linalg.diag_part(tw.placeholder(tw.float32, [None, 2, 5])).shape == tw.TensorShape([None, 2])


def test_dynamic_shape_arguments_run():
    x_val = np.arange(12.0).reshape(3, 4).astype(np.float32)

    def build():
        x = tw.placeholder(tw.float32, [None, None])
        b = tw.placeholder(tw.int32, [2])
        p = tw.placeholder(tw.int32, [2, 2])
        build.feeds = {x: x_val, b: np.array([1, 1], np.int32), p: np.array([[1, 0], [0, 1]], np.int32)}
        return [tw.slice(x, b, [-1, 2]), tw.pad(x, p), tw.tile(x, tw.shape(p)), tw.eye(tw.shape(x)[0])]
    g = tw.Graph()
    with g.as_default():
        outs = build()
        assert outs[0].shape.as_list() == [None, 2]
    with tw.Session(graph=g) as s:
        sl, pd, tl, ey = s.run(outs, build.feeds)
    np.testing.assert_array_equal(sl, x_val[1:, 1:3])
    np.testing.assert_array_equal(pd, np.pad(x_val, [[1, 0], [0, 1]]))
    np.testing.assert_array_equal(tl, np.tile(x_val, [2, 2]))
    np.testing.assert_array_equal(ey, np.eye(3, dtype=np.float32))


# ---- dtype rules ---------------------------------------------------------------------------
def test_python_scalars_take_the_tensor_dtype():
    x = tw.constant([1.0, 2.0], dtype=tw.float64)
    assert tw.pad(x, [[1, 0]], constant_values=7).dtype == tw.float64
    assert tw.tensor_scatter_nd_update(x, [[0]], [5]).dtype == tw.float64
    assert tw.linspace(tw.constant(0.0, tw.float64), 1, 3).dtype == tw.float64
    assert tw.einsum("i,i->", x, [1, 2]).dtype == tw.float64
    assert tw.stack([x, [3, 4]]).dtype == tw.float64
    assert tw.concat([x, [3.0]], 0).numpy().tolist() == [1.0, 2.0, 3.0]


def test_range_dtypes_follow_tf():
    assert tw.range(5).dtype == tw.int32 and tw.range(5).numpy().tolist() == [0, 1, 2, 3, 4]
    assert tw.range(5.0).dtype == tw.float32
    assert tw.range(1, 2, 0.5).numpy().tolist() == [1.0, 1.5]
    assert tw.range(tw.constant(3, tw.int64)).dtype == tw.int64
    assert tw.range(3, dtype=tw.float64).dtype == tw.float64
    assert tw.range(0).numpy().tolist() == []


@pytest.mark.parametrize("fn, exc, text", [
    (lambda: tw.gather_nd(tw.ones([2]), [[0.5]]), TypeError, "int32 or int64"),
    (lambda: tw.tensor_scatter_nd_add(tw.ones([2]), [[0]], tw.constant([1], tw.int32)), TypeError, "Mixed dtypes"),
    (lambda: tw.concat([tw.ones([2]), tw.ones([2], tw.float64)], 0), TypeError, "Mixed dtypes"),
    (lambda: tw.einsum("ij,jk->ik", tw.ones([2, 3]), tw.ones([3, 2], tw.float64)), TypeError, "Mixed dtypes"),
    (lambda: tw.one_hot([0.5], 3), TypeError, "integer"),
    (lambda: tw.sort(tw.constant([True, False])), TypeError, "bool"),
    (lambda: tw.cumsum(tw.constant([True, False])), TypeError, "bool"),
    (lambda: tw.einsum("i->", tw.constant([True])), TypeError, "bool"),
    (lambda: tw.boolean_mask(tw.ones([3]), [1, 0, 1]), TypeError, "bool"),
    (lambda: tw.reduce_sum(tw.constant([True])), TypeError, "bool"),
    (lambda: tw.reduce_any(tw.constant([1.0])), TypeError, "float32"),
    (lambda: tw.norm(tw.constant([1, 2])), TypeError, "float"),
    (lambda: tw.linalg.inv(tw.constant([[1, 0], [0, 1]])), TypeError, "int32"),
    (lambda: tw.linalg.det(tw.constant([[1, 0], [0, 1]])), TypeError, "int32"),
])
def test_dtype_errors(fn, exc, text):
    with pytest.raises(exc) as e:
        fn()
    assert text in str(e.value)


# ---- shape and argument errors -------------------------------------------------------------
@pytest.mark.parametrize("fn, text", [
    (lambda: tw.pad(tw.ones([2, 2]), [[1, 1]]), "paddings must have shape [2, 2]"),
    (lambda: tw.pad(tw.ones([2, 2]), [[2, 0], [0, 0]], "REFLECT"), "REFLECT paddings of dimension 0 must be at most 1"),
    (lambda: tw.pad(tw.ones([2]), [[1, 1]], "WRAP"), "mode must be"),
    (lambda: tw.tile(tw.ones([2, 2]), [2]), "multiples must have"),
    (lambda: tw.slice(tw.ones([3, 3]), [1, 1], [3, 1]), "begin[0] = 1 and size[0] = 3"),
    (lambda: tw.range(0, 5, 0), "delta != 0"),
    (lambda: tw.range(5, 1), "start <= limit"),
    (lambda: tw.reverse(tw.ones([2, 2]), [0, -2]), "more than once"),
    (lambda: tw.reverse(tw.ones([2, 2]), [2]), "axis 2 is out of range"),
    (lambda: tw.boolean_mask(tw.ones([3, 2]), [True, False]), "does not match dimensions"),
    (lambda: tw.repeat(tw.ones([3]), [1, 2], axis=0), "repeats has 2 entries but dimension 0 has size 3"),
    (lambda: tw.scatter_nd([[0], [1]], [1.0, 2.0, 3.0], [4]), "updates must have shape"),
    (lambda: tw.gather_nd(tw.ones([2]), [[0, 1]]), "index vectors of length 2 cannot index a tensor of rank 1"),
    (lambda: tw.einsum("ij,jk->ik", tw.ones([2, 3]), tw.ones([4, 2])), "subscript 'j'"),
    (lambda: tw.einsum("ij->ik", tw.ones([2, 3])), "output subscript 'k'"),
    (lambda: tw.einsum("ij,j", tw.ones([2, 3])), "2 input term(s) but 1 operand(s)"),
    (lambda: tw.einsum("i?", tw.ones([2, 3])), "invalid character"),
    (lambda: tw.einsum("ijk", tw.ones([2, 3])), "rank 2"),
    (lambda: tw.tensordot(tw.ones([2, 3]), tw.ones([2, 3]), 1), "subscript"),
    (lambda: tw.norm(tw.ones([2, 2]), ord=0), "ord=0 is not supported"),
    (lambda: tw.norm(tw.ones([2, 2]), ord=3, axis=[0, 1]), "matrix norms support"),
    (lambda: tw.math.top_k(tw.ones([2, 3]), k=4), "k = 4"),
    (lambda: tw.linalg.inv(tw.ones([2, 3])), "square"),
    (lambda: tw.linalg.inv(tw.constant([[1.0, 2.0], [2.0, 4.0]])), "not invertible"),
    (lambda: tw.linalg.cross(tw.ones([2]), tw.ones([2])), "must be 3"),
    (lambda: tw.cumsum(tw.constant(1.0)), "rank >= 1"),
])
def test_argument_errors_are_clear(fn, text):
    with pytest.raises((ValueError, TypeError)) as e:
        fn()
    assert text in str(e.value)


def test_errors_at_graph_construction_name_the_op_and_line():
    g = tw.Graph()
    with g.as_default():
        with pytest.raises(InvalidArgumentError) as e:
            tw.pad(tw.placeholder(tw.float32, [None, 2]), [[1, 1]])
    msg = str(e.value)
    assert "PadV2" in msg and "[?,2]" in msg and "test_indexing.py" in msg


# ---- semantics worth pinning down ----------------------------------------------------------
def test_one_hot_out_of_range_and_axis():
    out = tw.one_hot([0, 3, -1], 3, on_value=2.0, off_value=-1.0, axis=0).numpy()
    np.testing.assert_array_equal(out, [[2, -1, -1], [-1, -1, -1], [-1, -1, -1]])
    assert tw.one_hot([1], 2, dtype=tw.int64).dtype == tw.int64


def test_argsort_and_sort_are_stable():
    x = tw.constant([3, 1, 3, 1, 2])
    assert tw.argsort(x).numpy().tolist() == [1, 3, 4, 0, 2]
    assert tw.argsort(x, direction="DESCENDING", stable=True).numpy().tolist() == [0, 2, 4, 1, 3]
    u = tw.constant(np.array([0, 255, 7], np.uint8))  # descending sort must not negate unsigned ints
    assert tw.sort(u, direction="DESCENDING").numpy().tolist() == [255, 7, 0]


def test_scatter_duplicates_add_and_update_last_wins():
    assert tw.scatter_nd([[0], [0]], [1, 2], [2]).numpy().tolist() == [3, 0]
    assert tw.tensor_scatter_nd_update(tw.zeros([2], tw.int32), [[1], [1]], [4, 5]).numpy().tolist() == [0, 5]


def test_gather_nd_with_batch_dims_and_gradient():
    p = tw.constant(np.arange(12.0).reshape(2, 3, 2))
    with tw.GradientTape() as tape:
        tape.watch(p)
        y = tw.gather_nd(p, [[[2], [0]], [[1], [1]]], batch_dims=1)
    np.testing.assert_array_equal(y.numpy(), [[[4, 5], [0, 1]], [[8, 9], [8, 9]]])
    np.testing.assert_array_equal(tape.gradient(y, p).numpy(), [[[1, 1], [0, 0], [1, 1]], [[0, 0], [2, 2], [0, 0]]])


def test_einsum_gradients_of_traces_and_broadcast_batches():
    a = tw.constant(np.arange(9.0).reshape(3, 3))
    with tw.GradientTape() as tape:
        tape.watch(a)
        t = tw.einsum("ii->", a)
    np.testing.assert_array_equal(tape.gradient(t, a).numpy(), np.eye(3))
    x = tw.constant(np.ones((1, 2, 3)))
    y = tw.constant(np.ones((4, 3, 2)))
    with tw.GradientTape() as tape:
        tape.watch(x)
        z = tw.einsum("...ij,...jk->...ik", x, y)
    assert z.shape == (4, 2, 2)
    np.testing.assert_array_equal(tape.gradient(z, x).numpy(), np.full((1, 2, 3), 8.0))


def test_linalg_namespace():
    assert tw.linalg.einsum is tw.einsum and tw.linalg.norm is tw.norm
    for name in ("trace", "diag", "diag_part", "set_diag", "matrix_transpose", "adjoint", "cross", "inv", "det",
                 "eye", "matmul"):
        assert hasattr(tw.linalg, name), name
    assert not hasattr(tw, "trace") and not hasattr(tw, "inv")
    for name in ("cumsum", "cumprod", "top_k"):
        assert hasattr(tw.math, name), name


def test_linspace_and_meshgrid_with_symbolic_sizes():
    def build():
        n = tw.placeholder(tw.int32, [])
        build.n = n
        x = tw.linspace(0.0, 1.0, n)
        return x, tw.meshgrid(x, tw.range(2.0))
    g = tw.Graph()
    with g.as_default():
        x, (gx, gy) = build()
    with tw.Session(graph=g) as s:
        xv, gxv, gyv = s.run([x, gx, gy], {build.n: 5})
    np.testing.assert_allclose(xv, np.linspace(0, 1, 5))
    ex, ey = np.meshgrid(np.linspace(0, 1, 5), np.arange(2.0))
    np.testing.assert_allclose(gxv, ex)
    np.testing.assert_allclose(gyv, ey)


def test_norm_gradient_is_finite_away_from_zero():
    x = tw.constant([[3.0, 4.0], [0.5, -1.0]])
    with tw.GradientTape() as tape:
        tape.watch(x)
        n = tw.norm(x, axis=1)
    np.testing.assert_allclose(tape.gradient(n, x).numpy(),
                               np.array([[3, 4], [0.5, -1]]) / np.array([[5.0], [np.sqrt(1.25)]]), rtol=1e-6)


def test_matrix_spectral_norm_second_order_is_an_error_not_a_silent_zero():
    x = tw.constant([[2.0, 0.0], [0.0, 1.0]])
    with tw.GradientTape() as outer:
        outer.watch(x)
        with tw.GradientTape() as inner:
            inner.watch(x)
            n = tw.norm(x, ord=2, axis=[0, 1])
        g = inner.gradient(n, x)
        np.testing.assert_allclose(g.numpy(), [[1.0, 0.0], [0.0, 0.0]], atol=1e-6)
        h = tw.reduce_sum(g)
    with pytest.raises(LookupError):
        outer.gradient(h, x)


# ---- gradients when shapes are known only at run time ------------------------------------------
_DYNAMIC_GRAD_CASES = {
    "tile": (lambda x: tw.tile(x, [2, 3]), (2, 3)),
    "slice": (lambda x: tw.slice(x, [1, 0], [-1, 2]), (3, 3)),
    "pad": (lambda x: tw.pad(x, [[1, 0], [2, 1]], constant_values=1.0), (2, 3)),
    "pad_reflect": (lambda x: tw.pad(x, [[1, 1], [0, 2]], "REFLECT"), (3, 3)),
    "gather_nd": (lambda x: tw.gather_nd(x, [[1, 0], [1, 0], [0, 2]]), (2, 3)),
    "reduce_prod": (lambda x: tw.reduce_prod(x, axis=0), (3, 2)),
    "boolean_mask_2d": (lambda x: tw.boolean_mask(x, [[True, False, True], [False, True, True]]), (2, 3)),
    "einsum_trace": (lambda x: tw.einsum("ii->", x), (3, 3)),
    "einsum_rowsum": (lambda x: tw.einsum("ij->j", x), (2, 3)),
    "einsum_ellipsis": (lambda x: tw.einsum("...i,i->...", x, tw.constant([1.0, 2.0, 3.0], tw.float64)), (2, 3)),
    "repeat": (lambda x: tw.repeat(x, [1, 0, 2], axis=1), (2, 3)),
    "norm": (lambda x: tw.norm(x, ord=1, axis=[0, 1]), (2, 3)),
    "top_k": (lambda x: tw.math.top_k(x, 2).values, (2, 3)),
    "cumprod": (lambda x: tw.math.cumprod(x, axis=1, exclusive=True), (2, 3)),
    "linspace": (lambda x: tw.linspace(x[0], x[1], 4, axis=-1), (2, 3)),
    "det": (lambda x: tw.linalg.det(x + tw.constant(3 * np.eye(3))), (3, 3)),
}


@pytest.mark.parametrize("case", sorted(_DYNAMIC_GRAD_CASES))
def test_gradients_with_unknown_static_shapes(case):
    fn, shape = _DYNAMIC_GRAD_CASES[case]
    rng = np.random.default_rng(3)
    x0 = rng.uniform(0.5, 1.5, size=shape) * np.where(rng.random(shape) > 0.5, 1, -1)
    x = tw.constant(x0)
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
        c = tw.constant(rng.uniform(-1, 1, size=y.shape))
        loss = tw.reduce_sum(y * c)
    want = tw.convert_to_tensor(tape.gradient(loss, x)).numpy()
    g = tw.Graph()
    with g.as_default():
        ph = tw.placeholder(tw.float64, [None] * len(shape))
        yg = fn(ph)
        (dx,) = tw.gradients(tw.reduce_sum(yg * c.numpy()), [ph])
        dx = tw.convert_to_tensor(dx)
    with tw.Session(graph=g) as s:
        got = s.run(dx, {ph: x0})
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


_SPARSE_UPSTREAM = {
    "getitem": lambda x: x[1:],
    "pad_reflect": lambda x: tw.pad(x, [[1, 1], [0, 0]], "REFLECT"),
    "einsum": lambda x: tw.einsum("ij,j->ij", x, tw.constant([1.0, 2.0, 3.0], tw.float64)),
    "roll": lambda x: tw.roll(x, 1, 0),
    "repeat": lambda x: tw.repeat(x, 2, axis=0),
    "sort": lambda x: tw.sort(x, axis=0),
    "top_k": lambda x: tw.math.top_k(tw.transpose(x), 2).values,
    "gather_nd": lambda x: tw.gather_nd(x, [[1], [2]]),
    "gather_axis1": lambda x: tw.gather(x, [2, 0], axis=1),
    "tile": lambda x: tw.tile(x, [1, 2]),
}


@pytest.mark.parametrize("case", sorted(_SPARSE_UPSTREAM))
def test_ops_accept_a_sparse_incoming_gradient(case):
    """A gather after the op hands its gradient rule an IndexedSlices."""
    f = _SPARSE_UPSTREAM[case]
    x = tw.constant(np.arange(12.0).reshape(4, 3) ** 1.5)
    grads = []
    for pick in (lambda y: tw.gather(y, [0, 1, 0]), lambda y: tw.concat([y[0:2], y[0:1]], 0)):
        with tw.GradientTape() as tape:
            tape.watch(x)
            loss = tw.reduce_sum(pick(f(x)) * tw.constant([[1.0], [2.0], [3.0]], tw.float64))
        grads.append(tw.convert_to_tensor(tape.gradient(loss, x)).numpy())
    np.testing.assert_allclose(grads[0], grads[1])


@pytest.mark.parametrize("axis", [2, 3, -1])
def test_gather_with_two_batch_dims(axis):
    """batch_dims >= 2: the gathered axis is counted after every batch dimension."""
    rng = np.random.default_rng(11)
    params = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    indices = rng.integers(0, params.shape[axis], size=(2, 3, 6)).astype(np.int32)
    got = tw.gather(params, indices, axis=axis, batch_dims=2).numpy()
    a = axis % 4
    want = np.stack([np.stack([np.take(params[i, j], indices[i, j], axis=a - 2) for j in range(3)])
                     for i in range(2)])
    np.testing.assert_array_equal(got, want)
    assert got.shape == want.shape
