"""``tw.SparseTensorSpec`` and ``tw.RaggedTensorSpec``: the shape and dtype a sparse or ragged value
must have (signatures, ``Dataset.element_spec``).

>>> import tensorweave as tw
>>> spec = tw.SparseTensorSpec([None, 4], tw.float32)
>>> spec.is_compatible_with(tw.SparseTensor([[0, 1]], [1.0], [3, 4]))
True
>>> tw.RaggedTensorSpec.from_value(tw.ragged.constant([[1], [2, 3]]))
RaggedTensorSpec(TensorShape([2, None]), tw.int32, 1)
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core.shape import as_shape


class SparseTensorSpec:
    """Shape and dtype of a :class:`~tensorweave.SparseTensor`."""
    __slots__ = ("shape", "dtype")

    def __init__(self, shape=None, dtype=_dt.float32):
        self.shape, self.dtype = as_shape(shape), _dt.as_dtype(dtype)

    @classmethod
    def from_value(cls, value):
        return cls(value.shape, value.dtype)

    def is_compatible_with(self, other):
        return self.dtype is _dt.as_dtype(other.dtype) and self.shape.is_compatible_with(other.shape)

    @property
    def value_type(self):
        from tensorweave.sparse.sparse_tensor import SparseTensor
        return SparseTensor

    def __eq__(self, other):
        return type(other) is type(self) and self.shape == other.shape and self.dtype is other.dtype

    def __hash__(self):
        return hash((self.shape, self.dtype))

    def __repr__(self):
        return f"SparseTensorSpec({self.shape!r}, {self.dtype!r})"


class RaggedTensorSpec:
    """Shape, dtype and ragged rank of a :class:`~tensorweave.RaggedTensor`."""
    __slots__ = ("shape", "dtype", "ragged_rank", "row_splits_dtype", "flat_values_spec")

    def __init__(self, shape=None, dtype=_dt.float32, ragged_rank=None, row_splits_dtype=_dt.int64,
                 flat_values_spec=None):
        self.shape, self.dtype = as_shape(shape), _dt.as_dtype(dtype)
        rank = self.shape.rank
        self.ragged_rank = (rank - 1 if rank is not None else 1) if ragged_rank is None else int(ragged_rank)
        self.row_splits_dtype = _dt.as_dtype(row_splits_dtype)
        self.flat_values_spec = flat_values_spec

    @classmethod
    def from_value(cls, value):
        return cls(value.shape, value.dtype, value.ragged_rank)

    def is_compatible_with(self, other):
        return (self.dtype is _dt.as_dtype(other.dtype) and self.shape.is_compatible_with(other.shape)
                and getattr(other, "ragged_rank", self.ragged_rank) == self.ragged_rank)

    @property
    def value_type(self):
        from tensorweave.ragged.ragged_tensor import RaggedTensor
        return RaggedTensor

    def __eq__(self, other):
        return (type(other) is type(self) and self.shape == other.shape and self.dtype is other.dtype
                and self.ragged_rank == other.ragged_rank)

    def __hash__(self):
        return hash((self.shape, self.dtype, self.ragged_rank))

    def __repr__(self):
        return f"RaggedTensorSpec({self.shape!r}, {self.dtype!r}, {self.ragged_rank})"
