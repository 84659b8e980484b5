"""CPU kernels for ``MaxPool``/``AvgPool`` (N-d) and their gradients (``ops/nn_ops.py``).

``MaxPool`` and ``MaxPoolGrad`` run a compiled loop (``nn_loops.max_windows``) that scans
each window once per output and skips padded positions, so neither a padded copy of the
input nor a window-sized argmax array is made, and the gradient is scattered in the same
pass. Dtypes numba lacks (float16, bfloat16) go through float32, which is exact for a max and
rounds the gradient sum once; any other dtype takes the NumPy path (window views, argmax).
The winner of a window is its first maximum in raster order (a NaN counts as the maximum),
which is where TensorFlow sends the gradient.
"""
import numpy as np

from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu import nn_loops, pool_tiled
from tensorweave.kernels.cpu.nn_util import (channels_first, crop, floats, from_last, geometry, is_float,
                                             offset_slices, pad, to_last, windows, work)
from tensorweave.kernels.cpu.tiles import over_tiles

#: Input bytes per tile of the compiled pooling loops.
_TILE_BYTES = 1 << 20

_COMPILED = {np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                                   np.uint8, np.uint16, np.uint32, np.uint64)}


def _lowest(dtype):
    """The smallest value of ``dtype``, as a scalar of that dtype."""
    return dtype.type(np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf)


def _pool_setup(x, ksize, strides, padding, data_format):
    nd = len(ksize)
    if x.ndim != nd + 2:
        raise ValueError("wrong rank")
    if not isinstance(padding, str):
        raise ValueError("pooling supports only SAME and VALID padding")
    cf = channels_first(data_format)
    x = to_last(x, cf)
    out, pads = geometry(x.shape[1:-1], ksize, strides, (1,) * nd, padding)
    return x, cf, out, pads


def _loop_args(ksize, strides, pads):
    nd = len(ksize)
    return (nn_loops.params_3d(ksize, nd, 1), nn_loops.params_3d(strides, nd, 1),
            nn_loops.params_3d([b for b, _ in pads], nd, 0))


def _tiles_input(sizes, ksize, strides, pads):
    """Whether the windows cover the input exactly once (2x2 windows with stride 2 on even sizes)."""
    return (tuple(ksize) == tuple(strides) and not any(b or a for b, a in pads)
            and all(n % kz == 0 for n, kz in zip(sizes, ksize)))


def _max_windows(x, ksize, strides, pads, g, res, grad, tiled=False):
    """The compiled loop over tiles of the batch, on the intra-op threads (a memory-bound
    pass: the cnn's MaxPoolGrad took 5.2 ms on one thread)."""
    nd = len(ksize)
    args = _loop_args(ksize, strides, pads)
    x3, g3, r3 = nn_loops.as_3d(x, nd), nn_loops.as_3d(g, nd), nn_loops.as_3d(res, nd)

    def run(b0, b1, _scratch):
        nn_loops.max_windows(x3[b0:b1], *args, g3[b0:b1], r3[b0:b1], grad, tiled)
    over_tiles(x.shape[0], x[:1].nbytes, _TILE_BYTES, run)


def _max_tiled(x, ksize, y):
    """``pool_tiled.max_tiled`` (values only) over tiles of the batch on the intra-op threads, as
    :func:`_max_windows` runs the general loop: the cnn's 128x24x24x64 took the general loop, which
    also tracks each window's winning position (int64: half the vector lanes)."""
    def run(b0, b1, _scratch):
        pool_tiled.max_tiled(x[b0:b1], ksize[0], ksize[1], y[b0:b1])
    over_tiles(x.shape[0], x[:1].nbytes, _TILE_BYTES, run, blas=False)


def _argmax_windows(x, ksize, strides, out, pads):
    """Index (raster order inside the window) of each window's first maximum: ``[N, *out, C]``."""
    xp = pad(x, pads, _lowest(x.dtype))
    w = windows(xp, out, ksize, strides, (1,) * len(ksize))
    flat = w.reshape(w.shape[:1 + len(out)] + (-1, w.shape[-1]))
    return np.argmax(flat, axis=-2), xp.shape


# ---- max pooling ----------------------------------------------------------------------------------
@k("MaxPool")
def _max_pool(x, ksize, strides, padding, data_format):
    if not (is_float(x) or x.dtype.kind in "iu"):
        raise TypeError("max_pool needs a numeric input")
    dt = x.dtype
    x, cf, out, pads = _pool_setup(x, ksize, strides, padding, data_format)
    nd = len(ksize)
    xw = work(x)
    if xw.dtype in _COMPILED:
        y = np.empty((x.shape[0],) + out + (x.shape[-1],), xw.dtype)
        if nd == 2 and xw.dtype in pool_tiled.DTYPES and _tiles_input(xw.shape[1:-1], ksize, strides, pads):
            _max_tiled(xw, ksize, y)                            # values only (pool_tiled.py)
        else:
            _max_windows(xw, ksize, strides, pads, y, y, False)
    else:
        w = windows(pad(x, pads, _lowest(x.dtype)), out, ksize, strides, (1,) * nd)
        y = np.max(w, axis=tuple(range(1 + nd, 1 + 2 * nd)))
    return from_last(y, cf).astype(dt, copy=False)


@k("MaxPoolGrad")
def _max_pool_grad(x, g, ksize, strides, padding, data_format):
    dt = floats(x, g)
    x, cf, out, pads = _pool_setup(x, ksize, strides, padding, data_format)
    g = work(to_last(g, cf))
    if g.shape != (x.shape[0],) + out + (x.shape[-1],):
        raise ValueError("grad does not match the pooling output shape")
    nd = len(ksize)
    xw = work(x)
    if xw.dtype in _COMPILED:
        # Windows covering the input once write every element: no zeroing pass needed.
        tiled = _tiles_input(x.shape[1:-1], ksize, strides, pads)
        dx = (np.empty if tiled else np.zeros)(x.shape, g.dtype)
        _max_windows(xw, ksize, strides, pads, g, dx, True, tiled)
    else:
        idx, padded = _argmax_windows(x, ksize, strides, out, pads)
        dxp = np.zeros(padded, g.dtype)
        zero = np.zeros((), g.dtype)
        for i, offs in enumerate(np.ndindex(*ksize)):
            dxp[offset_slices(offs, (1,) * nd, strides, out)] += np.where(idx == i, g, zero)
        dx = crop(dxp, pads, x.shape[1:-1])
    return from_last(dx, cf).astype(dt, copy=False)


@k("MaxPoolGradGrad")
def _max_pool_grad_grad(x, gg, ksize, strides, padding, data_format):
    """Picks ``gg`` (shaped like ``x``) at each window's argmax: ``[N, *out, C]``."""
    dt = floats(x, gg)
    x, cf, out, pads = _pool_setup(x, ksize, strides, padding, data_format)
    gg = to_last(gg, cf)
    if gg.shape != x.shape:
        raise ValueError("grad must have the input's shape")
    idx, _ = _argmax_windows(x, ksize, strides, out, pads)
    w = windows(pad(gg, pads), out, ksize, strides, (1,) * len(ksize))
    flat = w.reshape(w.shape[:1 + len(out)] + (-1, w.shape[-1]))
    picked = np.take_along_axis(flat, idx[..., None, :], axis=-2)[..., 0, :]
    return from_last(picked, cf).astype(dt, copy=False)


# ---- average pooling ------------------------------------------------------------------------------
def _valid_counts(sizes, out, pads, ksize, strides):
    """How many real (unpadded) elements each window covers: ``[*out]`` (TF's SAME average)."""
    counts = np.ones((), np.int64)
    for n, o, (b, _), kz, s in zip(sizes, out, pads, ksize, strides):
        start = np.arange(o) * s - b
        c = np.minimum(start + kz, n) - np.maximum(start, 0)
        counts = np.multiply.outer(counts, c)
    return counts


@k("AvgPool")
def _avg_pool(x, ksize, strides, padding, data_format):
    dt = floats(x)
    x, cf, out, pads = _pool_setup(x, ksize, strides, padding, data_format)
    nd = len(ksize)
    xw = work(x)
    w = windows(pad(xw, pads), out, ksize, strides, (1,) * nd)
    s = np.sum(w, axis=tuple(range(1 + nd, 1 + 2 * nd)))
    counts = _valid_counts(x.shape[1:-1], out, pads, ksize, strides)
    y = s / counts[..., None].astype(xw.dtype)
    return from_last(y, cf).astype(dt, copy=False)


@k("AvgPoolGrad")
def _avg_pool_grad(orig_input_shape, g, ksize, strides, padding, data_format):
    dt = floats(g)
    nd = len(ksize)
    shape = tuple(int(v) for v in np.asarray(orig_input_shape).reshape(-1))
    if len(shape) != nd + 2 or g.ndim != nd + 2:
        raise ValueError("wrong rank")
    cf = channels_first(data_format)
    if cf:
        shape = (shape[0],) + shape[2:] + (shape[1],)
    sizes = shape[1:-1]
    out, pads = geometry(sizes, ksize, strides, (1,) * nd, padding)
    g = work(to_last(g, cf))
    if g.shape != (shape[0],) + out + (shape[-1],):
        raise ValueError("grad does not match the pooling output shape")
    gs = g / _valid_counts(sizes, out, pads, ksize, strides)[..., None].astype(g.dtype)
    padded = tuple(s + b + a for s, (b, a) in zip(sizes, pads))
    dxp = np.zeros((shape[0],) + padded + (shape[-1],), g.dtype)
    for offs in np.ndindex(*ksize):
        dxp[offset_slices(offs, (1,) * nd, strides, out)] += gs
    return from_last(crop(dxp, pads, sizes), cf).astype(dt, copy=False)
