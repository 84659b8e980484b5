"""NumPy twins of the ``nn_loops`` kernels a training step meets first: the same bits.

They run while numba compiles the kernels on a background thread (``jit.Warming``), so a cold
process trains at once instead of waiting seconds per kernel. Every element is computed with
the same operations, types and order as in the compiled loop: sums keep the loop's sequence
(``np.cumsum`` and row-by-row reductions, never NumPy's pairwise sums), row maxima use the
loop's ``>`` comparisons, logarithms the C library's ``log`` (``math.log``, which the compiled
code also calls). Arguments and results are the kernels' (see ``nn_loops``).

>>> import numpy as np
>>> from tensorweave.kernels.cpu import jit, nn_loops, nn_loops_twins
>>> g = np.arange(30, dtype=np.float32).reshape(10, 3) / 7
>>> a1, a2 = np.zeros(3), np.zeros(3)
>>> jit.compile_now(nn_loops.column_sums, g, a1)(g, a1); nn_loops_twins.column_sums(g, a2)
>>> bool((a1 == a2).all())
True
"""
import math

import numpy as np


def bias_act(y, b, relu):
    np.add(y, b, out=y)
    if relu:
        np.maximum(y, y.dtype.type(0), out=y)


def relu(x, out):
    np.maximum(x, x.dtype.type(0), out=out)


def column_sums(g, acc):
    m = g.shape[0]
    m4 = m - m % 4
    if m4:
        f64 = np.float64
        groups = ((g[0:m4:4].astype(f64) + g[1:m4:4].astype(f64))
                  + (g[2:m4:4].astype(f64) + g[3:m4:4].astype(f64)))
        # acc, then each group in turn: a cumulative sum down the rows is the loop's order.
        acc[:] = np.cumsum(np.concatenate([acc[None], groups]), axis=0)[-1]
    for r in range(m4, m):
        acc += g[r]


def relu_grad_column_sums(g, y, out, acc):
    np.copyto(out, np.where(y > 0, g, out.dtype.type(0)))
    column_sums(out, acc)


def relu_mask_column_sums(g, y, acc):
    np.copyto(g, g.dtype.type(0), where=~(y > 0))
    column_sums(g, acc)


def shift_rows(x, labels, shifted, picked):
    n, c = x.shape
    bad = np.flatnonzero((labels < 0) | (labels >= c))
    rows = int(bad[0]) if bad.size else n
    xs = x[:rows]
    m = xs[:, 0].copy()
    for j in range(1, c):                   # max(m, v): v replaces m only if v > m
        np.copyto(m, xs[:, j], where=xs[:, j] > m)
    m[~np.isfinite(m)] = 0
    np.subtract(xs, m[:, None], out=shifted[:rows])
    picked[:rows] = shifted[np.arange(rows), labels[:rows]]
    return rows if bad.size else -1


def xent_from_exps(e, labels, picked, loss, with_grad):
    n = e.shape[0]
    total = np.cumsum(e, axis=1, dtype=np.float64)[:, -1] if e.shape[1] else np.zeros(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(n):
            t = float(total[i])
            loss[i] = (math.log(t) if t > 0 else float(np.log(t))) - float(picked[i])
        if with_grad:
            e[:] = e / total[:, None]
            rows = np.arange(n)
            e[rows, labels] = e[rows, labels] - 1


def _window_values(x, offsets, strides, pads, outs):
    """``x`` at one window offset for every output position: a strided view when every
    position is inside ``x``, else a gathered copy (positions in the padding clipped) and
    the mask of the valid ones. Also each position's flat spatial index."""
    sizes = x.shape[1:4]
    idx = [np.arange(o) * s + f - p for o, s, f, p in zip(outs, strides, offsets, pads)]
    grid = np.ix_(*idx)
    flat = (grid[0] * sizes[1] + grid[1]) * sizes[2] + grid[2]
    if all(i[0] >= 0 and i[-1] < n for i, n in zip(idx, sizes) if len(i)):
        view = x[:, idx[0][0]:idx[0][-1] + 1:strides[0], idx[1][0]:idx[1][-1] + 1:strides[1],
                 idx[2][0]:idx[2][-1] + 1:strides[2]] if all(len(i) for i in idx) else x[:, :0, :0, :0]
        return view, None, flat[None, :, :, :, None]
    ok = [(i >= 0) & (i < n) for i, n in zip(idx, sizes)]
    clipped = [np.clip(i, 0, n - 1) for i, n in zip(idx, sizes)]
    cg = np.ix_(*clipped)
    valid = (ok[0][:, None, None] & ok[1][None, :, None] & ok[2][None, None, :])[None, :, :, :, None]
    return x[:, cg[0], cg[1], cg[2]], valid, flat[None, :, :, :, None]


def max_windows(x, ksize, strides, pads, g, res, grad, tiled):
    shape = g.shape if grad else res.shape
    outs = shape[1:4]
    best = np.zeros(shape, x.dtype)
    at = np.full(shape, -1, np.int64)
    take = np.empty(shape, bool)
    seen_all = False                        # every window has seen a position (at >= 0 everywhere)
    for a in range(ksize[0]):
        for e in range(ksize[1]):
            for f in range(ksize[2]):
                v, valid, p = _window_values(x, (a, e, f), strides, pads, outs)
                if valid is None and not seen_all and a == e == f == 0:   # every window's first position
                    best[...] = v
                    at[...] = p
                    seen_all = True
                    continue
                # The loop's test: v > best, or v is a NaN and best is not, or nothing seen yet.
                np.greater(v, best, out=take)
                if np.isnan(v).any():
                    take |= (v != v) & (best == best)
                if not seen_all:
                    take |= at < 0
                if valid is not None:
                    take &= valid
                else:
                    seen_all = True             # from here on every window has seen a position
                np.copyto(best, v, where=take)
                np.copyto(at, np.broadcast_to(p, shape), where=take)
    if not grad:
        res[...] = best
        return
    n, (d_, h_, w_), c_ = x.shape[0], x.shape[1:4], x.shape[4]
    if not tiled:
        base = (np.arange(n) * (d_ * h_ * w_))[:, None, None, None, None]
        np.add.at(res.reshape(-1), ((base + at) * c_ + np.arange(c_)).reshape(-1), g.reshape(-1))
        return
    zero = g.dtype.type(0)
    for a in range(ksize[0]):
        for e in range(ksize[1]):
            for f in range(ksize[2]):
                _, _, p = _window_values(x, (a, e, f), strides, pads, outs)
                win = res[:, a::strides[0], e::strides[1], f::strides[2]][:, :outs[0], :outs[1], :outs[2]]
                np.copyto(win, np.where(at == p, g, zero))
