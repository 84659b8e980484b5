"""Elementwise fusion: a tree of elementwise float ops becomes one node running one
numba-compiled loop (no temporaries, one pass over memory); a Sum/Mean/Max/Min over all axes
or the last axis that alone reads the tree's result joins it (``FusedReduction``: the loop
reduces as it goes, the tree's values are never stored).

A node joins the group of an input's producer when that input is read by it alone (not
fetched, not fed, not read by any other node), has the output's static shape and dtype, and
both nodes are fusable: pure, unpinned, stock kernel, float32/float64, fully known static
shape, every input either of the output's shape or a single element (a broadcast scalar).
Each group has one output (its last node), so the fused node can take that node's place:
all the group's external inputs are computed before it. Groups of at least
``fusion_min_ops`` nodes over at least ``fusion_min_elements`` elements are fused, by
default only in ``tw.function`` graphs (they run many times; a new loop costs a numba
compile, cached per process by expression and dtype).

Results: the loop evaluates the same IEEE operations in the same order as the NumPy
kernels (no fastmath, numba's NumPy error model: division by zero gives inf/nan), so
+, -, *, /, sqrt, abs, max/min and relu are bit-identical; exp, log, tanh and sigmoid use
libm and may differ from NumPy's SIMD routines in the last place. A fused Sum/Mean adds in
float64, row by row (NumPy adds float32 pairwise in float32): it differs from the unfused
result by rounding, and is the more accurate; Max/Min are exact. A failing fused node is
reported under its output node's name and lists the original nodes.
"""
import threading

import numpy as np

from tensorweave.core import errors
from tensorweave.runtime.passes.ir import Node, NodeDef, is_pure, runs_stock_kernel, static_dims

# The expression each elementwise op computes is its OpDef's "expr" trait (ops/math_ops.py):
# arity from "elementwise", "{0}", "{1}" its inputs, T the dtype's constructor in the source.
_DTYPES = ("float32", "float64")
_CACHE = {}
_LOCK = threading.Lock()
def _fusable(op, work):
    traits = op.opdef.traits
    if "expr" not in traits or len(op.outputs) != 1 or len(op.inputs) != traits["elementwise"]:
        return None
    # a fetched output may be computed by a fused node (the fetch then reads the fused node);
    # only the group's last node can be fetched (checked when nodes join a group)
    if id(op) in work.pinned or any(id(t) in work.feed_ids for t in op.outputs) or not is_pure(op) \
            or not runs_stock_kernel(op) or work.device_type(op) != "CPU":   # the fused loop is CPU code
        return None
    y = op.outputs[0]
    dims = static_dims(y)
    if dims is None or not dims or y.dtype.name not in _DTYPES:
        return None
    for t in op.inputs:
        if t.dtype is not y.dtype:
            return None
        d = static_dims(t)
        if d is None or (d != dims and (int(np.prod(d)) != 1 or len(d) > len(dims))):
            return None
    return dims


class _Group:
    __slots__ = ("ops", "dims")

    def __init__(self, ops, dims):
        self.ops, self.dims = ops, dims


def find_groups(work):
    cap = work.options["fusion_max_ops"]
    group_of = {}
    for op in work.ops:
        dims = _fusable(op, work)
        if dims is None:
            continue
        joined = []
        for t in op.inputs:
            g = group_of.get(id(t.op))
            if g is None or g.ops[-1] is not t.op or t.op.device != op.device or g in joined:
                continue
            if work.protected(t) or static_dims(t) != dims:
                continue
            if any(c is not op for c in work.consumers.get(id(t), ())):
                continue
            if sum(len(j.ops) for j in joined) + len(g.ops) + 1 <= cap:   # bounded compile time
                joined.append(g)
        if not joined:
            g = _Group([op], dims)
        else:       # extend the largest group, relabel the others (small into large: n log n)
            g = max(joined, key=lambda j: len(j.ops))
            for other in joined:
                if other is not g:
                    g.ops.extend(other.ops)
                    for m in other.ops:
                        group_of[id(m)] = g
            g.ops.append(op)
        group_of[id(op)] = g
    seen, groups = set(), []
    for g in group_of.values():
        if id(g) not in seen:
            seen.add(id(g))
            groups.append(g)
    return groups


def _codegen(group, order):
    """Source of ``_fused(out, *args)`` and, per external input, whether it is an array."""
    members = {id(o) for o in group.ops}
    ext, kinds, names = {}, [], {}
    lines = []
    for o in sorted(group.ops, key=lambda o: order[id(o)]):
        args = []
        for t in o.inputs:
            if id(t.op) in members and id(t) in names:
                args.append(names[id(t)])
                continue
            if id(t) not in ext:
                ext[id(t)] = (len(ext), t)
                kinds.append(static_dims(t) == group.dims)
            j = ext[id(t)][0]
            args.append(f"a{j}[i]" if kinds[j] else f"a{j}")
        v = f"v{len(names)}"
        names[id(o.outputs[0])] = v
        lines.append(f"        {v} = " + o.opdef.traits["expr"].format(*args))
    root = names[id(group.ops[-1].outputs[0])]
    inputs = [t for _, t in sorted(ext.values(), key=lambda e: e[0])]
    return lines, root, kinds, inputs


def _source(lines, root, n, inplace=None):
    """``_fused(out, a0, ..)``, or with ``inplace=k`` ``_fused(a0, ..)`` storing into ``a<k>``:
    a separate loop, because LLVM only vectorises a loop whose store may overlap a load when
    it can see that they are the same address."""
    params = [f"a{j}" for j in range(n)]
    if inplace is None:
        head, dest = ", ".join(["out"] + params), "out"
    else:
        head, dest = ", ".join(params), f"a{inplace}"
    return (f"def _fused({head}):\n    for i in range({dest}.shape[0]):\n" + "\n".join(lines)
            + f"\n        {dest}[i] = {root}\n")


def _compile(src, dtype):
    key = (src, dtype)
    with _LOCK:
        fn = _CACHE.get(key)
        if fn is None:
            from tensorweave.kernels.cpu.jit import njit
            ns = {"np": np, "T": getattr(np, dtype)}
            exec(compile(src, f"<tensorweave fused {len(_CACHE)}>", "exec"), ns)  # noqa: S102 - generated
            fn = _CACHE[key] = njit(ns["_fused"], error_model="numpy")
    return fn


def _loop_args(xs, kinds, npdt, size, names):
    """The compiled loop's arguments: full-size inputs flat and contiguous, scalars as scalars."""
    args = []
    for x, full in zip(xs, kinds):
        a = np.asarray(x, npdt)
        if full:
            if a.size != size:
                raise ValueError(f"fused nodes {names}: an input has {a.size} elements, expected {size}")
            args.append(np.ascontiguousarray(a).reshape(-1))
        else:
            args.append(a.reshape(-1)[0])
    return args


def make_kernel(lines, root, kinds, shape, dtype, names):
    """The fused node's kernel: ``kernel(*inputs, inplace=-1)``; with ``inplace=k`` the result is
    written into input ``k`` (the memory pass sets it only for a dead, freshly allocated input)."""
    npdt = np.dtype(dtype)
    shape = tuple(shape)
    size = int(np.prod(shape))
    n = len(kinds)
    variants = {}

    def variant(k):
        fn = variants.get(k)
        if fn is None:
            fn = variants[k] = _compile(_source(lines, root, n, None if k < 0 else k), dtype)
        return fn

    def fused_elementwise(*xs, inplace=-1):
        args = _loop_args(xs, kinds, npdt, size, names)
        if inplace >= 0:
            o = xs[inplace]
            if not (isinstance(o, np.ndarray) and o.dtype == npdt and o.flags.c_contiguous and o.flags.writeable
                    and o.shape == shape):
                inplace = -1
        try:
            if inplace >= 0:
                out = xs[inplace]
                variant(inplace)(*args)
            else:
                out = np.empty(shape, npdt)
                variant(-1)(out.reshape(-1), *args)
        except Exception as e:  # noqa: BLE001 - name the fused nodes
            raise errors.InternalError(f"in fused nodes {names}: {type(e).__name__}: {e}") from e
        return out
    fused_elementwise.fused_source = _source(lines, root, n)
    return fused_elementwise


# ---- a reduction at the end of a group -------------------------------------------------------------
_REDUCE = {"Sum": ("0.0", "acc += {v}"), "Mean": ("0.0", "acc += {v}"),
           "Max": ("-np.inf", "acc = np.maximum(acc, {v})"), "Min": ("np.inf", "acc = np.minimum(acc, {v})")}


def _reduction_after(group, work):
    """``(op, rows)``: the Sum/Mean/Max/Min that alone reads the group's output, over all its
    axes (``rows`` 1) or over the last one (``rows`` = the product of the others); else None."""
    root = group.ops[-1]
    y = root.outputs[0]
    readers = work.consumers.get(id(y), [])
    if len(readers) != 1 or work.protected(y):
        return None
    r = readers[0]
    if r.type not in _REDUCE or r.inputs[0] is not y or id(r) in work.pinned or r.control_inputs \
            or r.device != root.device or len(r.outputs) != 1 or r.outputs[0].dtype is not y.dtype \
            or static_dims(r.outputs[0]) is None:
        return None
    from tensorweave.ops.reduce_ops import _axes
    if not runs_stock_kernel(r):
        return None
    nd = len(group.dims)
    axes = _axes(r.attrs.get("axis"), nd)
    if axes == tuple(range(nd)):
        return r, 1
    if axes == (nd - 1,):
        return r, int(np.prod(group.dims[:-1]))
    return None


def _reduce_source(lines, root, n, reduce_type):
    """``_fused(out, cols, a0, ..)``: per row of ``cols`` elements, the group's expression
    reduced into a float64 accumulator (Sum/Mean: more accurate than a float32 sum; Max/Min:
    exact), stored rounded to ``out``'s dtype."""
    init, step = _REDUCE[reduce_type]
    head = ", ".join(["out", "cols"] + [f"a{j}" for j in range(n)])
    body = "\n".join("    " + line for line in lines)
    mean = " / cols" if reduce_type == "Mean" else ""
    return (f"def _fused({head}):\n    for r in range(out.shape[0]):\n        acc = {init}\n"
            f"        for c in range(cols):\n            i = r * cols + c\n{body}\n"
            f"            {step.format(v=root)}\n        out[r] = acc{mean}\n")


def make_reduce_kernel(lines, root, kinds, shape, dtype, names, reduce_type, rows, out_shape):
    """The kernel of a group ending in a reduction: ``kernel(*inputs) -> [out_shape]``."""
    npdt = np.dtype(dtype)
    size = int(np.prod(shape))
    fn = []

    def fused_reduction(*xs):
        if not fn:
            fn.append(_compile(_reduce_source(lines, root, len(kinds), reduce_type), dtype))
        args = _loop_args(xs, kinds, npdt, size, names)
        out = np.empty(rows, npdt)
        try:
            fn[0](out, size // rows, *args)
        except Exception as e:  # noqa: BLE001 - name the fused nodes
            raise errors.InternalError(f"in fused nodes {names}: {type(e).__name__}: {e}") from e
        return out.reshape(out_shape)
    fused_reduction.fused_source = _reduce_source(lines, root, len(kinds), reduce_type)
    return fused_reduction


def run(work):
    opts = work.options
    order = {id(o): i for i, o in enumerate(work.ops)}
    n = 0
    for g in find_groups(work):
        if int(np.prod(g.dims)) < opts["fusion_min_elements"]:
            continue
        root = g.ops[-1]
        if opts["fusion_function_graphs_only"] and not getattr(root.graph, "is_function_graph", False):
            continue
        reduction = _reduction_after(g, work)
        if reduction is not None and len(g.ops) + 1 <= opts["fusion_max_ops"] \
                and len(g.ops) + 1 >= opts["fusion_min_ops"]:
            n += _fuse_with_reduction(g, reduction, order, work)
            continue
        if len(g.ops) < opts["fusion_min_ops"]:
            continue
        lines, expr_root, kinds, inputs = _codegen(g, order)
        y = root.outputs[0]
        names = [o.name for o in sorted(g.ops, key=lambda o: order[id(o)])]
        kernel = make_kernel(lines, expr_root, kinds, g.dims, y.dtype.name, names)
        d = NodeDef("FusedElementwise", {"CPU": kernel})
        node = Node(root, d, inputs, {"inplace": -1}, [(y.shape, y.dtype)], type_="FusedElementwise",
                    control_inputs=(), fused=names)
        work.node_rep[id(root)] = node
        for o in g.ops[:-1]:
            work.node_rep[id(o)] = None
        n += 1
    return n


def _fuse_with_reduction(g, reduction, order, work):
    r, rows = reduction
    lines, expr_root, kinds, inputs = _codegen(g, order)
    z = r.outputs[0]
    names = [o.name for o in sorted(g.ops, key=lambda o: order[id(o)])] + [r.name]
    kernel = make_reduce_kernel(lines, expr_root, kinds, g.dims, z.dtype.name, names, r.type, rows, static_dims(z))
    d = NodeDef("FusedReduction", {"CPU": kernel})
    node = Node(r, d, inputs, {}, [(z.shape, z.dtype)], type_="FusedReduction", control_inputs=(), fused=names)
    work.node_rep[id(r)] = node
    for o in g.ops:
        work.node_rep[id(o)] = None
    return 1
