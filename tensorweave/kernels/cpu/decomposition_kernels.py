"""CPU kernels for ``ops/decomposition_ops.py`` (LAPACK through NumPy/SciPy; float16 and
bfloat16 run in float32)."""
import numpy as np
import scipy.linalg

from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu.linalg_kernels import _f32_for_half


def _batched(fn, x, *rest):
    """Applies the 2-D routine ``fn`` to every matrix of the leading dimensions."""
    batch = x.shape[:-2]
    if not batch:
        return fn(x, *rest)
    flat = [fn(x.reshape((-1,) + x.shape[-2:])[i], *(r.reshape((-1,) + r.shape[-2:])[i] for r in rest))
            for i in range(int(np.prod(batch)))]
    if isinstance(flat[0], tuple):
        return tuple(np.stack([f[j] for f in flat]).reshape(batch + flat[0][j].shape) for j in range(len(flat[0])))
    return np.stack(flat).reshape(batch + flat[0].shape)


@k("MatrixBandPart")
def _band_part(x, num_lower, num_upper):
    m, n = x.shape[-2:]
    i, j = np.arange(m)[:, None], np.arange(n)[None, :]
    keep = ((num_lower < 0) | (i - j <= num_lower)) & ((num_upper < 0) | (j - i <= num_upper))
    return np.where(keep, x, np.zeros((), x.dtype))


@k("Cholesky")
@_f32_for_half
def _cholesky(x):
    if x.shape[-1] == 0:
        return x.copy()
    try:
        return np.linalg.cholesky(np.tril(x) + np.swapaxes(np.tril(x, -1), -1, -2)).astype(x.dtype, copy=False)
    except np.linalg.LinAlgError:
        raise ValueError("Cholesky decomposition was not successful: the input is not positive definite") from None


@k("MatrixTriangularSolve")
@_f32_for_half
def _triangular_solve(a, b, lower, adjoint):
    def one(a2, b2):
        return scipy.linalg.solve_triangular(a2, b2, lower=lower, trans=1 if adjoint else 0)
    if a.shape[:-2] != b.shape[:-2]:
        a, b = _broadcast_batch(a, b)
    return _batched(one, np.ascontiguousarray(a), np.ascontiguousarray(b)).astype(b.dtype, copy=False)


def _broadcast_batch(a, b):
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:])


@k("MatrixSolve")
@_f32_for_half
def _solve(a, b, adjoint):
    if adjoint:
        a = np.swapaxes(a, -1, -2)
    try:
        return np.linalg.solve(a, b).astype(b.dtype, copy=False)
    except np.linalg.LinAlgError:
        raise ValueError("Input matrix is not invertible") from None


@k("LogMatrixDeterminant")
@_f32_for_half
def _slogdet(x):
    sign, logabs = np.linalg.slogdet(x)
    return sign.astype(x.dtype), logabs.astype(x.dtype)


@k("SelfAdjointEigV2")
@_f32_for_half
def _eigh(x):
    e, v = np.linalg.eigh(x, UPLO="L")
    return e.astype(x.dtype, copy=False), v.astype(x.dtype, copy=False)


@k("Svd")
@_f32_for_half
def _svd(x, full_matrices=False):
    u, s, vh = np.linalg.svd(x, full_matrices=full_matrices)
    return s.astype(x.dtype, copy=False), u.astype(x.dtype, copy=False), np.swapaxes(vh, -1, -2).astype(x.dtype)


@k("Qr")
@_f32_for_half
def _qr(x, full_matrices=False):
    q, r = np.linalg.qr(x, mode="complete" if full_matrices else "reduced")
    return q.astype(x.dtype, copy=False), r.astype(x.dtype, copy=False)
