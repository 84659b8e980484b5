"""Control flow (``tw.cond``, ``tw.while_loop`` and their gradients) in planned graphs on
global tensors: bodies planned on their inputs' layouts.

An ``If``/``While``/``WhileGrad`` op of a planned function runs on every rank, and each of its
bodies (branches, loop condition and body, the loop's gradient body) is **planned like a
function** (``planner``'s ``_Planner`` on the sub-graph) with its inputs laid out as they reach
the op: a ``while_loop`` over ``S(0)`` batch tensors runs its elementwise/matmul body on each
rank's rows, with the collectives the body needs (an all-reduce for a ``reduce_sum`` that
decides the loop) *inside* the rank's nested plan. Every rank takes the same branch and runs the
same number of iterations (a predicate is boxed to ``B``), so the nested collectives stay matched.

* ``If``: the predicate is boxed to ``B``; each branch is planned on the captured inputs'
  layouts; an output takes the then-branch's layout (the else-branch's where the then-branch's is
  ``B`` and the else's is not) and both branches box their output to it before returning.
* ``While``: the loop variables keep the layouts they enter with (a local one is ``B``); the
  body's outputs are boxed back to them (a loop-carried layout), the condition's to ``B``.
* ``WhileGrad``: the gradient body is planned on the forward's loop-variable layouts, the
  incoming gradients' and the captures'; the carried gradients are boxed back to the incoming
  layouts; the captures' gradients (summed over iterations per rank) keep the body's layouts.

Random draws inside bodies are planned as outside (``plan_random.py``): each rank draws from its
own copy of the op's stream, so call ``n`` (and iteration ``k``) draws what one device draws.
A global variable a body touches keeps its layout (its ops are planned like the others). Still
refused, with an error naming the op: ``to_global`` and Python functions inside a body, a
*local* variable used by a body with global inputs, a stateful body on local values only, and
loop variables whose shape changes between iterations (planned graphs need static shapes).
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.plan_data import SubGraph

__all__ = ["CONTROL_FLOW", "check_control_flow", "check_local_control_flow", "bind_control_flow", "holds_draw",
           "plan_nested"]

CONTROL_FLOW = frozenset({"If", "StatefulIf", "While", "StatefulWhile", "WhileGrad"})
_PY_FUNCTIONS = frozenset({"PyFunc", "EagerPyFunc"})


def _sub_graphs(op):
    return [v for k, v in op.attrs.items() if k[:1] == "_" and hasattr(v, "get_operations")]


def _inner_ops(op):
    """Every op of ``op``'s bodies, nested bodies included."""
    for g in _sub_graphs(op):
        for inner in g.get_operations():
            yield inner
            if inner.type in CONTROL_FLOW:
                yield from _inner_ops(inner)


def _refused_inside(op):
    """(the inner op, why) of the first op a body of ``op`` may not hold, or None."""
    for inner in _inner_ops(op):
        if inner.type == "_ToGlobal":
            return inner, "a to_global (a body's layouts are planned from its inputs')"
        if inner.type in _PY_FUNCTIONS:
            return inner, "a Python function (it would run once per rank)"
        if inner.attrs.get("_state") is not None and inner.opdef.bind is not None:
            return inner, "a Generator's draw (its one stream object would be advanced by every rank)"
    return None


def holds_draw(op):
    """Whether a body of control-flow op ``op`` draws from a random stream (then it is planned
    with per-rank streams even when no global value reaches it)."""
    from tensorweave.distribute.plan_random import draws_stream
    return any(draws_stream(inner) for inner in _inner_ops(op))


def _where(op):
    return f"'{op.name}' ({op.type}) in a planned function" + (f" (at {op.traceback})" if op.traceback else "")


def check_control_flow(op, ins, local_ids):
    """Raises a clear error where the planner cannot run ``op`` (a control-flow op) as described
    in the module docstring; ``ins`` are its inputs' layouts, ``local_ids`` the ids of tensors
    no global value reaches."""
    found = _refused_inside(op)
    if found is not None:
        inner, why = found
        raise errors.UnimplementedError(
            f"{_where(op)}: its body holds '{inner.name}' ({inner.type}), {why}; it is not planned on global "
            "tensors. Hint: compute it outside the tw.cond/tw.while_loop and pass the result in")
    for x, lay in zip(op.inputs, ins):
        if lay._dtype is _dt.resource and id(x) in local_ids:
            raise errors.UnimplementedError(
                f"{_where(op)}: its body uses the local variable behind '{x.name}' while global tensors reach it. "
                "Hint: make the variable global (tw.Variable(..., placement=..., sbp=...))")


def check_local_control_flow(op):
    """A control-flow op on local values only: stateless ones run on every rank alike."""
    check_control_flow(op, [], ())
    if op.opdef.stateful:
        raise errors.UnimplementedError(
            f"{_where(op)} updates state (a variable, a print) on local values "
            "only; it is not planned yet. Hint: make the variables it updates global (sbp=tw.sbp.broadcast)")


# ---- planning the bodies ------------------------------------------------------------------------
class _Body:
    """A body planned for the ranks: its :class:`~planner.GraphPlan` and, per output, the boxing
    plan to the layout the op returns (None: as it is)."""

    __slots__ = ("gp", "out_plans")

    def __init__(self, gp, out_plans):
        self.gp, self.out_plans = gp, out_plans


def _static(shape, what, op):
    from tensorweave.distribute.interpreter import _known
    known = _known(shape)
    if known is None:
        raise errors.UnimplementedError(
            f"{_where(op)}: {what} has shape {shape}; planned control flow on global tensors needs static shapes "
            "(a loop variable keeps its shape). Hint: give the tensors a fixed shape")
    return known


def _plan_body(planner, op, graph, inputs, layouts, wanted, label):
    """Plans ``graph`` (fed ``inputs`` then its captures, laid out as ``layouts``: a Layout, or None
    for a local value) and boxes its outputs to ``wanted`` (N-D SBPs; None: as planned)."""
    from tensorweave.distribute.planner import GraphPlan, _Planner
    from tensorweave.runtime import executor
    sub = SubGraph(graph, graph.outputs, inputs)
    feeds = list(inputs) + [p for _, p in graph.captures]
    ops = executor.prune(sub.outputs, sub.targets, {id(t): i for i, t in enumerate(feeds)})
    gp = GraphPlan(ops, feeds, list(sub.outputs), planner.placement, f"{planner.gp.label}/{op.name}/{label}")
    inner = _Planner(gp, planner.lookahead)
    for t, lay in zip(feeds, layouts):
        if lay is None:
            inner.set_local(t)
        else:
            gp.layouts[id(t)] = lay
    inner.run()
    body = _Body(gp, [None] * len(gp.fetches))
    if wanted is not None:
        _box_outputs(planner, op, body, wanted, label)
    return body


def _box_outputs(planner, op, body, wanted, label):
    """Sets ``body``'s output boxings to ``wanted`` (per output an N-D SBP, or None: as planned)."""
    from tensorweave.distribute.interpreter import _plan
    gp = body.gp
    for k, t in enumerate(gp.fetches):
        src = gp.layouts[id(t)]
        src_nd = planner.nd_b if id(t) in gp.local else src._sbp
        if wanted[k] is None or src_nd == wanted[k]:
            continue
        shape = _static(t.shape, f"output {k} of its {label}", op) if src._shape is None else src._shape
        body.out_plans[k] = _plan(shape, t.dtype.np_dtype, planner.placement, src_nd, wanted[k])


def _layout_of(body, k, nd_b):
    """Output ``k``'s N-D SBP as ``body`` computes it (a local value is ``B``)."""
    t = body.gp.fetches[k]
    return nd_b if id(t) in body.gp.local else body.gp.layouts[id(t)]._sbp


def _global(planner, op, x, lay):
    """``lay`` as a global layout (a local value is ``B``: every rank holds the whole)."""
    from tensorweave.distribute.interpreter import Layout
    if id(x) not in planner.gp.local:
        return lay
    shape = _static(x.shape, f"input '{x.name}'", op) if lay._shape is None else lay._shape
    return Layout(shape, lay._dtype, planner.nd_b, planner.placement)


def _hoist(planner, op, ins, plans, planned):
    """Moves the re-layout of loop-invariant inputs out of a loop's bodies: an input of ``op``
    captured by the bodies (a value, never a variable: a captured tensor cannot change between
    iterations) that every reader in them boxes to one layout — an ``S(1)`` weight gathered to
    ``B`` by the body's matmul each iteration — is boxed to it once, before the loop (``plans``),
    and ``ins`` says the bodies get it so. ``planned``: ``(body, {body feed index: op input
    index})`` pairs. Returns whether any input was hoisted (the bodies must then be planned again)."""
    from tensorweave.distribute.interpreter import Layout, _plan
    want = {}
    for body, feeds in planned:
        gp = body.gp
        for f, i in feeds.items():
            t, x = gp.feeds[f], op.inputs[i]
            if id(x) in planner.gp.local or ins[i]._dtype is _dt.resource or any(o is t for o in gp.fetches):
                want[i] = None
                continue
            for reader in gp.ops:
                p = gp.op_plans.get(id(reader))
                for k, y in enumerate(reader.inputs):
                    if y is not t:
                        continue
                    box = p.plans[k] if p is not None and len(p.plans) > k else None
                    dst = None if box is None else box.dst_sbp
                    want[i] = dst if want.get(i, dst) == dst else None
    hoisted = False
    for i, nd in want.items():
        lay = ins[i]
        if nd is None or nd == lay._sbp:
            continue
        plans[i] = _plan(lay._shape, lay._dtype.np_dtype, planner.placement, lay._sbp, nd)
        ins[i] = Layout(lay._shape, lay._dtype, nd, planner.placement)
        hoisted = True
    return hoisted


def plan_nested(planner, op, ins):
    """The :class:`~planner.OpPlan` of control-flow op ``op`` with inputs laid out as ``ins``
    (see the module docstring); its bodies' plans are kept for :func:`bind_control_flow`."""
    from tensorweave.distribute.interpreter import Layout, _plan
    from tensorweave.distribute.planner import OpPlan
    check_control_flow(op, ins, planner.gp.local)
    gp, nd_b, placement, a = planner.gp, planner.nd_b, planner.placement, op.attrs
    local = gp.local

    def cap(x, lay):
        return None if id(x) in local else lay
    plans = [None] * len(op.inputs)
    bodies = {}
    if op.type in ("If", "StatefulIf"):
        pred, outer = ins[0], list(zip(op.inputs[1:], ins[1:]))
        if pred._sbp != nd_b:                  # (a local predicate is B: every rank holds it)
            plans[0] = _plan(pred._shape, pred._dtype.np_dtype, placement, pred._sbp, nd_b)
        for key, g, idx in (("then_plan", a["_then"], a["_then_idx"]), ("else_plan", a["_else"], a["_else_idx"])):
            bodies[key] = _plan_body(planner, op, g, [], [cap(*outer[i]) for i in idx], None, key[:4] + " branch")
        out_nd = []
        for k in range(len(op.outputs)):
            nd, e_nd = _layout_of(bodies["then_plan"], k, nd_b), _layout_of(bodies["else_plan"], k, nd_b)
            out_nd.append(e_nd if nd == nd_b else nd)
        for key, body in bodies.items():
            _box_outputs(planner, op, body, out_nd, key[:4] + " branch")
        in_nd = [nd_b] + [lay._sbp for lay in ins[1:]]
    elif op.type in ("While", "StatefulWhile"):
        n = len(a["_var_specs"])
        var_lays = [_global(planner, op, x, lay) for x, lay in zip(op.inputs[:n], ins[:n])]
        for k, (s, _) in enumerate(a["_var_specs"]):
            _static(s, f"loop variable {k}", op)
        var_nd = [lay._sbp for lay in var_lays]
        cg, bg = a["_cond"], a["_body"]
        ins = list(ins)
        for hoist in (False, True):          # planned again with loop-invariant re-layouts moved before the loop
            caps = list(zip(op.inputs[n:], ins[n:]))
            bodies["cond_plan"] = _plan_body(planner, op, cg, cg.inputs,
                                             var_lays + [cap(*caps[i]) for i in a["_cond_idx"]], [nd_b], "loop condition")
            bodies["body_plan"] = _plan_body(planner, op, bg, bg.inputs,
                                             var_lays + [cap(*caps[i]) for i in a["_body_idx"]], var_nd, "loop body")
            if hoist or not _hoist(planner, op, ins, plans, [
                    (bodies["cond_plan"], {n + j: n + i for j, i in enumerate(a["_cond_idx"])}),
                    (bodies["body_plan"], {n + j: n + i for j, i in enumerate(a["_body_idx"])})]):
                break
        out_nd = var_nd + [nd_b]
        in_nd = var_nd + [lay._sbp for lay in ins[n:]]
        if op._extra is None:
            op._extra = {}
        op._extra["plan_loop_layouts"] = var_lays        # the history's layouts, for the loop's gradient
    else:                                                  # WhileGrad
        src = op.inputs[0].op
        var_lays = (src._extra or {}).get("plan_loop_layouts") if src.type in CONTROL_FLOW else None
        if var_lays is None:
            raise errors.UnimplementedError(f"{_where(op)}: the loop it differentiates is not in this planned graph")
        k = len(a["fidx"])
        g_lays = [_global(planner, op, x, lay) for x, lay in zip(op.inputs[1:1 + k], ins[1:1 + k])]
        gg = a["_graph"]
        n = a["n_vars"]
        wanted = [None] * len(gg.outputs)
        for j, i in enumerate(a["fidx"]):
            wanted[i] = g_lays[j]._sbp
        ins = list(ins)
        for hoist in (False, True):          # loop-invariant re-layouts moved before the loop, as for While
            caps = [cap(x, lay) for x, lay in zip(op.inputs[1 + k:], ins[1 + k:])]
            body = bodies["plan"] = _plan_body(planner, op, gg, gg.inputs, var_lays + g_lays + caps, wanted,
                                               "loop gradient body")
            first = len(gg.inputs)
            if hoist or not _hoist(planner, op, ins, plans, [(body, {first + j: 1 + k + j for j in range(len(caps))})]):
                break
        out_nd = [nd_b] * n
        for j, i in enumerate(a["fidx"]):
            out_nd[i] = g_lays[j]._sbp
        out_nd += [_layout_of(body, j, nd_b) for j in range(n, len(gg.outputs))]
        in_nd = [nd_b] + [lay._sbp for lay in g_lays] + [lay._sbp for lay in ins[1 + k:]]
    for k, (o, nd) in enumerate(zip(op.outputs, out_nd)):
        shape = () if o.dtype is _dt.variant else _static(o.shape, f"output {k}", op)
        gp.layouts[id(o)] = Layout(shape, o.dtype, nd, placement)
    gp.nested = getattr(gp, "nested", {})
    gp.nested[id(op)] = bodies
    attrs = {key: v for key, v in a.items() if key[0] != "_"}
    return OpPlan(op, "global", ("bodies planned per layout",), in_nd, out_nd, plans,
                  [(op.type, attrs)] * placement.size)


def _rank_body(body, outer):
    """Rank ``outer.index``'s nested plan spec of a planned body (its resources, communicator
    included, in the rank spec's table)."""
    from tensorweave.distribute.planner import lower_rank_ops
    from tensorweave.distribute.rank_graph import rank_ops
    r = rank_ops(body.gp, outer.index, outer.table, outer.comm_ref, outer.device)
    r.fetches = [v if plan is None else r._input(t, plan) for t, v, plan in zip(body.gp.fetches, r.fetches,
                                                                                 body.out_plans)]
    r.targets = [n for n in r.ops if n.opdef.stateful]
    return lower_rank_ops(r, outer.table, body.gp.label)[0]


def bind_control_flow(op, attrs, table, outer=None):
    """``attrs`` with the op's bound values: its sub-graphs as nested plan specs whose resources go
    into ``table``, the rank spec's resource table (the bodies planned per layout where the
    planner planned them: ``outer``, the rank's ``rank_graph.RankOps``, says which rank)."""
    from tensorweave.runtime import executor
    bodies = getattr(outer.gp, "nested", {}).get(id(op)) if outer is not None else None
    out = dict(attrs)
    for k, v in op.opdef.bind(op).items():
        if bodies is not None and k in bodies:
            v = _rank_body(bodies[k], outer)
        elif isinstance(v, SubGraph):
            v = executor.build_spec(v.outputs, v.targets, list(v.inputs) + [p for _, p in v.graph.captures],
                                    None, None, None, table)
        out[k] = v
    return out
