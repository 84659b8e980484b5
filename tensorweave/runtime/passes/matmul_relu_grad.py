"""Remapping of an input-gradient product into the ReLU gradient and bias gradient that read it:
``MatMul -> ReluGrad -> BiasAddGrad`` becomes one ``FusedMatMulReluGradBiasAddGrad`` node
(``kernels/cpu/fused_kernels.py``), called from ``remapping._fuse_gradients`` once it has matched
the ``ReluGrad -> BiasAddGrad`` pair (issue 18 session 19, mlp23).

The product (``dz @ Wᵀ``: a dense layer's input gradient, read by the ReLU gradient of the layer
below alone) is computed by the stock ``MatMul`` kernel, and the mask and the column sums are made
in place on it, right after it, while it is in cache: no buffer of its own for the masked gradient,
one plan step instead of two (each step pays a kernel call and its first touches of cold memory;
in the mlp step the ReLU gradient cost 2-5x in the step what it costs run hot). Same arithmetic in
the same order, so the same bits. The node takes the ``MatMul``'s place where the ReLU's features
were computed before it (the mlp's: the products the overlap pass pairs, ``runtime/overlap.py``,
keep their places), else the ``ReluGrad``'s. ``TW_REMAP_MATMUL_RELU_GRAD=0`` (read when a plan is
built) leaves the product apart.

>>> import numpy as np, tensorweave as tw
>>> w, b = tw.Variable(np.ones((3, 2), np.float32)), tw.Variable(np.full(2, -1.0, np.float32))
>>> def grads(x):
...     with tw.GradientTape() as tape:
...         h = tw.nn.relu(tw.nn.bias_add(tw.matmul(x, w), b))
...         loss = tw.reduce_sum(tw.matmul(h, tw.ones([2, 2])))
...     return tape.gradient(loss, [w, b])
>>> [g.numpy().tolist() for g in tw.function(grads)(tw.ones([2, 3]))]
[[[4.0, 4.0], [4.0, 4.0], [4.0, 4.0]], [4.0, 4.0]]
"""
import os

from tensorweave.core.registry import get_op
from tensorweave.runtime.passes.ir import Node, runs_stock_kernel

#: read when a plan is built; ``TW_REMAP_MATMUL_RELU_GRAD=0``: off, for comparisons
ENABLED = os.environ.get("TW_REMAP_MATMUL_RELU_GRAD", "1") != "0"


def fuse(rg, bias_grad, work, free, only_reader):
    """The ``FusedMatMulReluGradBiasAddGrad`` standing for the ``MatMul`` feeding ``rg`` (a
    ``ReluGrad`` whose output ``bias_grad`` sums), ``rg`` and ``bias_grad``: the list of fused
    ops, or None (then the caller fuses the pair alone). ``free`` and ``only_reader``: the
    remapping pass's own checks (``remapping._free``, ``remapping._only_reader``)."""
    d = get_op("FusedMatMulReluGradBiasAddGrad")
    g, features = rg.inputs
    mm = g.op
    if not (ENABLED and work.device_type(rg) in d.kernels and runs_stock_kernel(mm, "MatMul") and free(mm, work)
            and only_reader(g, rg, work) and mm.device == rg.device and g.shape.rank == 2
            and all(t.dtype is g.dtype for t in list(mm.inputs) + [features])):
        return None
    order = {id(op): i for i, op in enumerate(work.ops)}
    at_product = order.get(id(features.op), len(order)) < order[id(mm)]
    dz, db = rg.outputs[0], bias_grad.outputs[0]
    attrs = {"transpose_a": bool(mm.attrs.get("transpose_a", False)),
             "transpose_b": bool(mm.attrs.get("transpose_b", False)),
             "data_format": bias_grad.attrs.get("data_format", "NHWC")}
    node = Node(mm if at_product else rg, d, (mm.inputs[0], mm.inputs[1], features), attrs,
                [(dz.shape, dz.dtype), (db.shape, db.dtype)], type_="FusedMatMulReluGradBiasAddGrad",
                control_inputs=(), fused=[mm.name, rg.name, bias_grad.name])
    for op in (mm, rg, bias_grad):
        work.node_rep[id(op)] = None
    work.node_rep[id(mm if at_product else rg)] = node
    work.rep[id(dz)] = node.outputs[0]
    work.rep[id(db)] = node.outputs[1]       # a fetch of the bias gradient reads the fused node
    return [mm, rg, bias_grad]
