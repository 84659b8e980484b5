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
from tensorweave.core.sbp_rules import rule_for, with_signs
from tensorweave.core.shape import TensorShape, as_shape, fmt
from tensorweave.core.tensor import EagerTensor
from tensorweave.distribute.boxing import plan_boxing, run_boxing_on_rank
from tensorweave.distribute.layout import shard_slices
from tensorweave.distribute.ray.pieces import RemotePiece, cluster_for, local_pieces

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
    seen = [_b_value(t) if t._dtype is not _dt.resource and all(
        isinstance(s, Broadcast) for s in t._sbp) else t for t in inputs]
    try:
        specs = opdef.infer(seen, attrs)
    except (ValueError, TypeError, IndexError) as e:
        raise errors.InvalidArgumentError(describe(opdef, inputs, str(e))) from None
    if isinstance(specs, tuple) and len(specs) == 2 and isinstance(specs[1], _dt.DType):
        specs = [specs]
    return [(_known(shape), dtype) for shape, dtype in specs]


def _b_value(t):
    piece = t._pieces[0]
    if isinstance(piece, RemotePiece):
        # on a Ray worker: fetched only when small and integral (a shape-like value a rule may read)
        if piece.dtype.kind not in "iub" or piece.nbytes > 512:
            return t
        piece = local_pieces([piece])[0]
    return EagerTensor(piece, t._dtype)


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
            specs = [SbpInput(t._shape, t._dtype, t._sbp[k]) for t in inputs]
            ranks = [len(s.shape) for s in specs]
            rule_attrs = {**attrs, "_out_shapes": [shape for shape, _ in out_specs],
                          "_mesh_shape": placement.mesh_shape}   # what shape-dependent rules read
            sigs = [s for s in rule(specs, rule_attrs) if _valid(s, n, ranks, out_specs)] or [all_b]
        per_axis.append(sigs)
    combos = []
    for sigs in itertools.product(*per_axis):
        ins = [tuple(s.inputs[i] for s in sigs) for i in range(n)]
        outs = [tuple(s.outputs[j] for s in sigs) for j in range(len(out_specs))]
        combos.append((sigs, ins, outs))
    return combos, rule is not None and known


def choose(inputs, combos, placement, extra_cost=None, cost_fn=None):
    """(the combination with the least cost, its boxing bytes): the boxing bytes over the
    inputs (``cost_fn(shape, np dtype, placement, src, dst)``, default the boxing plans'),
    plus ``extra_cost(combo)`` when given (the graph planner's look-ahead); between equal
    costs, the one re-laying out fewer inputs (a local pad or fill costs no bytes but a
    buffer and a pass), then the rule's order."""
    cost_fn = cost_fn or _cost
    best, best_key, best_boxing = None, None, None
    for combo in combos:
        cost = boxed = 0
        for t, want in zip(inputs, combo[1]):
            if t._sbp != want:
                boxed += 1
                cost += cost_fn(t._shape, t._dtype.np_dtype, placement, t._sbp, want)
                if best_key is not None and cost > best_key[0]:
                    break
        else:
            boxing = cost
            if extra_cost is not None and (best_key is None or cost <= best_key[0]):
                cost += extra_cost(combo)
            if best_key is None or (cost, boxed) < best_key:
                best, best_key, best_boxing = combo, (cost, boxed), boxing
                if cost == 0 and boxed == 0:
                    break
    return best, best_boxing


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
    zero = []
    if name.startswith("ResourceGroupApply"):
        n = attrs["num_variables"]
        k = len(handles) // n
        for j in range(n):
            want[n_in - n + j] = inputs[handles[j * k]]._sbp
    elif name.startswith("ResourceApply"):
        want[n_in - 1] = var_nd
    if name.startswith("ResourceGroupApply") or name.startswith("ResourceApply"):
        from tensorweave.distribute.zero_update import eager_zero
        zero = eager_zero(inputs, handles, n_in, attrs.get("num_variables", 1), placement, want)
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
        if zero:                      # ZeRO-1 slots (zero_update.py): the rank's rows of the weights
            from tensorweave.distribute.zero_update import eager_zero_op
            return eager_zero_op(op_type, a, info, zero, placement)
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


class Layout:
    """A global tensor's layout without its data: what signature choice reads (logical shape
    as a tuple, dtype, N-D SBP, placement). A :class:`GlobalTensor` reads the same way, so the
    eager interpreter and the graph planner share :func:`candidates`, :func:`choose` and
    :func:`decide`."""

    __slots__ = ("_shape", "_dtype", "_sbp", "placement")
    is_global = True

    def __init__(self, shape, dtype, sbp, placement):
        self._shape, self._dtype, self._sbp, self.placement = tuple(shape), dtype, tuple(sbp), placement

    @property
    def shape(self):
        return TensorShape(self._shape)

    @property
    def dtype(self):
        return self._dtype

    @property
    def sbp(self):
        return self._sbp

    def __repr__(self):
        return f"Layout({list(self._shape)}, {self._dtype.name}, {_fmt_nd(self._sbp)})"


def _key(opdef, inputs, attrs, out_specs, placement):
    """What a decision depends on (rules and hooks are functions of it), or None when unhashable."""
    try:
        key = (opdef.name, placement, tuple((t._shape, t._dtype, t._sbp) for t in inputs),
               tuple(sorted(attrs.items())), tuple(out_specs))
        hash(key)
    except TypeError:       # an attr that is not hashable (a list): decide every time
        return None
    return key


_candidate_cache = {}


def candidates(opdef, inputs, attrs, out_specs, placement):
    """(the legal combinations of per-mesh-axis signatures, whether the op has a rule) for an op
    on ``inputs`` (global tensors or :class:`Layout` s); an op on variable handles keeps each
    handle's layout (a handle cannot move), else :func:`_variable_op`. Remembered like
    :func:`decide` (a graph of repeated layers asks the same questions)."""
    key = _key(opdef, inputs, attrs, out_specs, placement)
    found = _candidate_cache.get(key) if key is not None else None
    if found is None:
        found = _uncached_candidates(opdef, inputs, attrs, out_specs, placement)
        if key is not None:
            if len(_candidate_cache) >= _MAX_DECISIONS:
                _candidate_cache.clear()
            _candidate_cache[key] = found
    return found


def _uncached_candidates(opdef, inputs, attrs, out_specs, placement):
    combos, has_rule = _candidates(opdef, inputs, attrs, out_specs, placement)
    handles = [i for i, t in enumerate(inputs) if t._dtype is _dt.resource]
    if handles:
        combos = [c for c in combos if all(c[1][i] == inputs[i]._sbp for i in handles)]
        if not combos:
            combos, has_rule = [_variable_op(opdef, inputs, attrs, out_specs, placement)], True
    return combos, has_rule


def decision(opdef, inputs, kernel_attrs, out_specs, placement, combo, cost, has_rule):
    """(signatures, input SBPs, output SBPs, boxing cost, has a rule, boxing plans, per-rank
    (op type, attrs)) of running ``opdef`` with the chosen ``combo``."""
    sigs, in_nd, out_nd = combo
    plans = [None if t._sbp == want else _plan(t._shape, t._dtype.np_dtype, placement, t._sbp, want)
             for t, want in zip(inputs, in_nd)]
    local_ops = _local_ops(opdef, kernel_attrs, sigs, inputs, in_nd, out_specs, out_nd, placement)
    return sigs, in_nd, out_nd, cost, has_rule, plans, local_ops


_decisions = {}
_MAX_DECISIONS = 4096


def decide(opdef, inputs, attrs, kernel_attrs, out_specs, placement):
    """:func:`decision` for the cheapest candidate; remembered per op, logical shapes, dtypes,
    SBPs and attrs (rules and hooks are functions of those), so a training loop (or a graph of
    repeated layers) decides each op once."""
    key = _key(opdef, inputs, attrs, out_specs, placement)
    found = _decisions.get(key) if key is not None else None
    if found is not None:
        return found
    combos, has_rule = candidates(opdef, inputs, attrs, out_specs, placement)
    combo, cost = choose(inputs, combos, placement)
    found = decision(opdef, inputs, kernel_attrs, out_specs, placement, combo, cost, has_rule)
    if key is not None:
        if len(_decisions) >= _MAX_DECISIONS:
            _decisions.clear()
        _decisions[key] = found
    return found


def _whole(t):
    """The whole value of a broadcast tensor held here (its first piece), else None."""
    piece = t._pieces[0]
    return piece if isinstance(piece, np.ndarray) and all(isinstance(s, Broadcast) for s in t._sbp) else None


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
    rule_attrs = with_signs(opdef.name, [t._sbp for t in inputs], lambda i: _whole(inputs[i]), attrs or {})
    sigs, in_nd, out_nd, cost, has_rule, plans, local_ops = decide(opdef, inputs, rule_attrs, kernel_attrs, out_specs,
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
    n_op = opdef.n_outputs(attrs)

    def on_rank(i):
        r = ranks[i]
        return run_op_on_rank(plans, local_ops[i], r, [t._pieces[i] for t in inputs],
                              lambda g: world.group(g).communicator(g.index(r)), ranks if once else None)

    try:
        cluster = cluster_for(placement)
        if cluster is not None:      # the ranks are Ray workers: the pieces stay there
            from tensorweave.distribute.ray.pieces import run_op
            results = run_op(cluster, placement, plans, local_ops, inputs, once, n_op, bool(ctx.tapes), opdef)
        else:
            if any(isinstance(t._pieces[0], RemotePiece) for t in inputs):
                raise errors.FailedPreconditionError(describe(
                    opdef, inputs, "an input's pieces live on the Ray workers but this placement means the "
                                   "in-process ranks here (inside tw.distribute.in_process(), or the cluster is gone)",
                    "use it outside the in_process() block, or bring it over with x.to_global(...) / x.numpy()"))
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
    if n_op == 0 or not out_specs:
        return None
    per_rank = [[res[1]] if n_op == 1 else list(res[1]) for res in results]
    outs = []
    for j, (shape, dtype) in enumerate(out_specs):
        pieces = [p[j] if isinstance(p[j], RemotePiece) else np.asarray(p[j]) for p in per_rank]
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


def metadata_values(opdef, inputs, attrs):
    """The outputs (arrays) of a shape-only op on global inputs, from their logical shapes."""
    stand_ins = [np.broadcast_to(np.zeros((), t._dtype.np_dtype), t._shape) for t in inputs]
    kernel_attrs = {k: v for k, v in attrs.items() if k[0] != "_"}
    out = get_op(opdef.name).kernel("CPU")(*stand_ins, **kernel_attrs)
    return [np.array(o) for o in (list(out) if opdef.n_outputs(attrs) != 1 else [out])]


def _metadata_op(opdef, inputs, attrs, placement):
    from tensorweave.distribute.global_tensor import GlobalTensor
    nd = (B,) * placement.ndim
    res = tuple(GlobalTensor([np.array(o) for _ in range(placement.size)], placement, nd, o.shape,
                             _dt.from_numpy(o.dtype)) for o in metadata_values(opdef, inputs, attrs))
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
            graph = ctx.graph_stack[-1]
            if not getattr(graph, "is_function_graph", False):
                raise errors.UnimplementedError(describe(
                    opdef, inputs, "global tensors in TF1 graphs are not planned yet",
                    "use tw.function (planned over the ranks) or run eagerly"))
            # a global tensor the function closes over: captured like an argument, then planned
            from tensorweave.core.dispatch import GRAPH
            from tensorweave.distribute.plan_function import capture_global
            inputs = [capture_global(graph, t) if getattr(t, "is_global", False) else t for t in inputs]
            return GRAPH.execute(opdef, inputs, attrs, name)
        return run_global_op(opdef, list(inputs), dict(attrs or {}), name)


GLOBAL = GlobalInterpreter()
