"""IndexedSlices: a sparse gradient (rows ``indices`` of a dense tensor hold ``values``).

Gradients of ``gather``/``embedding_lookup`` are IndexedSlices so that an optimizer can
update only the rows seen; they are densified only when something needs a dense tensor.
"""
import numpy as np

from tensorweave.core.tensor import Tensor


class IndexedSlices:
    __slots__ = ("values", "indices", "dense_shape", "_dense")

    def __init__(self, values, indices, dense_shape=None):
        self.values = values
        self.indices = indices
        self.dense_shape = dense_shape
        self._dense = None

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def shape(self):
        from tensorweave.core.shape import TensorShape
        ds = self.dense_shape
        if ds is None:
            return TensorShape(None)
        if isinstance(ds, np.ndarray):
            return TensorShape(ds.tolist())
        from tensorweave.core.graph import constant_value
        v = constant_value(ds)
        return TensorShape(None if v is None else v.tolist())

    def to_dense(self):
        """The dense tensor (rows at repeated indices are summed); built once per object."""
        if self._dense is None:
            self._dense = self._densify()
        return self._dense

    def _densify(self):
        from tensorweave.ops.array_ops import unsorted_segment_sum
        from tensorweave.ops.math_ops import cast
        ds = self.dense_shape
        n = ds[0] if isinstance(ds, (np.ndarray, list, tuple)) else ds[0]
        return unsorted_segment_sum(self.values, self.indices, cast(n, self.indices.dtype)
                                    if isinstance(n, Tensor) else int(n))

    def _tw_tensor_(self, dtype=None):
        return self.to_dense()

    def numpy(self):
        return self.to_dense().numpy()

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self):
        return f"IndexedSlices(indices={self.indices!r}, values={self.values!r}, dense_shape={self.dense_shape!r})"


def aggregate(grads):
    """Sums a list of gradients (dense tensors and/or IndexedSlices)."""
    grads = [g for g in grads if g is not None]
    if not grads:
        return None
    if len(grads) == 1:
        return grads[0]
    from tensorweave.ops.array_ops import concat
    from tensorweave.ops.math_ops import add_n
    if all(isinstance(g, IndexedSlices) for g in grads):
        return IndexedSlices(concat([g.values for g in grads], 0), concat([g.indices for g in grads], 0),
                             grads[0].dense_shape)
    return add_n([g.to_dense() if isinstance(g, IndexedSlices) else g for g in grads])
