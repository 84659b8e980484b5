"""Issue 18, session 22 (amd26): the tuning file's leftovers — the BLAS thread counts in the machine
key, a thin class's timing kept with its conditions (and timed again when noisy), a threshold
settled at an end of its ladder flagged — and the benchmarks' helpers (the peers' summary of
bench_core's matmul row, bench_small_m's transposed operands). Scripted clocks: no timing thresholds."""
import json
import os
import sys

import numpy as np
import pytest
from test_pred19_batch1 import KEY, BACKENDS, _thin_operands, needs_openblas, needs_serial, thin  # noqa: F401

from tensorweave.kernels.cpu import gemm, gemm_tuning

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import bench_core  # noqa: E402
import bench_small_m  # noqa: E402

THIN = "thincold:float32:NN:1,10,10,p2"


# ---- the machine key ----------------------------------------------------------------------------
def test_blas_threads_are_those_the_environment_sets():
    env = {"MKL_NUM_THREADS": "1", "OMP_NUM_THREADS": " 2 ", "OPENBLAS_CORETYPE": "Haswell"}
    assert gemm_tuning.blas_threads(env) == {"MKL_NUM_THREADS": "1", "OMP_NUM_THREADS": "2"}
    assert gemm_tuning.blas_threads({}) == {}


def test_the_key_of_a_default_process_is_the_old_key(monkeypatch):
    for name in gemm_tuning.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    key = gemm_tuning.machine_key({"numpy": "2.4"})
    assert "blas_threads" not in key and set(key) == {"cpu", "generation", "cores", "versions"}


@pytest.mark.parametrize("name", gemm_tuning.THREAD_VARIABLES)
def test_a_file_timed_under_a_thread_limit_is_not_read_by_a_process_without_it(monkeypatch, tmp_path, name):
    for other in gemm_tuning.THREAD_VARIABLES:
        monkeypatch.delenv(other, raising=False)
    path = str(tmp_path / "t.json")
    monkeypatch.setenv(name, "1")
    limited = gemm_tuning.machine_key({"numpy": "2.4"})
    assert limited["blas_threads"] == {name: "1"}
    writer = gemm_tuning.Tuner(path, limited, ("mkl", "rows"))
    writer.choices["threads:float32:NN:8,10,10,p2"] = {"backend": "mkl", "settled": True}
    writer._write()
    assert gemm_tuning.Tuner(path, limited, ("mkl", "rows")).backend("threads:float32:NN:8,10,10,p2") == "mkl"
    monkeypatch.delenv(name)
    assert gemm_tuning.Tuner(path, gemm_tuning.machine_key({"numpy": "2.4"}), ("mkl", "rows")).choices == {}
    monkeypatch.setenv(name, "2")
    assert gemm_tuning.Tuner(path, gemm_tuning.machine_key({"numpy": "2.4"}), ("mkl", "rows")).choices == {}


# ---- Tuner.keep ---------------------------------------------------------------------------------
@pytest.fixture
def tuner(monkeypatch, tmp_path):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    return gemm_tuning.Tuner(str(tmp_path / "t.json"), {"cpu": "x"}, ("one", "mkl"))


def _disk(t):
    with open(t.path, encoding="utf-8") as f:
        return json.load(f)["choices"]


def test_keep_records_timings_and_conditions_and_writes_a_settled_entry(tuner):
    got = tuner.keep("c", {"backend": "mkl", "settled": True, "rounds": 2},
                     {"one": [2e-3, 2e-3, 2e-3], "mkl": [1e-3, 2e-3, 2e-3]}, others_before=0)
    entry = _disk(tuner)["c"]
    assert got == "mkl" and entry["rounds"] == 2 and entry["one_us"] == 2000.0 and entry["mkl_us"] == 2000.0
    assert entry["spread"] == 1.0 and entry["noisy"] is True and entry["others"] == 0 and "load" in entry
    assert "retimes" not in entry and "c" in tuner.retimed


def test_keep_leaves_a_settled_entry_standing_against_an_unsettled_timing(tuner):
    tuner.keep("c", {"backend": "mkl", "settled": True}, {"mkl": [1e-3] * 3, "one": [2e-3] * 3}, 3)
    assert tuner.keep("c", {"backend": "one", "settled": False}, {"mkl": [3e-3] * 3, "one": [1e-3] * 3}) == "mkl"
    entry = tuner.choices["c"]
    assert entry["backend"] == "mkl" and entry["retimes"] == 1 and entry["mkl_us"] == 1000.0
    assert entry["noisy"] is True and entry["others"] == 3            # the old entry's conditions too
    assert tuner.keep("c", {"backend": "one", "settled": True}, {"mkl": [3e-3] * 3, "one": [1e-3] * 3}) == "one"
    assert _disk(tuner)["c"]["retimes"] == 2 and _disk(tuner)["c"]["noisy"] is False


def test_record_is_keep_of_a_pick(tuner):
    assert tuner.record("c", {"mkl": [1e-3] * 3, "one": [3e-3] * 3}, incumbent="one") == "mkl"
    assert tuner.choices["c"]["settled"] is True and tuner.choices["c"]["one_us"] == 3000.0


# ---- a thin class's conditions ------------------------------------------------------------------
@needs_serial
@needs_openblas
def test_a_thin_timing_is_kept_with_its_conditions(thin, rng):  # noqa: F811 - the imported fixture
    thin.seconds = {"mkl": 0.1}
    a, b = _thin_operands(rng)
    gemm.matmul(a, b)
    entry = gemm.tuner().choices[THIN]
    assert entry["backend"] == "mkl" and entry["settled"] is True and entry["rounds"] == 2
    assert entry["noisy"] is False and entry["others"] == 0 and entry["spread"] == 0.0 and "load" in entry


@needs_serial
@needs_openblas
def test_a_noisy_thin_timing_is_timed_again_by_the_next_quiet_process(thin, rng, monkeypatch):  # noqa: F811
    thin.seconds = {"mkl": 0.1}
    monkeypatch.setattr(gemm_tuning, "others_running", lambda: 3)       # another process's threads ran
    a, b = _thin_operands(rng)
    gemm.matmul(a, b)
    assert gemm.tuner().choices[THIN]["noisy"] is True and gemm.tuner().choices[THIN]["settled"] is True
    thin.clear()
    gemm.matmul(a, b)
    assert not thin                                                     # this process: not again
    monkeypatch.setattr(gemm_tuning, "others_running", lambda: 0)
    monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(gemm.tuner().path, KEY, BACKENDS))
    monkeypatch.setattr(gemm, "_thin_chosen", {})                       # the next process
    thin.seconds = {"cols": 0.1}
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    entry = gemm.tuner().choices[THIN]
    assert "cols" in thin and entry["backend"] == "cols" and entry["retimes"] == 1 and entry["noisy"] is False


# ---- a threshold at an end of its ladder ----------------------------------------------------------
def _walk(monkeypatch, threaded_s):
    """``walk()``: :func:`gemm_tuning.serial_threshold` over a two-rung ladder whose threaded call
    'takes' ``threaded_s`` against one thread's 1 s."""
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: threaded_s if backend == "threaded" else 1.0)
    runners = {"serial": lambda: None, "threaded": lambda: None}
    return lambda: gemm_tuning.serial_threshold(lambda side: runners, ladder=(2, 4))


@pytest.mark.parametrize("threaded_s,value,flag", [(2.0, 128, "top"), (0.5, 8, "bottom")])
def test_a_threshold_settled_at_an_end_of_its_ladder_is_flagged(monkeypatch, tmp_path, threaded_s, value, flag):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    monkeypatch.setattr(gemm_tuning, "spare_core", lambda: True)
    walk, path = _walk(monkeypatch, threaded_s), str(tmp_path / "t.json")
    first = gemm_tuning.Tuner(path, {"cpu": "x"}, ("one",))
    assert first.threshold("serial:float32", walk, 27) == 27 and "edge" not in first.thresholds["serial:float32"]
    second = gemm_tuning.Tuner(path, {"cpu": "x"}, ("one",))              # the next process agrees
    assert second.threshold("serial:float32", walk, 27) == value
    with open(path, encoding="utf-8") as f:
        assert json.load(f)["thresholds"]["serial:float32"] == {**second.thresholds["serial:float32"], "edge": flag}


def test_a_threshold_inside_its_ladder_is_not_flagged(monkeypatch, tmp_path):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    monkeypatch.setattr(gemm_tuning, "spare_core", lambda: True)
    times = {4: 0.5, 2: 2.0}                     # threads win at the top rung only
    side = {}

    def runners(s):
        side["now"] = s
        return {"serial": lambda: None, "threaded": lambda: None}
    monkeypatch.setattr(gemm_tuning, "_time_call",
                        lambda backend, run: times[side["now"]] if backend == "threaded" else 1.0)
    walk = lambda: gemm_tuning.serial_threshold(runners, ladder=(2, 4))  # noqa: E731
    path = str(tmp_path / "t.json")
    for _ in range(2):
        t = gemm_tuning.Tuner(path, {"cpu": "x"}, ("one",))
        got = t.threshold("serial:float32", walk, 27)
    assert got == 64 and t.thresholds["serial:float32"]["settled"] is True
    assert "edge" not in t.thresholds["serial:float32"]
    assert gemm_tuning.walk_ends() == (8, 128)


# ---- the benchmarks' helpers ------------------------------------------------------------------------
def test_peer_summary_names_the_fastest_peer_and_tensorweaves_ratio():
    rows = [{"row": "matmul_peers", "framework": "tensorweave", "wall_gflops": 120.0, "over_best_peer_wall": 0.9,
             "over_best_peer_cpu": 1.05},
            {"row": "matmul_peers", "framework": "tensorweave (alone, first)", "wall_gflops": 150.0},
            {"row": "matmul_peers", "framework": "numpy", "wall_gflops": 160.0},
            {"row": "matmul_peers", "framework": "torch", "wall_gflops": 133.3},
            {"row": "matmul_peers", "framework": "jax", "wall_gflops": 100.0},
            {"row": "matmul_peers", "framework": "tensorflow", "absent": True, "why": "no module"},
            {"row": "matmul_peers", "load_average": 1.0}]
    got = bench_core.peer_summary(rows)
    assert got == {"peers_gflops": {"torch": 133.3, "jax": 100.0}, "best_peer": "torch", "ratio_vs_best_peer": 0.9,
                   "cpu_ratio_vs_best_peer": 1.05, "meets_peer_target": False, "absent_peers": ["tensorflow"]}
    assert bench_core.peer_summary(rows[:1] + rows[-1:])["best_peer"] is None


def test_peer_summary_without_peers():
    got = bench_core.peer_summary([{"row": "matmul_peers", "framework": "tensorweave", "wall_gflops": 1.0}])
    assert got["best_peer"] is None and got["ratio_vs_best_peer"] is None and got["meets_peer_target"] is None


@pytest.mark.parametrize("shape,ta,tb", [("5x3x2", False, False), ("5x3x2:NT", False, True),
                                         ("5x3x2:TN", True, False), ("5x3x2:TT", True, True)])
def test_bench_small_m_reads_the_transposed_operand_as_the_step_does(shape, ta, tb):
    a, b = bench_small_m.operands(shape, np.random.default_rng(0))
    assert a.shape == (5, 3) and b.shape == (3, 2)
    assert a.flags.c_contiguous is not ta and b.flags.c_contiguous is not tb
    assert len(bench_small_m.MLP.split(",")) == 9 and "128x512x784:NT" in bench_small_m.MLP.split(",")


def test_an_entry_without_a_settled_field_counts_as_settled(tuner):
    """Entries of older files carry no ``settled`` (``Tuner._read`` keeps them as settled): a timing
    that does not settle leaves such an entry standing and spends one of its re-timings."""
    tuner.choices["c"] = {"backend": "mkl"}
    assert tuner.keep("c", {"backend": "one", "settled": False}, {"mkl": [3e-3] * 3, "one": [1e-3] * 3}) == "mkl"
    assert tuner.choices["c"] == {"backend": "mkl", "retimes": 1}


def _quiet(monkeypatch, spare):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    monkeypatch.setattr(gemm_tuning, "spare_core", spare)


def test_a_walk_that_is_no_ladder_walk_leaves_no_ends_of_an_earlier_one(monkeypatch, tmp_path):
    """The ends are this walk's: a threshold walked without ``serial_threshold`` after one walked with
    it on the same thread is not flagged by the earlier walk's ends."""
    _quiet(monkeypatch, lambda: True)
    _walk(monkeypatch, 2.0)()                                            # ends (8, 128) left on this thread
    assert gemm_tuning.walk_ends() == (8, 128)
    path = str(tmp_path / "t.json")
    for _ in range(2):
        t = gemm_tuning.Tuner(path, {"cpu": "x"}, ("one",))
        assert t.threshold("other", lambda: (128, True), 27) in (27, 128)
    assert t.thresholds["other"] == {"value": 128, "settled": True, "ms": t.thresholds["other"]["ms"]}


def test_an_unsettled_threshold_at_an_end_is_not_flagged(monkeypatch, tmp_path):
    """Two walks agreed at the top, but the core was no longer to spare when the second ended: the
    value holds for this process, unsettled, without the flag."""
    spare = iter([True, True, False])                # the first process's check; the second's, then after its walk
    _quiet(monkeypatch, lambda: next(spare))
    walk, path = _walk(monkeypatch, 2.0), str(tmp_path / "t.json")
    gemm_tuning.Tuner(path, {"cpu": "x"}, ("one",)).threshold("serial:float32", walk, 27)
    second = gemm_tuning.Tuner(path, {"cpu": "x"}, ("one",))
    assert second.threshold("serial:float32", walk, 27) == 128
    assert second.thresholds["serial:float32"]["settled"] is False and "edge" not in second.thresholds["serial:float32"]


def test_the_peer_target_is_met_at_its_ratio():
    rows = [{"row": "matmul_peers", "framework": "tensorweave", "wall_gflops": 95.0,
             "over_best_peer_wall": bench_core.TARGETS["matmul_ratio_vs_best_peer"]},
            {"row": "matmul_peers", "framework": "torch", "wall_gflops": 100.0}]
    assert bench_core.peer_summary(rows)["meets_peer_target"] is True
