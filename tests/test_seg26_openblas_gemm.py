"""The GEMM opcodes of nogil segments on both one-thread libraries (kernels/cpu/nogil_ops.py,
runtime/nogil_segments.py): NumPy's OpenBLAS ``cblas_sgemm`` (``GEMM_OPENBLAS``) gives the bits of
``gemm._numpy_serial`` (``np.matmul`` on one OpenBLAS thread) for every transpose, and an MLP step
whose one-thread classes all chose one library runs its products inside segments with the bits of
the Python way, on one device and on two ranks."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import gemm, jit, nogil_ops as N
from test_nogil24_segments import _train, one_thread, switch  # noqa: F401 - fixtures

RNG = np.random.default_rng(26)
F32 = np.dtype(np.float32)


def _need(library):
    if F32 not in gemm._gemm_serial:
        pytest.skip("no MKL with a per-thread setting: products stay in Python")
    if library == "numpy1" and N.openblas_sgemm() is None:
        pytest.skip("NumPy's BLAS is not an ILP64 OpenBLAS")


def _program(rows, addrs):
    prog = np.zeros((len(rows), N.WIDTH), np.int64)
    for r, row in enumerate(rows):
        prog[r, :len(row)] = row
    addrs = np.array(addrs, np.int64)
    return jit.compile_now(N.run_program, prog, addrs)(prog, addrs)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_openblas_opcode_gives_numpy_one_thread_bits(ta, tb):
    _need("numpy1")
    m, n, k = 37, 29, 53
    a = RNG.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = RNG.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    av, bv = (a.T if ta else a), (b.T if tb else b)
    ref, c = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
    gemm._numpy_serial(av, bv, ref)
    op_a, op_b = gemm._operand(av), gemm._operand(bv)
    row = [N.GEMM_OPENBLAS, 0, 1, 2, op_a[0], op_b[0], m, n, k, op_a[1], op_b[1], n, 3, 0]
    gemm._hold_one_thread()
    try:
        assert _program([row], [a.ctypes.data, b.ctypes.data, c.ctypes.data, N.openblas_sgemm()]) == 0
    finally:
        gemm._release_one_thread()
    assert c.tobytes() == ref.tobytes()
    np.testing.assert_allclose(c, av @ bv, rtol=1e-4, atol=1e-4)


def test_openblas_opcode_refuses_numpys_syrk_case():
    _need("numpy1")
    a, c = RNG.standard_normal((16, 24)).astype(np.float32), np.zeros((16, 16), np.float32)
    row = [N.GEMM_OPENBLAS, 0, 0, 1, gemm._NO_TRANS, gemm._TRANS, 16, 16, 24, 24, 24, 16, 2, 0]
    assert _program([row], [a.ctypes.data, c.ctypes.data, N.openblas_sgemm()]) == 1     # a @ a.T: NumPy's syrk
    assert not c.any()


@pytest.fixture
def library(request, monkeypatch):
    """Every one-thread class of this test on ``request.param``'s library (as a timing could choose)."""
    choice = request.param
    _need(choice)

    def chosen(a, b, out, op_a, op_b, m, n, k, run_mkl, count=1, seen=None):
        if seen is None:
            seen = (a.dtype.char, op_a[0], op_b[0], m.bit_length(), n.bit_length(), k.bit_length(), count.bit_length())
        gemm._serial_chosen[seen] = choice
        return choice
    monkeypatch.setattr(gemm, "_serial_chosen", {})
    monkeypatch.setattr(gemm, "_serial_library", chosen)
    return choice


@pytest.mark.parametrize("library", ["mkl1", "numpy1"], indirect=True)
@pytest.mark.parametrize("ranks", [None, 2])
def test_mlp_products_in_segments_on_either_library_same_bits(one_thread, switch, library, ranks):  # noqa: F811
    placement = None if ranks is None else tw.placement("cpu", ranks=list(range(ranks)))
    off_losses, off_params, _ = _train(switch, False, placement)
    on_losses, on_params, on_segs = _train(switch, True, placement)
    assert set(gemm._serial_chosen.values()) == {library}
    want = N.GEMM if library == "mkl1" else N.GEMM_OPENBLAS
    for segs in on_segs:
        ops = [op for seg in segs for op in seg.program[:, 0]]
        assert ops.count(want) >= 3 and {N.GEMM, N.GEMM_OPENBLAS} - {want} - set(ops)
        assert all(seg.runs["compiled"] >= 2 for seg in segs)
    assert [a.tobytes() for a in on_losses] == [a.tobytes() for a in off_losses]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(on_params, off_params))


def test_openblas_sgemm_is_the_ilp64_one_only(monkeypatch):
    from tensorweave.kernels.cpu import rnn_gemm
    found = rnn_gemm.openblas_gemm(np.float32)
    assert N.openblas_sgemm() == (found[0] if found is not None and found[1] == rnn_gemm.ILP64 else None)
    monkeypatch.setattr(rnn_gemm, "openblas_gemm", lambda dtype: (1234, rnn_gemm.ILP64))
    assert N.openblas_sgemm() == 1234
    monkeypatch.setattr(rnn_gemm, "openblas_gemm", lambda dtype: (1234, rnn_gemm.LP64))      # 32-bit sizes: not ours
    assert N.openblas_sgemm() is None


@pytest.mark.parametrize("library", ["numpy1"], indirect=True)
def test_openblas_products_run_on_one_thread_whatever_the_count(one_thread, switch, library, monkeypatch):  # noqa: F811
    from threadpoolctl import threadpool_limits
    from mlp_step import mlp_step
    from test_nogil24_segments import SIZES
    switch(True)
    step, _ = mlp_step(SIZES, tw.placement("cpu", ranks=[0, 1]))      # (a rank thread's share does not read the count)
    for _ in range(2):
        step()
    jit.wait_for_compiles()
    step()
    seen, real, get = [], N.run_program, gemm._openblas_threads()[0]

    def spy(program, addrs):
        if N.GEMM_OPENBLAS in program[:, 0]:
            seen.append(get())
        return real(program, addrs)
    monkeypatch.setattr(N, "run_program", spy)
    with threadpool_limits(2):
        step()
    assert seen and set(seen) == {1}
