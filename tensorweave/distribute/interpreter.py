"""The eager global interpreter: what an op call means when an input is a global tensor.

Per op (OneFlow's global eager): the logical output shapes come from the op's ``infer``;
the candidates from its SBP rule (``core.sbp_rules.rule_for``; on an N-D mesh one per-axis
signature per mesh axis, all combinations); the signature with the least boxing cost
(bytes moved, ``boxing.boxing_cost``) wins, ties going to the rule's order; inputs are
boxed to it; each rank runs the kernel on its pieces, on its own thread, with the op type
and attrs the signatures' ``local`` hooks give (chained in mesh-axis order); the outputs
are wrapped as global tensors. Local inputs (Python scalars, local tensors) are ``B``.
An op with no rule (or whose outputs' shapes are not known before running it) runs on
``B`` inputs, with a one-time warning naming the op when that needs boxing. An op with a
decomposition (``distribute/decompositions.py``: ``DECOMPOSITIONS[op_type](*inputs, **attrs)``
in public ops) uses it when every signature of its rule would need boxing. An op on variable
handles keeps each handle's layout (a handle cannot move): the rule's candidates that do, else
:func:`_variable_op` (values shaped like a variable take its layout).

What a rank does is data: a boxing plan per input, an op type and attrs (the per-rank
path a graph plan or a Ray worker runs too).

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> x = tw.constant(np.ones((4, 3), np.float32)).to_global(placement=p, sbp=tw.sbp.split(0))
>>> w = tw.constant(np.ones((3, 2), np.float32)).to_global(placement=p, sbp=tw.sbp.broadcast)
>>> y = tw.matmul(x, w)
>>> y.sbp, y.numpy().tolist()
((S(0),), [[3.0, 3.0], [3.0, 3.0], [3.0, 3.0], [3.0, 3.0]])
"""
import functools
import itertools
import threading
import warnings

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.context import ctx
from tensorweave.core.dispatch import Interpreter, _record_eager
from tensorweave.core.graph import SymbolicTensor
from tensorweave.core.registry import get_op
from tensorweave.core.sbp import B, Broadcast, SbpInput, ShardInfo, Signature, Split
from tensorweave.core.sbp_rules import rule_for
from tensorweave.core.shape import TensorShape, as_shape, fmt
from tensorweave.core.tensor import EagerTensor
from tensorweave.distribute.boxing import plan_boxing, run_boxing_on_rank
from tensorweave.distribute.layout import shard_slices

_warned = set()
_local = threading.local()


def _fmt_nd(nd):
    return "(" + ", ".join(map(repr, nd)) + ("," if len(nd) == 1 else "") + ")"


@functools.lru_cache(maxsize=4096)
def _plan(shape, dtype, placement, src, dst):
    return plan_boxing(shape, dtype, placement, src, dst)


def _cost(shape, dtype, placement, src, dst):
    return 0 if src == dst else _plan(shape, dtype, placement, src, dst).bytes


def describe(opdef, inputs, message, hint=None):
    """An error text naming the op, each input's shape, dtype, placement and SBP, and the user's line."""
    parts = []
    for t in inputs:
        if getattr(t, "is_global", False):
            parts.append(f"{fmt(t.shape)} {t.dtype.name} sbp={_fmt_nd(t.sbp)} on ranks {t.placement.mesh.tolist()}")
        else:
            parts.append(f"{fmt(t.shape)} {t.dtype.name} (local)")
    text = f"{message.rstrip('.')} for '{opdef.name}' (global) with inputs: [{'; '.join(parts)}]."
    site = errors.user_frame()
    if site:
        text += f"\n  Created at: {site}"
    if hint:
        text += f"\n  Hint: {hint}"
    return text


def _out_specs(opdef, inputs, attrs):
    # A B input is its value on every rank: shape rules that read a value (a reshape's target
    # shape, often tw.shape of a global tensor) see it as an eager tensor (rank 0's piece, no copy).
    seen = [EagerTensor(t._pieces[0], t._dtype) if t._dtype is not _dt.resource and all(
        isinstance(s, Broadcast) for s in t._sbp) else t for t in inputs]
    try:
        specs = opdef.infer(seen, attrs)
    except (ValueError, TypeError, IndexError) as e:
        raise errors.InvalidArgumentError(describe(opdef, inputs, str(e))) from None
    if isinstance(specs, tuple) and len(specs) == 2 and isinstance(specs[1], _dt.DType):
        specs = [specs]
    return [(_known(shape), dtype) for shape, dtype in specs]


def _known(shape):
    """A fully known shape as a tuple, else None."""
    if shape is None:
        return None
    shape = as_shape(shape)
    return tuple(shape.as_list()) if shape.is_fully_defined() else None


def _valid(sig, n_in, in_ranks, out_specs):
    if len(sig.inputs) != n_in or len(sig.outputs) != len(out_specs):
        return False
    for s, r in zip(sig.inputs, in_ranks):
        if isinstance(s, Split) and s.axis >= r:
            return False
    for s, (shape, _) in zip(sig.outputs, out_specs):
        if isinstance(s, Split) and (shape is None or s.axis >= len(shape)):
            return False
    return True


def _candidates(opdef, inputs, attrs, out_specs, placement):
    """[(per-axis signatures, input N-D SBPs, output N-D SBPs)] and whether the op has a rule."""
    n = len(inputs)
    all_b = Signature([B] * n, [B] * len(out_specs))
    rule = rule_for(opdef)
    known = all(shape is not None for shape, _ in out_specs)
    per_axis = []
    for k in range(placement.ndim):
        sigs = [all_b]
        if rule is not None and known:
            specs = [SbpInput(tuple(t.shape.as_list()), t.dtype, t.sbp[k]) for t in inputs]
            ranks = [len(s.shape) for s in specs]
            sigs = [s for s in rule(specs, attrs) if _valid(s, n, ranks, out_specs)] or [all_b]
        per_axis.append(sigs)
    combos = []
    for sigs in itertools.product(*per_axis):
        ins = [tuple(s.inputs[i] for s in sigs) for i in range(n)]
        outs = [tuple(s.outputs[j] for s in sigs) for j in range(len(out_specs))]
        combos.append((sigs, ins, outs))
    return combos, rule is not None and known


def _choose(inputs, combos, placement):
    best, best_cost = None, None
    for combo in combos:
        cost = 0
        for t, want in zip(inputs, combo[1]):
            cost += _cost(t._shape, t._dtype.np_dtype, placement, t._sbp, want)
            if best_cost is not None and cost >= best_cost:
                break
        if best_cost is None or cost < best_cost:
            best, best_cost = combo, cost
            if cost == 0:
                break
    return best, best_cost


# Ops on a split or partial variable that run rank-locally on its shards; any other op on a
# variable handle needs the variable broadcast (B).
_SHARDED_VARIABLE_OPS = ("ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")


def _variable_op(opdef, inputs, attrs, out_specs, placement):
    """(signatures, input SBPs, output SBPs) of an op on global variable handles: it runs where
    the variables live; values shaped like a variable get its SBP, the rest B."""
    n_in, name = len(inputs), opdef.name
    handles = [i for i, t in enumerate(inputs) if t._dtype is _dt.resource]
    nd_b = (B,) * placement.ndim
    want = [inputs[i]._sbp if i in handles else nd_b for i in range(n_in)]
    var_nd = inputs[handles[0]]._sbp
    sharded = any(inputs[i]._sbp != nd_b for i in handles)
    if name.startswith("ResourceGroupApply"):
        n = attrs["num_variables"]
        k = len(handles) // n
        for j in range(n):
            want[n_in - n + j] = inputs[handles[j * k]]._sbp
    elif name.startswith("ResourceApply"):
        want[n_in - 1] = var_nd
    elif name in _SHARDED_VARIABLE_OPS:
        for i in range(n_in):
            if i not in handles and inputs[i]._shape == inputs[handles[0]]._shape:
                want[i] = var_nd
    elif sharded:
        raise errors.UnimplementedError(describe(
            opdef, inputs, f"'{name}' on a variable laid out as {_fmt_nd(var_nd)} is not supported",
            "give the variable sbp=broadcast, or read it and use the value"))
    var_shape = inputs[handles[0]]._shape
    out_nd = [var_nd if name in _SHARDED_VARIABLE_OPS and shape == var_shape else nd_b for shape, _ in out_specs]
    first = handles[0]

    def local(op_type, a, info):      # a variable op's shape attr is the rank's shard's
        if "shape" in a:
            a = dict(a, shape=TensorShape(info.in_local_shape(first)))
        return op_type, a
    return (Signature(want, out_nd, local=local),), want, out_nd


def _as_global(t, placement):
    from tensorweave.distribute.autodiff import record_local_to_global
    from tensorweave.distribute.global_tensor import GlobalTensor
    if getattr(t, "is_global", False):
        return t
    if t.dtype is _dt.resource:
        raise errors.InvalidArgumentError(
            f"a local variable's handle met global tensors in one op; hint: create the variable with "
            f"tw.Variable(..., placement={placement!r}, sbp=...)")
    if isinstance(t, SymbolicTensor):
        raise errors.UnimplementedError(
            f"a symbolic tensor ({t!r}) met a global tensor: global tensors in tw.function/graphs need the "
            "graph planner (not built yet); run eagerly")
    value = np.asarray(t._value)
    g = GlobalTensor([value] * placement.size, placement, (B,) * placement.ndim, value.shape, t.dtype)
    record_local_to_global(t, g)
    return g


def _decomposition(op_type):
    try:
        from tensorweave.distribute.decompositions import DECOMPOSITIONS
    except ImportError:
        return None
    return DECOMPOSITIONS.get(op_type)


def run_op_on_rank(plans, local_op, rank, pieces, comm_for, once=None):
    """What rank id ``rank`` does for one global op: box each input piece with its plan (None:
    as it is), then run the CPU kernel of ``local_op`` = (op type, attrs). Returns (boxed
    pieces, kernel output). Data in, data out: the step a graph plan or a Ray worker runs.

    ``once`` (the placement's rank ids): only the first runs the kernel and the others receive
    its outputs (a stateful op with all-``B`` outputs: a random draw, a Python function, a print
    runs once, as on one device, and its ``B`` outputs agree)."""
    vals = [piece if plan is None else run_boxing_on_rank(plan, rank, piece, comm_for)
            for plan, piece in zip(plans, pieces)]
    op_type, attrs = local_op
    if once is None or rank == once[0]:
        with np.errstate(all="ignore"):
            out = get_op(op_type).kernel("CPU")(*vals, **attrs)
    if once is not None:
        comm = comm_for(once)
        n_out = get_op(op_type).n_outputs(attrs)
        outs = [out] if n_out == 1 and rank == once[0] else list(out) if rank == once[0] else [None] * n_out
        outs = [comm.broadcast(o, root=0) for o in outs]
        out = outs[0] if n_out == 1 else tuple(outs)
    return vals, out


@functools.lru_cache(maxsize=4096)
def _piece_shapes(shape, placement, nd):
    return [tuple(s.stop - s.start for s in sl) for sl in shard_slices(shape, placement, nd)]


_decisions = {}
_MAX_DECISIONS = 4096


def _decide(opdef, inputs, attrs, kernel_attrs, out_specs, placement):
    """(signatures, input SBPs, output SBPs, boxing cost, has a rule, boxing plans, per-rank
    (op type, attrs)) for this call; remembered per op, logical shapes, dtypes, SBPs and attrs
    (rules and hooks are functions of those), so a training loop decides each op once."""
    try:
        key = (opdef.name, placement, tuple((t._shape, t._dtype, t._sbp) for t in inputs),
               tuple(sorted(attrs.items())), tuple(out_specs))
        hash(key)
    except TypeError:       # an attr that is not hashable (a list): decide every time
        key = None
    found = _decisions.get(key) if key is not None else None
    if found is not None:
        return found
    combos, has_rule = _candidates(opdef, inputs, attrs, out_specs, placement)
    handles = [i for i, t in enumerate(inputs) if t._dtype is _dt.resource]
    if handles:
        # a variable handle cannot move: only candidates that keep every handle's layout
        combos = [c for c in combos if all(c[1][i] == inputs[i]._sbp for i in handles)]
        if not combos:
            combos, has_rule = [_variable_op(opdef, inputs, attrs, out_specs, placement)], True
    (sigs, in_nd, out_nd), cost = _choose(inputs, combos, placement)
    plans = [None if t._sbp == want else _plan(t._shape, t._dtype.np_dtype, placement, t._sbp, want)
             for t, want in zip(inputs, in_nd)]
    local_ops = _local_ops(opdef, kernel_attrs, sigs, inputs, in_nd, out_specs, out_nd, placement)
    found = (sigs, in_nd, out_nd, cost, has_rule, plans, local_ops)
    if key is not None:
        if len(_decisions) >= _MAX_DECISIONS:
            _decisions.clear()
        _decisions[key] = found
    return found


def run_global_op(opdef, inputs, attrs, name=None):
    """Runs ``opdef`` on inputs of which at least one is global (see the module docstring)."""
    from tensorweave.distribute.global_tensor import GlobalTensor
    from tensorweave.distribute.ranks import default_world
    glob = [t for t in inputs if getattr(t, "is_global", False)]
    placement = glob[0].placement
    for t in glob[1:]:
        if t.placement != placement:
            raise errors.InvalidArgumentError(describe(
                opdef, inputs, f"inputs are on different placements ({placement!r} and {t.placement!r})",
                "move one with x.to_global(placement=...) first"))
    inputs = [_as_global(t, placement) for t in inputs]
    if opdef.name in _METADATA_OPS:
        return _metadata_op(opdef, inputs, attrs, placement)
    out_specs = _out_specs(opdef, inputs, attrs)
    kernel_attrs = {k: v for k, v in attrs.items() if k[0] != "_"} if attrs else {}
    sigs, in_nd, out_nd, cost, has_rule, plans, local_ops = _decide(opdef, inputs, attrs, kernel_attrs, out_specs,
                                                                   placement)
    # a stateful op (random draw, Python function, print) whose outputs are all B runs once and
    # broadcasts: per rank it would draw per rank, or run the Python function once per rank
    once = opdef.stateful and all(t._dtype is not _dt.resource for t in inputs) and all(
        isinstance(x, Broadcast) for nd in out_nd for x in nd)
    if cost:
        decomp = _decomposition(opdef.name)
        busy = getattr(_local, "decomposing", ())
        if decomp is not None and opdef.name not in busy:
            _local.decomposing = busy + (opdef.name,)
            try:
                return decomp(*inputs, **kernel_attrs)
            finally:
                _local.decomposing = busy
        if not has_rule and opdef.name not in _warned:
            _warned.add(opdef.name)
            site = errors.user_frame()
            warnings.warn(f"'{opdef.name}' has no SBP rule for these inputs: its global inputs are boxed to "
                          "broadcast (B) and every rank computes the whole result"
                          + (f" (first at {site})" if site else ""), stacklevel=2)
    world = default_world()
    ranks = placement.ranks

    def on_rank(i):
        r = ranks[i]
        return run_op_on_rank(plans, local_ops[i], r, [t._pieces[i] for t in inputs],
                              lambda g: world.group(g).communicator(g.index(r)), ranks if once else None)

    try:
        results = world.run(ranks, on_rank)
    except Exception as e:  # noqa: BLE001 - re-raised naming the op, SBPs and shapes
        if isinstance(e, errors.OpError) and "global" in str(e):
            raise
        sig_text = " x ".join(f"[{s}]" for s in sigs)
        raise errors.InvalidArgumentError(describe(
            opdef, inputs, f"rank {getattr(e, 'rank', '?')} failed running signature {sig_text}: "
                           f"{type(e).__name__}: {e}")) from e
    boxed = []
    for j, (t, plan) in enumerate(zip(inputs, plans)):
        if plan is None:
            boxed.append(t)
            continue
        b = GlobalTensor([res[0][j] for res in results], placement, in_nd[j], t._shape, t._dtype)
        from tensorweave.distribute.autodiff import record_boxing
        record_boxing(t, b)
        boxed.append(b)
    n_op = opdef.n_outputs(attrs)
    if n_op == 0 or not out_specs:
        return None
    per_rank = [[res[1]] if n_op == 1 else list(res[1]) for res in results]
    outs = []
    for j, (shape, dtype) in enumerate(out_specs):
        pieces = [np.asarray(p[j]) for p in per_rank]
        if shape is None:   # shape known only after running: all-B, every rank the same
            shape = pieces[0].shape
        wants = _piece_shapes(shape, placement, out_nd[j])
        for i, piece in enumerate(pieces):
            want = wants[i]
            if piece.shape != want:
                raise errors.InvalidArgumentError(describe(
                    opdef, inputs, f"rank {ranks[i]} computed output {j} of shape {list(piece.shape)} but "
                                   f"sbp {_fmt_nd(out_nd[j])} of logical shape {list(shape)} needs {list(want)} "
                                   f"(signature {' x '.join(map(str, sigs))})",
                    "the op's SBP rule or its local hook is wrong for these shapes"))
        outs.append(GlobalTensor(pieces, placement, out_nd[j], shape, dtype or _dt.from_numpy(pieces[0].dtype)))
    outs = tuple(outs)
    if ctx.tapes:
        _record_eager(opdef, boxed, outs, attrs)
    return outs[0] if n_op == 1 else outs


# Ops whose result depends on the inputs' logical shapes only: computed from the shapes, B.
_METADATA_OPS = frozenset({"Shape", "Size", "Rank", "ShapeN"})


def _metadata_op(opdef, inputs, attrs, placement):
    from tensorweave.distribute.global_tensor import GlobalTensor
    stand_ins = [np.broadcast_to(np.zeros((), t._dtype.np_dtype), t._shape) for t in inputs]
    kernel_attrs = {k: v for k, v in attrs.items() if k[0] != "_"}
    out = get_op(opdef.name).kernel("CPU")(*stand_ins, **kernel_attrs)
    outs = list(out) if opdef.n_outputs(attrs) != 1 else [out]
    nd = (B,) * placement.ndim
    res = tuple(GlobalTensor([np.array(o) for _ in range(placement.size)], placement, nd, np.shape(o),
                             _dt.from_numpy(np.asarray(o).dtype)) for o in outs)
    return res[0] if opdef.n_outputs(attrs) == 1 else res


def _local_ops(opdef, attrs, sigs, inputs, in_nd, out_specs, out_nd, placement):
    """Per rank (mesh order), the (op type, attrs) it runs: the signatures' ``local`` hooks
    chained in mesh-axis order."""
    if all(s.local is None for s in sigs):
        return [(opdef.name, attrs)] * placement.size
    in_shapes = [t._shape for t in inputs]
    out_shapes = [shape for shape, _ in out_specs]
    in_slices = [shard_slices(s, placement, nd) for s, nd in zip(in_shapes, in_nd)]
    out_slices = [shard_slices(s, placement, nd) for s, nd in zip(out_shapes, out_nd)]
    ops = []
    for i in range(placement.size):
        info = ShardInfo(in_shapes, [sl[i] for sl in in_slices], out_shapes, [sl[i] for sl in out_slices],
                         placement.coords(i), placement.mesh_shape)
        op_type, a = opdef.name, dict(attrs)
        for s in sigs:
            if s.local is not None:
                op_type, a = s.local(op_type, a, info)
        ops.append((op_type, a))
    return ops


class GlobalInterpreter(Interpreter):
    """Runs ops with global inputs op by op (see the module docstring)."""

    name = "global"

    def execute(self, opdef, inputs, attrs, name):
        if ctx.graph_stack and not ctx.force_eager:
            raise errors.UnimplementedError(describe(
                opdef, inputs, "global tensors inside tw.function or a graph are not planned yet",
                "run the global computation eagerly (the whole-graph planner is the next step)"))
        return run_global_op(opdef, list(inputs), dict(attrs or {}), name)


GLOBAL = GlobalInterpreter()
