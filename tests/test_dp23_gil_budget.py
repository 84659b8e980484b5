"""Session 19 dp23 (issue 13, in-process data parallel): less Python — held GIL — on a rank thread's
kernels. A one-thread share's product goes straight to its class's one-thread library
(``gemm.matmul``), its share is known without OpenBLAS's count (a ctypes call, which drops the GIL),
elementwise passes ask for the share before working out a split, a whole 1-D Mean takes np.mean's
two steps directly, ReluGrad's compiled pass runs without an error-state context. Same bits as
before: the products, the Mean, and an MLP trained on 1, 2 and 3 ranks."""
import threading
import warnings

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.registry import get_op
from tensorweave.kernels.cpu import gemm, reduce_kernels, split_passes
from test_dp21_rank_meeting import _mlp_training


def _on_one_thread_share(fn):
    """``fn()`` on a new thread whose product share is capped at one (as an in-process rank's)."""
    got = {}

    def run():
        gemm.limit_split_here(1)
        try:
            got["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised on the caller
            got["error"] = e
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in got:
        raise got["error"]
    return got["value"]


def _operands(rng, dtype):
    """(a, b) pairs of every layout a training step's products have: plain, transposed operands
    (a weight gradient's ``x.T @ g``, an input gradient's ``g @ w.T``), thin, small and large."""
    def m(*shape):
        return rng.standard_normal(shape).astype(dtype)
    return [(m(37, 70), m(70, 50)), (m(70, 37).T, m(70, 50)), (m(37, 70), m(50, 70).T),
            (m(5, 300), m(300, 200)), (m(128, 96), m(96, 10)), (m(16, 64), m(64, 64))]


@pytest.mark.parametrize("backend", ["mkl1", "numpy1"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_direct_one_thread_products_give_the_routed_bits(dtype, backend, monkeypatch):
    """On a one-thread share, a product whose class's one-thread library is chosen (each library in
    turn) is that library's call alone: the bits of the routed call (``_run_2d``), every layout;
    the routed path is not taken."""
    if not gemm._gemm_serial.get(np.dtype(dtype)) or gemm._openblas_threads() is None:
        pytest.skip("needs MKL with a per-thread setting and NumPy's OpenBLAS")
    pairs = _operands(np.random.default_rng(3), dtype)
    routed = []

    def counting(*args, **kwargs):
        routed.append(1)
        return real(*args, **kwargs)
    real = gemm._run_2d

    def products():
        for a, b in pairs:
            gemm.matmul(a, b)                   # each class's library chosen (or timed) now
        for key in list(gemm._serial_chosen):   # then the library under test for every class
            monkeypatch.setitem(gemm._serial_chosen, key, backend)
        monkeypatch.setattr(gemm, "_run_2d", counting)
        try:
            direct = [gemm.matmul(a, b) for a, b in pairs]
            gemm._split["direct"] = False
            try:
                before = [gemm.matmul(a, b) for a, b in pairs]
            finally:
                gemm._split["direct"] = True
        finally:
            monkeypatch.setattr(gemm, "_run_2d", real)
        return direct, before
    direct, before = _on_one_thread_share(products)
    assert len(routed) == len(pairs)                       # the direct calls took no route
    tol = 1e-4 if dtype == np.float32 else 1e-12
    for (a, b), y, z in zip(pairs, direct, before):
        assert y.tobytes() == z.tobytes()
        np.testing.assert_allclose(y, a.astype(np.float64) @ b, rtol=tol, atol=tol)


def test_matmul_kernel_transposes_as_swapaxes():
    rng = np.random.default_rng(0)
    kernel = get_op("MatMul").kernel("CPU")
    a, b = rng.standard_normal((2, 40, 30)).astype(np.float32), rng.standard_normal((2, 40, 20)).astype(np.float32)
    assert kernel(a, b, True, False).tobytes() == gemm.matmul(np.swapaxes(a, -1, -2), b).tobytes()
    x, w = rng.standard_normal((40, 30)).astype(np.float32), rng.standard_normal((20, 30)).astype(np.float32)
    assert kernel(x, w, False, True).tobytes() == gemm.matmul(x, np.swapaxes(w, -1, -2)).tobytes()
    assert kernel(x.T.copy(), w, True, True).tobytes() == gemm.matmul(x, w.T).tobytes()


def test_a_one_thread_share_is_known_without_openblas_count(monkeypatch):
    """threads_here on a thread capped at one thread answers 1 without reading OpenBLAS's count (a
    ctypes call: it drops the GIL); with a cap of two it still reads it."""
    found = gemm._openblas_threads()
    if found is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS")
    reads = []

    def get():
        reads.append(1)
        return found[0]()
    monkeypatch.setitem(gemm._openblas, "found", (get, found[1]))
    assert _on_one_thread_share(lambda: (gemm.threads_here(), gemm.split_parts())) == (1, 1)
    assert reads == []

    def capped_two():
        gemm.limit_split_here(2)
        return gemm.threads_here()
    assert 1 <= _on_one_thread_share(capped_two) <= 2
    assert reads == [1]


def test_elementwise_passes_on_a_one_thread_share_work_out_no_split(monkeypatch):
    def no_split(*args):
        raise AssertionError("parts_for asked on a one-thread share")
    monkeypatch.setattr(split_passes, "parts_for", no_split)
    rng = np.random.default_rng(1)
    x, b = rng.standard_normal((256, 512)).astype(np.float32), rng.standard_normal(512).astype(np.float32)
    add = get_op("AddV2").kernel("CPU")
    got = _on_one_thread_share(lambda: add(x, b))
    assert got.tobytes() == np.add(x, b).tobytes()


def _mean_before(x, axis, keepdims):
    """The Mean kernel's answer for a float array before the 1-D path (np.mean, in x's dtype)."""
    return np.mean(x, axis=axis, keepdims=keepdims).astype(x.dtype, copy=False)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_whole_1d_mean_keeps_np_mean_bits(dtype):
    rng = np.random.default_rng(2)
    for n in (1, 2, 7, 8, 9, 127, 128, 129, 1001, 70000):
        for scale in (1e-30, 1e-5, 1.0, 1e5, 1e30):
            x = (rng.standard_normal(n) * scale).astype(dtype)
            if n > 9:
                x[3] = -0.0
            for axis in (None, (0,), (-1,)):
                got, want = reduce_kernels._mean(x, axis, False), _mean_before(x, axis, False)
                assert type(got) is type(want) and got.tobytes() == want.tobytes(), (n, scale, axis)
    for special in ([np.inf, 1.0], [np.nan, 2.0], [np.inf, -np.inf], [-0.0, -0.0]):
        x = np.array(special, dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, want = reduce_kernels._mean(x, None, False), _mean_before(x, None, False)
        assert got.tobytes() == want.tobytes()


def test_other_means_take_the_general_path():
    x = np.arange(12, dtype=np.float32)
    for axis, keepdims in (((0,), True), ((), False)):
        got = reduce_kernels._mean(x, axis, keepdims)
        assert np.asarray(got).tobytes() == _mean_before(x, axis, keepdims).tobytes()
        assert np.shape(got) == np.shape(_mean_before(x, axis, keepdims))
    assert reduce_kernels._mean(np.arange(6, dtype=np.int32), None, False) == 2      # integer mean: truncated


def test_relu_grad_raises_no_warning_and_selects():
    kernel = get_op("ReluGrad").kernel("CPU")
    g = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
    f = np.array([[1, -1, np.nan, 0], [2, np.inf, -np.inf, 5]], np.float32)
    want = np.where(f > 0, g, np.float32(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernel(g, f).tobytes() == want.tobytes()                      # the compiled pass
        assert kernel(g, np.asfortranarray(f)).tobytes() == want.tobytes()   # np.where (features not C-ordered)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_data_parallel_training_bits_unchanged_by_the_direct_products(n):
    """The same losses and weights to the last bit with a rank's products through the routed path
    (as before this session) and straight to their class's library, on 1, 2 and 3 ranks (batch 10:
    uneven on 3)."""
    p = tw.placement("cpu", ranks=list(range(n)))
    now = _mlp_training(p)
    gemm._split["direct"] = False
    try:
        before = _mlp_training(p)
    finally:
        gemm._split["direct"] = True
    assert now == before


def test_a_rank_thread_sets_its_counts_once(monkeypatch):
    """rank_threads.use on a rank's own thread: the second call with the same count reads no count
    (ctypes reads drop the GIL); a new count is set; the controller's thread always reads live."""
    from tensorweave.distribute import rank_threads
    from tensorweave.distribute import ranks as ranks_mod
    world = ranks_mod.World(timeout=30)
    reads = []
    real = rank_threads._per_thread_libs

    def counting():
        reads.append(threading.current_thread().name)
        return real()
    monkeypatch.setattr(rank_threads, "_per_thread_libs", counting)
    try:
        world.run([0, 1], lambda i: rank_threads.use(1))
        assert len(reads) == 2
        world.run([0, 1], lambda i: rank_threads.use(1))
        assert len(reads) == 2                          # remembered on both rank threads
        assert world.run([0, 1], lambda i: (rank_threads.use(2), gemm._thread_share.parts)) == [(2, 2)] * 2
        assert len(reads) == 4
        with rank_threads.held(1):      # (this thread's counts restored after)
            world.run([0, 1], lambda i: rank_threads.use(1), inline=True)   # rank 0 on this (controller) thread
            world.run([0, 1], lambda i: rank_threads.use(1), inline=True)
        # this thread: held()'s read and both use() calls; rank 1: its count 2 -> 1 once
        assert reads.count(threading.current_thread().name) == 3 and len(reads) == 8
        assert rank_threads._set.n is None
    finally:
        world.shutdown()
