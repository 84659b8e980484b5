"""CPU kernels of the fused layer norm (``ops/layer_norm_ops.py``) and of ``SoftmaxGrad``
(``ops/softmax_grad_ops.py``): one pass over each row (``layer_norm_loops``), blocked over rows
on the intra-op threads (``tiles.over_tiles``).

- ``LayerNorm``: per row its mean and inverse standard deviation (float64 sums) and
  ``y = (x - mean) * inv * gamma + beta``; the unfused graph (``moments`` +
  ``batch_normalization``) made ~6 passes over the activations, each on the calling thread.
- ``LayerNormGrad``: per row ``dx`` and the column sums ``dgamma``/``dbeta`` (float64 partials per
  tile of :data:`TILE_ROWS_BYTES`, added in tile order: the bits do not depend on the thread
  count); ~12 passes before.
- ``SoftmaxGrad``: per row ``(y * (g - sum(g * y))) * scale``; 4-5 passes before.

Rows are the input's leading axes flattened (a C-contiguous copy where the input is not);
float16/bfloat16 are computed in float32 and rounded once.
"""
import math

import numpy as np

from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu import layer_norm_loops as loops
from tensorweave.kernels.cpu import split_passes
from tensorweave.kernels.cpu.nn_util import floats, work
from tensorweave.kernels.cpu.tiles import on_this_thread, over_tiles
from tensorweave.kernels.cpu.util import quiet
from tensorweave.ops import layer_norm_ops, softmax_grad_ops  # noqa: F401 - the ops, registered with tensorweave

#: bytes of rows per tile: the encoder's [16 x 128, 256] float32 activations make 8 tiles, so a
#: helper thread starting late still takes its share; a tile's column partials are float64 [N]
TILE_ROWS_BYTES = 1 << 18


def _rows(a, begin):
    """``a`` in its work dtype as C-contiguous ``[M, N]`` rows (the axes from ``begin`` on).
    (``math.prod`` of the shape's ints: ``np.prod`` was ~8 µs a call of a 40 µs batch-1 layer norm;
    issue 18 session 20, att24.)"""
    aw = np.ascontiguousarray(work(a))
    return aw.reshape(math.prod(aw.shape[:begin]), math.prod(aw.shape[begin:]))


def _over_rows(m, n, itemsize, run):
    """``run(r0, r1, _scratch)`` over tiles of rows of :data:`TILE_ROWS_BYTES`, on the intra-op
    threads where a pass of ``m x n`` values is split (``split_passes.parts_for``: measured per
    machine), else every tile on this thread: the same tiles either way (the gradient's column
    partials, so its bits), without the threads' hand-off for the transformer's [2048, 64] rows
    (the tiles' hand-off and BLAS thread-count calls cost more than half of the forward's loop;
    issue 18 session 18, tx22). Rows of one tile, not split, are one call here (the tile loop's
    own rows). One tile (every row in :data:`TILE_ROWS_BYTES`) is that call on any thread count,
    so it does not ask ``parts_for`` (its thread count read: encoder2_predict's four layer norms of
    [128, 256] float32, the "one" way of ``FusedBlockTail``; issue 18, enc30)."""
    nbytes = m * n * itemsize
    if nbytes <= TILE_ROWS_BYTES:
        run(0, m, {})
        return
    if split_passes.parts_for(nbytes, m) < 2:
        with on_this_thread():
            over_tiles(m, max(1, n * itemsize), TILE_ROWS_BYTES, run)
    else:
        over_tiles(m, max(1, n * itemsize), TILE_ROWS_BYTES, run)


def _same_dtype(wd, *vectors):
    """The op's rule (its message comes from the shape rule): parameters and statistics in the work dtype."""
    if any(v.dtype != wd for v in vectors):
        raise TypeError("gamma, beta and the statistics must have x's work dtype")


def _begin(x, begin_norm_axis):
    b = int(begin_norm_axis)
    b = b + x.ndim if b < 0 else b
    if not 0 <= b < x.ndim:
        raise ValueError("begin_norm_axis out of range")
    return b


@k("LayerNorm")
def _layer_norm(x, gamma, beta, epsilon, begin_norm_axis, rms):
    """``(y, mean, inv)``; see ``ops/layer_norm_ops.py``."""
    return _normalize(x, None, gamma, beta, epsilon, begin_norm_axis, rms)


@quiet
def _normalize(x, res, gamma, beta, epsilon, begin_norm_axis, rms):
    """``LayerNorm(x)``'s outputs, or with ``res`` (of ``x``'s shape and dtype) ``LayerNorm(x +
    res)``'s, the add in the rows' loop."""
    floats(x)
    begin = _begin(x, begin_norm_axis)
    x2 = _rows(x, begin)
    r2 = x2 if res is None else _rows(res, begin)
    m, n = x2.shape
    wd = x2.dtype
    if gamma.shape != x.shape[begin:] or beta.shape != x.shape[begin:]:
        raise ValueError("gamma and beta must be shaped like the normalized axes")
    _same_dtype(wd, gamma, beta)
    g, b = gamma.astype(wd, copy=False).ravel(), beta.astype(wd, copy=False).ravel()
    y2, mean, inv = np.empty_like(x2), np.empty(m, wd), np.empty(m, wd)
    if n == 0:          # nothing to normalize: no statistics either (NaN as 0/0)
        mean[:], inv[:] = np.nan, np.nan
    else:
        _over_rows(m, n, wd.itemsize, lambda r0, r1, _s: loops.forward(
            x2[r0:r1], r2[r0:r1], res is not None, g, b, np.float64(epsilon), bool(rms), y2[r0:r1], mean[r0:r1],
            inv[r0:r1]))
    rows = x.shape[:begin]
    return y2.reshape(x.shape).astype(x.dtype, copy=False), mean.reshape(rows), inv.reshape(rows)


def add_layer_norm(x, res, gamma, beta, epsilon, begin_norm_axis, rms):
    """``LayerNorm(x + res)``'s ``(y, mean, inv)``, the sum never written out: the plan node
    ``runtime/passes/residual_norm.py`` makes of a residual ``AddV2`` read by a ``LayerNorm``
    alone (``AddLayerNorm``, never a graph op). The sum is taken in the rows' dtype as the add's
    kernel takes it, so the bits are the two steps'. ``x`` and ``res`` are float32 or float64 of
    one shape and dtype (the pass checks it; float16/bfloat16 stay two steps).

    >>> import numpy as np
    >>> one = np.ones(2, np.float32)
    >>> add_layer_norm(np.array([[0, 2]], np.float32), np.array([[1, 1]], np.float32), one, one, 0.0, -1,
    ...                False)[0].tolist()
    [[0.0, 2.0]]
    """
    if res.shape != x.shape or res.dtype != x.dtype or x.dtype not in (np.float32, np.float64):
        raise ValueError(f"AddLayerNorm: the residual {res.dtype}{list(res.shape)} must have the input's shape and "
                         f"dtype {x.dtype}{list(x.shape)}, float32 or float64")
    return _normalize(x, res, gamma, beta, epsilon, begin_norm_axis, rms)


@k("LayerNormGrad")
@quiet
def _layer_norm_grad(dy, x, gamma, mean, inv, mean_grad, inv_grad, epsilon, begin_norm_axis, rms):
    """``(dx, dgamma, dbeta)``; see ``ops/layer_norm_ops.py``."""
    floats(dy, x)
    if dy.shape != x.shape:
        raise ValueError("dy must have x's shape")
    begin = _begin(x, begin_norm_axis)
    x2, dy2 = _rows(x, begin), _rows(dy, begin)
    m, n = x2.shape
    wd = x2.dtype
    if gamma.shape != x.shape[begin:]:
        raise ValueError("gamma must be shaped like the normalized axes")
    for v in (mean, inv, mean_grad, inv_grad):
        if v.shape != x.shape[:begin]:
            raise ValueError("mean, inv and their gradients must be shaped like the rows")
    _same_dtype(wd, gamma, mean, inv, mean_grad, inv_grad)
    # (copies: a read-only weight or statistic would make numba compile another signature)
    g, mu, iv = gamma.astype(wd).ravel(), mean.astype(wd).ravel(), inv.astype(wd).ravel()
    gm, gi = mean_grad.astype(np.float64).ravel(), inv_grad.astype(np.float64).ravel()
    dx2 = np.empty_like(x2)
    dgamma, dbeta = np.zeros(n), np.zeros(n)
    tile_rows = max(1, min(m, TILE_ROWS_BYTES // max(1, n * wd.itemsize)))     # (over_tiles' tiles)
    if n and split_passes.parts_for(m * n * wd.itemsize, m) < 2:
        loops.backward_tiles(dy2, x2, g, mu, iv, gm, gi, bool(rms), tile_rows, dx2, dgamma, dbeta)
    elif n:
        parts = {}

        def run(r0, r1, _scratch):
            dg, db = np.zeros(n), np.zeros(n)
            loops.backward(dy2[r0:r1], x2[r0:r1], g, mu[r0:r1], iv[r0:r1], gm[r0:r1], gi[r0:r1], bool(rms),
                           dx2[r0:r1], dg, db)
            parts[r0] = (dg, db)
        over_tiles(m, max(1, n * wd.itemsize), TILE_ROWS_BYTES, run)
        for r0 in sorted(parts):            # tile order: the bits of one thread's call above
            dgamma += parts[r0][0]
            dbeta += parts[r0][1]
    shape = x.shape[begin:]
    return (dx2.reshape(x.shape).astype(x.dtype, copy=False), dgamma.astype(wd).reshape(shape),
            dbeta.astype(wd).reshape(shape))


@k("SoftmaxGrad")
@quiet
def _softmax_grad(y, g, axis, scale=1.0):
    """``(y * (g - sum(g * y, axis))) * scale``; the softmax axis moved last (a copy) when it is not."""
    dt = floats(y, g)
    if y.shape != g.shape:
        raise ValueError("y and g must have one shape")
    last = axis % y.ndim == y.ndim - 1
    yw, gw = work(y), work(g)
    if not last:
        yw, gw = np.moveaxis(yw, axis, -1), np.moveaxis(gw, axis, -1)
    y2, g2 = _rows(yw, yw.ndim - 1), _rows(gw, gw.ndim - 1)
    m, n = y2.shape
    dx2 = np.empty_like(y2)
    sc = y2.dtype.type(scale)
    if n:
        _over_rows(m, n, y2.dtype.itemsize, lambda r0, r1, _s: loops.softmax_grad(y2[r0:r1], g2[r0:r1], sc,
                                                                                  dx2[r0:r1]))
    dx = dx2.reshape(yw.shape)
    if not last:
        dx = np.ascontiguousarray(np.moveaxis(dx, -1, axis))
    return dx.astype(dt, copy=False)
