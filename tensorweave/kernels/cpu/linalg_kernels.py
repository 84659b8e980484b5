"""CPU kernels for ``ops/linalg_ops.py`` (NumPy/LAPACK)."""
import numpy as np

from tensorweave.core import errors
from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu import einsum_matmul
from tensorweave.kernels.cpu.util import low_precision, same_dtype


def _f32_for_half(fn):
    """Runs ``fn`` in float32 for float16/bfloat16 (LAPACK and einsum's BLAS path lack them)."""
    def kernel(*xs, **attrs):
        xs = [np.asarray(x) for x in xs]
        dt = xs[0].dtype if xs else None
        if dt in low_precision():
            return np.asarray(fn(*(x.astype(np.float32) for x in xs), **attrs)).astype(dt)
        return fn(*xs, **attrs)
    return kernel


@k("Einsum")
@_f32_for_half
def _einsum(*xs, equation):
    # The contraction-order search only pays off with three or more operands; for two it
    # still routes through tensordot (BLAS) instead of einsum's own loops.
    lhs, out_sub = equation.split("->")
    if len(xs) == 2:
        out = _einsum_as_matmul(xs[0], xs[1], *lhs.split(","), out_sub)
        if out is not None:
            return same_dtype(out, xs[0])
    if "..." in lhs and "..." not in out_sub:
        # NumPy refuses to sum '...' dimensions away; keep them in front and sum them here.
        out = np.einsum(f"{lhs}->...{out_sub}", *xs, optimize=len(xs) > 1)
        out = out.sum(axis=tuple(range(out.ndim - len(out_sub))), dtype=out.dtype)
    else:
        out = np.einsum(equation, *xs, optimize=len(xs) > 1)
    return same_dtype(out, xs[0])


def _einsum_as_matmul(a, b, sa, sb, so):
    """A two-operand contraction as GEMM (``einsum_matmul.contract``), or None where it is not one."""
    return einsum_matmul.contract(a, b, sa, sb, so)


def _diag_index(m, n):
    i = np.arange(min(m, n))
    return i, i


@k("MatrixDiag")
def _matrix_diag(v):
    v = np.asarray(v)
    n = v.shape[-1]
    out = np.zeros(v.shape + (n,), dtype=v.dtype)
    r, c = _diag_index(n, n)
    out[..., r, c] = v
    return out


@k("MatrixDiagPart")
def _matrix_diag_part(x):
    x = np.asarray(x)
    r, c = _diag_index(*x.shape[-2:])
    return x[..., r, c]


@k("MatrixSetDiag")
def _matrix_set_diag(x, d):
    x = np.asarray(x)
    r, c = _diag_index(*x.shape[-2:])
    want = x.shape[:-2] + (len(r),)
    if np.shape(d) != want:
        raise ValueError(f"set_diag: diagonal must have shape {list(want)} for an input of shape "
                         f"{list(x.shape)}, got {list(np.shape(d))}")
    out = x.copy()
    out[..., r, c] = d
    return out


def _square(x, what):
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{what} needs square matrices in the last two dimensions, got shape {list(x.shape)}")


@k("MatrixInverse")
@_f32_for_half
def _inv(x):
    _square(x, "inv")
    if x.size == 0:
        return x.copy()
    try:
        out = np.linalg.inv(x)
    except np.linalg.LinAlgError:
        raise errors.InvalidArgumentError("Input is not invertible.") from None
    return out


@k("MatrixDeterminant")
@_f32_for_half
def _det(x):
    _square(x, "det")
    if x.shape[-1] == 0:
        return np.ones(x.shape[:-2], dtype=x.dtype)
    return np.linalg.det(x).astype(x.dtype, copy=False)


@k("MatrixSpectralNorm")
@_f32_for_half
def _spectral_norm(x):
    if x.shape[-1] == 0 or x.shape[-2] == 0:
        return np.zeros(x.shape[:-2], dtype=x.dtype)
    return np.linalg.svd(x, compute_uv=False)[..., 0].astype(x.dtype, copy=False)


@k("MatrixSpectralNormGrad")
@_f32_for_half
def _spectral_norm_grad(x):
    """u1 v1^T, the derivative of the largest singular value (unique when it is simple)."""
    if x.shape[-1] == 0 or x.shape[-2] == 0:
        return np.zeros_like(x)
    u, _, vt = np.linalg.svd(x, full_matrices=False)
    return (u[..., :, :1] * vt[..., :1, :]).astype(x.dtype, copy=False)
