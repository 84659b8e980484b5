"""Elementwise special functions under ``tf.math`` names: inverse trigonometric and hyperbolic
functions, ``lgamma``, ``digamma``, ``erfc``, ``log_sigmoid``. Float inputs only, as in TF.

>>> import tensorweave as tw
>>> tw.math.asinh(tw.constant([0.0])).numpy(), tw.math.lgamma(tw.constant([3.0])).numpy()
(array([0.], dtype=float32), array([0.6931472], dtype=float32))
"""
import numpy as np

from tensorweave.core import sbp_rules
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op
from tensorweave.ops import math_ops as M
from tensorweave.ops import rules

__all__ = ["asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "lgamma", "digamma", "erfc",
           "log_sigmoid"]


def _u(name, grad):
    return M._u(name, grad, rules.FLOAT)


def _x(op):
    return op.inputs[0]


asin = _u("Asin", lambda op, g: [g * M.rsqrt(1 - M.square(_x(op)))])
acos = _u("Acos", lambda op, g: [-g * M.rsqrt(1 - M.square(_x(op)))])
sinh = _u("Sinh", lambda op, g: [g * cosh(_x(op))])
cosh = _u("Cosh", lambda op, g: [g * sinh(_x(op))])
asinh = _u("Asinh", lambda op, g: [g * M.rsqrt(M.square(_x(op)) + 1)])
acosh = _u("Acosh", lambda op, g: [g * M.rsqrt(M.square(_x(op)) - 1)])
atanh = _u("Atanh", lambda op, g: [g / (1 - M.square(_x(op)))])
lgamma = _u("Lgamma", lambda op, g: [g * digamma(_x(op))])
# Digamma's derivative (trigamma) is a kernel of its own, differentiable once more through
# nothing: second derivatives of lgamma work, third ones of digamma do not.
_trigamma = _u("Trigamma", NOT_DIFFERENTIABLE)
digamma = _u("Digamma", lambda op, g: [g * _trigamma(_x(op))])
erfc = _u("Erfc", lambda op, g: [g * (-2 / np.sqrt(np.pi)) * M.exp(-M.square(_x(op)))])
# monotone on all the reals: a partial max/min passes through (sbp_rules.monotone_signatures)
for _name, _direction in (("Sinh", "up"), ("Asinh", "up"), ("Erfc", "down")):
    get_op(_name).sbp = sbp_rules.elementwise_rule(monotone=_direction)


def log_sigmoid(x, name=None):
    """``log(sigmoid(x))`` without overflow: ``-softplus(-x)``.

    >>> import tensorweave as tw
    >>> [round(v, 4) for v in tw.math.log_sigmoid(tw.constant([-100.0, 0.0])).numpy().tolist()]
    [-100.0, -0.6931]
    """
    return M.negative(M.softplus(M.negative(x)), name=name)
