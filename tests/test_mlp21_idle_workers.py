"""kernels/cpu/gemm.py: no thread pool left spinning by a threaded product class (issue 18, mlp21).

A class that runs on MKL's own threads puts MKL's OpenMP workers to sleep when its call ends (the
calling thread's block time 0 around the call, its own value restored); a split product whose
blocks all run on MKL's one-thread call leaves NumPy's OpenBLAS thread count alone. Recorded calls
and bit comparisons only: nothing here is timed."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import gemm, gemm_tuning

needs_serial = pytest.mark.skipif(not gemm._gemm_serial, reason="MKL with a per-thread setting is not loaded")
needs_openblas = pytest.mark.skipif(gemm._openblas_threads() is None, reason="NumPy's BLAS is not an OpenBLAS")
pytestmark = [needs_serial, needs_openblas]
F32 = np.dtype(np.float32)
KEY = {"cpu": "Test CPU 9000", "cores": 2, "versions": {"mkl": "m1", "numpy": "n1"}}


@pytest.fixture
def threaded(monkeypatch, tmp_path):
    """Every product here takes the ``"threads"`` route on two parts, with a fresh tuner that
    times nothing (no class chosen yet; the machine 'busy', so a class keeps its split)."""
    monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(
        str(tmp_path / "t.json"), KEY, ("mkl", "numpy", "mkl1", "numpy1", "rows", "cols")))
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setitem(gemm._split, "on", True)
    monkeypatch.setitem(gemm._split, "sleep", True)
    monkeypatch.setattr(gemm, "_split_chosen", {})
    monkeypatch.setattr(gemm, "_serial_chosen", {})
    monkeypatch.setitem(gemm._serial_work, F32, 1)
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: False)


class BlockTime:
    """A scripted OpenMP runtime: the calling thread's block time, and every value set."""

    def __init__(self, value=7):
        self.value, self.set = value, []

    def get(self):
        return self.value

    def put(self, value):
        self.set.append(value)
        self.value = value


def _operands(rng):
    return rng.standard_normal((128, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)


def _on_mkl_threads(a, b):
    """The class of ``a @ b`` (no transposes) chosen onto MKL's threads, as a quiet timing may."""
    (m, k), n = a.shape, b.shape[1]
    gemm._split_chosen[(a.dtype.char, gemm._NO_TRANS, gemm._NO_TRANS, m.bit_length(), n.bit_length(),
                        k.bit_length(), 1, 2)] = "mkl"


def _mkl_threaded(a, b):
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    (m, k), n = a.shape, b.shape[1]
    gemm._gemm[a.dtype](gemm._NO_TRANS, gemm._NO_TRANS, m, n, k, a, k, b, n, out, n)
    return out


def test_a_class_on_mkl_threads_sleeps_its_workers_after_each_call_same_bits(threaded, monkeypatch, rng):
    a, b = _operands(rng)
    _on_mkl_threads(a, b)
    bt = BlockTime(7)
    monkeypatch.setitem(gemm._omp, "found", (bt.get, bt.put))
    for calls in (1, 2):
        out = gemm.matmul(a, b)
        assert bt.set == [0, 7] * calls and bt.value == 7       # 0 for the call, the caller's value back
    np.testing.assert_array_equal(out, _mkl_threaded(a, b))


def test_a_split_class_and_a_thin_class_leave_the_block_time_alone(threaded, monkeypatch, rng):
    bt = BlockTime(7)
    monkeypatch.setitem(gemm._omp, "found", (bt.get, bt.put))
    a, b = _operands(rng)
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert gemm._split_chosen and set(gemm._split_chosen.values()) == {"rows"}
    assert bt.set == []


def test_spin_switch_keeps_the_workers_spinning(threaded, monkeypatch, rng):
    """``TW_GEMM_SPIN=1``: the class's call as before (an A/B switch)."""
    monkeypatch.setitem(gemm._split, "sleep", False)
    a, b = _operands(rng)
    _on_mkl_threads(a, b)
    bt = BlockTime(7)
    monkeypatch.setitem(gemm._omp, "found", (bt.get, bt.put))
    np.testing.assert_array_equal(gemm.matmul(a, b), _mkl_threaded(a, b))
    assert bt.set == []


def test_the_runtime_is_looked_up_once_after_the_first_threaded_call(threaded, monkeypatch, rng):
    """Before MKL's first threaded call its OpenMP runtime may not be loaded: that call runs as
    before and the runtime is looked up after it, once; none found (another threading layer):
    every call runs as before."""
    monkeypatch.setattr(gemm, "_omp", {})
    looked = []
    monkeypatch.setattr(gemm, "_omp_blocktime", lambda: looked.append(1))
    a, b = _operands(rng)
    _on_mkl_threads(a, b)
    for _ in range(3):
        np.testing.assert_array_equal(gemm.matmul(a, b), _mkl_threaded(a, b))
    assert looked == [1] and gemm._omp == {"found": None}


def test_the_real_runtime_gets_its_block_time_back(threaded, monkeypatch, rng):
    """With MKL's own OpenMP runtime (Intel's libiomp5 beside libmkl_rt), the calling thread's
    block time after a class's threaded call is what it was before."""
    monkeypatch.setattr(gemm, "_omp", {})
    a, b = _operands(rng)
    _on_mkl_threads(a, b)
    gemm.matmul(a, b)                           # MKL's first threaded call loads its runtime
    found = gemm._omp["found"]
    if found is None:
        pytest.skip("MKL does not thread with Intel's OpenMP runtime here")
    get, _ = found
    before = get()
    np.testing.assert_array_equal(gemm.matmul(a, b), _mkl_threaded(a, b))
    assert get() == before
    assert gemm._omp_blocktime("/no/such/libiomp5.so") is None


class OpenBLASCount:
    """A scripted ``(get, set)`` of NumPy's OpenBLAS thread count, recording what is set."""

    def __init__(self):
        self.value, self.set = 2, []

    def get(self):
        return self.value

    def put(self, n):
        self.set.append(n)
        self.value = n


@pytest.mark.parametrize("library,expected", [("mkl1", []), ("numpy1", [1, 2])])
def test_a_split_holds_openblas_at_one_thread_only_for_blocks_on_openblas(monkeypatch, rng, library, expected):
    """Blocks on MKL's one-thread call: OpenBLAS's count never touched; blocks on OpenBLAS: held at
    1 around them and restored. The bits are each block's one-thread product either way."""
    count = OpenBLASCount()
    monkeypatch.setitem(gemm._openblas, "found", (count.get, count.put))
    monkeypatch.setattr(gemm, "_serial_library", lambda *args, **kw: library)
    a, b = _operands(rng)
    out = np.full((128, 64), np.nan, np.float32)
    gemm._run_split("rows", a, b, out, gemm._operand(a), gemm._operand(b), (gemm._NO_TRANS, 64), 64, 2)
    assert count.set == expected and count.value == 2
    blocks = [np.empty((64, 64), np.float32) for _ in range(2)]
    for i, block in enumerate(blocks):
        rows = a[64 * i:64 * (i + 1)]
        if library == "mkl1":
            gemm._gemm_serial[F32](gemm._NO_TRANS, gemm._NO_TRANS, 64, 64, 64, rows, 64, b, 64, block, 64)
        else:
            np.matmul(rows, b, out=block)
    np.testing.assert_array_equal(out, np.concatenate(blocks))


def test_the_spin_switch_is_read_from_the_environment():
    """``TW_GEMM_SPIN=1`` at import keeps the workers spinning; unset, they sleep."""
    import os
    import subprocess
    import sys
    code = "from tensorweave.kernels.cpu import gemm; gemm.load(); print(gemm._split['sleep'])"
    env = {k: v for k, v in os.environ.items() if k != "TW_GEMM_SPIN"}
    spin = subprocess.run([sys.executable, "-c", code], env={**env, "TW_GEMM_SPIN": "1"},
                          capture_output=True, text=True, check=True)
    assert spin.stdout.split()[-1] == "False"
    assert gemm._split["sleep"] is (os.environ.get("TW_GEMM_SPIN") != "1")
