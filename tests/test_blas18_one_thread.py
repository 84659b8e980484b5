"""Products that run on one thread because the calling thread's share of the cores is one (an
in-process rank thread, a one-thread ``tw.config.threading`` run, a helper thread) take the
library measured faster on one thread for their shape class (``gemm._serial_library``), as small
products do; so do stacks and a split product's blocks (each its own class).
Scripted clocks and tuners: no timing thresholds."""
import threading

import numpy as np
import pytest

from tensorweave.distribute import rank_threads
from tensorweave.kernels.cpu import gemm, gemm_tuning

KEY = {"cpu": "Test CPU 9000", "cores": 2, "versions": {"mkl": "m1", "numpy": "n1"}}
pytestmark = [pytest.mark.skipif(not gemm._gemm_serial, reason="MKL with a per-thread setting is not loaded"),
              pytest.mark.skipif(gemm._openblas_threads() is None, reason="NumPy's BLAS is not an OpenBLAS")]
F32 = np.dtype(np.float32)
BIG = "float32:NN:8,10,10"          # 128x784 @ 784x512, the mlp's first layer
_MKL1 = dict(gemm._gemm_serial)     # MKL on one thread, as loaded (the fixture logs its calls)


@pytest.fixture
def libs(monkeypatch, tmp_path):
    """A fresh tuner, nothing chosen, every product above the one-thread size, two cores and
    OpenBLAS on two threads (an xdist worker runs on one), a quiet machine; returns the log of the
    one-thread library each product ran on (``mkl1`` or ``numpy1``, timed calls included)."""
    monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(
        str(tmp_path / "t.json"), KEY, ("mkl", "numpy", "mkl1", "numpy1", "rows", "cols")))
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setitem(gemm._split, "on", True)
    for name in ("_split_chosen", "_serial_chosen"):
        monkeypatch.setattr(gemm, name, {})
    monkeypatch.setitem(gemm._serial_work, F32, 1)
    monkeypatch.setattr(gemm, "_cores", lambda: 2)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    get, put = gemm._openblas["found"]
    before = get()
    put(2)
    log = []
    real_numpy, real_mkl1 = gemm._numpy_serial, gemm._gemm_serial[F32]
    monkeypatch.setattr(gemm, "_numpy_serial", lambda *args: (log.append("numpy1"), real_numpy(*args))[1])
    monkeypatch.setitem(gemm._gemm_serial, F32, lambda *args: (log.append("mkl1"), real_mkl1(*args))[1])
    yield log
    put(before)


def _script(monkeypatch, faster):
    """The one-thread candidate ``faster`` 'takes' 1 ms a call, every other candidate 4 ms."""
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: (run(), 1e-3 if backend == faster else 4e-3)[1])


def _on_thread(fn, name="rank-0", share=1):
    """``fn()`` on a new thread with the per-thread share an in-process rank gets (``None``: none set)."""
    got = []

    def body():
        if share is not None:
            rank_threads.use(share)
        got.append(fn())
    t = threading.Thread(target=body, name=name)
    t.start()
    t.join(120)
    return got[0]


def _one_thread_whole(a, b, lib):
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    if lib == "numpy1":
        with gemm._openblas_one_thread():
            np.matmul(a, b, out=out)
    else:
        _MKL1[a.dtype](gemm._NO_TRANS, gemm._NO_TRANS, a.shape[0], b.shape[1], a.shape[1], a, a.strides[0] // 4, b,
                       b.shape[1], out, b.shape[1])
    return out


def _operands(rng, m, k, n, dtype=np.float32):
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


@pytest.mark.parametrize("faster", ["mkl1", "numpy1"])
def test_a_rank_threads_product_takes_the_one_thread_choice(monkeypatch, rng, libs, faster):
    """Before: MKL's threaded call (its generic kernels on one AMD thread), no class timed."""
    _script(monkeypatch, faster)
    a, b = _operands(rng, 128, 784, 512)
    first = _on_thread(lambda: gemm.matmul(a, b))
    entry = gemm.tuner().choices["serial:" + BIG]
    assert entry["backend"] == faster and {"mkl1_us", "numpy1_us"} <= set(entry)
    assert not [c for c in gemm.tuner().choices if c.startswith("threads:")]
    assert libs[-1] == faster                      # the choice computed the first call's product again
    libs.clear()
    later = [_on_thread(lambda: gemm.matmul(a, b)) for _ in range(2)]
    assert libs == [faster, faster]                # not timed again, the chosen library ran
    for got in later:
        np.testing.assert_array_equal(got, first)  # the first call's bits are the later ones'
    np.testing.assert_array_equal(first, _one_thread_whole(a, b, faster))
    np.testing.assert_allclose(first, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_the_libraries_give_other_bits_here(rng):
    """What makes the bits checks above able to fail: MKL and OpenBLAS differ on this product."""
    a, b = _operands(rng, 128, 784, 512)
    assert not np.array_equal(_one_thread_whole(a, b, "mkl1"), _one_thread_whole(a, b, "numpy1"))


@pytest.mark.parametrize("case", ["rank", "threading(1)", "helper"])
def test_every_one_thread_share_takes_the_choice(monkeypatch, rng, libs, case):
    _script(monkeypatch, "numpy1")
    a, b = _operands(rng, 128, 784, 512)
    if case == "rank":
        _on_thread(lambda: gemm.matmul(a, b))
    elif case == "helper":                         # a tiled kernel's helper thread (no cap of its own)
        _on_thread(lambda: gemm.matmul(a, b), name="tw-default-intra", share=None)
    else:                                          # OpenBLAS's (process-wide) count at 1
        gemm._openblas["found"][1](1)
        gemm.matmul(a, b)
    assert gemm.tuner().backend("serial:" + BIG) == "numpy1"
    libs.clear()
    gemm._openblas["found"][1](2)
    got = gemm.matmul(a, b)                        # the main thread's share is two: split or MKL's threads
    assert gemm.tuner().backend("threads:" + BIG + ",p2") is not None
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_threads_here_is_the_share(monkeypatch, libs):
    assert gemm.threads_here() == 2
    assert _on_thread(gemm.threads_here) == 1
    assert _on_thread(gemm.threads_here, share=2) == 2
    assert _on_thread(gemm.threads_here, name="tw-x-intra", share=None) == 1
    monkeypatch.setitem(gemm._split, "on", False)       # TW_GEMM_SPLIT=0: not split, still a share
    assert gemm.split_parts() == 1 and gemm.threads_here() == 2
    monkeypatch.setitem(gemm._split, "on", True)
    monkeypatch.setitem(gemm._openblas, "found", None)   # no OpenBLAS: no share known, nothing split
    assert gemm.threads_here() is None and gemm.split_parts() == 1


def test_without_a_split_a_one_thread_share_still_takes_the_choice(monkeypatch, rng, libs):
    """``TW_GEMM_SPLIT=0`` keeps MKL's threads where there are threads to keep, not on one."""
    monkeypatch.setitem(gemm._split, "on", False)
    _script(monkeypatch, "numpy1")
    a, b = _operands(rng, 128, 784, 512)
    _on_thread(lambda: gemm.matmul(a, b))
    assert libs[-1] == "numpy1"
    libs.clear()
    gemm.matmul(a, b)                              # two threads' share: MKL's threaded call
    assert libs == []


def test_a_stack_on_a_rank_thread_takes_the_one_thread_choice(monkeypatch, rng, libs):
    monkeypatch.setitem(gemm._gemm_serial, F32, _MKL1[F32])     # (its address is read: not the logging stand-in)
    _script(monkeypatch, "numpy1")
    a = rng.standard_normal((4, 64, 96)).astype(np.float32)
    b = rng.standard_normal((96, 80)).astype(np.float32)
    first = _on_thread(lambda: gemm.matmul(a, b))
    assert gemm.tuner().backend("serial:float32:NN:7,7,7,b3") == "numpy1"
    np.testing.assert_array_equal(first, _on_thread(lambda: gemm.matmul(a, b)))
    np.testing.assert_allclose(first, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("libs_by_class", [("numpy1", "mkl1"), ("mkl1", "numpy1")])
def test_each_block_of_a_split_runs_on_its_own_classs_library(monkeypatch, rng, libs, libs_by_class):
    """100 rows in two parts: blocks of 64 rows (class 7) and 36 (class 6). Before, the short block
    ran on the first block's library."""
    full, short = libs_by_class
    t = gemm.tuner()
    t.choices["serial:float32:NN:7,7,9"] = {"backend": full}
    t.choices["serial:float32:NN:6,7,9"] = {"backend": short}
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: pytest.fail("timed a cached class"))
    a, b = _operands(rng, 100, 300, 70)
    out = np.full((100, 70), np.nan, np.float32)
    gemm._run_split("rows", a, b, out, gemm._operand(a), gemm._operand(b), (gemm._NO_TRANS, 70), 300, 2)
    assert libs == ["mkl1"]                        # one block on MKL (the logged library), the other not
    np.testing.assert_array_equal(out[:64], _one_thread_whole(a[:64], b, full))
    np.testing.assert_array_equal(out[64:], _one_thread_whole(a[64:], b, short))
    assert not np.array_equal(_one_thread_whole(a[64:], b, "mkl1"), _one_thread_whole(a[64:], b, "numpy1"))
    del libs[:]
    again = np.empty_like(out)
    gemm._run_split("rows", a, b, again, gemm._operand(a), gemm._operand(b), (gemm._NO_TRANS, 70), 300, 2,
                    after=lambda i, j: libs.append((i, j)))
    np.testing.assert_array_equal(again, out)
    assert sorted(x for x in libs if isinstance(x, tuple)) == [(0, 64), (64, 100)]


def test_the_loops_class_lookup_makes_no_scratch_operands_once_known(monkeypatch, libs):
    gemm.tuner().choices["serial:float32:NN:6,8,7"] = {"backend": "numpy1"}
    assert gemm.serial_library(F32, 32, 128, 64) == "numpy1"
    monkeypatch.setattr(gemm.np, "zeros", lambda *args, **kw: pytest.fail("scratch operands made again"))
    assert gemm.serial_library(F32, 32, 128, 64) == "numpy1"


@pytest.mark.parametrize("value,share", [("0", False), ("1", True), (None, True)])
def test_tw_gemm_share_is_read_when_gemm_loads(monkeypatch, value, share):
    for key in ("on", "share"):
        monkeypatch.setitem(gemm._split, key, gemm._split[key])
    monkeypatch.setitem(gemm._tuning, "on", gemm._tuning["on"])
    monkeypatch.setattr(gemm, "_decided", [False])
    monkeypatch.setattr(gemm, "_library_path", lambda: None)     # (no second MKL load)
    monkeypatch.setenv("TW_BLAS", "auto")
    if value is None:
        monkeypatch.delenv("TW_GEMM_SHARE", raising=False)
    else:
        monkeypatch.setenv("TW_GEMM_SHARE", value)
    gemm.load()
    assert gemm._split["share"] is share


def test_with_per_class_tuning_on_a_one_thread_share_still_takes_the_one_thread_choice(monkeypatch, rng, libs):
    """``TW_BLAS_TUNE=1`` chooses between the libraries' threaded calls; a one-thread share has none to choose."""
    monkeypatch.setitem(gemm._tuning, "on", True)
    monkeypatch.setattr(gemm, "_chosen", {})
    _script(monkeypatch, "numpy1")
    a, b = _operands(rng, 128, 784, 512)
    _on_thread(lambda: gemm.matmul(a, b))
    assert gemm.tuner().backend("serial:" + BIG) == "numpy1" and gemm.tuner().backend(BIG) is None
    assert libs[-1] == "numpy1"
