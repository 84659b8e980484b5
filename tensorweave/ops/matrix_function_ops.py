"""Matrix functions and factorizations of ``tf.linalg`` beyond the decompositions: ``expm``,
``sqrtm`` (``tf.linalg.sqrtm`` = ``tf.matrix_square_root``), ``logm``, ``eig``/``eigvals``, ``lu`` and
its solvers, tridiagonal and banded solvers, ``eigh_tridiagonal``.

Primitives (SciPy/LAPACK kernels in ``kernels/cpu/matrix_function_kernels.py``): ``MatrixExponential``
(gradient by the block-matrix identity ``expm([[A^T, G], [0, A^T]])[:n, n:]``, itself differentiable),
``MatrixSquareRoot`` (gradient: the Sylvester equation ``Y^T X + X Y^T = G`` solved as one linear
system), ``MatrixLogarithm``, ``Eig`` (no gradient yet), ``Lu`` (TF's gradient). Everything else is
composed of primitives.

>>> import tensorweave as tw
>>> tw.linalg.expm(tw.zeros([2, 2])).numpy()
array([[1., 0.],
       [0., 1.]], dtype=float32)
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import rules
from tensorweave.ops.decomposition_ops import band_part, eigh, eigvalsh, solve, triangular_solve
from tensorweave.ops.indexing_ops import eye
from tensorweave.ops.linalg_ops import diag, diag_part, matrix_transpose
from tensorweave.ops.math_extra_ops import invert_permutation

__all__ = ["expm", "sqrtm", "matrix_square_root", "logm", "eig", "eigvals", "lu", "lu_solve", "lu_reconstruct",
           "lu_matrix_inverse", "tridiagonal_matmul", "tridiagonal_solve", "banded_triangular_solve",
           "eigh_tridiagonal"]

_ct = convert_to_tensor
_T = matrix_transpose


def _square_input(value, op, allowed):
    x = _ct(value)
    if x.dtype not in allowed:
        raise TypeError(f"{op} needs a {' or '.join(sorted(d.name for d in allowed))} tensor, got {x.dtype.name}. "
                        "Hint: tw.cast it first")
    if x.shape.rank is not None:
        if x.shape.rank < 2:
            raise ValueError(f"{op} needs a tensor of rank >= 2 (matrices), got shape {fmt(x.shape)}")
        m, n = x.shape[-2], x.shape[-1]
        if m is not None and n is not None and m != n:
            raise ValueError(f"{op} needs square matrices, got shape {fmt(x.shape)}")
    return x


def _same(inputs, attrs):
    return inputs[0].shape, inputs[0].dtype


_F = (_dt.float32, _dt.float64)


# ---- expm -------------------------------------------------------------------------------------------
def _expm_grad(op, g):
    a = op.inputs[0]
    at = _T(a)
    zeros = A.zeros_like(at)
    big = A.concat([A.concat([at, g], -1), A.concat([zeros, at], -1)], -2)
    n = a.shape[-1]
    if n is None:
        raise ValueError("expm's gradient needs the matrix size when the graph is built")
    return [expm(big)[..., :n, n:]]


register_op("MatrixExponential", infer=_same, grad=_expm_grad, heavy=True)


def expm(input, name=None):
    """The matrix exponential ``sum_k A^k / k!`` of each square matrix (Padé approximation with
    scaling and squaring)."""
    return execute(get_op("MatrixExponential"), [_square_input(input, "expm", rules.FLOAT)], {}, name)


# ---- sqrtm ------------------------------------------------------------------------------------------
def _sqrtm_grad(op, g):
    # Y = sqrtm(A), dA = Y dY + dY Y; the gradient X solves Y^T X + X Y^T = G, i.e.
    # (I kron Y^T + Y kron I) vec(X) = vec(G) in row-major vec order.
    y = op.outputs[0]
    n = y.shape[-1]
    if n is None:
        raise ValueError("sqrtm's gradient needs the matrix size when the graph is built")
    ident = eye(n, dtype=y.dtype)
    yt = _T(y)
    # row-major vec: vec(Y^T X)[i*n + j] = sum_k Y^T[i, k] X[k, j] -> kron(Y^T, I); vec(X Y^T) -> kron(I, Y)
    k1 = A.reshape(A.expand_dims(A.expand_dims(yt, -1), -3) * A.expand_dims(A.expand_dims(ident, -2), -4),
                   A.concat([A.shape(y)[:-2], [n * n, n * n]], 0))
    k2 = A.reshape(A.expand_dims(A.expand_dims(ident, -1), -3) * A.expand_dims(A.expand_dims(y, -2), -4),
                   A.concat([A.shape(y)[:-2], [n * n, n * n]], 0))
    vec_g = A.reshape(g, A.concat([A.shape(g)[:-2], [n * n, 1]], 0))
    x = solve(k1 + k2, vec_g)
    return [A.reshape(x, A.shape(g))]


register_op("MatrixSquareRoot", infer=_same, grad=_sqrtm_grad, heavy=True)


def sqrtm(input, name=None):
    """The principal square root ``Y`` with ``Y @ Y = input`` (Schur method); a matrix without a real
    square root gives NaN entries, as TF."""
    return execute(get_op("MatrixSquareRoot"), [_square_input(input, "sqrtm", _F)], {}, name)


matrix_square_root = sqrtm


# ---- logm -------------------------------------------------------------------------------------------
register_op("MatrixLogarithm", infer=_same, grad=NOT_DIFFERENTIABLE, heavy=True)


def logm(input, name=None):
    """The principal matrix logarithm; complex inputs only, as TF (no gradient, as TF)."""
    return execute(get_op("MatrixLogarithm"), [_square_input(input, "logm", rules.COMPLEX)], {}, name)


# ---- eig --------------------------------------------------------------------------------------------
def _complex_of(d):
    return _dt.complex128 if d in (_dt.float64, _dt.complex128) else _dt.complex64


def _infer_eig(inputs, attrs):
    x = inputs[0]
    c = _complex_of(x.dtype)
    if x.shape.rank is None:
        return [(TensorShape(None), c), (TensorShape(None), c)]
    return [(x.shape[:-1], c), (x.shape, c)]


register_op("Eig", num_outputs=2, infer=_infer_eig, grad=NOT_DIFFERENTIABLE, heavy=True)


def eig(tensor, name=None):
    """``(e, v)``: the (complex) eigenvalues and unit eigenvectors of each square matrix, in LAPACK's
    order (gradients are not implemented yet)."""
    x = _square_input(tensor, "eig", _F + rules.COMPLEX)
    return tuple(execute(get_op("Eig"), [x], {"compute_v": True}, name))


def eigvals(tensor, name=None):
    """The (complex) eigenvalues of each square matrix."""
    x = _square_input(tensor, "eigvals", _F + rules.COMPLEX)
    return execute(get_op("Eig"), [x], {"compute_v": False}, name)[0]


# ---- lu ---------------------------------------------------------------------------------------------
def _infer_lu(inputs, attrs):
    x = inputs[0]
    p = TensorShape(None) if x.shape.rank is None else x.shape[:-1]
    return [(x.shape, x.dtype), (p, attrs["output_idx_type"])]


def _lu_grad(op, g, gp):
    lu_t, perm = op.outputs
    n = lu_t.shape[-1]
    ident = eye(n if n is not None else A.shape(lu_t)[-1], dtype=lu_t.dtype)
    low = band_part(lu_t, -1, 0) - diag(diag_part(lu_t)) + ident
    up = band_part(lu_t, 0, -1)
    gl = band_part(g, -1, 0) - diag(diag_part(g))
    gu = band_part(g, 0, -1)
    middle = (band_part(M.matmul(low, gl, transpose_a=True), -1, 0) - diag(diag_part(M.matmul(low, gl, transpose_a=True)))
              + band_part(M.matmul(gu, up, transpose_b=True), 0, -1))
    # L^{-T} middle U^{-T}
    left = triangular_solve(low, middle, lower=True, adjoint=True)
    grad_perm = _T(triangular_solve(up, _T(left), lower=False, adjoint=False))
    batch = perm.shape.rank - 1 if perm.shape.rank is not None else 0
    return [A.gather(grad_perm, invert_permutation(perm) if batch == 0 else _batched_invert(perm), axis=-2,
                     batch_dims=batch)]


def _batched_invert(perm):
    n = perm.shape[-1]
    flat = A.reshape(perm, [-1, n])
    inv_rows = [invert_permutation(flat[i]) for i in range(flat.shape[0])]
    return A.reshape(A.stack(inv_rows), A.shape(perm))


register_op("Lu", num_outputs=2, infer=_infer_lu, grad=_lu_grad, heavy=True)


def lu(input, output_idx_type=_dt.int32, name=None):
    """``(lower_upper, perm)``: the LU factorization with partial pivoting, ``input[perm] = L @ U`` with
    ``L`` unit lower triangular (its strict lower part and ``U`` share ``lower_upper``)."""
    x = _square_input(input, "lu", _F)
    return tuple(execute(get_op("Lu"), [x], {"output_idx_type": _dt.as_dtype(output_idx_type)}, name))


def _lu_parts(lower_upper):
    lu_t = _ct(lower_upper)
    n = lu_t.shape[-1]
    ident = eye(n if n is not None else A.shape(lu_t)[-1], dtype=lu_t.dtype)
    low = band_part(lu_t, -1, 0) - diag(diag_part(lu_t)) + ident
    return low, band_part(lu_t, 0, -1)


def _batch_dims(perm):
    return max(_ct(perm).shape.rank - 1, 0)


def lu_reconstruct(lower_upper, perm, validate_args=False, name=None):
    """The matrix ``input`` of :func:`lu`: ``(L @ U)`` with its rows put back in place."""
    low, up = _lu_parts(lower_upper)
    x = M.matmul(low, up)
    perm = _ct(perm)
    b = _batch_dims(perm)
    return A.gather(x, invert_permutation(perm) if b == 0 else _batched_invert(perm), axis=-2, batch_dims=b,
                    name=name)


def lu_solve(lower_upper, perm, rhs, validate_args=False, name=None):
    """Solves ``input @ x = rhs`` from :func:`lu`'s factors: ``U^{-1} L^{-1} rhs[perm]``."""
    low, up = _lu_parts(lower_upper)
    perm = _ct(perm)
    rhs = _ct(rhs)
    b = _batch_dims(perm)
    if b:
        rhs = rhs + A.zeros_like(low[..., :1])  # broadcast rhs to the factors' batch
    permuted = A.gather(rhs, perm, axis=-2, batch_dims=b)
    y = triangular_solve(low, permuted, lower=True)
    return triangular_solve(up, y, lower=False, name=name)


def lu_matrix_inverse(lower_upper, perm, validate_args=False, name=None):
    """The inverse of :func:`lu`'s input from its factors."""
    low, _ = _lu_parts(lower_upper)
    n = low.shape[-1]
    ident = eye(n if n is not None else A.shape(low)[-1], batch_shape=low.shape[:-2].as_list() or None,
                dtype=low.dtype)
    return lu_solve(lower_upper, perm, ident, name=name)


# ---- tridiagonal and banded -------------------------------------------------------------------------
def _tridiag_dense(diagonals, diagonals_format, op):
    """The dense ``[..., n, n]`` tridiagonal matrix of TF's three diagonal formats."""
    if diagonals_format == "matrix":
        return band_part(_ct(diagonals), 1, 1)
    if diagonals_format == "sequence":
        sup, main, sub = (_ct(d) for d in diagonals)
    elif diagonals_format == "compact":
        d = _ct(diagonals)
        if d.shape.rank is not None and (d.shape.rank < 2 or d.shape[-2] not in (None, 3)):
            raise ValueError(f"{op}: compact diagonals must have shape [..., 3, n], got {fmt(d.shape)}")
        sup, main, sub = d[..., 0, :], d[..., 1, :], d[..., 2, :]
    else:
        raise ValueError(f"{op}: Unrecognized diagonals_format: {diagonals_format}")
    n = main.shape[-1]
    if n is None:
        raise ValueError(f"{op}: the matrix size must be known when the graph is built")
    up = A.constant(np.eye(n, k=1).astype(main.dtype.np_dtype))
    down = A.constant(np.eye(n, k=-1).astype(main.dtype.np_dtype))
    # sup[i] at (i, i + 1), sub[i] at (i, i - 1)
    return diag(main) + M.matmul(diag(sup), up) + M.matmul(diag(sub), down)


def tridiagonal_matmul(diagonals, rhs, diagonals_format="compact", name=None):
    """``T @ rhs`` for the tridiagonal ``T`` given by its diagonals (TF's formats: ``"compact"``
    ``[..., 3, n]`` super/main/sub, ``"sequence"``, ``"matrix"``)."""
    return M.matmul(_tridiag_dense(diagonals, diagonals_format, "tridiagonal_matmul"), _ct(rhs), name=name)


def tridiagonal_solve(diagonals, rhs, diagonals_format="compact", transpose_rhs=False, conjugate_rhs=False,
                      name=None, partial_pivoting=True, perturb_singular=False):
    """Solves ``T x = rhs`` for the tridiagonal ``T`` (``rhs`` ``[..., n, k]``, or ``[..., n]`` then a
    vector result; ``transpose_rhs`` takes ``rhs`` as ``[..., k, n]``, the result stays ``[..., n, k]``)."""
    t = _tridiag_dense(diagonals, diagonals_format, "tridiagonal_solve")
    r = _ct(rhs)
    vector = r.shape.rank == t.shape.rank - 1
    if vector:
        r = A.expand_dims(r, -1)
    elif transpose_rhs:
        r = _T(r)
    if conjugate_rhs and r.dtype.is_complex:
        from tensorweave.ops.complex_ops import conj
        r = conj(r)
    x = solve(t, r)
    if vector:
        return A.squeeze(x, [-1], name=name)
    return x   # [..., n, k] also when rhs came transposed (TF's rule)


def banded_triangular_solve(bands, rhs, lower=True, adjoint=False, name=None):
    """Solves a banded triangular system. ``bands`` ``[..., k, n]`` holds the diagonal and ``k - 1``
    sub-diagonals (``lower``: diagonal first, sub-diagonals padded on the left) or super-diagonals
    (diagonal last, super-diagonals padded on the right), TF's LEFT_RIGHT alignment."""
    b = _ct(bands)
    k, n = b.shape[-2], b.shape[-1]
    if k is None or n is None:
        raise ValueError("banded_triangular_solve: the band sizes must be known when the graph is built")
    dense = None
    for r in range(k):
        off = r if lower else k - 1 - r            # distance from the diagonal
        row = b[..., r, :]
        # lower: (j, j - off) = row[j]; upper: (j, j + off) = row[j]
        part = M.matmul(diag(row), A.constant(np.eye(n, k=-off if lower else off).astype(b.dtype.np_dtype)))
        dense = part if dense is None else dense + part
    return triangular_solve(dense, _ct(rhs), lower=lower, adjoint=adjoint, name=name)


def eigh_tridiagonal(alpha, beta, eigvals_only=True, select="a", select_range=None, tol=None, name=None):
    """Eigenvalues (ascending; and eigenvectors unless ``eigvals_only``) of the real symmetric
    tridiagonal matrix with diagonal ``alpha`` and off-diagonal ``beta``; ``select`` ``"a"`` (all),
    ``"i"`` (indices ``select_range``, inclusive) or ``"v"`` (values in ``(lo, hi]``, eager only)."""
    a = _ct(alpha)
    b = M.cast(_ct(beta), a.dtype)
    n = a.shape[-1]
    if a.shape.rank != 1 or b.shape.rank != 1:
        raise ValueError(f"eigh_tridiagonal: alpha and beta must be vectors, got shapes {fmt(a.shape)}, "
                         f"{fmt(b.shape)}")
    if n is not None and b.shape[-1] is not None and b.shape[-1] != n - 1:
        raise ValueError(f"eigh_tridiagonal: beta must have n - 1 = {n - 1} entries, got {b.shape[-1]}")
    pad = A.zeros_like(a[:1])
    t = _tridiag_dense([A.concat([b, pad], 0), a, A.concat([pad, b], 0)], "sequence", "eigh_tridiagonal")
    if select not in ("a", "i", "v"):
        raise ValueError(f"eigh_tridiagonal: select must be 'a', 'i' or 'v', got {select!r}")
    if eigvals_only:
        e, v = eigvalsh(t), None
    else:
        e, v = eigh(t)
    if select == "i":
        lo, hi = (int(i) for i in select_range)
        e = e[lo:hi + 1]
        v = None if v is None else v[:, lo:hi + 1]
    elif select == "v":
        lo, hi = select_range
        keep = np.nonzero((e.numpy() > lo) & (e.numpy() <= hi))[0]
        e = A.gather(e, keep)
        v = None if v is None else A.gather(v, keep, axis=1)
    return e if eigvals_only else (e, v)


# SBP: each matrix of a batch is independent, so a split batch axis splits every output (the
# brute-force checker in tests/test_sbp_checker.py runs these from the op table)
from tensorweave.core.sbp_rules import batched_rule as _batched  # noqa: E402
for _op in ("MatrixExponential", "MatrixSquareRoot", "MatrixLogarithm"):
    get_op(_op).sbp = _batched((2,), (2,))
get_op("Eig").sbp = _batched((2,), (1, 2))
get_op("Lu").sbp = _batched((2,), (2, 1))
