"""Few-channel convolutions by *planes*: im2col with the column matrix transposed.

A convolution with few input channels (an image network's first layer: 3 colour channels, or
MNIST's one) spends as long on its im2col copy as on its GEMM (``conv_kernels``): the column
matrix ``[pixels, taps * C]`` is filled by NumPy's strided copy whose innermost run is one
pixel's ``C`` values (12 bytes for RGB). Here the tile is first turned channels-first (``[C,
images, *padded]``, once), and the column matrix is built transposed, ``[taps * C, pixels]``:
per window offset, one copy of the shifted planes, whose innermost runs are whole image rows.
The GEMMs read it as it lies:

- forward: ``y[tile] = cols_t.T @ F`` (``F``: ``[taps * C, O]``), then the fused bias/ReLU;
- filter gradient: ``dF = sum over tiles of cols_t @ dy[tile]``, in tile order;
- input gradient: ``dcols_t = F @ dy[tile].T``, then per window offset one add of the planes
  back into a channels-first padded gradient, turned channels-last at the end.

Tiles and threads as ``conv_kernels``'s im2col (``conv_tiles.split``, ``tiles.over_tiles``).
The arithmetic is im2col's with the operands transposed, so the bits may differ from im2col's
in the last place (BLAS sums in another order). Whether a layer runs here or by im2col is
measured per machine and shape class (``conv_choice.use_planes``): on the Intel Xeon of
BENCHMARKS.md (session 16, conv20) the copy took 0.9 against 2.2 ms for the ResNet's first
layer (64 images of 32x32x3), and the filter gradient's GEMM 1.1 against 1.5 ms, while the
forward GEMM read transposed was slower (1.8 against 1.1 ms); which wins depends on the BLAS.

>>> import numpy as np
>>> x, f = np.ones((2, 4, 4, 1), np.float32), np.ones((3, 3, 1, 2), np.float32)
>>> y = forward(x, f, (2, 2), ((0, 0), (0, 0)), (1, 1), (1, 1))
>>> y.shape, float(y[0, 0, 0, 0])
((2, 2, 2, 2), 9.0)
"""
import math

import numpy as np

from tensorweave.kernels.cpu import conv_tiles, gemm
from tensorweave.kernels.cpu.nn_util import offset_slices
from tensorweave.kernels.cpu.tiles import buffer, over_tiles

#: Candidates: convolutions with at most this many input channels; which of the two runs is
#: measured (``conv_choice``). Beyond it im2col's runs are long enough: on the Intel Xeon planes
#: lost every kernel of the ResNet's 8- and 16-channel layers by 1.1-2.7x (3x3 stride 1 at 8
#: channels, 3x3 and 1x1 stride 2 at 16 and 32; session 16), so timing them would be wasted.
MAX_CHANNELS = 4
#: A tile's column matrix, as ``conv_kernels.TILE_BYTES`` (the same L2 reasoning).
TILE_BYTES = 1 << 20


def applies(x_dtype, c, groups):
    """Whether a convolution may run here: one group, few channels, a float dtype BLAS takes."""
    return groups == 1 and c <= MAX_CHANNELS and x_dtype in (np.float32, np.float64)


def _interior(pads, sizes):
    """``[C, images, *padded]`` -> the unpadded positions."""
    return (slice(None), slice(None)) + tuple(slice(b, b + s) for (b, _), s in zip(pads, sizes))


def _tap(offs, dilations, strides, out):
    """``[C, images, *padded]`` -> the positions window offset ``offs`` reads, for every output."""
    return (slice(None),) + offset_slices(offs, dilations, strides, out)[:-1]


def _padded_planes(xt, pads, scratch, key):
    """The tile ``xt`` (``[t, *S, C]``) channels-first in a zero-bordered buffer ``[C, t, *padded]``."""
    t, sizes, c = xt.shape[0], xt.shape[1:-1], xt.shape[-1]
    shape = (c, t) + tuple(s + b + a for s, (b, a) in zip(sizes, pads))
    xp = buffer(scratch, key, shape, xt.dtype, 0, axis=1)    # the border stays zero
    xp[_interior(pads, sizes)] = np.moveaxis(xt, -1, 0)
    return xp


def columns(xt, out, ksize, pads, strides, dilations, scratch):
    """The transposed column matrix ``[prod(ksize) * C, t * prod(out)]`` of the tile ``xt``:
    row ``tap * C + c`` holds channel ``c`` at window offset ``tap`` for every output position."""
    t, c = xt.shape[0], xt.shape[-1]
    xp = _padded_planes(xt, pads, scratch, "planes_in")
    kk, mi = math.prod(ksize), math.prod(out)
    flat = buffer(scratch, "planes", (kk * c * t * mi,), xt.dtype)
    cols = flat.reshape((kk, c, t) + tuple(out))
    for i, offs in enumerate(np.ndindex(*ksize)):
        cols[i] = xp[_tap(offs, dilations, strides, out)]
    return flat.reshape(kk * c, t * mi)


def forward(x, f, out, pads, strides, dilations, bias=None, relu=False):
    """``conv_kernels._dense_forward`` (``x``: ``[N, *S, C]``; ``f``: ``[*ksize, C, O]``) with each
    tile's column matrix built as planes and read transposed."""
    from tensorweave.kernels.cpu import conv_kernels      # (it imports this module)
    return conv_kernels.tiled_forward(x, f, out, pads, strides, dilations, bias, relu, _columns_read_by_rows)


def _columns_read_by_rows(x, out, ksize, pads, strides, dilations, scratch):
    return columns(x, out, ksize, pads, strides, dilations, scratch).T


def backprop_filter(x, fsizes, dy, out, pads, strides, dilations):
    """``[prod(ksize) * C, O]``: the tiles' products, summed in tile order (the same bits
    whatever the thread count)."""
    nd, n, o, mi = len(out), x.shape[0], dy.shape[-1], math.prod(out)
    kc = math.prod(fsizes[:-1])
    per_image = mi * kc * x.itemsize
    parts = {}
    tile, one = conv_tiles.split(n, per_image, TILE_BYTES)

    def run(b0, b1, scratch):
        cols = columns(x[b0:b1], out, fsizes[:nd], pads, strides, dilations, scratch)
        parts[b0] = gemm.matmul(cols, dy[b0:b1].reshape(-1, o), one_thread=one)
    over_tiles(n, per_image, tile, run)
    if not parts:  # empty batch
        return np.zeros((kc, o), dy.dtype)
    order = sorted(parts)
    df = parts[order[0]]
    for b0 in order[1:]:
        df += parts[b0]
    return df


def backprop_input(shape, f, dy, out, pads, strides, dilations):
    """``shape``: the input's channels-last shape ``[N, *S, C]``."""
    n, sizes, c, nd, o = shape[0], shape[1:-1], shape[-1], len(out), f.shape[-1]
    ksize = f.shape[:nd]
    kk, mi = math.prod(ksize), math.prod(out)
    fm = f.reshape(kk * c, o)
    dx = np.empty(shape, dy.dtype)
    padded = tuple(s + b + a for s, (b, a) in zip(sizes, pads))
    per_image = mi * kk * c * dy.itemsize
    tile, one = conv_tiles.split(n, per_image, TILE_BYTES)

    def run(b0, b1, scratch):
        t = b1 - b0
        flat = buffer(scratch, "dplanes", (kk * c * t * mi,), dy.dtype)
        gemm.matmul(fm, dy[b0:b1].reshape(-1, o).T, out=flat.reshape(kk * c, t * mi), one_thread=one)
        cols = flat.reshape((kk, c, t) + tuple(out))
        dxp = buffer(scratch, "dplanes_in", (c, t) + padded, dy.dtype, axis=1)
        dxp[...] = 0
        for i, offs in enumerate(np.ndindex(*ksize)):
            dxp[_tap(offs, dilations, strides, out)] += cols[i]
        dx[b0:b1] = np.moveaxis(dxp[_interior(pads, sizes)], 0, -1)
    over_tiles(n, per_image, tile, run)
    return dx
