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


export(globals(), skip={"promote", "result_type", "cast_to", "to_tensor", "export"})
