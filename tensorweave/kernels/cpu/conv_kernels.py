"""CPU kernels for ``Conv{1,2,3}D`` and their input and filter backprops (``ops/nn_ops.py``).

Float32 3x3 stride-1 convolutions (and both their gradients) with enough channels run by
Winograd's F(4x4, 3x3) (``winograd.py``) where it measured faster than im2col on this machine
for the shape class (``conv_choice``: timed once per machine, cached on disk). Other ordinary (one-group) convolutions run as
im2col + GEMM, **tiled over the batch**: a tile of
images is copied into a column buffer ``[tile * prod(out), prod(ksize) * C]`` (NumPy's
strided copy of the window view, into padding kept in a small per-tile buffer) and multiplied
by the filter matrix with BLAS. The buffer is bounded by :data:`TILE_BYTES`; a whole-batch
column matrix would be ``prod(ksize)`` times the input (85 MB for the second convolution of
a 128-image MNIST CNN). With several intra-op threads the tiles run side by side, each
thread with single-threaded BLAS (``tiles.over_tiles``); a batch makes at least one tile per
core, and each tile's GEMM runs on the library measured faster on one thread for its shape
class (``conv_tiles``, ``gemm.matmul(..., one_thread=True)``).

- forward: ``y[tile] = cols @ F``, written straight into the output;
- filter gradient: ``dF = sum over tiles of cols.T @ dy[tile]``, in tile order;
- input gradient: ``dcols = dy[tile] @ F.T`` then col2im (a compiled loop that adds each
  column back into its window, skipping padding) into ``dx[tile]``.

Channels-last keeps both GEMM operands contiguous (rows are output positions, columns
channels), so channels-first inputs are moved to channels-last with views and moved back at
the end. Grouped convolutions run as a batched matmul over the groups, and depthwise ones
as a multiply-add per window offset (GEMMs with an inner dimension of ``prod(ksize)`` are
slow). Convolutions with few input channels may instead build their column matrix transposed
(``conv_planes``: long copies where im2col's run one pixel's channels), where it measured faster
for the shape class (``conv_choice.use_planes``), and 1x1 convolutions without padding may run
as one GEMM over the batch (``conv_pointwise``) where that measured faster than im2col's tiles
(``conv_choice.use_pointwise``). Half-precision inputs are computed in float32
and rounded once at the end (as TensorFlow accumulates).
"""
import math

import numpy as np

from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu import (conv_batch1, conv_choice, conv_planes, conv_pointwise, conv_tiles, gemm, nn_loops,
                                    winograd)
from tensorweave.kernels.cpu.nn_util import (channels_first, crop, floats, from_last, geometry,
                                             group_windows, offset_slices, pad, to_last, windows, work)
from tensorweave.kernels.cpu.tiles import buffer as _buffer
from tensorweave.kernels.cpu.tiles import over_tiles

#: Bytes of one tile's column buffer: well inside the core's L2 (2 MB per core here) with the
#: GEMM's other operands between the copy that fills it and the GEMM that reads it. In the
#: cnn training step 1 MB tiles ran the step in 170-181 ms against 198-235 ms for 4 MB ones
#: (alternating runs); in isolation the two are within noise.
TILE_BYTES = 1 << 20

#: Filter gradients with at most this many elements are summed image by image: with a tiny
#: output and a long inner dimension a threaded BLAS call is nearly all thread syncs (on a
#: busy machine it took seconds for the first layer's 9 x 32 over 86528 rows), while one
#: small GEMM per image runs single-threaded inside BLAS.
_SKINNY = 4096


def _groups(c, cg, o):
    if cg <= 0 or c % cg or o % (c // cg):
        raise ValueError("input depth must be evenly divisible by filter depth")
    return c // cg


def _has_padding(pads):
    return any(b or a for b, a in pads)


# ---- one-group convolution: batch-tiled im2col + GEMM -------------------------------------------
def _im2col(xt, out, ksize, pads, strides, dilations, scratch):
    """The column matrix ``[images * prod(out), prod(ksize) * C]`` of the tile ``xt``."""
    t, sizes, c = xt.shape[0], xt.shape[1:-1], xt.shape[-1]
    kk, mi = math.prod(ksize), math.prod(out)
    padded = _has_padding(pads)
    if kk == 1 and not padded and all(s == 1 for s in strides):
        return xt.reshape(t * mi, c)  # 1x1 convolution: the input is the column matrix
    if padded:
        # The border stays zero; each tile overwrites only the interior.
        xp = _buffer(scratch, "padded", (t,) + tuple(s + b + a for s, (b, a) in zip(sizes, pads)) + (c,),
                     xt.dtype, 0)
        crop(xp, pads, sizes)[...] = xt
        xt = xp
    view = windows(xt, out, ksize, strides, dilations)
    cols = _buffer(scratch, "cols", (t * mi, kk * c), xt.dtype)
    np.copyto(cols.reshape(view.shape), view)
    return cols


def _dense_forward(x, f, out, pads, strides, dilations, bias=None, relu=False):
    """With ``bias``: each tile's output gets ``+ bias`` (then ReLU) while it is in cache."""
    return tiled_forward(x, f, out, pads, strides, dilations, bias, relu, _im2col)


def tiled_forward(x, f, out, pads, strides, dilations, bias, relu, cols):
    """The dense forward tile by tile, ``cols`` building each tile's ``[pixels, taps * C]`` column
    matrix (:func:`_im2col`, or ``conv_planes``' planes read transposed)."""
    n, nd, o = x.shape[0], len(out), f.shape[-1]
    ksize, mi = f.shape[:nd], math.prod(out)
    fm = f.reshape(-1, o)
    y = np.empty((n,) + tuple(out) + (o,), x.dtype)
    y2 = y.reshape(n * mi, o)

    tile, one = conv_tiles.split(n, mi * fm.shape[0] * x.itemsize, TILE_BYTES)

    def run(b0, b1, scratch):
        rows = y2[b0 * mi:b1 * mi]
        gemm.matmul(cols(x[b0:b1], out, ksize, pads, strides, dilations, scratch), fm, out=rows, one_thread=one)
        if bias is not None:
            nn_loops.bias_act(rows, bias, relu)
    over_tiles(n, mi * fm.shape[0] * x.itemsize, tile, run)
    return y


def _filter_tile(cols, part, images, mi, kc, one_thread):
    """One tile's share of the transposed filter gradient: ``part.T @ cols`` (``[O, kc]``; this
    orientation measured ~1.6x faster than ``cols.T @ part``)."""
    o = part.shape[-1]
    if kc * o <= _SKINNY:
        # A tiny output: one small GEMM per image (see _SKINNY).
        return gemm.matmul(part.reshape(images, mi, o).transpose(0, 2, 1), cols.reshape(images, mi, kc),
                           one_thread=one_thread).sum(axis=0)
    return gemm.matmul(part.T, cols, one_thread=one_thread)


def _dense_backprop_filter(x, fsizes, dy, out, pads, strides, dilations):
    """``[prod(ksize) * C, O]``: the tiles' GEMMs, summed in tile order (so the same bits
    whatever the thread count)."""
    nd, n, o, mi = len(out), x.shape[0], dy.shape[-1], math.prod(out)
    kc = math.prod(fsizes[:-1])
    parts = {}
    tile, one = conv_tiles.split(n, mi * kc * x.itemsize, TILE_BYTES)

    def run(b0, b1, scratch):
        cols = _im2col(x[b0:b1], out, fsizes[:nd], pads, strides, dilations, scratch)
        parts[b0] = _filter_tile(cols, dy[b0:b1].reshape(-1, o), b1 - b0, mi, kc, one)
    over_tiles(n, mi * kc * x.itemsize, tile, run)
    if not parts:  # empty batch
        return np.zeros((kc, o), dy.dtype)
    order = sorted(parts)
    dft = parts[order[0]]
    for b0 in order[1:]:
        dft += parts[b0]
    return dft.T


def _dense_backprop_input(shape, f, dy, out, pads, strides, dilations):
    """``shape``: the input's channels-last shape."""
    n, c, nd, o = shape[0], shape[-1], len(out), f.shape[-1]
    ksize = f.shape[:nd]
    kk, mi = math.prod(ksize), math.prod(out)
    ft = f.reshape(kk * c, o).T
    dx = np.zeros(shape, dy.dtype)
    st, dl = nn_loops.params_3d(strides, nd, 1), nn_loops.params_3d(dilations, nd, 1)
    pb = nn_loops.params_3d([b for b, _ in pads], nd, 0)
    tile, one = conv_tiles.split(n, mi * kk * c * dy.itemsize, TILE_BYTES)

    def run(b0, b1, scratch):
        buf = _buffer(scratch, "dcols", ((b1 - b0) * mi, kk * c), dy.dtype)
        gemm.matmul(dy[b0:b1].reshape(-1, o), ft, out=buf, one_thread=one)
        cols = buf.reshape((b1 - b0,) + tuple(out) + tuple(ksize) + (c,))
        nn_loops.col2im(nn_loops.as_3d_windows(cols, nd), st, dl, pb, nn_loops.as_3d(dx[b0:b1], nd))
    over_tiles(n, mi * kk * c * dy.itemsize, tile, run)
    return dx


# ---- grouped and depthwise convolution -----------------------------------------------------------
def _depthwise_forward(xp, f, n, out, strides, dilations):
    nd = len(out)
    ksize, c, o = f.shape[:nd], xp.shape[-1], f.shape[-1]
    # Multiplier before channel, so that NumPy's inner loops run over the channels.
    fr = np.ascontiguousarray(f.reshape(math.prod(ksize), c, o // c).transpose(0, 2, 1))
    y = np.zeros((n,) + tuple(out) + (o // c, c), xp.dtype)
    for i, offs in enumerate(np.ndindex(*ksize)):
        y += xp[offset_slices(offs, dilations, strides, out)][..., None, :] * fr[i]
    return y.swapaxes(-1, -2)


def _grouped_forward(xp, f, g, out, strides, dilations):
    nd = len(out)
    ksize, cg, o = f.shape[:nd], f.shape[-2], f.shape[-1]
    kk, og = math.prod(ksize), o // g
    m = xp.shape[0] * math.prod(out)
    cols = group_windows(xp, out, ksize, strides, dilations, g).reshape(g, m, kk * cg)
    fg = f.reshape(kk, cg, g, og).transpose(2, 0, 1, 3).reshape(g, kk * cg, og)
    return gemm.matmul(cols, fg).transpose(1, 0, 2)


def _depthwise_backprop_input(shape, f, dy, out, pads, strides, dilations):
    n, sizes, c, nd = shape[0], shape[1:-1], shape[-1], len(out)
    ksize, o = f.shape[:nd], f.shape[-1]
    padded = tuple(s + b + a for s, (b, a) in zip(sizes, pads))
    fr = np.ascontiguousarray(f.reshape(math.prod(ksize), c, o // c).transpose(0, 2, 1))
    dyr = np.ascontiguousarray(dy.reshape((n,) + tuple(out) + (c, o // c)).swapaxes(-1, -2))
    dxp = np.zeros((n,) + padded + (c,), dy.dtype)
    for i, offs in enumerate(np.ndindex(*ksize)):
        target = dxp[offset_slices(offs, dilations, strides, out)]
        for j in range(o // c):
            target += dyr[..., j, :] * fr[i, j]
    return crop(dxp, pads, sizes)


def _grouped_backprop_input(shape, f, dy, g, out, pads, strides, dilations):
    n, sizes, c, nd = shape[0], shape[1:-1], shape[-1], len(out)
    ksize, cg, o = f.shape[:nd], f.shape[-2], f.shape[-1]
    kk, og, m = math.prod(ksize), o // g, n * math.prod(out)
    padded = tuple(s + b + a for s, (b, a) in zip(sizes, pads))
    dyg = dy.reshape(m, g, og).transpose(1, 0, 2)
    fg = f.reshape(kk, cg, g, og).transpose(2, 0, 1, 3).reshape(g, kk * cg, og)
    dcols = gemm.matmul(dyg, fg.transpose(0, 2, 1)).reshape(g, m, kk, cg).transpose(1, 2, 0, 3)
    dcols = dcols.reshape((n,) + tuple(out) + (kk, c))
    dxp = np.zeros((n,) + padded + (c,), dcols.dtype)
    for i, offs in enumerate(np.ndindex(*ksize)):
        dxp[offset_slices(offs, dilations, strides, out)] += dcols[..., i, :]
    return crop(dxp, pads, sizes)


def _depthwise_backprop_filter(xp, fsizes, dy, out, strides, dilations):
    nd, c, o = len(out), xp.shape[-1], dy.shape[-1]
    m = dy.size // o
    dyr = np.ascontiguousarray(dy.reshape(m, c, o // c).transpose(2, 0, 1))  # (multiplier, m, c)
    df = np.empty((math.prod(fsizes[:nd]), c, o // c), dy.dtype)
    for i, offs in enumerate(np.ndindex(*fsizes[:nd])):
        xs = np.ascontiguousarray(xp[offset_slices(offs, dilations, strides, out)]).reshape(m, c)
        for j in range(o // c):
            df[i, :, j] = np.einsum("mc,mc->c", xs, dyr[j])
    return df


def _grouped_backprop_filter(xp, fsizes, dy, g, out, strides, dilations):
    nd, o = len(out), dy.shape[-1]
    ksize, cg = fsizes[:nd], fsizes[-2]
    kk, og, m = math.prod(ksize), o // g, dy.size // o
    cols = group_windows(xp, out, ksize, strides, dilations, g).reshape(g, m, kk * cg)
    dyg = dy.reshape(m, g, og).transpose(1, 0, 2)
    return gemm.matmul(cols.transpose(0, 2, 1), dyg).reshape(g, kk, cg, og).transpose(1, 2, 0, 3)


# ---- Winograd or im2col, by measurement (conv_choice) ------------------------------------------------
def _probe(n):
    return min(n, conv_choice.PROBE_IMAGES)


def _winograd_forward(x, f, out, pads, strides, dilations):
    k = _probe(x.shape[0])
    xs = x[:k]
    return conv_choice.use_winograd(
        "forward", x.shape[0], x.shape[1], x.shape[2], x.shape[3], f.shape[3], pads,
        lambda: {"winograd": lambda: winograd.conv3x3(xs, f, pads),
                 "im2col": lambda: _dense_forward(xs, f, out, pads, strides, dilations)},
        (winograd._input_transform, winograd._output_transform))


def _winograd_input(shape, f, dy, out, pads, strides, dilations):
    k = _probe(shape[0])
    sk, dys = (k,) + tuple(shape[1:]), dy[:k]
    return conv_choice.use_winograd(
        "input", shape[0], shape[1], shape[2], shape[3], f.shape[3], pads,
        lambda: {"winograd": lambda: winograd.conv3x3_backprop_input(sk, f, dys, pads),
                 "im2col": lambda: _dense_backprop_input(sk, f, dys, out, pads, strides, dilations)},
        (winograd._output_grad_transform, winograd._input_grad_transform, nn_loops.col2im))


def _winograd_filter(x, fsizes, dy, out, pads, strides, dilations):
    k = _probe(x.shape[0])
    xs, dys = x[:k], dy[:k]
    return conv_choice.use_winograd(
        "filter", x.shape[0], x.shape[1], x.shape[2], x.shape[3], fsizes[3], pads,
        lambda: {"winograd": lambda: winograd.conv3x3_backprop_filter(xs, dys, pads),
                 "im2col": lambda: _dense_backprop_filter(xs, fsizes, dys, out, pads, strides, dilations)},
        (winograd._input_transform, winograd._output_grad_transform))


def _use_planes(kind, x_dtype, n, sizes, c, o, ksize, pads, strides, dilations, planes, im2col, kernels=()):
    """Whether this one-group convolution runs by ``conv_planes``: a candidate (few channels)
    measured faster than im2col for its class. ``planes``, ``im2col``: functions of an image
    count ``k`` computing the kind on the batch's first ``k`` images (the timing's slice)."""
    if not conv_planes.applies(x_dtype, c, 1):
        return False
    k = _probe(n)
    return conv_choice.use_planes(kind, n, sizes, c, o, ksize, pads, strides, dilations,
                                  lambda: {"planes": lambda: planes(k), "im2col": lambda: im2col(k)}, kernels)


def _use_pointwise(kind, x_dtype, n, sizes, c, o, ksize, pads, strides, pointwise, im2col):
    """Whether this 1x1 convolution runs as one GEMM (``conv_pointwise``): it measured faster than
    im2col for its class (``conv_choice.use_pointwise``); ``pointwise``, ``im2col`` as in
    :func:`_use_planes`."""
    if not conv_pointwise.applies(x_dtype, ksize, pads, 1):
        return False
    k = _probe(n)
    return conv_choice.use_pointwise(kind, n, sizes, c, o, strides,
                                     lambda: {"pointwise": lambda: pointwise(k), "im2col": lambda: im2col(k)})


# ---- the kernels ----------------------------------------------------------------------------------
def _check_conv_ranks(x, f, nd):
    if x.ndim != nd + 2 or f.ndim != nd + 2:
        raise ValueError("wrong rank")


def _batch_forward(x, f, g, out, pads, strides, dilations, bias, relu):
    """:func:`conv_forward`'s route for a batch (channels-last ``x``, ``g`` groups)."""
    n, sizes, c = x.shape[0], x.shape[1:-1], x.shape[-1]
    nd = len(out)
    ksize, cg, o = f.shape[:nd], f.shape[-2], f.shape[-1]
    if (g == 1 and winograd.applies(x.dtype, f.shape, strides, dilations, pads)
            and _winograd_forward(x, f, out, pads, strides, dilations)):
        y = winograd.conv3x3(x, f, pads, bias, relu)
    elif g == 1 and _use_pointwise("forward", x.dtype, n, sizes, c, o, ksize, pads, strides,
                                   lambda k: conv_pointwise.forward(x[:k], f, out, strides),
                                   lambda k: _dense_forward(x[:k], f, out, pads, strides, dilations)):
        y = conv_pointwise.forward(x, f, out, strides, bias, relu)
    elif g == 1 and _use_planes("forward", x.dtype, n, sizes, c, o, ksize, pads, strides, dilations,
                                lambda k: conv_planes.forward(x[:k], f, out, pads, strides, dilations),
                                lambda k: _dense_forward(x[:k], f, out, pads, strides, dilations)):
        y = conv_planes.forward(x, f, out, pads, strides, dilations, bias, relu)
    elif g == 1:
        y = _dense_forward(x, f, out, pads, strides, dilations, bias, relu)
    else:
        if cg == 1:
            y = _depthwise_forward(pad(x, pads), f, n, out, strides, dilations)
        else:
            y = _grouped_forward(pad(x, pads), f, g, out, strides, dilations)
        if bias is not None:
            y = np.ascontiguousarray(y).reshape(-1, o)
            nn_loops.bias_act(y, bias, relu)
    return y


def conv_forward(x, f, strides, dilations, padding, data_format, bias=None, relu=False):
    """N-d (grouped) convolution; ``f`` is ``[*ksize, C/groups, O]``.

    ``bias`` (channels-last float32/float64 only; plans' fused convolutions): ``+ bias`` per
    output channel, then ReLU with ``relu`` — the same arithmetic as BiasAdd and Relu after."""
    nd = len(strides)
    dt = floats(x, f)
    _check_conv_ranks(x, f, nd)
    cf = channels_first(data_format)
    x, f = work(to_last(x, cf)), work(f)
    n, sizes, c = x.shape[0], x.shape[1:-1], x.shape[-1]
    ksize, cg, o = f.shape[:nd], f.shape[-2], f.shape[-1]
    g = _groups(c, cg, o)
    out, pads = geometry(sizes, ksize, strides, dilations, padding)
    if bias is not None and (cf or x.dtype != dt or bias.dtype != dt):
        raise ValueError("conv_forward: a fused bias needs channels-last float32/float64 inputs")
    if conv_batch1.applies(x, f, g, nd):        # one image: the route measured for its class
        y = conv_batch1.forward(x, f, out, pads, strides, dilations, bias, relu,
                                lambda: _batch_forward(x, f, g, out, pads, strides, dilations, bias, relu))
    else:
        y = _batch_forward(x, f, g, out, pads, strides, dilations, bias, relu)
    y = y.reshape((n,) + out + (o,))
    return from_last(y, cf).astype(dt, copy=False)


def backprop_input_runner(input_sizes, f, dy, strides, dilations, padding, data_format):
    """Checks the arguments of :func:`conv_backprop_input` and picks its algorithm (a first call
    of a shape class may time Winograd against im2col: ``conv_choice``); returns a function of
    no arguments that computes the gradient. ``conv_pair_kernels`` makes the choices of an input
    and a filter gradient one after the other, then runs the two side by side."""
    nd = len(strides)
    dt = floats(f, dy)
    shape = tuple(int(v) for v in np.asarray(input_sizes).reshape(-1))
    if len(shape) != nd + 2 or f.ndim != nd + 2 or dy.ndim != nd + 2:
        raise ValueError("wrong rank")
    cf = channels_first(data_format)
    if cf:
        shape = (shape[0],) + shape[2:] + (shape[1],)
    n, sizes, c = shape[0], shape[1:-1], shape[-1]
    dy, f = work(to_last(dy, cf)), work(f)
    ksize, cg, o = f.shape[:nd], f.shape[-2], f.shape[-1]
    g = _groups(c, cg, o)
    out, pads = geometry(sizes, ksize, strides, dilations, padding)
    if dy.shape != (n,) + out + (o,):
        raise ValueError("out_backprop does not match the convolution's output shape")
    if (g == 1 and winograd.applies(dy.dtype, f.shape, strides, dilations, pads)
            and _winograd_input(shape, f, dy, out, pads, strides, dilations)):
        winograd.choose_stacks("input", shape, o, pads, dy.dtype)    # (here: not beside the filter gradient)

        def run():
            return winograd.conv3x3_backprop_input(shape, f, dy, pads)
    elif g == 1 and _use_pointwise(
            "input", dy.dtype, n, sizes, c, o, ksize, pads, strides,
            lambda k: conv_pointwise.backprop_input((k,) + shape[1:], f, dy[:k], out, strides),
            lambda k: _dense_backprop_input((k,) + shape[1:], f, dy[:k], out, pads, strides, dilations)):
        def run():
            return conv_pointwise.backprop_input(shape, f, dy, out, strides)
    elif g == 1 and _use_planes(
            "input", dy.dtype, n, sizes, c, o, ksize, pads, strides, dilations,
            lambda k: conv_planes.backprop_input((k,) + shape[1:], f, dy[:k], out, pads, strides, dilations),
            lambda k: _dense_backprop_input((k,) + shape[1:], f, dy[:k], out, pads, strides, dilations),
            (nn_loops.col2im,)):
        def run():
            return conv_planes.backprop_input(shape, f, dy, out, pads, strides, dilations)
    elif g == 1:
        def run():
            return _dense_backprop_input(shape, f, dy, out, pads, strides, dilations)
    elif cg == 1:
        def run():
            return _depthwise_backprop_input(shape, f, dy, out, pads, strides, dilations)
    else:
        def run():
            return _grouped_backprop_input(shape, f, dy, g, out, pads, strides, dilations)
    return lambda: from_last(run(), cf).astype(dt, copy=False)


def conv_backprop_input(input_sizes, f, dy, strides, dilations, padding, data_format):
    """Gradient of :func:`conv_forward` with respect to its input (a transposed convolution)."""
    return backprop_input_runner(input_sizes, f, dy, strides, dilations, padding, data_format)()


def backprop_filter_runner(x, filter_sizes, dy, strides, dilations, padding, data_format):
    """:func:`conv_backprop_filter`'s checks and algorithm choice; returns a function of no
    arguments that computes the gradient (see :func:`backprop_input_runner`)."""
    nd = len(strides)
    dt = floats(x, dy)
    fsizes = tuple(int(v) for v in np.asarray(filter_sizes).reshape(-1))
    if len(fsizes) != nd + 2 or x.ndim != nd + 2 or dy.ndim != nd + 2:
        raise ValueError("wrong rank")
    cf = channels_first(data_format)
    x, dy = work(to_last(x, cf)), work(to_last(dy, cf))
    n, sizes, c = x.shape[0], x.shape[1:-1], x.shape[-1]
    ksize, cg, o = fsizes[:nd], fsizes[-2], fsizes[-1]
    g = _groups(c, cg, o)
    out, pads = geometry(sizes, ksize, strides, dilations, padding)
    if dy.shape != (n,) + out + (o,):
        raise ValueError("out_backprop does not match the convolution's output shape")
    if (g == 1 and winograd.applies(x.dtype, fsizes, strides, dilations, pads)
            and _winograd_filter(x, fsizes, dy, out, pads, strides, dilations)):
        winograd.choose_stacks("filter", x.shape, o, pads, x.dtype)

        def run():
            return winograd.conv3x3_backprop_filter(x, dy, pads)
    elif g == 1 and _use_pointwise(
            "filter", x.dtype, n, sizes, c, o, ksize, pads, strides,
            lambda k: conv_pointwise.backprop_filter(x[:k], fsizes, dy[:k], out, strides),
            lambda k: _dense_backprop_filter(x[:k], fsizes, dy[:k], out, pads, strides, dilations)):
        def run():
            return conv_pointwise.backprop_filter(x, fsizes, dy, out, strides)
    elif g == 1 and _use_planes(
            "filter", x.dtype, n, sizes, c, o, ksize, pads, strides, dilations,
            lambda k: conv_planes.backprop_filter(x[:k], fsizes, dy[:k], out, pads, strides, dilations),
            lambda k: _dense_backprop_filter(x[:k], fsizes, dy[:k], out, pads, strides, dilations)):
        def run():
            return conv_planes.backprop_filter(x, fsizes, dy, out, pads, strides, dilations)
    elif g == 1:
        def run():
            return _dense_backprop_filter(x, fsizes, dy, out, pads, strides, dilations)
    elif cg == 1:
        def run():
            return _depthwise_backprop_filter(pad(x, pads), fsizes, dy, out, strides, dilations)
    else:
        def run():
            return _grouped_backprop_filter(pad(x, pads), fsizes, dy, g, out, strides, dilations)
    return lambda: run().reshape(fsizes).astype(dt, copy=False)


def conv_backprop_filter(x, filter_sizes, dy, strides, dilations, padding, data_format):
    """Gradient of :func:`conv_forward` with respect to its filter."""
    return backprop_filter_runner(x, filter_sizes, dy, strides, dilations, padding, data_format)()


for _nd in (1, 2, 3):
    k(f"Conv{_nd}D")(conv_forward)
    k(f"Conv{_nd}DBackpropInput")(conv_backprop_input)
    k(f"Conv{_nd}DBackpropFilter")(conv_backprop_filter)
