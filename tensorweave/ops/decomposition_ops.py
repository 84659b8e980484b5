"""Matrix decompositions and solvers under ``tf.linalg`` names, each with its gradient:
``cholesky``, ``qr``, ``svd``, ``eigh``, ``slogdet``/``logdet``, ``solve``, ``triangular_solve``,
``band_part``, ``lstsq``, ``pinv``. Batched over leading dimensions; float inputs only.

>>> import tensorweave as tw
>>> a = tw.constant([[4.0, 2.0], [2.0, 3.0]])
>>> tw.linalg.cholesky(a).numpy().tolist()
[[2.0, 0.0], [1.0, 1.4142135381698608]]
>>> tw.linalg.solve(a, tw.constant([[2.0], [1.0]])).numpy().round(4).tolist()
[[0.5], [0.0]]
"""
import collections

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import get_op, register_op
from tensorweave.core.sbp import B, S
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import rules
from tensorweave.ops.arguments import int_argument
from tensorweave.ops.indexing_ops import eye
from tensorweave.ops.linalg_ops import diag_part, inv, matrix_transpose, set_diag

__all__ = ["cholesky", "qr", "svd", "eigh", "eigvalsh", "slogdet", "logdet", "solve", "triangular_solve",
           "band_part", "lstsq", "pinv", "cholesky_solve", "matvec", "global_norm", "normalize", "tensor_diag",
           "tensor_diag_part", "matrix_rank"]

_ct = convert_to_tensor
_T = matrix_transpose


def _float_matrix(value, op_name):
    x = _ct(value)
    if x.dtype not in rules.FLOAT:
        raise TypeError(f"{op_name} needs a float tensor, got {x.dtype.name}. Hint: tw.cast it first")
    if x.shape.rank is not None and x.shape.rank < 2:
        raise ValueError(f"{op_name} needs a tensor of rank >= 2 (matrices), got shape {fmt(x.shape)}")
    return x


def _square(op_name):
    def infer(inputs, attrs):
        x = inputs[0]
        if x.shape.rank is not None:
            m, n = x.shape[-2], x.shape[-1]
            if m is not None and n is not None and m != n:
                raise ValueError(f"{op_name} needs square matrices, got shape {fmt(x.shape)}")
        return x.shape, x.dtype
    return infer


def _rows(x):
    return x.shape[-2] if x.shape.rank is not None else None


def _eye_for(x, n=None):
    """An identity matching ``x``'s last dimension (static where known)."""
    n = x.shape[-1] if n is None else n
    return eye(n if n is not None else A.shape(x)[-1], dtype=x.dtype)


# ---- band_part ----------------------------------------------------------------------------
register_op("MatrixBandPart", infer=lambda i, a: (i[0].shape, i[0].dtype),
            grad=lambda op, g: [band_part(g, op.attrs["num_lower"], op.attrs["num_upper"])])


def band_part(input, num_lower, num_upper, name=None):
    """Keeps the band of ``num_lower`` sub- and ``num_upper`` super-diagonals (-1: all) of each
    matrix and zeroes the rest: ``band_part(x, -1, 0)`` is the lower triangle."""
    x = _ct(input)
    lo = int_argument(num_lower, "band_part", "num_lower", -1)
    up = int_argument(num_upper, "band_part", "num_upper", -1)
    return execute(get_op("MatrixBandPart"), [x], {"num_lower": lo, "num_upper": up}, name)


def _tril(x):
    return band_part(x, -1, 0)


# ---- triangular_solve and solve -----------------------------------------------------------------
def _infer_solve(inputs, attrs):
    a, b = inputs
    d = rules.same_dtype([a, b], "matrix and rhs")
    if a.shape.rank is None or b.shape.rank is None:
        return b.shape, d
    if b.shape.rank < 2 or (a.shape[-1] is not None and b.shape[-2] is not None and a.shape[-1] != b.shape[-2]):
        raise ValueError(f"the right-hand side must be [..., {a.shape[-1]}, k], got shape {fmt(b.shape)}")
    return b.shape, d


def _triangular_solve_grad(op, g):
    a, _ = op.inputs
    x = op.outputs[0]
    lower, adj = op.attrs["lower"], op.attrs["adjoint"]
    gb = triangular_solve(a, g, lower=lower, adjoint=not adj)
    ga = M.negative(M.matmul(x, gb, transpose_b=True) if adj else M.matmul(gb, x, transpose_b=True))
    return [band_part(ga, -1, 0) if lower else band_part(ga, 0, -1), gb]


def _solve_grad(op, g):
    a, _ = op.inputs
    x = op.outputs[0]
    adj = op.attrs["adjoint"]
    gb = solve(a, g, adjoint=not adj)
    ga = M.negative(M.matmul(x, gb, transpose_b=True) if adj else M.matmul(gb, x, transpose_b=True))
    return [ga, gb]


register_op("MatrixTriangularSolve", infer=_infer_solve, grad=_triangular_solve_grad, heavy=True)
register_op("MatrixSolve", infer=_infer_solve, grad=_solve_grad, heavy=True)


def _solve_operands(matrix, rhs, op_name):
    a, b = _float_matrix(matrix, op_name), _float_matrix(rhs, op_name)
    if a.dtype is not b.dtype:
        rules.same_dtype([a, b], "matrix and rhs")
    return a, b


def triangular_solve(matrix, rhs, lower=True, adjoint=False, name=None):
    """Solves ``matrix @ x = rhs`` (``matrix^T`` with ``adjoint``) for triangular ``matrix``;
    only its ``lower`` (or upper) triangle is read."""
    a, b = _solve_operands(matrix, rhs, "triangular_solve")
    return execute(get_op("MatrixTriangularSolve"), [a, b], {"lower": bool(lower), "adjoint": bool(adjoint)}, name)


def solve(matrix, rhs, adjoint=False, name=None):
    """Solves ``matrix @ x = rhs`` (``matrix^T`` with ``adjoint``); a singular matrix is an error."""
    a, b = _solve_operands(matrix, rhs, "solve")
    return execute(get_op("MatrixSolve"), [a, b], {"adjoint": bool(adjoint)}, name)


# ---- cholesky -----------------------------------------------------------------------------
def _cholesky_grad(op, g):
    # Murray (2016): with L the factor, Phi(X) its lower triangle with the diagonal halved,
    # dA = sym(L^-T Phi(L^T dL) L^-1) / 2 on the symmetric input (TF's rule).
    low = op.outputs[0]
    ident = _eye_for(low)
    l_inv = triangular_solve(low, A.broadcast_to(ident, A.shape(low)))
    middle = M.matmul(low, g, transpose_a=True)
    middle = set_diag(_tril(middle), diag_part(middle) * 0.5)
    ga = M.matmul(l_inv, M.matmul(middle, l_inv), transpose_a=True)
    return [(ga + _T(ga)) * 0.5]


register_op("Cholesky", infer=_square("cholesky"), grad=_cholesky_grad, heavy=True)


def cholesky(input, name=None):
    """The lower-triangular ``L`` with ``L @ L^T = input`` for symmetric positive-definite
    matrices (only the lower triangle is read); not positive definite is an error."""
    return execute(get_op("Cholesky"), [_float_matrix(input, "cholesky")], {}, name)


def cholesky_solve(chol, rhs, name=None):
    """Solves ``A x = rhs`` given ``chol = cholesky(A)``."""
    y = triangular_solve(chol, rhs, lower=True)
    return triangular_solve(chol, y, lower=True, adjoint=True, name=name)


# ---- determinants -------------------------------------------------------------------------
def _slogdet_grad(op, g_sign, g_log):
    if g_log is None:
        return [None]
    scale = A.expand_dims(A.expand_dims(g_log, -1), -1)
    return [scale * _T(inv(op.inputs[0]))]


register_op("LogMatrixDeterminant", num_outputs=2, grad=_slogdet_grad, heavy=True,
            infer=lambda i, a: [(TensorShape(None if i[0].shape.rank is None else i[0].shape.as_list()[:-2]),
                                 i[0].dtype)] * 2)
Slogdet = collections.namedtuple("Slogdet", ["sign", "log_abs_determinant"])


def slogdet(input, name=None):
    """``(sign, log|det|)`` of each square matrix, without the determinant's overflow."""
    x = _float_matrix(input, "slogdet")
    _square("slogdet")([x], {})
    return Slogdet(*execute(get_op("LogMatrixDeterminant"), [x], {}, name))


def logdet(matrix, name=None):
    """``log(det(matrix))`` of Hermitian positive-definite matrices, from their Cholesky factor."""
    from tensorweave.ops.reduce_ops import reduce_sum
    chol = cholesky(matrix)
    return M.multiply(2.0, reduce_sum(M.log(diag_part(chol)), axis=-1), name=name)


# ---- eigh ---------------------------------------------------------------------------------
def _eigh_grad(op, ge, gv):
    # TF's rule for the lower triangle the kernel reads: with F_ij = 1/(e_j - e_i) off the
    # diagonal, dA = V (diag(ge) + F o (V^T gV)) V^T, symmetrised onto the lower triangle.
    e, v = op.outputs
    inner = 0
    if gv is not None:
        diff = A.expand_dims(e, -2) - A.expand_dims(e, -1)
        f = set_diag(M.div_no_nan(A.ones_like(diff), diff), A.zeros_like(e))
        inner = f * M.matmul(v, gv, transpose_a=True)
    if ge is not None:
        inner = inner + set_diag(A.zeros_like(v), ge) if gv is not None else set_diag(A.zeros_like(v), ge)
    ga = M.matmul(v, M.matmul(inner, v, transpose_b=True))
    ga = _tril(ga + _T(ga))
    return [set_diag(ga, diag_part(ga) * 0.5)]


register_op("SelfAdjointEigV2", num_outputs=2, grad=_eigh_grad, heavy=True,
            infer=lambda i, a: [(TensorShape(None if i[0].shape.rank is None else i[0].shape.as_list()[:-1]),
                                 i[0].dtype), (i[0].shape, i[0].dtype)])


def eigh(tensor, name=None):
    """Eigenvalues (ascending) and eigenvectors (columns) of symmetric matrices; only the lower
    triangle is read."""
    x = _float_matrix(tensor, "eigh")
    _square("eigh")([x], {})
    return execute(get_op("SelfAdjointEigV2"), [x], {}, name)


def eigvalsh(tensor, name=None):
    return eigh(tensor, name=name)[0]


# ---- svd ----------------------------------------------------------------------------------
def _svd_grad(op, gs, gu, gv):
    # Townsend (2016), reduced SVD with distinct nonzero singular values:
    # dA = U [diag(gs) + (F o (U^T gU - gU^T U)) S + S (F o (V^T gV - gV^T V))] V^T
    #      + (I - U U^T) gU S^-1 V^T + U S^-1 gV^T (I - V V^T),   F_ij = 1 / (s_j^2 - s_i^2).
    a = op.inputs[0]
    s, u, v = op.outputs
    if _full_and_not_square(op):
        if gu is not None or gv is not None:
            raise NotImplementedError("svd: gradients through u and v need full_matrices=False (or square "
                                      f"matrices); got shape {a.shape}")
        k = s.shape[-1]
        u, v = u[..., :k], v[..., :k]
    s_mat = set_diag(A.zeros_like(M.matmul(u, u, transpose_a=True)), s)
    inner = set_diag(A.zeros_like(s_mat), gs) if gs is not None else A.zeros_like(s_mat)
    out = None
    if gu is not None or gv is not None:
        s2 = M.square(s)
        diff = A.expand_dims(s2, -2) - A.expand_dims(s2, -1)
        f = set_diag(M.div_no_nan(A.ones_like(diff), diff), A.zeros_like(s))
        s_inv = set_diag(A.zeros_like(s_mat), M.reciprocal(s))
        if gu is not None:
            utgu = M.matmul(u, gu, transpose_a=True)
            inner = inner + M.matmul(f * (utgu - _T(utgu)), s_mat)
            proj = M.matmul(A.broadcast_to(_eye_for(u, _rows(u)), A.shape(M.matmul(u, u, transpose_b=True)))
                            - M.matmul(u, u, transpose_b=True), gu)
            out = M.matmul(proj, M.matmul(s_inv, v, transpose_b=True))
        if gv is not None:
            vtgv = M.matmul(v, gv, transpose_a=True)
            inner = inner + M.matmul(s_mat, f * (vtgv - _T(vtgv)))
            vv = M.matmul(v, v, transpose_b=True)
            proj = gv - M.matmul(vv, gv)
            term = M.matmul(u, M.matmul(s_inv, proj, transpose_b=True))
            out = term if out is None else out + term
    ga = M.matmul(u, M.matmul(inner, v, transpose_b=True))
    ga = ga if out is None else ga + out
    return [A.reshape(ga, A.shape(a))]


def _full_and_not_square(op):
    m, n = op.inputs[0].shape.as_list()[-2:]
    return op.attrs.get("full_matrices", False) and m != n


register_op("Svd", num_outputs=3, grad=_svd_grad, heavy=True,
            infer=lambda i, a: _infer_svd(i[0], a.get("full_matrices", False)))


def _infer_svd(x, full=False):
    if x.shape.rank is None:
        return [(TensorShape(None), x.dtype)] * 3
    *batch, m, n = x.shape.as_list()
    k = None if m is None or n is None else min(m, n)
    return [(TensorShape(batch + [k]), x.dtype), (TensorShape(batch + [m, m if full else k]), x.dtype),
            (TensorShape(batch + [n, n if full else k]), x.dtype)]


def svd(tensor, full_matrices=False, compute_uv=True, name=None):
    """Singular values (descending) and, with ``compute_uv``, ``(s, u, v)`` with
    ``tensor = u @ diag(s) @ v^T`` (TF's order); ``full_matrices`` gives square ``u`` and ``v``."""
    full = bool(full_matrices) and bool(compute_uv)  # s alone is the same either way (and differentiable)
    s, u, v = execute(get_op("Svd"), [_float_matrix(tensor, "svd")], {"full_matrices": full}, name)
    return (s, u, v) if compute_uv else s


# ---- qr -----------------------------------------------------------------------------------
def _qr_grad(op, gq, gr):
    # TF's rule (reduced QR of a square or tall matrix).
    if _full_and_not_square(op):
        raise NotImplementedError("qr: the gradient needs full_matrices=False (or square matrices); got shape "
                                  f"{op.inputs[0].shape}")
    q, r = op.outputs
    gq = A.zeros_like(q) if gq is None else gq
    gr = A.zeros_like(r) if gr is None else gr
    qdq = M.matmul(q, gq, transpose_a=True)
    rdr = M.matmul(r, gr, transpose_b=True)
    low = _tril(qdq - _T(qdq) + rdr - _T(rdr))

    def right_solve(x):  # x @ R^-T
        return _T(triangular_solve(r, _T(x), lower=False))
    return [M.matmul(q, gr + right_solve(low)) + right_solve(gq - M.matmul(q, qdq))]


register_op("Qr", num_outputs=2, grad=_qr_grad, heavy=True,
            infer=lambda i, a: [_infer_svd(i[0], a.get("full_matrices", False))[1],
                                (_r_shape(i[0], a.get("full_matrices", False)), i[0].dtype)])


def _r_shape(x, full=False):
    if x.shape.rank is None:
        return TensorShape(None)
    *batch, m, n = x.shape.as_list()
    return TensorShape(batch + [m if full else None if m is None or n is None else min(m, n), n])


Qr = collections.namedtuple("Qr", ["q", "r"])


def qr(input, full_matrices=False, name=None):
    """The QR decomposition ``input = q @ r`` (``q`` with orthonormal columns, ``r`` upper
    triangular; square ``q`` with ``full_matrices``). Gradients need the reduced form of square or
    tall matrices, as in TF."""
    return Qr(*execute(get_op("Qr"), [_float_matrix(input, "qr")], {"full_matrices": bool(full_matrices)}, name))


# ---- least squares and the pseudo-inverse ----------------------------------------------------
def lstsq(matrix, rhs, l2_regularizer=0.0, fast=True, name=None):
    """Least-squares solutions of ``matrix @ x = rhs`` through the (regularised) normal
    equations and a Cholesky factorisation, TF's ``fast`` path (full column rank needed)."""
    a, b = _solve_operands(matrix, rhs, "lstsq")
    gram = M.matmul(a, a, transpose_a=True)
    if l2_regularizer:
        gram = gram + M.multiply(float(l2_regularizer), _eye_for(gram))
    out = cholesky_solve(cholesky(gram), M.matmul(a, b, transpose_a=True))
    return A.identity(out, name=name) if name else out


def pinv(a, rcond=None, validate_args=False, name=None):
    """The Moore-Penrose pseudo-inverse from the SVD; singular values below ``rcond`` times the
    largest are treated as zero (default ``10 * max(m, n) * eps``, TF's)."""
    from tensorweave.ops.reduce_ops import reduce_max
    x = _float_matrix(a, "pinv")
    s, u, v = svd(x)
    if rcond is None:
        m, n = x.shape[-2], x.shape[-1]
        rcond = 10.0 * max(m or 1, n or 1) * float(np.finfo(x.dtype.np_dtype).eps)
    cutoff = M.multiply(rcond, reduce_max(s, axis=-1, keepdims=True))
    s_inv = M.where(s > cutoff, M.div_no_nan(A.ones_like(s), s), A.zeros_like(s))
    out = M.matmul(v * A.expand_dims(s_inv, -2), u, transpose_b=True)
    return A.identity(out, name=name) if name else out


# ---- small tf.linalg helpers --------------------------------------------------------------------
def matvec(a, b, transpose_a=False, adjoint_a=False, name=None):
    """``a @ b`` for matrices ``a`` and vectors ``b`` (batched)."""
    out = M.matmul(a, A.expand_dims(_ct(b), -1), transpose_a=transpose_a, adjoint_a=adjoint_a)
    return A.squeeze(out, -1, name=name)


def global_norm(t_list, name=None):
    """``sqrt(sum of every tensor's squared entries)`` (None entries are skipped)."""
    from tensorweave.ops.reduce_ops import reduce_sum
    ts = [_ct(t) for t in t_list if t is not None]
    if not ts:
        raise ValueError("global_norm: t_list holds no tensors")
    return M.sqrt(M.add_n([reduce_sum(M.square(t)) for t in ts]), name=name)


def normalize(tensor, ord="euclidean", axis=None, name=None):
    """``(tensor / norm, norm)`` with the norm of :func:`tw.norm` (kept dimensions)."""
    from tensorweave.ops.linalg_ops import norm
    x = _ct(tensor)
    n = norm(x, ord=ord, axis=axis, keepdims=True)
    return M.divide(x, n, name=name), n


def tensor_diag(diagonal, name=None):
    """The rank-2k tensor with ``diagonal`` (rank k) on its diagonal."""
    d = _ct(diagonal)
    dims = d.shape.as_list()
    flat = A.reshape(d, [-1])
    from tensorweave.ops.linalg_ops import diag
    return A.reshape(diag(flat), dims + dims, name=name)


def tensor_diag_part(input, name=None):
    """The diagonal of a rank-2k tensor with equal halves of dimensions."""
    x = _ct(input)
    dims = x.shape.as_list()
    half = dims[:len(dims) // 2]
    n = int(np.prod(half)) if half else 1
    return A.reshape(diag_part(A.reshape(x, [n, n])), half, name=name)


def matrix_rank(a, tol=None, validate_args=False, name=None):
    """The number of singular values above ``tol`` (default ``max(m, n) * eps * max(s)``)."""
    from tensorweave.ops.reduce_ops import reduce_max, reduce_sum
    x = _float_matrix(a, "matrix_rank")
    s = svd(x, compute_uv=False)
    if tol is None:
        m, n = x.shape[-2], x.shape[-1]
        tol = M.multiply(float(max(m or 1, n or 1) * np.finfo(x.dtype.np_dtype).eps),
                         reduce_max(s, axis=-1, keepdims=True))
    return reduce_sum(M.cast(M.greater(s, tol), _dt.int32), axis=-1, name=name)


# ---- SBP rules (core/sbp.py): batched decompositions split their batch axes; a solve also splits
# the right-hand sides' columns, and is linear in them.
def _solve_columns(inputs, attrs):
    b = inputs[1]
    yield [B, S(b.rank - 1)], [S(b.rank - 1)]


_batched = sbp_rules.batched_rule
get_op("MatrixBandPart").sbp = _batched((2,), (2,), linear=(0,))
get_op("MatrixTriangularSolve").sbp = _batched((2, 2), (2,), linear=(1,), extra=_solve_columns)
get_op("MatrixSolve").sbp = _batched((2, 2), (2,), linear=(1,), extra=_solve_columns)
get_op("Cholesky").sbp = _batched((2,), (2,))
get_op("LogMatrixDeterminant").sbp = _batched((2,), (0, 0))
get_op("SelfAdjointEigV2").sbp = _batched((2,), (1, 2))
get_op("Svd").sbp = _batched((2,), (1, 2, 2))
get_op("Qr").sbp = _batched((2,), (2, 2))
