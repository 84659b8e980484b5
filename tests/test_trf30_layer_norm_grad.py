"""Layer norm's gradient in one compiled call (``layer_norm_loops.backward_tiles``, issue 18 session 26,
trf30): the loop == its NumPy twin bit for bit, == the row loop tile by tile with the partials added in
tile order, == the kernel's split way over threads; float64 finite differences; eager == graph."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.keras.layers import normalization as N
from tensorweave.kernels.cpu import jit, tiles
from tensorweave.kernels.cpu import layer_norm_kernels as lnk
from tensorweave.kernels.cpu import layer_norm_loops as loops

RNG = np.random.default_rng(3026)


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _inputs(m, n, dtype, rms=False):
    x = (RNG.standard_normal((m, n)) * 2 + 0.5).astype(dtype)
    dy = RNG.standard_normal((m, n)).astype(dtype)
    gamma = RNG.standard_normal(n).astype(dtype)
    y, mean, inv = lnk._layer_norm(x, gamma, gamma, 1e-3, -1, rms)
    return dy, x, gamma, mean, inv, RNG.standard_normal(m), RNG.standard_normal(m)


@pytest.mark.parametrize("m,n,tile_rows", [(0, 4, 1), (5, 3, 1), (9, 16, 4), (10, 21, 3), (7, 8, 100)])
@pytest.mark.parametrize("rms", [False, True])
def test_the_loop_matches_its_twin_bit_for_bit(m, n, tile_rows, rms):
    dy, x, gamma, mean, inv, gm, gi = _inputs(m, n, np.float32, rms)
    args = [dy, x, gamma, mean, inv, gm, gi, rms, tile_rows, np.empty_like(x), RNG.standard_normal(n),
            RNG.standard_normal(n)]            # (dgamma/dbeta: the loop adds into what is there)
    results = []
    for fn in (jit.compile_now(loops.backward_tiles, *args), loops.backward_tiles.twin):
        copied = [a.copy() if i >= 9 else a for i, a in enumerate(args)]
        fn(*copied)
        results.append(copied[9:])
    for a, b in zip(*results):
        assert _same(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_call_equals_the_row_loop_tile_by_tile(dtype):
    m, n, tile_rows = 23, 12, 5
    dy, x, gamma, mean, inv, gm, gi = _inputs(m, n, dtype)
    dx, dg, db = np.empty_like(x), np.full(n, 0.5), np.full(n, -0.25)
    loops.backward_tiles(dy, x, gamma, mean, inv, gm, gi, False, tile_rows, dx, dg, db)
    ref_dx, ref_dg, ref_db = np.empty_like(x), np.full(n, 0.5), np.full(n, -0.25)
    for r0 in range(0, m, tile_rows):
        r1 = min(m, r0 + tile_rows)
        pg, pb = np.zeros(n), np.zeros(n)
        loops.backward(dy[r0:r1], x[r0:r1], gamma, mean[r0:r1], inv[r0:r1], gm[r0:r1], gi[r0:r1], False,
                       ref_dx[r0:r1], pg, pb)
        ref_dg += pg
        ref_db += pb
    for a, b in ((dx, ref_dx), (dg, ref_dg), (db, ref_db)):
        assert _same(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_kernel_on_one_thread_equals_its_split_way(dtype, monkeypatch):
    """(float64: its products are not exact in the float64 partials, so another tiling gives other bits.)"""
    dy, x, gamma, mean, inv, gm, gi = _inputs(300, 24, dtype)
    gm, gi = gm.astype(dtype), gi.astype(dtype)
    monkeypatch.setattr(lnk, "TILE_ROWS_BYTES", 24 * x.itemsize * 16)   # 19 tiles: the partials' order matters
    one = lnk._layer_norm_grad(dy, x, gamma, mean, inv, gm, gi, 1e-3, -1, False)
    monkeypatch.setattr(tiles.threads, "intra_op_threads", lambda: 2)
    monkeypatch.setattr(lnk.split_passes, "parts_for", lambda nbytes, rows: 2)
    split = lnk._layer_norm_grad(dy, x, gamma, mean, inv, gm, gi, 1e-3, -1, False)
    for a, b in zip(one, split):
        assert _same(a, b)
    # the tiles' partials in tile order, not one running sum: another float64 rounding
    xh = ((x - mean[:, None]) * inv[:, None]).astype(np.float64)
    parts = [(dy[r:r + 16].astype(np.float64) * xh[r:r + 16]).sum(0) for r in range(0, 300, 16)]
    np.testing.assert_allclose(one[1], np.sum(parts, 0), rtol=1e-6)


@pytest.mark.parametrize("rms", [False, True])
def test_float64_gradients_match_finite_differences(rms, monkeypatch):
    monkeypatch.setattr(lnk, "TILE_ROWS_BYTES", 6 * 8 * 2)     # 2 rows a tile: the tile loop runs
    m, n = 5, 6
    x = RNG.standard_normal((m, n)) * 1.5 + 0.3
    gamma, beta = RNG.standard_normal(n), RNG.standard_normal(n)
    w, wm, wi = RNG.standard_normal((m, n)), RNG.standard_normal(m), RNG.standard_normal(m)

    def loss(x, gamma, beta):
        y, mean, inv = lnk._layer_norm(x, gamma, beta, 1e-3, -1, rms)
        return np.sum(y * w) + np.sum(mean * wm) + np.sum(inv * wi)
    _, mean, inv = lnk._layer_norm(x, gamma, beta, 1e-3, -1, rms)
    dx, dgamma, dbeta = lnk._layer_norm_grad(w, x, gamma, mean, inv, wm, wi, 1e-3, -1, rms)
    h = 1e-6
    for got, which in ((dx, 0), (dgamma, 1), (dbeta, 2)):
        args = [x, gamma, beta]
        fd = np.empty_like(got)
        for i in np.ndindex(got.shape):
            up, down = [a.copy() for a in args], [a.copy() for a in args]
            up[which][i] += h
            down[which][i] -= h
            fd[i] = (loss(*up) - loss(*down)) / (2 * h)
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-7)


def test_eager_equals_graph_through_the_layer(monkeypatch):
    monkeypatch.setattr(lnk, "TILE_ROWS_BYTES", 16 * 4 * 8)    # 8 rows a tile: 6 tiles
    shape = (3, 16, 16)
    x = RNG.standard_normal(shape).astype(np.float32)
    w = tw.constant(np.cos(np.arange(x.size)).reshape(shape).astype(np.float32))
    layer = N.LayerNormalization(gamma_initializer="random_normal", beta_initializer="random_normal")
    layer.build(shape)

    def step(v):
        with tw.GradientTape() as tape:
            tape.watch(v)
            loss = tw.reduce_sum(layer(v) * w)
        return tape.gradient(loss, [v] + layer.trainable_weights)
    eager = [t.numpy() for t in step(tw.constant(x))]
    graph = [t.numpy() for t in tw.function(step)(tw.constant(x))]
    assert len(eager) == 3
    for a, b in zip(eager, graph):
        assert _same(a, b)


def test_the_kernel_hands_the_loop_its_operands_at_full_precision():
    """float64 statistics' gradients reach the loop unrounded: the kernel's bits are one direct call's."""
    dy, x, gamma, mean, inv, gm, gi = _inputs(40, 9, np.float64)
    got = lnk._layer_norm_grad(dy, x, gamma, mean, inv, gm, gi, 1e-3, -1, False)
    dx, dg, db = np.empty_like(x), np.zeros(9), np.zeros(9)
    loops.backward_tiles(dy, x, gamma, mean, inv, gm, gi, False, 40, dx, dg, db)
    for a, b in zip(got, (dx, dg, db)):
        assert _same(a, b)


def test_split_tiles_finishing_out_of_order_keep_the_bits(monkeypatch):
    """A helper's tile may finish after the caller's later ones: the partials are added in tile order."""
    dy, x, gamma, mean, inv, gm, gi = _inputs(200, 12, np.float64)
    monkeypatch.setattr(lnk, "TILE_ROWS_BYTES", 12 * 8 * 10)     # 20 tiles
    one = lnk._layer_norm_grad(dy, x, gamma, mean, inv, gm, gi, 1e-3, -1, False)

    def backwards(n, per_image_bytes, tile_bytes, run):
        rows = tile_bytes // per_image_bytes
        for r0 in reversed(range(0, n, rows)):
            run(r0, min(n, r0 + rows), {})
    monkeypatch.setattr(lnk, "over_tiles", backwards)
    monkeypatch.setattr(lnk.split_passes, "parts_for", lambda nbytes, rows: 2)
    for a, b in zip(one, lnk._layer_norm_grad(dy, x, gamma, mean, inv, gm, gi, 1e-3, -1, False)):
        assert _same(a, b)
