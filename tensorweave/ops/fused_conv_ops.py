"""``FusedConv{1,2,3}DBackprop``: a convolution's input gradient and filter gradient as one node.

Made only by the ``remapping`` graph pass (``runtime/passes/remapping.py``) where a plan computes
both gradients of one convolution from the same output gradient; its kernel
(``kernels/cpu/conv_pair_kernels.py``) runs the two side by side, one per core. Plan-only like
the ops of ``fused_ops``: the shape rule refuses a direct use.

Inputs ``(input_sizes, filter, input, filter_sizes, out_backprop)``, attributes those of the two
gradients (equal) and ``filter_first``; outputs ``(input gradient, filter gradient)``, or the other
way round with ``filter_first`` (the node stands where the filter gradient stood).

>>> from tensorweave.core.registry import get_op
>>> get_op("FusedConv2DBackprop").num_outputs
2
"""
from tensorweave.core.registry import register_op
from tensorweave.ops.fused_ops import _plan_only

__all__ = []

FUSED_CONV_BACKPROPS = ("FusedConv1DBackprop", "FusedConv2DBackprop", "FusedConv3DBackprop")

for _name in FUSED_CONV_BACKPROPS:
    register_op(_name, infer=_plan_only(_name), num_outputs=2, heavy=True)
