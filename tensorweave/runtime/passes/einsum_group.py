"""Products of one input against weights of one shape as one product (``FusedEinsumGroup``,
``kernels/cpu/einsum_group_kernels.py``): self-attention's query, key and value projections.

Runs after ``remapping`` (the ``remapping`` option switches both), on inference plans only (no
step that writes a variable: a training step would stack weights that change every step, and
its gradients read the products apart). Matches two or more ``Einsum`` or ``FusedEinsum`` nodes
(``runtime/passes/einsum_bias.py``) with the same first input, equation, weight shape, bias shape,
ReLU and dtype (float32, float64), weights and biases read from variables (their stacks are
kept until one changes: ``core/derived.get_many``), on a CPU device, no ordering edges, outputs not fed (a fetched
one is the group's slice), whose weights' output letters end both the weight's and the output's subscripts in the
same order (``abc,cde->abde``; a ``Dense``'s ``abc,cd->abd``), and a bias, where there is one, of
exactly those axes. The group's node takes the place of its last member (every member's readers
come after it, else the group is left apart), with a stacking letter added in front of the output
letters: ``abc,cfde->abfde``, each member's output the slice ``[:, :, i]`` (the last member's
first). A ``Mul`` by a scalar constant that alone reads a member's output (attention's query
scale) joins the node: that slice is multiplied in place.

``TW_REMAP_EINSUM_GROUP=0`` (read when a plan is built) leaves the products apart.

>>> import numpy as np, tensorweave as tw
>>> w = [tw.Variable(np.full((2, 2), float(i), np.float32)) for i in (1, 2)]
>>> f = tw.function(lambda x: [tw.einsum("abc,cd->abd", x, v) for v in w])
>>> [r.numpy().tolist() for r in f(tw.ones([1, 1, 2]))]
[[[[2.0, 2.0]]], [[[4.0, 4.0]]]]
>>> from tensorweave.runtime.passes import plan_stats
>>> plan_stats(f).get("einsum_group")
1
"""
import os
import re
import string

from tensorweave.kernels.cpu import einsum_group_kernels
from tensorweave.runtime.passes.ir import Node, NodeDef, const_value, runs_stock_kernel, static_dims

#: read when a plan is built; ``TW_REMAP_EINSUM_GROUP=0``: off, for comparisons
ENABLED = os.environ.get("TW_REMAP_EINSUM_GROUP", "1") != "0"
_DTYPES = ("float32", "float64")
#: stateful steps an inference plan may hold (reads of variables: an embedding's lookup among them)
_READS = frozenset({"ReadVariableOp", "VarHandleOp", "ResourceGather", "VariableShape", "VarIsInitializedOp"})
_EQUATION = re.compile(r"([a-zA-Z]+),([a-zA-Z]+)->([a-zA-Z]+)")


def stacked(equation):
    """``(equation with the stacking letter, weight axis, output axis)``, or None where the
    weight's output letters are not the trailing letters of both the weight and the output.

    >>> stacked("abc,cde->abde"), stacked("abc,cd->abd"), stacked("abcd,cde->abe")
    (('abc,cfde->abfde', 1, 2), ('abc,ced->abed', 1, 2), ('abcd,cdfe->abfe', 2, 2))
    >>> stacked("abc,cde->abed") is None       # the output's letters in another order
    True
    """
    m = _EQUATION.fullmatch(equation.replace(" ", ""))
    if m is None:
        return None
    sa, sb, so = m.groups()
    right = "".join(c for c in sb if c in so and c not in sa)
    if not right or not sb.endswith(right) or not so.endswith(right) or len(set(sa + sb)) > 51:
        return None
    g = next(c for c in string.ascii_letters if c not in sa + sb + so)
    wa, oa = len(sb) - len(right), len(so) - len(right)
    return f"{sa},{sb[:wa]}{g}{sb[wa:]}->{so[:oa]}{g}{so[oa:]}", wa, oa


def _key(op, work):
    """What members of one group share, or None where ``op`` cannot join one."""
    fused = runs_stock_kernel(op, "FusedEinsum")
    if not (fused or runs_stock_kernel(op, "Einsum")) or len(op.inputs) != (3 if fused else 2):
        return None
    if op.control_inputs or id(op) in work.pinned or work.device_type(op) != "CPU" or len(op.outputs) != 1 \
            or id(op.outputs[0]) in work.feed_ids or op.outputs[0].dtype.name not in _DTYPES:
        return None
    if any(t.dtype is not op.outputs[0].dtype for t in op.inputs) or any(t.op.type != "ReadVariableOp"
                                                                          for t in op.inputs[1:]):
        return None     # (weights and biases of variables: their stacks are kept per version)
    how = stacked(op.attrs["equation"])
    shapes = [static_dims(t) for t in op.inputs[1:]]
    if how is None or None in shapes or fused and len(shapes[1]) != len(shapes[0]) - how[1]:
        return None
    return (id(op.inputs[0]), op.type, op.attrs["equation"], bool(op.attrs.get("relu", False)),
            op.outputs[0].dtype.name, op.device, tuple(shapes))


def _group(members, work, place):
    """The group's node in place of its last member, or None where a member's output is read
    before that place."""
    last = max(members, key=lambda op: place[id(op)])
    if any(place[id(r)] <= place[id(last)] for op in members for r in work.consumers.get(id(op.outputs[0]), [])):
        return None
    # the last member first: the node replaces it (``node_rep``: the commit resolves the node's
    # inputs, which an earlier group's rewrite may have cloned, and maps the replaced node's
    # output to the node's first)
    members = [last] + [op for op in members if op is not last]
    fused = members[0].type == "FusedEinsum"
    equation, weight_axis, out_axis = stacked(members[0].attrs["equation"])
    n = len(members)
    d = NodeDef("FusedEinsumGroup", {"CPU": einsum_group_kernels.fused_einsum_group}, num_outputs=n, heavy=True)
    inputs = [members[0].inputs[0]] + [op.inputs[1] for op in members] + (
        [op.inputs[2] for op in members] if fused else [])
    scaled = [_scale(op, work) for op in members]
    attrs = {"equation": equation, "count": n, "weight_axis": weight_axis, "out_axis": out_axis, "bias": fused,
             "relu": bool(members[0].attrs.get("relu", False)),
             "scales": tuple(None if m is None else s for m, s in scaled)}
    node = Node(last, d, inputs, attrs, [(op.outputs[0].shape, op.outputs[0].dtype) for op in members],
                type_="FusedEinsumGroup", name=last.name + "/group", control_inputs=(),
                fused=[name for op, (mul, _) in zip(members, scaled)
                       for name in (getattr(op, "fused", None) or [op.name]) + ([mul.name] if mul else [])])
    work.node_rep[id(last)] = node
    for i, (op, (mul, _)) in enumerate(zip(members, scaled)):
        if i:
            work.node_rep[id(op)] = None
            work.rep[id(op.outputs[0])] = node.outputs[i]
        if mul is not None:     # its readers read the group's output, scaled in place
            work.node_rep[id(mul)] = None
            work.rep[id(mul.outputs[0])] = node.outputs[i]
    return node


def _scale(op, work):
    """``(mul, scale)`` where the only reader of ``op``'s output is a ``Mul`` by a scalar constant
    of its dtype (attention's query scaled by ``1/sqrt(key_dim)``): the group multiplies that
    slice in place (the same multiplications: the same bits) instead of a plan step allocating
    its own array (164 µs a call at load 7, against a strided slice; issue 18 session 19, enc23);
    else ``(None, None)``."""
    y = op.outputs[0]
    readers = work.consumers.get(id(y), [])
    if len(readers) != 1 or id(y) in work.fetch_ids:
        return None, None
    mul = readers[0]
    if not runs_stock_kernel(mul, "Mul") or len(mul.inputs) != 2 or mul.control_inputs or id(mul) in work.pinned \
            or id(mul.outputs[0]) in work.feed_ids or mul.device != op.device or mul.outputs[0].dtype is not y.dtype:
        return None, None
    for x, c in ((mul.inputs[0], mul.inputs[1]), (mul.inputs[1], mul.inputs[0])):
        value = const_value(c, work)
        if x is y and c is not y and value is not None and value.ndim == 0 and value.dtype == y.dtype.np_dtype:
            return mul, float(value)
    return None, None


def inference_plan(work):
    """Whether the plan writes no variable (its stateful steps all reads, :data:`_READS`)."""
    return not any(op.opdef.stateful and op.type not in _READS for op in work.ops)


def run(work):
    """Groups the plan's products (see the module docstring); returns how many groups."""
    if not ENABLED or not inference_plan(work):
        return 0
    groups = {}
    for op in work.ops:
        key = _key(op, work)
        if key is not None:
            groups.setdefault(key, []).append(op)
    place = {id(op): i for i, op in enumerate(work.ops)}
    n = sum(1 for members in groups.values() if len(members) > 1 and _group(members, work, place) is not None)
    if n:
        work.stats["einsum_group"] = work.stats.get("einsum_group", 0) + n
    return n
