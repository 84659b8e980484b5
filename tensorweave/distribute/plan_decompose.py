"""Decompositions in planned graphs: a softmax-like op whose class axis is split runs as its
stable partial log-sum-exp (``decompositions.py``) instead of gathering the logits.

The eager interpreter runs ``DECOMPOSITIONS[op_type]`` op by op when every signature of the op's
rule needs boxing. The graph planner does the same per op of the class-axis family
(``decompositions.CLASS_AXIS_OPS``) when input 0 is split on the class axis on some mesh axis and
the op's own choice would box an input: the decomposition is traced into a *scratch* graph (the
user's graph is never changed: a TF1 session's graph may be finalized, and a graph's version keys
its cached plans) on placeholders standing for the op's inputs, and its ops are planned in place
of the op. Only row statistics move (a partial max and a partial sum per row, pinned to ``B``).

In the :class:`~tensorweave.distribute.planner.GraphPlan` the scratch ops come right before the
op, in ``gp.ops``; the placeholders and the op itself are ``"alias"`` plans (``OpPlan.value``:
the tensors they stand for), which ``rank_graph`` resolves to those tensors' values. Gradients
need nothing more: the op's gradient reads its inputs and outputs (aliases) and its own ops
(``softmax``, ``SparseSoftmaxCrossEntropyGrad``) are decomposed in the backward plan alike.

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1, 2])
>>> x = tw.constant(np.array([[1000.0, 0.0, 1.0, 2.0, 999.0]], np.float32))
>>> y = tw.function(tw.nn.log_softmax)(x.to_global(placement=p, sbp=tw.sbp.split(1)))
>>> y.sbp, bool(np.allclose(y.numpy(), tw.nn.log_softmax(x).numpy()))
((S(1),), True)
"""
from tensorweave.core.dispatch import execute
from tensorweave.core.graph import Graph
from tensorweave.core.registry import get_op
from tensorweave.core.sbp import Split
from tensorweave.distribute import decompositions
from tensorweave.distribute.interpreter import _known

DECOMPOSE = True          # False: box the logits as the op's rule says (the plan before session 13)


def class_split(op, ins):
    """Whether ``op`` is of the class-axis family and input 0 is split on its class axis."""
    if not DECOMPOSE or op.type not in decompositions.CLASS_AXIS_OPS or not ins:
        return False
    rank = len(ins[0]._shape)
    if rank == 0:
        return False
    axis = op.attrs.get("axis", -1) % rank
    return any(isinstance(s, Split) and s.axis == axis for s in ins[0]._sbp)


def trace(op, placement):
    """``(placeholders, ops, outputs)``: the decomposition of ``op`` in a scratch graph."""
    g = Graph()
    attrs = {k: v for k, v in op.attrs.items() if k[0] != "_"}
    with g.as_default():
        with g.name_scope(op.name + "/decomposed/"):
            phs = [execute(get_op("Placeholder"), [], {"dtype": x.dtype, "shape": x.shape}, f"input{k}")
                   for k, x in enumerate(op.inputs)]
            decompositions._tracing.placement = placement
            try:
                out = decompositions.DECOMPOSITIONS[op.type](*phs, **attrs)
            finally:
                decompositions._tracing.placement = None
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return phs, [o for o in g._ops if o.type != "Placeholder"], outs


def plan_decomposed(planner, op, ins):
    """The op's ``"alias"`` plan after planning its decomposition's ops (``planner.spliced``
    receives them, to go into ``gp.ops`` before ``op``); None when the decomposition's outputs
    do not match the op's (then the op is planned as usual)."""
    from tensorweave.distribute.planner import OpPlan
    phs, inner, outs = trace(op, planner.placement)
    if len(outs) != len(op.outputs) or any(_known(a.shape) != _known(o.shape) or a.dtype != o.dtype
                                            for a, o in zip(outs, op.outputs)):
        return None
    gp = planner.gp
    spliced = []
    for ph, x in zip(phs, op.inputs):
        gp.layouts[id(ph)] = gp.layouts[id(x)]
        if id(x) in gp.local:
            gp.local.add(id(ph))
        gp.op_plans[id(ph.op)] = OpPlan(ph.op, "alias", value=[x])
        spliced.append(ph.op)
    for o in inner:
        for k, t in enumerate(o.inputs):
            planner.consumers.setdefault(id(t), []).append((o, k))
    for o in inner:
        gp.op_plans[id(o)] = planner.plan_op(o)
        spliced.append(o)
    for o, a in zip(op.outputs, outs):
        gp.layouts[id(o)] = gp.layouts[id(a)]
        if id(a) in gp.local:
            gp.local.add(id(o))
    planner.spliced[id(op)] = spliced
    return OpPlan(op, "alias", value=outs)


__all__ = ["class_split", "plan_decomposed", "DECOMPOSE"]
