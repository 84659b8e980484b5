"""Bitwise ops on integer tensors (``tf.bitwise``), and the ``~ & | ^`` operators' dispatch:
logical on bool tensors, bitwise on integers (as in TensorFlow).

>>> import tensorweave as tw
>>> (~tw.constant([0, 5, -1])).numpy()
array([-1, -6,  0], dtype=int32)
>>> tw.bitwise.left_shift(tw.constant([1, 3]), tw.constant([2, 1])).numpy()
array([4, 6], dtype=int32)
"""
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core import sbp_rules
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op
from tensorweave.core.tensor import Tensor
from tensorweave.ops import math_ops as M
from tensorweave.ops import rules

__all__ = ["bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift"]

for _name in ("BitwiseAnd", "BitwiseOr", "BitwiseXor", "LeftShift", "RightShift"):
    register_op(_name, infer=rules.binary(allowed=rules.INTEGER), grad=NOT_DIFFERENTIABLE,
                sbp=sbp_rules.elementwise_rule())
register_op("Invert", infer=rules.unary(rules.INTEGER), grad=NOT_DIFFERENTIABLE, sbp=sbp_rules.elementwise_rule())

bitwise_and = M._binary_op(get_op("BitwiseAnd"), rules.INTEGER)
bitwise_or = M._binary_op(get_op("BitwiseOr"), rules.INTEGER)
bitwise_xor = M._binary_op(get_op("BitwiseXor"), rules.INTEGER)
invert = M._unary_op(get_op("Invert"), rules.INTEGER)
# Shifts by a negative amount or by the bit width or more are clamped to [0, bits - 1], TF's
# CPU behaviour (C++ leaves them undefined).
left_shift = M._binary_op(get_op("LeftShift"), rules.INTEGER)
right_shift = M._binary_op(get_op("RightShift"), rules.INTEGER)


def _is_bool(x, y=None):
    """Whether the operator means the logical op: bool operands (Python bools included)."""
    for v in (x, y):
        if isinstance(v, Tensor) or hasattr(v, "_tw_tensor_"):
            return convert_to_tensor(v).dtype.is_bool
    return isinstance(x, bool)


def invert_op(x):
    """``~x``: logical NOT of bool tensors, bitwise NOT of integers."""
    return M.logical_not(x) if _is_bool(x) else invert(x)


def and_op(x, y):
    return M.logical_and(x, y) if _is_bool(x, y) else bitwise_and(x, y)


def or_op(x, y):
    return M.logical_or(x, y) if _is_bool(x, y) else bitwise_or(x, y)


def xor_op(x, y):
    return M.logical_xor(x, y) if _is_bool(x, y) else bitwise_xor(x, y)
