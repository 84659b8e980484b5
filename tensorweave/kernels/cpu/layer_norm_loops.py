"""Compiled loops (numba) of the fused layer-norm and softmax-gradient kernels over ``[M, N]``
rows (one row: the normalized values, or a softmax's classes), and their NumPy twins (the same
operations in the same order: the same bits; ``jit.njit_twin``). Python callers get them
through ``loop_choice.Chosen``: loop or twin, whichever was measured faster on this machine.

A row's sums are taken in float64 in eight lanes (value ``c`` into lane ``c % 8``, each lane in
order), then the lanes added pairwise, then the ``N % 8`` last values one by one: a fixed order
(so the twins can follow it), and eight independent additions a step instead of one chain (a
chain of dependent float64 additions ran at ~4 cycles a value). Column sums (the gradient's
``dgamma``/``dbeta``) are added row after row, in float64. Elementwise work is in the rows'
dtype, with the statistics rounded to it once per row.

>>> import numpy as np
>>> from tensorweave.kernels.cpu.layer_norm_loops import lane_sums_twin
>>> lane_sums_twin(np.arange(10.0)[None]).tolist()
[45.0]
"""
import numpy as np

from tensorweave.kernels.cpu import loop_choice
from tensorweave.kernels.cpu.jit import njit, njit_twin

#: lanes of a row sum (see the module docstring)
LANES = 8


def lane_sums_twin(s):
    """Per row of the float64 ``[M, N]`` array ``s``: its sum in :func:`lane_sum`'s order."""
    m, n = s.shape
    n8 = n // LANES * LANES
    if n8:
        lanes = np.cumsum(s[:, :n8].reshape(m, n8 // LANES, LANES), axis=1)[:, -1, :]
    else:
        lanes = np.zeros((m, LANES))
    t = ((lanes[:, 0] + lanes[:, 1]) + (lanes[:, 2] + lanes[:, 3])) + \
        ((lanes[:, 4] + lanes[:, 5]) + (lanes[:, 6] + lanes[:, 7]))
    for c in range(n8, n):
        t = t + s[:, c]
    return t


@njit
def lane_sum(s):
    """The sum of the float64 vector ``s``: eight lanes, added pairwise, then the tail."""
    n = s.shape[0]
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
    j = 0
    while j + 8 <= n:
        a0 += s[j]
        a1 += s[j + 1]
        a2 += s[j + 2]
        a3 += s[j + 3]
        a4 += s[j + 4]
        a5 += s[j + 5]
        a6 += s[j + 6]
        a7 += s[j + 7]
        j += 8
    t = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
    for c in range(j, n):
        t += s[c]
    return t


def _column_add_twin(acc, d):
    """``acc += d``'s rows added one after another (the loops' order)."""
    acc[:] = np.cumsum(np.concatenate([acc[None], d]), axis=0)[-1]


# ---- layer norm forward -----------------------------------------------------------------------
def _shift_twin(mean, rms):
    """What ``y`` subtracts from a row: its mean, or nothing with ``rms`` (Keras' ``rms_scaling``)."""
    return np.zeros_like(mean) if rms else mean


def forward_twin(x, res, add, gamma, beta, eps, rms, y, mean, inv):
    if add:
        x = x + res
    m, n = x.shape
    s = x.astype(np.float64)
    mu = lane_sums_twin(s) / n
    d = s - mu[:, None]
    iv = 1.0 / np.sqrt(lane_sums_twin(d * d) / n + eps)
    mean[:] = mu
    inv[:] = iv
    xh = np.subtract(x, _shift_twin(mean, rms)[:, None], out=y)
    xh *= inv[:, None]
    xh *= gamma
    xh += beta


@njit_twin(forward_twin)
def forward(x, res, add, gamma, beta, eps, rms, y, mean, inv):
    """Per row of ``v`` (``x``, or with ``add`` ``x + res`` in the rows' dtype: a residual add's
    sum, never written out): ``mean``, ``inv = 1 / sqrt(mean((v - mean)^2) + eps)`` (sums in
    float64, stored in the rows' dtype) and ``y = (v - mean) * inv * gamma + beta``; with ``rms``
    (Keras 3's ``rms_scaling``: the centred variance, an uncentred ``v``) ``y = v * inv * gamma +
    beta``. Without ``add``, ``res`` is not read (pass ``x``)."""
    m, n = x.shape
    s = np.empty(n)
    zero = mean.dtype.type(0.0)
    for r in range(m):
        if add:
            for c in range(n):
                s[c] = np.float64(x[r, c] + res[r, c])
        else:
            for c in range(n):
                s[c] = np.float64(x[r, c])
        mu = lane_sum(s) / n
        for c in range(n):
            d = s[c] - mu
            s[c] = d * d
        iv = 1.0 / np.sqrt(lane_sum(s) / n + eps)
        mean[r] = mu
        inv[r] = iv
        mw, iw = mean[r], inv[r]
        if rms:
            mw = zero
        if add:
            for c in range(n):
                y[r, c] = ((x[r, c] + res[r, c]) - mw) * iw * gamma[c] + beta[c]
        else:
            for c in range(n):
                y[r, c] = (x[r, c] - mw) * iw * gamma[c] + beta[c]


# ---- layer norm backward ----------------------------------------------------------------------
def backward_twin(dy, x, gamma, mean, inv, mean_grad, inv_grad, rms, dx, dgamma, dbeta):
    m, n = x.shape
    xh = np.subtract(x, _shift_twin(mean, rms)[:, None])
    xh *= inv[:, None]
    z = (x - mean[:, None]) * inv[:, None] if rms else xh
    gy = np.multiply(dy, gamma, out=dx)
    inv64 = inv.astype(np.float64)
    a = (np.zeros(m) if rms else lane_sums_twin(gy.astype(np.float64)) / n) - mean_grad / (n * inv64)
    b = lane_sums_twin(gy.astype(np.float64) * xh.astype(np.float64)) / n + inv_grad * inv64 / n
    _column_add_twin(dgamma, dy.astype(np.float64) * xh.astype(np.float64))
    _column_add_twin(dbeta, dy.astype(np.float64))
    gy -= a.astype(dx.dtype)[:, None]
    gy -= z * b.astype(dx.dtype)[:, None]
    gy *= inv[:, None]


@njit_twin(backward_twin)
def backward(dy, x, gamma, mean, inv, mean_grad, inv_grad, rms, dx, dgamma, dbeta):
    """Per row, with ``xh = (x - mean) * inv`` (``x * inv`` with ``rms``: what ``y`` scales),
    ``z = (x - mean) * inv`` and ``gy = dy * gamma``: ``dx = (gy - a - z * b) * inv``
    (``a = mean(gy) - mean_grad / (N inv)``, without ``mean(gy)`` with ``rms``;
    ``b = mean(gy * xh) + inv_grad * inv / N``, float64 sums); ``dgamma += dy * xh`` and
    ``dbeta += dy`` column by column in float64 (``mean_grad``/``inv_grad``: float64, the
    forward's statistics' gradients)."""
    m, n = x.shape
    s1 = np.empty(n)
    s2 = np.empty(n)
    zero = mean.dtype.type(0.0)
    for r in range(m):
        mw, iw = mean[r], inv[r]
        sw = zero if rms else mw
        for c in range(n):
            xh = (x[r, c] - sw) * iw
            g = dy[r, c] * gamma[c]
            dx[r, c] = g
            s1[c] = np.float64(g)
            s2[c] = np.float64(g) * np.float64(xh)
            d = np.float64(dy[r, c])
            dgamma[c] += d * np.float64(xh)
            dbeta[c] += d
        iv = np.float64(iw)
        a = (0.0 if rms else lane_sum(s1) / n) - mean_grad[r] / (n * iv)
        b = lane_sum(s2) / n + inv_grad[r] * iv / n
        aw, bw = dx.dtype.type(a), dx.dtype.type(b)
        for c in range(n):
            z = (x[r, c] - mw) * iw
            dx[r, c] = (dx[r, c] - aw - z * bw) * iw


_backward = backward     # (compiled callers call the dispatcher, not the Python callers' choice)


def backward_tiles_twin(dy, x, gamma, mean, inv, mean_grad, inv_grad, rms, tile_rows, dx, dgamma, dbeta):
    m, n = x.shape
    for r0 in range(0, m, tile_rows):
        r1 = min(m, r0 + tile_rows)
        dg, db = np.zeros(n), np.zeros(n)
        backward_twin(dy[r0:r1], x[r0:r1], gamma, mean[r0:r1], inv[r0:r1], mean_grad[r0:r1], inv_grad[r0:r1], rms,
                      dx[r0:r1], dg, db)
        dgamma += dg
        dbeta += db


@njit_twin(backward_tiles_twin)
def backward_tiles(dy, x, gamma, mean, inv, mean_grad, inv_grad, rms, tile_rows, dx, dgamma, dbeta):
    """The whole gradient on this thread in one call: :func:`backward` over tiles of ``tile_rows``
    rows, each tile's column sums in zeroed float64 partials added to ``dgamma``/``dbeta`` in tile
    order, as ``layer_norm_kernels`` adds the partials of tiles shared over threads (the same bits).
    (That tile loop in Python, its partials and a dispatch a tile, cost 20-40 µs of a ~220 µs call
    for the transformer's [2048, 64] rows; issue 18 session 26, trf30.)"""
    m, n = x.shape
    dg, db = np.empty(n), np.empty(n)
    for r0 in range(0, m, tile_rows):
        r1 = min(m, r0 + tile_rows)
        dg[:] = 0.0
        db[:] = 0.0
        _backward(dy[r0:r1], x[r0:r1], gamma, mean[r0:r1], inv[r0:r1], mean_grad[r0:r1], inv_grad[r0:r1], rms,
                  dx[r0:r1], dg, db)
        for c in range(n):
            dgamma[c] += dg[c]
            dbeta[c] += db[c]


# ---- softmax gradient -------------------------------------------------------------------------
def softmax_grad_twin(y, g, scale, dx):
    s = lane_sums_twin(g.astype(np.float64) * y.astype(np.float64)).astype(dx.dtype)
    t = np.subtract(g, s[:, None], out=dx)
    t *= y
    t *= scale


@njit_twin(softmax_grad_twin)
def softmax_grad(y, g, scale, dx):
    """Per row: ``dx = (y * (g - s)) * scale`` with ``s = sum(g * y)`` (float64, rounded to the
    rows' dtype once); ``scale`` in the rows' dtype."""
    m, n = y.shape
    s = np.empty(n)
    for r in range(m):
        for c in range(n):
            s[c] = np.float64(g[r, c]) * np.float64(y[r, c])
        sw = dx.dtype.type(lane_sum(s))
        for c in range(n):
            dx[r, c] = y[r, c] * (g[r, c] - sw) * scale


# Python callers: the compiled loop or its twin, chosen per shape class by measurement
forward, backward, backward_tiles, softmax_grad = (loop_choice.Chosen(k) for k in (forward, backward, backward_tiles,
                                                                                   softmax_grad))
