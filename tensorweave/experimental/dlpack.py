"""DLPack interop: share eager tensors with NumPy, PyTorch, JAX, CuPy ... without copying.

``to_dlpack(t)`` returns a DLPack capsule of ``t``'s host memory (as ``tf.experimental.dlpack``
does); eager tensors also implement the protocol (``__dlpack__``/``__dlpack_device__``), so
``np.from_dlpack(t)`` and ``torch.from_dlpack(t)`` read them directly. ``from_dlpack`` takes a
capsule or any object with ``__dlpack__`` (a NumPy array, a PyTorch CPU tensor) and wraps its
memory as an eager tensor. Read-only values (NumPy cannot export read-only memory) are copied
once; ``bfloat16`` has no NumPy DLPack type and raises. A capsule can be consumed only once.

>>> import numpy as np, tensorweave as tw
>>> t = tw.constant([1.0, 2.0])
>>> np.from_dlpack(t).tolist()
[1.0, 2.0]
>>> tw.experimental.dlpack.from_dlpack(tw.experimental.dlpack.to_dlpack(t)).numpy().tolist()
[1.0, 2.0]
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.tensor import EagerTensor, Tensor

__all__ = ["to_dlpack", "from_dlpack"]


def to_dlpack(tf_tensor):
    """A DLPack capsule sharing the eager tensor's memory."""
    if not isinstance(tf_tensor, EagerTensor):
        raise TypeError(f"to_dlpack needs an eager tensor (a value in memory), got {type(tf_tensor).__name__}. "
                        "Hint: symbolic tensors have no memory to share; run eagerly")
    return tf_tensor.__dlpack__()


class _Capsule:
    """Presents a bare capsule through the protocol NumPy's ``from_dlpack`` reads."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, stream=None, **kwargs):
        return self._capsule

    def __dlpack_device__(self):
        return (1, 0)


def from_dlpack(dlcapsule):
    """An eager tensor over the memory of a DLPack capsule or of an object with ``__dlpack__``."""
    if isinstance(dlcapsule, Tensor):
        return dlcapsule
    src = dlcapsule if hasattr(dlcapsule, "__dlpack__") else _Capsule(dlcapsule)
    if hasattr(src, "__dlpack_device__") and src.__dlpack_device__()[0] != 1:
        raise ValueError(f"from_dlpack: the data lives on DLPack device {src.__dlpack_device__()}; tensorweave "
                         "reads host (CPU) memory. Hint: move it to the CPU first")
    arr = np.from_dlpack(src)
    return EagerTensor(arr, _dt.from_numpy(arr.dtype))
