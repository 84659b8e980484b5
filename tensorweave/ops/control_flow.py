"""Data-dependent control flow: ``cond`` and ``while_loop``, both differentiable.

Executing eagerly these are plain Python ``if``/``while``. While building a graph each
branch/body is traced into a :class:`FuncGraph`; outer tensors it uses become inputs of
one ``If``/``While`` node, whose kernel runs the sub-graph's compiled plan.

Gradients are built the same way: the gradient of ``If`` is another ``cond`` whose
branches re-trace the forward branch and differentiate it; ``While`` also outputs the
loop variables of every iteration (dropped at once unless a gradient reads them), and
``WhileGrad`` walks them backwards through a traced gradient of the body.

>>> import tensorweave as tw
>>> @tw.function
... def f(x):
...     i, y = tw.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), (0, tw.constant(1.0)))
...     return tw.cond(y > 5.0, lambda: y, lambda: -y)
>>> float(f(tw.constant(2.0))), float(f(tw.constant(1.5)))
(8.0, -3.375)
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core import nest
from tensorweave.core.context import building_graph, ctx
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.graph import FuncGraph, get_default_graph
from tensorweave.core.plan_data import SubGraph
from tensorweave.core.registry import get_op, register_kernel, register_op
from tensorweave.core.shape import TensorShape, fmt

__all__ = ["cond", "while_loop", "case", "switch_case"]


def _ALWAYS(op):
    """Sub-graph nodes may hide any amount of work: always worth a thread."""
    return True


def _trace(name, fn, args=(), arg_specs=()):
    """Traces ``fn`` into a FuncGraph nested in the current graph; returns (graph, outputs)."""
    outer = get_default_graph()
    g = FuncGraph(name, outer_graph=outer)
    saved_tapes, ctx.tapes = ctx.tapes, []  # inner ops are differentiated through the node
    try:
        with g.as_default():
            from tensorweave.ops.array_ops import placeholder
            phs = [placeholder(d, s, name=f"arg{i}") for i, (s, d) in enumerate(arg_specs)]
            out = fn(*phs) if arg_specs else fn()
            flat = [g.capture(convert_to_tensor(o)) for o in nest.flatten(out)]
    finally:
        ctx.tapes = saved_tapes
    g.inputs, g.outputs = phs, flat
    return g, out, flat


def _replay(graph, mapping):
    """Re-creates, in the current graph, the ops of ``graph`` that its outputs need (data edges only),
    with ``mapping`` giving the tensors that replace its placeholders. Gradients are built from the
    traced graph this way, never by calling the user's Python again (whose closures may have been
    rebound since)."""
    needed, stack = {}, [t.op for t in graph.outputs if id(t) not in mapping]
    while stack:
        op = stack.pop()
        if id(op) in needed:
            continue
        needed[id(op)] = op
        stack.extend(t.op for t in op.inputs if id(t) not in mapping)
    for op in sorted(needed.values(), key=lambda o: o._id):
        if op.type == "Placeholder":
            raise ValueError(f"cannot replay graph {graph.name}: placeholder {op.name} has no value")
        out = execute(op.opdef, [mapping[id(t)] for t in op.inputs], op.attrs, op.name.rsplit("/", 1)[-1])
        outs = out if isinstance(out, tuple) else (out,) if op.outputs else ()
        for t, o in zip(op.outputs, outs):
            mapping[id(t)] = o
    return [mapping[id(t)] for t in graph.outputs]


def _capture_map(graph, outer=None):
    """Maps a traced graph's capture placeholders to captures of the same outer tensors here.
    ``outer`` (the op's own inputs for each capture) replaces the tensors recorded at tracing:
    an op replayed into a gradient graph reads replayed tensors, not the ones it was traced with."""
    g = get_default_graph()
    if outer is None:
        outer = [o for o, _ in graph.captures]
    return {id(ph): g.capture(o) for o, (_, ph) in zip(outer, graph.captures)}


def _plan(graph, outputs, inputs):
    """A nested plan of ``graph`` (fed ``inputs``, then its captures): the plan builder makes
    it a nested plan spec; the kernel gets it runnable, ``plan(feed_values) -> values``."""
    return SubGraph(graph, outputs, inputs)


def _watch_captured(inputs):
    for tape in ctx.tapes:
        if tape._watch_accessed:
            for t in inputs:
                if t.dtype is _dt.resource:
                    tape._watch_handle(t)


# ---- cond ---------------------------------------------------------------------------------
def _if_infer(inputs, attrs):
    return [(s, d) for s, d in attrs["_out_specs"]]


def _bind_if(op):
    a = op.attrs
    return {"then_plan": _plan(a["_then"], a["_then"].outputs, []),
            "else_plan": _plan(a["_else"], a["_else"].outputs, []),
            "then_idx": a["_then_idx"], "else_idx": a["_else_idx"]}


def variable_of_handle(t):
    """The Variable behind a resource tensor (through the captures of nested graphs), or None."""
    while t is not None:
        if t.op.type == "VarHandleOp":
            return t.op.attrs["variable"]
        g = t.op.graph
        t = next((outer for outer, ph in getattr(g, "captures", ()) if ph is t), None)
    return None


register_op("If", infer=_if_infer, num_outputs=lambda a: len(a["_out_specs"]), bind=_bind_if,
            heavy=_ALWAYS)
register_op("StatefulIf", infer=_if_infer, num_outputs=lambda a: len(a["_out_specs"]), bind=_bind_if,
            stateful=True, heavy=_ALWAYS)


def _if_kernel(pred, *inputs, then_plan, else_plan, then_idx, else_idx):
    if pred:
        return tuple(then_plan([inputs[i] for i in then_idx]))
    return tuple(else_plan([inputs[i] for i in else_idx]))


register_kernel("If", "CPU")(_if_kernel)
register_kernel("StatefulIf", "CPU")(_if_kernel)


def _merge_specs(t_flat, f_flat, name):
    specs = []
    for i, (a, b) in enumerate(zip(t_flat, f_flat)):
        if a.dtype is not b.dtype:
            raise TypeError(f"{name}: output {i} of true_fn has dtype {a.dtype.name} but false_fn's has "
                            f"{b.dtype.name}. Hint: tw.cast one of them")
        if a.shape.rank != b.shape.rank:
            shape = TensorShape(None)
        elif a.shape.rank is None:
            shape = TensorShape(None)
        else:
            shape = TensorShape([x if x == y else None for x, y in zip(a.shape.as_list(), b.shape.as_list())])
        specs.append((shape, a.dtype))
    return specs


def cond(pred, true_fn=None, false_fn=None, name=None):
    """``true_fn()`` if ``pred`` else ``false_fn()``; both must return the same structure."""
    if true_fn is None or false_fn is None:
        raise TypeError("cond: true_fn and false_fn are required")
    if building_graph() is None:
        return true_fn() if bool(pred) else false_fn()
    pred = convert_to_tensor(pred)
    if pred.dtype is not _dt.bool_ or pred.shape.rank not in (0, None):
        raise TypeError(f"cond: pred must be a scalar bool tensor, got {fmt(pred.shape)} {pred.dtype.name}")
    tg, t_out, t_flat = _trace("cond_true", true_fn)
    fg, f_out, f_flat = _trace("cond_false", false_fn)
    try:
        nest.assert_same_structure(t_out, f_out)
    except (ValueError, TypeError) as e:
        raise ValueError(f"cond: true_fn and false_fn must return the same structure: {e}") from None
    specs = _merge_specs(t_flat, f_flat, "cond")
    outer = []
    index = {}
    for g in (tg, fg):
        for t, _ in g.captures:
            if id(t) not in index:
                index[id(t)] = len(outer)
                outer.append(t)
    attrs = {"_then": tg, "_else": fg, "_out_specs": specs,
             "_then_idx": [index[id(t)] for t, _ in tg.captures],
             "_else_idx": [index[id(t)] for t, _ in fg.captures]}
    stateful = tg._last_stateful is not None or fg._last_stateful is not None
    _watch_captured(outer)
    outs = execute(get_op("StatefulIf" if stateful else "If"), [pred] + outer, attrs, name or "cond")
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    return nest.pack_sequence_as(t_out, outs) if t_flat else t_out


def case(pred_fn_pairs, default=None, exclusive=False, name="case"):
    """The first ``fn`` whose ``pred`` is true (else ``default``), as nested conds."""
    pairs = list(pred_fn_pairs.items() if isinstance(pred_fn_pairs, dict) else pred_fn_pairs)
    if default is None:
        pairs, (_, default) = pairs[:-1], pairs[-1]
    fn = default
    for p, f in reversed(pairs):
        fn = (lambda p, f, rest: lambda: cond(p, f, rest))(p, f, fn)
    return fn()


def switch_case(branch_index, branch_fns, default=None, name="switch_case"):
    """``branch_fns[branch_index]()`` (``default`` when out of range)."""
    fns = list(branch_fns.items()) if isinstance(branch_fns, dict) else list(enumerate(branch_fns))
    idx = convert_to_tensor(branch_index)
    default = default or fns[-1][1]
    from tensorweave.ops.math_ops import equal
    return case([(equal(idx, k), f) for k, f in fns], default=default)


# ---- while_loop ------------------------------------------------------------------------------
def _while_infer(inputs, attrs):
    return [(s, d) for s, d in attrs["_var_specs"]] + [(TensorShape([]), _dt.variant)]


def _bind_while(op):
    a = op.attrs
    return {"cond_plan": _plan(a["_cond"], a["_cond"].outputs, a["_cond"].inputs),
            "body_plan": _plan(a["_body"], a["_body"].outputs, a["_body"].inputs),
            "n_vars": len(a["_var_specs"]), "cond_idx": a["_cond_idx"], "body_idx": a["_body_idx"],
            "max_iter": a["_maximum_iterations"]}


def _while_kernel(*inputs, cond_plan, body_plan, n_vars, cond_idx, body_idx, max_iter, keep_history=True):
    vars_ = list(inputs[:n_vars])
    caps = inputs[n_vars:]
    ccaps = [caps[i] for i in cond_idx]
    bcaps = [caps[i] for i in body_idx]
    history = []
    i = 0
    while (max_iter is None or i < max_iter) and cond_plan(vars_ + ccaps)[0]:
        history.append(vars_)
        vars_ = body_plan(vars_ + bcaps)
        i += 1
    return tuple(vars_) + (history,)


register_op("While", infer=_while_infer, num_outputs=lambda a: len(a["_var_specs"]) + 1, bind=_bind_while,
            heavy=_ALWAYS)
register_op("StatefulWhile", infer=_while_infer, num_outputs=lambda a: len(a["_var_specs"]) + 1,
            bind=_bind_while, stateful=True, heavy=_ALWAYS)
register_kernel("While", "CPU")(_while_kernel)
register_kernel("StatefulWhile", "CPU")(_while_kernel)


def _whilegrad_infer(inputs, attrs):
    return list(attrs["_specs"])


def _bind_whilegrad(op):
    g = op.attrs["_graph"]
    return {"plan": _plan(g, g.outputs, g.inputs)}


register_op("WhileGrad", infer=_whilegrad_infer, num_outputs=lambda a: len(a["_specs"]), bind=_bind_whilegrad,
            heavy=_ALWAYS)


@register_kernel("WhileGrad", "CPU")
def _whilegrad_kernel(history, *rest, plan, n_vars, fidx, n_caps):
    import numpy as np
    k = len(fidx)
    gvars = list(rest[:k])
    caps = list(rest[k:])
    cap_acc = None
    for vars_i in reversed(history):
        out = plan(list(vars_i) + gvars + caps)
        gv_all, gc = out[:n_vars], out[n_vars:]
        gvars = [gv_all[i] for i in fidx]
        cap_acc = list(gc) if cap_acc is None else [np.add(a, b) for a, b in zip(cap_acc, gc)]
    full = [None] * n_vars
    for i, g in zip(fidx, gvars):
        full[i] = g
    full = [np.zeros((), np.float32) if g is None else g for g in full]
    if cap_acc is None:  # zero iterations: captures get no gradient
        cap_acc = [np.zeros((), np.float32)] * n_caps
    return tuple(full) + tuple(cap_acc)


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10, back_prop=True,
               swap_memory=False, maximum_iterations=None, name=None):
    """Repeats ``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)``; returns the final vars.

    ``loop_vars`` is a tuple/list (or nested structure) of tensors; ``shape_invariants``
    (same structure) relaxes the shapes a loop variable may take across iterations.
    """
    single = not isinstance(loop_vars, (list, tuple))
    structure = [loop_vars] if single else loop_vars
    flat = [convert_to_tensor(v) for v in nest.flatten(structure)]

    def call(fn, vals):
        args = nest.pack_sequence_as(structure, vals)
        return fn(*args)

    if building_graph() is None:
        vals = flat
        i = 0
        while (maximum_iterations is None or i < int(maximum_iterations)) and bool(call(cond, vals)):
            out = call(body, vals)
            out = [out] if single else out
            vals = [convert_to_tensor(v) for v in nest.flatten(out)]
            i += 1
        res = nest.pack_sequence_as(structure, vals)
        return res[0] if single else res
    if shape_invariants is not None:
        inv = nest.flatten_up_to(structure, [shape_invariants] if single else shape_invariants)
        specs = [(TensorShape(s), v.dtype) for s, v in zip(inv, flat)]
    else:
        specs = [(v.shape, v.dtype) for v in flat]
    cg, _, cflat = _trace("while_cond", lambda *a: call(cond, list(a)), arg_specs=specs)
    if len(cflat) != 1 or cflat[0].dtype is not _dt.bool_:
        raise TypeError("while_loop: cond must return a single bool scalar")

    def body_flat(*a):
        out = call(body, list(a))
        return [out] if single else out
    bg, b_out, bflat = _trace("while_body", body_flat, arg_specs=specs)
    if len(bflat) != len(flat):
        raise ValueError(f"while_loop: body returned {len(bflat)} tensors for {len(flat)} loop variables")
    for i, ((s, d), o) in enumerate(zip(specs, bflat)):
        if o.dtype is not d:
            raise TypeError(f"while_loop: loop variable {i} enters as {d.name} but the body returns {o.dtype.name}")
        if not s.is_compatible_with(o.shape) or (s.rank is not None and o.shape.rank is not None and
                                                  any(a is not None and b != a for a, b in zip(s.as_list(), o.shape.as_list()))):
            raise ValueError(f"while_loop: loop variable {i} has shape {fmt(s)} before the loop but {fmt(o.shape)} "
                             "after one iteration. Hint: pass shape_invariants with None for changing dimensions")
    caps = []
    index = {}
    for g in (cg, bg):
        for t, _ in g.captures:
            if id(t) not in index:
                index[id(t)] = len(caps)
                caps.append(t)
    attrs = {"_cond": cg, "_body": bg, "_var_specs": specs,
             "_cond_idx": [index[id(t)] for t, _ in cg.captures],
             "_body_idx": [index[id(t)] for t, _ in bg.captures],
             "_maximum_iterations": None if maximum_iterations is None else int(maximum_iterations)}
    stateful = cg._last_stateful is not None or bg._last_stateful is not None
    _watch_captured(caps)
    outs = execute(get_op("StatefulWhile" if stateful else "While"), flat + caps, attrs, name or "while")
    res = nest.pack_sequence_as(structure, list(outs[:len(flat)]))
    return res[0] if single else res
