"""Layer norm, its gradient, the softmax gradient and ``Softmax`` run their row tiles on the calling
thread where ``split_passes.parts_for`` (the measured threshold of split passes) does not split a
pass of their size, on the intra-op threads where it does (issue 18 session 18, tx22): the same
tiles either way, so the same bits (the gradient's column partials included)."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import layer_norm_kernels as lnk
from tensorweave.kernels.cpu import nn_kernels, split_passes, tiles

RNG = np.random.default_rng(2223)


def _all(x, dy):
    gamma, beta = np.full(24, 1.5, np.float32), np.full(24, 0.25, np.float32)
    zeros = np.zeros(x.shape[0], np.float32)
    y, mean, inv = lnk._layer_norm(x, gamma, beta, 1e-3, -1, False)
    grads = lnk._layer_norm_grad(dy, x, gamma, mean, inv, zeros, zeros, 1e-3, -1, False)
    return (y, mean, inv) + grads + (lnk._softmax_grad(np.abs(x), dy, -1, 0.5), nn_kernels._softmax(x, -1))


def test_unsplit_tiles_stay_on_this_thread_with_the_split_tiles_bits(monkeypatch):
    x = RNG.standard_normal((300, 24)).astype(np.float32)
    dy = RNG.standard_normal(x.shape).astype(np.float32)
    monkeypatch.setattr(lnk, "TILE_ROWS_BYTES", 24 * 4 * 16)            # 19 tiles
    monkeypatch.setattr(nn_kernels, "SOFTMAX_SPLIT_BYTES", 256)
    monkeypatch.setattr(nn_kernels, "SOFTMAX_TILE_BYTES", 24 * 4 * 16)
    asked = []
    monkeypatch.setattr(tiles.threads, "intra_op_threads", lambda: asked.append(1) or 2)
    monkeypatch.setattr(split_passes, "parts_for", lambda nbytes, rows: 2)
    split = _all(x, dy)
    assert len(asked) == 4                   # each kernel's tiles asked for the threads
    asked.clear()
    monkeypatch.setattr(split_passes, "parts_for", lambda nbytes, rows: 1)
    here = _all(x, dy)
    assert asked == []                       # none did: every tile on this thread
    for a, b in zip(split, here):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("rows", [4, 2048, 4096])
def test_the_gate_asks_the_measured_split(rows, monkeypatch):
    """Rows over one tile ask the measured split; rows within one (4 and 2048 of 24 floats: one
    call on any thread count) do not (issue 18, enc30)."""
    seen = []
    monkeypatch.setattr(split_passes, "parts_for", lambda nbytes, r: seen.append((nbytes, r)) or 1)
    x = RNG.standard_normal((rows, 24)).astype(np.float32)
    lnk._layer_norm(x, np.ones(24, np.float32), np.zeros(24, np.float32), 1e-5, -1, False)
    assert seen == ([(x.nbytes, rows)] if x.nbytes > lnk.TILE_ROWS_BYTES else [])
