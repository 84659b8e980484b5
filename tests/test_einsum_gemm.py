"""Two-operand Einsum as one (batched) GEMM (kernels/cpu/linalg_kernels._einsum_as_matmul):
equal to np.einsum for batch, free, contracted and one-sided summed subscripts, in any order;
other equations (repeated subscripts, '...') keep np.einsum."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import linalg_kernels
from tensorweave.kernels.cpu.linalg_kernels import _einsum

RNG = np.random.default_rng(21)
# multi-head attention's projections, scores, weighted sums and their gradients, and others
GEMM_EQUATIONS = ["abc,cde->abde", "abde,cde->abc", "abc,abde->cde", "aecd,abcd->acbe", "acbe,aecd->abcd",
                  "abcd,aecd->acbe", "ij,jk->ik", "ij,kj->ik", "ji,jk->ki", "bij,bjk->bik", "ij,ij->", "i,j->ij",
                  "ij,j->i", "ab,cd->abcd", "abc,bd->adc", "abc,d->abcd", "abc,ac->b", "abc,cd->d"]


def _operands(eq, dtype=np.float64, empty=None):
    lhs = eq.split("->")[0].split(",")
    dims = {c: int(RNG.integers(1, 6)) for c in set("".join(lhs))}
    if empty:
        dims[empty] = 0
    return [RNG.standard_normal([dims[c] for c in s]).astype(dtype) for s in lhs]


@pytest.mark.parametrize("eq", GEMM_EQUATIONS)
def test_gemm_path_equals_numpy_einsum(eq, monkeypatch):
    a, b = _operands(eq)
    ref = np.einsum(eq, a, b)
    monkeypatch.setattr(linalg_kernels.np, "einsum", None)        # the GEMM path must not need it
    got = _einsum(a, b, equation=eq)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.complex64])
def test_dtypes_are_kept(dtype):
    a, b = _operands("abc,cde->abde", dtype)
    got = _einsum(a, b, equation="abc,cde->abde")
    assert got.dtype == dtype
    np.testing.assert_allclose(got, np.einsum("abc,cde->abde", a, b), rtol=1e-5, atol=1e-6)  # (cancellation)


def test_empty_dimensions():
    for letter in "abc":
        a, b = _operands("abc,cde->abde", empty=letter)
        np.testing.assert_array_equal(_einsum(a, b, equation="abc,cde->abde"), np.einsum("abc,cde->abde", a, b))


@pytest.mark.parametrize("eq", ["iij,jk->ik", "...ij,jk->...ik", "ij,jk->kik"[:0] or "bij,bjk->ik"])
def test_other_equations_keep_numpy(eq):
    shapes = {"iij,jk->ik": [(3, 3, 4), (4, 2)], "...ij,jk->...ik": [(2, 3, 4), (4, 5)],
              "bij,bjk->ik": [(2, 3, 4), (2, 4, 5)]}[eq]
    a, b = (RNG.standard_normal(s) for s in shapes)
    np.testing.assert_allclose(_einsum(a, b, equation=eq), np.einsum(eq, a, b), rtol=1e-12)


def test_the_result_does_not_alias_an_input():
    a, b = _operands("ij,jk->ik")
    out = _einsum(a, b, equation="ij,jk->ik")
    assert not np.shares_memory(out, a) and not np.shares_memory(out, b)
