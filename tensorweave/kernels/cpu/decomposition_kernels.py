"""CPU kernels for ``ops/decomposition_ops.py`` (NumPy's LAPACK drivers)."""
import numpy as np

from tensorweave.core import errors
from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu.util import low_precision


def _f32_for_half(fn):
    """Runs ``fn`` in float32 for float16/bfloat16 inputs (LAPACK lacks them), casting every output back."""
    def kernel(x, **attrs):
        x = np.asarray(x)
        if x.dtype not in low_precision():
            return fn(x, **attrs)
        out = fn(x.astype(np.float32), **attrs)
        return tuple(o.astype(x.dtype) for o in out) if isinstance(out, tuple) else out.astype(x.dtype)
    return kernel


@k("Cholesky")
@_f32_for_half
def _cholesky(x):
    try:
        return np.linalg.cholesky(x).astype(x.dtype, copy=False)
    except np.linalg.LinAlgError:
        raise errors.InvalidArgumentError("Cholesky decomposition was not successful: the input is not symmetric "
                                          "positive definite.") from None


@k("SelfAdjointEigV2")
@_f32_for_half
def _eigh(x):
    e, v = np.linalg.eigh(x)
    return e.astype(x.dtype, copy=False), v.astype(x.dtype, copy=False)


@k("Qr")
@_f32_for_half
def _qr(x, full_matrices):
    q, r = np.linalg.qr(x, mode="complete" if full_matrices else "reduced")
    return q.astype(x.dtype, copy=False), r.astype(x.dtype, copy=False)


@k("Svd")
@_f32_for_half
def _svd(x, full_matrices):
    u, s, vt = np.linalg.svd(x, full_matrices=full_matrices)
    return s.astype(x.dtype, copy=False), u.astype(x.dtype, copy=False), \
        np.swapaxes(vt, -1, -2).astype(x.dtype, copy=False)
