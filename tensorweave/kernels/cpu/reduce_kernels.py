"""CPU kernels for ``ops/reduce_ops.py``."""
import math

import numpy as np

from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu.jit import njit


@njit
def _sum_middle(x, out):
    # Slice after slice into ``out`` (zeros), as NumPy adds along a non-last axis of a contiguous
    # array (from its identity 0: a column of -0.0 sums to 0.0; then each slice in turn: the same
    # sums; its pairwise sums are along the last axis only), but ~3x faster than np.add.reduce
    # for a middle axis with a short trailing block, and without the GIL (a rank thread's bias
    # gradients, SumToLike, run beside the other rank's work).
    for a in range(x.shape[0]):
        o = out[a]
        for r in range(x.shape[1]):
            row = x[a, r]
            for b in range(x.shape[2]):
                o[b] += row[b]


#: the dtypes :func:`_middle_sum` adds with its compiled loop
_MIDDLE = (np.dtype(np.float32), np.dtype(np.float64))


def _middle_sum(x, axis, keepdims):
    """``x.sum(axis)`` through :func:`_sum_middle` when the reduced axes are consecutive,
    not the last, and the array is contiguous float; else None."""
    if x.dtype not in _MIDDLE or not x.flags.c_contiguous or x.ndim < 2 or axis is None:
        return None
    # (the axis tuple as it comes and math.prod of the shape's ints: np.atleast_1d and three np.prod
    # calls on tuples made encoder2_predict's mean over [1, 128, 256] 24 µs of thread CPU, now 8;
    # issue 18, enc29)
    listed = axis if isinstance(axis, (tuple, list)) else np.atleast_1d(axis).tolist()
    axes = sorted(int(a) % x.ndim for a in listed)
    if not axes or axes[-1] == x.ndim - 1 or axes != list(range(axes[0], axes[-1] + 1)):
        return None
    lead, mid = x.shape[:axes[0]], x.shape[axes[0]:axes[-1] + 1]
    trail = x.shape[axes[-1] + 1:]
    b = math.prod(trail)
    if b < 8 or x.size == 0:
        return None
    out = np.zeros((math.prod(lead), b), x.dtype)
    _sum_middle(x.reshape(out.shape[0], math.prod(mid), b), out)
    return out.reshape(lead + ((1,) * len(mid) if keepdims else ()) + trail)


def _reducer(fn, keep_dtype=True):
    def kernel(x, axis, keepdims):
        out = fn(x, axis=axis, keepdims=keepdims)
        if keep_dtype and out.dtype != x.dtype:
            out = out.astype(x.dtype)
        return out
    return kernel


_np_sum = _reducer(np.sum)


@k("Sum")
def _sum(x, axis, keepdims):
    out = _middle_sum(x, axis, keepdims)
    return _np_sum(x, axis, keepdims) if out is None else out


k("Prod")(_reducer(np.prod))
k("Any")(_reducer(np.any))
k("All")(_reducer(np.all))


#: the dtypes a whole 1-D Mean takes np.mean's two steps for directly (:func:`_mean`)
_MEAN_1D = (np.dtype(np.float32), np.dtype(np.float64))


@k("Mean")
def _mean(x, axis, keepdims):
    if x.ndim == 1 and x.size and not keepdims and x.dtype in _MEAN_1D and (
            axis is None or type(axis) is tuple and len(axis) == 1 and axis[0] in (0, -1)):
        # a loss's mean over the batch: np.mean's own steps (its pairwise sum, then the sum over the
        # count as an intp, rounded back to x's dtype: the same bits) without its ~10 µs of Python
        # (a data-parallel rank's loss, GIL held; issue 13 dp23)
        total = np.add.reduce(x)
        return total.dtype.type(total / np.intp(x.size))
    if x.dtype.kind in "iu":
        # TensorFlow's integer mean is the truncated integer quotient.
        s = np.sum(x, axis=axis, keepdims=keepdims, dtype=np.int64)
        n = x.size // max(s.size, 1) if x.size else 0
        return (np.trunc(s / n) if n else s).astype(x.dtype)
    if x.size == 0:
        # 0/0 = nan where a reduced slice is empty (np.mean would also warn).
        with np.errstate(all="ignore"):
            s = np.sum(x, axis=axis, keepdims=keepdims, dtype=np.float64)
            return (s / 0.0).astype(x.dtype)
    total = _middle_sum(x, axis, keepdims)
    if total is not None:
        return total / x.dtype.type(x.size // max(total.size, 1))   # np.mean's sum / count
    return np.mean(x, axis=axis, keepdims=keepdims, dtype=np.float32 if x.dtype.itemsize < 4 else None).astype(x.dtype, copy=False)


@k("Max")
def _max(x, axis, keepdims):
    if x.size == 0:
        init = np.iinfo(x.dtype).min if x.dtype.kind in "iu" else -np.inf  # bfloat16's kind is "V"
        return np.max(x, axis=axis, keepdims=keepdims, initial=init).astype(x.dtype)
    return np.max(x, axis=axis, keepdims=keepdims)


@k("Min")
def _min(x, axis, keepdims):
    if x.size == 0:
        init = np.iinfo(x.dtype).max if x.dtype.kind in "iu" else np.inf
        return np.min(x, axis=axis, keepdims=keepdims, initial=init).astype(x.dtype)
    return np.min(x, axis=axis, keepdims=keepdims)


@k("ArgMax")
def _argmax(x, axis, output_type):
    return np.argmax(x, axis=axis).astype(output_type.np_dtype)


@k("ArgMin")
def _argmin(x, axis, output_type):
    return np.argmin(x, axis=axis).astype(output_type.np_dtype)
