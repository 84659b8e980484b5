"""kernels/cpu/gemm.py: stacks of products (``np.matmul`` of 3-D operands) in one MKL call
(``cblas_?gemm_batch_strided``), checked against float64 NumPy in every layout it reads in place
(contiguous, transposed matrices, gaps between matrices, a 2-D operand or a stack of one
broadcast) and the ones left to NumPy; the tuning of their shape classes (issue 18)."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import gemm, gemm_tuning, stack_route

needs_batch = pytest.mark.skipif(not gemm._gemm_batch, reason="MKL's batched GEMM is not loaded")


@pytest.fixture
def rng():
    return np.random.default_rng(18)


@pytest.fixture(autouse=True)
def threaded_stacks(monkeypatch):
    """Every stack takes the batched call on the library's threads, whatever its size (the route of
    small stacks to one thread is tests/test_tx21_stack_route.py's)."""
    monkeypatch.setattr(stack_route, "_limit", {np.dtype(np.float32): 0, np.dtype(np.float64): 0})


def _stack_layouts(rng, count, rows, cols, dtype):
    x = rng.standard_normal((count, rows, cols)).astype(dtype)
    gapped = np.zeros((count, rows + 3, cols), dtype)
    gapped[:, 1:rows + 1] = x
    stepped = np.zeros((2 * count, rows, cols), dtype)
    stepped[::2] = x
    inner = np.zeros((count, rows, 2 * cols), dtype)
    inner[..., ::2] = x
    return x, {"contiguous": x, "transposed": np.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1),
               "gap between matrices": gapped[:, 1:rows + 1], "every other matrix": stepped[::2],
               "inner stride (NumPy)": inner[..., ::2], "stack reversed (NumPy)": x[::-1].copy()[::-1]}


def _check(got, a, b, tol):
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    scale = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64)) + 1
    assert got.shape == want.shape and got.dtype == a.dtype
    assert np.max(np.abs(got - want) / scale) < tol


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-6), (np.float64, 1e-14)])
@pytest.mark.parametrize("count,m,k,n", [(6, 40, 32, 48), (3, 5, 6, 7), (1, 64, 64, 64)])
def test_stacks_match_numpy_in_every_layout(rng, dtype, tol, count, m, k, n):
    a, a_forms = _stack_layouts(rng, count, m, k, dtype)
    b, b_forms = _stack_layouts(rng, count, k, n, dtype)
    for a_name, x in a_forms.items():
        for b_name, y in b_forms.items():
            _check(gemm.matmul(x, y), a, b, tol)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-6), (np.float64, 1e-14)])
def test_broadcast_operands(rng, dtype, tol):
    a = rng.standard_normal((5, 30, 40)).astype(dtype)
    b = rng.standard_normal((40, 50)).astype(dtype)
    _check(gemm.matmul(a, b), a, b, tol)                     # a matrix against a stack
    _check(gemm.matmul(b.T, a.transpose(0, 2, 1)), b.T, a.transpose(0, 2, 1), tol)   # and the other way
    _check(gemm.matmul(a[:1], np.stack([b] * 3)), a[:1], np.stack([b] * 3), tol)     # a stack of one
    with pytest.raises(ValueError):
        gemm.matmul(a, rng.standard_normal((4, 40, 50)).astype(dtype))   # 5 against 4: NumPy's error


def test_out_and_overlap(rng):
    a = rng.standard_normal((4, 32, 48)).astype(np.float32)
    b = rng.standard_normal((4, 48, 40)).astype(np.float32)
    out = np.empty((4, 32, 40), np.float32)
    assert gemm.matmul(a, b, out=out) is out
    _check(out, a, b, 2e-6)
    strided = np.empty((4, 32, 80), np.float32)[..., ::2]           # not contiguous: NumPy writes it
    assert gemm.matmul(a, b, out=strided) is strided
    _check(strided, a, b, 2e-6)
    square = rng.standard_normal((3, 48, 48)).astype(np.float32)
    want = np.matmul(square.astype(np.float64), square.astype(np.float64))
    gemm.matmul(square, square, out=square)                        # out is an operand: NumPy copies first
    assert np.max(np.abs(square - want)) < 1e-3


def test_non_float_and_mixed_stacks_go_to_numpy(rng):
    ai = rng.integers(-5, 5, (3, 40, 40))
    np.testing.assert_array_equal(gemm.matmul(ai, ai), np.matmul(ai, ai))
    a = rng.standard_normal((3, 40, 40)).astype(np.float32)
    assert gemm.matmul(a, a.astype(np.float64)).dtype == np.float64


def test_nan_and_inf_propagate_in_stacks(rng):
    a = rng.standard_normal((3, 64, 64)).astype(np.float32)
    b = rng.standard_normal((3, 64, 64)).astype(np.float32)
    a[1, 3, 5], b[2, 7, 9] = np.nan, np.inf
    got, want = gemm.matmul(a, b), np.matmul(a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


def test_stack_shape_class():
    assert gemm_tuning.shape_class(128, 128, 64, "float32", False, True, 64) == "float32:NT:8,8,7,b7"
    assert gemm_tuning.shape_class(128, 128, 64, "float32", False, True, 1) == "float32:NT:8,8,7"


@needs_batch
@pytest.mark.parametrize("faster", ["mkl", "numpy"])
def test_stacks_are_tuned_per_class(monkeypatch, rng, tmp_path, faster):
    monkeypatch.setitem(gemm._tuning, "on", True)
    tuner = gemm_tuning.Tuner(str(tmp_path / "t.json"), {"cpu": "test"}, ("mkl", "numpy"))
    monkeypatch.setitem(gemm._tuning, "tuner", tuner)
    monkeypatch.setattr(gemm, "_chosen", {})
    monkeypatch.setattr(gemm, "threads_here", lambda: 2)    # (an xdist worker's share is one thread)
    seconds = {faster: 1e-3, ({"mkl", "numpy"} - {faster}).pop(): 4e-3}
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: (run(), seconds[backend])[1])
    calls = []
    real = gemm._gemm_batch[np.dtype(np.float32)]
    monkeypatch.setitem(gemm._gemm_batch, np.dtype(np.float32), lambda *args: (calls.append(1), real(*args)))
    a = rng.standard_normal((8, 40, 32)).astype(np.float32)
    b = rng.standard_normal((8, 32, 48)).astype(np.float32)
    _check(gemm.matmul(a, b), a, b, 2e-6)                          # the tuning call
    assert tuner.backend("float32:NN:6,6,6,b4") == faster and gemm.choice(40, 48, 32, count=8) == faster
    timed = len(calls)
    for _ in range(3):
        _check(gemm.matmul(a, b), a, b, 2e-6)
    assert len(calls) - timed == (3 if faster == "mkl" else 0)


@needs_batch
@pytest.mark.parametrize("name", ["einsum", "matmul", "tensordot"])
def test_op_table_through_the_batched_call(monkeypatch, name):
    """The op table's einsum/matmul/tensordot samples (forward in every dtype, float64 gradients
    against finite differences) with every product sent to MKL, stacks in one batched call (their
    samples are far below MIN_WORK otherwise)."""
    import test_op_table as table
    monkeypatch.setattr(gemm, "MIN_WORK", 0)
    calls = []
    for dtype, real in list(gemm._gemm_batch.items()):
        monkeypatch.setitem(gemm._gemm_batch, dtype, lambda *args, real=real: (calls.append(1), real(*args)))
    info = next(o for o in table.ALL_OPS if o.name == name)
    for dtype in info.dtypes:
        table.test_forward(info, dtype)
    table.test_gradients(info)
    assert calls or name == "tensordot"


def _counting(monkeypatch):
    calls = []
    for dtype, real in list(gemm._gemm_batch.items()):
        monkeypatch.setitem(gemm._gemm_batch, dtype, lambda *args, real=real: (calls.append(1), real(*args)))
    return calls


@needs_batch
def test_broadcasts_go_to_the_batched_call(monkeypatch, rng):
    monkeypatch.setattr(gemm, "threads_here", lambda: 2)    # (an xdist worker's share is one thread)
    calls = _counting(monkeypatch)
    a = rng.standard_normal((5, 30, 40)).astype(np.float32)
    b = rng.standard_normal((40, 50)).astype(np.float32)
    _check(gemm.matmul(a, b), a, b, 2e-6)                            # k (40) > count (5)
    one = rng.standard_normal((1, 50, 60)).astype(np.float32)
    _check(gemm.matmul(b, one), b, one, 2e-6)                        # a matrix against a stack of one: (1, 40, 60)
    assert len(calls) == 2
    wide = a.astype(np.float64)                                      # float64 against float32: NumPy promotes
    _check(gemm.matmul(wide, b), wide, b.astype(np.float64), 1e-12)
    out = np.empty((5, 30, 50), np.float64)                          # float32 products into a float64 out
    assert gemm.matmul(a, b, out=out) is out
    _check(out.astype(np.float32), a, b, 2e-6)
    assert len(calls) == 2


@needs_batch
def test_sizes_beyond_mkls_32_bit_integers_go_to_numpy(monkeypatch, rng):
    """The LP64 interface takes 32-bit sizes and strides: a stack over the limit (shrunk here to small
    numbers) stays in NumPy, one at the limit goes to MKL."""
    monkeypatch.setattr(gemm, "threads_here", lambda: 2)    # (an xdist worker's share is one thread)
    calls = _counting(monkeypatch)
    monkeypatch.setattr(gemm, "MIN_WORK", 0)
    a = rng.standard_normal((4, 8, 16)).astype(np.float32)
    b = rng.standard_normal((4, 16, 8)).astype(np.float32)
    for limit, to_mkl in ((256, True), (255, False)):                  # 4 * 8 * 8 outputs
        monkeypatch.setattr(gemm, "_MAX_INT", limit)
        before = len(calls)
        _check(gemm.matmul(a, b), a, b, 2e-6)
        assert (len(calls) > before) == to_mkl, limit
    spaced = np.zeros((4, 64, 16), np.float32)[:, :8]                   # 1024 elements (4096 bytes) apart
    spaced[:] = a
    for limit, to_mkl in ((1024, True), (1023, False), (2000, True)):
        monkeypatch.setattr(gemm, "_MAX_INT", limit)
        before = len(calls)
        _check(gemm.matmul(spaced, b), a, b, 2e-6)
        assert (len(calls) > before) == to_mkl, limit
