"""Compiled loops (numba, through ``jit.njit``) for the nn kernels: col2im for the convolution
input gradient, max pooling and its gradient, the ReLU and its gradient, bias_add.

The window loops work on 3 spatial dimensions, channels last (``[N, D, H, W, C]``); 1-D and 2-D
callers insert unit dimensions (stride, dilation 1, padding 0 there), so one compiled loop
serves every rank. Window positions that fall in the padding are skipped instead of being
materialized, so no padded copy of the input is ever made.

The loops a training step meets first have NumPy twins (``nn_loops_twins``, the same bits)
that run while numba compiles them in the background (``jit.njit_twin``). Python callers get
them through ``loop_choice.Chosen``: the loop or its twin, whichever was measured faster for the
shape class on this machine (``TW_LOOPS``); compiled callers call the dispatchers.
"""
import numpy as np

from tensorweave.kernels.cpu import loop_choice, nn_loops_twins as twins
from tensorweave.kernels.cpu.jit import njit, njit_twin


def as_3d(a, nd):
    """View of ``[N, *S, C]`` (``nd`` spatial dims) as ``[N, D, H, W, C]``."""
    return a.reshape(a.shape[:1] + (1,) * (3 - nd) + a.shape[1:])


def as_3d_windows(a, nd):
    """View of ``[N, *out, *ksize, C]`` as ``[N, OD, OH, OW, KD, KH, KW, C]``."""
    n, rest = a.shape[0], a.shape[1:]
    unit = (1,) * (3 - nd)
    return a.reshape((n,) + unit + rest[:nd] + unit + rest[nd:])


def params_3d(values, nd, fill):
    """A per-spatial-dimension tuple padded in front to 3 entries with ``fill``."""
    return (fill,) * (3 - nd) + tuple(int(v) for v in values)


@njit(noalias=True)
def col2im(dcols, strides, dilations, pads, dx):
    """Adds every window's column back into the input gradient:
    ``dx[b, pos(o, k), c] += dcols[b, o, k, c]`` for the unpadded positions (the adjoint of
    the im2col copy). ``dcols``: ``[N, OD, OH, OW, KD, KH, KW, C]``; ``dx``: ``[N, D, H, W, C]``.

    ``noalias``: the caller's ``dcols`` (a tile's GEMM output, a scratch buffer) never overlaps
    ``dx`` (``conv_kernels._dense_backprop_input``), and without the promise every channel loop
    checked at run time (the ResNet's stride-2 tiles: 11-31 % less thread CPU with it, load 16)."""
    n, od_, oh_, ow_, kd_, kh_, kw_, c_ = dcols.shape
    d_, h_, w_ = dx.shape[1], dx.shape[2], dx.shape[3]
    for b in range(n):
        for od in range(od_):
            for a in range(kd_):
                i = od * strides[0] + a * dilations[0] - pads[0]
                if i < 0 or i >= d_:
                    continue
                for oh in range(oh_):
                    for e in range(kh_):
                        j = oh * strides[1] + e * dilations[1] - pads[1]
                        if j < 0 or j >= h_:
                            continue
                        for ow in range(ow_):
                            for f in range(kw_):
                                k = ow * strides[2] + f * dilations[2] - pads[2]
                                if k < 0 or k >= w_:
                                    continue
                                for c in range(c_):
                                    dx[b, i, j, k, c] += dcols[b, od, oh, ow, a, e, f, c]


@njit_twin(twins.max_windows)
def max_windows(x, ksize, strides, pads, g, res, grad, tiled):
    """Max pooling over ``x`` (``[N, D, H, W, C]``), window by window.

    Each window's winner is its first maximum in raster order, a NaN counting as the maximum
    (as ``np.argmax``). ``grad`` False: ``res[b, o, c]`` = the winner. ``grad`` True: ``res``
    (shaped like ``x``, C-contiguous) gets ``g[b, o, c]`` at the winner's position: added into
    a caller-zeroed ``res`` in general; with ``tiled`` (the windows cover the input exactly
    once: no padding, strides equal to the window) every element written, so ``res`` may be
    uninitialized. ``res`` (forward) or ``g`` (gradient) gives the output shape."""
    n, od_, oh_, ow_, c_ = g.shape if grad else res.shape
    d_, h_, w_ = x.shape[1], x.shape[2], x.shape[3]
    flat = res.reshape(-1)  # res is C-contiguous: the gradient scatters by flat offset
    best = np.empty(c_, x.dtype)
    at = np.empty(c_, np.int64)  # winner's flat spatial index (i * h_ + j) * w_ + k
    for b in range(n):
        for od in range(od_):
            for oh in range(oh_):
                for ow in range(ow_):
                    at[:] = -1  # no position seen yet: the first one wins whatever ``best`` holds
                    for a in range(ksize[0]):
                        i = od * strides[0] + a - pads[0]
                        if i < 0 or i >= d_:
                            continue
                        for e in range(ksize[1]):
                            j = oh * strides[1] + e - pads[1]
                            if j < 0 or j >= h_:
                                continue
                            for f in range(ksize[2]):
                                k = ow * strides[2] + f - pads[2]
                                if k < 0 or k >= w_:
                                    continue
                                p = (i * h_ + j) * w_ + k
                                # Branch-free per channel, so the loop vectorizes. Ties keep the
                                # earlier position; v != v: a NaN beats a number, and the first
                                # NaN stays.
                                for c in range(c_):
                                    v = x[b, i, j, k, c]
                                    bc = best[c]
                                    take = (v > bc) | ((v != v) & (bc == bc)) | (at[c] < 0)
                                    best[c] = v if take else bc
                                    at[c] = p if take else at[c]
                    if grad and tiled:
                        # Every input element is in exactly one window: write each once
                        # (winner's g or 0), contiguous over channels, no zeroing pass.
                        for a in range(ksize[0]):
                            i = od * strides[0] + a
                            for e in range(ksize[1]):
                                j = oh * strides[1] + e
                                for f in range(ksize[2]):
                                    k = ow * strides[2] + f
                                    p = (i * h_ + j) * w_ + k
                                    for c in range(c_):
                                        res[b, i, j, k, c] = g[b, od, oh, ow, c] if at[c] == p else 0
                    elif grad:
                        base = b * d_ * h_ * w_
                        for c in range(c_):
                            flat[(base + at[c]) * c_ + c] += g[b, od, oh, ow, c]
                    else:
                        for c in range(c_):
                            res[b, od, oh, ow, c] = best[c]


@njit
def relu_grad(g, y, out):
    """``out = g where y > 0 else 0`` over flat contiguous arrays, in one pass."""
    for i in range(g.size):
        out[i] = g[i] if y[i] > 0 else 0


@njit(inline="always")     # (a call, even one LLVM inlines, left the loops scalar: 37 µs)
def relu_value(v, zero):
    """``np.maximum(v, 0)`` of one float, bit for bit: ``-0.0`` gives ``0.0``, a NaN stays itself
    (its payload, a signalling one too). Written so that what a loop stores is never plainly the
    value it loaded (``v + 0`` is ``v`` but for ``-0.0`` and a NaN's quiet bit, and ``v`` itself is
    stored only for a NaN): a loop writing where it reads, ``x[i] = 0 if x[i] <= 0 else x[i]``,
    LLVM turns into a masked store of the zeros, or scalar code (36 and 24 µs for 65,536 float32
    against 6.6 this way; thread CPU, AMD EPYC Zen 4, session 25)."""
    w = v + zero
    return v if v != v else (zero if w <= 0 else w)


@njit_twin(twins.relu)
def relu(x, out):
    """``out = np.maximum(x, 0)`` (:func:`relu_value`) over flat contiguous float arrays; ``out``
    may be ``x`` itself (then one array: no runtime overlap check to fail). The Relu kernel's loop
    and a nogil segment's ``RELU`` row: NumPy's ``maximum`` took 35 µs for 65,536 float32 here (no
    vector loop for it on this CPU), this loop 6.6 in place and 7.2 into another array."""
    zero = x.dtype.type(0)
    if out.ctypes.data == x.ctypes.data:
        for i in range(x.size):
            x[i] = relu_value(x[i], zero)
    else:
        for i in range(x.size):
            out[i] = relu_value(x[i], zero)


@njit
def bias_add(v, b, out):
    """``out[i, c, j] = v[i, c, j] + b[c]`` (channels in the middle: ``[N, C, S]``; channels
    last is ``[M, C, 1]``). One pass over memory, where NumPy's broadcast add runs an inner
    loop per row of ``C`` elements."""
    n, c_, s_ = v.shape
    if s_ == 1:
        for i in range(n):
            for c in range(c_):
                out[i, c, 0] = v[i, c, 0] + b[c]
    else:
        for i in range(n):
            for c in range(c_):
                bc = b[c]
                for j in range(s_):
                    out[i, c, j] = v[i, c, j] + bc


@njit_twin(twins.bias_act)
def bias_act(y, b, relu):
    """In place over rows ``y[M, C]``: ``y + b`` then, with ``relu``, ``np.maximum(., 0)`` —
    BiasAdd's and Relu's arithmetic, in one pass over a GEMM's output while it is in cache."""
    zero = y.dtype.type(0)
    for i in range(y.shape[0]):
        if relu:
            for c in range(y.shape[1]):
                y[i, c] = relu_value(y[i, c] + b[c], zero)
        else:
            for c in range(y.shape[1]):
                y[i, c] = y[i, c] + b[c]


@njit_twin(twins.column_sums)
def column_sums(g, acc):
    """``acc[c] += sum over rows of g[:, c]`` (``acc`` float64): BiasAddGrad's sum. Four rows
    are added in float64 before they meet ``acc``, so each pass over ``acc`` carries four
    rows (2x faster than row by row; the order is fixed, so the bits are too)."""
    m, n = g.shape
    i = 0
    while i + 4 <= m:
        for c in range(n):
            acc[c] += ((np.float64(g[i, c]) + np.float64(g[i + 1, c]))
                       + (np.float64(g[i + 2, c]) + np.float64(g[i + 3, c])))
        i += 4
    for r in range(i, m):
        for c in range(n):
            acc[c] += g[r, c]


_column_sums = column_sums        # the dispatcher, for compiled callers (the name below is rebound)


@njit_twin(twins.relu_grad_column_sums)
def relu_grad_column_sums(g, y, out, acc):
    """``out = g where y > 0 else 0`` and ``acc += column sums of out``: ReluGrad followed by
    BiasAddGrad in one call (bit for bit: the same select, then :func:`column_sums` of it
    while ``out`` is still in cache)."""
    for i in range(g.shape[0]):
        gi, yi, oi = g[i], y[i], out[i]
        for c in range(g.shape[1]):
            oi[c] = gi[c] if yi[c] > 0 else 0
    _column_sums(out, acc)


@njit_twin(twins.relu_mask_column_sums)
def relu_mask_column_sums(g, y, acc):
    """:func:`relu_grad_column_sums` in place: ``g = g where y > 0 else 0``, then ``acc +=`` its
    column sums (the same select and sums, so the same bits). Its own loop, not that one with
    ``out`` = ``g``: with its input and output the same array, that loop ran 35x slower (544 µs
    against 15 for 128x512 float32, thread CPU; issue 18 session 19, mlp23: each store to an address
    a later load of the other array may read costs the vector loop its speed)."""
    for i in range(g.shape[0]):
        gi, yi = g[i], y[i]
        for c in range(g.shape[1]):
            gi[c] = gi[c] if yi[c] > 0 else 0
    _column_sums(g, acc)


@njit_twin(twins.shift_rows)
def shift_rows(x, labels, shifted, picked):
    """First pass of the sparse softmax cross-entropy over ``x[N, C]``: ``shifted[i] = x[i] - m``
    with ``m`` the row's maximum (0 where that is not finite, so all -inf rows do not become
    0/0), and ``picked[i]`` the shifted logit of the row's label. Returns the first row whose
    label is outside ``[0, C)``, or -1. (The exponentials run between the passes in NumPy,
    whose vector ``exp`` a compiled loop does not get.)"""
    n, c = x.shape
    for i in range(n):
        label = labels[i]
        if label < 0 or label >= c:
            return i
        m = x[i, 0]
        for j in range(1, c):
            m = max(m, x[i, j])
        if not np.isfinite(m):
            m = 0
        for j in range(c):
            shifted[i, j] = x[i, j] - m
        picked[i] = shifted[i, label]
    return -1


@njit_twin(twins.xent_from_exps)
def xent_from_exps(e, labels, picked, loss, with_grad):
    """Second pass: from ``e = exp(shifted)``, ``loss[i] = log(sum e[i]) - picked[i]`` (sums in
    float64) and, ``with_grad``, ``e`` overwritten by softmax minus one-hot."""
    n, c = e.shape
    for i in range(n):
        total = 0.0
        for j in range(c):
            total += e[i, j]
        loss[i] = np.log(total) - picked[i]
        if with_grad:
            for j in range(c):
                e[i, j] = e[i, j] / total
            e[i, labels[i]] -= 1


# Python callers: the compiled loop or its twin, chosen per shape class by measurement
bias_act, column_sums, relu_grad_column_sums, relu_mask_column_sums, shift_rows, xent_from_exps, max_windows, relu = (
    loop_choice.Chosen(k) for k in (bias_act, column_sums, relu_grad_column_sums, relu_mask_column_sums, shift_rows,
                                    xent_from_exps, max_windows, relu))
