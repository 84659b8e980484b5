"""Self-attention in a training step as two plan steps (``kernels/cpu/attention_train.py``):
``FusedAttentionTrain`` for the forward's ``Einsum(dot, key, query) -> Softmax -> Einsum(combine,
probs, value)`` (outputs: the attention's output and the probabilities) and ``FusedAttentionGrad``
for the five backward steps the gradient builds from them: ``dP = Einsum(dO, value)``, ``dV =
Einsum(dO, probs)``, ``dS = SoftmaxGrad(probs, dP)``, ``dK = Einsum(dS, query)``, ``dQ = Einsum(dS,
key)`` (outputs: ``dQ``, ``dK``, ``dV``).

Runs after ``attention`` (the ``remapping`` option switches both), wherever the whole pattern is
there: the probabilities read by the combining product, the value gradient's product and the
softmax gradient alone, ``dP`` by the softmax gradient alone, ``dS`` by the two products alone
(none of them fed or fetched); each step a stock kernel on a CPU device, with no ordering edges,
float32 or float64, in the layouts of Keras' ``MultiHeadAttention`` over one attention axis
(``attention.py``'s checks for the forward). A plan that runs the forward alone (inference) is
``attention.py``'s. The forward node takes the combining product's place, the backward node the
place of ``dQ``'s product where the value and key gradients are read after it; the other steps go.

``TW_REMAP_ATTENTION_TRAIN=0`` (read when a plan is built) leaves the eight steps apart.

>>> import numpy as np, tensorweave as tw
>>> dot, combine = "aecd,abcd->acbe", "acbe,aecd->abcd"
>>> def grads(k, q, v):
...     with tw.GradientTape() as tape:
...         tape.watch([k, q, v])
...         y = tw.einsum(combine, tw.nn.softmax(tw.einsum(dot, k, q)), v)
...         loss = tw.reduce_sum(y * y)
...     return tape.gradient(loss, [k, q, v])
>>> f = tw.function(grads)
>>> x = tw.ones([1, 3, 2, 4])
>>> [g.shape.as_list() for g in f(x, x, x)]
[[1, 3, 2, 4], [1, 3, 2, 4], [1, 3, 2, 4]]
>>> from tensorweave.runtime.passes import plan_stats
>>> plan_stats(f).get("attention_train")
1
"""
import os

from tensorweave.kernels.cpu import attention_train, einsum_matmul
from tensorweave.runtime.passes import attention
from tensorweave.runtime.passes.ir import Node, NodeDef

#: read when a plan is built; ``TW_REMAP_ATTENTION_TRAIN=0``: off, for comparisons
ENABLED = os.environ.get("TW_REMAP_ATTENTION_TRAIN", "1") != "0"
_DP, _DV, _DK, _DQ = (einsum_matmul.layout_key(*e.replace("->", ",").split(","))
                      for e in attention_train.GRAD_EQUATIONS)


def _readers(t, work, n):
    """The ``n`` ops reading ``t`` (each once) where ``t`` is neither fed nor fetched, else None."""
    readers = work.consumers.get(id(t), [])
    if len(readers) != n or len({id(r) for r in readers}) != n or work.protected(t):
        return None
    return readers


def _einsum(op, layout, work, device):
    """Whether ``op`` is a fusable two-operand ``Einsum`` of ``layout`` on ``device``."""
    return op.type == "Einsum" and attention._step(op, work, "Einsum", 2) and attention._layout(op) == layout \
        and op.device == device


def _backward(soft, comb, work):
    """``(dp, dv, sg, dk, dq)``: the backward steps reading the probabilities, or None."""
    probs, (k, q), v = soft.outputs[0], soft.inputs[0].op.inputs, comb.inputs[1]
    readers = _readers(probs, work, 3)
    if readers is None:
        return None
    by_type = {r.type: r for r in readers if r is not comb}
    sg, dv = by_type.get("SoftmaxGrad"), by_type.get("Einsum")
    if sg is None or dv is None or not attention._step(sg, work, "SoftmaxGrad", 2) or sg.inputs[0] is not probs \
            or sg.attrs.get("axis", -1) not in (-1, 3) or sg.attrs.get("scale", 1.0) != 1.0 \
            or sg.device != soft.device or not _einsum(dv, _DV, work, soft.device) or dv.inputs[1] is not probs:
        return None
    g, dp = dv.inputs[0], sg.inputs[1].op
    if not _einsum(dp, _DP, work, soft.device) or dp.inputs[0] is not g or dp.inputs[1] is not v \
            or _readers(dp.outputs[0], work, 1) is None:
        return None
    grads = _readers(sg.outputs[0], work, 2)
    if grads is None:
        return None
    dk, dq = sorted(grads, key=lambda op: attention._layout(op) == _DQ)
    if not (_einsum(dk, _DK, work, soft.device) and _einsum(dq, _DQ, work, soft.device)
            and tuple(dk.inputs) == (sg.outputs[0], q) and tuple(dq.inputs) == (sg.outputs[0], k)):
        return None
    return dp, dv, sg, dk, dq


def _fuse(soft, work, place):
    """Replaces the forward and backward steps around ``soft`` (a ``Softmax``); whether it did."""
    dot = soft.inputs[0].op if len(soft.inputs) == 1 else None
    if dot is None or not attention._step(dot, work, "Einsum", 2) or attention._layout(dot) != attention._DOT \
            or _readers(dot.outputs[0], work, 1) is None or not attention._step(soft, work, "Softmax", 1) \
            or soft.attrs.get("axis", -1) not in (-1, 3) or soft.device != dot.device:
        return False
    combs = [r for r in work.consumers.get(id(soft.outputs[0]), []) if r.type == "Einsum" and r.inputs[0] is
             soft.outputs[0] and _einsum(r, attention._COMBINE, work, dot.device)]
    steps = _backward(soft, combs[0], work) if len(combs) == 1 else None
    if steps is None:
        return False
    comb, (dp, dv, sg, dk, dq) = combs[0], steps
    if any(place[id(r)] < place[id(dq)] for op in (dv, dk) for r in work.consumers.get(id(op.outputs[0]), [])):
        return False                    # (the node takes dQ's place: the other gradients are read after it)
    (k, q), v, probs, out = dot.inputs, comb.inputs[1], soft.outputs[0], comb.outputs[0]
    # (the kernels looked up now: a profiler wraps them before the plan is built)
    forward = NodeDef("FusedAttentionTrain", {"CPU": attention_train.attention_forward}, 2, heavy=True)
    backward = NodeDef("FusedAttentionGrad", {"CPU": attention_train.attention_backward}, 3, heavy=True)
    fwd = Node(comb, forward, [k, q, v], {"dot": dot.attrs["equation"], "combine": comb.attrs["equation"]},
               [(out.shape, out.dtype), (probs.shape, probs.dtype)], type_="FusedAttentionTrain",
               name=comb.name + "/attention_train", control_inputs=(), fused=[dot.name, soft.name, comb.name])
    work.node_rep[id(comb)] = fwd
    work.node_rep[id(dot)] = work.node_rep[id(soft)] = None
    bwd = Node(dq, backward, [dv.inputs[0], fwd.outputs[1], q, k, v],
               {"equations": tuple(op.attrs["equation"] for op in (dp, dv, dk, dq))},
               [(t.shape, t.dtype) for t in (dq.outputs[0], dk.outputs[0], dv.outputs[0])],
               type_="FusedAttentionGrad", name=sg.name + "/attention_grad", control_inputs=(),
               fused=[op.name for op in (dp, dv, sg, dk, dq)])
    for op in (dp, dv, sg, dk):
        work.node_rep[id(op)] = None
    work.node_rep[id(dq)] = bwd         # (its output becomes the node's first)
    work.rep[id(dk.outputs[0])], work.rep[id(dv.outputs[0])] = bwd.outputs[1:]
    return True


def run(work):
    """Fuses every match (see the module docstring); returns how many."""
    if not ENABLED:
        return 0
    place = {id(op): i for i, op in enumerate(work.ops)}
    n = sum(1 for op in list(work.ops) if op.type == "Softmax" and _fuse(op, work, place))
    if n:
        work.stats["attention_train"] = work.stats.get("attention_train", 0) + n
    return n
