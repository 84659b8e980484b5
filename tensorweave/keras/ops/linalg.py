"""``keras.ops.linalg``: determinants, inverses, solves and norms (integer inputs give ``floatx()``).

>>> from tensorweave import keras
>>> keras.ops.solve([[2.0, 0.0], [0.0, 4.0]], [[2.0], [8.0]]).numpy().tolist()
[[1.0], [2.0]]
"""
import numpy as np

import tensorweave as tw
from tensorweave.keras.ops._dtypes import cast_to, promote, result_type, to_tensor
from tensorweave.keras.ops._symbolic import export


def _f(x):
    x = to_tensor(x)
    return cast_to(x, result_type(x.dtype, float))


def det(x):
    return tw.linalg.det(_f(x))


def inv(x):
    return tw.linalg.inv(_f(x))


def solve(a, b):
    a, b = promote(a, b, extra=(float,))
    vector = b.shape.rank == a.shape.rank - 1
    if vector:
        b = tw.expand_dims(b, -1)
    out = tw.matmul(tw.linalg.inv(a), b)
    return tw.squeeze(out, -1) if vector else out


def solve_triangular(a, b, lower=False):
    a, b = promote(a, b, extra=(float,))
    n = a.shape.as_list()[-1]
    mask = np.tri(n, n, 0, dtype=bool) if lower else np.tri(n, n, -1, dtype=bool) == 0
    a = tw.where(tw.constant(mask), a, tw.zeros_like(a))  # only the named triangle is read
    return solve(a, b)


def slogdet(x):
    d = det(x)
    return tw.sign(d), tw.log(tw.abs(d))


def norm(x, ord=None, axis=None, keepdims=False):
    """NumPy's ``norm``: Frobenius / 2-norm by default; ``ord`` as in ``numpy.linalg.norm``."""
    x = _f(x)
    r = x.shape.rank
    if axis is None:
        axes = None if ord is None else list(range(r))
    else:
        axes = [int(axis)] if np.ndim(axis) == 0 else [int(a) for a in axis]
    if ord is None:
        return tw.sqrt(tw.reduce_sum(tw.square(x), axis=axes, keepdims=keepdims))
    if axes is not None and len(axes) == 2:
        if ord == "fro":
            return tw.sqrt(tw.reduce_sum(tw.square(x), axis=axes, keepdims=keepdims))
        if ord in (1, -1, np.inf, -np.inf):
            row, col = axes
            if ord in (np.inf, -np.inf):
                row, col = col, row
            s = tw.reduce_sum(tw.abs(x), axis=row, keepdims=True)
            red = tw.reduce_max if ord > 0 else tw.reduce_min
            out = red(s, axis=col, keepdims=True)
            return out if keepdims else tw.squeeze(out, axes)
        if ord == 2:
            return tw.norm(x, ord=2, axis=axes, keepdims=keepdims)
        raise ValueError(f"norm: ord={ord!r} is not supported for matrix norms (None, 'fro', 1, -1, 2, inf, -inf)")
    if isinstance(ord, str):
        raise ValueError(f"norm: ord={ord!r} is only valid for matrix norms")
    a = tw.abs(x)
    if ord == np.inf:
        return tw.reduce_max(a, axis=axes, keepdims=keepdims)
    if ord == -np.inf:
        return tw.reduce_min(a, axis=axes, keepdims=keepdims)
    if ord == 0:
        return tw.reduce_sum(tw.cast(tw.not_equal(x, 0), x.dtype), axis=axes, keepdims=keepdims)
    if ord == 1:
        return tw.reduce_sum(a, axis=axes, keepdims=keepdims)
    if ord == 2:
        return tw.sqrt(tw.reduce_sum(tw.square(x), axis=axes, keepdims=keepdims))
    p = float(ord)
    return tw.pow(tw.reduce_sum(tw.pow(a, p), axis=axes, keepdims=keepdims), 1.0 / p)




def jvp(fun, primals, tangents, has_aux=False):
    """Forward-mode derivative ``(fun(*primals), J @ tangents)`` computed by reverse mode twice: the
    vector-Jacobian product is linear in its cotangent, so differentiating it again recovers ``J v``."""
    xs = [to_tensor(p) for p in primals]
    vs = [cast_to(v, x.dtype) for v, x in zip(tangents, xs)]
    with tw.GradientTape(persistent=True) as outer:
        with tw.GradientTape() as inner:
            for x in xs:
                inner.watch(x)
            result = fun(*xs)
            out, aux = result if has_aux else (result, None)
        u = tw.zeros_like(out)
        outer.watch(u)
        grads = inner.gradient(out, xs, output_gradients=u)
        dot = tw.add_n([tw.reduce_sum(g * v) for g, v in zip(grads, vs) if g is not None])
    jv = outer.gradient(dot, u)
    jv = tw.zeros_like(out) if jv is None else jv
    return (out, jv, aux) if has_aux else (out, jv)


# ---- decompositions ---------------------------------------------------------------------------------
def cholesky(x, upper=False):
    from tensorweave.ops import decomposition_ops as D
    ell = D.cholesky(_f(x))
    return tw.linalg.matrix_transpose(ell) if upper else ell


def cholesky_inverse(x, upper=False):
    """The inverse of ``L @ L^T`` (``U^T @ U`` with ``upper``) from its triangular factor ``x``."""
    f = _f(x)
    ell = tw.linalg.matrix_transpose(f) if upper else f
    inv = tw.linalg.inv(ell)
    return tw.matmul(inv, inv, transpose_a=True)


def eigh(x):
    from tensorweave.ops import decomposition_ops as D
    return D.eigh(_f(x))


def qr(x, mode="reduced"):
    from tensorweave.ops import decomposition_ops as D
    if mode not in ("reduced", "complete"):
        raise ValueError(f"qr: mode must be 'reduced' or 'complete', got {mode!r}")
    return D.qr(_f(x), full_matrices=mode == "complete")


def svd(x, full_matrices=True, compute_uv=True):
    """``u, s, vh`` (NumPy's order, as Keras) or just ``s``."""
    from tensorweave.ops import decomposition_ops as D
    x = _f(x)
    m, n = x.shape.as_list()[-2:]
    # the full and reduced forms coincide for square matrices: ask for the full one only when it differs
    s, u, v = D.svd(x, full_matrices=bool(full_matrices and compute_uv and m != n))
    return (u, s, tw.linalg.matrix_transpose(v)) if compute_uv else s


def _rcond_cut(s, m, n, rcond):
    eps = float(np.finfo(s.dtype.np_dtype).eps)
    rc = max(m, n) * eps if rcond is None else rcond
    return tw.reduce_max(s, axis=-1, keepdims=True) * rc


def pinv(x, rcond=None):
    """Moore-Penrose pseudo-inverse from the SVD (small singular values, relative to ``rcond``, dropped)."""
    x = _f(x)
    m, n = x.shape.as_list()[-2:]
    u, s, vh = svd(x, full_matrices=False)
    cut = _rcond_cut(s, m, n, 1e-15 if rcond is None else rcond)
    keep = tw.greater(s, cut)
    sinv = tw.where(keep, 1.0 / tw.where(keep, s, tw.ones_like(s)), tw.zeros_like(s))
    return tw.matmul(tw.linalg.matrix_transpose(vh) * tw.expand_dims(sinv, -2), u, transpose_b=True)


def lstsq(a, b, rcond=None):
    """The least-squares solution of ``a @ x = b`` (minimum norm when ``a`` is rank deficient)."""
    a, b = promote(a, b, extra=(float,))
    vector = b.shape.rank == 1
    if vector:
        b = tw.expand_dims(b, -1)
    out = tw.matmul(pinv(a, rcond), b)
    return tw.squeeze(out, -1) if vector else out


def matrix_rank(x, tol=None):
    x = _f(x)
    m, n = x.shape.as_list()[-2:]
    s = svd(x, compute_uv=False)
    cut = _rcond_cut(s, m, n, None) if tol is None else tw.cast(tol, s.dtype)
    return tw.reduce_sum(tw.cast(tw.greater(s, cut), tw.int32), axis=-1)


export(globals(), skip={"promote", "result_type", "cast_to", "to_tensor", "export"})
