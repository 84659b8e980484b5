"""``tf.dynamic_partition``/``dynamic_stitch``, ``tf.histogram_fixed_width_bins`` and ``tf.bitcast``.

>>> import tensorweave as tw
>>> [p.numpy().tolist() for p in tw.dynamic_partition([10, 20, 30, 40], [1, 0, 1, 1], 2)]
[[20], [10, 30, 40]]
>>> tw.dynamic_stitch([[0, 2], [1]], [[1.0, 3.0], [2.0]]).numpy()
array([1., 2., 3.], dtype=float32)
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_kernel, register_op
from tensorweave.core.sbp import Split
from tensorweave.core.sbp_rules import signatures
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as R
from tensorweave.ops import segment_ops as S
from tensorweave.ops.indexing_ops import boolean_mask, range as _range

__all__ = ["dynamic_partition", "dynamic_stitch", "histogram_fixed_width_bins", "bitcast"]


def dynamic_partition(data, partitions, num_partitions, name=None):
    """``[data[partitions == i] for i in range(num_partitions)]`` (``partitions`` covers the leading
    dimensions of ``data``, values in ``[0, num_partitions)``)."""
    data = convert_to_tensor(data)
    p = convert_to_tensor(partitions)
    if p.dtype != _dt.int32:
        raise TypeError(f"dynamic_partition: partitions must be int32, got {p.dtype.name}")
    from tensorweave.core.graph import constant_value
    v = constant_value(p)
    if v is not None:
        v = np.asarray(v)
        if v.size and (v.min() < 0 or v.max() >= num_partitions):
            from tensorweave.core import errors
            raise errors.InvalidArgumentError(f"dynamic_partition: partitions must be in [0, "
                                              f"{num_partitions}), got values {sorted(set(v.ravel().tolist()))}")
    return [boolean_mask(data, M.equal(p, i)) for i in range(int(num_partitions))]


def dynamic_stitch(indices, data, name=None):
    """``merged[indices[m][i]] = data[m][i]``, later entries winning where an index repeats; the result
    has ``max(index) + 1`` rows."""
    idx = [convert_to_tensor(i) for i in indices]
    vals = [convert_to_tensor(d) for d in data]
    if len(idx) != len(vals):
        raise ValueError(f"dynamic_stitch: {len(idx)} index tensors but {len(vals)} data tensors")
    flat_idx = A.concat([A.reshape(i, [-1]) for i in idx], 0)

    def rows(v, i):   # data[m] as [entries of indices[m], ...]: static sizes where known (concat's gradient)
        n, tail = i.shape.num_elements(), v.shape[i.shape.rank:]
        if n is not None and tail.is_fully_defined():
            return A.reshape(v, [n] + tail.as_list())
        return A.reshape(v, A.concat([[-1], A.shape(v)[i.shape.rank:]], 0))
    flat_vals = A.concat([rows(v, i) for v, i in zip(vals, idx)], 0)
    n = R.reduce_max(flat_idx) + 1
    positions = _range(A.shape(flat_idx)[0], dtype=flat_idx.dtype)
    winner = S.unsorted_segment_max(positions, flat_idx, n)        # the last entry written to each row
    return A.gather(flat_vals, M.maximum(winner, 0), name=name)


def histogram_fixed_width_bins(values, value_range, nbins=100, dtype=_dt.int32, name=None):
    """The bin of each value among ``nbins`` equal bins over ``value_range`` (values outside go to the
    first or last bin)."""
    v = convert_to_tensor(values)
    r = M.cast(convert_to_tensor(value_range), v.dtype)
    scaled = (v - r[0]) / (r[1] - r[0])
    bins = M.floor(scaled * M.cast(nbins, v.dtype))
    return M.cast(M.clip_by_value(bins, 0, nbins - 1), dtype, name=name)


def _infer_bitcast(inputs, attrs):
    x, t = inputs[0], attrs["type"]
    a, b = x.dtype.size, t.size
    if x.shape.rank is None:
        return TensorShape(None), t
    dims = x.shape.as_list()
    if a == b:
        return x.shape, t
    if a > b:
        return TensorShape(dims + [a // b]), t
    if dims and dims[-1] not in (None, b // a):
        raise ValueError(f"bitcast: the last dimension must be {b // a} to cast {x.dtype.name} to {t.name}, got "
                         f"shape {fmt(x.shape)}")
    return TensorShape(dims[:-1]), t


def _bitcast_sbp(inputs, attrs):
    """Each element's bytes are reinterpreted in place: a split axis stays split, but for the
    last one when a larger type consumes it (its bytes make one value). Not linear: no P."""
    x = inputs[0]
    kept = x.rank - 1 if x.dtype is not None and x.dtype.size < attrs["type"].size else x.rank
    return [([Split(i)], [Split(i)]) for i in range(kept)]


register_op("Bitcast", infer=_infer_bitcast, grad=NOT_DIFFERENTIABLE, sbp=signatures(_bitcast_sbp))


@register_kernel("Bitcast", "CPU")
def _bitcast(x, type):
    x = np.ascontiguousarray(x)
    a, b = x.dtype.itemsize, np.dtype(type.np_dtype).itemsize
    if a == b:
        return x.view(type.np_dtype)
    if a > b:
        return x.view(type.np_dtype).reshape(x.shape + (a // b,))
    return x.view(type.np_dtype).reshape(x.shape[:-1])


def bitcast(input, type, name=None):
    """The same bytes seen as ``type``: equal sizes keep the shape; a smaller type adds a last dimension
    of ``size ratio``; a larger one consumes it."""
    x = convert_to_tensor(input)
    t = _dt.as_dtype(type)
    if x.dtype == _dt.string or t == _dt.string:
        raise TypeError("bitcast: string tensors cannot be bitcast")
    return execute(get_op("Bitcast"), [x], {"type": t}, name)
