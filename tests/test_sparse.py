"""tw.SparseTensor and tw.sparse: pattern-changing ops (expected values from TensorFlow 2.21 on the same
inputs), graph mode, gradients of sparse_dense_matmul, and errors."""
import numpy as np
import pytest

import tensorweave as tw


def _a():
    return tw.SparseTensor([[1, 2], [0, 1], [1, 0]], [3.0, 1.0, 2.0], [3, 4])


def _b():
    return tw.SparseTensor([[0, 1], [2, 3]], [10.0, -4.0], [3, 4])


def _triple(st):
    return st.indices.numpy().tolist(), st.values.numpy().tolist(), st.dense_shape.numpy().tolist()


@pytest.mark.parametrize("fn,want", [
    (lambda: tw.sparse.reorder(_a()), ([[0, 1], [1, 0], [1, 2]], [1.0, 2.0, 3.0], [3, 4])),
    (lambda: tw.sparse.slice(_a(), [1, 0], [2, 2]), ([[0, 0]], [2.0], [2, 2])),
    (lambda: tw.sparse.reshape(_a(), [2, -1]), ([[1, 0], [0, 1], [0, 4]], [3.0, 1.0, 2.0], [2, 6])),
    (lambda: tw.sparse.transpose(_a()), ([[0, 1], [1, 0], [2, 1]], [2.0, 1.0, 3.0], [4, 3])),
    (lambda: tw.sparse.concat(1, [_a(), _b()]),
     ([[0, 1], [0, 5], [1, 0], [1, 2], [2, 7]], [1.0, 10.0, 2.0, 3.0, -4.0], [3, 8])),
    (lambda: tw.sparse.expand_dims(_a(), 1), ([[1, 0, 2], [0, 0, 1], [1, 0, 0]], [3.0, 1.0, 2.0], [3, 1, 4])),
    (lambda: tw.sparse.fill_empty_rows(_a(), -1.0)[0], ([[0, 1], [1, 2], [1, 0], [2, 0]], [1.0, 3.0, 2.0, -1.0], [3, 4])),
    (lambda: tw.sparse.split(sp_input=_a(), num_split=2, axis=1)[1], ([[1, 0]], [3.0], [3, 2])),
    (lambda: tw.sparse.retain(_a(), [True, False, True]), ([[1, 2], [1, 0]], [3.0, 2.0], [3, 4])),
    (lambda: tw.sparse.eye(2, 3), ([[0, 0], [1, 1]], [1.0, 1.0], [2, 3])),
    (lambda: tw.sparse.reset_shape(_a()), ([[1, 2], [0, 1], [1, 0]], [3.0, 1.0, 2.0], [2, 3])),
    (lambda: tw.sparse.bincount(tw.constant([1, 1, 3]), minlength=5), ([[1], [3]], [2, 1], [5])),
    (lambda: tw.sparse.add(tw.sparse.reorder(_a()), _b()), ([[0, 1], [1, 0], [1, 2], [2, 3]], [11.0, 2.0, 3.0, -4.0], [3, 4])),
    (lambda: tw.sparse.add(tw.sparse.reorder(_a()), _b(), threshold=2.5), ([[0, 1], [1, 0], [1, 2], [2, 3]], [11.0, 2.0, 3.0, -4.0], [3, 4])),
    (lambda: tw.sparse.maximum(tw.sparse.reorder(_a()), _b()), ([[0, 1], [1, 0], [1, 2], [2, 3]], [10.0, 2.0, 3.0, 0.0], [3, 4])),
], ids=["reorder", "slice", "reshape", "transpose", "concat", "expand_dims", "fill_empty_rows", "split", "retain",
        "eye", "reset_shape", "bincount", "add", "add_threshold", "maximum"])
def test_pattern_ops_match_tensorflow(fn, want):
    assert _triple(fn()) == want


def test_reductions_softmax_indicator_from_dense():
    assert tw.sparse.reduce_sum(_a(), 1).numpy().tolist() == [1.0, 5.0, 0.0]
    assert tw.sparse.reduce_max(_a(), 1).numpy().tolist() == [1.0, 3.0, 0.0]
    sm = tw.sparse.softmax(tw.sparse.reorder(_a())).values.numpy()
    np.testing.assert_allclose(sm, [1.0, 0.26894143, 0.7310586], rtol=1e-6)
    ind = tw.SparseTensor([[0, 0], [0, 1], [1, 0]], tw.constant([2, 0, 1], tw.int64), [2, 2])
    assert tw.sparse.to_indicator(ind, 3).numpy().tolist() == [[True, False, True], [False, True, False]]
    assert tw.sparse.from_dense(tw.constant([["a", ""], ["", "b"]])).indices.numpy().tolist() == [[0, 0], [1, 1]]
    assert tw.sparse.to_dense(_a(), default_value=-1.0).numpy().tolist()[2] == [-1.0] * 4


def test_sparse_dense_matmul_in_a_graph_with_gradients():
    g = tw.Graph()
    with g.as_default():
        vals = tw.placeholder(tw.float32, [3])
        b = tw.placeholder(tw.float32, [4, 2])
        st = tw.SparseTensor([[1, 2], [0, 1], [1, 0]], vals, [3, 4])
        y = tw.sparse.sparse_dense_matmul(st, b)
        gv, gb = tw.gradients(tw.reduce_sum(y), [vals, b])
    bv = np.arange(8, dtype=np.float32).reshape(4, 2)
    with tw.Session(graph=g) as sess:
        out, dv, db = sess.run([y, gv, gb], {vals: [3.0, 1.0, 2.0], b: bv})
    dense = np.zeros((3, 4), np.float32)
    dense[[1, 0, 1], [2, 1, 0]] = [3.0, 1.0, 2.0]
    np.testing.assert_allclose(out, dense @ bv)
    np.testing.assert_allclose(dv, bv[[2, 1, 0]].sum(1))
    np.testing.assert_allclose(db, dense.T @ np.ones((3, 2)))


def test_sparse_tensor_operators_and_errors():
    st = _a()
    assert (st * 2.0).values.numpy().tolist() == [6.0, 2.0, 4.0]
    assert (st * tw.ones([3, 4]) * 3.0).values.numpy().tolist() == [9.0, 3.0, 6.0]
    assert tw.sparse.map_values(tw.square, st).values.numpy().tolist() == [9.0, 1.0, 4.0]
    assert st.shape == (3, 4) and st.dtype == tw.float32 and st.indices.dtype == tw.int64
    with pytest.raises(ValueError, match="SparseTensor: 2 indices but 3 values"):
        tw.SparseTensor([[0, 0], [1, 1]], [1.0, 2.0, 3.0], [2, 2])
    with pytest.raises(ValueError, match=r"inner dimensions differ: 4 vs 3"):
        tw.sparse.sparse_dense_matmul(st, tw.ones([3, 2]))
    with pytest.raises(TypeError, match="expected a tw.SparseTensor, got EagerTensor.*from_dense"):
        tw.sparse.to_dense(tw.ones([2]))
    g = tw.Graph()
    with g.as_default():
        sym = tw.SparseTensor(tw.placeholder(tw.int64, [None, 2]), tw.ones([3]), [3, 4])
        with pytest.raises(TypeError, match="tw.sparse.reorder computes a new sparsity pattern and runs eagerly"):
            tw.sparse.reorder(sym)


def test_minimum_segment_means_and_mask():
    m = tw.sparse.minimum(tw.sparse.reorder(_a()), _b())
    assert _triple(m) == ([[0, 1], [1, 0], [1, 2], [2, 3]], [1.0, 0.0, 0.0, -4.0], [3, 4])
    data = tw.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert tw.sparse.segment_mean(data, [0, 1, 2], [0, 0, 1]).numpy().tolist() == [[2.0, 3.0], [5.0, 6.0]]
    np.testing.assert_allclose(tw.sparse.segment_sqrt_n(data, [0, 1], [0, 0]).numpy(), [[4 / np.sqrt(2), 6 / np.sqrt(2)]])
    sl = tw.IndexedSlices(tw.constant([[1.0], [2.0], [3.0]]), tw.constant([0, 5, 7]), tw.constant([10, 1]))
    kept = tw.sparse.mask(sl, [5])
    assert kept.indices.numpy().tolist() == [0, 7] and kept.values.numpy().tolist() == [[1.0], [3.0]]


def test_sampled_addmm_matches_tensorflow():
    ind, vals, shape = tw.sparse.sampled_addmm(tw.constant([[0, 0], [1, 2]]), tw.constant([1.0, 2.0]), tw.constant([2, 3]),
                                               tw.ones([2, 4]), tw.reshape(tw.range(12.0), [4, 3]), beta=0.5, alpha=2.0)
    assert vals.numpy().tolist() == [36.5, 53.0] and shape.numpy().tolist() == [2, 3]
