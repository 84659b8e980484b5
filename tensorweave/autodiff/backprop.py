"""The reverse walk: given ops in forward (topological) order, propagate gradients back.

Used by both :func:`tensorweave.gradients` (ops of a graph) and ``GradientTape`` (recorded
eager ops, or graph ops recorded while tracing). Gradient rules are written with ops, so
the walk builds graph nodes while building a graph and computes values while eager —
and, with an outer tape active, records itself, which gives higher-order derivatives.
"""
from tensorweave.ops.indexed_slices import IndexedSlices, aggregate
from tensorweave.core.registry import NOT_DIFFERENTIABLE


# Ops whose gradient rule forwards a sparse (IndexedSlices) gradient unchanged; every other
# rule receives dense gradients.
_PASSES_SPARSE = frozenset({"Identity", "ReadVariableOp"})


def backprop(ops, targets, target_grads, sources, stop_ids=frozenset()):
    """Returns d(sum targets·target_grads)/d(sources) as a list (None where unconnected)."""
    grads = {}
    for t, g in zip(targets, target_grads):
        grads.setdefault(id(t), []).append(g)
    source_ids = {id(s) for s in sources}
    for op in reversed(ops):
        outs = op.outputs
        out_grads = []
        any_grad = False
        for o in outs:
            gl = grads.get(id(o))
            if gl is None:
                out_grads.append(None)
                continue
            if id(o) not in source_ids:
                del grads[id(o)]
            g = aggregate(gl)
            if type(g) is IndexedSlices and op.type not in _PASSES_SPARSE:
                g = g.to_dense()
            out_grads.append(g)
            any_grad = True
        if not any_grad:
            continue
        fn = getattr(op, "grad_fn", None) or op.opdef.grad
        if fn is NOT_DIFFERENTIABLE:
            continue
        if fn is None:
            raise LookupError(f"No gradient defined for operation '{op.name}' (op type: {op.type}). "
                              "Hint: register one with tw.register_gradient, or wrap the computation "
                              "in tw.stop_gradient.")
        if len(outs) > 1:
            out_grads = [g if g is not None else _zeros_for(o) for g, o in zip(out_grads, outs)]
        in_grads = fn(op, *out_grads)
        for inp, g in zip(op.inputs, in_grads):
            if g is None or id(inp) in stop_ids:
                continue
            grads.setdefault(id(inp), []).append(g)
    return [aggregate(grads.get(id(s), [])) for s in sources]


def _zeros_for(t):
    if not (t.dtype.is_floating or t.dtype.is_complex):
        return None  # integer, resource and variant outputs carry no gradient
    from tensorweave.ops.array_ops import zeros_like
    return zeros_like(t)


def densify(g):
    return g.to_dense() if isinstance(g, IndexedSlices) else g
