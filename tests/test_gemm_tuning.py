"""kernels/cpu/gemm_tuning.py: the GEMM backend chosen per shape class by timing, cached on disk.
No timing thresholds: the clock is replaced wherever a choice is checked."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tensorweave.kernels.cpu import gemm, gemm_tuning

KEY = {"cpu": "Test CPU 9000", "cores": 2, "versions": {"mkl": "m1", "numpy": "n1"}}
BACKENDS = ("mkl", "numpy")
needs_mkl = pytest.mark.skipif(not gemm._gemm, reason="MKL (the 'mkl' extra) is not loaded")


@pytest.fixture(autouse=True)
def _quiet_machine(monkeypatch):
    """Timings count as made on a quiet machine (the real load average is checked in its own test)."""
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)


def _fake_timer(monkeypatch, seconds):
    """Each timed call of ``backend`` 'takes' ``seconds[backend]``; returns the per-backend call log."""
    log = []

    def timed(backend, run):
        run()
        log.append(backend)
        return seconds[backend]
    monkeypatch.setattr(gemm_tuning, "_time_call", timed)
    return log


def _runners(log):
    return {name: (lambda name=name: log.append(name)) for name in BACKENDS}


def test_shape_classes():
    sc = gemm_tuning.shape_class
    assert sc(128, 512, 784, "float32", False, False) == "float32:NN:8,10,10"
    assert sc(255, 1023, 1023, "float32", False, False) == sc(128, 512, 784, "float32", False, False)
    assert sc(256, 512, 784, "float32", False, False) != sc(255, 512, 784, "float32", False, False)
    assert sc(128, 512, 784, "float64", False, False) != sc(128, 512, 784, "float32", False, False)
    assert len({sc(64, 64, 64, "float32", ta, tb) for ta in (False, True) for tb in (False, True)}) == 4


def test_machine_key_names_cpu_cores_and_versions():
    key = gemm_tuning.machine_key({"numpy": "2.0", "mkl": "2025"})
    assert key["cpu"] == gemm_tuning.cpu_model() and key["cpu"]
    assert key["cores"] == os.cpu_count()
    assert key["versions"] == {"mkl": "2025", "numpy": "2.0"}
    assert gemm_tuning.machine_key({"numpy": "2.1", "mkl": "2025"}) != key
    assert key["generation"] == gemm_tuning.cpu_generation()


def test_cpu_generation_tells_apart_cpus_with_one_model_string(tmp_path):
    zen3, zen4 = tmp_path / "zen3", tmp_path / "zen4"
    block = "processor\t: 0\nmodel name\t: AMD EPYC\ncpu family\t: 25\nmodel\t\t: {m}\nflags\t\t: fpu {f}\n\n"
    zen3.write_text(block.format(m=1, f="avx2 fma") + "processor\t: 1\nmodel\t\t: 99\n")
    zen4.write_text(block.format(m=17, f="avx2 fma avx512f avx512_bf16"))
    assert gemm_tuning.cpu_generation(str(zen3)) == "cpu family=25 model=1 avx2 fma"
    assert gemm_tuning.cpu_generation(str(zen4)) == "cpu family=25 model=17 avx512f avx512_bf16 avx2 fma"
    assert gemm_tuning.cpu_generation(str(tmp_path / "absent")) == ""


def test_cache_path_override(monkeypatch, tmp_path):
    monkeypatch.setenv("TW_TUNING_CACHE", str(tmp_path / "c.json"))
    assert gemm_tuning.cache_path() == str(tmp_path / "c.json")
    monkeypatch.delenv("TW_TUNING_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert gemm_tuning.cache_path() == str(tmp_path / "tensorweave" / "gemm-tuning.json")


def test_margin_keeps_the_incumbent_between_near_equals():
    assert gemm_tuning.pick({"mkl": [1.0], "numpy": [0.95]}) == ("mkl", True)
    assert gemm_tuning.pick({"mkl": [1.0], "numpy": [0.8]}) == ("numpy", True)
    assert gemm_tuning.pick({"mkl": [0.5], "numpy": [1.0]}) == ("mkl", True)
    assert gemm_tuning.pick({"numpy": [1.0]}) == ("numpy", True)


def test_median_and_fastest_call_must_agree():
    """NumPy faster by the median, MKL by the fastest call (load came and went): not settled."""
    noisy = {"mkl": [1.0, 9.0, 9.0], "numpy": [2.0, 2.0, 2.0]}
    assert gemm_tuning.pick(noisy) == ("mkl", False)
    assert gemm_tuning.pick({"mkl": [1.0, 9.0, 9.0], "numpy": [0.5, 2.0, 2.0]}) == ("numpy", True)


def test_an_unsettled_choice_is_not_saved(monkeypatch, tmp_path):
    path = str(tmp_path / "t.json")
    seconds = iter([1e-3, 2e-3] + [9e-3, 2e-3] * 10)   # mkl's fastest call wins, its median loses
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: next(seconds))
    tuner = gemm_tuning.Tuner(path, KEY, BACKENDS)
    assert tuner.choose("a", _runners([])) == "mkl" and tuner.choices["a"]["settled"] is False
    assert not os.path.exists(path)
    tuner.choices["b"] = {"backend": "numpy", "settled": True}
    tuner._write()
    assert gemm_tuning.Tuner(path, KEY, BACKENDS).choices == {"b": {"backend": "numpy", "settled": True}}


def test_measure_interleaves_and_takes_medians(monkeypatch):
    ticks = iter(range(10 ** 6))
    monkeypatch.setattr(gemm_tuning, "_clock", lambda: next(ticks) * 1e-9)   # never over budget
    order = []
    times = gemm_tuning.measure(_runners(order))
    warmups = list(BACKENDS)
    assert order[:2] == warmups
    # interleaved rounds; each timed block of calls right after a lead-in call of its own candidate
    # (not after the other library's, whose idle threads would still spin on the other core); a
    # call 'takes' one tick, so a block is as many calls as fill BLOCK_S (at most MAX_REPS)
    reps = gemm_tuning.block_reps(1e-9)
    assert reps == gemm_tuning.MAX_REPS
    assert order[2:] == [name for name in BACKENDS for _ in range(1 + reps)] * gemm_tuning.MAX_CALLS
    one = gemm_tuning.measure({"only": lambda: order.append("only")})
    assert len(one["only"]) == gemm_tuning.MAX_CALLS
    assert order.count("only") == 1 + (1 + reps) * gemm_tuning.MAX_CALLS     # a lone candidate is led in too
    assert {name: len(ts) for name, ts in times.items()} == {name: gemm_tuning.MAX_CALLS for name in BACKENDS}
    assert gemm_tuning._median([5, 1, 100]) == 5 and gemm_tuning._median([1, 3, 5, 100]) == 4


def test_round_trip_through_the_file(monkeypatch, tmp_path):
    path = str(tmp_path / "sub" / "tuning.json")
    _fake_timer(monkeypatch, {"mkl": 2e-3, "numpy": 1e-3})
    ran = []
    tuner = gemm_tuning.Tuner(path, KEY, BACKENDS)
    assert tuner.choose("float32:NN:8,10,10", _runners(ran)) == "numpy"
    assert ran and os.listdir(tmp_path / "sub") == ["tuning.json"]          # no temporary file left
    data = json.loads(open(path).read())
    assert data["format"] == gemm_tuning.FORMAT and data["machine"] == KEY
    entry = data["choices"]["float32:NN:8,10,10"]
    assert entry.pop("load") is None or entry["others"] == 0                 # the conditions it was timed in
    assert entry == {"backend": "numpy", "settled": True, "mkl_us": 2000.0, "numpy_us": 1000.0,
                     "others": 0, "spread": 0.0, "noisy": False}
    _fake_timer(monkeypatch, {"mkl": 1e-3, "numpy": 2e-3})                     # a later process
    ran.clear()
    again = gemm_tuning.Tuner(path, KEY, BACKENDS)
    assert again.choose("float32:NN:8,10,10", _runners(ran)) == "numpy" and ran == []   # cached, not re-timed
    assert again.choose("float32:NT:8,10,10", _runners(ran)) == "mkl" and ran           # a new class is timed
    assert set(gemm_tuning.Tuner(path, KEY, BACKENDS).choices) == {"float32:NN:8,10,10", "float32:NT:8,10,10"}


def test_entries_of_other_processes_are_kept(monkeypatch, tmp_path):
    path = str(tmp_path / "t.json")
    _fake_timer(monkeypatch, {"mkl": 1e-3, "numpy": 2e-3})
    first, second = gemm_tuning.Tuner(path, KEY, BACKENDS), gemm_tuning.Tuner(path, KEY, BACKENDS)
    first.choose("a", _runners([]))
    second.choose("b", _runners([]))
    assert set(gemm_tuning.Tuner(path, KEY, BACKENDS).choices) == {"a", "b"}


@pytest.mark.parametrize("content", [
    b"\x00\xff not json", b"[1, 2]", b'{"format": 2, "machine": {"cpu": "x"', b"",
    json.dumps({"format": 99, "machine": KEY, "choices": {"a": {"backend": "numpy"}}}).encode(),
    json.dumps({"format": gemm_tuning.FORMAT, "machine": dict(KEY, cpu="Other CPU"), "choices": {"a": {"backend": "numpy"}}}).encode(),
    json.dumps({"format": gemm_tuning.FORMAT, "machine": KEY, "choices": ["a", "numpy"]}).encode(),
    json.dumps({"format": gemm_tuning.FORMAT, "machine": KEY, "choices": {"a": {"backend": "os.system('x')"}}}).encode(),
    json.dumps({"format": gemm_tuning.FORMAT, "machine": KEY, "choices": {"a": "numpy"}}).encode(),
    json.dumps({"format": gemm_tuning.FORMAT, "machine": KEY, "choices": {"a": {"backend": "numpy", "settled": 1}}}).encode(),
], ids=["binary", "list", "truncated", "empty", "format", "foreign machine", "choices list", "bad backend",
        "bad entry", "unsettled"])
def test_corrupt_or_foreign_files_are_ignored_and_replaced(monkeypatch, tmp_path, content):
    path = tmp_path / "t.json"
    path.write_bytes(content)
    log = _fake_timer(monkeypatch, {"mkl": 1e-3, "numpy": 5e-3})
    tuner = gemm_tuning.Tuner(str(path), KEY, BACKENDS)
    assert tuner.backend("a") is None
    assert tuner.choose("a", _runners([])) == "mkl" and log                 # measured, not read
    assert gemm_tuning.Tuner(str(path), KEY, BACKENDS).backend("a") == "mkl"


def test_valid_entries_survive_next_to_bad_ones(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"format": gemm_tuning.FORMAT, "machine": KEY, "choices": {
        "good": {"backend": "numpy"}, "bad": {"backend": "cuda"}, "worse": 3}}))
    assert gemm_tuning.Tuner(str(path), KEY, BACKENDS).choices == {"good": {"backend": "numpy"}}


def test_unwritable_cache_is_skipped(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _fake_timer(monkeypatch, {"mkl": 3e-3, "numpy": 1e-3})
    tuner = gemm_tuning.Tuner(str(blocker / "t.json"), KEY, BACKENDS)   # its folder is a file
    assert tuner.choose("a", _runners([])) == "numpy" and tuner.backend("a") == "numpy"


@pytest.fixture
def tuning(monkeypatch, tmp_path):
    """gemm with tuning on, a fresh cache file and no choices yet."""
    monkeypatch.setitem(gemm._tuning, "on", True)
    monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(str(tmp_path / "t.json"), KEY, BACKENDS))
    monkeypatch.setattr(gemm, "_chosen", {})
    monkeypatch.setattr(gemm, "_serial_work", {np.dtype(np.float32): 0, np.dtype(np.float64): 0})
    # two threads' share (an xdist worker has one: its products take the one-thread choice instead)
    monkeypatch.setattr(gemm, "threads_here", lambda: 2)
    return gemm._tuning["tuner"]


@needs_mkl
@pytest.mark.parametrize("faster", ["mkl", "numpy"])
def test_the_chosen_backend_is_the_one_used(monkeypatch, rng, tuning, faster):
    mkl_calls = []
    real = gemm._gemm[np.dtype(np.float32)]
    monkeypatch.setitem(gemm._gemm, np.dtype(np.float32), lambda *args: (mkl_calls.append(1), real(*args)))
    _fake_timer(monkeypatch, {faster: 1e-3, ({"mkl", "numpy"} - {faster}).pop(): 4e-3})
    a = rng.standard_normal((128, 96)).astype(np.float32)
    b = rng.standard_normal((96, 64)).astype(np.float32)
    np.testing.assert_allclose(gemm.matmul(a, b), a @ b, rtol=1e-5, atol=1e-4)   # the tuning call
    assert gemm.choice(128, 64, 96) == faster and tuning.backend("float32:NN:8,7,7") == faster
    assert gemm.choice(128, 64, 96, trans_a=True) is None
    timed = len(mkl_calls)
    for _ in range(3):
        np.testing.assert_allclose(gemm.matmul(a, b), a @ b, rtol=1e-5, atol=1e-4)
    assert len(mkl_calls) - timed == (3 if faster == "mkl" else 0)


@needs_mkl
@pytest.mark.parametrize("cached", BACKENDS)
def test_a_choice_read_from_the_file_computes_the_product(monkeypatch, rng, tuning, cached):
    """A class tuned by an earlier process is not timed again, and its first product is computed."""
    tuning.choices["float32:NN:7,7,7"] = {"backend": cached}
    log = _fake_timer(monkeypatch, {"mkl": 1e-3, "numpy": 1e-3})
    a = rng.standard_normal((70, 90)).astype(np.float32)
    b = rng.standard_normal((90, 80)).astype(np.float32)
    np.testing.assert_allclose(gemm.matmul(a, b), a @ b, rtol=1e-5, atol=1e-4)
    assert gemm.choice(70, 80, 90) == cached and log == []


@needs_mkl
@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-5), (np.float64, 1e-12)])
def test_results_agree_across_backends(monkeypatch, rng, tmp_path, tuning, dtype, tol):
    """Every operand layout BLAS reads in place, on each backend, against float64 NumPy."""
    a = rng.standard_normal((70, 90)).astype(dtype)
    b = rng.standard_normal((90, 50)).astype(dtype)
    want = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    for backend in BACKENDS:
        _fake_timer(monkeypatch, {backend: 1e-3, ({"mkl", "numpy"} - {backend}).pop(): 4e-3})
        monkeypatch.setattr(gemm, "_chosen", {})
        monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(str(tmp_path / f"{backend}.json"), KEY, BACKENDS))
        for x, y in ((a, b), (np.asfortranarray(a), b), (a, np.asfortranarray(b)), (a[:, :], b.T.copy().T)):
            for _ in range(2):   # the tuning call, then the chosen backend's
                got = gemm.matmul(x, y)
                assert np.max(np.abs(got - want) / scale) < tol, backend
        assert set(gemm._chosen.values()) == {backend}


_PROBE = r"""
import json, os
import numpy as np
from tensorweave.kernels.cpu import gemm
a = np.ones((128, 784), np.float32)
assert (gemm.matmul(a, np.ones((784, 512), np.float32)) == 784).all()
path = os.environ["TW_TUNING_CACHE"]
choices = json.load(open(path)).get("choices") if os.path.exists(path) else None
# the one-thread library of a class and a threaded class's split (its blocks one-thread products) are timed by
# default on a quiet machine (gemm._serial_library, _threaded_choice): not the opt-in tuning's classes
choices = {k: v for k, v in (choices or {}).items() if not k.startswith(("threads:", "serial:"))}
print(json.dumps({"on": gemm._tuning["on"], "choice": gemm.choice(128, 512, 784), "choices": bool(choices)}))
"""


@needs_mkl
def test_overrides_and_a_second_process_reusing_the_cache(tmp_path):
    cache = tmp_path / "t.json"

    def probe(**env):
        full = {k: v for k, v in os.environ.items() if k not in ("TW_BLAS", "TW_BLAS_TUNE")}
        full.update(env, TW_TUNING_CACHE=str(cache))
        done = subprocess.run([sys.executable, "-c", _PROBE], env=full, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    for forced in ({"TW_BLAS": "mkl", "TW_BLAS_TUNE": "1"}, {"TW_BLAS": "numpy", "TW_BLAS_TUNE": "1"},
                   {"TW_BLAS_TUNE": "0"}, {}):   # tuning is opt-in
        # (the file may hold the serial threshold, measured by default: no shape class's choice)
        assert probe(**forced) == {"on": False, "choice": None, "choices": False}, forced
    first = probe(TW_BLAS_TUNE="1")   # real timings: the choice is either, saved only when settled
    assert first["on"] and first["choice"] in BACKENDS
    for saved in BACKENDS:   # a later process takes the file's word instead of timing again
        cache.write_text(json.dumps({"format": gemm_tuning.FORMAT, "machine": gemm.machine_key(),
                                     "choices": {"float32:NN:8,10,10": {"backend": saved}}}))
        assert probe(TW_BLAS_TUNE="1")["choice"] == saved
