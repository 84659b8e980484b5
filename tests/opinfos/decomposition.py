"""OpInfos for the matrix decompositions (ops/decomposition_ops.py) against NumPy's LAPACK."""
import numpy as np

import tensorweave as tw
from opinfo import OpInfo, Sample
from tensorweave.ops import decomposition_ops as D

F = (tw.float32, tw.float64)


def _spd(r, shape, d):
    a = r.uniform(-1, 1, size=shape)
    return (a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(d)


def _sym(r, shape, d):
    a = r.uniform(-1, 1, size=shape)
    return ((a + np.swapaxes(a, -1, -2)) / 2 + np.diag(np.arange(shape[-1]) * 1.5)).astype(d)


def _svd_ref(x, full_matrices=False):
    u, s, vt = np.linalg.svd(x, full_matrices=full_matrices)
    return s, u, np.swapaxes(vt, -1, -2)


OPS = [
    OpInfo("cholesky", D.cholesky, np.linalg.cholesky, dtypes=F, tol={tw.float32: (1e-5, 1e-5)},
           samples=lambda d, r: [Sample((_spd(r, (3, 3), d),), name="3x3"), Sample((_spd(r, (2, 4, 4), d),),
                                                                                     name="batch")]),
    OpInfo("eigh", D.eigh, np.linalg.eigh, dtypes=F, tol={tw.float32: (1e-4, 1e-4)},
           samples=lambda d, r: [Sample((_sym(r, (3, 3), d),), name="3x3"), Sample((_sym(r, (2, 4, 4), d),),
                                                                                    name="batch")]),
    OpInfo("qr", D.qr, lambda x, full_matrices=False: np.linalg.qr(x, mode="complete" if full_matrices else "reduced"),
           dtypes=F, tol={tw.float32: (1e-4, 1e-4)},
           samples=lambda d, r: [Sample((r.uniform(-1, 1, (4, 3)).astype(d),), name="tall"),
                                 Sample((r.uniform(-1, 1, (2, 3, 3)).astype(d),), name="batch")]),
    OpInfo("qr_complete", D.qr, lambda x, full_matrices=False: np.linalg.qr(x, mode="complete"), dtypes=F,
           grad=False, tol={tw.float32: (1e-4, 1e-4)},
           samples=lambda d, r: [Sample((r.uniform(-1, 1, (4, 2)).astype(d),), {"full_matrices": True}, name="tall")]),
    OpInfo("svd_full", D.svd, _svd_ref, dtypes=F, grad=False, tol={tw.float32: (1e-4, 1e-4)},
           samples=lambda d, r: [Sample((r.uniform(-1, 1, (2, 2, 5)).astype(d),), {"full_matrices": True},
                                        name="wide_full")]),
    # gradients through u and v too: the cotangents are random, and singular vectors' signs are stable
    # under the small perturbations of finite differences
    OpInfo("svd", D.svd, _svd_ref, dtypes=F, tol={tw.float32: (1e-4, 1e-4)},
           samples=lambda d, r: [Sample((r.uniform(-1, 1, (4, 3)).astype(d),), name="tall"),
                                 Sample((r.uniform(-1, 1, (2, 3, 5)).astype(d),), name="wide_batch")]),
]
