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
import numpy as np

from tensorweave.core.registry import get_op
from tensorweave.kernels.cpu.fused_loop_kernels import REDUCE_TYPES
from tensorweave.ops import fused_ops  # noqa: F401 - registers FusedElementwise/FusedReduction
from tensorweave.runtime.passes.ir import Node, is_pure, runs_stock_kernel, static_dims

# The expression each elementwise op computes is its OpDef's "expr" trait (ops/math_ops.py):
# arity from "elementwise", "{0}", "{1}" its inputs, T the dtype's constructor in the source.
_DTYPES = ("float32", "float64")
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


def _program(group, order):
    """The fused node's ``program`` (see ``kernels/cpu/fused_loop_kernels.py``): per original node
    its op type and arguments ("a<j>": external input j, "v<n>": step n's value); per external
    input whether it is a full-size array (else a broadcast scalar); the external inputs."""
    members = {id(o) for o in group.ops}
    ext, kinds, names = {}, [], {}
    program = []
    for o in sorted(group.ops, key=lambda o: order[id(o)]):
        args = []
        for t in o.inputs:
            if id(t.op) in members and id(t) in names:
                args.append(names[id(t)])
                continue
            if id(t) not in ext:
                ext[id(t)] = (len(ext), t)
                kinds.append(static_dims(t) == group.dims)
            args.append(f"a{ext[id(t)][0]}")
        names[id(o.outputs[0])] = f"v{len(program)}"
        program.append((o.type, tuple(args)))
    inputs = [t for _, t in sorted(ext.values(), key=lambda e: e[0])]
    return tuple(program), tuple(kinds), inputs


def _reduction_after(group, work):
    """``(op, rows)``: the Sum/Mean/Max/Min that alone reads the group's output, over all its
    axes (``rows`` 1) or over the last one (``rows`` = the product of the others); else None."""
    root = group.ops[-1]
    y = root.outputs[0]
    readers = work.consumers.get(id(y), [])
    if len(readers) != 1 or work.protected(y):
        return None
    r = readers[0]
    if r.type not in REDUCE_TYPES or r.inputs[0] is not y or id(r) in work.pinned or r.control_inputs \
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
        program, kinds, inputs = _program(g, order)
        y = root.outputs[0]
        names = [o.name for o in sorted(g.ops, key=lambda o: order[id(o)])]
        attrs = {"program": program, "kinds": kinds, "shape": tuple(g.dims), "dtype": y.dtype.name,
                 "names": tuple(names), "inplace": -1}
        node = Node(root, get_op("FusedElementwise"), inputs, attrs, [(y.shape, y.dtype)], type_="FusedElementwise",
                    control_inputs=(), fused=names)
        work.node_rep[id(root)] = node
        for o in g.ops[:-1]:
            work.node_rep[id(o)] = None
        n += 1
    return n


def _fuse_with_reduction(g, reduction, order, work):
    r, rows = reduction
    program, kinds, inputs = _program(g, order)
    z = r.outputs[0]
    names = [o.name for o in sorted(g.ops, key=lambda o: order[id(o)])] + [r.name]
    attrs = {"program": program, "kinds": kinds, "shape": tuple(g.dims), "dtype": z.dtype.name,
             "names": tuple(names), "reduce_type": r.type, "rows": rows, "out_shape": tuple(static_dims(z))}
    node = Node(r, get_op("FusedReduction"), inputs, attrs, [(z.shape, z.dtype)], type_="FusedReduction",
                control_inputs=(), fused=names)
    work.node_rep[id(r)] = node
    for o in g.ops:
        work.node_rep[id(o)] = None
    return 1
