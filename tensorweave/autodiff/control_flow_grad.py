"""Gradients of ``If``/``While`` (``ops/control_flow.py``): they differentiate the traced
branches and body with the graph walker, so they live in the autodiff layer and register
themselves on the ops when ``tensorweave.autodiff`` is imported (the ops layer does not
import autodiff).

The gradient of ``If`` is another ``cond`` whose branches replay the forward branch and
differentiate it; ``While`` outputs the loop variables of every iteration, and ``WhileGrad``
walks them backwards through a traced gradient of the body.

>>> import tensorweave as tw
>>> from tensorweave.core.registry import get_op
>>> get_op("While").grad is _while_grad and get_op("StatefulIf").grad is _if_grad
True
"""
from tensorweave.autodiff.backprop import densify
from tensorweave.autodiff.gradients import gradients
from tensorweave.core import dtypes as _dt
from tensorweave.core import nest
from tensorweave.core.dispatch import execute
from tensorweave.core.graph import get_default_graph
from tensorweave.core.registry import get_op, register_gradient
from tensorweave.core.shape import TensorShape
from tensorweave.ops.array_ops import zeros, zeros_like
from tensorweave.ops.control_flow import _capture_map, _replay, _trace, cond, variable_of_handle


def _if_grad(op, *grads):
    pred = op.inputs[0]
    xs = list(op.inputs[1:])

    def grad_branch(branch_graph, idx):
        def branch():
            g = get_default_graph()
            outs = _replay(branch_graph, _capture_map(branch_graph, [xs[i] for i in idx]))
            phs = [g.capture(x) for x in xs]
            gys = [g.capture(gr) if gr is not None else None for gr in grads]
            pairs = [(o, gy) for o, gy in zip(outs, gys) if gy is not None and o.dtype.is_floating]
            res = gradients([o for o, _ in pairs], phs, grad_ys=[gy for _, gy in pairs]) if pairs else [None] * len(phs)
            return [_zero_grad(p, x) if r is None else densify(r) for r, p, x in zip(res, phs, xs)]
        return branch
    differentiable = [x.dtype.is_floating or x.dtype is _dt.resource for x in xs]
    if not any(differentiable):
        return [None] * len(op.inputs)
    res = cond(pred, grad_branch(op.attrs["_then"], op.attrs["_then_idx"]),
               grad_branch(op.attrs["_else"], op.attrs["_else_idx"]), name="cond_grad")
    res = nest.flatten(res)
    return [None] + [r if d else None for r, d in zip(res, differentiable)]


def _zero_grad(p, outer):
    """A zero gradient for input ``p`` of a branch (``outer`` is the tensor it captures)."""
    if p.dtype is _dt.resource:
        var = variable_of_handle(outer)
        return zeros(var.shape, var.dtype) if var is not None else zeros([], _dt.float32)
    if not p.dtype.is_floating:
        return zeros([], _dt.float32)
    return zeros_like(p)


def _while_grad(op, *grads):
    a = op.attrs
    n = len(a["_var_specs"])
    var_grads = list(grads[:n])
    xs = list(op.inputs)
    float_vars = [x.dtype.is_floating for x in xs[:n]]
    if not any(g is not None for g in var_grads):
        return [None] * len(xs)
    var_grads = [g if g is not None else (zeros_like(o) if f else None)
                 for g, o, f in zip(var_grads, op.outputs[:n], float_vars)]
    # Trace the body's gradient: (vars_i, upstream grads) -> (grads of vars_i, grads of captures)
    body = a["_body"]
    specs = a["_var_specs"]
    outer_caps = xs[n:]

    def grad_body(*phs):
        vs, gs = list(phs[:n]), list(phs[n:])
        mapping = _capture_map(body, [outer_caps[i] for i in a["_body_idx"]])
        mapping.update({id(p): v for p, v in zip(body.inputs, vs)})
        outs = _replay(body, mapping)
        g = get_default_graph()
        caps = [g.capture(c) for c in outer_caps]
        pairs = [(o, gy) for o, gy, f in zip(outs, gs, float_vars) if f]
        targets = vs + caps
        res = gradients([o for o, _ in pairs], targets, grad_ys=[gy for _, gy in pairs])
        out = []
        for r, t, o in zip(res, targets, vs + outer_caps):
            out.append(_zero_grad(t, o) if r is None else densify(r))
        return out
    g_specs = [(s, d) for s, d in specs] + [(s, d) for (s, d), f in zip(specs, float_vars) if f]
    # Upstream gradient placeholders exist only for float loop variables.
    fidx = [i for i, f in enumerate(float_vars) if f]

    def grad_body_wrapped(*phs):
        vs = list(phs[:n])
        gs = [None] * n
        for k, i in enumerate(fidx):
            gs[i] = phs[n + k]
        return grad_body(*(vs + gs))
    gg, _, gflat = _trace("while_body_grad", grad_body_wrapped, arg_specs=g_specs)
    inputs = [op.outputs[n]] + [var_grads[i] for i in fidx] + [c for c, _ in gg.captures]
    attrs = {"_graph": gg, "n_vars": n, "fidx": tuple(fidx), "n_caps": len(outer_caps),
             "_specs": [_grad_spec(x) for x in xs]}
    res = execute(get_op("WhileGrad"), inputs, attrs, "while_grad")
    res = list(res) if isinstance(res, tuple) else [res]
    out = []
    for r, x in zip(res, xs):
        out.append(r if (x.dtype.is_floating or x.dtype is _dt.resource) else None)
    return out


def _grad_spec(x):
    """Shape and dtype of the gradient WhileGrad returns for input ``x``."""
    if x.dtype.is_floating:
        return x.shape, x.dtype
    var = variable_of_handle(x) if x.dtype is _dt.resource else None
    if var is not None:
        return var.shape, var.dtype
    return TensorShape([]), _dt.float32


for _name in ("If", "StatefulIf"):
    register_gradient(_name)(_if_grad)
for _name in ("While", "StatefulWhile"):
    register_gradient(_name)(_while_grad)
