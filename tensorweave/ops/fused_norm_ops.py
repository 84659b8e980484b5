"""Batch norm and the ReLU after it as one node, forward and backward (plan-only).

Made only by the ``remapping`` graph pass (``runtime/passes/remapping.py``); their kernels are in
``kernels/cpu/batch_norm_kernels.py``. Plan-only like the ops of ``fused_ops``: the shape rule
refuses a direct use.

- ``FusedBatchNormTrainingRelu``: ``BatchNormTraining`` whose ``y`` only a ``Relu`` reads;
  inputs and attributes the batch norm's, outputs ``(relu(y), mean, variance)``.
- ``FusedReluGradBatchNormTrainingGrad``: ``BatchNormTrainingGrad`` whose ``dy`` is a
  ``ReluGrad(gradients, features)`` it alone reads; inputs ``(gradients, features)`` then the
  batch-norm gradient's others, outputs the batch-norm gradient's ``(dx, dscale, doffset)``.
- ``FusedBatchNormTrainingAddRelu``: ``Relu(AddV2(y, side))`` of a ``BatchNormTraining`` whose ``y``
  only the add reads (a residual block's end; ``runtime/passes/bn_add_relu.py``); inputs the batch
  norm's then ``side``, outputs ``(relu(y + side), mean, variance)``.
- ``FusedReluGradBatchNormTrainingGradSelect``: ``FusedReluGradBatchNormTrainingGrad`` where the
  ``ReluGrad``'s select has other readers too (the block's shortcut); its outputs and the select.

>>> from tensorweave.core.registry import get_op
>>> get_op("FusedReluGradBatchNormTrainingGrad").num_outputs
3
"""
from tensorweave.core.registry import register_op
from tensorweave.ops.fused_ops import _plan_only

__all__ = []

FUSED_NORM_OPS = ("FusedBatchNormTrainingRelu", "FusedReluGradBatchNormTrainingGrad", "FusedBatchNormTrainingAddRelu")

for _name in FUSED_NORM_OPS:
    register_op(_name, infer=_plan_only(_name), num_outputs=3, heavy=True)
register_op("FusedReluGradBatchNormTrainingGradSelect", infer=_plan_only("FusedReluGradBatchNormTrainingGradSelect"),
            num_outputs=4, heavy=True)
