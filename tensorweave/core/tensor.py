"""Tensors: the values ops consume and produce.

``Tensor`` is the common base. An ``EagerTensor`` holds a value (NumPy array); a
``SymbolicTensor`` (in ``graph.py``) is an output of a graph node whose value exists
only when a Session or ``tw.function`` runs it. Python operators are installed on the
base class by ``tensorweave.ops.overloads``.

>>> import tensorweave as tw
>>> x = tw.constant([[1.0, 2.0]])
>>> (x * 2).numpy()
array([[2., 4.]], dtype=float32)
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import upcalls
from tensorweave.core.shape import TensorShape


class Tensor:
    """Base of eager and symbolic tensors (``isinstance(x, tw.Tensor)`` holds for both)."""

    __slots__ = ()
    # Make NumPy defer to our operators in `ndarray + Tensor`.
    __array_priority__ = 100
    is_global = False     # a global tensor (placement + SBP, distribute package) overrides it

    @property
    def ndim(self):
        return self.shape.rank

    def get_shape(self):
        return self.shape

    def ref(self):
        return _TensorRef(self)

    def __hash__(self):
        return id(self)


class _TensorRef:
    __slots__ = ("_t",)

    def __init__(self, t):
        self._t = t

    def deref(self):
        return self._t

    def __hash__(self):
        return id(self._t)

    def __eq__(self, other):
        return isinstance(other, _TensorRef) and other._t is self._t


class EagerTensor(Tensor):
    """A tensor with a value, produced by eager execution."""

    __slots__ = ("_value", "_dtype", "_device", "_keras_mask", "__weakref__")

    def __init__(self, value, dtype=None, device=None):
        self._value = value
        self._dtype = dtype if dtype is not None else _dt.from_numpy(value.dtype)
        self._device = device

    @property
    def dtype(self):
        return self._dtype

    @property
    def shape(self):
        return TensorShape(np.shape(self._value))

    @property
    def device(self):
        from tensorweave.core.devices import canonical_device
        return canonical_device(self._device)

    @property
    def name(self):
        raise AttributeError("Tensor.name is undefined when eager execution is enabled.")

    @property
    def graph(self):
        raise AttributeError("Tensor.graph is undefined when eager execution is enabled.")

    def numpy(self):
        """The value as a NumPy array (shares memory with the tensor; do not modify it)."""
        v = self._value
        if type(v) is np.ndarray:
            return v if v.ndim else v[()]
        return v if isinstance(v, np.generic) else np.asarray(v)

    def __array__(self, dtype=None, copy=None):
        v = np.asarray(self._value)
        if dtype is not None and v.dtype != dtype:
            return v.astype(dtype)
        if copy:
            return v.copy()
        return v

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """The DLPack capsule of the value (zero-copy; see ``tw.experimental.dlpack``)."""
        if self._dtype.np_dtype is None or self._dtype.name in ("string", "bfloat16"):
            raise TypeError(f"to_dlpack: dtype {self._dtype.name} has no DLPack type that NumPy can export")
        a = np.asarray(self._value)
        if not a.flags.writeable:
            a = a.copy()   # NumPy refuses to export read-only memory (DLPack < 1.0 has no read-only flag)
        kwargs = {k: v for k, v in (("stream", stream), ("max_version", max_version), ("dl_device", dl_device),
                                    ("copy", copy)) if v is not None}
        return a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (1, 0)   # kDLCPU, device 0: eager values live in host memory

    def __len__(self):
        s = np.shape(self._value)
        if not s:
            raise TypeError("len() of a 0-d tensor")
        return s[0]

    def __iter__(self):
        if not np.shape(self._value):
            raise TypeError("Cannot iterate over a scalar tensor.")
        return iter(upcalls.unstack(self))

    def __bool__(self):
        return bool(self._value)

    def __float__(self):
        return float(self._value)

    def __int__(self):
        return int(self._value)

    def __index__(self):
        if not self._dtype.is_integer:
            raise TypeError(f"Only integer tensors can be used as an index, got {self._dtype.name}")
        return int(self._value)

    def __complex__(self):
        return complex(self._value)

    def __format__(self, spec):
        if not np.shape(self._value):
            return format(self._value.item() if hasattr(self._value, "item") else self._value, spec)
        return format(str(self), spec)

    def __repr__(self):
        v = np.asarray(self._value)
        shown = repr(v) if v.ndim else repr(v.item())
        return f"<tw.Tensor: shape={v.shape}, dtype={self._dtype.name}, numpy={chr(10) if v.ndim else ''}{shown}>"

    def __str__(self):
        return f"tw.Tensor({np.asarray(self._value)}, shape={tuple(np.shape(self._value))}, dtype={self._dtype.name})"

    def __reduce__(self):
        return EagerTensor, (np.asarray(self._value), self._dtype)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return EagerTensor(np.array(self._value), self._dtype, self._device)
