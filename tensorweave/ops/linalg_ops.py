"""Linear algebra: einsum, tensordot, norm; and (under ``tw.linalg`` only) trace, diag,
diag_part, set_diag, matrix_transpose/adjoint, cross, inv, det.

>>> import tensorweave as tw
>>> a = tw.constant([[1.0, 2.0], [3.0, 4.0]])
>>> tw.einsum("ij,jk->ik", a, a).numpy().tolist()
[[7.0, 10.0], [15.0, 22.0]]
>>> float(tw.linalg.trace(a)), float(tw.norm(tw.constant([3.0, 4.0])))
(5.0, 5.0)
"""
import string

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules
from tensorweave.core.convert import convert_like, convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import get_op, register_op
from tensorweave.core.shape import TensorShape, broadcast_static, fmt
from tensorweave.core.tensor import EagerTensor, Tensor
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import rules

# Only the names TensorFlow also has at top level (tf.einsum ...); tensorweave/linalg.py adds
# the tf.linalg-only ones explicitly.
__all__ = ["einsum", "tensordot", "norm"]

_ct = convert_to_tensor
_LETTERS = string.ascii_letters
_ELL = "..."


# ---- einsum --------------------------------------------------------------------------------
def _tokens(term, equation):
    """``"a...bc"`` -> ``["a", "...", "b", "c"]``."""
    out = []
    i = 0
    while i < len(term):
        if term.startswith(_ELL, i):
            if _ELL in out:
                raise ValueError(f"einsum: equation {equation!r} uses '...' twice in the term {term!r}")
            out.append(_ELL)
            i += 3
        elif term[i] in _LETTERS:
            out.append(term[i])
            i += 1
        else:
            raise ValueError(f"einsum: invalid character {term[i]!r} in equation {equation!r}; "
                             "subscripts are letters a-z, A-Z and '...'")
    return out


def _parse(equation, n):
    """Input terms and output term as token lists (the output made explicit)."""
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise ValueError(f"einsum: equation {equation!r} has more than one '->'")
    lhs, out = eq.split("->") if "->" in eq else (eq, None)
    terms = [_tokens(t, equation) for t in lhs.split(",")]
    if len(terms) != n:
        raise ValueError(f"einsum: equation {equation!r} has {len(terms)} input term(s) but {n} operand(s) "
                         "were given")
    labels = [c for t in terms for c in t if c != _ELL]
    has_ell = any(_ELL in t for t in terms)
    if out is None:
        # Implicit output (NumPy's rule): '...' first, then labels used exactly once, sorted.
        out = ([_ELL] if has_ell else []) + sorted(c for c in set(labels) if labels.count(c) == 1)
    else:
        out = _tokens(out, equation)
        for c in out:
            if out.count(c) > 1:
                raise ValueError(f"einsum: output subscript {c!r} appears more than once in {equation!r}")
            if c == _ELL and not has_ell:
                raise ValueError(f"einsum: the output of {equation!r} has '...' but no input does")
            if c != _ELL and c not in labels:
                raise ValueError(f"einsum: output subscript {c!r} of {equation!r} does not appear in any input")
    return terms, out


def _unparse(terms, out):
    return ",".join("".join(t) for t in terms) + "->" + "".join(out)


def _infer_einsum(inputs, attrs):
    d = rules.same_dtype(inputs, "einsum operands")
    if d is _dt.bool_ or not d.is_numeric:
        raise TypeError(f"einsum does not support dtype {d.name}")
    eq = attrs["equation"]
    terms, out = _parse(eq, len(inputs))
    sizes = {}
    ell = TensorShape([])
    ell_known = True
    for k, (t, x) in enumerate(zip(terms, inputs)):
        letters = [c for c in t if c != _ELL]
        r = x.shape.rank
        if r is None:
            ell_known &= _ELL not in t
            continue
        if (r != len(letters) and _ELL not in t) or r < len(letters):
            raise ValueError(f"einsum: operand {k} has rank {r} (shape {fmt(x.shape)}) but its subscripts "
                             f"{''.join(t)!r} in {eq!r} name {len(letters)} dimension(s)")
        dims = x.shape.as_list()
        if _ELL in t:
            p, ne = t.index(_ELL), r - len(letters)
            try:
                ell = broadcast_static(ell, dims[p:p + ne])
            except ValueError:
                raise ValueError(f"einsum: the '...' dimensions of operand {k} {fmt(dims[p:p + ne])} do not "
                                 f"broadcast with those of the other operands {fmt(ell)}") from None
            dims = dims[:p] + dims[p + ne:]
        for c, dd in zip(letters, dims):
            if dd is None:
                continue
            if sizes.get(c, dd) != dd:
                raise ValueError(f"einsum: subscript {c!r} in {eq!r} has size {sizes[c]} in one place and {dd} in "
                                 f"operand {k} (shapes: {', '.join(fmt(i.shape) for i in inputs)})")
            sizes[c] = dd
    if _ELL in out and not ell_known:
        return TensorShape(None), d
    dims = []
    for c in out:
        dims.extend(ell.as_list() if c == _ELL else [sizes.get(c)])
    return TensorShape(dims), d


def _einsum_grad(op, g):
    terms, out = _parse(op.attrs["equation"], len(op.inputs))
    xs = op.inputs
    used = {c for t in terms for c in t} | set(out)
    fresh = iter(c for c in _LETTERS if c not in used)
    grads = []
    for i, x in enumerate(xs):
        if not x.dtype.is_floating:
            grads.append(None)
            continue
        term = terms[i]
        sub = [out] + [t for j, t in enumerate(terms) if j != i]
        vals = [_ct(g)] + [v for j, v in enumerate(xs) if j != i]  # _ct: densifies an IndexedSlices
        avail = {c for t in sub for c in t}
        # Labels only x has were summed away; an operand of ones brings their extent back.
        missing = []
        for c in term:
            if c != _ELL and c not in avail and c not in missing:
                missing.append(c)
        if missing:
            sub.append(missing)
            vals.append(A.ones([_label_size(x, term, c) for c in missing], dtype=x.dtype))
        # A repeated label (a diagonal) gets a fresh label tied to the first by an identity matrix.
        target, seen = [], set()
        for c in term:
            if c != _ELL and c in seen:
                f = next(fresh)
                sub.append([c, f])
                n = _label_size(x, term, c)
                vals.append(_eye_like(n, x.dtype))
                target.append(f)
            else:
                seen.add(c)
                target.append(c)
        drop_ell = _ELL in term and _ELL not in avail
        if drop_ell:
            target.remove(_ELL)
        gx = execute(_EINSUM, vals, {"equation": _unparse(sub, target)})
        grads.append(_fit(gx, x, term.index(_ELL) if drop_ell else None))
    return grads


def _label_size(x, term, c):
    """Size of label ``c`` in operand ``x`` (an int when static, else a scalar tensor)."""
    pos = term.index(c)
    if _ELL in term and pos > term.index(_ELL):
        pos -= len(term)  # after '...' the token's dimension is counted from the end
    if x.shape.rank is not None and x.shape[pos] is not None:
        return x.shape[pos]
    return A.shape(x)[pos]


def _eye_like(n, dtype):
    if isinstance(n, int):
        return A.constant(np.eye(n, dtype=dtype.np_dtype))
    from tensorweave.ops.indexing_ops import eye
    return eye(n, dtype=dtype)


def _fit(gx, x, ell_pos):
    """Gives an einsum gradient ``x``'s shape: re-inserts summed-away '...' dimensions,
    broadcasts up and sums broadcast '...' dimensions down."""
    if ell_pos is not None and x.shape.rank is not None:
        n_ell = x.shape.rank - (gx.shape.rank or 0)
        for _ in range(n_ell):
            gx = A.expand_dims(gx, ell_pos)
    if gx.shape.is_fully_defined() and x.shape.is_fully_defined() and gx.shape == x.shape:
        return gx
    if x.shape.is_fully_defined() and gx.shape.rank is not None:
        target = broadcast_static(gx.shape, x.shape)
        if target != gx.shape:
            gx = A.broadcast_to(gx, target)
    else:
        gx = gx + A.zeros_like(x)
    return A.sum_to_like(gx, x)


register_op("Einsum", infer=_infer_einsum, grad=_einsum_grad, heavy=True, sbp=sbp_rules.einsum_rule())
_EINSUM = get_op("Einsum")


def einsum(equation, *inputs, **kwargs):
    """Einstein summation: ``"ij,jk->ik"`` is a matrix product, ``"bij,bjk->bik"`` a batched one,
    ``"...ij->...ji"`` a transpose, ``"ii->"`` a trace, ``"ii->i"`` a diagonal, ``"ij->"`` a
    sum. Without ``->`` the output is the labels used once, in alphabetical order.

    Operands must share one dtype; labelled dimensions must match exactly, '...' dimensions
    broadcast.

    >>> import tensorweave as tw
    >>> x = tw.reshape(tw.range(6.0), [2, 3])
    >>> tw.einsum("ij->j", x).numpy().tolist(), tw.einsum("ij,ij", x, x).numpy().item()
    ([3.0, 5.0, 7.0], 55.0)
    """
    name = kwargs.pop("name", None)
    kwargs.pop("optimize", None)
    if kwargs:
        raise TypeError(f"einsum: unexpected keyword arguments {sorted(kwargs)}")
    if not isinstance(equation, str):
        raise TypeError(f"einsum: the equation must be a string, got {equation!r}")
    if not inputs:
        raise ValueError("einsum needs at least one operand")
    first = next((t for t in inputs if isinstance(t, Tensor)), None)
    xs = [t if isinstance(t, Tensor) else (convert_like(t, first) if first is not None else _ct(t)) for t in inputs]
    terms, out = _parse(equation, len(xs))
    if any(x.dtype is not xs[0].dtype for x in xs):
        rules.same_dtype(xs, "einsum operands")
    if not xs[0].dtype.is_numeric:
        raise TypeError(f"einsum does not support dtype {xs[0].dtype.name}")
    return execute(_EINSUM, xs, {"equation": _unparse(terms, out)}, name)


def tensordot(a, b, axes, name=None):
    """Sums products of ``a`` and ``b`` over ``axes``: an int ``N`` (the last N axes of ``a``
    with the first N of ``b``) or a pair of axis lists.

    >>> import tensorweave as tw
    >>> tw.tensordot(tw.ones([2, 3]), tw.ones([3, 4]), 1).shape
    TensorShape([2, 4])
    """
    a, b = M._operands(a, b)
    ra, rb = a.shape.rank, b.shape.rank
    if ra is None or rb is None:
        raise ValueError("tensordot: the ranks of both operands must be known statically")
    if isinstance(axes, EagerTensor):
        axes = axes.numpy().tolist()
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if n < 0 or n > min(ra, rb):
            raise ValueError(f"tensordot: axes={n} must be in [0, {min(ra, rb)}] for operands of shapes "
                             f"{fmt(a.shape)} and {fmt(b.shape)}")
        ax_a, ax_b = list(range(ra - n, ra)), list(range(n))
    else:
        if len(axes) != 2:
            raise ValueError(f"tensordot: axes must be an int or a pair of axis lists, got {axes!r}")
        ax_a, ax_b = ([int(v)] if np.ndim(v) == 0 else [int(w) for w in v] for v in axes)
        if len(ax_a) != len(ax_b):
            raise ValueError(f"tensordot: axes lists {ax_a} and {ax_b} have different lengths")
        ax_a = [rules.normalize_axis(v, ra) for v in ax_a]
        ax_b = [rules.normalize_axis(v, rb) for v in ax_b]
    if ra + rb - len(ax_a) > len(_LETTERS):
        raise ValueError("tensordot: too many dimensions")
    la = list(_LETTERS[:ra])
    lb = list(_LETTERS[ra:ra + rb])
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = [c for k, c in enumerate(la) if k not in ax_a] + [c for k, c in enumerate(lb) if k not in ax_b]
    return execute(_EINSUM, [a, b], {"equation": _unparse([la, lb], out)}, name)


# ---- diagonals, trace, transpose -------------------------------------------------------------
def _need_rank(x, n, op_name):
    if x.shape.rank is not None and x.shape.rank < n:
        raise ValueError(f"{op_name} needs a tensor of rank >= {n}, got shape {fmt(x.shape)}")


def _infer_diag(inputs, attrs):
    v = inputs[0]
    _need_rank(v, 1, "diag")
    if v.shape.rank is None:
        return TensorShape(None), v.dtype
    return TensorShape(v.shape.as_list() + [v.shape[-1]]), v.dtype


def _infer_diag_part(inputs, attrs):
    x = inputs[0]
    _need_rank(x, 2, "diag_part")
    if x.shape.rank is None:
        return TensorShape(None), x.dtype
    m, n = x.shape[-2], x.shape[-1]
    k = None if m is None or n is None else min(m, n)
    return TensorShape(x.shape.as_list()[:-2] + [k]), x.dtype


def _infer_set_diag(inputs, attrs):
    x, d = inputs
    rules.same_dtype([x, d], "input and diagonal")
    want = _infer_diag_part([x], attrs)[0]
    if not want.is_compatible_with(d.shape):
        raise ValueError(f"set_diag: diagonal must have shape {fmt(want)} for an input of shape {fmt(x.shape)}, "
                         f"got {fmt(d.shape)}")
    return x.shape, x.dtype


register_op("MatrixDiag", infer=_infer_diag, grad=lambda op, g: [diag_part(g)])
register_op("MatrixDiagPart", infer=_infer_diag_part,
            grad=lambda op, g: [set_diag(A.zeros_like(op.inputs[0]), g)])
register_op("MatrixSetDiag", infer=_infer_set_diag,
            grad=lambda op, g: [set_diag(g, A.zeros_like(op.inputs[1])), diag_part(g)])


def diag(diagonal, name="diag"):
    """Matrices with ``diagonal`` (shape ``[..., n]``) on the main diagonal: ``[..., n, n]``.

    >>> import tensorweave as tw
    >>> tw.linalg.diag(tw.constant([1, 2])).numpy().tolist()
    [[1, 0], [0, 2]]
    """
    return execute(get_op("MatrixDiag"), [_ct(diagonal)], {}, name)


def diag_part(input, name="diag_part"):
    """The main diagonals of the matrices in ``input`` (``[..., m, n]`` -> ``[..., min(m, n)]``).

    >>> import tensorweave as tw
    >>> tw.linalg.diag_part(tw.constant([[1, 2, 3], [4, 5, 6]])).numpy().tolist()
    [1, 5]
    """
    return execute(get_op("MatrixDiagPart"), [_ct(input)], {}, name)


def set_diag(input, diagonal, name="set_diag"):
    """``input`` with its main diagonals replaced by ``diagonal``.

    >>> import tensorweave as tw
    >>> tw.linalg.set_diag(tw.zeros([2, 2]), [1.0, 2.0]).numpy().tolist()
    [[1.0, 0.0], [0.0, 2.0]]
    """
    x = _ct(input)
    return execute(get_op("MatrixSetDiag"), [x, convert_like(diagonal, x)], {}, name)


def trace(x, name=None):
    """Sum of the main diagonal of each matrix in ``x`` (``[..., m, n]`` -> ``[...]``).

    >>> import tensorweave as tw
    >>> tw.linalg.trace(tw.constant([[1.0, 2.0], [3.0, 4.0]])).numpy().item()
    5.0
    """
    from tensorweave.ops.reduce_ops import reduce_sum
    return reduce_sum(diag_part(x), axis=-1, name=name)


def matrix_transpose(a, name="matrix_transpose", conjugate=False):
    """Swaps the last two dimensions of ``a``.

    >>> import tensorweave as tw
    >>> tw.linalg.matrix_transpose(tw.ones([2, 3, 4])).shape
    TensorShape([2, 4, 3])
    """
    x = _ct(a)
    r = x.shape.rank
    if r is None:
        raise ValueError("matrix_transpose: the rank of the input must be known statically")
    _need_rank(x, 2, "matrix_transpose")
    return A.transpose(x, list(range(r - 2)) + [r - 1, r - 2], name=name)


def adjoint(matrix, name=None):
    """The conjugate transpose of the last two dimensions (tensors here are real).

    >>> import tensorweave as tw
    >>> tw.linalg.adjoint(tw.constant([[1, 2]])).numpy().tolist()
    [[1], [2]]
    """
    return matrix_transpose(matrix, name=name or "adjoint")


def cross(a, b, name=None):
    """The cross product of 3-vectors along the last dimension.

    >>> import tensorweave as tw
    >>> tw.linalg.cross(tw.constant([1.0, 0.0, 0.0]), tw.constant([0.0, 1.0, 0.0])).numpy().tolist()
    [0.0, 0.0, 1.0]
    """
    a, b = M._operands(a, b)
    for t, what in ((a, "a"), (b, "b")):
        if t.shape.rank == 0 or (t.shape.rank is not None and t.shape[-1] not in (None, 3)):
            raise ValueError(f"cross: the last dimension of {what} must be 3, got shape {fmt(t.shape)}")
    a0, a1, a2 = (a[..., i] for i in range(3))
    b0, b1, b2 = (b[..., i] for i in range(3))
    return A.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1, name=name or "cross")


# ---- inverse and determinant -------------------------------------------------------------------
def _infer_square(what, reduce):
    def infer(inputs, attrs):
        x = inputs[0]
        rules.check_dtype(x, _dt.FLOATING, what)
        _need_rank(x, 2, what)
        if x.shape.rank is None:
            return TensorShape(None), x.dtype
        m, n = x.shape[-2], x.shape[-1]
        if m is not None and n is not None and m != n:
            raise ValueError(f"{what} needs square matrices in the last two dimensions, got shape {fmt(x.shape)}")
        return (TensorShape(x.shape.as_list()[:-2]) if reduce else x.shape), x.dtype
    return infer


def _inv_grad(op, g):
    ainv = op.outputs[0]
    # d(A^-1) = -A^-1 dA A^-1, so dL/dA = -A^-T g A^-T.
    return [M.negative(M.matmul(ainv, M.matmul(g, ainv, transpose_b=True), transpose_a=True))]


def _det_grad(op, g):
    x, det_ = op.inputs[0], op.outputs[0]
    scale = A.expand_dims(A.expand_dims(g * det_, -1), -1)
    return [scale * matrix_transpose(inv(x))]


register_op("MatrixInverse", infer=_infer_square("inv", False), grad=_inv_grad, heavy=True)
register_op("MatrixDeterminant", infer=_infer_square("det", True), grad=_det_grad, heavy=True)


def inv(input, adjoint=False, name=None):
    """The inverse of each square matrix in ``input``; a singular matrix is an error.

    >>> import tensorweave as tw
    >>> tw.linalg.inv(tw.constant([[2.0, 0.0], [0.0, 4.0]])).numpy().tolist()
    [[0.5, 0.0], [0.0, 0.25]]
    """
    x = _float_matrix(input, "inv")
    out = execute(get_op("MatrixInverse"), [x], {}, name)
    return matrix_transpose(out) if adjoint else out


def det(input, name=None):
    """The determinant of each square matrix in ``input`` (``[..., n, n]`` -> ``[...]``).

    >>> import tensorweave as tw
    >>> tw.linalg.det(tw.constant([[1.0, 2.0], [3.0, 4.0]])).numpy().round(6).item()
    -2.0
    """
    return execute(get_op("MatrixDeterminant"), [_float_matrix(input, "det")], {}, name)


def _float_matrix(value, op_name):
    x = _ct(value)
    if not x.dtype.is_floating:  # LAPACK would silently return float64 for integer input
        raise TypeError(f"{op_name} needs a float tensor, got {x.dtype.name}. Hint: tw.cast it first")
    return x


# ---- norms ---------------------------------------------------------------------------------
register_op("MatrixSpectralNorm", infer=lambda i, a: (TensorShape(None) if i[0].shape.rank is None else
                                                      TensorShape(i[0].shape.as_list()[:-2]), i[0].dtype),
            grad=lambda op, g: [A.expand_dims(A.expand_dims(g, -1), -1) *
                                execute(get_op("MatrixSpectralNormGrad"), [op.inputs[0]], {})])
# Differentiating u1 v1^T again would need the full SVD derivative: left undefined (an error).
register_op("MatrixSpectralNormGrad", infer=lambda i, a: (i[0].shape, i[0].dtype), grad=None)


def _is_inf(o):
    return not isinstance(o, str) and isinstance(o, (int, float, np.number)) and np.isinf(o) and o > 0


def norm(tensor, ord="euclidean", axis=None, keepdims=None, name=None):
    """Vector or matrix norm.

    With ``axis`` None or an int, a vector norm (over all entries when None): ``ord`` is
    ``'euclidean'`` (= ``'fro'`` = 2), 1, ``np.inf`` or any ``p > 0``. With a pair of axes, a
    matrix norm: ``'fro'``/``'euclidean'``, 1 (max column sum), ``np.inf`` (max row sum) or 2
    (largest singular value). The gradient of the 2-norm is undefined at zero.

    >>> import numpy as np, tensorweave as tw
    >>> x = tw.constant([[1.0, -2.0], [3.0, 4.0]])
    >>> tw.norm(x, ord=1, axis=1).numpy().tolist(), tw.norm(x, ord=np.inf, axis=[0, 1]).numpy().item()
    ([3.0, 7.0], 7.0)
    """
    from tensorweave.ops import reduce_ops as R
    x = _ct(tensor)
    if not x.dtype.is_floating:
        raise TypeError(f"norm needs a float tensor, got {x.dtype.name}")
    r = x.shape.rank
    if axis is None:
        axes = None
    else:
        if isinstance(axis, EagerTensor):
            axis = axis.numpy().tolist()
        axes = [int(axis)] if np.ndim(axis) == 0 else [int(a) for a in axis]
        if not 1 <= len(axes) <= 2:
            raise ValueError(f"norm: axis must be None, an int or a pair of ints, got {axis!r}")
        if r is not None:
            axes = [rules.normalize_axis(a, r) for a in axes]
        if len(axes) == 2 and axes[0] == axes[1]:
            raise ValueError(f"norm: the two axes of a matrix norm must differ, got {axis!r}")
    matrix = axes is not None and len(axes) == 2
    euclid = ord in ("euclidean", "fro") if isinstance(ord, str) else False
    if matrix:
        ok = euclid or ord in (1, 2) or _is_inf(ord)
    else:
        ok = euclid or (not isinstance(ord, (str, bool)) and isinstance(ord, (int, float, np.number)) and ord > 0)
    if not ok:
        kind = "matrix norms support 'fro', 'euclidean', 1, 2 and np.inf" if matrix else \
            "vector norms support 'euclidean', 'fro', np.inf and any real p > 0"
        raise ValueError(f"norm: ord={ord!r} is not supported ({kind})")
    if euclid or (not matrix and ord == 2):
        out = M.sqrt(R.reduce_sum(M.square(x), axis=axes, keepdims=True))
    elif matrix and ord == 1:
        out = R.reduce_max(R.reduce_sum(M.abs(x), axis=axes[0], keepdims=True), axis=axes[1], keepdims=True)
    elif matrix and _is_inf(ord):
        out = R.reduce_max(R.reduce_sum(M.abs(x), axis=axes[1], keepdims=True), axis=axes[0], keepdims=True)
    elif matrix:  # ord == 2
        if r is None:
            raise ValueError("norm: the rank must be known statically for the matrix 2-norm")
        rest = [i for i in range(r) if i not in axes]
        out = execute(get_op("MatrixSpectralNorm"), [A.transpose(x, rest + axes)], {})
        for a in sorted(axes):
            out = A.expand_dims(out, a)
    elif ord == 1:
        out = R.reduce_sum(M.abs(x), axis=axes, keepdims=True)
    elif _is_inf(ord):
        out = R.reduce_max(M.abs(x), axis=axes, keepdims=True)
    else:
        p = float(ord)
        out = M.pow(R.reduce_sum(M.pow(M.abs(x), p), axis=axes, keepdims=True), 1.0 / p)
    if keepdims:
        return A.identity(out, name=name)
    if axes is None:
        return A.reshape(out, [], name=name)
    return A.squeeze(out, axis=axes, name=name)


# ---- SBP rules (core/sbp.py): batched matrix ops split their batch axes (sbp_rules.batched_rule);
# diagonal ops are linear.
_batched = sbp_rules.batched_rule
get_op("MatrixDiag").sbp = _batched((1,), (2,), linear=(0,))
get_op("MatrixDiagPart").sbp = _batched((2,), (1,), linear=(0,))
get_op("MatrixSetDiag").sbp = _batched((2, 1), (2,), linear=(0, 1))
get_op("MatrixInverse").sbp = _batched((2,), (2,))
get_op("MatrixDeterminant").sbp = _batched((2,), (0,))
get_op("MatrixSpectralNorm").sbp = _batched((2,), (0,))
get_op("MatrixSpectralNormGrad").sbp = _batched((2,), (2,))
