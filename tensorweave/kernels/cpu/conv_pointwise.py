"""1x1 convolutions without padding (any strides: the ResNet's stride-2 shortcuts) as one GEMM
over the whole batch.

A 1x1 window reads one position per output: the input's positions at the strides, ``x[:, ::s,
::s]``. im2col (``conv_kernels``) copies them tile by tile into column buffers (a window view of
``[tile, *out, 1, 1, C]``) and runs one small GEMM per tile on the intra-op threads; for the
ResNet's shortcuts (64 images of 32x32x16 -> 16x16x32, and 16x16x32 -> 8x8x64) the products are
16-32 wide with an inner dimension of 16-32, so the tiles' fixed costs (a claim, a buffer, a GEMM
call, BLAS's thread setting) outweighed their arithmetic (issue 18 session 20: 1.3-3.5 ms of
process CPU per forward for 17-34 MFLOP). Here:

- forward: ``y = pick(x) @ F`` (``pick``: one strided copy of the positions read, or the input
  itself at stride 1), then the fused bias/ReLU;
- input gradient: ``g = dy @ F.T`` written into the positions read of a zeroed ``dx``;
- filter gradient: ``dF = (dy.T @ pick(x)).T`` (the transposed orientation, as ``conv_kernels``'
  filter tiles: measured faster there).

Each product is one ``gemm.matmul``, which picks its library and threads by its own measurements
(split by rows over the intra-op threads where that measured faster). The bits may differ from
im2col's in the last place (another BLAS call shape); whether a layer runs here is measured per
machine and shape class against im2col (``conv_choice.use_pointwise``), im2col the incumbent.

>>> import numpy as np
>>> x, f = np.ones((2, 4, 4, 3), np.float32), np.ones((1, 1, 3, 5), np.float32)
>>> y = forward(x, f, (2, 2), (2, 2))
>>> y.shape, float(y[0, 1, 1, 4])
((2, 2, 2, 5), 3.0)
"""
import math

import numpy as np

from tensorweave.kernels.cpu import gemm, nn_loops


def applies(x_dtype, ksize, pads, groups):
    """Whether a convolution may run here: one group, a 1x1 (1-D to 3-D) window, no padding, a
    float dtype BLAS takes."""
    return (groups == 1 and all(k == 1 for k in ksize) and not any(b or a for b, a in pads)
            and x_dtype in (np.float32, np.float64))


def _read(strides, out):
    """The index of the positions a 1x1 window reads, ``[N, *out, C]`` of the input."""
    return (slice(None),) + tuple(slice(0, s * (m - 1) + 1, s) for s, m in zip(strides, out)) + (slice(None),)


def _picked(x, out, strides):
    """``[N * prod(out), C]``: the positions read, contiguous (the input itself where they are all of it)."""
    return np.ascontiguousarray(x[_read(strides, out)]).reshape(-1, x.shape[-1])


def forward(x, f, out, strides, bias=None, relu=False):
    """``[N, *S, C]`` (channels last) convolved with the 1x1 filter ``f`` (``[1, ..., C, O]``); with
    ``bias``: ``+ bias`` then ReLU if ``relu``."""
    c, o = x.shape[-1], f.shape[-1]
    y = gemm.matmul(_picked(x, out, strides), f.reshape(c, o))
    if bias is not None:
        nn_loops.bias_act(y, bias, relu)
    return y.reshape((x.shape[0],) + tuple(out) + (o,))


def backprop_input(shape, f, dy, out, strides):
    """The input gradient ``[N, *S, C]`` (``shape``, channels last) of :func:`forward`."""
    c, o = shape[-1], f.shape[-1]
    g = gemm.matmul(dy.reshape(-1, o), f.reshape(c, o).T).reshape((shape[0],) + tuple(out) + (c,))
    if g.shape == tuple(shape):
        return g                    # stride 1: every position was read
    dx = np.zeros(shape, dy.dtype)
    dx[_read(strides, out)] = g
    return dx


def backprop_filter(x, fsizes, dy, out, strides):
    """The filter gradient of :func:`forward`, ``fsizes`` (``[1, ..., C, O]``)."""
    o = fsizes[-1]
    if math.prod(fsizes) == 0 or x.shape[0] == 0:
        return np.zeros(fsizes, dy.dtype)
    return np.ascontiguousarray(gemm.matmul(dy.reshape(-1, o).T, _picked(x, out, strides)).T).reshape(fsizes)
