"""Small products on one GEMM thread (issue 18, rnn18): the threshold measured once per machine
(``gemm_tuning.serial_threshold``), cached with the tuning choices, and used by ``gemm.matmul``.
No timing thresholds: the clock is replaced wherever a choice is checked."""
import ctypes
import json
import os

import numpy as np
import pytest

from tensorweave.kernels.cpu import gemm, gemm_tuning

KEY = {"cpu": "Test CPU 9000", "cores": 2, "versions": {"mkl": "m1", "numpy": "n1"}}
needs_serial = pytest.mark.skipif(not gemm._gemm_serial, reason="MKL with a per-thread setting is not loaded")


def _ladder_timer(monkeypatch, seconds):
    """A timed call of side ``s`` on ``variant`` 'takes' ``seconds(variant, s)``."""
    def timed(variant, run):
        return seconds(variant, run())
    monkeypatch.setattr(gemm_tuning, "_time_call", timed)


def _runners_for(side):
    return {"serial": lambda: side, "threaded": lambda: side}


@pytest.mark.parametrize("wins_from,expected", [(64, 64 ** 3), (32, 32 ** 3), (None, 2 * 256 ** 3),
                                                (256, 256 ** 3)])
def test_threshold_is_the_smallest_side_from_which_threads_win(monkeypatch, wins_from, expected):
    def seconds(variant, side):
        threads_win = wins_from is not None and side >= wins_from
        return 1.0 if (variant == "threaded") == threads_win else 2.0
    _ladder_timer(monkeypatch, seconds)
    assert gemm_tuning.serial_threshold(_runners_for) == (expected, True)


def test_threads_must_win_by_the_margin(monkeypatch):
    """One thread is the incumbent: threads 5 % faster everywhere do not displace it."""
    _ladder_timer(monkeypatch, lambda variant, side: 0.95 if variant == "threaded" else 1.0)
    assert gemm_tuning.serial_threshold(_runners_for) == (2 * 256 ** 3, True)


def test_a_rung_under_the_threshold_where_threads_lose_again_stops_the_descent(monkeypatch):
    """Threads win at 256 and 128 but lose at 192: the threshold stays at 256 (contiguous from the top)."""
    _ladder_timer(monkeypatch, lambda variant, side: (1.0 if variant == "threaded" else 2.0)
                  if side in (256, 128) else (2.0 if variant == "threaded" else 1.0))
    timed = []
    assert gemm_tuning.serial_threshold(lambda side: (timed.append(side), _runners_for(side))[1]) == (256 ** 3, True)
    assert timed == [256, 192]


def test_an_unsettled_rung_stops_the_walk_there_without_unsettling_it(monkeypatch):
    """(Session 23) the rung where the fastest call and the median disagree is the crossover's: one
    thread keeps it and the walk ends there, settled; a walk is unsettled where other processes used
    the CPUs while it ran (tests/test_gemm27_walk_watch.py)."""
    calls = iter([1.0, 9.0, 9.0, 9.0] * 100)     # threaded's fastest call wins, its median loses
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda variant, run: next(calls) if variant == "threaded" else 2.0)
    assert gemm_tuning.serial_threshold(_runners_for, ladder=(32,)) == (2 * 32 ** 3, True)


def test_threshold_is_cached_per_machine(monkeypatch, tmp_path):
    monkeypatch.setattr(gemm_tuning, "spare_core", lambda: True)   # (tune20) a walk needs a spare core
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    path = str(tmp_path / "t.json")
    tuner = gemm_tuning.Tuner(path, KEY, ("mkl", "numpy"))
    measured = []
    # (tune20) one walk a process, settled when the next process's walk agrees: the default until then
    assert tuner.threshold("serial:float32", lambda: (measured.append(1), (4096, True))[1], 5) == 5
    assert tuner.threshold("serial:float32", lambda: (measured.append(1), (1, True))[1], 5) == 5
    assert measured == [1]                                          # walked once
    second = gemm_tuning.Tuner(path, KEY, ("mkl", "numpy"))
    assert second.threshold("serial:float32", lambda: (measured.append(1), (4096, True))[1], 5) == 4096
    data = json.loads(open(path).read())
    entry = data["thresholds"]["serial:float32"]
    assert entry["value"] == 4096 and entry["settled"] is True and entry["ms"] >= 0
    again = gemm_tuning.Tuner(path, KEY, ("mkl", "numpy"))          # a later process reads it
    assert again.threshold("serial:float32", lambda: pytest.fail("measured again"), 5) == 4096
    other = gemm_tuning.Tuner(path, dict(KEY, cpu="Other CPU"), ("mkl", "numpy"))
    assert other.threshold("serial:float32", lambda: (measured.append(2), (7, True))[1], 5) == 5
    assert measured[-1] == 2                                  # another machine walks (its first: the default)


@pytest.mark.parametrize("quiet,settled", [(False, True), (True, False)])
def test_busy_or_unsettled_thresholds_hold_for_the_process_only(monkeypatch, tmp_path, quiet, settled):
    monkeypatch.setattr(gemm_tuning, "spare_core", lambda: True)   # (tune20) a walk needs a spare core
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: quiet)
    path = str(tmp_path / "t.json")
    tuner = gemm_tuning.Tuner(path, KEY, ("mkl", "numpy"))
    got = 4096 if settled and quiet else 5       # busy (not timed) or an unsettled walk: the default
    assert tuner.threshold("serial:float32", lambda: (4096, settled), 5) == got
    assert tuner.threshold("serial:float32", lambda: (1, True), 5) == got    # this process keeps it
    # nothing settled on disk; a quiet attempt that did not settle is counted there (tune20: MAX_TRIES)
    assert os.path.exists(path) == quiet
    assert gemm_tuning.Tuner(path, KEY, ("mkl", "numpy")).thresholds == {}


def test_a_busy_machine_keeps_choices_off_the_disk(monkeypatch, tmp_path):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: False)
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: 1.0 if backend == "numpy" else 2.0)
    path = str(tmp_path / "t.json")
    tuner = gemm_tuning.Tuner(path, KEY, ("mkl", "numpy"))
    assert tuner.choose("c", {"mkl": lambda: None, "numpy": lambda: None}) == "numpy"
    assert not os.path.exists(path)


@pytest.mark.parametrize("load,cpus,quiet", [(0.5, 2, True), (1.99, 2, True), (2.0, 2, False), (14.0, 2, False),
                                             (3.0, 4, True)])
def test_quiet_means_load_under_the_cores(monkeypatch, load, cpus, quiet):
    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    monkeypatch.setattr(gemm_tuning, "stolen", lambda: False)
    assert gemm_tuning.quiet() is quiet


@pytest.mark.parametrize("entry", [{"value": -1}, {"value": 1.5}, {"value": "9"}, {"value": True}, 3,
                                   {"value": 9, "settled": False}])
def test_bad_threshold_entries_are_ignored(tmp_path, entry):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"format": gemm_tuning.FORMAT, "machine": KEY, "thresholds": {"serial:float32": entry,
                                                                            "ok": {"value": 5}}}))
    assert gemm_tuning.Tuner(str(path), KEY, ("mkl", "numpy")).thresholds == {"ok": {"value": 5}}


# ---- gemm.matmul's use of the threshold ------------------------------------------------------
@pytest.fixture
def counted(monkeypatch):
    """Counts which MKL entry (threaded or one-thread) each float32 product went through."""
    dt = np.dtype(np.float32)
    log = []
    for table, name in ((gemm._gemm, "threaded"), (gemm._gemm_serial, "serial")):
        real = table[dt]
        monkeypatch.setitem(table, dt, lambda *args, real=real, name=name: (log.append(name), real(*args))[1])
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setattr(gemm, "_openblas", {"found": None})     # one thread means MKL's here
    monkeypatch.setattr(gemm, "_serial_chosen", {})
    return log


@needs_serial
@pytest.mark.parametrize("limit,expected", [(0, "threaded"), (96 * 80 * 70, "threaded"), (96 * 80 * 70 + 1, "serial")])
def test_products_under_the_threshold_run_on_one_thread(monkeypatch, rng, counted, limit, expected):
    monkeypatch.setitem(gemm._serial_work, np.dtype(np.float32), limit)
    a = rng.standard_normal((96, 70)).astype(np.float32)
    b = rng.standard_normal((70, 80)).astype(np.float32)
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    assert counted == [expected]


@needs_serial
def test_threshold_measured_once_on_the_first_product(monkeypatch, rng, counted, tmp_path):
    monkeypatch.setattr(gemm_tuning, "spare_core", lambda: True)   # (tune20) a walk needs a spare core
    monkeypatch.setattr(gemm, "_serial_work", {})
    monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(str(tmp_path / "t.json"), KEY, ("mkl", "numpy")))
    monkeypatch.setattr(gemm, "_cores", lambda: 2)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)          # a busy machine times nothing
    sides = []
    monkeypatch.setattr(gemm_tuning, "serial_threshold", lambda runners_for: (sides.append(1), (10 ** 9, True))[1])
    a = rng.standard_normal((64, 64)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(gemm.matmul(a, a), a.astype(np.float64) @ a, rtol=1e-5, atol=1e-4)
    assert sides == [1] and counted == ["serial", "serial"]          # one walk; the default until a second
    assert gemm.serial_work(np.float32) == gemm_tuning.SERIAL_DEFAULT   # process's walk agrees (tune20)


@needs_serial
def test_single_core_measures_nothing(monkeypatch):
    monkeypatch.setattr(gemm, "_serial_work", {})
    monkeypatch.setattr(gemm, "_cores", lambda: 1)
    monkeypatch.setattr(gemm_tuning, "serial_threshold", lambda runners_for: pytest.fail("measured"))
    assert gemm.serial_work(np.float64) == 0


@needs_serial
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_thread_runners_compute_the_product_and_restore_the_setting(dtype):
    """Both variants give the product; the calling thread's MKL setting is back to 'none' after."""
    set_local = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(gemm._gemm_serial[np.dtype(dtype)].args[0])
    before = set_local(0)                    # start from 'none' (an earlier test may have left a setting)
    runners = gemm._thread_runners(dtype, 32)
    rng = np.random.default_rng(32)
    a, b = rng.standard_normal((2, 32, 32)).astype(dtype)
    for run in runners.values():
        run()
    assert set_local(0) == 0                 # nothing left set on this thread
    out = np.empty((32, 32), dtype)
    gemm._gemm_serial[np.dtype(dtype)](gemm._NO_TRANS, gemm._NO_TRANS, 32, 32, 32, a, 32, b, 32, out, 32)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert set_local(before) == 0


@needs_serial
def test_ctypes_twin_restores_the_setting_too(rng):
    dt = np.dtype(np.float32)
    part = gemm._gemm_serial[dt]
    set_local = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(part.args[0])
    before = set_local(0)                    # start from 'none' (an earlier test may have left a setting)
    a = rng.standard_normal((8, 8)).astype(np.float32)
    out = np.empty((8, 8), np.float32)
    gemm._ctypes_call_threads(part.args[0], 1, part.args[2], gemm._NO_TRANS, gemm._TRANS, 8, 8, 8, a, 8, a, 8, out, 8)
    np.testing.assert_allclose(out, a.astype(np.float64) @ a.T, rtol=1e-5, atol=1e-5)
    assert set_local(before) == 0


# ---- which library runs a product on one thread ------------------------------------------------
needs_openblas = pytest.mark.skipif(gemm._openblas_threads() is None, reason="NumPy's BLAS is not an OpenBLAS")


@pytest.fixture
def serial_tuning(monkeypatch, tmp_path, counted):
    """Everything under the threshold, a fresh tuner, OpenBLAS's one-thread calls counted."""
    monkeypatch.setattr(gemm, "_openblas", {})
    monkeypatch.setitem(gemm._serial_work, np.dtype(np.float32), 10 ** 9)
    monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(str(tmp_path / "t.json"), KEY,
                                                                 ("mkl", "numpy", "mkl1", "numpy1")))
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    real = gemm._numpy_serial

    def numpy_serial(a, b, out):
        counted.append("numpy1")
        get = gemm._openblas["found"][0]
        before = get()
        real(a, b, out)
        assert get() == before            # OpenBLAS's thread count restored
    monkeypatch.setattr(gemm, "_numpy_serial", numpy_serial)
    return counted


@needs_serial
@needs_openblas
@pytest.mark.parametrize("faster,entry", [("numpy1", "numpy1"), ("mkl1", "serial")])
def test_the_faster_library_on_one_thread_runs_the_class(monkeypatch, rng, serial_tuning, faster, entry):
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: (run(), 1.0 if backend == faster else 3.0)[1])
    a = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal((48, 40)).astype(np.float32)
    want = a.astype(np.float64) @ b
    np.testing.assert_allclose(gemm.matmul(a, b), want, rtol=1e-5, atol=1e-4)     # the timing call
    assert gemm.tuner().backend("serial:float32:NN:7,6,6") == faster
    serial_tuning.clear()
    for _ in range(2):
        np.testing.assert_allclose(gemm.matmul(a, b), want, rtol=1e-5, atol=1e-4)
    assert serial_tuning == [entry, entry]


@needs_serial
@needs_openblas
def test_one_thread_classes_carry_the_transpose_flags(monkeypatch, rng, serial_tuning):
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: (run(), 1.0)[1])
    a = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal((40, 48)).astype(np.float32)
    np.testing.assert_allclose(gemm.matmul(a, b.T), a.astype(np.float64) @ b.T, rtol=1e-5, atol=1e-4)
    assert set(gemm.tuner().choices) == {"serial:float32:NT:7,6,6"}
    c = np.asfortranarray(a)
    np.testing.assert_allclose(gemm.matmul(c, b.T), a.astype(np.float64) @ b.T, rtol=1e-5, atol=1e-4)
    assert set(gemm.tuner().choices) == {"serial:float32:NT:7,6,6", "serial:float32:TT:7,6,6"}


@needs_serial
@needs_openblas
def test_a_cached_one_thread_choice_is_not_timed_again(monkeypatch, rng, serial_tuning):
    gemm.tuner().choices["serial:float32:NN:7,6,6"] = {"backend": "numpy1"}
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: pytest.fail("timed"))
    a = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal((48, 40)).astype(np.float32)
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    assert serial_tuning == ["numpy1"]


@needs_serial
def test_without_openblas_threads_one_thread_means_mkl(monkeypatch, rng, counted):
    monkeypatch.setitem(gemm._serial_work, np.dtype(np.float32), 10 ** 9)
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: pytest.fail("timed"))
    a = rng.standard_normal((64, 48)).astype(np.float32)
    np.testing.assert_allclose(gemm.matmul(a, a.T), a.astype(np.float64) @ a.T, rtol=1e-5, atol=1e-4)
    assert counted == ["serial"]


@needs_openblas
def test_numpy_serial_restores_the_thread_count_after_an_error():
    get = gemm._openblas_threads()[0]
    before = get()
    with pytest.raises(ValueError):
        gemm._numpy_serial(np.ones((2, 3)), np.ones((4, 2)), np.empty((2, 2)))
    assert get() == before


def test_numpys_own_openblas_is_the_one_set(monkeypatch):
    """SciPy loads another OpenBLAS (LP64, other symbol names); the one set is NumPy's."""
    pytest.importorskip("scipy.linalg")
    from threadpoolctl import threadpool_info
    home = os.path.realpath(os.path.dirname(np.__file__))
    mine = [i for i in threadpool_info() if i["internal_api"] == "openblas"
            and os.path.realpath(i["filepath"]).startswith(home)]
    if not mine:
        pytest.skip("NumPy's BLAS is not a bundled OpenBLAS")
    monkeypatch.setattr(gemm, "_openblas", {})
    get, put = gemm._openblas_threads()
    before = get()
    try:
        put(1)
        assert [i["num_threads"] for i in threadpool_info() if i["filepath"] == mine[0]["filepath"]] == [1]
    finally:
        put(before)
