"""Matrix decompositions: Cholesky, symmetric eigendecomposition (``eigh``), QR and SVD, batched
over leading dimensions, with TensorFlow's op names and gradients (Cholesky and ``eigh``; QR for
the reduced form of tall or square matrices; SVD for the reduced form with distinct singular values).

>>> import numpy as np, tensorweave as tw
>>> from tensorweave.ops import decomposition_ops as D
>>> D.cholesky(tw.constant([[4.0, 2.0], [2.0, 5.0]])).numpy().tolist()
[[2.0, 0.0], [1.0, 2.0]]
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import get_op, register_op
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.ops import array_ops as A
from tensorweave.ops import linalg_ops as LA
from tensorweave.ops import math_ops as M
from tensorweave.ops import rules


def _float_matrix(x, what, square=False):
    rules.check_dtype(x, _dt.FLOATING, what)
    if x.shape.rank is not None and x.shape.rank < 2:
        raise ValueError(f"{what} needs a matrix (rank >= 2), got shape {fmt(x.shape)}")
    if square and x.shape.rank is not None:
        m, n = x.shape.as_list()[-2:]
        if m is not None and n is not None and m != n:
            raise ValueError(f"{what} needs square matrices, got shape {fmt(x.shape)}")


def _dims(x):
    return (None, None, None) if x.shape.rank is None else (x.shape.as_list()[:-2], *x.shape.as_list()[-2:])


def _lower(x):
    n = x.shape.as_list()[-1]
    return M.where(convert_to_tensor(np.tri(n, n, dtype=bool)), x, A.zeros_like(x))


def _t(x):
    return LA.matrix_transpose(x)


def _lower_read(grad):
    """The gradient of a symmetric-matrix function whose kernel reads only the lower triangle (as
    LAPACK does): off-diagonal entries count for both of their positions."""
    both = _lower(grad + _t(grad))
    return LA.set_diag(both, 0.5 * LA.diag_part(both))


# ---- Cholesky -------------------------------------------------------------------------------------
def _infer_cholesky(inputs, attrs):
    _float_matrix(inputs[0], "cholesky", square=True)
    return inputs[0].shape, inputs[0].dtype


def _cholesky_grad(op, g):
    ell = op.outputs[0]
    inv = LA.inv(ell)
    mid = _lower(M.matmul(ell, g, transpose_a=True))
    mid = LA.set_diag(mid, 0.5 * LA.diag_part(mid))
    grad = M.matmul(M.matmul(inv, mid, transpose_a=True), inv)
    return [_lower_read(grad)]


register_op("Cholesky", infer=_infer_cholesky, grad=_cholesky_grad, heavy=True)


def cholesky(input, name=None):
    """Lower-triangular ``L`` with ``L @ L^T == input`` (input symmetric positive definite)."""
    return execute(get_op("Cholesky"), [convert_to_tensor(input)], {}, name)


# ---- eigh ------------------------------------------------------------------------------------------
def _infer_eigh(inputs, attrs):
    x = inputs[0]
    _float_matrix(x, "eigh", square=True)
    if x.shape.rank is None:
        return [(TensorShape(None), x.dtype), (TensorShape(None), x.dtype)]
    batch, n, _ = _dims(x)
    return [(TensorShape(batch + [n]), x.dtype), (x.shape, x.dtype)]


def _eigh_grad(op, ge, gv):
    e, v = op.outputs
    n = v.shape.as_list()[-1]
    diff = A.expand_dims(e, -2) - A.expand_dims(e, -1)           # [i, j] = e_j - e_i
    off = convert_to_tensor(~np.eye(n, dtype=bool))
    f = M.where(off, 1.0 / M.where(off, diff, A.ones_like(diff)), A.zeros_like(diff))
    inner = A.zeros_like(diff)
    if ge is not None:
        inner = inner + LA.set_diag(A.zeros_like(diff), convert_to_tensor(ge))
    if gv is not None:
        inner = inner + f * M.matmul(v, convert_to_tensor(gv), transpose_a=True)
    return [_lower_read(M.matmul(v, M.matmul(inner, v, transpose_b=True)))]


register_op("SelfAdjointEigV2", infer=_infer_eigh, num_outputs=2, grad=_eigh_grad, heavy=True)


def eigh(tensor, name=None):
    """Eigenvalues (ascending) and eigenvectors (columns) of symmetric matrices (lower triangle read)."""
    e, v = execute(get_op("SelfAdjointEigV2"), [convert_to_tensor(tensor)], {}, name)
    return e, v


# ---- QR ------------------------------------------------------------------------------------------------
def _infer_qr(inputs, attrs):
    x = inputs[0]
    _float_matrix(x, "qr")
    if x.shape.rank is None:
        return [(TensorShape(None), x.dtype), (TensorShape(None), x.dtype)]
    batch, m, n = _dims(x)
    k = None if m is None or n is None else min(m, n)
    full = attrs["full_matrices"]
    return [(TensorShape(batch + [m, m if full else k]), x.dtype),
            (TensorShape(batch + [m if full else k, n]), x.dtype)]


def _qr_grad(op, gq, gr):
    q, r = op.outputs
    m, n = op.inputs[0].shape.as_list()[-2:]
    if op.attrs["full_matrices"] and m != n or m is None or n is None or m < n:
        raise NotImplementedError(f"The gradient of qr is defined here for the reduced form of matrices with at "
                                  f"least as many rows as columns; got shape {fmt(op.inputs[0].shape)} with "
                                  f"full_matrices={op.attrs['full_matrices']}")
    gq = A.zeros_like(q) if gq is None else convert_to_tensor(gq)
    gr = A.zeros_like(r) if gr is None else convert_to_tensor(gr)
    qdq = M.matmul(q, gq, transpose_a=True)
    rdr = M.matmul(r, gr, transpose_b=True)
    low = _lower(qdq - _t(qdq) + rdr - _t(rdr))
    rinv_t = _t(LA.inv(r))
    grad_a = M.matmul(q, gr + M.matmul(low, rinv_t))
    grad_b = M.matmul(gq - M.matmul(q, qdq), rinv_t)
    return [grad_a + grad_b]


register_op("Qr", infer=_infer_qr, num_outputs=2, grad=_qr_grad, heavy=True)


def qr(input, full_matrices=False, name=None):
    """``Q`` (orthonormal columns) and upper-triangular ``R`` with ``Q @ R == input``."""
    q, r = execute(get_op("Qr"), [convert_to_tensor(input)], {"full_matrices": bool(full_matrices)}, name)
    return q, r


# ---- SVD -------------------------------------------------------------------------------------------------
def _infer_svd(inputs, attrs):
    x = inputs[0]
    _float_matrix(x, "svd")
    if x.shape.rank is None:
        return [(TensorShape(None), x.dtype)] * 3
    batch, m, n = _dims(x)
    k = None if m is None or n is None else min(m, n)
    full = attrs["full_matrices"]
    return [(TensorShape(batch + [k]), x.dtype), (TensorShape(batch + [m, m if full else k]), x.dtype),
            (TensorShape(batch + [n, n if full else k]), x.dtype)]


def _svd_grad(op, gs, gu, gv):
    """Townsend's formula for ``A = U diag(s) V^T`` (reduced form; distinct non-zero singular values)."""
    s, u, v = op.outputs
    k = s.shape.as_list()[-1]
    m, n = op.inputs[0].shape.as_list()[-2:]
    if op.attrs["full_matrices"] and m != n and (gu is not None or gv is not None):
        raise NotImplementedError("svd: gradients through u and v need full_matrices=False (or square input)")
    u, v = u[..., :k], v[..., :k]
    gs = A.zeros_like(s) if gs is None else convert_to_tensor(gs)
    inner = LA.set_diag(A.zeros_like(M.matmul(u, u, transpose_a=True)), gs)
    if gu is None and gv is None:
        return [M.matmul(M.matmul(u, inner), v, transpose_b=True)]
    s2 = M.square(s)
    diff = A.expand_dims(s2, -2) - A.expand_dims(s2, -1)          # [i, j] = s_j^2 - s_i^2
    off = convert_to_tensor(~np.eye(k, dtype=bool))
    f = M.where(off, 1.0 / M.where(off, diff, A.ones_like(diff)), A.zeros_like(diff))
    smat = LA.set_diag(A.zeros_like(diff), s)
    sinv = LA.set_diag(A.zeros_like(diff), 1.0 / s)
    total = None
    if gu is not None:
        gu = convert_to_tensor(gu)[..., :k]
        utgu = M.matmul(u, gu, transpose_a=True)
        inner = inner + M.matmul(f * (utgu - _t(utgu)), smat)
        rest = gu - M.matmul(u, utgu)                                  # (I - U U^T) dU
        total = M.matmul(M.matmul(rest, sinv), v, transpose_b=True)
    if gv is not None:
        gv = convert_to_tensor(gv)[..., :k]
        vtgv = M.matmul(v, gv, transpose_a=True)
        inner = inner + M.matmul(smat, f * (vtgv - _t(vtgv)))
        rest = gv - M.matmul(v, vtgv)                                  # (I - V V^T) dV
        extra = M.matmul(M.matmul(u, sinv), rest, transpose_b=True)
        total = extra if total is None else total + extra
    core = M.matmul(M.matmul(u, inner), v, transpose_b=True)
    return [core if total is None else core + total]


register_op("Svd", infer=_infer_svd, num_outputs=3, grad=_svd_grad, heavy=True)


def svd(tensor, full_matrices=False, compute_uv=True, name=None):
    """Singular values (descending) and, with ``compute_uv``, ``u`` and ``v`` with
    ``tensor == u @ diag(s) @ v^T`` (TensorFlow's order: ``s, u, v``)."""
    s, u, v = execute(get_op("Svd"), [convert_to_tensor(tensor)], {"full_matrices": bool(full_matrices)}, name)
    return (s, u, v) if compute_uv else s
