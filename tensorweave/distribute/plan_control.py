"""Control flow (``tw.cond``, ``tw.while_loop``) in planned graphs on global tensors.

An ``If``/``While`` op of a planned function runs on every rank with its global inputs boxed
to ``B`` (its op has no SBP rule: the planner's all-``B`` fallback, with its warning): each rank
runs the branch or loop body whole, as a nested plan of ordinary local ops, on the logical
values, so every rank computes the same outputs (``B``) and the result is the single-device
one. A rank's nested plan is built from the op's sub-graphs into the rank's spec (the same
nested specs a single-device plan has), so it ships like the rest.

What a body may touch follows from that: a *global* variable captured by a body must be ``B``
(a rank's shard is then the whole value, and every rank applies the same update to its copy);
random draws, ``to_global`` and Python functions inside a body are refused with an error
naming the op (a body's nested plan would share one process stream between the ranks, or run
a Python function once per rank); so is a *local* variable a body updates, and a stateful body
on local values only.
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.plan_data import SubGraph
from tensorweave.core.sbp import Broadcast

__all__ = ["CONTROL_FLOW", "check_control_flow", "check_local_control_flow", "bind_control_flow"]

CONTROL_FLOW = frozenset({"If", "StatefulIf", "While", "StatefulWhile", "WhileGrad"})
_PY_FUNCTIONS = frozenset({"PyFunc", "EagerPyFunc"})


def _sub_graphs(op):
    return [v for k, v in op.attrs.items() if k[:1] == "_" and hasattr(v, "get_operations")]


def _refused_inside(op):
    """(the inner op, why) of the first op a body of ``op`` may not hold, or None."""
    from tensorweave.distribute.plan_random import draws_stream
    for g in _sub_graphs(op):
        for inner in g.get_operations():
            if inner.type in CONTROL_FLOW:
                found = _refused_inside(inner)
                if found is not None:
                    return found
            elif draws_stream(inner) or inner.attrs.get("_state") is not None and inner.opdef.bind is not None:
                return inner, "a random draw (each rank's nested plan would share one process stream)"
            elif inner.type == "_ToGlobal":
                return inner, "a to_global (a body runs on logical values, one rank at a time)"
            elif inner.type in _PY_FUNCTIONS:
                return inner, "a Python function (it would run once per rank)"
    return None


def check_control_flow(op, ins, local_ids):
    """Raises a clear error where the planner cannot run ``op`` (a control-flow op) as described
    in the module docstring; ``ins`` are its inputs' layouts, ``local_ids`` the ids of tensors
    no global value reaches."""
    where = f"'{op.name}' ({op.type}) in a planned function" + (f" (at {op.traceback})" if op.traceback else "")
    found = _refused_inside(op)
    if found is not None:
        inner, why = found
        raise errors.UnimplementedError(
            f"{where}: its body holds '{inner.name}' ({inner.type}), {why}; planned control flow on global "
            "tensors runs every body on every rank. Hint: draw or convert outside the tw.cond/tw.while_loop and "
            "pass the result in")
    for x, lay in zip(op.inputs, ins):
        if lay._dtype is not _dt.resource:
            continue
        if id(x) in local_ids:
            raise errors.UnimplementedError(
                f"{where}: its body uses the local variable behind '{x.name}' while global tensors reach it. "
                "Hint: make the variable global and replicated (tw.Variable(..., placement=..., sbp=tw.sbp.broadcast))")
        if not all(isinstance(s, Broadcast) for s in lay._sbp):
            from tensorweave.ops.control_flow import variable_of_handle
            var = variable_of_handle(x)
            name = getattr(var, "name", x.name)
            raise errors.UnimplementedError(
                f"{where}: its body uses variable '{name}' of shape {list(lay._shape)} laid out as "
                f"{tuple(lay._sbp)}; a body runs on logical values, so a variable it touches must be broadcast (B). "
                "Hint: read the variable outside the tw.cond/tw.while_loop and pass the value in, or make it "
                "sbp=tw.sbp.broadcast")


def check_local_control_flow(op):
    """A control-flow op on local values only: stateless ones run on every rank alike."""
    check_control_flow(op, [], ())
    if op.opdef.stateful:
        raise errors.UnimplementedError(
            f"'{op.name}' ({op.type}) in a planned function" + (f" (at {op.traceback})" if op.traceback else "") +
            " updates state (a variable, a print) on local values "
            "only; it is not planned yet. Hint: make the variables it updates global (sbp=tw.sbp.broadcast)")


def bind_control_flow(op, attrs, table):
    """``attrs`` with the op's bound values (its sub-graphs as nested plan specs whose resources go
    into ``table``, the rank spec's resource table)."""
    from tensorweave.runtime import executor
    out = dict(attrs)
    for k, v in op.opdef.bind(op).items():
        if isinstance(v, SubGraph):
            v = executor.build_spec(v.outputs, v.targets, list(v.inputs) + [p for _, p in v.graph.captures],
                                    None, None, None, table)
        out[k] = v
    return out
