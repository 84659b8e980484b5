"""``SoftmaxGrad``: the input gradient of ``Softmax`` as one op (TensorFlow's XLA and oneDNN
softmax-backward; PyTorch's ``_softmax_backward_data``).

``SoftmaxGrad(y, g)`` with attrs ``axis`` and ``scale`` is ``scale * (y * (g - sum(g * y, axis)))``
for ``y = softmax(x)`` and ``g`` the gradient of ``y``. Written with ordinary ops it was four
passes over the scores (``g * y``, the sum, the subtraction, the product) plus one for a
constant scale after it; the kernel (``kernels/cpu/layer_norm_kernels.py``) makes one pass per
row (the row in cache), blocked over rows on the intra-op threads. ``scale`` folds a constant
factor the graph applies to the gradient (``softmax(x * c)``'s ``c``; ``runtime/passes/remapping.py``);
``Softmax``'s own gradient uses 1 (under ``TW_FUSED_SOFTMAX_GRAD=1``; by default ``Softmax``'s
gradient is the composite: see :data:`FUSED`). float16/bfloat16 are computed in float32.

>>> import tensorweave as tw
>>> from tensorweave.ops.softmax_grad_ops import softmax_grad
>>> softmax_grad(tw.constant([[0.5, 0.5]]), tw.constant([[1.0, 0.0]]), scale=2.0).numpy().tolist()
[[0.5, -0.5]]
"""
import os

from tensorweave.core import sbp_rules
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import get_op, register_op
from tensorweave.core.sbp import S
from tensorweave.core.shape import fmt
from tensorweave.ops import rules

__all__ = ["softmax_grad"]

#: ``Softmax``'s gradient as the one ``SoftmaxGrad`` op (read when a gradient is built) under
#: ``TW_FUSED_SOFTMAX_GRAD=1``; off by default: in a planned graph with the softmax's class axis
#: split, the planner's look-ahead reads ``SoftmaxGrad``'s rule (no class-axis signature: it is
#: decomposed only once reached, decompositions.py) and lays the upstream gradient out by rows,
#: which then moves the scores (tests/test_plan13c_class_axis.py); the composite keeps them split
FUSED = os.environ.get("TW_FUSED_SOFTMAX_GRAD", "0") == "1"


def _infer(inputs, attrs):
    y, g = inputs
    if y.dtype not in rules.FLOAT:
        raise TypeError(f"SoftmaxGrad does not support dtype {y.dtype.name}; expected one of: "
                        f"{rules.dtype_names(rules.FLOAT)}")
    if g.dtype is not y.dtype or not g.shape.is_compatible_with(y.shape):
        raise ValueError(f"SoftmaxGrad: the gradient must have the softmax output's shape and dtype, got "
                         f"{fmt(g.shape)} {g.dtype.name} for y {fmt(y.shape)} {y.dtype.name}")
    s = y.shape.merge_with(g.shape)
    if s.rank == 0:
        raise ValueError("SoftmaxGrad needs tensors of rank >= 1, got scalars")
    if s.rank is not None:
        rules.normalize_axis(attrs["axis"], s.rank)
    return s, y.dtype


def _grad(op, u):
    """With ``dx = c y (g - s)``, ``s = sum(g y)``: ``dy = c (u (g - s) - g sum(u y))`` and
    ``dg = c y (u - sum(u y))`` — the latter is this op again."""
    from tensorweave.ops.reduce_ops import reduce_sum
    y, g = op.inputs
    axis, c = op.attrs["axis"], op.attrs.get("scale", 1.0)
    s = reduce_sum(g * y, axis=axis, keepdims=True)
    uy = reduce_sum(u * y, axis=axis, keepdims=True)
    return [(u * (g - s) - g * uy) * c, execute(get_op("SoftmaxGrad"), [y, u], op.attrs)]


def _sbp(inputs, attrs):
    """Every axis but the softmax's splits (the row sum needs the whole row: a split softmax
    axis is boxed to B); ``g`` is not linear alone (``y`` multiplies it), so no partial rule."""
    rank = inputs[0].rank
    axis = attrs["axis"] % rank
    for i in range(rank):
        if i != axis:
            yield [S(i), S(i)], [S(i)]


register_op("SoftmaxGrad", infer=_infer, grad=_grad, sbp=sbp_rules.signatures(_sbp))


def softmax_grad(y, g, axis=-1, scale=1.0, name=None):
    """``scale * y * (g - sum(g * y, axis))``: the gradient of ``softmax`` given its output ``y``
    and the gradient ``g`` of that output. See the module docstring."""
    y = convert_to_tensor(y)
    g = convert_to_tensor(g, dtype=y.dtype)
    return execute(get_op("SoftmaxGrad"), [y, g], {"axis": int(axis), "scale": float(scale)}, name)
