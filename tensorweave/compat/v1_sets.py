"""TF1's ``tf.sets``: set operations along the last dimension of dense or sparse tensors
(``set_intersection``, ``set_union``, ``set_difference``, ``set_size`` and TF2's short names).
Each result is a SparseTensor holding every row's set in increasing order, as TF's.

>>> import tensorweave.compat.v1 as tf
>>> s = tf.sets.set_intersection([[1, 2, 3], [4, 5, 6]], [[2, 3, 9], [7, 7, 4]])
>>> s.values.numpy().tolist(), s.dense_shape.numpy().tolist()
([2, 3, 4], [2, 2])
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.ops import array_ops as _a
from tensorweave.ops.script_ops import numpy_function

__all__ = ["set_intersection", "set_union", "set_difference", "set_size", "intersection", "union", "difference",
           "size"]


def _parts(x):
    """(indices, values, dense_shape) tensors of a SparseTensor, or a dense tensor's values."""
    if hasattr(x, "indices") and hasattr(x, "dense_shape"):
        return [x.indices, x.values, x.dense_shape], True
    return [convert_to_tensor(x)], False


def _rows(arrays, sparse):
    """{row index tuple: set of values} and the leading shape."""
    if sparse:
        indices, values, shape = arrays
        rows = {}
        for i, v in zip(np.asarray(indices), np.asarray(values, dtype=object)):
            rows.setdefault(tuple(int(k) for k in i[:-1]), set()).add(v)
        return rows, tuple(int(d) for d in np.asarray(shape)[:-1])
    (dense,) = arrays
    dense = np.asarray(dense, dtype=object)
    return {loc: set(dense[loc].tolist()) for loc in np.ndindex(*dense.shape[:-1])}, dense.shape[:-1]


def _set_op(a, b, combine, dtype_name):
    pa, sa = _parts(a)
    pb, sb = _parts(b) if b is not None else ([], False)
    values_of = (pa[1] if sa else pa[0])
    dtype = values_of.dtype
    if b is not None:
        other = pb[1] if sb else pb[0]
        if other.dtype is not dtype:
            raise TypeError(f"tf.sets.{dtype_name}: a and b must have the same dtype, got {dtype.name} and "
                            f"{other.dtype.name}")
    na = len(pa)

    def run(*arrays):
        ra, lead = _rows(arrays[:na], sa)
        rb = _rows(arrays[na:], sb)[0] if b is not None else {}
        out_idx, out_val, width = [], [], 0
        for loc in np.ndindex(*lead):
            items = sorted(combine(ra.get(loc, set()), rb.get(loc, set())))
            width = max(width, len(items))
            for j, v in enumerate(items):
                out_idx.append(list(loc) + [j])
                out_val.append(v)
        rank = len(lead) + 1
        return (np.asarray(out_idx, np.int64).reshape(-1, rank), np.asarray(out_val, dtype=dtype.np_dtype),
                np.asarray(list(lead) + [width], np.int64))
    from tensorweave.sparse import SparseTensor
    indices, values, shape = numpy_function(run, pa + pb, [_dt.int64, dtype, _dt.int64], stateful=False,
                                            name=f"Set{dtype_name.title()}")
    return SparseTensor(indices, _a.reshape(values, [-1]), _a.reshape(shape, [-1]))


def set_intersection(a, b, validate_indices=True):
    """The values in both ``a`` and ``b``, per row."""
    return _set_op(a, b, lambda x, y: x & y, "intersection")


def set_union(a, b, validate_indices=True):
    """The values in ``a`` or ``b``, per row."""
    return _set_op(a, b, lambda x, y: x | y, "union")


def set_difference(a, b, aminusb=True, validate_indices=True):
    """The values of ``a`` not in ``b`` (``aminusb=False``: of ``b`` not in ``a``), per row."""
    return _set_op(a, b, (lambda x, y: x - y) if aminusb else (lambda x, y: y - x), "difference")


def set_size(a, validate_indices=True):
    """The number of distinct values in each row of the SparseTensor ``a`` (int32)."""
    if not (hasattr(a, "indices") and hasattr(a, "dense_shape")):
        raise TypeError(f"tf.sets.set_size: expected a SparseTensor, got {type(a).__name__}")
    counted = _set_op(a, None, lambda x, _: x, "size")
    from tensorweave.sparse import to_dense
    ones = counted.with_values(_a.ones_like(_a.reshape(counted.indices[:, 0], [-1]), dtype=_dt.int32))
    from tensorweave.ops.reduce_ops import reduce_sum
    return reduce_sum(to_dense(ones), axis=-1)


intersection, union, difference, size = set_intersection, set_union, set_difference, set_size
