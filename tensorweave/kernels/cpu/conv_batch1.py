"""A 2-D convolution of one image (batch-1 inference) by the route measured fastest for its shape
class: a direct loop with bias and ReLU fused, on this thread or over row tiles on the intra-op
threads, im2col + GEMM over row tiles, Winograd over bands of block rows on the intra-op threads
(where ``winograd`` applies), or the batch route (``conv_kernels``: Winograd, planes or im2col,
the incumbent).

Why: the batch routes tile over *images*, so one image is one tile on one thread, and a small
layer pays their Python more than its arithmetic: the cnn's first layer (28x28x1 -> 26x26x32,
195 K multiply-adds) took 194 µs of CPU by im2col + GEMM (issue 18, pred24, load 4), and its
second (26x26x32 -> 24x24x64) ran Winograd on one of the two cores. Here the direct loop does
the first in one pass over the output (each pixel's channels a vector, taps in raster order),
and row tiles put both cores on the second. Which route wins depends on the CPU, the BLAS and
the shape, so the first convolution of a class times the candidates (``gemm_tuning.Tuner``:
interleaved blocks, the incumbent kept unless another is ``MARGIN`` faster, settled only when
quiet) and the choice is kept in ``conv-batch1-tuning.json`` beside the GEMM tuning file, keyed
by the machine. ``TW_CONV_BATCH1=0`` keeps the batch routes; ``=direct`` / ``=rows`` / ... forces one.

The direct loop's sums run over the taps in raster order (then ``+ bias``, then ReLU as
``np.maximum(., 0)``), so its bits can differ from a GEMM's in the last places; its NumPy twin
(while it compiles) does the same operations in the same order.

>>> import numpy as np
>>> xp = np.ones((4, 4, 1), np.float32); f = np.ones((3, 3, 1, 2), np.float32)
>>> y = np.empty((2, 2, 2), np.float32)
>>> direct_rows.twin(xp, f, np.zeros(2, np.float32), False, False, 1, 1, 1, 1, 0, 2, y)
>>> y[0, 0].tolist()
[9.0, 9.0]
"""
import math
import os
import time

import numpy as np

from tensorweave.kernels import threads
from tensorweave.kernels.cpu import conv_choice, conv_tiles, gemm, gemm_tuning, nn_loops, tiles, winograd
from tensorweave.kernels.cpu.jit import njit_twin

MODE = os.environ.get("TW_CONV_BATCH1", "auto").strip().lower()
#: the candidates (``incumbent``: the batch route conv_kernels would take)
BACKENDS = ("incumbent", "direct", "direct_rows", "gemm_rows", "winograd_rows")
#: row tiles per core of the threaded candidates (the helper thread starts late: see conv_tiles)
TILES_PER_CORE = conv_tiles.TILES_PER_CORE
_state = {"tuner": None}
_chosen = {}        # shape class -> backend, this process


def _direct_rows_twin(xp, f, bias, has_bias, relu, sh, sw, dh, dw, r0, r1, y):
    """:func:`direct_rows` in NumPy: the same operations per output, in the same order."""
    kh, kw, c, o = f.shape
    ow = y.shape[1]
    acc = np.zeros((r1 - r0, ow, o), y.dtype)
    for a in range(kh):
        for e in range(kw):
            rows = xp[r0 * sh + a * dh:(r1 - 1) * sh + a * dh + 1:sh, e * dw:(ow - 1) * sw + e * dw + 1:sw]
            for ch in range(c):
                acc += rows[:, :, ch:ch + 1] * f[a, e, ch]
    if has_bias:
        acc += bias
    if relu:
        acc = np.maximum(acc, y.dtype.type(0))
    y[r0:r1] = acc


@njit_twin(_direct_rows_twin, noalias=True)     # (y is always a fresh array)
def direct_rows(xp, f, bias, has_bias, relu, sh, sw, dh, dw, r0, r1, y):
    """Output rows ``r0:r1`` of ``y`` (``[OH, OW, O]``) = the convolution of the padded image ``xp``
    (``[Hp, Wp, C]``) with ``f`` (``[KH, KW, C, O]``), ``+ bias`` where ``has_bias``, ReLU where
    ``relu``: each output's taps in raster order. A row's pixels take each tap in turn (a pixel's
    channels the vector loop): consecutive vector loops then update different pixels, where a
    pixel's taps in a row waited on each other's stores (84 -> 55 µs CPU for the cnn's first layer)."""
    kh, kw, c, o = f.shape
    ow = y.shape[1]
    zero = y.dtype.type(0)
    for i in range(r0, r1):
        yi = y[i]
        for j in range(ow):
            for q in range(o):
                yi[j, q] = zero
        for a in range(kh):
            xr = xp[i * sh + a * dh]
            for e in range(kw):
                for ch in range(c):
                    fr = f[a, e, ch]
                    for j in range(ow):
                        v = xr[j * sw + e * dw, ch]
                        acc = yi[j]
                        for q in range(o):
                            acc[q] = acc[q] + v * fr[q]
        for j in range(ow):
            acc = yi[j]
            if has_bias:
                for q in range(o):
                    acc[q] = acc[q] + bias[q]
            if relu:
                for q in range(o):
                    acc[q] = np.maximum(acc[q], zero)


def applies(x, f, groups, nd):
    """Whether a convolution may take a batch-1 route: one image, 2-D, one group, float32/64."""
    return (MODE not in ("0", "off", "false", "never") and nd == 2 and x.shape[0] == 1 and groups == 1
            and x.dtype in (np.float32, np.float64) and f.dtype == x.dtype)


def _padded(x, pads):
    """The image ``x[0]`` (``[H, W, C]``), in a zero border where ``pads`` has one."""
    if not any(b or a for b, a in pads):
        return x[0]
    h, w, c = x.shape[1:]
    (t, b), (l, r) = pads
    xp = np.zeros((h + t + b, w + l + r, c), x.dtype)
    xp[t:t + h, l:l + w] = x[0]
    return xp


def _row_tiles(oh, threaded):
    """Rows per tile: all of them on this thread, else :data:`TILES_PER_CORE` tiles per core."""
    return oh if not threaded else max(1, -(-oh // (threads.cores() * TILES_PER_CORE)))


def _direct(x, f, out, pads, strides, dilations, bias, relu, threaded):
    xp = _padded(x, pads)
    y = np.empty((1,) + tuple(out) + (f.shape[-1],), x.dtype)
    b = bias if bias is not None else np.zeros(f.shape[-1], x.dtype)
    args = (xp, f, b, bias is not None, relu, strides[0], strides[1], dilations[0], dilations[1])
    rows = _row_tiles(out[0], threaded)
    over_bands(out[0], rows, lambda r0, r1, _: direct_rows(*args, r0, r1, y[0]))
    return y


def _gemm_rows(x, f, out, pads, strides, dilations, bias, relu):
    """im2col of a tile of output rows into a per-thread buffer, one one-thread GEMM into ``y``'s
    rows, ``+ bias`` (ReLU) while they are in cache; the tiles on the intra-op threads."""
    from tensorweave.kernels.cpu import conv_kernels      # (it imports this module)
    xp = _padded(x, pads)[None]
    (kh, kw), o, ow = f.shape[:2], f.shape[-1], out[1]
    fm = f.reshape(-1, o)
    y = np.empty((1,) + tuple(out) + (o,), x.dtype)
    y2 = y.reshape(-1, o)
    no_pads = ((0, 0), (0, 0))

    def run(r0, r1, tile_scratch):
        h0, h1 = r0 * strides[0], (r1 - 1) * strides[0] + (kh - 1) * dilations[0] + 1
        cols = conv_kernels._im2col(xp[:, h0:h1], (r1 - r0, ow), (kh, kw), no_pads, strides, dilations,
                                    tile_scratch)
        rows = y2[r0 * ow:r1 * ow]
        gemm.matmul(cols, fm, out=rows, one_thread=True)
        if bias is not None:
            nn_loops.bias_act(rows, bias, relu)
    over_bands(out[0], _row_tiles(out[0], True), run)
    return y


def _winograd_rows(x, f, out, pads, bias, relu):
    """Winograd F(4x4, 3x3) of one image (``winograd.py``'s transforms and 36 stacked products, the
    batch route's own calls) over bands of rows of 4x4 output blocks, one band per core on the
    intra-op threads. Why: the batch route tiles over images, so one image ran on one core (the
    cnn's second layer: 285-450 µs on one thread while PyTorch split it over both, issue 18
    pred25). Each band's products are NumPy's stacked product as in the batch route (its rows
    a band's windows), so the bits are the batch route's where its one-tile product gives them
    row by row (checked on the cnn's layer; a test compares the two)."""
    blk = winograd._Blocks(x.shape, pads)
    o = f.shape[3]
    y = np.empty((1,) + tuple(out) + (o,), x.dtype)
    u = winograd.transformed_filter(f)
    b = np.zeros(o, x.dtype) if bias is None else np.ascontiguousarray(bias, x.dtype)
    if blk.direct:
        xp = x
    else:           # the windows' extent, zeros beyond the image (as ``_Blocks.transformed_input``)
        xp = np.zeros((1, blk.hp, blk.wp, blk.c), x.dtype)
        xp[:, blk.pt:blk.pt + blk.hh, blk.pl:blk.pl + blk.ww] = x[:, :blk.hh, :blk.ww]

    def run(t0, t1, scratch):
        v = winograd._planes(scratch, "v", (t1 - t0) * blk.tw, blk.c, x.dtype)
        winograd._input_transform(xp[:, 4 * t0:4 * t1 + 2], 0, 1, t1 - t0, blk.tw, v)
        m = winograd._planes(scratch, "m", v.shape[1], o, x.dtype)
        winograd._products(v, u, m, False)
        winograd._output_transform(m, 0, 1, t1 - t0, blk.tw, y[:, 4 * t0:min(4 * t1, blk.ho)], b,
                                   bias is not None, relu)
    over_bands(blk.th, -(-blk.th // threads.cores()), run)
    return y


def over_bands(n, rows, run):
    """``run(r0, r1, scratch)`` over bands of ``rows`` of ``n`` rows: ``tiles.over_tiles`` without
    touching BLAS (the bands' products are one-thread calls), on the calling thread's share of the
    cores (``gemm.threads_here``: the intra-op count, a rank's cap; 1 on a helper thread). A helper
    that has not started when this thread runs out of bands is cancelled there, not waited for."""
    tiles.over_tiles(n, 1, rows, run, blas=False, share=gemm.threads_here() or 1)


def _routes(x, f, pads, strides, dilations):
    """The candidates for a convolution: Winograd's bands only where ``winograd`` applies."""
    if winograd.applies(x.dtype, f.shape, strides, dilations, pads):
        return BACKENDS
    return BACKENDS[:-1]


@conv_choice._remembered
def shape_class(dtype, x_shape, f_shape, pads, strides, dilations):
    """The class a timing stands for: the exact geometry (inference serves a few fixed shapes);
    remembered per arguments, as ``conv_choice``'s classes.

    >>> shape_class(np.dtype(np.float32), (1, 28, 28, 1), (3, 3, 1, 32), ((0, 0), (0, 0)), (1, 1), (1, 1))
    'float32:28x28x1,k3x3x32,st1x1,d1x1,p0000'
    """
    flat = "".join(str(int(v)) for pair in pads for v in pair)
    h, w, c = x_shape[1:]
    kh, kw, _, o = f_shape
    # ",w": Winograd's bands among the candidates (a class timed without them, before issue 18
    # pred25, is timed again)
    bands = ",w" if winograd.applies(dtype, f_shape, strides, dilations, pads) else ""
    return (f"{dtype}:{h}x{w}x{c},k{kh}x{kw}x{o},st{strides[0]}x{strides[1]},"
            f"d{dilations[0]}x{dilations[1]},p{flat}{bands}")


def cache_path():
    """``conv-batch1-tuning.json`` in the folder of the GEMM tuning file."""
    return gemm_tuning.sibling_path("conv-batch1-tuning.json")


def tuner():
    """This process's :class:`gemm_tuning.Tuner` of batch-1 routes (its file read on first use)."""
    if _state["tuner"] is None:
        _state["tuner"] = gemm_tuning.Tuner(cache_path(), gemm.machine_key(), BACKENDS)
    return _state["tuner"]


def reset():
    """Forgets this process's choices and tuner (tests; a changed cache path)."""
    _state["tuner"] = None
    _chosen.clear()


def _warm(x, f, out, pads, strides, dilations, bias, relu):
    """Calls the candidates' loops on no rows: their compiles for these argument types start in
    the background (``jit.njit_twin``), the twins answering the empty calls."""
    xp = _padded(x, pads)
    y = np.empty(tuple(out) + (f.shape[-1],), x.dtype)
    b = bias if bias is not None else np.zeros(f.shape[-1], x.dtype)
    direct_rows(xp, f, b, bias is not None, relu, strides[0], strides[1], dilations[0], dilations[1], 0, 0, y)
    nn_loops.bias_act(y.reshape(-1, f.shape[-1])[:0], b, relu)
    if winograd.applies(x.dtype, f.shape, strides, dilations, pads):     # (the batch route may be im2col)
        blk = winograd._Blocks(x.shape, pads)
        v, m = np.empty((36, 0, blk.c), x.dtype), np.empty((36, 0, f.shape[-1]), x.dtype)
        winograd._input_transform(x, 0, 0, 0, blk.tw, v)
        winograd._output_transform(m, 0, 0, 0, blk.tw, y[None], b, bias is not None, relu)


def _kernels(x, f, pads, strides, dilations):
    """The numba loops the candidates of a convolution run (compiled before a timing counts)."""
    if winograd.applies(x.dtype, f.shape, strides, dilations, pads):
        return direct_rows, nn_loops.bias_act, winograd._input_transform, winograd._output_transform
    return direct_rows, nn_loops.bias_act


def _run(route, x, f, out, pads, strides, dilations, bias, relu, incumbent):
    if route == "incumbent":
        return incumbent()
    if route == "gemm_rows":
        return _gemm_rows(x, f, out, pads, strides, dilations, bias, relu)
    if route == "winograd_rows":
        if not winograd.applies(x.dtype, f.shape, strides, dilations, pads):
            return incumbent()          # (forced by TW_CONV_BATCH1 on a layer it cannot take)
        return _winograd_rows(x, f, out, pads, bias, relu)
    return _direct(x, f, out, pads, strides, dilations, bias, relu, route == "direct_rows")


def forward(x, f, out, pads, strides, dilations, bias, relu, incumbent):
    """The convolution of ``x`` (``[1, H, W, C]``, :func:`applies`) with ``f`` (``[KH, KW, C, O]``),
    ``+ bias``, ReLU, as ``[1, OH, OW, O]``, by the class's route; ``incumbent()`` computes it by
    the batch route."""
    args = (x, f, out, pads, strides, dilations, bias, relu, incumbent)
    if MODE in BACKENDS:
        return _run(MODE, *args)
    cls = shape_class(x.dtype, x.shape, f.shape, pads, tuple(strides), tuple(dilations))
    found = _chosen.get(cls) or tuner().backend(cls)
    if found is None:
        if not conv_choice._compiled(_kernels(x, f, pads, strides, dilations)):
            _warm(x, f, out, pads, strides, dilations, bias, relu)
            return incumbent()          # a twin would be timed: the batch route until compiled
        runners = {route: (lambda route=route: _run(route, *args))
                   for route in _routes(x, f, pads, strides, dilations)}
        found = tuner().choose(cls, runners, incumbent="incumbent", clock=time.perf_counter)
    _chosen[cls] = found
    return _run(found, *args)
