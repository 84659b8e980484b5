"""kernels/cpu/gemm.py: MKL's GEMM where the ``mkl`` package is installed, NumPy's otherwise.
Products are checked against float64 NumPy over every operand layout BLAS reads in place
(plain, transposed, strided slices) and the ones it cannot (copied by NumPy instead)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import gemm


def _layouts(rng, rows, cols, dtype):
    """The same ``rows x cols`` values as a contiguous array, a transposed view, a column slice
    of a wider array, a row slice with a gap, and a view with a non-unit inner stride."""
    x = rng.standard_normal((rows, cols)).astype(dtype)
    wide = np.zeros((rows, cols + 7), dtype)
    wide[:, 3:3 + cols] = x
    gapped = np.zeros((2 * rows, cols), dtype)
    gapped[::2] = x
    stepped = np.zeros((rows, 2 * cols), dtype)
    stepped[:, ::2] = x
    return x, {"contiguous": x, "transposed": np.ascontiguousarray(x.T).T, "column slice": wide[:, 3:3 + cols],
               "row gap": gapped[::2], "inner stride": stepped[:, ::2]}


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("m,k,n", [(128, 784, 64), (33, 40, 70), (5, 6, 7)])
def test_products_match_numpy_in_every_layout(rng, dtype, tol, m, k, n):
    a, a_forms = _layouts(rng, m, k, dtype)
    b, b_forms = _layouts(rng, k, n, dtype)
    want = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    for a_name, a_view in a_forms.items():
        for b_name, b_view in b_forms.items():
            got = gemm.matmul(a_view, b_view)
            assert got.dtype == dtype and got.shape == (m, n) and got.flags.c_contiguous, (a_name, b_name)
            err = np.max(np.abs(got - want) / scale)
            assert err < tol, (a_name, b_name, err)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_into_out(rng, dtype):
    """``out=``: contiguous, a column block of a wider array (the LSTM's gate rows), the wrong
    dtype or a transposed view (NumPy's rules), and one overlapping an operand."""
    a = rng.standard_normal((64, 48)).astype(dtype)
    b = rng.standard_normal((48, 80)).astype(dtype)
    want = np.matmul(a, b)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    out = np.empty((64, 80), dtype)
    assert gemm.matmul(a, b, out=out) is out
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    wide = np.full((64, 100), 7, dtype)
    gemm.matmul(a, b, out=wide[:, 10:90])
    np.testing.assert_allclose(wide[:, 10:90], want, rtol=tol, atol=tol)
    assert (wide[:, :10] == 7).all() and (wide[:, 90:] == 7).all()
    for target in (np.empty((64, 80), np.float64 if dtype == np.float32 else np.float32), np.empty((80, 64), dtype).T):
        gemm.matmul(a, b, out=target)
        np.testing.assert_allclose(target, want, rtol=1e-5, atol=1e-5)
    square = rng.standard_normal((64, 64)).astype(dtype)
    want = square @ square
    gemm.matmul(square, square, out=square)
    np.testing.assert_allclose(square, want, rtol=tol, atol=tol)


def test_other_operands_go_to_numpy(rng):
    a = rng.standard_normal((3, 40, 50)).astype(np.float32)
    b = rng.standard_normal((50, 60)).astype(np.float32)
    np.testing.assert_allclose(gemm.matmul(a, b), np.matmul(a, b), rtol=1e-5, atol=1e-4)   # a stack (test_gemm_stacks)
    raw = bytearray(64 * 64 * 4 + 1)                                       # misaligned float32 data
    odd = np.frombuffer(raw, np.float32, 64 * 64, offset=1).reshape(64, 64)
    odd[:] = sq = rng.standard_normal((64, 64)).astype(np.float32)
    assert not odd.flags.aligned
    np.testing.assert_array_equal(gemm.matmul(odd, sq), np.matmul(odd, sq))
    flipped = a[0][::-1]                                                     # negative strides
    np.testing.assert_allclose(gemm.matmul(flipped, b), np.matmul(flipped, b), rtol=1e-5, atol=1e-4)
    ai = rng.integers(-5, 5, (64, 64))
    np.testing.assert_array_equal(gemm.matmul(ai, ai), ai @ ai)             # integers
    mixed = gemm.matmul(a[0], b.astype(np.float64))                          # mixed dtypes: NumPy promotes
    assert mixed.dtype == np.float64


def test_nan_and_inf_propagate(rng):
    a = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal((64, 64)).astype(np.float32)
    a[3, 5], b[7, 9] = np.nan, np.inf
    got, want = gemm.matmul(a, b), np.matmul(a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


def test_matmul_op_with_transpose_flags(rng):
    """tw.matmul with the transpose flags (the forms a Dense layer's backward pass uses)."""
    a = rng.standard_normal((96, 80))
    b = rng.standard_normal((96, 72))
    np.testing.assert_allclose(tw.matmul(a, b, transpose_a=True).numpy(), a.T @ b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tw.matmul(a.T, b.T, transpose_b=True).numpy(), a.T @ b, rtol=1e-12, atol=1e-12)


_PROBE = r"""
import json
import tensorweave
from tensorweave.kernels.cpu import gemm
from tensorweave.kernels import threads
print(json.dumps({"library": gemm.library(), "apis": sorted({l.internal_api for l in threads._blas()}),
                  "blocktime": __import__("os").environ.get("KMP_BLOCKTIME")}))
"""


def _probe(**env):
    full = {k: v for k, v in os.environ.items() if k not in ("TW_BLAS", "KMP_BLOCKTIME")}
    full.update(env)
    return subprocess.run([sys.executable, "-c", _PROBE], env=full, capture_output=True, text=True, timeout=120)


def test_library_choice_in_a_fresh_process():
    has_mkl = gemm._library_path() is not None
    auto = json.loads(_probe().stdout)
    assert auto["library"] == ("mkl" if has_mkl else "numpy")
    if has_mkl:   # loaded before kernels.threads took stock, so its thread count is managed too
        assert "mkl" in auto["apis"] and auto["blocktime"] == str(gemm.IDLE_SPIN_MS)
        assert json.loads(_probe(KMP_BLOCKTIME="50").stdout)["blocktime"] == "50"   # the user's value wins
    assert json.loads(_probe(TW_BLAS="numpy").stdout)["library"] == "numpy"
    bad = _probe(TW_BLAS="fast")
    assert bad.returncode != 0 and "TW_BLAS='fast'" in bad.stderr
    forced = _probe(TW_BLAS="mkl")
    if has_mkl:
        assert json.loads(forced.stdout)["library"] == "mkl"
    else:
        assert forced.returncode != 0 and "tensorweave[mkl]" in forced.stderr
