"""3x3 convolutions by Winograd's minimal filtering F(4x4, 3x3) (Lavin & Gray, 2016).

A 4x4 block of outputs is computed from a 6x6 window of the input with 36 multiplications
per channel pair instead of 144: the window and the filter are transformed (``B^T d B``,
``G g G^T``, both 6x6), multiplied element by element — for all windows and channels at
once that is 36 GEMMs ``[windows, C] @ [C, O]`` — and transformed back (``A^T m A``). For
the second convolution of the MNIST CNN the forward pass takes 15.6 ms on one thread
against 28.7 ms for im2col + GEMM.

The price is rounding: the transforms add up to ~10 terms with coefficients up to 8, so a
float32 result differs from the direct sum by a few 1e-6 of the output's magnitude (direct
im2col: ~1e-7). ``conv_kernels`` uses this only for float32 3x3, stride-1, undilated,
ungrouped convolutions with at least :data:`MIN_CHANNELS` input and output channels (cuDNN
and oneDNN make the same trade), and there only where it measured faster than im2col for the
shape class on this machine (``conv_choice``); ``TW_CONV_WINOGRAD=0`` switches it off. The transforms'
first calls in a process run their NumPy twins (``winograd_twins``, the same bits) while
numba compiles them in the background.

Both gradients run the algorithm transposed on the forward's windows, from the transformed
output gradient ``W = A dy A^T``: the input gradient as 36 GEMMs ``W U^T`` whose results go
back through ``B`` into the overlapping windows, the filter gradient as 36 GEMMs ``V^T W``
summed over the windows and back through ``G``.

>>> import numpy as np
>>> from tensorweave.kernels.cpu import winograd
>>> x = np.ones((1, 6, 6, 8), np.float32); f = np.ones((3, 3, 8, 8), np.float32)
>>> float(winograd.conv3x3(x, f, ((0, 0), (0, 0)))[0, 0, 0, 0])
72.0
"""
import os

import numpy as np

from tensorweave.core import derived
from tensorweave.kernels.cpu import conv_choice, conv_tiles, gemm
from tensorweave.kernels.cpu import winograd_twins as twins
from tensorweave.kernels.cpu.jit import njit_twin
from tensorweave.kernels.cpu.tiles import buffer, over_tiles

ENABLED = os.environ.get("TW_CONV_WINOGRAD", "1") != "0"
#: Fewer channels leave the 36 GEMMs too thin to pay for the transforms.
MIN_CHANNELS = 8
#: Bytes of one tile's transformed input and products (a few images; fits in L2).
TILE_BYTES = 1 << 20
#: Images per group of the filter gradient's ordered partial sums: 8 groups for a batch of 64,
#: so that a helper thread starting late still gets its half (with 16, 4 groups, the calling
#: thread did 58 % of the ResNet's filter gradients' CPU time).
GROUP_IMAGES = 8

# The transforms are compiled with ``noalias`` (``jit.njit``): their arrays never share memory (scratch
# planes, the output's and the gradient's slices of the batch, the bias), and without the promise each of
# their short channel loops runs LLVM's runtime alias checks (11-24 % of a 16-channel tile's time,
# BENCHMARKS.md session 17; the same bits).
#
# Each transform below applies one 1-D transform along the window's rows, then the same along
# its columns, written out both times: vector loops over the channels with the coefficients
# inline (a helper returning the six values as a tuple measured ~25 % slower, a helper taking
# row views 7x slower, reading the coefficients from a matrix 12x slower).

# G (6x3): the filter transform for the interpolation points 0, 1, -1, 2, -2 and infinity.
_G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
               [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])


def applies(x_dtype, fsizes, strides, dilations, pads):
    """Whether a convolution (``fsizes``: the filter's ``[3, 3, C, O]``) takes this path."""
    return (ENABLED and x_dtype == np.float32 and len(fsizes) == 4 and tuple(fsizes[:2]) == (3, 3)
            and tuple(strides) == (1, 1) and tuple(dilations) == (1, 1)
            and fsizes[2] >= MIN_CHANNELS and fsizes[3] >= MIN_CHANNELS
            and all(0 <= b <= 2 and 0 <= a <= 2 for b, a in pads))


@njit_twin(twins.input_transform, noalias=True)
def _input_transform(x, n0, n1, th, tw_, v):
    """``v[36, p, C] = B^T d B`` for the 6x6 windows at stride 4 of images ``n0:n1`` of ``x``
    (``p`` counts the windows of those images in order); rows, then columns.

    The row pass runs once per row of windows over the whole row (``(4 tw + 2) * C`` values,
    one vector loop per output row: long loops), the column pass once per window and output
    (one loop over the channels each). Before, both passes ran per window: 72 loops of C values
    per window, which at C = 16 is mostly loop set-up (BENCHMARKS.md issue 18, session 12).
    The arithmetic is the same, operand for operand."""
    c_ = x.shape[3]
    wc = (4 * tw_ + 2) * c_                 # the windows' extent along a row, with its channels
    full = x.shape[2] * c_
    r6 = np.empty((6, wc), x.dtype)         # the row pass: [output row r, column * C + channel]
    k2, k4, k5 = x.dtype.type(2), x.dtype.type(4), x.dtype.type(5)
    p = 0
    for n in range(n0, n1):
        for ti in range(th):
            i = 4 * ti
            x0, x1, x2 = x[n, i].reshape(full), x[n, i + 1].reshape(full), x[n, i + 2].reshape(full)
            x3, x4, x5 = x[n, i + 3].reshape(full), x[n, i + 4].reshape(full), x[n, i + 5].reshape(full)
            for u in range(wc):
                r6[0, u] = k4 * x0[u] - k5 * x2[u] + x4[u]
            for u in range(wc):
                r6[1, u] = -k4 * x1[u] - k4 * x2[u] + x3[u] + x4[u]
            for u in range(wc):
                r6[2, u] = k4 * x1[u] - k4 * x2[u] - x3[u] + x4[u]
            for u in range(wc):
                r6[3, u] = -k2 * x1[u] - x2[u] + k2 * x3[u] + x4[u]
            for u in range(wc):
                r6[4, u] = k2 * x1[u] - x2[u] - k2 * x3[u] + x4[u]
            for u in range(wc):
                r6[5, u] = k4 * x1[u] - k5 * x3[u] + x5[u]
            for tj in range(tw_):
                j = 4 * tj * c_
                for r in range(6):
                    q = 6 * r
                    # slices, then indices from a range: numba leaves out its negative-index
                    # handling, which on `t[j + c]` kept the loops scalar (3x slower)
                    t0, t1, t2 = r6[r, j:j + c_], r6[r, j + c_:j + 2 * c_], r6[r, j + 2 * c_:j + 3 * c_]
                    t3, t4, t5 = r6[r, j + 3 * c_:j + 4 * c_], r6[r, j + 4 * c_:j + 5 * c_], r6[r, j + 5 * c_:j + 6 * c_]
                    for c in range(c_):
                        v[q, p, c] = k4 * t0[c] - k5 * t2[c] + t4[c]
                    for c in range(c_):
                        v[q + 1, p, c] = -k4 * t1[c] - k4 * t2[c] + t3[c] + t4[c]
                    for c in range(c_):
                        v[q + 2, p, c] = k4 * t1[c] - k4 * t2[c] - t3[c] + t4[c]
                    for c in range(c_):
                        v[q + 3, p, c] = -k2 * t1[c] - t2[c] + k2 * t3[c] + t4[c]
                    for c in range(c_):
                        v[q + 4, p, c] = k2 * t1[c] - t2[c] - k2 * t3[c] + t4[c]
                    for c in range(c_):
                        v[q + 5, p, c] = k4 * t1[c] - k5 * t3[c] + t5[c]
                p += 1


@njit_twin(twins.output_transform, noalias=True)
def _output_transform(m, n0, n1, th, tw_, y, bias, has_bias, relu):
    """``y[n, 4 ti + r, 4 tj + s] = (A^T m A)[r, s]`` (+ bias, ReLU) for the windows of images
    ``n0:n1``, cropped to ``y``'s size; columns, then rows."""
    o_ = m.shape[2]
    ho, wo = y.shape[1], y.shape[2]
    t = np.empty((4, 6, o_), m.dtype)
    k2, k4, k8 = m.dtype.type(2), m.dtype.type(4), m.dtype.type(8)
    zero = y.dtype.type(0)
    p = 0
    for n in range(n0, n1):
        for ti in range(th):
            for tj in range(tw_):
                for b in range(6):
                    q0, q1, q2 = m[b, p], m[6 + b, p], m[12 + b, p]
                    q3, q4, q5 = m[18 + b, p], m[24 + b, p], m[30 + b, p]
                    for o in range(o_):
                        m0, m1, m2, m3, m4, m5 = q0[o], q1[o], q2[o], q3[o], q4[o], q5[o]
                        t[0, b, o] = m0 + m1 + m2 + m3 + m4
                        t[1, b, o] = m1 - m2 + k2 * (m3 - m4)
                        t[2, b, o] = m1 + m2 + k4 * (m3 + m4)
                        t[3, b, o] = m1 - m2 + k8 * (m3 - m4) + m5
                for r in range(min(4, ho - 4 * ti)):
                    row = y[n, 4 * ti + r]
                    s0, s1, s2, s3, s4, s5 = t[r, 0], t[r, 1], t[r, 2], t[r, 3], t[r, 4], t[r, 5]
                    for s in range(min(4, wo - 4 * tj)):
                        out = row[4 * tj + s]
                        for o in range(o_):
                            m0, m1, m2, m3, m4, m5 = s0[o], s1[o], s2[o], s3[o], s4[o], s5[o]
                            if s == 0:
                                val = m0 + m1 + m2 + m3 + m4
                            elif s == 1:
                                val = m1 - m2 + k2 * (m3 - m4)
                            elif s == 2:
                                val = m1 + m2 + k4 * (m3 + m4)
                            else:
                                val = m1 - m2 + k8 * (m3 - m4) + m5
                            if has_bias:
                                val = val + bias[o]
                                if relu:
                                    val = np.maximum(val, zero)
                            out[o] = val
                p += 1


@njit_twin(twins.output_grad_transform, noalias=True)
def _output_grad_transform(dy, n0, n1, th, tw_, w):
    """``w[36, p, O] = A g A^T`` for each 4x4 block ``g`` of ``dy`` (images ``n0:n1``; zeros
    beyond its edge): the gradient of the products from the gradient of the outputs. Rows, then
    columns; the row pass over whole rows of blocks (long loops), the column pass per block, as
    in :func:`_input_transform` (before: 76 loops of O values per block)."""
    o_ = dy.shape[3]
    ho, wo = dy.shape[1], dy.shape[2]
    wc, used = 4 * tw_ * o_, wo * o_
    zero = np.zeros(used, dy.dtype)         # rows beyond dy's edge
    t6 = np.zeros((6, wc), dy.dtype)        # the row pass; columns beyond dy's edge stay zero
    k2, k4, k8 = dy.dtype.type(2), dy.dtype.type(4), dy.dtype.type(8)
    p = 0
    for n in range(n0, n1):
        for ti in range(th):
            i = 4 * ti
            g0 = dy[n, i].reshape(used)
            g1 = dy[n, i + 1].reshape(used) if i + 1 < ho else zero
            g2 = dy[n, i + 2].reshape(used) if i + 2 < ho else zero
            g3 = dy[n, i + 3].reshape(used) if i + 3 < ho else zero
            for u in range(used):
                t6[0, u] = g0[u]
            for u in range(used):
                t6[1, u] = g0[u] + g1[u] + g2[u] + g3[u]
            for u in range(used):
                t6[2, u] = g0[u] - g1[u] + g2[u] - g3[u]
            for u in range(used):
                t6[3, u] = g0[u] + k2 * g1[u] + k4 * g2[u] + k8 * g3[u]
            for u in range(used):
                t6[4, u] = g0[u] - k2 * g1[u] + k4 * g2[u] - k8 * g3[u]
            for u in range(used):
                t6[5, u] = g3[u]
            for tj in range(tw_):
                j = 4 * tj * o_
                for a in range(6):
                    z = 6 * a
                    t0, t1 = t6[a, j:j + o_], t6[a, j + o_:j + 2 * o_]
                    t2, t3 = t6[a, j + 2 * o_:j + 3 * o_], t6[a, j + 3 * o_:j + 4 * o_]
                    for o in range(o_):
                        w[z, p, o] = t0[o]
                    for o in range(o_):
                        w[z + 1, p, o] = t0[o] + t1[o] + t2[o] + t3[o]
                    for o in range(o_):
                        w[z + 2, p, o] = t0[o] - t1[o] + t2[o] - t3[o]
                    for o in range(o_):
                        w[z + 3, p, o] = t0[o] + k2 * t1[o] + k4 * t2[o] + k8 * t3[o]
                    for o in range(o_):
                        w[z + 4, p, o] = t0[o] - k2 * t1[o] + k4 * t2[o] - k8 * t3[o]
                    for o in range(o_):
                        w[z + 5, p, o] = t3[o]
                p += 1


@njit_twin(twins.input_grad_transform, noalias=True)
def _input_grad_transform(e, n0, n1, th, tw_, pt, pl, dx):
    """``dx[n] += B E B^T`` for each window's ``E = e[36, p, C]``, added at the window's place
    (stride 4, so neighbours overlap by 2) less the padding ``pt, pl``; images ``n0:n1`` of
    ``dx``, which must start zeroed. The transpose of :func:`_input_transform`, written the
    same way (one vector loop per output row)."""
    c_ = e.shape[2]
    h, w = dx.shape[1], dx.shape[2]
    t = np.empty((36, c_), e.dtype)     # [6 (r) x 6 (b), C]
    k2, k4, k5 = e.dtype.type(2), e.dtype.type(4), e.dtype.type(5)
    p = 0
    for n in range(n0, n1):
        for ti in range(th):
            for tj in range(tw_):
                for b in range(6):      # along the window's rows: t[r, b] = sum_a B^T[a, r] E[a, b]
                    for c in range(c_):
                        t[b, c] = k4 * e[b, p, c]
                    for c in range(c_):
                        t[6 + b, c] = (-k4 * e[6 + b, p, c] + k4 * e[12 + b, p, c] - k2 * e[18 + b, p, c]
                                       + k2 * e[24 + b, p, c] + k4 * e[30 + b, p, c])
                    for c in range(c_):
                        t[12 + b, c] = (-k5 * e[b, p, c] - k4 * e[6 + b, p, c] - k4 * e[12 + b, p, c]
                                        - e[18 + b, p, c] - e[24 + b, p, c])
                    for c in range(c_):
                        t[18 + b, c] = (e[6 + b, p, c] - e[12 + b, p, c] + k2 * e[18 + b, p, c]
                                        - k2 * e[24 + b, p, c] - k5 * e[30 + b, p, c])
                    for c in range(c_):
                        t[24 + b, c] = (e[b, p, c] + e[6 + b, p, c] + e[12 + b, p, c] + e[18 + b, p, c]
                                        + e[24 + b, p, c])
                    for c in range(c_):
                        t[30 + b, c] = e[30 + b, p, c]
                for r in range(6):      # along its columns, added into dx
                    i = 4 * ti + r - pt
                    if i < 0 or i >= h:
                        continue
                    q = 6 * r
                    for s in range(6):
                        j = 4 * tj + s - pl
                        if j < 0 or j >= w:
                            continue
                        out = dx[n, i, j]
                        if s == 0:
                            for c in range(c_):
                                out[c] += k4 * t[q, c]
                        elif s == 1:
                            for c in range(c_):
                                out[c] += (-k4 * t[q + 1, c] + k4 * t[q + 2, c] - k2 * t[q + 3, c]
                                           + k2 * t[q + 4, c] + k4 * t[q + 5, c])
                        elif s == 2:
                            for c in range(c_):
                                out[c] += (-k5 * t[q, c] - k4 * t[q + 1, c] - k4 * t[q + 2, c] - t[q + 3, c]
                                           - t[q + 4, c])
                        elif s == 3:
                            for c in range(c_):
                                out[c] += (t[q + 1, c] - t[q + 2, c] + k2 * t[q + 3, c] - k2 * t[q + 4, c]
                                           - k5 * t[q + 5, c])
                        elif s == 4:
                            for c in range(c_):
                                out[c] += t[q, c] + t[q + 1, c] + t[q + 2, c] + t[q + 3, c] + t[q + 4, c]
                        else:
                            for c in range(c_):
                                out[c] += t[q + 5, c]
                p += 1


def _filter_transform(f):
    """``U[36, C, O] = G g G^T`` per channel pair (computed in float64, rounded once): two GEMMs
    with all channel pairs as columns (an ``einsum`` took 2/3 of a batch-1 ResNet50 forward)."""
    c, o = f.shape[2], f.shape[3]
    t = np.matmul(_G, f.astype(np.float64).reshape(3, 3 * c * o)).reshape(6, 3, c * o)
    return np.matmul(_G, t).reshape(36, c, o).astype(f.dtype)


def transformed_filter(f):
    """:func:`_filter_transform` of ``f``, kept while ``f`` is an unmodified variable's storage
    (``core/derived.py``): inference reuses it across calls, a training step between its forward
    and its input gradient."""
    return derived.get(f, "winograd.U", _read_only_transform)


def _read_only_transform(f):
    u = _filter_transform(f)
    u.flags.writeable = False        # shared by later calls
    return u


def _planes(scratch, key, p, c, dtype):
    """A C-contiguous ``[36, p, c]`` view of a buffer kept in ``scratch`` (a prefix of a flat
    one, so each of the 36 planes is one run of ``p * c`` values: the transforms run their
    passes over a row of windows as one loop)."""
    return buffer(scratch, key, (36 * p * c,), dtype).reshape(36, p, c)


def _products(a, b, out, one_thread, stacks=False):
    """The 36 stacked GEMMs ``a[i] @ b[i]``. With tiles side by side (``one_thread``) on one
    thread, on the library measured faster on one thread for the stack's shape class
    (``gemm.matmul``), or with ``stacks`` (:func:`_numpy_stacks`) as ``np.matmul`` on the tiles'
    one-thread BLAS; a single tile (batch 1) keeps NumPy's stacked product on its threads."""
    if one_thread and not stacks:
        return gemm.matmul(a, b, out=out, one_thread=True)
    return np.matmul(a, b, out=out)


def _numpy_stacks(one_thread, dtype, m, k, n, transposed=False):
    """Whether the tiles' stacks of 36 ``[m, k] @ [k, n]`` run through ``np.matmul``: with tiles
    side by side, where that measured faster than ``gemm.matmul`` (``conv_choice.numpy_stacks``)."""
    return one_thread and conv_choice.numpy_stacks(dtype, 36, m, k, n, transposed)


def _tiling(kind, n, blk, o, dtype):
    """``(per-image bytes, images per tile, one_thread, stacks)`` of the kernel ``kind``
    (``"forward"``, ``"input"``, ``"filter"``: images per ordered group's sub-tile) for ``n`` images
    of ``blk``'s geometry and ``o`` output channels: the tile cut (``conv_tiles``), and
    :func:`_numpy_stacks` for its stacks."""
    per_image = 36 * blk.per_image() * (blk.c + o) * dtype.itemsize
    if kind == "filter":
        images = max(1, TILE_BYTES // max(per_image, 1))
        one = conv_tiles.batch(n) > GROUP_IMAGES      # several groups: one-thread GEMMs (as the batch's, in a timing)
        shape = (blk.c, min(images, GROUP_IMAGES) * blk.per_image(), o, True)
    else:
        tile, one = conv_tiles.split(n, per_image, TILE_BYTES)
        images = tile // max(per_image, 1)
        windows = images * blk.per_image()
        shape = (windows, blk.c, o, False) if kind == "forward" else (windows, o, blk.c, False)
    return per_image, images, one, _numpy_stacks(one, dtype, *shape)


def choose_stacks(kind, shape, o, pads, dtype):
    """Makes the stack choice of the kernel ``kind`` for a channels-last input ``shape`` now, on this
    thread: ``conv_pair_kernels`` runs the two gradients side by side, and no timing may run beside
    the other gradient (``conv_kernels``' runners call this before they return)."""
    if shape[0] and 0 not in shape[1:]:
        _tiling(kind, shape[0], _Blocks(shape, pads), o, np.dtype(dtype))


class _Blocks:
    """The 4x4 output blocks of a padded 3x3 convolution and the 6x6 input windows they read."""

    def __init__(self, shape, pads):
        n, self.h, self.w, self.c = shape
        (self.pt, pb), (self.pl, pr) = pads
        self.ho, self.wo = self.h + self.pt + pb - 2, self.w + self.pl + pr - 2
        self.th, self.tw = -(-self.ho // 4), -(-self.wo // 4)
        self.hp, self.wp = 4 * self.th + 2, 4 * self.tw + 2   # the windows' extent; beyond the input: zeros
        self.direct = self.pt == 0 and self.pl == 0 and self.hp <= self.h and self.wp <= self.w
        self.hh, self.ww = min(self.h, self.hp - self.pt), min(self.w, self.wp - self.pl)   # input they reach

    def per_image(self):
        return self.th * self.tw

    def transformed_input(self, x, b0, b1, scratch):
        """``V[36, windows of images b0:b1 of x, C]`` in a scratch buffer."""
        k, c = b1 - b0, self.c
        v = _planes(scratch, "v", k * self.per_image(), c, x.dtype)
        if self.direct:
            _input_transform(x, b0, b1, self.th, self.tw, v)
            return v
        xp = buffer(scratch, "xp", (k, self.hp, self.wp, c), x.dtype, 0)   # the border stays zero
        xp[:, self.pt:self.pt + self.hh, self.pl:self.pl + self.ww] = x[b0:b1, :self.hh, :self.ww]
        _input_transform(xp, 0, k, self.th, self.tw, v)
        return v


def conv3x3(x, f, pads, bias=None, relu=False):
    """``[N, H, W, C]`` (channels last) convolved with ``f[3, 3, C, O]``, stride 1, padded by
    ``pads = ((top, bottom), (left, right))`` (each at most 2); with ``bias``: ``+ bias`` then
    ReLU if ``relu`` per output, while its block is in cache."""
    blk = _Blocks(x.shape, pads)
    o = f.shape[3]
    y = np.empty((x.shape[0], max(blk.ho, 0), max(blk.wo, 0), o), x.dtype)
    if y.size == 0:
        return y
    u = transformed_filter(f)
    b = np.zeros(o, x.dtype) if bias is None else np.ascontiguousarray(bias, x.dtype)

    per_image, images, one, stacks = _tiling("forward", x.shape[0], blk, o, x.dtype)
    tile = images * per_image

    def run(b0, b1, scratch):
        v = blk.transformed_input(x, b0, b1, scratch)
        m = _planes(scratch, "m", v.shape[1], o, x.dtype)
        _products(v, u, m, one, stacks)
        _output_transform(m, 0, b1 - b0, blk.th, blk.tw, y[b0:b1], b, bias is not None, relu)
    over_tiles(x.shape[0], per_image, tile, run)
    return y


def conv3x3_backprop_input(x_shape, f, dy, pads):
    """The input gradient of :func:`conv3x3`: the forward algorithm transposed, on the forward's
    windows — ``W = A dy A^T``, 36 GEMMs ``W @ U^T``, then ``B (.) B^T`` added back into the
    overlapping windows."""
    n, h, w, c = x_shape
    blk = _Blocks(x_shape, pads)
    o = f.shape[3]
    ut = np.ascontiguousarray(transformed_filter(f).transpose(0, 2, 1))   # [36, O, C]
    dx = np.empty(x_shape, dy.dtype)
    if dx.size == 0:
        return dx

    per_image, images, one, stacks = _tiling("input", n, blk, o, dy.dtype)
    tile = images * per_image

    def run(b0, b1, scratch):
        wt = _planes(scratch, "w", (b1 - b0) * blk.per_image(), o, dy.dtype)
        _output_grad_transform(dy, b0, b1, blk.th, blk.tw, wt)
        e = _planes(scratch, "e", wt.shape[1], c, dy.dtype)
        _products(wt, ut, e, one, stacks)
        dx[b0:b1] = 0
        _input_grad_transform(e, 0, b1 - b0, blk.th, blk.tw, blk.pt, blk.pl, dx[b0:b1])
    over_tiles(n, per_image, tile, run)
    return dx


def conv3x3_backprop_filter(x, dy, pads):
    """The filter gradient of :func:`conv3x3`, ``[3, 3, C, O]``: ``dU = sum over windows of
    V^T W`` (``W`` the transformed output gradient), then ``G^T dU G``. The images are summed
    in fixed groups of :data:`GROUP_IMAGES` in order, so the bits do not depend on the
    thread count."""
    blk = _Blocks(x.shape, pads)
    o = dy.shape[3]
    parts = {}
    _, sub, one, stacks = _tiling("filter", x.shape[0], blk, o, x.dtype)

    def run(g0, g1, scratch):
        acc = None
        for b0 in range(g0, g1, sub):
            b1 = min(g1, b0 + sub)
            v = blk.transformed_input(x, b0, b1, scratch)
            w = _planes(scratch, "w", v.shape[1], o, x.dtype)
            _output_grad_transform(dy, b0, b1, blk.th, blk.tw, w)
            part = _products(v.transpose(0, 2, 1), w, None, one, stacks)
            if acc is None:
                acc = part
            else:
                acc += part
        parts[g0] = acc
    over_tiles(x.shape[0], 1, GROUP_IMAGES, run)
    order = sorted(parts)
    du = parts[order[0]] if order else np.zeros((36, blk.c, o), x.dtype)
    for k in order[1:]:
        du += parts[k]
    gt = _G.T                               # G^T dU G, as two GEMMs (see _filter_transform)
    t = np.matmul(gt, du.astype(np.float64).reshape(6, 6 * blk.c * o)).reshape(3, 6, blk.c * o)
    return np.matmul(gt, t).reshape(3, 3, blk.c, o).astype(x.dtype)
