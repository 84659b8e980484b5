"""Self-attention's scores, softmax and weighted sum as one plan step at inference
(``FusedAttention``, ``kernels/cpu/attention_kernels.py``).

Runs after ``einsum_group`` (the ``remapping`` option switches both), on inference plans only
(``einsum_group.inference_plan``: a training step reads the probabilities again for the
gradients). Matches ``Einsum(dot, key, query) -> Softmax(axis -1) -> Einsum(combine, probs,
value)`` where ``dot`` and ``combine`` have the layouts of Keras' ``MultiHeadAttention`` over one
attention axis (``aecd,abcd->acbe`` and ``acbe,aecd->abcd``, any letters: ``[B, S, H, D]`` key,
``[B, T, H, D]`` query, ``[B, H, T, S]`` scores, ``[B, S, H, Dv]`` value), float32 or float64,
each step on a CPU device, running its stock kernel, with no ordering edges, the scores and the
probabilities read by the next step alone (neither fed nor fetched). The node takes the place of
the second ``Einsum``; the other two steps go.

``TW_REMAP_ATTENTION=0`` (read when a plan is built) leaves the three steps apart.

>>> import numpy as np, tensorweave as tw
>>> def attend(k, q, v):
...     return tw.einsum("acbe,aecd->abcd", tw.nn.softmax(tw.einsum("aecd,abcd->acbe", k, q)), v)
>>> f = tw.function(attend)
>>> x = tw.ones([1, 3, 2, 4])
>>> f(x, x, x).numpy().shape
(1, 3, 2, 4)
>>> from tensorweave.runtime.passes import plan_stats
>>> plan_stats(f).get("attention")
1
"""
import os
import re

from tensorweave.kernels.cpu import attention_kernels, einsum_matmul
from tensorweave.runtime.passes import einsum_group
from tensorweave.runtime.passes.ir import Node, NodeDef, runs_stock_kernel

#: read when a plan is built; ``TW_REMAP_ATTENTION=0``: off, for comparisons
ENABLED = os.environ.get("TW_REMAP_ATTENTION", "1") != "0"
_DOT, _COMBINE = einsum_matmul.layout_key("aecd", "abcd", "acbe"), einsum_matmul.layout_key("acbe", "aecd", "abcd")
_EQUATION = re.compile(r"([a-zA-Z]{4}),([a-zA-Z]{4})->([a-zA-Z]{4})")


def _layout(op):
    """The layout key of an ``Einsum``'s equation (``einsum_matmul.layout_key``), or None."""
    m = _EQUATION.fullmatch(op.attrs.get("equation", "").replace(" ", ""))
    return None if m is None else einsum_matmul.layout_key(*m.groups())


def _step(op, work, op_type, n_inputs):
    """Whether ``op`` can be one of the fused steps: its stock kernel on a CPU device, no ordering
    edges, float32 or float64 in and out."""
    return runs_stock_kernel(op, op_type) and len(op.inputs) == n_inputs and not op.control_inputs \
        and id(op) not in work.pinned and work.device_type(op) == "CPU" and len(op.outputs) == 1 \
        and op.outputs[0].dtype.name in ("float32", "float64") \
        and all(t.dtype is op.outputs[0].dtype for t in op.inputs)


def _only_reader(t, work, op_type):
    """The one op reading ``t`` where it is of ``op_type`` and ``t`` is neither fed nor fetched."""
    readers = work.consumers.get(id(t), [])
    if len(readers) != 1 or work.protected(t) or readers[0].type != op_type:
        return None
    return readers[0]


def _fuse(dot, work):
    """The node in place of the combining ``Einsum`` after ``dot``, or None where the three steps
    do not match (see the module docstring)."""
    if not _step(dot, work, "Einsum", 2) or _layout(dot) != _DOT:
        return None
    soft = _only_reader(dot.outputs[0], work, "Softmax")
    if soft is None or not _step(soft, work, "Softmax", 1) or soft.attrs.get("axis", -1) not in (-1, 3) \
            or soft.device != dot.device:
        return None
    comb = _only_reader(soft.outputs[0], work, "Einsum")
    if comb is None or not _step(comb, work, "Einsum", 2) or comb.inputs[0] is not soft.outputs[0] \
            or _layout(comb) != _COMBINE or comb.device != dot.device:
        return None
    d = NodeDef("FusedAttention", {"CPU": attention_kernels.fused_attention}, heavy=True)
    node = Node(comb, d, [dot.inputs[0], dot.inputs[1], comb.inputs[1]],
                {"dot": dot.attrs["equation"], "combine": comb.attrs["equation"]},
                [(comb.outputs[0].shape, comb.outputs[0].dtype)], type_="FusedAttention",
                name=comb.name + "/attention", control_inputs=(),
                fused=[dot.name, soft.name, comb.name])
    return work.fuse(node, (dot, soft, comb))


def run(work):
    """Fuses every match (see the module docstring); returns how many."""
    if not ENABLED or not einsum_group.inference_plan(work):
        return 0
    return work.tally("attention", sum(1 for op in list(work.ops) if op.type == "Einsum"
                                       and _fuse(op, work) is not None))
