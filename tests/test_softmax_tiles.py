"""A large last-axis Softmax runs in blocks of rows on the intra-op threads (kernels/cpu/nn_kernels,
issue 18 enc18): the same bits as the one-block computation, equal to a float64 reference,
other axes and small inputs in one block; eager == graph."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import nn_kernels

RNG = np.random.default_rng(1813)


def _ref(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.fixture
def tiles(monkeypatch):
    """Small split and block sizes (odd rows per block), recording the blocks run."""
    seen = []
    monkeypatch.setattr(nn_kernels, "SOFTMAX_SPLIT_BYTES", 256)
    monkeypatch.setattr(nn_kernels, "SOFTMAX_TILE_BYTES", 3 * 7 * 4)
    monkeypatch.setattr(nn_kernels.split_passes, "parts_for", lambda nbytes, rows: 2)   # (split: issue 18 tx22)
    real = nn_kernels.over_tiles

    def spy(n, per, tile, run):
        seen.append((n, per, tile))
        return real(n, per, tile, run)
    monkeypatch.setattr(nn_kernels, "over_tiles", spy)
    return seen


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_blocks_give_the_bits_of_one_block(tiles, dtype):
    x = (RNG.standard_normal((5, 4, 7)) * 4).astype(dtype)
    x[0, 0] = -np.inf          # an all -inf row: no shift, as the one-block path
    x[1, 2, 3] = -np.inf
    got = nn_kernels._softmax(x, axis=-1)
    with np.errstate(all="ignore"):
        one = nn_kernels._softmax_np(nn_kernels._work(x), -1).astype(dtype)
    assert tiles == [(20, 7 * np.dtype(nn_kernels._work(x).dtype).itemsize, 84)]
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_array_equal(got, one)
    tol = 1e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(got[1:].astype(np.float64), _ref(x[1:], -1), rtol=tol, atol=tol)


def test_other_axes_and_small_inputs_stay_one_block(tiles, monkeypatch):
    x = RNG.standard_normal((5, 4, 7)).astype(np.float32)
    np.testing.assert_allclose(nn_kernels._softmax(x, axis=1), _ref(x, 1), rtol=1e-6)
    assert tiles == []
    monkeypatch.setattr(nn_kernels, "SOFTMAX_SPLIT_BYTES", x.nbytes + 1)
    nn_kernels._softmax(x, axis=-1)
    assert tiles == []
    monkeypatch.setattr(nn_kernels, "SOFTMAX_SPLIT_BYTES", x.nbytes)
    nn_kernels._softmax(x, axis=2)
    assert len(tiles) == 1


def test_eager_equals_graph_and_gradient(tiles):
    x = RNG.standard_normal((6, 3, 9))
    eager = tw.nn.softmax(tw.constant(x)).numpy()
    graph = tw.function(lambda t: tw.nn.softmax(t))(tw.constant(x)).numpy()
    np.testing.assert_array_equal(eager, graph)
    np.testing.assert_allclose(eager, _ref(x, -1), rtol=1e-12)
    w = RNG.standard_normal(x.shape)
    v = tw.Variable(x)
    with tw.GradientTape() as tape:
        loss = tw.reduce_sum(tw.nn.softmax(v) * w)
    g = tape.gradient(loss, v).numpy()
    eps, idx = 1e-6, (2, 1, 4)
    up, down = x.copy(), x.copy()
    up[idx] += eps
    down[idx] -= eps
    fd = (np.sum(_ref(up, -1) * w) - np.sum(_ref(down, -1) * w)) / (2 * eps)
    assert g[idx] == pytest.approx(fd, rel=1e-6, abs=1e-9)
