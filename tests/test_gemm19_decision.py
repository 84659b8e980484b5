"""kernels/cpu/gemm_route.py ``decision``: the tuning-cache class and backend of the route a 2-D product
takes (what ``benchmarks/bench_gemm_backends.py`` reports; it crashed with a KeyError on a product
routed to a one-thread class). Scripted clocks: no timing thresholds."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import gemm, gemm_route, gemm_tuning

KEY = {"cpu": "Test CPU 9000", "cores": 2, "versions": {"mkl": "m1", "numpy": "n1"}}
F32 = np.dtype(np.float32)
pytestmark = [pytest.mark.skipif(not gemm._gemm_serial, reason="MKL with a per-thread setting is not loaded"),
              pytest.mark.skipif(gemm._openblas_threads() is None, reason="NumPy's BLAS is not an OpenBLAS")]


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A fresh tuner and no choices yet; two threads' share, tuning off, products split."""
    tuner = gemm_tuning.Tuner(str(tmp_path / "t.json"), KEY, ("mkl", "numpy", "mkl1", "numpy1", "rows", "cols", "one"))
    monkeypatch.setitem(gemm._tuning, "tuner", tuner)
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setitem(gemm._split, "on", True)
    monkeypatch.setitem(gemm._split, "share", True)
    for name in ("_chosen", "_split_chosen", "_serial_chosen"):
        monkeypatch.setattr(gemm, name, {})
    monkeypatch.setattr(gemm, "threads_here", lambda: 2)
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    return tuner


def _clock(monkeypatch, seconds):
    def timed(backend, run):
        run()
        return seconds[backend]
    monkeypatch.setattr(gemm_tuning, "_time_call", timed)


def _pair(rng, m, k, n):
    return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)


@pytest.mark.parametrize("faster", ["mkl1", "numpy1"])
def test_a_small_product_reports_its_one_thread_class(monkeypatch, rng, fresh, faster):
    """128x512 @ 512x10 (the mlp's output layer) runs on one thread: its class is ``serial:``."""
    monkeypatch.setitem(gemm._serial_work, F32, 1 << 30)
    _clock(monkeypatch, {faster: 1e-3, ({"mkl1", "numpy1"} - {faster}).pop(): 5e-3})
    a, b = _pair(rng, 128, 512, 10)
    assert gemm_route.decision(a, b) == ("serial:float32:NN:8,4,10", None, False)     # not run yet
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert gemm_route.decision(a, b) == ("serial:float32:NN:8,4,10", faster, True)
    assert fresh.choices["serial:float32:NN:8,4,10"]["backend"] == faster


@pytest.mark.parametrize("faster", ["mkl", "rows", "one"])
def test_a_threaded_product_reports_its_split_class(monkeypatch, rng, fresh, faster):
    monkeypatch.setitem(gemm._serial_work, F32, 1)
    _clock(monkeypatch, {"mkl": 5e-3, "rows": 5e-3, "cols": 5e-3, "one": 5e-3, "mkl1": 1e-3, "numpy1": 1e-3,
                         faster: 1e-3})
    a, b = _pair(rng, 128, 96, 64)
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert gemm_route.decision(a, b) == ("threads:float32:NN:8,7,7,p2", faster, True)
    # the transposed operand is another class, not yet run
    assert gemm_route.decision(a, np.asfortranarray(b)) == ("threads:float32:NT:8,7,7,p2", None, False)


@pytest.mark.parametrize("faster", ["mkl", "numpy"])
def test_a_tuned_product_reports_its_class(monkeypatch, rng, fresh, faster):
    """Under ``TW_BLAS_TUNE=1`` the class is the plain one; a timing under load is unsettled."""
    monkeypatch.setitem(gemm._tuning, "on", True)
    monkeypatch.setitem(gemm._serial_work, F32, 1)
    _clock(monkeypatch, {faster: 1e-3, ({"mkl", "numpy"} - {faster}).pop(): 5e-3})
    a, b = _pair(rng, 128, 96, 64)
    gemm.matmul(a, b)
    assert gemm_route.decision(a, b) == ("float32:NN:8,7,7", faster, True)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: False)
    a, b = _pair(rng, 300, 96, 64)
    gemm.matmul(a, b)
    assert gemm_route.decision(a, b) == ("float32:NN:9,7,7", faster, False)


def test_unsplit_and_numpy_only_products(monkeypatch, rng, fresh):
    monkeypatch.setitem(gemm._serial_work, F32, 1)
    monkeypatch.setitem(gemm._split, "on", False)                # TW_GEMM_SPLIT=0 or a forced TW_BLAS
    monkeypatch.setattr(gemm, "split_parts", lambda: 1)
    a, b = _pair(rng, 128, 96, 64)
    assert gemm_route.decision(a, b) == ("", "mkl", True)
    monkeypatch.setitem(gemm._split, "on", True)                 # a one-thread share: split_parts() 1
    assert gemm_route.decision(a, b)[0] == "serial:float32:NN:8,7,7"
    assert gemm_route.decision(a[:4, :4], b[:4, :4]) is None                       # under MIN_WORK: NumPy
    assert gemm_route.decision(a.astype(np.int32), b.astype(np.int32)) is None     # no integer GEMM


def test_a_cache_of_another_library_version_or_cpu_generation_is_not_read(tmp_path):
    """The file is keyed by CPU model and generation, core count and both libraries' versions."""
    path = str(tmp_path / "t.json")
    key = gemm_tuning.machine_key({"numpy": "2.4", "mkl": "2026.2"})
    writer = gemm_tuning.Tuner(path, key, ("mkl", "rows"))
    writer.choices["threads:float32:NN:12,12,12,p2"] = {"backend": "rows", "settled": True}
    writer._write()
    assert gemm_tuning.Tuner(path, key, ("mkl", "rows")).backend("threads:float32:NN:12,12,12,p2") == "rows"
    for other in (gemm_tuning.machine_key({"numpy": "2.4", "mkl": "2025.0"}),
                  gemm_tuning.machine_key({"numpy": "2.3", "mkl": "2026.2"}),
                  dict(key, generation=key["generation"] + " amx_tile?"), dict(key, cpu="Another CPU")):
        assert gemm_tuning.Tuner(path, other, ("mkl", "rows")).choices == {}


_PROBE = r"""
import json, os
import numpy as np
from tensorweave.kernels.cpu import gemm, gemm_route
rng = np.random.default_rng(0)
a, b = rng.standard_normal((2, 256, 256)).astype(np.float32)
got = gemm.matmul(a, b)
route = gemm_route.decision(a, b)
print(json.dumps({"route": route, "err": float(np.max(np.abs(got - a.astype(np.float64) @ b)))}))
"""


@pytest.mark.parametrize("blas", ["mkl", "numpy"])
def test_a_forced_library_wins_over_the_cache(tmp_path, blas):
    """``TW_BLAS`` forces the library whatever the cache says for the class (here: split by rows)."""
    import json
    import os
    import subprocess
    import sys
    cache = tmp_path / "t.json"
    cache.write_text(json.dumps({"format": gemm_tuning.FORMAT, "machine": gemm.machine_key(), "choices": {
        "threads:float32:NN:9,9,9,p2": {"backend": "rows", "settled": True}}}))
    env = {k: v for k, v in os.environ.items() if k not in ("TW_BLAS_TUNE", "TW_GEMM_SPLIT")}
    env.update(TW_BLAS=blas, TW_TUNING_CACHE=str(cache), OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2")
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["err"] < 1e-3
    if blas == "numpy":
        assert out["route"] is None                                  # MKL not loaded: every product NumPy's
    else:
        assert out["route"][0] in ("", "serial:float32:NN:9,9,9")    # never the cached split
        assert out["route"][1] in ("mkl", "mkl1", "numpy1")
