"""Summing the duplicate rows of a sparse gradient: the ``UniqueSegmentSum`` op.

A gradient of ``gather``/``embedding_lookup`` is an :class:`~tensorweave.IndexedSlices`
whose ``indices`` may repeat (the same embedding row used twice in a batch). Row-wise
optimizer updates read, change and write back each touched row once, so the repeats are
summed first: ``unique_indices, summed_values = dedupe(indices, values)``.

>>> import numpy as np, tensorweave as tw
>>> from tensorweave.keras.optimizers.sparse_ops import unique_segment_sum
>>> idx, vals = unique_segment_sum(tw.constant([3, 1, 3]), tw.constant([[1.0], [2.0], [4.0]]))
>>> idx.numpy().tolist(), vals.numpy().tolist()
([1, 3], [[2.0], [5.0]])
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import get_op, register_kernel, register_op
from tensorweave.core.shape import TensorShape
from tensorweave.kernels.cpu import prefetch
from tensorweave.kernels.cpu.jit import njit


def _infer(inputs, attrs):
    idx, values = inputs
    if idx.dtype not in (_dt.int32, _dt.int64):
        raise TypeError(f"UniqueSegmentSum: indices must be int32 or int64, got {idx.dtype.name}")
    if idx.shape.rank not in (None, 1):
        raise ValueError(f"UniqueSegmentSum: indices must be a vector, got rank {idx.shape.rank}")
    rest = None if values.shape.rank is None else values.shape.as_list()[1:]
    return [(TensorShape([None]), idx.dtype),
            (TensorShape(None if rest is None else [None] + rest), values.dtype),
            (idx.shape, idx.dtype)]


def _grad(op, g_unique, g_values, g_inverse):
    # Each input row went into the sum of its unique row: its gradient is that row's.
    from tensorweave.ops.array_ops import gather
    return [None, gather(g_values, op.outputs[2])]


# Outputs: the sorted unique indices, the summed rows, and for each input row the
# position of its unique index (the inverse map, used by the gradient).
register_op("UniqueSegmentSum", infer=_infer, num_outputs=3, grad=_grad)


@njit
def _segment_sum_rows(out, inverse, values):
    # Rows added in input order, as np.add.at does (same rounding), ~50x faster; the output row
    # a few rows on asked for ahead (``prefetch.py``: the sums of fasttext's 12,800 rows land in
    # 9,500 rows spread over 1.9 MB)
    n = inverse.shape[0]
    for r in range(n):
        if r + prefetch.AHEAD < n:
            prefetch.row(out, inverse[r + prefetch.AHEAD])
        o = out[inverse[r]]
        v = values[r]
        for j in range(v.shape[0]):
            o[j] += v[j]


@njit
def _unique_by_marking(indices, bound, uniq, inverse):
    """Sorted unique values of ``indices`` (all in ``[0, bound)``) into ``uniq`` and each one's
    position among them into ``inverse``, in O(n + bound) without sorting: mark the values seen,
    number the marks in order (embedding ids, bounded by the table). Returns how many are unique
    (``uniq``'s first entries). Outputs as arguments and a count back, a signature the
    ahead-of-time build serves (``aot_kernels``); returning a tuple of new arrays, the loop
    compiled in fasttext's first measured step (issue 18, session 22)."""
    position = np.full(bound, -1, np.int64)
    for i in indices:
        position[i] = 0
    n = 0
    for v in range(bound):
        if position[v] == 0:
            position[v] = n
            uniq[n] = v
            n += 1
    for r in range(indices.shape[0]):
        inverse[r] = position[indices[r]]
    return n


#: ids are marked (not sorted) below ``max(4 n, min(24 n, MARK_SPAN)) + 4096`` for ``n`` ids: marking
#: costs ~0.4 ns per table row and ~2.5 ns per id, ``np.unique`` ~25-30 ns per id (AMD EPYC, session
#: 24: the gru's and lstm's 2,560 ids in 20,000 rows 69 -> 17 µs). Beyond four per id the marks'
#: int64 array is capped at 8 MiB (MARK_SPAN rows).
MARK_SPAN = 1 << 20


def _mark_bound(n):
    """The largest id + 1 that :func:`_unique` marks rather than sorts, for ``n`` ids."""
    return max(4 * n, min(24 * n, MARK_SPAN)) + 4096


def _unique(indices):
    """``(sorted unique indices, inverse map)``, both of ``indices``' dtype."""
    if indices.size and indices.min() >= 0 and indices.max() < _mark_bound(indices.size):
        bound = int(indices.max()) + 1
        uniq, inverse = np.empty(min(bound, indices.size), indices.dtype), np.empty_like(indices)
        return uniq[:_unique_by_marking(indices, bound, uniq, inverse)], inverse
    uniq, inverse = np.unique(indices, return_inverse=True)
    return uniq, inverse.reshape(-1).astype(indices.dtype, copy=False)


@register_kernel("UniqueSegmentSum", "CPU")
def _unique_segment_sum(indices, values):
    uniq, inverse = _unique(np.ascontiguousarray(indices).reshape(-1))
    out = np.zeros((len(uniq),) + values.shape[1:], dtype=values.dtype)
    if values.dtype.kind in "fiu" and values.dtype.itemsize >= 4 and out.size:
        _segment_sum_rows(out.reshape(len(uniq), -1), inverse,
                          np.ascontiguousarray(values).reshape(len(inverse), -1))
    else:
        np.add.at(out, inverse, values)
    return uniq, out, inverse


def unique_segment_sum(indices, values, name=None):
    """(sorted unique ``indices``, ``values`` rows summed per unique index)."""
    idx = convert_to_tensor(indices, dtype_hint=_dt.int32)
    vals = convert_to_tensor(values)
    uniq, summed, _ = execute(get_op("UniqueSegmentSum"), [idx, vals], {}, name)
    return uniq, summed
