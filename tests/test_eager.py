"""Eager tensors: values, printing, NumPy interop, dtype rules."""
import numpy as np
import pytest

import tensorweave as tw


def test_eager_is_default_and_values_print():
    assert tw.executing_eagerly()
    x = tw.constant([[1.0, 2.0]])
    assert "shape=(1, 2), dtype=float32" in repr(x)
    assert "numpy=" in repr(x)
    assert str(tw.constant(3)).startswith("tw.Tensor(3")
    assert x.numpy().dtype == np.float32


def test_numpy_interop():
    x = tw.constant([1.0, 2.0])
    assert np.asarray(x).tolist() == [1.0, 2.0]
    assert np.asarray(x, dtype=np.float64).dtype == np.float64
    assert x.__array__(copy=True) is not x.numpy()
    y = x + np.array([1.0, 1.0])
    assert y.dtype == tw.float32  # the array takes the tensor's dtype
    z = np.array([1.0, 1.0], np.float32) + x
    assert isinstance(z, tw.Tensor) and z.numpy().tolist() == [2.0, 3.0]
    assert (2 * x).numpy().tolist() == [2.0, 4.0]
    assert float(tw.constant(2.5)) == 2.5 and int(tw.constant(3)) == 3


def test_python_scalars_take_tensor_dtype():
    x = tw.constant([1, 2], dtype=tw.int8)
    assert (x + 1).dtype == tw.int8
    h = tw.constant([1.0], dtype=tw.float16)
    assert (h * 2.0).dtype == tw.float16
    assert tw.constant(1.0).dtype == tw.float32 and tw.constant(1).dtype == tw.int32
    assert tw.constant(np.float64(1.0)).dtype == tw.float64


def test_mixed_dtypes_raise_naming_both():
    with pytest.raises(tw.errors.InvalidArgumentError, match="float32.*float64|float64.*float32") as e:
        tw.add(tw.constant(1.0), tw.constant(1.0, dtype=tw.float64))
    assert isinstance(e.value, TypeError) and isinstance(e.value, ValueError)
    with pytest.raises(TypeError, match="Cannot convert 1.5 to int32"):
        tw.constant([1, 2]) + 1.5


def test_all_dtypes_roundtrip():
    for d in (tw.bool, tw.int8, tw.uint8, tw.int16, tw.int32, tw.int64, tw.float16, tw.bfloat16,
              tw.float32, tw.float64):
        t = tw.zeros([2], dtype=d)
        assert t.dtype is d and t.numpy().dtype == d.np_dtype


def test_equality_is_elementwise_and_tensors_hash_by_identity():
    a = tw.constant([1, 2])
    assert (a == tw.constant([1, 3])).numpy().tolist() == [True, False]
    assert len({a, a}) == 1
    assert (a == None) is False  # noqa: E711


def test_getitem_basic_indexing():
    x = tw.reshape(tw.constant(np.arange(24, dtype=np.float32)), [2, 3, 4])
    ref = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for key in [0, -1, (slice(None), 1), (Ellipsis, slice(None, None, -2)),
                (None, 1, slice(0, 2)), (1, Ellipsis, None)]:
        np.testing.assert_array_equal(x[key].numpy(), ref[key])


def test_iteration_and_len():
    x = tw.constant([[1, 2], [3, 4]])
    assert len(x) == 2
    rows = [r.numpy().tolist() for r in x]
    assert rows == [[1, 2], [3, 4]]
