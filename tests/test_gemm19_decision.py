"""kernels/cpu/gemm.py ``decision``: the tuning-cache class and backend of the route a 2-D product
takes (what ``benchmarks/bench_gemm_backends.py`` reports; it crashed with a KeyError on a product
routed to a one-thread class). Scripted clocks: no timing thresholds."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import gemm, gemm_tuning

KEY = {"cpu": "Test CPU 9000", "cores": 2, "versions": {"mkl": "m1", "numpy": "n1"}}
F32 = np.dtype(np.float32)
pytestmark = [pytest.mark.skipif(not gemm._gemm_serial, reason="MKL with a per-thread setting is not loaded"),
              pytest.mark.skipif(gemm._openblas_threads() is None, reason="NumPy's BLAS is not an OpenBLAS")]


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A fresh tuner and no choices yet; two threads' share, tuning off, products split."""
    tuner = gemm_tuning.Tuner(str(tmp_path / "t.json"), KEY, ("mkl", "numpy", "mkl1", "numpy1", "rows", "cols"))
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
    assert gemm.decision(a, b) == ("serial:float32:NN:8,4,10", None, False)     # not run yet
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert gemm.decision(a, b) == ("serial:float32:NN:8,4,10", faster, True)
    assert fresh.choices["serial:float32:NN:8,4,10"]["backend"] == faster


@pytest.mark.parametrize("faster", ["mkl", "rows"])
def test_a_threaded_product_reports_its_split_class(monkeypatch, rng, fresh, faster):
    monkeypatch.setitem(gemm._serial_work, F32, 1)
    _clock(monkeypatch, {"mkl": 5e-3, "rows": 5e-3, "cols": 5e-3, "mkl1": 1e-3, "numpy1": 1e-3, faster: 1e-3})
    a, b = _pair(rng, 128, 96, 64)
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert gemm.decision(a, b) == ("threads:float32:NN:8,7,7,p2", faster, True)
    # the transposed operand is another class, not yet run
    assert gemm.decision(a, np.asfortranarray(b)) == ("threads:float32:NT:8,7,7,p2", None, False)


@pytest.mark.parametrize("faster", ["mkl", "numpy"])
def test_a_tuned_product_reports_its_class(monkeypatch, rng, fresh, faster):
    """Under ``TW_BLAS_TUNE=1`` the class is the plain one; a timing under load is unsettled."""
    monkeypatch.setitem(gemm._tuning, "on", True)
    monkeypatch.setitem(gemm._serial_work, F32, 1)
    _clock(monkeypatch, {faster: 1e-3, ({"mkl", "numpy"} - {faster}).pop(): 5e-3})
    a, b = _pair(rng, 128, 96, 64)
    gemm.matmul(a, b)
    assert gemm.decision(a, b) == ("float32:NN:8,7,7", faster, True)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: False)
    a, b = _pair(rng, 300, 96, 64)
    gemm.matmul(a, b)
    assert gemm.decision(a, b) == ("float32:NN:9,7,7", faster, False)


def test_unsplit_and_numpy_only_products(monkeypatch, rng, fresh):
    monkeypatch.setitem(gemm._serial_work, F32, 1)
    monkeypatch.setitem(gemm._split, "on", False)                # TW_GEMM_SPLIT=0 or a forced TW_BLAS
    monkeypatch.setattr(gemm, "split_parts", lambda: 1)
    a, b = _pair(rng, 128, 96, 64)
    assert gemm.decision(a, b) == ("", "mkl", True)
    monkeypatch.setitem(gemm._split, "on", True)                 # a one-thread share: split_parts() 1
    assert gemm.decision(a, b)[0] == "serial:float32:NN:8,7,7"
    assert gemm.decision(a[:4, :4], b[:4, :4]) is None                       # under MIN_WORK: NumPy
    assert gemm.decision(a.astype(np.int32), b.astype(np.int32)) is None     # no integer GEMM
