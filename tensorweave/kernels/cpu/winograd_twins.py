"""NumPy twins of the Winograd transforms in ``winograd.py``: the same arithmetic, bit for bit.

Each compiled transform takes seconds of LLVM work on its first call; until it is compiled
(on a background thread, see ``jit.Warming``) these run instead. Every output element is the
same float32 expression as in the compiled loop — the same operands, operators and order, no
reassociation — evaluated for all windows at once; where windows overlap (the input gradient
adds into ``dx``) the windows are added one by one in the compiled loop's order, so each sum
is rounded the same way. Arguments and results are the compiled functions' (see there).

>>> import numpy as np
>>> from tensorweave.kernels.cpu import jit, winograd, winograd_twins
>>> x = np.random.default_rng(0).standard_normal((2, 10, 10, 3)).astype(np.float32)
>>> v1, v2 = np.empty((36, 8, 3), np.float32), np.empty((36, 8, 3), np.float32)
>>> jit.compile_now(winograd._input_transform, x, 0, 2, 2, 2, v1)(x, 0, 2, 2, 2, v1)
>>> winograd_twins.input_transform(x, 0, 2, 2, 2, v2)
>>> bool((v1 == v2).all())
True
"""
import numpy as np
from numpy.lib.stride_tricks import as_strided


def _consts(dtype, *values):
    return tuple(dtype.type(v) for v in values)


def _rows6(d, k2, k4, k5):
    """``B^T`` applied along one axis: the six combinations of ``d[0..5]`` (as the loops write them)."""
    d0, d1, d2, d3, d4, d5 = d
    return (k4 * d0 - k5 * d2 + d4,
            -k4 * d1 - k4 * d2 + d3 + d4,
            k4 * d1 - k4 * d2 - d3 + d4,
            -k2 * d1 - d2 + k2 * d3 + d4,
            k2 * d1 - d2 - k2 * d3 + d4,
            k4 * d1 - k5 * d3 + d5)


def input_transform(x, n0, n1, th, tw_, v):
    k2, k4, k5 = _consts(x.dtype, 2, 4, 5)
    xs = x[n0:n1]
    k, c = n1 - n0, x.shape[3]
    s = xs.strides
    # win[n, ti, tj, a, b, c] = x[n, 4 ti + a, 4 tj + b, c]
    win = as_strided(xs, (k, th, tw_, 6, 6, c), (s[0], 4 * s[1], 4 * s[2], s[1], s[2], s[3]), writeable=False)
    t = _rows6([win[:, :, :, a] for a in range(6)], k2, k4, k5)        # rows: t[r][..., b, c]
    p = k * th * tw_
    for r in range(6):
        cols = _rows6([t[r][:, :, :, b] for b in range(6)], k2, k4, k5)
        for q, val in enumerate(cols):
            v[6 * r + q, :p] = val.reshape(p, c)


def _rows4(m, k2, k4, k8):
    """``A^T`` along one axis: four combinations of ``m[0..5]``."""
    m0, m1, m2, m3, m4, m5 = m
    return (m0 + m1 + m2 + m3 + m4,
            m1 - m2 + k2 * (m3 - m4),
            m1 + m2 + k4 * (m3 + m4),
            m1 - m2 + k8 * (m3 - m4) + m5)


def output_transform(m, n0, n1, th, tw_, y, bias, has_bias, relu):
    k2, k4, k8 = _consts(m.dtype, 2, 4, 8)
    k, o = n1 - n0, m.shape[2]
    p = k * th * tw_
    mm = [[m[6 * a + b, :p].reshape(k, th, tw_, o) for b in range(6)] for a in range(6)]
    t = [_rows4([mm[a][b] for a in range(6)], k2, k4, k8) for b in range(6)]     # t[b][r]
    full = np.empty((k, th, 4, tw_, 4, o), m.dtype)
    for r in range(4):
        for s, val in enumerate(_rows4([t[b][r] for b in range(6)], k2, k4, k8)):
            if has_bias:
                val = val + bias
                if relu:
                    val = np.maximum(val, y.dtype.type(0))
            full[:, :, r, :, s] = val
    ho, wo = y.shape[1], y.shape[2]
    y[n0:n1] = full.reshape(k, 4 * th, 4 * tw_, o)[:, :ho, :wo]


def _rows_a(g, k2, k4, k8):
    """``A`` along one axis: six combinations of ``g[0..3]``."""
    g0, g1, g2, g3 = g
    return (g0,
            g0 + g1 + g2 + g3,
            g0 - g1 + g2 - g3,
            g0 + k2 * g1 + k4 * g2 + k8 * g3,
            g0 - k2 * g1 + k4 * g2 - k8 * g3,
            g3)


def output_grad_transform(dy, n0, n1, th, tw_, w):
    k2, k4, k8 = _consts(dy.dtype, 2, 4, 8)
    k, o = n1 - n0, dy.shape[3]
    ho, wo = dy.shape[1], dy.shape[2]
    padded = np.zeros((k, 4 * th, 4 * tw_, o), dy.dtype)     # zeros beyond dy's edge
    padded[:, :ho, :wo] = dy[n0:n1]
    blocks = padded.reshape(k, th, 4, tw_, 4, o)
    t = _rows_a([blocks[:, :, r] for r in range(4)], k2, k4, k8)     # t[a][n, ti, tj, s, o]
    p = k * th * tw_
    for a in range(6):
        for z, val in enumerate(_rows_a([t[a][:, :, :, s] for s in range(4)], k2, k4, k8)):
            w[6 * a + z, :p] = val.reshape(p, o)


def _rows_b(e, k2, k4, k5):
    """``B`` along one axis: six combinations of ``e[0..5]``."""
    e0, e1, e2, e3, e4, e5 = e
    return (k4 * e0,
            -k4 * e1 + k4 * e2 - k2 * e3 + k2 * e4 + k4 * e5,
            -k5 * e0 - k4 * e1 - k4 * e2 - e3 - e4,
            e1 - e2 + k2 * e3 - k2 * e4 - k5 * e5,
            e0 + e1 + e2 + e3 + e4,
            e5)


def input_grad_transform(e, n0, n1, th, tw_, pt, pl, dx):
    k2, k4, k5 = _consts(e.dtype, 2, 4, 5)
    k, c = n1 - n0, e.shape[2]
    h, w = dx.shape[1], dx.shape[2]
    p = k * th * tw_
    ee = [[e[6 * a + b, :p].reshape(k, th, tw_, c) for b in range(6)] for a in range(6)]
    t = [_rows_b([ee[a][b] for a in range(6)], k2, k4, k5) for b in range(6)]    # t[b][r]
    full = np.empty((k, th, tw_, 6, 6, c), e.dtype)
    for r in range(6):
        for s, val in enumerate(_rows_b([t[b][r] for b in range(6)], k2, k4, k5)):
            full[:, :, :, r, s] = val
    # Overlapping windows add into dx one window at a time, in the loop's (raster) order.
    for ti in range(th):
        i0 = 4 * ti - pt
        r0, r1 = max(0, -i0), min(6, h - i0)
        if r1 <= r0:
            continue
        for tj in range(tw_):
            j0 = 4 * tj - pl
            s0, s1 = max(0, -j0), min(6, w - j0)
            if s1 <= s0:
                continue
            dx[n0:n1, i0 + r0:i0 + r1, j0 + s0:j0 + s1] += full[:, ti, tj, r0:r1, s0:s1]
