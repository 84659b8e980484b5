"""``tw.SparseTensor``: a tensor stored as the coordinates and values of its non-default entries.

Three tensors: ``indices`` (int64 ``[N, rank]``), ``values`` (``[N]``) and ``dense_shape`` (int64
``[rank]``), as in TensorFlow. Ops on sparse tensors (``tw.sparse``) are compositions of dense
ops on these components, so they run eagerly and in graphs, and gradients flow to ``values``
(and to dense operands) through ``gather``/``scatter``/``unsorted_segment_sum``.

>>> import tensorweave as tw
>>> st = tw.SparseTensor(indices=[[0, 1], [2, 0]], values=[5.0, 7.0], dense_shape=[3, 2])
>>> tw.sparse.to_dense(st).numpy().tolist()
[[0.0, 5.0], [0.0, 0.0], [7.0, 0.0]]
>>> st.shape, st.dtype
(TensorShape([3, 2]), tw.float32)
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import get_static_value
from tensorweave.core.shape import TensorShape
from tensorweave.core.tensor import EagerTensor


class SparseTensor:
    """A sparse tensor: ``indices [N, rank]`` (int64), ``values [N]``, ``dense_shape [rank]`` (int64)."""

    _tw_composite_ = "sparse"   # zero-preserving unary ops map over the values (ops/composite_dispatch.py)

    def __init__(self, indices, values, dense_shape):
        ind = convert_to_tensor(indices, dtype_hint=_dt.int64)
        if ind.dtype is not _dt.int64:
            from tensorweave.ops.math_ops import cast
            ind = cast(ind, _dt.int64)
        shp = convert_to_tensor(dense_shape, dtype_hint=_dt.int64)
        if shp.dtype is not _dt.int64:
            from tensorweave.ops.math_ops import cast
            shp = cast(shp, _dt.int64)
        vals = convert_to_tensor(values)
        if ind.shape.rank != 2:
            raise ValueError(f"SparseTensor: indices must be a matrix [N, rank], got shape {ind.shape.as_list()}")
        if vals.shape.rank != 1:
            raise ValueError(f"SparseTensor: values must be a vector [N], got shape {vals.shape.as_list()}")
        n_i, n_v = ind.shape[0], vals.shape[0]
        if n_i is not None and n_v is not None and n_i != n_v:
            raise ValueError(f"SparseTensor: {n_i} indices but {n_v} values")
        if shp.shape.rank != 1:
            raise ValueError(f"SparseTensor: dense_shape must be a vector, got shape {shp.shape.as_list()}")
        if ind.shape[1] is not None and shp.shape[0] is not None and ind.shape[1] != shp.shape[0]:
            raise ValueError(f"SparseTensor: indices have {ind.shape[1]} columns but dense_shape has rank "
                             f"{shp.shape[0]}")
        self.indices, self.values, self.dense_shape = ind, vals, shp

    @classmethod
    def from_value(cls, value):
        if isinstance(value, SparseTensor):
            return value
        if isinstance(value, SparseTensorValue):
            return cls(*value)
        raise TypeError(f"Expected a SparseTensor, got {type(value).__name__}")

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def shape(self):
        static = get_static_value(self.dense_shape) if not isinstance(self.dense_shape, EagerTensor) \
            else self.dense_shape.numpy()
        if static is None:
            return TensorShape([None] * self.dense_shape.shape[0]) if self.dense_shape.shape[0] is not None \
                else TensorShape(None)
        return TensorShape([int(d) for d in np.asarray(static)])

    def get_shape(self):
        return self.shape

    @property
    def ndim(self):
        return self.shape.rank

    def with_values(self, new_values):
        """The same sparsity pattern with other values."""
        return SparseTensor(self.indices, new_values, self.dense_shape)

    def to_dense(self, default_value=None):
        from tensorweave.sparse.sparse_ops import to_dense
        return to_dense(self, default_value)

    def numpy(self):
        """A SparseTensorValue-like triple of NumPy arrays."""
        return SparseTensorValue(self.indices.numpy(), self.values.numpy(), self.dense_shape.numpy())

    def __repr__(self):
        return (f"SparseTensor(indices={self.indices!r}, values={self.values!r}, "
                f"dense_shape={self.dense_shape!r})")

    def __mul__(self, other):
        from tensorweave.sparse.sparse_ops import _elementwise_dense
        return _elementwise_dense(self, other, lambda a, b: a * b)

    def __truediv__(self, other):
        from tensorweave.sparse.sparse_ops import _elementwise_dense
        return _elementwise_dense(self, other, lambda a, b: a / b)

    def __neg__(self):
        return self.with_values(-self.values)

    def __add__(self, other):
        from tensorweave.sparse.sparse_ops import add
        return add(self, other)

    __radd__ = __add__


class SparseTensorValue:
    """The value of a SparseTensor as NumPy arrays (``tf.compat.v1.SparseTensorValue``)."""

    def __init__(self, indices, values, dense_shape):
        self.indices, self.values, self.dense_shape = indices, values, dense_shape

    def __iter__(self):
        return iter((self.indices, self.values, self.dense_shape))

    def __repr__(self):
        return f"SparseTensorValue(indices={self.indices!r}, values={self.values!r}, dense_shape={self.dense_shape!r})"


def is_sparse(x):
    return isinstance(x, SparseTensor)


def as_sparse(x, what):
    if not isinstance(x, SparseTensor):
        raise TypeError(f"{what}: expected a tw.SparseTensor, got {type(x).__name__}. "
                        "Hint: tw.sparse.from_dense(x) makes one from a dense tensor")
    return x


