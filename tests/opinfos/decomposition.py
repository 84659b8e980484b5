"""OpInfos for decompositions and solvers (ops/decomposition_ops.py), references from SciPy.

Ops that read one triangle of a symmetric input (cholesky, eigh) are tested on the symmetrised
argument, so finite differences and the analytic gradient see the same function; outputs with
a sign ambiguity (eigenvectors, singular vectors) are tested through sign-free products.
"""
import numpy as np
import scipy.linalg

import tensorweave as tw
from opinfo import OpInfo, Sample, arr

F = (tw.float32, tw.float64)
TOL = {tw.float32: (1e-4, 1e-4)}


def _spd(d, r, *batch, n=3):
    a = arr(r, batch + (n, n), np.float64, -1, 1)
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(d)


def _general(d, r, *shape):
    a = arr(r, shape, np.float64, -1, 1)
    k = min(shape[-2:])
    a[..., :k, :k] += 2.5 * np.eye(k)
    return a.astype(d)


def _per_matrix(fn):
    """A reference applying the 2-D ``fn`` over leading dimensions (outputs stacked)."""
    def ref(*xs):
        x0 = xs[0]
        if x0.ndim == 2:
            return fn(*xs)
        batch = x0.shape[:-2]
        outs = [fn(*(x.reshape((-1,) + x.shape[-2:])[i] for x in xs)) for i in range(int(np.prod(batch)))]
        if isinstance(outs[0], tuple):
            return tuple(np.stack([o[j] for o in outs]).reshape(batch + np.shape(outs[0][j]))
                         for j in range(len(outs[0])))
        return np.stack(outs).reshape(batch + np.shape(outs[0]))
    return ref


def _sym(a):
    return (a + tw.linalg.matrix_transpose(a)) * 0.5


def _sym_np(a):
    return (a + np.swapaxes(a, -1, -2)) * 0.5


def _spd_samples(d, r):
    return [Sample((_spd(d, r),), name="3x3"), Sample((_spd(d, r, 2, n=2),), name="batch"),
            Sample((_spd(d, r, n=1),), name="1x1")]


def _solve_samples(d, r):
    return [Sample((_general(d, r, 3, 3), arr(r, (3, 2), d)), name="3x3"),
            Sample((_general(d, r, 2, 2, 2), arr(r, (2, 2, 1), d)), name="batch"),
            Sample((_general(d, r, 3, 3), arr(r, (3, 2), d)), {"adjoint": True}, name="adjoint")]


def _tri_ref(a, b, lower=True, adjoint=False):
    return _per_matrix(lambda m, v: scipy.linalg.solve_triangular(m, v, lower=lower, trans=1 if adjoint else 0)
                       .astype(v.dtype))(a, b)


def _band_samples(d, r):
    return [Sample((arr(r, (4, 5), d), 1, 0), name="lower1"), Sample((arr(r, (2, 3, 3), d), -1, 0), name="tril"),
            Sample((arr(r, (3, 4), d), 0, -1), name="triu"), Sample((arr(r, (3, 3), d), 0, 0), name="diag")]


def _band_ref(x, lo, up):
    i, j = np.arange(x.shape[-2])[:, None], np.arange(x.shape[-1])[None, :]
    keep = ((lo < 0) | (i - j <= lo)) & ((up < 0) | (j - i <= up))
    return np.where(keep, x, 0).astype(x.dtype)


def _svd_op(a):
    s, u, v = tw.linalg.svd(a)
    return s, tw.matmul(u, u, transpose_b=True), tw.matmul(v * tw.expand_dims(s, -2), v, transpose_b=True)


def _svd_ref(a):
    def one(m):
        u, s, vh = scipy.linalg.svd(m.astype(np.float64), full_matrices=False)
        return s, u @ u.T, (vh.T * s) @ vh
    return tuple(o.astype(a.dtype) for o in _per_matrix(one)(a))


def _eigh_op(a):
    e, v = tw.linalg.eigh(_sym(a))
    return e, v * v


def _eigh_ref(a):
    def one(m):
        e, v = scipy.linalg.eigh(m.astype(np.float64))
        return e, v * v
    return tuple(o.astype(a.dtype) for o in _per_matrix(one)(_sym_np(a)))


def _qr_ref(a):
    def one(m):
        q, r = scipy.linalg.qr(m.astype(np.float64), mode="economic")
        return q, r
    return tuple(o.astype(a.dtype) for o in _per_matrix(one)(a))


def _tall_samples(d, r):
    return [Sample((_general(d, r, 3, 3),), name="square"), Sample((_general(d, r, 4, 2),), name="tall"),
            Sample((_general(d, r, 2, 3, 2),), name="batch")]


def _distinct_samples(d, r):
    # Distinct singular values/eigenvalues keep the gradients finite.
    a = np.diag([3.0, 2.0, 1.0]) + 0.2 * arr(r, (3, 3), np.float64, -1, 1)
    b = np.array([[2.0, 0.3], [0.1, 1.0], [0.2, -0.4]]) + 0.1 * arr(r, (3, 2), np.float64, -1, 1)
    return [Sample((a.astype(d),), name="square"), Sample((b.astype(d),), name="tall")]


def _slogdet_samples(d, r):
    neg = _general(d, r, 3, 3)
    neg[0] *= -1
    return [Sample((_general(d, r, 3, 3),), name="3x3"), Sample((neg,), name="negative"),
            Sample((_general(d, r, 2, 2, 2),), name="batch")]


def _slogdet_ref(a):
    sign, logabs = np.linalg.slogdet(a.astype(np.float64))
    return sign.astype(a.dtype), logabs.astype(a.dtype)


def _lstsq_samples(d, r):
    return [Sample((_general(d, r, 4, 2), arr(r, (4, 3), d)), name="tall"),
            Sample((_general(d, r, 3, 3), arr(r, (3, 1), d)), {"l2_regularizer": 0.5}, name="l2")]


def _lstsq_ref(a, b, l2_regularizer=0.0):
    a64 = a.astype(np.float64)
    gram = a64.T @ a64 + l2_regularizer * np.eye(a.shape[-1])
    return scipy.linalg.solve(gram, a64.T @ b).astype(a.dtype)


OPS = [
    OpInfo("linalg_cholesky", lambda a: tw.linalg.cholesky(_sym(a)),
           _per_matrix(lambda m: scipy.linalg.cholesky(_sym_np(m), lower=True).astype(m.dtype)), F, _spd_samples,
           grad_order=2, tol=TOL),
    OpInfo("linalg_solve", tw.linalg.solve,
           lambda a, b, adjoint=False: _per_matrix(lambda m, v: scipy.linalg.solve(m.T if adjoint else m, v)
                                                   .astype(v.dtype))(a, b), F, _solve_samples, grad_order=2, tol=TOL),
    OpInfo("linalg_triangular_solve", tw.linalg.triangular_solve, _tri_ref, F,
           lambda d, r: [s for s in _solve_samples(d, r)] +
           [Sample((_general(d, r, 3, 3), arr(r, (3, 2), d)), {"lower": False}, name="upper")],
           grad_order=2, tol=TOL),
    OpInfo("linalg_band_part", tw.linalg.band_part, _band_ref, F + (tw.int32,), _band_samples, grad_order=2),
    OpInfo("linalg_slogdet", lambda a: tuple(tw.linalg.slogdet(a)), _slogdet_ref, F, _slogdet_samples,
           grad_order=2, tol=TOL),
    OpInfo("linalg_logdet", lambda a: tw.linalg.logdet(_sym(a)),
           lambda a: np.linalg.slogdet(_sym_np(a).astype(np.float64))[1].astype(a.dtype), F, _spd_samples,
           tol=TOL),
    OpInfo("linalg_eigh", _eigh_op, _eigh_ref, F, lambda d, r: [Sample((_spd(d, r),), name="spd")] +
           _distinct_samples(d, r)[:1], tol=TOL),
    OpInfo("linalg_svd", _svd_op, _svd_ref, F, _distinct_samples, tol=TOL),
    OpInfo("linalg_qr", lambda a: tuple(tw.linalg.qr(a)), _qr_ref, F, _tall_samples, tol=TOL),
    OpInfo("linalg_lstsq", tw.linalg.lstsq, _lstsq_ref, F, _lstsq_samples, tol=TOL),
    OpInfo("linalg_pinv", tw.linalg.pinv,
           _per_matrix(lambda m: np.linalg.pinv(m.astype(np.float64)).astype(m.dtype)), F, _distinct_samples,
           tol=TOL),
]
