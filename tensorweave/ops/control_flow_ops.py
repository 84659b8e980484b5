"""Grouping and ordering: ``group``, ``no_op``, ``tuple``, ``control_dependencies``.

``cond`` and ``while_loop`` live in ``ops/control_flow.py``.
"""
from tensorweave.core.context import building_graph
from tensorweave.core.dispatch import execute
from tensorweave.core.graph import Operation, get_default_graph
from tensorweave.core.registry import get_op, register_kernel, register_op

register_op("NoOp", infer=lambda i, a: [], num_outputs=0, stateful=True)
register_kernel("NoOp", "CPU")(lambda: ())


def no_op(name=None):
    if building_graph() is None:
        return None
    return _noop(name)


def _noop(name):
    return execute(get_op("NoOp"), [], {}, name or "NoOp")


def group(*inputs, name=None):
    """An op that runs all ``inputs`` (ops or tensors); produces no value."""
    if building_graph() is None:
        return None
    deps = []
    for x in inputs:
        for y in (x if isinstance(x, (list, tuple)) else [x]):
            if y is None:
                continue
            y = y if isinstance(y, Operation) else getattr(y, "op", None) or y._graph_op()
            deps.append(y)
    graph = get_default_graph()
    with graph.control_dependencies(deps):
        return _noop(name or "group_deps")


def control_dependencies(control_inputs):
    """Ops created inside run after ``control_inputs`` (no effect when executing eagerly)."""
    graph = building_graph()
    if graph is None:
        import contextlib
        return contextlib.nullcontext()
    return graph.control_dependencies(control_inputs)


def tuple_(tensors, name=None, control_inputs=None):
    """Identity of each tensor, each gated on all of them (and ``control_inputs``)."""
    if building_graph() is None:
        return list(tensors)
    from tensorweave.ops.array_ops import identity
    gate = group(*[t for t in tensors if t is not None], *(control_inputs or []))
    with control_dependencies([gate]):
        return [None if t is None else identity(t) for t in tensors]
