"""Two ``FusedEinsum`` nodes in a row, the second reading the first's output alone, as one plan
step (``FusedEinsumPair``, ``kernels/cpu/einsum_bias_kernels.fused_einsum_pair``): a transformer
block's feed-forward half, ``Dense(relu)`` then ``Dense`` on a sequence.

Why: both products are row-wise, so one hand-off can carry a block of rows through both (the
kernel's ``"rows"`` way, chosen by its class's timing on a quiet machine); apart, each product is
split, or not, on its own (issue 18, enc28). Where the class keeps ``"one"`` the node runs the two
``FusedEinsum`` calls it stands for: the same bits as the plan without it.

Runs after ``remapping`` (which makes the ``FusedEinsum`` nodes; the ``remapping`` option switches
both), on inference plans only (``einsum_group.inference_plan``: a training step's gradients read
the hidden product). Matches a ``FusedEinsum`` whose first input is another's output read by it
alone (neither fed nor fetched), both on one CPU device, float32 or float64, without ordering
edges. The node takes the second's place. ``TW_REMAP_EINSUM_PAIR=0`` (read when a plan is built)
leaves them apart.

>>> import numpy as np, tensorweave as tw
>>> w1, w2 = tw.Variable(np.ones((3, 2), np.float32)), tw.Variable(np.ones((2, 1), np.float32))
>>> b1, b2 = tw.Variable(np.array([-4.0, 1.0], np.float32)), tw.Variable(np.zeros(1, np.float32))
>>> dense = lambda x, w, b: tw.nn.bias_add(tw.einsum("abc,cd->abd", x, w), b)
>>> f = tw.function(lambda x: dense(tw.nn.relu(dense(x, w1, b1)), w2, b2))
>>> f(tw.ones([1, 2, 3])).numpy().tolist()
[[[4.0], [4.0]]]
>>> from tensorweave.runtime.passes import plan_stats
>>> plan_stats(f).get("einsum_pair")
1
"""
import os

from tensorweave.kernels.cpu import einsum_bias_kernels
from tensorweave.runtime.passes import einsum_group
from tensorweave.runtime.passes.ir import Node, NodeDef, fused_names, runs_stock_kernel

#: read when a plan is built; ``TW_REMAP_EINSUM_PAIR=0``: off, for comparisons
ENABLED = os.environ.get("TW_REMAP_EINSUM_PAIR", "1") != "0"
_DTYPES = ("float32", "float64")


def _member(op, work):
    """Whether ``op`` may be one of a pair: a stock ``FusedEinsum`` of two operands and a bias on
    a CPU device, no ordering edges, its output float32/64 and not fed."""
    return (runs_stock_kernel(op, "FusedEinsum") and len(op.inputs) == 3 and not op.control_inputs
            and id(op) not in work.pinned and work.device_type(op) == "CPU" and len(op.outputs) == 1
            and op.outputs[0].dtype.name in _DTYPES and id(op.outputs[0]) not in work.feed_ids)


def _fuse(second, work):
    """The pair's node in place of ``second``, or None where it and the node before it do not
    match (see the module docstring)."""
    if not _member(second, work):
        return None
    hidden = second.inputs[0]
    first = hidden.op
    if not _member(first, work) or first.device != second.device or work.protected(hidden) \
            or work.consumers.get(id(hidden), []) != [second] \
            or any(t.dtype is not hidden.dtype for t in list(first.inputs) + list(second.inputs)):
        return None
    d = NodeDef("FusedEinsumPair", {"CPU": einsum_bias_kernels.fused_einsum_pair}, heavy=True)
    attrs = {"first": first.attrs["equation"], "second": second.attrs["equation"],
             "relu1": bool(first.attrs.get("relu", False)), "relu2": bool(second.attrs.get("relu", False))}
    y = second.outputs[0]
    node = Node(second, d, list(first.inputs) + list(second.inputs[1:]), attrs, [(y.shape, y.dtype)],
                type_="FusedEinsumPair", name=second.name + "/pair", control_inputs=(),
                fused=fused_names((first, second)))
    return work.fuse(node, (first, second))


def run(work):
    """Fuses every pair (see the module docstring); returns how many."""
    if not ENABLED or not einsum_group.inference_plan(work):
        return 0
    taken, n = set(), 0
    for op in list(work.ops):
        # (a node already in a pair is not the second of another: a chain of three makes one pair)
        if op.type == "FusedEinsum" and id(op.inputs[0].op) not in taken and id(op) not in taken:
            if _fuse(op, work) is not None:
                taken.update((id(op), id(op.inputs[0].op)))
                n += 1
    return work.tally("einsum_pair", n)
