"""``tw.gradients``: symbolic derivatives in a graph (TF1's ``tf.gradients``).

>>> import tensorweave as tw
>>> g = tw.Graph()
>>> with g.as_default():
...     x = tw.constant(2.0)
...     y = x * x
...     (dx,) = tw.gradients(y, [x])
>>> with tw.compat.v1.Session(graph=g) as s:
...     float(s.run(dx))
4.0
"""
from tensorweave.autodiff.backprop import backprop
from tensorweave.core.nest import flatten as _nest_flatten
from tensorweave.core.context import building_graph
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import SymbolicTensor


def _between(ys, xs):
    """Ops on a path from some x to some y, in creation (= topological) order."""
    x_ids = {id(x) for x in xs}
    # backward reachable from ys
    back = set()
    stack = [y.op for y in ys]
    while stack:
        op = stack.pop()
        if id(op) in back:
            continue
        back.add(id(op))
        stack.extend(t.op for t in op.inputs)
    # forward reachable from xs, restricted to `back`
    graph = ys[0].op.graph
    reach = set(x_ids)
    selected = []
    for op in graph._ops:
        if id(op) not in back:
            continue
        if any(id(t) in reach for t in op.inputs):
            selected.append(op)
            for o in op.outputs:
                reach.add(id(o))
    return selected


def gradients(ys, xs, grad_ys=None, name="gradients", stop_gradients=None,
              unconnected_gradients="none", colocate_gradients_with_ops=False, gate_gradients=False,
              aggregation_method=None):
    """Symbolic partial derivatives of ``sum(ys)`` with respect to each of ``xs``."""
    graph = building_graph()
    if graph is None:
        raise RuntimeError("tw.gradients is not supported when eager execution is enabled. "
                           "Hint: use tw.GradientTape.")
    ys = [convert_to_tensor(y) for y in _nest_flatten(ys)]
    xs_in = _nest_flatten(xs)
    keys = [x.handle_in(graph) if getattr(x, "_is_variable", False) else x for x in xs_in]
    for k in keys:
        if not isinstance(k, SymbolicTensor):
            raise TypeError(f"tw.gradients: xs must be graph tensors or variables, got {k!r}")
    from tensorweave.ops.array_ops import ones_like
    with graph.name_scope(name):
        if grad_ys is None:
            gys = [ones_like(y) for y in ys]
        else:
            gys = [ones_like(y) if g is None else convert_to_tensor(g) for g, y in zip(_nest_flatten(grad_ys), ys)]
        stop_ids = frozenset(id(t) for t in _nest_flatten(stop_gradients or []))
        ops = _between(ys, keys)
        out = backprop(ops, ys, gys, keys, stop_ids)
    if unconnected_gradients == "zero":
        from tensorweave.ops.array_ops import zeros_like
        out = [zeros_like(x) if g is None else g for g, x in zip(out, xs_in)]
    return out
