"""The planned data-parallel step's controller, issue 13 session 23 (dp27): NumPy's OpenBLAS count read
through ``gemm``'s getter (one reader of it, ``rank_threads._reader``), the controller's per-thread
counts taken and set back by two plain calls (``rank_threads.take`` / ``restore``: only what differs,
also when the run raises), and the benchmark's per-round figures that tell a slow round of ours from
the host's (``bench_distribute.thread_waits``)."""
import ctypes
import os
import sys
import types

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import tensorweave as tw
from tensorweave.distribute import plan_function, rank_threads
from tensorweave.kernels import threads
from tensorweave.kernels.cpu import gemm
from mlp_step import FakeLib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import bench_distribute  # noqa: E402


# ---- one reader of NumPy's OpenBLAS count ---------------------------------------------------------

def _address(fn):
    return ctypes.cast(fn, ctypes.c_void_p).value


def _holds_gil(fn):
    return bool(type(fn)._flags_ & ctypes._FUNCFLAG_PYTHONAPI)


def test_numpy_openblas_is_read_through_gemms_getter():
    found = gemm._openblas_threads()
    libs = [lib for lib in threads._blas() if lib.internal_api == "openblas"]
    if found is None or not libs:
        pytest.skip("NumPy's BLAS is not an OpenBLAS gemm reads")
    mine = [lib for lib in libs if lib.filepath == gemm._openblas["library"]._name]
    assert len(mine) == 1
    fn = rank_threads._reader(mine[0])
    assert _address(fn) == _address(found[0]) and _holds_gil(fn)
    for limit in (1, 2, 1):
        with threadpool_limits(limit):
            for lib in libs:
                assert rank_threads._reader(lib)() == lib.num_threads


def test_the_controllers_count_calls_keep_the_gil():
    """MKL's getter and numba's get/set are the libraries' C functions called holding the GIL (each
    returns at once; dropped, the GIL went to a rank thread at every step's end)."""
    import numba
    numba.get_num_threads()         # (launches numba's threads)
    get, put = rank_threads._numba_counts()
    from numba.np.ufunc import parallel
    assert _address(get) == _address(parallel._get_num_threads) and _holds_gil(get)
    assert _address(put) == _address(parallel._set_num_threads) and _holds_gil(put)
    was = get()
    put(1)
    assert numba.get_num_threads() == 1 == get()
    put(was)
    assert numba.get_num_threads() == was
    for lib in threads._blas():
        if lib.internal_api == "mkl":
            fn = rank_threads._reader(lib)
            assert _address(fn) == _address(lib.dynlib.MKL_Get_Max_Threads) and _holds_gil(fn)
            assert fn() == lib.num_threads
    assert not _holds_gil(parallel._set_num_threads)        # (numba's own drop it)


def test_another_openblas_is_read_through_threadpoolctl():
    other = types.SimpleNamespace(internal_api="openblas", num_threads=5, filepath="/elsewhere/libopenblas.so")
    try:
        fn = rank_threads._reader(other)
        assert fn() == 5
        other.num_threads = 3
        assert fn() == 3                # read live
        found = gemm._openblas_threads()
        assert found is None or fn is not found[0]
    finally:
        rank_threads._readers.pop(id(other), None)


def test_an_openblas_without_a_path_is_read_through_threadpoolctl(monkeypatch):
    lib = types.SimpleNamespace(internal_api="openblas", num_threads=7)
    monkeypatch.setattr(gemm, "_openblas_threads", lambda: None)
    try:
        assert rank_threads._numpy_openblas_getter(lib) is None
        assert rank_threads._reader(lib)() == 7
    finally:
        rank_threads._readers.pop(id(lib), None)


# ---- take / restore -----------------------------------------------------------------------------

def _fake_numba(monkeypatch, count, cap=8):
    state = types.SimpleNamespace(n=count, sets=[], gets=0)

    def get():
        state.gets += 1
        return state.n

    def put(k):
        state.sets.append(k)
        state.n = k
    monkeypatch.setattr(rank_threads, "_numba_counts", lambda: (get, put))
    monkeypatch.setattr(rank_threads, "_numba_cap", lambda: cap)
    return state


def test_take_sets_what_differs_and_restore_sets_it_back(monkeypatch):
    lib, numba = FakeLib(4), _fake_numba(monkeypatch, 2)
    split = gemm.limit_split_here(3)
    try:
        taken = rank_threads.take(1, [(lib, 4)])
        assert (lib.num_threads, numba.n, gemm._thread_share.parts) == (1, 1, 1)
        rank_threads.restore(taken)
        assert (lib.num_threads, numba.n, gemm._thread_share.parts) == (4, 2, 3)
        assert lib.calls == [1, 4] and numba.sets == [1, 2] and numba.gets == 1
    finally:
        gemm.limit_split_here(split)


def test_take_sets_nothing_back_where_the_counts_were_right(monkeypatch):
    lib, numba = FakeLib(2), _fake_numba(monkeypatch, 2)
    split = gemm.limit_split_here(3)
    try:
        taken = rank_threads.take(2, [(lib, 2)])
        assert gemm._thread_share.parts == 2
        rank_threads.restore(taken)
        assert lib.calls == [] and numba.sets == [] and gemm._thread_share.parts == 3     # the split's cap back
    finally:
        gemm.limit_split_here(split)


def test_take_reads_the_per_thread_libraries_when_no_counts_are_given(monkeypatch):
    lib, numba = FakeLib(3), _fake_numba(monkeypatch, 1, cap=2)
    monkeypatch.setattr(rank_threads, "_per_thread_libs", lambda: [lib])
    split = gemm.limit_split_here(None)
    try:
        taken = rank_threads.take(4)
        assert (lib.num_threads, numba.n, gemm._thread_share.parts) == (4, 2, 4)   # numba at its cap
        rank_threads.restore(taken)
        assert (lib.num_threads, numba.n, lib.calls, numba.sets) == (3, 1, [4, 3], [2, 1])
    finally:
        gemm.limit_split_here(split)


def test_held_is_take_and_restore_around_its_body(monkeypatch):
    lib, numba = FakeLib(4), _fake_numba(monkeypatch, 2)
    with pytest.raises(KeyError):
        with rank_threads.held(1, [(lib, 4)]) as n:
            assert (n, lib.num_threads, numba.n) == (1, 1, 1)
            raise KeyError("body")
    assert (lib.num_threads, numba.n) == (4, 2)


def _planned_step(placement):
    rng = np.random.default_rng(1)
    w = tw.Variable(rng.standard_normal((6, 3)).astype(np.float32), placement=placement, sbp=tw.sbp.broadcast)
    x = tw.constant(rng.standard_normal((8, 6)).astype(np.float32)).to_global(
        placement=placement, sbp=tw.sbp.split(0))

    @tw.function
    def step():
        with tw.GradientTape() as tape:
            loss = tw.reduce_sum(tw.matmul(x, w) ** 2)
        w.assign_sub(0.01 * tape.gradient(loss, w))
        return loss
    return step


@pytest.mark.parametrize("fail", [False, True])
def test_the_controller_runs_its_rank_at_the_share_and_gets_its_counts_back(monkeypatch, fail):
    """A planned call on 2 ranks: the controller runs rank 0's plan with its counts at the share (one
    thread each) and has its own back after the run, also where the rank's plan raises."""
    import threading

    import numba
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread: nothing to share")
    step = _planned_step(tw.placement("cpu", ranks=[0, 1]))
    step()
    me, seen, real = threading.get_ident(), [], plan_function.executor.run_plan

    def run_plan(plan, feeds):
        if threading.get_ident() == me:
            seen.append((numba.get_num_threads(), gemm._thread_share.parts))
            if fail:
                raise ValueError("rank 0 failed")
        return real(plan, feeds)
    monkeypatch.setattr(plan_function.executor, "run_plan", run_plan)
    before_numba = numba.get_num_threads()
    numba.set_num_threads(2)
    split = gemm.limit_split_here(None)
    try:
        with threadpool_limits(2):
            if fail:
                with pytest.raises(ValueError, match="rank 0 failed"):
                    step()
            else:
                step()
            assert numba.get_num_threads() == 2 and gemm._thread_share.parts is None
        assert seen == [(1, 1)]
    finally:
        gemm.limit_split_here(split)
        numba.set_num_threads(before_numba)


# ---- the benchmark's per-round figures ------------------------------------------------------------

def test_thread_waits_splits_each_threads_wall_per_step():
    before = [(0, 0, 0), (10, 5, 1), None]
    after = [(40_000_000, 24_000_000, 6_000_000), (20_000_010, 8_000_005, 4_000_001), (1, 1, 1)]
    got = bench_distribute.thread_waits(before, after, 2)
    assert got[0] == {"cpu": 12.0, "runq": 3.0, "blocked": 5.0}
    assert got[1] == {"cpu": 4.0, "runq": 2.0, "blocked": 4.0}
    assert got[2] is None
    # a thread's records read a little apart can exceed its wall: never a negative wait
    assert bench_distribute.thread_waits([(0, 0, 0)], [(1_000_000, 900_000, 200_000)], 1)[0]["blocked"] == 0.0


def test_sched_reads_this_threads_record():
    a = bench_distribute._sched()
    if a is None:
        pytest.skip("no /proc/thread-self/schedstat here")
    b = bench_distribute._sched()
    # counters only: they never fall (how much they grow is timing, which unit tests do not assert)
    assert all(isinstance(x, int) for x in a + b) and all(y >= x for x, y in zip(a, b))


def test_rounds_detail_and_waits_summary_pair_each_round():
    one = [(100.0, 10.0, [10.0]), (50.0, 20.0, [20.0])]
    dp = [(160.0, 12.0, [6.0, 6.0]), (90.0, 13.0, [7.0, 7.0])]
    w1 = [[{"cpu": 9.0, "runq": 1.0, "blocked": 0.0}], [{"cpu": 10.0, "runq": 9.0, "blocked": 1.0}]]
    wd = [[{"cpu": 5.0, "runq": 0.5, "blocked": 0.75}, {"cpu": 5.0, "runq": 0.25, "blocked": 1.0}],
          [{"cpu": 6.0, "runq": 4.0, "blocked": 1.5}, None]]
    rows = bench_distribute.rounds_detail(one, dp, w1, wd, [0.0, 2.5])
    assert [r["speedup"] for r in rows] == [1.6, 1.8]
    assert rows[0]["wall_ms"] == [10.0, 6.25] and rows[1]["wall_ms"] == [20.0, 11.111]
    assert rows[1]["one_device"] == w1[1][0] and rows[1]["ranks"] == wd[1] and rows[1]["steal_pct"] == 2.5
    got = bench_distribute.waits_summary(w1, wd)
    assert got["one_device_runq"] == {"median": 5.0, "min": 1.0, "max": 9.0}
    assert got["ranks"][0]["blocked"] == {"median": 1.125, "min": 0.75, "max": 1.5}
    assert got["ranks"][1]["runq"] == {"median": 0.25, "min": 0.25, "max": 0.25}      # the None left out
    assert bench_distribute.waits_summary([], []) == {"one_device_runq": None, "ranks": []}


def test_host_steal_counts_ticks():
    got = bench_distribute.host_steal()
    if got is None:
        pytest.skip("no /proc/stat here")
    steal, total = got
    assert 0 <= steal <= total and total > 0


def test_host_steal_reads_the_steal_column_of_the_cpu_line(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice (guest time is in user already)
    stat.write_text("cpu  100 1 50 800 4 0 3 42 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    assert bench_distribute.host_steal(str(stat)) == (42, 1000)
    stat.write_text("cpu  5 6 7\n")
    assert bench_distribute.host_steal(str(stat)) == (0, 18)
    assert bench_distribute.host_steal(str(tmp_path / "none")) is None


def test_sched_reads_time_on_a_core_then_time_waiting_for_one(tmp_path):
    record = tmp_path / "schedstat"
    record.write_text("123456 789 42\n")         # ns on a core, ns runnable and waiting, time slices
    wall, on_core, queued = bench_distribute._sched(str(record))
    assert (on_core, queued) == (123456, 789) and wall > 0
    record.write_text("garbage\n")
    assert bench_distribute._sched(str(record)) is None
    assert bench_distribute._sched(str(tmp_path / "none")) is None
