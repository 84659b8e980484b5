"""A residual block's end as one node: ``Relu(AddV2(BatchNormTraining(x)'s y, side))`` becomes
``FusedBatchNormTrainingAddRelu`` (``kernels/cpu/batch_norm_kernels.py``), whose second pass
writes ``max((x * a + b) + side, 0)``: the add's and the ReLU's passes over the activations go
(the ResNet's three block ends, forward). Same operations in the same order: the unfused bits.

Runs after ``remapping`` (its ``TW_REMAP_CONV_BLOCKS`` switches this too; ``TW_BN_ADD_RELU=0``
this alone). Where: the batch norm's ``y`` read by the add alone, the add's sum by the ``Relu``
alone (neither fed nor fetched), ``side`` of ``y``'s static shape and dtype, float32/64, no
ordering edges, one device. The node takes the batch norm's place, so ``side`` must be computed
before it: of a stride-2 block's two batch norms (main path and shortcut) the later one fuses.

>>> from tensorweave.core.registry import get_op
>>> get_op("FusedBatchNormTrainingAddRelu").num_outputs
3
"""
import os

from tensorweave.core.registry import get_op
from tensorweave.ops import fused_norm_ops  # noqa: F401 - registers the fused op
from tensorweave.runtime.passes import remapping
from tensorweave.runtime.passes.ir import Node, runs_stock_kernel, static_dims

ENABLED = os.environ.get("TW_BN_ADD_RELU", "1") != "0"
_TYPE = "FusedBatchNormTrainingAddRelu"
_GRAD = "FusedReluGradBatchNormTrainingGradSelect"


def _batch_norm_side(add, work, pos):
    """``(bn, side)``: the add's input that is a batch norm's ``y`` only it reads, computed after
    the other input; ``None`` if neither is."""
    d = get_op(_TYPE)
    for i in (1, 0):            # (the shortcut is the add's second input: its batch norm comes later)
        y, side = add.inputs[i], add.inputs[1 - i]
        bn = y.op
        if (runs_stock_kernel(bn, "BatchNormTraining") and y is bn.outputs[0]
                and remapping._only_reader(y, add, work) and bn.device == add.device
                and remapping._plain(bn, work, y.dtype) and work.device_type(bn) in d.kernels
                and side.dtype is y.dtype and static_dims(side) is not None and static_dims(side) == static_dims(y)
                and pos.get(id(side.op), -1) < pos[id(bn)]):
            return bn, side
    return None


def _fuse(relu, work, pos):
    add = relu.inputs[0].op
    out = relu.outputs[0]
    if not (runs_stock_kernel(add, "AddV2") and remapping._free(add, work) and remapping._free(relu, work)
            and remapping._only_reader(add.outputs[0], relu, work) and add.device == relu.device
            and id(out) not in work.feed_ids and out.dtype is add.outputs[0].dtype):
        return None
    found = _batch_norm_side(add, work, pos)
    if found is None:
        return None
    bn, side = found
    node = Node(bn, get_op(_TYPE), tuple(bn.inputs) + (side,), remapping._attrs(bn),
                [(out.shape, out.dtype)] + [(t.shape, t.dtype) for t in bn.outputs[1:]],
                type_=_TYPE, control_inputs=(), fused=[bn.name, add.name, relu.name])
    work.node_rep[id(bn)] = node        # (commit maps y, read by nobody else now, to the node's first output)
    work.node_rep[id(add)] = None
    work.node_rep[id(relu)] = None
    work.rep[id(out)] = node.outputs[0]
    return node


def _fuse_grad(bng, work, pos):
    """``BatchNormTrainingGrad`` of a ``ReluGrad`` whose select other ops read too (the add's gradient
    fans out to the shortcut): one node at the gradient's place, the select its fourth output.
    Only where the select's other readers all come after the gradient."""
    dz = bng.inputs[0]
    rg = dz.op
    d = get_op(_GRAD)
    readers = work.consumers.get(id(dz), [])
    if not (runs_stock_kernel(rg, "ReluGrad") and remapping._free(rg, work) and not work.protected(dz)
            and readers.count(bng) == 1 and len(readers) > 1 and rg.device == bng.device
            and remapping._plain(bng, work, dz.dtype) and work.device_type(bng) in d.kernels
            and all(t.dtype is dz.dtype for t in rg.inputs)
            and all(pos[id(r)] > pos[id(bng)] for r in readers if r is not bng)):
        return None
    node = Node(bng, d, tuple(rg.inputs) + tuple(bng.inputs[1:]), remapping._attrs(bng),
                [(t.shape, t.dtype) for t in bng.outputs] + [(dz.shape, dz.dtype)],
                type_=_GRAD, control_inputs=(), fused=[rg.name, bng.name])
    work.node_rep[id(bng)] = node       # (commit maps the gradient's three outputs to the node's first three)
    work.node_rep[id(rg)] = None
    work.rep[id(dz)] = node.outputs[3]
    return node


def run(work):
    if not (ENABLED and remapping.CONV_BLOCKS):
        return 0
    pos = {id(op): i for i, op in enumerate(work.ops)}
    n = 0
    for op in list(work.ops):
        if runs_stock_kernel(op, "Relu"):
            n += _fuse(op, work, pos) is not None
        elif runs_stock_kernel(op, "BatchNormTrainingGrad"):
            n += _fuse_grad(op, work, pos) is not None
    return n
