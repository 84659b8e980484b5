"""The last-axis ``Softmax`` by compiled row loops (``kernels/cpu/softmax_loops.py``, issue 18 session
18, tx22): each loop gives its NumPy twin's bits (row sums as ``np.sum``'s pairwise summation over
row lengths 1 to 1025, float32 and float64 — by an explicit stack since session 19, tx23, so the
loops build ahead of time; shifts with NaN, infinite and signed-zero rows), the kernel gives
``_softmax_np``'s bits (one block and tiles) and matches a float64 reference, eager = graph, and
its gradient matches float64 finite differences."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import jit, nn_kernels, softmax_loops

RNG = np.random.default_rng(2222)
LENGTHS = list(range(1, 20)) + [31, 32, 33, 64, 127, 128, 129, 136, 255, 256, 257, 300, 513]
#: every row length up to eight of NumPy's pairwise blocks and one past (the explicit stack of
#: ``pairwise_sum``, session 19, tx23: trees of one to four levels, uneven halves)
ALL_LENGTHS = range(1, 1026)


def _compiled(chosen, *args):
    return jit.compile_now(chosen, *args)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_row_sums_are_numpys_pairwise_sums(dtype):
    for n in LENGTHS:
        e = np.exp(RNG.standard_normal((6, n)) * 3).astype(dtype)
        got = e.copy()
        _compiled(softmax_loops.normalize, got)(got)
        want = e.copy()
        softmax_loops.normalize_twin(want)
        np.testing.assert_array_equal(got, want, err_msg=f"row length {n}")
        row = e[0]
        assert softmax_loops.pairwise_sum(row, 0, n) == np.sum(row), n


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_iterative_pairwise_sum_is_numpys_over_every_length_to_1025(dtype):
    # magnitudes over 12 decades: a changed order of additions changes the bits
    a = (RNG.standard_normal(1100 + 9) * 10.0 ** RNG.integers(-6, 6, 1100 + 9)).astype(dtype)
    for n in ALL_LENGTHS:
        assert softmax_loops.pairwise_sum(a, 9, n) == np.sum(a[9:9 + n]), n
        assert softmax_loops.pairwise_sum(a, 0, n) == np.sum(a[:n]), n


def test_the_pairwise_sum_calls_itself_nowhere():
    # plain loops for the ahead-of-time build (aot_kernels; test_cold18_aot builds and compares them)
    assert "pairwise_sum" not in softmax_loops.pairwise_sum.py_func.__code__.co_names


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_shift_is_the_twins_with_nan_infinite_and_zero_rows(dtype):
    x = (RNG.standard_normal((7, 9)) * 5).astype(dtype)
    x[0] = np.nan
    x[1, 3] = np.nan
    x[2] = -np.inf
    x[3, 4] = np.inf
    x[4, 0] = np.nan                        # a NaN first: the maximum of the rest
    x[5] = [-0.0, 0.0] * 4 + [-0.0]
    x[6] = -np.abs(x[6]) - 1                # all negative: the shift is no 0
    got, want = np.empty_like(x), np.empty_like(x)
    _compiled(softmax_loops.shift, x, got)(x, got)
    with np.errstate(all="ignore"):
        softmax_loops.shift_twin(x, want)
    np.testing.assert_array_equal(got, want)
    assert got[4, 1:].max() == 0.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(4, 1), (3, 5, 7), (2, 2, 64, 64), (3, 200)])
def test_the_kernel_gives_the_numpy_bits(shape, dtype, monkeypatch):
    x = (RNG.standard_normal(shape) * 4).astype(dtype)
    x.reshape(-1, shape[-1])[0, 0] = -np.inf
    monkeypatch.setattr(nn_kernels.split_passes, "parts_for", lambda nbytes, rows: 2)
    for split in (1 << 40, 64):             # one block, then tiles of rows
        monkeypatch.setattr(nn_kernels, "SOFTMAX_SPLIT_BYTES", split)
        got = nn_kernels._softmax(x, -1)
        with np.errstate(all="ignore"):
            want = nn_kernels._softmax_np(nn_kernels._work(x), -1).astype(dtype)
        assert got.dtype == dtype and got.shape == x.shape
        np.testing.assert_array_equal(got, want)
    with np.errstate(invalid="ignore"):           # (the all -inf row of shape (4, 1): NaN, as the kernel)
        ref = np.exp(x.astype(np.float64) - x.astype(np.float64).max(-1, keepdims=True))
    tol = 1e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(got, ref / ref.sum(-1, keepdims=True), rtol=tol, atol=tol)


def test_eager_equals_graph_and_the_gradient_matches_finite_differences():
    x, w = RNG.standard_normal((2, 3, 10)), RNG.standard_normal((2, 3, 10))
    eager = tw.nn.softmax(tw.constant(x)).numpy()
    np.testing.assert_array_equal(tw.function(lambda t: tw.nn.softmax(t))(tw.constant(x)).numpy(), eager)
    v = tw.Variable(x)
    with tw.GradientTape() as tape:
        loss = tw.reduce_sum(tw.nn.softmax(v) * w)
    g = tape.gradient(loss, v).numpy()

    def f(z):
        e = np.exp(z - z.max(-1, keepdims=True))
        return float(np.sum(e / e.sum(-1, keepdims=True) * w))
    fd = np.zeros_like(x)
    for i in range(x.size):
        up, down = x.copy(), x.copy()
        up.flat[i] += 1e-6
        down.flat[i] -= 1e-6
        fd.flat[i] = (f(up) - f(down)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
