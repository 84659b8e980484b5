"""A split product's blocks shared with a spinning helper in compiled code (``spin_share``, issue 18
mlp28): the blocks' bits are those of the Python split's (``gemm._run_split`` on the pool), on MKL's
one-thread call and on NumPy's OpenBLAS; the caller takes every block a helper does not; a helper
late from one product never takes a block of the next; the helper's loop runs what is posted,
sleeps when nothing is, stops when told. No timing, no sleeps: the helper's side runs here on the
calling thread, with a spin of 0 ns."""
import os

import numpy as np
import pytest

from tensorweave.kernels.cpu import gemm, spin_share
from test_mlp18_split_gemm import MLP, _operands

needs_serial = pytest.mark.skipif(not gemm._gemm_serial, reason="MKL with a per-thread setting is not loaded")
needs_openblas = pytest.mark.skipif(gemm._openblas_threads() is None, reason="NumPy's BLAS is not an OpenBLAS")
pytestmark = [needs_serial, needs_openblas]
F32 = np.dtype(np.float32)


@pytest.fixture(scope="module", autouse=True)
def compiled():
    spin_share._compile()


def _library(name, dtype=F32):
    """``(fn, set_local, wide)`` of a block library: MKL's one-thread call or NumPy's OpenBLAS."""
    if name == "mkl1":
        serial = gemm._gemm_serial[np.dtype(dtype)]
        return serial.args[2], serial.args[0], 0
    return gemm._openblas_gemm(np.dtype(dtype))


def _post(box, a, b, out, axis, lib, number=1):
    """Writes the product into ``box`` as ``_split`` does, without taking a block."""
    op_a, op_b = gemm._operand(a), gemm._operand(b)
    (m, k), n = a.shape, b.shape[1]
    size = m if axis == "rows" else n
    step = gemm.block_size(size, 2)
    fn, set_local, wide = _library(lib, a.dtype)
    box[[spin_share.FN, spin_share.SET_LOCAL, spin_share.ILP64, spin_share.TRANS_A, spin_share.TRANS_B,
         spin_share.M, spin_share.N, spin_share.K, spin_share.A, spin_share.LDA, spin_share.B, spin_share.LDB,
         spin_share.C, spin_share.LDC, spin_share.AXIS, spin_share.STEP, spin_share.BLOCKS, spin_share.ITEM]] = (
        fn, set_local, wide, op_a[0], op_b[0], m, n, k, a.ctypes.data, op_a[1], b.ctypes.data, op_b[1],
        out.ctypes.data, n, 0 if axis == "rows" else 1, step, -(-size // step), out.itemsize)
    box[spin_share.DONE] = 0
    box[spin_share.TICKET] = number << spin_share.SHIFT
    return -(-size // step)


def _python_split(a, b, axis, lib, monkeypatch):
    """The product by ``gemm._run_split``'s Python path, every block on library ``lib``."""
    monkeypatch.setenv("TW_SPIN_SHARE", "0")
    monkeypatch.setattr(gemm, "_serial_library", lambda *args, **kw: lib)
    out = np.full((a.shape[0], b.shape[1]), np.nan, a.dtype)
    gemm._run_split(axis, a, b, out, gemm._operand(a), gemm._operand(b), (gemm._NO_TRANS, b.shape[1]), a.shape[1], 2)
    monkeypatch.delenv("TW_SPIN_SHARE")
    return out


def _caller_alone(a, b, axis, lib):
    """``_split`` with no helper (``AWAKE`` 0): the caller takes every block."""
    box = np.zeros(len(spin_share.FIELDS), np.int64)
    op_a, op_b = gemm._operand(a), gemm._operand(b)
    (m, k), n = a.shape, b.shape[1]
    size = m if axis == "rows" else n
    step = gemm.block_size(size, 2)
    fn, set_local, wide = _library(lib, a.dtype)
    out = np.full((m, n), np.nan, a.dtype)
    with gemm._openblas_one_thread():
        awake = spin_share._split(box, fn, set_local, wide, op_a[0], op_b[0], m, n, k, a.ctypes.data, op_a[1],
                                  b.ctypes.data, op_b[1], out.ctypes.data, n, 0 if axis == "rows" else 1, step,
                                  -(-size // step), out.itemsize)
    assert not awake and box[spin_share.DONE] == -(-size // step)
    return out


@pytest.mark.parametrize("m,k,n,ta,tb", MLP + [(100, 33, 70, False, False), (70, 33, 100, True, True)])
@pytest.mark.parametrize("axis", ["rows", "cols"])
@pytest.mark.parametrize("lib", ["mkl1", "numpy1"])
def test_the_blocks_give_the_python_splits_bits(monkeypatch, rng, m, k, n, ta, tb, axis, lib):
    a, b = _operands(rng, m, k, n, ta, tb)
    got = _caller_alone(a, b, axis, lib)
    np.testing.assert_array_equal(got, _python_split(a, b, axis, lib, monkeypatch))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_float64_blocks_too(monkeypatch, rng):
    a, b = _operands(rng, 96, 40, 64, True, False, np.float64)
    got = _caller_alone(a, b, "rows", "mkl1")
    np.testing.assert_array_equal(got, _python_split(a, b, "rows", "mkl1", monkeypatch))


def test_the_helpers_loop_runs_a_posted_product_then_sleeps(rng):
    a, b = _operands(rng, 128, 64, 96, False, True)
    out = np.full((128, 96), np.nan, np.float32)
    box = np.zeros(len(spin_share.FIELDS), np.int64)            # a spin of 0 ns: sleeps once idle
    blocks = _post(box, a, b, out, "rows", "mkl1", number=5)
    assert spin_share._serve(box, 4) == 5                       # ran product 5, then nothing new: sleeps
    assert box[spin_share.DONE] == blocks and box[spin_share.AWAKE] == 0
    assert box[spin_share.TICKET] & ((1 << spin_share.SHIFT) - 1) == blocks
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert spin_share._serve(box, 5) == 5                       # nothing posted since: sleeps at once


def test_a_helper_late_from_one_product_takes_no_block_of_another(rng):
    a, b = _operands(rng, 64, 32, 64, False, False)
    out = np.full((64, 64), np.nan, np.float32)
    box = np.zeros(len(spin_share.FIELDS), np.int64)
    _post(box, a, b, out, "cols", "mkl1", number=7)
    spin_share._work(box, 6)                                    # a helper still on product 6
    assert box[spin_share.TICKET] == 7 << spin_share.SHIFT and box[spin_share.DONE] == 0
    assert np.isnan(out).all()


def test_a_stopped_helper_returns_at_once():
    box = np.zeros(len(spin_share.FIELDS), np.int64)
    box[spin_share.STOP] = 1
    assert spin_share._serve(box, 0) == -1 and box[spin_share.AWAKE] == 0


def test_a_helper_in_use_is_refused_and_a_closed_one_stops(rng):
    helper = spin_share.Helper(_library("mkl1")[1], spin_ns=0)
    try:
        a, b = _operands(rng, 64, 32, 64, False, False)
        out = np.full((64, 64), np.nan, np.float32)
        fn, set_local, wide = _library("mkl1")
        args = (fn, set_local, wide, gemm._NO_TRANS, gemm._NO_TRANS, 64, 64, 32, a, 32, b, 64, out, 64, 0, 32, 2)
        with helper.lock:
            assert helper.run(*args) is False and np.isnan(out).all()
        assert helper.run(*args) is True
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    finally:
        helper.close()
    assert not helper.thread.is_alive()


def test_switched_off_there_is_no_helper(monkeypatch):
    monkeypatch.delenv("TW_SPIN_SHARE", raising=False)             # off by default
    assert spin_share.shared(_library("mkl1")[1]) is None
    monkeypatch.setenv("TW_SPIN_SHARE", "0")
    assert spin_share.shared(_library("mkl1")[1]) is None
    monkeypatch.setenv("TW_SPIN_US", "7.5")
    assert spin_share.spin_us() == 7.5


def test_the_split_takes_the_helper_only_for_two_parts_of_one_library(monkeypatch, rng):
    monkeypatch.setenv("TW_SPIN_SHARE", "1")
    a, b = _operands(rng, 128, 64, 96, False, False)
    out = np.empty((128, 96), np.float32)
    ops = (gemm._operand(a), gemm._operand(b), (gemm._NO_TRANS, 96))
    mkl1 = _tagged("mkl1")
    mkl = {(64, 96): mkl1}
    assert not gemm._spun("rows", a, b, out, *ops, 64, 2, 64, 2, {(64, 96): lambda *args: None})  # a stand-in
    mixed = {(64, 96): mkl1, (32, 96): gemm._numpy_part}
    assert not gemm._spun("rows", a, b, out, *ops, 64, 3, 64, 2, mkl)          # three parts: the pool's
    assert not gemm._spun("rows", a, b, out, *ops, 64, 2, 64, 2, mixed)        # two libraries: the pool's
    with gemm.blocks_here(2):
        assert not gemm._spun("rows", a, b, out, *ops, 64, 2, 64, 2, mkl)      # no helper inside
    assert gemm._spun("rows", a, b, out, *ops, 64, 2, 64, 2, mkl)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_a_threaded_entry_timed_without_the_helper_is_dropped_and_a_kept_one_marked(monkeypatch, tmp_path):
    from tensorweave.kernels.cpu import gemm_tuning
    from test_mlp18_split_gemm import KEY
    t = gemm_tuning.Tuner(str(tmp_path / "t.json"), KEY, ("mkl", "rows", "cols", "one"))
    monkeypatch.setitem(gemm._tuning, "tuner", t)
    t.choices.update({"old": {"backend": "rows", "settled": True, "rows_us": 1.0},
                      "spun": {"backend": "rows", "settled": True, "rows_us": 1.0, gemm.SPUN: True},
                      "nosplit": {"backend": "one", "settled": True, "one_us": 1.0},
                      "fresh": {"backend": "cols", "settled": True, "cols_us": 1.0},
                      "busy": {"backend": "cols", "settled": False, "cols_us": 1.0}})
    for cls in list(t.choices):
        gemm._drop_unspun(cls)
    assert set(t.choices) == {"spun", "nosplit"}
    t.choices.update({"fresh": {"backend": "cols", "settled": True}, "busy": {"backend": "cols", "settled": False}})
    gemm._mark("fresh", gemm.SPUN)
    gemm._mark("busy", gemm.SPUN)
    assert t.choices["fresh"][gemm.SPUN] is True and gemm.SPUN not in t.choices["busy"]
    assert os.path.exists(tmp_path / "t.json")


def _tagged(library):
    def run(a, b, out):
        raise AssertionError("the helper calls the library itself")
    run.library = library
    return run


def test_two_products_in_a_row_on_one_mailbox(rng):
    """The second product counts its own blocks (the count of finished blocks starts again at 0) and
    takes the next product number."""
    box = np.zeros(len(spin_share.FIELDS), np.int64)
    fn, set_local, wide = _library("mkl1")
    for number, (m, n) in enumerate([(64, 48), (96, 32)], start=1):
        a, b = _operands(rng, m, 16, n, False, False)
        out = np.full((m, n), np.nan, np.float32)
        spin_share._split(box, fn, set_local, wide, gemm._NO_TRANS, gemm._NO_TRANS, m, n, 16, a.ctypes.data, 16,
                          b.ctypes.data, n, out.ctypes.data, n, 0, 32, m // 32, 4)
        assert box[spin_share.DONE] == m // 32 and box[spin_share.TICKET] >> spin_share.SHIFT == number
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
