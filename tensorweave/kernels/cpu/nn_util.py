"""Helpers shared by the nn kernel modules (``nn_kernels``, ``conv_kernels``, ``pool_kernels``):
dtype checks, channels-last moves, padding and window geometry.

Window kernels work channels-last (``[N, *spatial, C]``); channels-first inputs are moved
with views. Half-precision inputs are computed in float32 and rounded once at the end.
"""
import numpy as np
from numpy.lib.stride_tricks import as_strided

from tensorweave.kernels.cpu.util import low_precision
from tensorweave.ops.nn_ops import spatial_geometry


def is_float(a):
    return a.dtype.kind == "f" or a.dtype in low_precision()


def floats(*arrays):
    """The one float dtype of ``arrays``; rejects non-float or mixed dtypes (NumPy would
    silently promote them)."""
    d = arrays[0].dtype
    for a in arrays:
        if not is_float(a) or a.dtype != d:
            raise TypeError("expected floating inputs of one dtype")
    return d


def work(a):
    """``a`` in its computation dtype: float32 for float16/bfloat16."""
    return a.astype(np.float32) if a.dtype in low_precision() else a


def channels_first(data_format):
    return data_format.startswith("NC")


def to_last(x, cf):
    return np.moveaxis(x, 1, -1) if cf else x


def from_last(y, cf):
    return np.ascontiguousarray(np.moveaxis(y, -1, 1)) if cf else y


def pad(x, pads, value=0):
    """``x`` (``[N, *S, C]``) padded spatially by ``pads`` (``[(before, after)]``); ``x`` itself
    when there is no padding."""
    if not any(b or a for b, a in pads):
        return x
    return np.pad(x, [(0, 0)] + [tuple(p) for p in pads] + [(0, 0)], constant_values=value)


def windows(xp, out, ksize, strides, dilations):
    """Read-only view ``[N, *out, *ksize, C]`` of every window of ``xp`` (``[N, *S, C]``)."""
    s = xp.strides
    nd = len(out)
    shape = (xp.shape[0],) + tuple(out) + tuple(ksize) + (xp.shape[-1],)
    st = ((s[0],) + tuple(s[1 + i] * strides[i] for i in range(nd))
          + tuple(s[1 + i] * dilations[i] for i in range(nd)) + (s[-1],))
    return as_strided(xp, shape, st, writeable=False)


def group_windows(xp, out, ksize, strides, dilations, groups):
    """Read-only view ``[G, N, *out, *ksize, C/G]``: the windows with groups leading."""
    s = xp.strides
    nd = len(out)
    cg = xp.shape[-1] // groups
    shape = (groups, xp.shape[0]) + tuple(out) + tuple(ksize) + (cg,)
    st = ((cg * s[-1], s[0]) + tuple(s[1 + i] * strides[i] for i in range(nd))
          + tuple(s[1 + i] * dilations[i] for i in range(nd)) + (s[-1],))
    return as_strided(xp, shape, st, writeable=False)


def offset_slices(offs, dilations, strides, out):
    """The padded-input positions that window offset ``offs`` touches, for every output."""
    return (slice(None),) + tuple(slice(o * d, o * d + s * (n - 1) + 1, s)
                                  for o, d, s, n in zip(offs, dilations, strides, out)) + (slice(None),)


def geometry(sizes, ksize, strides, dilations, padding):
    """``(output sizes, [(pad before, pad after)])`` per spatial dimension."""
    geo = spatial_geometry(sizes, ksize, strides, dilations, padding)
    return tuple(g[0] for g in geo), [(g[1], g[2]) for g in geo]


def crop(xp, pads, sizes):
    return xp[(slice(None),) + tuple(slice(b, b + n) for (b, _), n in zip(pads, sizes)) + (slice(None),)]
