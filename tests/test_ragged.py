"""tw.RaggedTensor and tw.ragged; expected values are TensorFlow 2.21's on the same calls."""
import numpy as np
import pytest

import tensorweave as tw

R = tw.RaggedTensor


def _rt():
    return tw.ragged.constant([[1.0, 2.0, 3.0], [], [4.0, -5.0]])


@pytest.mark.parametrize("fn,want", [
    (lambda: R.from_row_lengths([1, 2, 3, 4], [1, 0, 3]), [[1], [], [2, 3, 4]]),
    (lambda: R.from_value_rowids([1, 2, 3], [0, 2, 2], nrows=4), [[1], [], [2, 3], []]),
    (lambda: R.from_row_splits([1, 2, 3], [0, 2, 3]), [[1, 2], [3]]),
    (lambda: R.from_tensor([[1, 0, 0], [2, 3, 0]], padding=0), [[1], [2, 3]]),
    (lambda: R.from_tensor([[1, 0, 0], [2, 3, 0]], lengths=[1, 3]), [[1], [2, 3, 0]]),
    (lambda: tw.ragged.constant([[[1, 2], [3, 4]], [[5, 6]]], ragged_rank=1), [[[1, 2], [3, 4]], [[5, 6]]]),
    (lambda: tw.ragged.range([3, 1], [5, 4]), [[3, 4], [1, 2, 3]]),
    (lambda: tw.ragged.boolean_mask([[1, 2], [3, 4]], [[True, False], [True, True]]), [[1], [3, 4]]),
    (lambda: tw.ragged.stack([[1, 2], [3]]), [[1, 2], [3]]),
    (lambda: tw.ragged.map_flat_values(tw.square, _rt()), [[1.0, 4.0, 9.0], [], [16.0, 25.0]]),
    (lambda: _rt() * 2 + 1, [[3.0, 5.0, 7.0], [], [9.0, -9.0]]),
    (lambda: _rt()[1:], [[], [4.0, -5.0]]),
    (lambda: _rt()[::2], [[1.0, 2.0, 3.0], [4.0, -5.0]]),
], ids=["row_lengths", "value_rowids", "row_splits", "from_tensor_padding", "from_tensor_lengths", "inner_shape",
        "range", "boolean_mask", "stack", "map_flat_values", "arith", "slice", "strided"])
def test_constructors_and_ops_match_tensorflow(fn, want):
    assert fn().to_list() == want


@pytest.mark.parametrize("kind,axis1,axis0", [
    ("sum", [6.0, 0.0, -1.0], [5.0, -3.0, 3.0]),
    ("max", [3.0, np.finfo(np.float32).min, 4.0], [4.0, 2.0, 3.0]),
    ("mean", [2.0, np.nan, -0.5], [2.5, -1.5, 3.0]),
    ("min", [1.0, np.finfo(np.float32).max, -5.0], [1.0, -5.0, 3.0]),
    ("prod", [6.0, 1.0, -20.0], [4.0, -10.0, 3.0]),
])
def test_reductions_match_tensorflow(kind, axis1, axis0):
    rt = _rt()
    np.testing.assert_allclose(getattr(rt, f"reduce_{kind}")(axis=1).numpy(), axis1)
    np.testing.assert_allclose(getattr(rt, f"reduce_{kind}")(axis=0).numpy(), axis0)


def test_partitions_to_tensor_and_shapes():
    rt = _rt()
    assert rt.to_tensor(default_value=9.0).numpy().tolist() == [[1.0, 2.0, 3.0], [9.0, 9.0, 9.0], [4.0, -5.0, 9.0]]
    assert rt.to_tensor(shape=[2, 2]).numpy().tolist() == [[1.0, 2.0], [0.0, 0.0]]
    assert rt.bounding_shape().numpy().tolist() == [3, 3] and rt.value_rowids().numpy().tolist() == [0, 0, 0, 2, 2]
    assert int(rt.nrows()) == 3 and rt.shape.as_list() == [3, None] and rt[2].numpy().tolist() == [4.0, -5.0]
    r3 = tw.ragged.constant([[[1, 2], [3]], [[4, 5, 6]]])
    assert r3.ragged_rank == 2 and r3.shape.as_list() == [2, None, None]
    assert r3.to_tensor().numpy().tolist() == [[[1, 2, 0], [3, 0, 0]], [[4, 5, 6], [0, 0, 0]]]
    assert tw.ragged.row_splits_to_segment_ids([0, 2, 3]).numpy().tolist() == [0, 0, 1]
    assert tw.ragged.segment_ids_to_row_splits([0, 0, 2]).numpy().tolist() == [0, 2, 2, 3]
    st = rt.to_sparse()
    assert st.indices.numpy().tolist() == [[0, 0], [0, 1], [0, 2], [2, 0], [2, 1]]
    assert R.from_sparse(st).to_list() == rt.to_list()


def test_gradients_flow_to_flat_values():
    vals = tw.constant([1.0, 2.0, 3.0, 4.0])
    with tw.GradientTape() as tape:
        tape.watch(vals)
        rt = R.from_row_lengths(vals, [3, 1])
        y = tw.reduce_sum(rt.reduce_max(axis=1) * tw.constant([1.0, 10.0])) + tw.reduce_sum(rt.to_tensor())
    assert tape.gradient(y, vals).numpy().tolist() == [1.0, 1.0, 2.0, 11.0]


def test_errors():
    with pytest.raises(ValueError, match=r"row_splits must be a non-decreasing vector starting at 0 and ending at "
                                         r"the number of values \(3\), got \[0, 2\]"):
        R.from_row_splits([1, 2, 3], [0, 2])
    with pytest.raises(ValueError, match="same row partitions"):
        _rt() + tw.ragged.constant([[1.0], [2.0], [3.0]])
    with pytest.raises(IndexError, match="row 5 is out of range for 3 rows"):
        _rt()[5]
