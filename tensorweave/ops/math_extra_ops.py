"""More ``tf.math`` names, composed of existing ops where possible: ``accumulate_n``,
``reciprocal_no_nan``, ``scalar_mul``, ``polyval``, ``lbeta``, ``zero_fraction``, ``in_top_k``,
``invert_permutation``, ``is_non_decreasing``, ``is_strictly_increasing``, ``confusion_matrix``,
and the special functions
``erfinv``, ``ndtri``, ``bessel_i0``/``i0e``/``i1``/``i1e``, ``polygamma``, ``zeta``, ``igamma``,
``igammac`` with their gradients.

>>> import tensorweave as tw
>>> tw.math.polyval([1.0, 0.0, -1.0], tw.constant([2.0, 3.0])).numpy()
array([3., 8.], dtype=float32)
>>> tw.math.in_top_k(tw.constant([1, 0]), tw.constant([[0.1, 0.9], [0.8, 0.2]]), 1).numpy().tolist()
[True, True]
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import rules
from tensorweave.ops.arguments import int_argument
from tensorweave.ops.reduce_ops import reduce_all, reduce_mean, reduce_sum
from tensorweave.ops.special_ops import _u, _x, lgamma

__all__ = ["erfcinv", "accumulate_n", "reciprocal_no_nan", "scalar_mul", "polyval", "lbeta", "zero_fraction", "in_top_k",
           "invert_permutation", "is_non_decreasing", "is_strictly_increasing", "confusion_matrix",
           "erfinv", "ndtri", "bessel_i0", "bessel_i0e", "bessel_i1", "bessel_i1e", "polygamma", "zeta",
           "igamma", "igammac", "softsign"]

_ct = convert_to_tensor
F = rules.FLOAT


def accumulate_n(inputs, shape=None, tensor_dtype=None, name=None):
    """The sum of a list of same-shape tensors (``add_n``: there is no memory to save here)."""
    return M.add_n(inputs, name=name)


def reciprocal_no_nan(x, name=None):
    """``1 / x``, and 0 where ``x`` is 0."""
    x = _ct(x)
    return M.div_no_nan(A.ones_like(x), x, name=name)


def scalar_mul(scalar, x, name=None):
    return M.multiply(scalar, x, name=name)


def polyval(coeffs, x, name=None):
    """``coeffs[0] * x**(n-1) + ... + coeffs[n-1]`` by Horner's rule (``coeffs`` highest first)."""
    x = _ct(x)
    if not coeffs:
        return A.zeros_like(x, name=name)
    out = M.add(A.zeros_like(x), coeffs[0])
    for c in coeffs[1:]:
        out = M.add(M.multiply(out, x), c)
    return A.identity(out, name=name) if name else out


def lbeta(x, name=None):
    """``log|B(x)|`` over the last dimension: ``sum(lgamma(x)) - lgamma(sum(x))``."""
    x = _ct(x)
    return M.subtract(reduce_sum(lgamma(x), axis=-1), lgamma(reduce_sum(x, axis=-1)), name=name)


def zero_fraction(value, name=None):
    """The fraction of zeros in ``value`` (float32)."""
    x = _ct(value)
    return reduce_mean(M.cast(M.equal(x, False if x.dtype.is_bool else 0), _dt.float32), name=name)


def in_top_k(targets, predictions, k, name=None):
    """Whether each row's ``targets`` entry is among its ``k`` largest ``predictions`` (ties
    count as in, as TF; a non-finite target prediction is out)."""
    p, t = _ct(predictions), _ct(targets)
    k = int_argument(k, "in_top_k", "k", 0)
    if t.dtype not in (_dt.int32, _dt.int64):
        raise TypeError(f"in_top_k: targets must be int32 or int64, got {t.dtype.name}")
    score = A.gather(p, t, batch_dims=1, axis=1)
    higher = reduce_sum(M.cast(M.greater(p, A.expand_dims(score, -1)), _dt.int32), axis=-1)
    return M.logical_and(M.less(higher, k), M.is_finite(score), name=name)


# SBP: every output entry depends on the whole permutation: boxes to B
register_op("InvertPermutation", infer=lambda i, a: (i[0].shape, i[0].dtype), grad=NOT_DIFFERENTIABLE,
            sbp=sbp_rules.BOXES_TO_B)


def invert_permutation(x, name=None):
    """``y`` with ``y[x[i]] = i`` for a permutation ``x`` of ``0..n-1``."""
    t = _ct(x)
    if t.dtype not in (_dt.int32, _dt.int64):
        raise TypeError(f"invert_permutation: x must be int32 or int64, got {t.dtype.name}")
    return execute(get_op("InvertPermutation"), [t], {}, name)


def is_non_decreasing(x, name=None):
    x = A.reshape(_ct(x), [-1])
    return reduce_all(M.less_equal(x[:-1], x[1:]), name=name)


def is_strictly_increasing(x, name=None):
    x = A.reshape(_ct(x), [-1])
    return reduce_all(M.less(x[:-1], x[1:]), name=name)


def confusion_matrix(labels, predictions, num_classes=None, weights=None, dtype=_dt.int32, name=None):
    """``m[i, j]``: how many (or how much ``weights``) of label ``i`` were predicted ``j``."""
    from tensorweave.ops.indexing_ops import scatter_nd
    from tensorweave.ops.reduce_ops import reduce_max
    lab, pred = M.cast(_ct(labels), _dt.int64), M.cast(_ct(predictions), _dt.int64)
    n = (M.add(M.maximum(reduce_max(lab), reduce_max(pred)), 1) if num_classes is None
         else A.constant(int_argument(num_classes, "confusion_matrix", "num_classes", 0), _dt.int64))
    w = A.ones_like(lab, dtype=dtype) if weights is None else M.cast(_ct(weights), dtype)
    return scatter_nd(A.stack([lab, pred], axis=1), w, A.stack([n, n]), name=name)


def softsign(features, name=None):
    return M.softsign(features, name=name)


# ---- special functions ------------------------------------------------------------------------
erfinv = _u("Erfinv", lambda op, g: [g * (np.sqrt(np.pi) / 2) * M.exp(M.square(op.outputs[0]))])
ndtri = _u("Ndtri", lambda op, g: [g * np.sqrt(2 * np.pi) * M.exp(M.square(op.outputs[0]) * 0.5)])
bessel_i0 = _u("BesselI0", lambda op, g: [g * bessel_i1(_x(op))])
bessel_i1 = _u("BesselI1", lambda op, g: [g * _i1_derivative(_x(op), bessel_i0(_x(op)), op.outputs[0])])
bessel_i0e = _u("BesselI0e", lambda op, g: [g * (bessel_i1e(_x(op)) - M.sign(_x(op)) * op.outputs[0])])
bessel_i1e = _u("BesselI1e", lambda op, g: [g * (_i1_derivative(_x(op), bessel_i0e(_x(op)), op.outputs[0])
                                                 - M.sign(_x(op)) * op.outputs[0])])


def _i1_derivative(x, i0, i1):
    # I1'(x) = I0(x) - I1(x) / x, and 1/2 at x = 0 (the limit)
    return M.where(M.equal(x, 0), M.add(A.zeros_like(x), 0.5), i0 - M.div_no_nan(i1, x))


def _binary(name, grad):
    register_op(name, infer=rules.binary(allowed=F), grad=grad, sbp=sbp_rules.elementwise_rule())
    return M._binary_op(get_op(name), F)


# polygamma(n, x): d/dx = polygamma(n + 1, x); no gradient in the order n. zeta(x, q): d/dq =
# -x zeta(x + 1, q). igamma(a, x) = P(a, x): d/dx = exp(-x) x^(a-1) / Gamma(a); igammac = 1 - P.
# The gradients in the first argument (a, x of zeta) are not implemented: None, as TF's for polygamma.
polygamma = _binary("Polygamma", lambda op, g: M._grads(op, None, g * polygamma(_x(op) + 1, op.inputs[1])))
zeta = _binary("Zeta", lambda op, g: M._grads(op, None, -g * _x(op) * zeta(_x(op) + 1, op.inputs[1])))


def _igamma_dx(op):
    a, x = op.inputs
    return M.exp(-x + (a - 1) * M.log(x) - lgamma(a))


igamma = _binary("Igamma", lambda op, g: M._grads(op, None, g * _igamma_dx(op)))
igammac = _binary("Igammac", lambda op, g: M._grads(op, None, -g * _igamma_dx(op)))


def erfcinv(x, name=None):
    """The inverse of ``erfc``: ``-ndtri(x / 2) / sqrt(2)`` (``inf`` at 0, ``-inf`` at 2, NaN outside).

    >>> import tensorweave as tw
    >>> round(float(tw.math.erfcinv(0.5)), 4)
    0.4769
    """
    x = convert_to_tensor(x)
    return M.multiply(ndtri(x * 0.5), -1.0 / np.sqrt(2.0), name=name)
