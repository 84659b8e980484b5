"""CPU kernels for ``ops/sort_ops.py``."""
import numpy as np

from tensorweave.core import errors
from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu.util import low_precision


def _argsort(x, axis, descending):
    """Stable argsort; descending keeps equal elements in their original order, like top_k."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    # Sorting the reversed array ascending and reading the result backwards gives a descending
    # order in which ties are in ascending original position (negating x would overflow ints).
    n = x.shape[axis]
    rev = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return (n - 1) - np.flip(rev, axis)


@k("ArgSort")
def _argsort_kernel(x, axis, direction):
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError("argsort needs a tensor of rank >= 1, got a scalar")
    return _argsort(x, axis, direction == "DESCENDING").astype(np.int32)


@k("TopKV2")
def _top_k(x, k, sorted):
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError("top_k needs a tensor of rank >= 1, got a scalar")
    n = x.shape[-1]
    if not 0 <= k <= n:
        raise errors.InvalidArgumentError(f"top_k: k = {k} must be in [0, {n}] (the size of the last dimension)")
    idx = _argsort(x, -1, True)[..., :k]
    return np.take_along_axis(x, idx, axis=-1), idx.astype(np.int32)


@k("TakeAlongAxis")
def _take_along_axis(x, indices, axis):
    return np.take_along_axis(np.asarray(x), np.asarray(indices).astype(np.intp, copy=False), axis=axis)


@k("TakeAlongAxisGrad")
def _take_along_axis_grad(g, indices, x, axis):
    g = np.asarray(g)
    out = np.zeros(np.shape(x), dtype=g.dtype)
    # The indices come from argsort/top_k, so they never repeat along the axis: plain
    # assignment is enough (no accumulation of duplicates as np.add.at would do, slowly).
    np.put_along_axis(out, np.asarray(indices).astype(np.intp, copy=False), g, axis=axis)
    return out


def _cumulative(ufunc, identity):
    def kernel(x, axis, exclusive, reverse):
        x = np.asarray(x)
        if x.ndim == 0:
            raise ValueError("cumulative ops need a tensor of rank >= 1, got a scalar")
        acc = np.float32 if x.dtype in low_precision() else x.dtype
        v = np.flip(x, axis) if reverse else x
        out = ufunc.accumulate(v.astype(acc, copy=False), axis=axis, dtype=acc)
        if exclusive:
            out = np.moveaxis(out, axis, 0)
            first = np.full((1,) + out.shape[1:], identity, dtype=acc)
            out = np.moveaxis(np.concatenate([first, out[:-1]], axis=0), 0, axis)
        if reverse:
            out = np.flip(out, axis)
        return np.ascontiguousarray(out).astype(x.dtype, copy=False)
    return kernel


k("Cumsum")(_cumulative(np.add, 0))
k("Cumprod")(_cumulative(np.multiply, 1))
