"""kernels/cpu/gemm.py: products above the one-thread size split over the intra-op threads (one
one-thread call per block of rows or columns) or left to the library's threads, chosen per shape
class by a timing (scripted clocks here: no timing thresholds)."""
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tensorweave.distribute import rank_threads
from tensorweave.kernels.cpu import gemm, gemm_tuning

KEY = {"cpu": "Test CPU 9000", "cores": 2, "versions": {"mkl": "m1", "numpy": "n1"}}
needs_serial = pytest.mark.skipif(not gemm._gemm_serial, reason="MKL with a per-thread setting is not loaded")
needs_openblas = pytest.mark.skipif(gemm._openblas_threads() is None, reason="NumPy's BLAS is not an OpenBLAS")
pytestmark = [needs_serial, needs_openblas]
F32 = np.dtype(np.float32)
# the mlp step's products (784-512-512-10, batch 128): forward, dX, dW
MLP = [(128, 784, 512, False, False), (128, 512, 512, False, True), (784, 128, 512, True, False),
       (512, 128, 512, True, False), (512, 128, 10, True, False), (128, 512, 10, False, False)]


def _operands(rng, m, k, n, ta, tb, dtype=np.float32):
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    return (a.T if ta else a), (b.T if tb else b)


@pytest.fixture
def split(monkeypatch, tmp_path):
    """A fresh tuner on a temporary file, nothing chosen yet, two parts, a quiet machine; returns
    the log of the backends each timed call ran (the scripted clock appends to it)."""
    monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(
        str(tmp_path / "t.json"), KEY, ("mkl", "numpy", "mkl1", "numpy1", "rows", "cols", "one")))
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setitem(gemm._split, "on", True)
    monkeypatch.setattr(gemm, "_split_chosen", {})
    monkeypatch.setattr(gemm, "_serial_chosen", {})
    monkeypatch.setitem(gemm._serial_work, F32, 1)          # every product here is 'threaded'
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    return []


def _clock(monkeypatch, log, seconds):
    """Each timed call of ``backend`` 'takes' ``seconds[backend]`` (one-thread candidates 1 s)."""
    def timed(backend, run):
        run()
        log.append(backend)
        return seconds.get(backend, 1.0)
    monkeypatch.setattr(gemm_tuning, "_time_call", timed)


def _one_thread_whole(a, b, lib):
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    if lib == "numpy1":
        gemm._numpy_serial(a, b, out)
    else:
        op_a, op_b = gemm._operand(a), gemm._operand(b)
        gemm._gemm_serial[a.dtype](op_a[0], op_b[0], a.shape[0], b.shape[1], a.shape[1], a, op_a[1], b, op_b[1],
                                   out, b.shape[1])
    return out


# ---- the split product ---------------------------------------------------------------------------
@pytest.mark.parametrize("m,k,n,ta,tb", MLP)
@pytest.mark.parametrize("axis", ["rows", "cols"])
def test_split_gives_the_bits_of_one_thread_on_the_mlp_shapes_in_mkl(monkeypatch, rng, m, k, n, ta, tb, axis):
    a, b = _operands(rng, m, k, n, ta, tb)
    monkeypatch.setattr(gemm, "_serial_library", lambda *args, **kw: "mkl1")
    out = np.full((m, n), np.nan, np.float32)
    gemm._run_split(axis, a, b, out, gemm._operand(a), gemm._operand(b), (gemm._NO_TRANS, n), k, 2)
    np.testing.assert_array_equal(out, _one_thread_whole(a, b, "mkl1"))
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("m,k,n,ta,tb", MLP)
@pytest.mark.parametrize("lib", ["mkl1", "numpy1"])
@pytest.mark.parametrize("axis", ["rows", "cols"])
def test_a_blocks_bits_do_not_depend_on_the_thread_that_takes_it(monkeypatch, rng, m, k, n, ta, tb, lib, axis):
    """The blocks' own bits, whichever thread computes each: OpenBLAS's Haswell kernels (AMD Zen 3)
    give a block of rows or columns other bits than the whole product (not its SkylakeX ones,
    where the session-12 figures were made), so the reference is the blocks one after another."""
    a, b = _operands(rng, m, k, n, ta, tb)
    monkeypatch.setattr(gemm, "_serial_library", lambda *args, **kw: lib)
    op = (gemm._operand(a), gemm._operand(b), (gemm._NO_TRANS, n), k)
    out = np.full((m, n), np.nan, np.float32)
    gemm._run_split(axis, a, b, out, *op, 2)
    here = np.full((m, n), np.nan, np.float32)
    monkeypatch.setattr(gemm, "share_tasks", lambda tasks, parts: [task() for task in tasks[::-1]])
    gemm._run_split(axis, a, b, here, *op, 2)
    np.testing.assert_array_equal(out, here)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-12)])
@pytest.mark.parametrize("m,n,parts", [(100, 70, 2), (37, 129, 3), (33, 33, 4), (200, 17, 2)])
def test_split_of_uneven_sizes_against_float64(monkeypatch, rng, dtype, tol, m, n, parts):
    """Blocks of MIN_PART multiples, a short last block, more parts than blocks; float64 too."""
    for lib in ("mkl1", "numpy1"):
        monkeypatch.setattr(gemm, "_serial_library", lambda *args, lib=lib, **kw: lib)
        for ta, tb in ((False, False), (True, True)):
            a, b = _operands(rng, m, 300, n, ta, tb, dtype)
            for axis in ("rows", "cols"):
                out = np.full((m, n), np.nan, dtype)
                gemm._run_split(axis, a, b, out, gemm._operand(a), gemm._operand(b), (gemm._NO_TRANS, n), 300, parts)
                np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=tol, atol=tol * 10)


def test_blocks_are_multiples_of_min_part(monkeypatch, rng):
    seen = []

    def run(a, b, out):
        seen.append(out.shape)
        np.matmul(a, b, out=out)
    monkeypatch.setattr(gemm, "_part_runner", lambda *args: run)
    a, b = _operands(rng, 100, 8, 70, False, False)
    out = np.empty((100, 70), np.float32)
    gemm._run_split("cols", a, b, out, gemm._operand(a), gemm._operand(b), (gemm._NO_TRANS, 70), 8, 2)
    assert sorted(seen) == [(100, 22), (100, 48)]      # gemm.CHUNKS: one block per part
    seen.clear()
    monkeypatch.setitem(gemm.CHUNKS, "per_part", 2)
    gemm._run_split("cols", a, b, out, gemm._operand(a), gemm._operand(b), (gemm._NO_TRANS, 70), 8, 2)
    assert sorted(seen) == [(100, 6), (100, 32), (100, 32)]
    monkeypatch.setitem(gemm.CHUNKS, "per_part", 1)
    seen.clear()
    gemm._run_split("rows", a, b, out, gemm._operand(a), gemm._operand(b), (gemm._NO_TRANS, 70), 8, 3)
    assert sorted(seen) == [(4, 70), (48, 70), (48, 70)]     # ceil(100 / 3) = 34 -> 48-row blocks
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_shared_tasks_run_on_a_helper_thread_too():
    """The first task taken waits for the other: done only if another thread took it."""
    other, names = threading.Event(), []

    def first():
        names.append(threading.current_thread().name)
        assert other.wait(30), "no helper thread took the second task"

    def second():
        names.append(threading.current_thread().name)
        other.set()
    gemm.share_tasks([first, second], 2)
    assert len(set(names)) == 2


def test_the_caller_does_not_wait_for_a_helper_that_has_not_started():
    """The only helper is busy (another kernel's tile, or its core lent to other processes): the
    calling thread takes every task itself and returns; the helper, once free, finds none left.
    (Before session 13 the caller waited for the helper's block: here, until the helper was freed.)"""
    from tensorweave.core.context import current_runtime
    pool = current_runtime().intra_op_pool()
    busy, release = threading.Event(), threading.Event()
    blocker = pool.submit(lambda: (busy.set(), release.wait(60)))
    try:
        assert busy.wait(30)
        ran, done = [], threading.Event()
        caller = threading.Thread(target=lambda: (gemm.share_tasks([lambda i=i: ran.append(i) for i in range(5)], 2),
                                                  done.set()))
        caller.start()
        assert done.wait(30), "the caller waited for the busy helper"
        assert sorted(ran) == [0, 1, 2, 3, 4]
    finally:
        release.set()
        blocker.result(30)
        caller.join(30)


def test_a_block_failing_restores_the_thread_count_and_raises(monkeypatch, rng):
    get = gemm._openblas["found"][0]
    before = get()

    def run(a, b, out):
        if out.shape[1] < 64:
            raise RuntimeError("block failed")
        np.matmul(a, b, out=out)
    monkeypatch.setattr(gemm, "_part_runner", lambda *args: run)
    a, b = _operands(rng, 64, 8, 96, False, False)
    with pytest.raises(RuntimeError, match="block failed"):
        gemm._run_split("cols", a, b, np.empty((64, 96), np.float32), gemm._operand(a), gemm._operand(b),
                        (gemm._NO_TRANS, 96), 8, 2)
    assert get() == before


def test_one_thread_region_is_counted_across_threads():
    """Two threads inside at once: the count is 1 until the last leaves, then restored (two
    threads each saving and restoring their own would leave 1 behind)."""
    get, put = gemm._openblas["found"]
    before = get()
    put(2)
    try:
        inside, release = threading.Event(), threading.Event()

        def other():
            with gemm._openblas_one_thread():
                inside.set()
                release.wait(10)
        t = threading.Thread(target=other)
        t.start()
        inside.wait(10)
        with gemm._openblas_one_thread():
            assert get() == 1
            release.set()
            t.join(10)
            assert get() == 1          # the other thread left first: still inside here
        assert get() == 2
    finally:
        put(before)


def test_split_parts_follows_the_settings(monkeypatch):
    get, put = gemm._openblas["found"]
    before = get()
    monkeypatch.setattr(gemm, "_cores", lambda: 2)
    try:
        put(2)
        assert gemm.split_parts() == 2
        put(1)
        assert gemm.split_parts() == 1            # tw.config.threading(1), single_threaded_blas
        put(8)
        assert gemm.split_parts() == 2            # at most one per core
        got = []
        t = threading.Thread(target=lambda: got.append(gemm.split_parts()), name="tw-default-intra")
        t.start()
        t.join()
        assert got == [1]                         # a tiled kernel's helper thread
        got = []

        def rank_thread():
            rank_threads.use(1)                   # an in-process rank's share of the cores
            got.append(gemm.split_parts())
            with rank_threads.held(2):
                got.append(gemm.split_parts())
            got.append(gemm.split_parts())
        t = threading.Thread(target=rank_thread)
        t.start()
        t.join()
        assert got == [1, 2, 1] and gemm.split_parts() == 2    # per thread: the caller's is unchanged
        monkeypatch.setitem(gemm._split, "on", False)
        assert gemm.split_parts() == 1
    finally:
        put(before)


# ---- the choice by timing ------------------------------------------------------------------------
@pytest.mark.parametrize("seconds,expected", [
    ({"mkl": 1.0, "rows": 1.0, "cols": 1.0}, "cols"),      # equals: the longer side's split
    ({"mkl": 0.5, "rows": 1.0, "cols": 1.0}, "mkl"),       # the library's threads by far
    ({"mkl": 0.95, "rows": 1.0, "cols": 1.0}, "cols"),     # inside the margin: kept
    ({"mkl": 1.0, "rows": 0.5, "cols": 1.0}, "rows"),
])
def test_the_measured_backend_runs_the_class(monkeypatch, rng, split, seconds, expected):
    _clock(monkeypatch, split, seconds)
    runs = []
    real = gemm._run_split
    monkeypatch.setattr(gemm, "_run_split", lambda axis, *args: (runs.append(axis), real(axis, *args)))
    a, b = _operands(rng, 128, 512, 512, False, True)
    want = a.astype(np.float64) @ b
    np.testing.assert_allclose(gemm.matmul(a, b), want, rtol=1e-4, atol=1e-3)      # timed here
    cls = "threads:float32:NT:8,10,10,p2"
    entry = gemm.tuner().choices[cls]
    assert entry["backend"] == expected and entry["settled"] and {"mkl_us", "rows_us", "cols_us"} <= set(entry)
    assert split.count("mkl") >= gemm_tuning.MIN_CALLS and split.count("rows") == split.count("mkl")
    split.clear()
    runs.clear()
    first = gemm.matmul(a, b)
    np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-3)
    assert not [b_ for b_ in split if b_ in ("mkl", "rows", "cols")]           # not timed again
    assert runs == ([] if expected == "mkl" else [expected])
    with open(gemm.tuner().path, encoding="utf-8") as f:
        assert cls in f.read()


def test_the_first_call_gives_the_bits_of_the_later_ones(monkeypatch, rng, split):
    """The timing's last run is of another candidate (the split, its blocks on OpenBLAS): the
    chosen one (MKL's threads) computes the product again."""
    _clock(monkeypatch, split, {"mkl": 0.1, "rows": 1.0, "cols": 1.0, "numpy1": 0.5})
    a, b = _operands(rng, 128, 784, 512, False, False)
    np.testing.assert_array_equal(gemm.matmul(a, b), gemm.matmul(a, b))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("faster", ["mkl1", "numpy1"])
def test_a_one_thread_classs_first_call_gives_the_bits_of_the_later_ones(monkeypatch, rng, split, dtype, faster):
    """The timing of a class leaves the product of the last candidate run (OpenBLAS): where MKL
    is chosen, the first call computes it again (before: the first step of a training loop had
    OpenBLAS's bits and the others MKL's, and a Keras step fused or not differed in the last place
    depending on which ran first)."""
    monkeypatch.setitem(gemm._serial_work, np.dtype(dtype), 1 << 40)        # every product: one thread
    _clock(monkeypatch, split, {faster: 0.1})
    # operands whose product the two libraries round differently (which shapes do depends on the
    # CPU's kernels: on an AVX-512 Xeon both give 64x300 @ 300x70 the same bits)
    for m, k, n in ((64, 300, 70), (63, 1000, 70), (17, 4097, 33)):
        a, b = _operands(rng, m, k, n, False, False, dtype)
        if not np.array_equal(_one_thread_whole(a, b, "mkl1"), _one_thread_whole(a, b, "numpy1")):
            break
    else:
        pytest.skip("MKL and OpenBLAS give every candidate product the same bits on this CPU")
    first = gemm.matmul(a, b)
    assert "mkl1" in split and "numpy1" in split                              # timed on this call
    np.testing.assert_array_equal(first, gemm.matmul(a, b))
    np.testing.assert_array_equal(first, _one_thread_whole(a, b, faster))
    stack = np.stack([a, a[::-1]])
    first = gemm.matmul(stack, b, one_thread=True)                           # a stack's class, timed
    np.testing.assert_array_equal(first, gemm.matmul(stack, b, one_thread=True))


def test_the_class_names_parts_and_flags(monkeypatch, rng, split):
    _clock(monkeypatch, split, {})
    a, b = _operands(rng, 512, 128, 512, True, False)
    gemm.matmul(a, b)
    monkeypatch.setattr(gemm, "split_parts", lambda: 3)
    gemm.matmul(a, b)
    assert {c for c in gemm.tuner().choices if c.startswith("threads:")} == {
        "threads:float32:TN:10,10,8,p2", "threads:float32:TN:10,10,8,p3"}
    assert gemm.tuner().choices["threads:float32:TN:10,10,8,p2"]["backend"] == "rows"    # 512 rows, 512 columns


def test_narrow_outputs_are_not_split_that_way(monkeypatch, rng, split):
    _clock(monkeypatch, split, {})
    a, b = _operands(rng, 512, 128, 10, True, False)       # dW of the 10-class layer
    gemm.matmul(a, b)
    entry = gemm.tuner().choices["threads:float32:TN:10,4,8,p2"]
    assert entry["backend"] == "rows" and "cols_us" not in entry


@pytest.mark.parametrize("n,axes", [(31, {"mkl", "rows", "one"}), (32, {"mkl", "rows", "cols", "one"})])
def test_a_side_is_cut_only_into_blocks_of_at_least_min_part(monkeypatch, rng, split, n, axes):
    _clock(monkeypatch, split, {})
    a, b = _operands(rng, 512, 128, n, True, False)
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    entry = next(e for c, e in gemm.tuner().choices.items() if c.startswith("threads:"))
    assert {name[:-3] for name in entry if name.endswith("_us")} == axes


def test_a_cached_choice_from_another_process_is_used(monkeypatch, rng, split, tmp_path):
    path = str(tmp_path / "t.json")
    t = gemm.tuner()
    t.choices["threads:float32:NN:8,10,10,p2"] = {"backend": "mkl", "settled": True}
    t._write()
    monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(path, KEY, t.backends))
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: pytest.fail("timed a cached class"))
    runs = []
    monkeypatch.setattr(gemm, "_run_split", lambda *args: runs.append(args))
    a, b = _operands(rng, 128, 784, 512, False, False)
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert runs == []


def test_a_busy_machine_times_nothing_and_keeps_the_incumbent(monkeypatch, rng, split):
    """Under load two-thread timings measure the other processes: the longer side's split runs,
    for this process only (a quiet process measures later)."""
    _clock(monkeypatch, split, {"mkl": 0.1})
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: False)
    runs = []
    real = gemm._run_split
    monkeypatch.setattr(gemm, "_run_split", lambda axis, *args: (runs.append(axis), real(axis, *args)))
    for m, n, want in ((128, 512, "cols"), (784, 512, "rows")):
        a, b = _operands(rng, m, 128, n, False, False)
        np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
        assert runs[-1] == want
    assert not [c for c in gemm.tuner().choices if c.startswith("threads:")]
    assert "mkl" not in split and not os.path.exists(gemm.tuner().path)


def test_one_thread_candidates_are_timed_by_thread_cpu_time(monkeypatch, rng, split):
    clocks = {}
    real = gemm_tuning.measure

    def measure(runners, clock=None):
        clocks[tuple(sorted(runners))] = clock
        return real(runners, clock)
    monkeypatch.setattr(gemm_tuning, "measure", measure)
    a, b = _operands(rng, 128, 784, 512, False, False)
    gemm.matmul(a, b)
    assert clocks == {("cols", "mkl", "one", "rows"): None, ("mkl1", "numpy1"): time.thread_time}


def test_measure_times_by_the_clock_given_and_forgets_it(monkeypatch):
    ticks = iter(range(100))
    monkeypatch.setattr(gemm_tuning, "_clock", lambda: 0.0)          # the budget's wall clock
    times = gemm_tuning.measure({"x": lambda: None}, clock=lambda: next(ticks) * 2.0)
    assert times["x"] and set(times["x"]) == {2.0}
    calls = []

    def fails_when_timed():
        calls.append(1)
        return 1 / (len(calls) == 1)       # the warm-up passes, the first timed call fails
    with pytest.raises(ZeroDivisionError):
        gemm_tuning.measure({"x": fails_when_timed}, clock=lambda: 5.0)
    assert gemm_tuning._timing.clock is None
    assert set(gemm_tuning.measure({"x": lambda: None})["x"]) == {0.0}    # back on the default clock


def test_one_part_or_under_the_serial_size_is_not_a_threaded_choice(monkeypatch, rng, split):
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: (run(), 1.0)[1])
    monkeypatch.setattr(gemm, "split_parts", lambda: 1)
    a, b = _operands(rng, 128, 784, 512, False, False)
    gemm.matmul(a, b)
    assert not [c for c in gemm.tuner().choices if c.startswith("threads:")]


def test_overrides_turn_the_split_off():
    code = ("from tensorweave.kernels.cpu import gemm; import sys; "
            "sys.stdout.write(str(gemm._split['on']) + ' ' + str(gemm.split_parts()))")
    env = {k: v for k, v in os.environ.items() if k not in ("TW_GEMM_SPLIT", "TW_BLAS")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for extra, want in (({"TW_GEMM_SPLIT": "0"}, "False 1"), ({"TW_BLAS": "mkl"}, "False 1")):
        out = subprocess.run([sys.executable, "-c", code], env={**env, **extra, "PYTHONPATH": root},
                             capture_output=True, text=True, check=True).stdout
        assert out == want
