"""A post-norm transformer block after its attention as one plan step (``FusedBlockTail``,
``kernels/cpu/block_tail_kernels.py``): the output projection (``FusedEinsum``), the residual
add + layer norm (``AddLayerNorm``), the feed-forward pair (``FusedEinsumPair``) and the second
residual add + layer norm.

Why: the four steps are row-wise, so one hand-off can carry a block of rows through all of them
(the kernel's ``"rows"`` way, chosen by its class's timing on a quiet machine) where each product
was split, or not, on its own (issue 18, enc29). Where the class keeps ``"one"`` the node runs the
four kernels it stands for: the bits of the plan without it.

Runs after ``einsum_pair`` and ``residual_norm`` (the nodes it matches; the ``remapping`` option
switches them all), on inference plans only (``einsum_group.inference_plan``). Matches
``AddLayerNorm(y1, pair(y1))`` where ``y1 = AddLayerNorm(x, FusedEinsum(h))`` (either add's
operands in either order), every step running its stock kernel on one CPU device without ordering
edges, float32 or float64 throughout, both layer norms over the last axis, the projection and
the pair read by their layer norm alone, ``y1`` by the pair and the second layer norm alone, the
layer norms' statistics read by nobody (nothing of it fed or fetched). The node takes the second
layer norm's place. ``TW_REMAP_BLOCK_TAIL=0`` (read when a plan is built) leaves the four apart.

>>> import numpy as np, tensorweave as tw
>>> from tensorweave.ops.layer_norm_ops import layer_norm
>>> v = lambda *shape: tw.Variable(np.full(shape, 0.5, np.float32))
>>> wo, w1, w2, bo, b1, b2 = v(2, 2, 4), v(4, 8), v(8, 4), v(4), v(8), v(4)
>>> dense = lambda x, w, b, eq: tw.nn.bias_add(tw.einsum(eq, x, w), b)
>>> norm = lambda x: layer_norm(x, tw.ones([4]), tw.zeros([4]))[0]
>>> def tail(h, x):
...     y1 = norm(x + dense(h, wo, bo, "abcd,cde->abe"))
...     f = dense(tw.nn.relu(dense(y1, w1, b1, "abc,cd->abd")), w2, b2, "abd,de->abe")
...     return norm(y1 + f)
>>> f = tw.function(tail)
>>> f(tw.ones([1, 3, 2, 2]), tw.ones([1, 3, 4])).numpy().shape
(1, 3, 4)
>>> from tensorweave.runtime.passes import plan_stats
>>> plan_stats(f).get("block_tail")
1
"""
import os

from tensorweave.kernels.cpu import block_tail_kernels, einsum_bias_kernels, layer_norm_kernels
from tensorweave.runtime.passes import einsum_group
from tensorweave.runtime.passes.ir import Node, NodeDef, fused_names, runs_stock_kernel, static_dims

#: read when a plan is built; ``TW_REMAP_BLOCK_TAIL=0``: off, for comparisons
ENABLED = os.environ.get("TW_REMAP_BLOCK_TAIL", "1") != "0"
_DTYPES = ("float32", "float64")
_KERNELS = {"AddLayerNorm": layer_norm_kernels.add_layer_norm, "FusedEinsumPair": einsum_bias_kernels.fused_einsum_pair}


def _step(op, op_type, work):
    """Whether ``op`` is an ``op_type`` step running its stock kernel on a CPU device, without
    ordering edges, its first output float32/64 (a plan-only node: the kernel its pass gave it)."""
    kernel = _KERNELS.get(op_type)
    stock = runs_stock_kernel(op, op_type) if kernel is None else \
        op.type == op_type and op.opdef.kernels.get("CPU") is kernel
    return stock and not op.control_inputs and id(op) not in work.pinned and work.device_type(op) == "CPU" \
        and op.outputs[0].dtype.name in _DTYPES


def _read_by(t, readers, work):
    """Whether ``t`` is read by exactly the ops ``readers`` (once each) and neither fed nor fetched."""
    got = work.consumers.get(id(t), [])
    return not work.protected(t) and len(got) == len(readers) and all(any(r is op for op in got) for r in readers)


def _norm(op, work):
    """``op``'s attributes where it is a last-axis ``AddLayerNorm`` whose statistics nobody reads."""
    if not _step(op, "AddLayerNorm", work) or len(op.outputs) != 3 \
            or any(not _read_by(t, [], work) for t in op.outputs[1:]):
        return None
    dims = static_dims(op.outputs[0])
    axis = op.attrs.get("begin_norm_axis", -1)
    if dims is None or not dims or axis not in (-1, len(dims) - 1):
        return None
    return op.attrs


def _other(op, t):
    """The input of the two-input add of ``op`` (its first two inputs) that is not ``t``, or None."""
    a, b = op.inputs[:2]
    return b if a is t and b is not t else a if b is t and a is not t else None


def _fuse(norm2, work):
    """The node in place of ``norm2``, or None where the chain before it does not match (see the
    module docstring)."""
    attrs2 = _norm(norm2, work)
    if attrs2 is None:
        return None
    pair = next((t.op for t in norm2.inputs[:2] if t.op.type == "FusedEinsumPair"), None)
    if pair is None or not _step(pair, "FusedEinsumPair", work) or not _read_by(pair.outputs[0], [norm2], work):
        return None
    y1 = pair.inputs[0]
    norm1 = y1.op
    attrs1 = _norm(norm1, work)
    if attrs1 is None or y1 is not norm1.outputs[0] or _other(norm2, pair.outputs[0]) is not y1 \
            or not _read_by(y1, [pair, norm2], work):
        return None
    proj = next((t.op for t in norm1.inputs[:2] if t.op.type == "FusedEinsum"), None)
    if proj is None or not _step(proj, "FusedEinsum", work) or len(proj.inputs) != 3 \
            or not _read_by(proj.outputs[0], [norm1], work):
        return None
    x = _other(norm1, proj.outputs[0])
    steps = (proj, norm1, pair, norm2)
    inputs = list(proj.inputs) + [x] + list(norm1.inputs[2:]) + list(pair.inputs[1:]) + list(norm2.inputs[2:])
    if x is None or len(inputs) != 12 or any(op.device != norm2.device for op in steps) \
            or any(t.dtype is not x.dtype for t in inputs):
        return None
    d = NodeDef("FusedBlockTail", {"CPU": block_tail_kernels.block_tail}, heavy=True)
    attrs = {"proj": proj.attrs["equation"], "first": pair.attrs["first"], "second": pair.attrs["second"],
             "relu0": bool(proj.attrs.get("relu", False)), "relu1": pair.attrs["relu1"], "relu2": pair.attrs["relu2"],
             "eps1": attrs1["epsilon"], "eps2": attrs2["epsilon"], "rms1": bool(attrs1.get("rms", False)),
             "rms2": bool(attrs2.get("rms", False))}
    y = norm2.outputs[0]
    node = Node(norm2, d, inputs, attrs, [(y.shape, y.dtype)], type_="FusedBlockTail", name=norm2.name + "/tail",
                control_inputs=(), fused=fused_names(steps))
    return work.fuse(node, steps)      # (commit maps norm2's first output; the statistics have no readers)


def run(work):
    """Fuses every match (see the module docstring); returns how many."""
    if not ENABLED or not einsum_group.inference_plan(work):
        return 0
    # (a step already in a chain is in node_rep: it starts no other)
    return work.tally("block_tail", sum(1 for op in list(work.ops) if op.type == "AddLayerNorm"
                                        and id(op) not in work.node_rep and _fuse(op, work) is not None))
