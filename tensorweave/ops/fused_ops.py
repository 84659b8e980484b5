"""Ops that only graph passes create: one node doing the work of several.

They are ordinary registered ops (kernels per device type, found by name), so a plan
holding one is data like any other and the passes can ask whether the device an op was
placed on has a kernel for its fused form. Users never call them: their shape rule says so.

>>> from tensorweave.core.registry import get_op
>>> sorted(get_op("FusedMatMul").kernels)
['CPU']
>>> get_op("FusedReluGradBiasAddGrad").num_outputs
2
"""
from tensorweave.core.registry import register_op

__all__ = []

# name -> number of outputs; the fusion each stands for is in runtime/passes/remapping.py
FUSED_OPS = {"FusedMatMul": 1, "FusedEinsum": 1, "FusedConv1D": 1, "FusedConv2D": 1, "FusedConv3D": 1,
             "FusedReluGradBiasAddGrad": 2, "FusedMatMulReluGradBiasAddGrad": 2, "FusedSparseSoftmaxCrossEntropy": 2,
             "FusedElementwise": 1, "FusedReduction": 1,     # (these two: runtime/passes/fusion.py)
             "FusedMatMulGroupApplyAdam": 0}                 # updates variables: stateful


def _plan_only(name):
    def infer(inputs, attrs):
        raise TypeError(f"{name} is made by the graph passes (remapping) inside plans; "
                        "it cannot be added to a graph directly")
    return infer


for _name, _n in FUSED_OPS.items():
    register_op(_name, infer=_plan_only(_name), num_outputs=_n, stateful=_n == 0,
                heavy=_name not in ("FusedSparseSoftmaxCrossEntropy", "FusedElementwise", "FusedReduction"))
