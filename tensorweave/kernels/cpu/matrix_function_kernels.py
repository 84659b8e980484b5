"""CPU kernels for ``ops/matrix_function_ops.py`` (SciPy/LAPACK, looped over batch dimensions)."""
import numpy as np
import scipy.linalg

from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu.decomposition_kernels import _batched
from tensorweave.kernels.cpu.linalg_kernels import _f32_for_half


def _empty_or(x, fn):
    return x.copy() if x.shape[-1] == 0 else _batched(fn, x)


@k("MatrixExponential")
@_f32_for_half
def _expm(x):
    return _empty_or(x, lambda a: scipy.linalg.expm(a)).astype(x.dtype, copy=False)


@k("MatrixSquareRoot")
def _sqrtm(x):
    def one(a):
        with np.errstate(all="ignore"):
            r = scipy.linalg.sqrtm(a.astype(np.float64))
        if np.iscomplexobj(r):   # no real square root: NaN, as TF's real Schur method gives
            r = np.where(np.abs(r.imag) > 1e-8 * max(1.0, np.abs(r).max()), np.nan, r.real)
        return r
    return _empty_or(x, one).astype(x.dtype, copy=False)


@k("MatrixLogarithm")
def _logm(x):
    return _empty_or(x, lambda a: scipy.linalg.logm(a)).astype(x.dtype, copy=False)


@k("Eig")
def _eig(x, compute_v):
    c = np.complex128 if x.dtype in (np.float64, np.complex128) else np.complex64
    if x.shape[-1] == 0:
        return np.zeros(x.shape[:-1], c), np.zeros(x.shape, c)
    e, v = np.linalg.eig(x)
    return e.astype(c), (v.astype(c) if compute_v else np.zeros(x.shape, c))


@k("Lu")
def _lu(x, output_idx_type):
    n = x.shape[-1]
    if n == 0:
        return x.copy(), np.zeros(x.shape[:-1], output_idx_type.np_dtype)

    def one(a):
        p, low, up = scipy.linalg.lu(a)
        # a = P L U, so a[perm] = L U with perm[i] the row of P's column i
        perm = np.argmax(p, axis=0)
        return (np.tril(low, -1) + up).astype(a.dtype), perm.astype(output_idx_type.np_dtype)
    batch = x.shape[:-2]
    flat = x.reshape((-1, n, n))
    outs = [one(m) for m in flat]
    return (np.stack([o[0] for o in outs]).reshape(x.shape),
            np.stack([o[1] for o in outs]).reshape(batch + (n,)))
