"""``TensorSpec``: the shape and dtype a tensor argument must have (``tw.function`` signatures).

>>> import tensorweave as tw
>>> tw.TensorSpec([None, 3], tw.float32).is_compatible_with(tw.zeros([5, 3]))
True
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core.shape import as_shape, fmt


class TensorSpec:
    __slots__ = ("shape", "dtype", "name")

    def __init__(self, shape, dtype=_dt.float32, name=None):
        self.shape = as_shape(shape)
        self.dtype = _dt.as_dtype(dtype)
        self.name = name

    @classmethod
    def from_tensor(cls, t, name=None):
        return cls(t.shape, t.dtype, name)

    def is_compatible_with(self, other):
        return self.dtype is _dt.as_dtype(other.dtype) and self.shape.is_compatible_with(other.shape)

    def __eq__(self, other):
        return isinstance(other, TensorSpec) and self.shape == other.shape and self.dtype is other.dtype

    def __hash__(self):
        return hash((self.shape, self.dtype))

    def __repr__(self):
        return f"TensorSpec(shape={self.shape}, dtype=tw.{self.dtype.name}, name={self.name!r})"

    def __str__(self):
        return f"TensorSpec({fmt(self.shape)}, {self.dtype.name})"
