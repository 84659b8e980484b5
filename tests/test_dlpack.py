"""DLPack interop with NumPy and PyTorch: zero-copy in both directions where the memory is writable."""
import numpy as np
import pytest

import tensorweave as tw

dl = tw.experimental.dlpack


def test_numpy_reads_eager_tensors_through_the_protocol():
    t = tw.constant(np.arange(6, dtype=np.int64).reshape(2, 3))
    a = np.from_dlpack(t)
    assert a.dtype == np.int64 and a.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert t.__dlpack_device__() == (1, 0)


def test_from_dlpack_shares_numpy_memory():
    src = np.zeros(3, np.float32)
    t = dl.from_dlpack(src)
    src[1] = 5.0
    assert t.dtype == tw.float32 and t.numpy().tolist() == [0.0, 5.0, 0.0]


def test_torch_round_trip():
    torch = pytest.importorskip("torch")
    x = torch.arange(4, dtype=torch.float64)
    t = dl.from_dlpack(x)
    x[0] = 9.0                                   # shared memory
    assert t.dtype == tw.float64 and t.numpy().tolist() == [9.0, 1.0, 2.0, 3.0]
    back = torch.from_dlpack(tw.constant([[1, 2]], tw.int32))
    assert back.dtype == torch.int32 and back.tolist() == [[1, 2]]
    cap = dl.to_dlpack(tw.constant([1.5]))
    assert torch.utils.dlpack.from_dlpack(cap).tolist() == [1.5]
    assert dl.from_dlpack(torch.utils.dlpack.to_dlpack(torch.ones(2, dtype=torch.uint8))).dtype == tw.uint8


def test_unsupported_values_have_clear_errors():
    with pytest.raises(TypeError, match="dtype string has no DLPack type"):
        dl.to_dlpack(tw.constant(["a"]))
    g = tw.Graph()
    with g.as_default():
        with pytest.raises(TypeError, match="to_dlpack needs an eager tensor"):
            dl.to_dlpack(tw.placeholder(tw.float32, [2]))
