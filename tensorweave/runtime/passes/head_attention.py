"""Self-attention's query/key/value projections and the attention after them as one plan step
(``FusedHeadAttention``, ``kernels/cpu/head_attention_kernels.py``): a ``FusedEinsumGroup`` of
three products whose outputs the ``FusedAttention`` alone reads, as its key, query and value.

Why: each head reads its own columns of the three projections, so one hand-off can carry a block
of heads through its projections and its attention (the kernel's ``"rows"`` way, by heads, chosen by its
class's timing on a quiet machine) where the projection and the attention were split, or not,
each on its own (issue 18, enc29). Where the class keeps ``"one"`` the node runs the two kernels
it stands for: the bits of the plan without it.

Runs after ``attention`` (which makes the ``FusedAttention`` node; the ``remapping`` option
switches both), on inference plans only (``einsum_group.inference_plan``). Matches where the
attention's three inputs are three distinct outputs of one group node (its stock kernel), each
read by the attention alone and neither fed nor fetched, both nodes on one CPU device without
ordering edges. The node takes the attention's place. ``TW_REMAP_HEAD_ATTENTION=0`` (read when
a plan is built) leaves the two apart.

>>> import numpy as np, tensorweave as tw
>>> w = [tw.Variable(np.full((4, 2, 2), 0.1 * i, np.float32)) for i in (1, 2, 3)]
>>> b = [tw.Variable(np.zeros((2, 2), np.float32)) for _ in range(3)]
>>> def attend(x):
...     k, q, v = (tw.einsum("abc,cde->abde", x, wi) + bi for wi, bi in zip(w, b))
...     return tw.einsum("acbe,aecd->abcd", tw.nn.softmax(tw.einsum("aecd,abcd->acbe", k, q)), v)
>>> f = tw.function(attend)
>>> f(tw.ones([1, 3, 4])).numpy().shape
(1, 3, 2, 2)
>>> from tensorweave.runtime.passes import plan_stats
>>> plan_stats(f).get("head_attention")
1
"""
import os

from tensorweave.kernels.cpu import attention_kernels, einsum_group_kernels, head_attention_kernels
from tensorweave.runtime.passes import einsum_group
from tensorweave.runtime.passes.ir import Node, NodeDef, fused_names

#: read when a plan is built; ``TW_REMAP_HEAD_ATTENTION=0``: off, for comparisons
ENABLED = os.environ.get("TW_REMAP_HEAD_ATTENTION", "1") != "0"


def _plain(op, op_type, kernel, work):
    """Whether ``op`` is an ``op_type`` node running ``kernel`` on a CPU device, no ordering edges."""
    return op.type == op_type and op.opdef.kernels.get("CPU") is kernel and not op.control_inputs \
        and id(op) not in work.pinned and work.device_type(op) == "CPU"


def _fuse(att, work):
    """The node in place of the attention ``att``, or None (see the module docstring)."""
    if not _plain(att, "FusedAttention", attention_kernels.fused_attention, work) or len(att.inputs) != 3:
        return None
    group = att.inputs[0].op
    if not _plain(group, "FusedEinsumGroup", einsum_group_kernels.fused_einsum_group, work) \
            or group.attrs.get("count") != 3 or len(group.outputs) != 3 or group.device != att.device:
        return None
    at = []
    for t in att.inputs:
        index = next((i for i, out in enumerate(group.outputs) if out is t), None)
        if index is None or index in at or work.protected(t) or work.consumers.get(id(t), []) != [att]:
            return None
        at.append(index)
    d = NodeDef("FusedHeadAttention", {"CPU": head_attention_kernels.head_attention}, heavy=True)
    attrs = {**group.attrs, "dot": att.attrs["dot"], "combine": att.attrs["combine"], "at": tuple(at)}
    y = att.outputs[0]
    node = Node(att, d, list(group.inputs), attrs, [(y.shape, y.dtype)], type_="FusedHeadAttention",
                name=att.name + "/heads", control_inputs=(),
                fused=fused_names((group, att)))
    return work.fuse(node, (group, att))


def run(work):
    """Fuses every match (see the module docstring); returns how many."""
    if not ENABLED or not einsum_group.inference_plan(work):
        return 0
    return work.tally("head_attention",
                      sum(1 for op in list(work.ops) if op.type == "FusedAttention" and _fuse(op, work) is not None))
