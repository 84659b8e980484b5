"""Constant folding: a pure node whose inputs are all constants becomes a ``Const`` node.

The value is computed once, when the plan is built, by the node's own CPU kernel (so it is
exactly what the node would have computed each step). ``Shape``/``Size``/``Rank``/
``ZerosLike``/``OnesLike`` of a tensor whose static shape is fully known fold too (the kernel
reads nothing but the shape and dtype).

Safe because: only pure nodes fold (not stateful, no bound extras, a tensorweave/NumPy
kernel); fed tensors are never treated as constants (a feed overrides a Const), and only a fed
placeholder's static shape is trusted (its feeds are checked against it); fetched
outputs are not folded (each run must hand out a fresh array); pinned nodes (targets,
control edges) stay; a kernel that raises or returns something that disagrees with the
static shape/dtype is left alone, so the error still appears at run time, naming the node;
results larger than ``fold_max_bytes`` are not folded (a plan would keep them alive).
"""
import numpy as np

from tensorweave.runtime.passes.ir import NodeDef, Node, const_value, is_pure, nbytes, static_dims

_SHAPE_OPS = ("Shape", "Size", "Rank", "ZerosLike", "OnesLike")   # read only the input's shape
_CONST_DEF = None


def _const_def():
    global _CONST_DEF
    if _CONST_DEF is None:
        from tensorweave.core.registry import get_op
        d = get_op("Const")
        _CONST_DEF = NodeDef("Const", d.kernels)
    return _CONST_DEF


def make_const(like, value, t):
    """A Const node named like ``like`` holding ``value`` for tensor ``t``."""
    return Node(like, _const_def(), (), {"value": value, "dtype": t.dtype}, [(t.shape, t.dtype)],
                type_="Const", control_inputs=())


def run(work):
    cap = work.options["fold_max_bytes"]
    folded = 0
    for op in work.ops:
        if op.type == "Const" or not op.outputs or work.frozen(op) or not is_pure(op):
            continue
        out = op.outputs
        if any(t.dtype.name in ("resource", "variant") for t in out):
            continue
        sizes = [nbytes(t) for t in out]
        if any(s is None or s > cap for s in sizes):
            continue
        x0 = op.inputs[0] if op.inputs else None
        # a placeholder's feeds are checked against its static shape; other fed tensors are not
        shape_only = op.type in _SHAPE_OPS and x0 is not None and static_dims(x0) is not None and (
            id(x0) not in work.feed_ids or x0.op.type == "Placeholder")
        if shape_only:
            if op.inputs[0].dtype.name in ("resource", "variant", "string"):
                continue
            args = [np.broadcast_to(np.zeros((), np.dtype(op.inputs[0].dtype.np_dtype)), static_dims(op.inputs[0]))]
        else:
            args = [const_value(work.resolve(t), work) for t in op.inputs]
            if any(a is None for a in args):
                continue
        kernel = op.opdef.kernels["CPU"]
        attrs = {k: v for k, v in op.attrs.items() if k[0] != "_"}
        try:
            with np.errstate(all="ignore"):
                r = kernel(*args, **attrs)
        except Exception:  # noqa: BLE001 - left for the run, where it names the node
            continue
        vals = [r] if op.opdef.n_outputs(op.attrs) == 1 and len(out) == 1 else list(r)
        if len(vals) != len(out):
            continue
        ok = True
        new_vals = []
        for v, t in zip(vals, out):
            if not isinstance(v, np.ndarray):
                v = np.asarray(v)
            if v.shape != static_dims(t) or v.dtype != np.dtype(t.dtype.np_dtype):
                ok = False
                break
            v = v.copy()                 # owned, and never aliasing an input constant
            new_vals.append(v)
        if not ok:
            continue
        for v, t in zip(new_vals, out):
            c = make_const(op, v, t)
            work.rep[id(t)] = c.outputs[0]
            work.insert_before(op, c)
        folded += 1
    return folded
