"""The ZeRO-1 choice of the planner: a replicated weight updated in shards.

Data parallelism gives a replicated (``B``) weight a partial-sum (``P``) gradient. The plain plan
all-reduces the gradient and every rank runs the whole optimizer update on its copy of the weight
and of its slots: with ``n`` ranks each rank repeats the same update ``n`` times over. The ZeRO-1
plan (Rajbhandari et al., stage 1) instead

1. reduce-scatters the gradient to ``S(0)`` (each rank the sum of its rows only),
2. updates only the rank's rows of the weight and of its optimizer slots — the slots then live
   ``S(0)`` (each rank holds its rows: ``1/n`` of the optimizer state), and
3. all-gathers the updated rows, so the weight is ``B`` again for the next step.

Reduce-scatter + all-gather move as many bytes as one all-reduce; the update's work drops to
``1/n``. The planner (``planner.py``) asks :func:`choose_zero` for every dense optimizer update
(``ResourceApply*``, ``ResourceGroupApply*``) and takes ZeRO-1 for a variable where its cost is
lower, in the planner's currency (bytes moved by all ranks plus the bytes the ranks' updates
touch: ``2k + 1`` times the weight's bytes for ``k`` arrays read and written and the gradient
read). On in-process ranks a bucketed all-reduce costs what a reduce-scatter does (the sums are
shared), and the ranks keep a ZeRO-1 weight in **one buffer** (:func:`share_storage`): each rank
updates its rows of it in place and the gather has nothing to copy (no rendezvous either), so
ZeRO-1 costs only :data:`planner.ZERO_FIXED_BYTES` per variable against ``(n - 1)(2k + 1)`` bytes
of update saved: chosen for every weight large enough, plain SGD included (tiny biases stay
all-reduced). With :data:`planner.SHARED_ZERO_STORAGE` off (each rank its own copy) the gather of
``(n - 1)`` weight bytes is priced at :data:`planner.ZERO_GATHER_WEIGHT` (5: a cross-rank copy
reads and writes each byte and was measured 2.6x slower per byte than the fused update): chosen
when ``2k + 1 > 5``, i.e. for Adam (``k = 3``) and RMSprop with momentum. It is forced when the
slots are already ``S(0)`` (an earlier plan chose it). Conditions: a 1-D placement of in-process
ranks, a float weight with at least ``n`` rows, read only by ``ReadVariableOp`` and this one update
(nothing else may write it within the step: AdamW's and Keras' ``weight_decay=`` decay is the update
op's own ``weight_decay`` attr, so such weights qualify; a decay applied apart, as for a sparse
gradient, is a second writer), slots used by this update only.

The result is the plain plan's bits: the reduce-scatter adds the ranks' rows in rank order as the
all-reduce does, and the updates are elementwise. In the rank plans (``rank_graph.py``) the
gradient's reduce-scatter joins the bucketed ``_AllReduceStart``/``_AllReduceWait`` (the wait
hands each rank its rows of the sums), the update takes a ``_VariableRows`` view of the weight
(its rows of the rank's storage), and a ``_GatherRows`` node after the update fills the other
ranks' rows in place (one rendezvous for all of an update's weights; nothing where the ranks
share the weights' buffer, :class:`SharedWeight`). ``tw.distribute.explain``
lists the gradient's ``reduce_scatter`` and the weight's ``all_gather`` (marked ``zero``; a
``shared_view`` moving 0 bytes, with a note, where the in-process ranks share the buffer) and
each such op's ``zero`` variables.

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> w = tw.Variable(np.ones((128, 32), np.float32), placement=p, sbp=tw.sbp.broadcast)
>>> opt = tw.keras.optimizers.Adam(0.1)
>>> x = tw.constant(np.ones((64, 128), np.float32)).to_global(placement=p, sbp=tw.sbp.split(0))
>>> @tw.function
... def step(x):
...     with tw.GradientTape() as tape:
...         loss = tw.reduce_sum(tw.matmul(x, w))
...     opt.apply_gradients([(tape.gradient(loss, w), w)])
>>> step(x)
>>> opt._slot(w, "momentum").sbp, [t.shape.as_list() for t in opt._slot(w, "momentum").to_local()]
((S(0),), [[64, 32], [64, 32]])
>>> round(float(w.numpy()[0, 0]), 4)
0.9
"""
import numpy as np

from tensorweave.core import derived
from tensorweave.core import dtypes as _dt
from tensorweave.core.sbp import B, Partial, S

_B1, _S0, _P_SUM = (B,), (S(0),), (Partial("sum"),)


def is_dense_update(op_type):
    """True for a dense fused optimizer update (one variable, or a group)."""
    return op_type.startswith("ResourceGroupApply") or op_type.startswith("ResourceApply")


def update_layout(op):
    """``(k, [(weight handle input, [slot handle inputs], gradient input)])`` of a dense update
    ``op``: ``k`` handles per variable (the weight, then its slots), the gradients last."""
    n = op.attrs.get("num_variables", 1) if op.type.startswith("ResourceGroupApply") else 1
    handles = sum(1 for t in op.inputs if t.dtype is _dt.resource)
    k = handles // n
    return k, [(j * k, list(range(j * k + 1, (j + 1) * k)), len(op.inputs) - n + j) for j in range(n)]


def _only_reader(planner, t, op, allowed=()):
    """True when ``op`` uses ``t`` once and every other consumer's type is in ``allowed``."""
    uses = planner.consumers.get(id(t), ())
    return sum(1 for c, _ in uses if c is op) == 1 and all(c is op or c.type in allowed for c, _ in uses)


def _handle_variable(t):
    if t.op.type != "VarHandleOp":
        return None
    var = t.op.attrs.get("variable")
    return var if getattr(var, "is_global", False) else None


def zero_costs(planner, shape, np_dtype, k):
    """``(all-reduce plan, ZeRO-1 plan)`` costs in bytes of one variable of ``shape`` whose update
    writes ``k`` arrays (see the module docstring)."""
    from tensorweave.distribute import planner as _planner
    placement, n = planner.placement, planner.placement.size
    work = (2 * k + 1) * int(np.prod(shape, dtype=np.int64)) * np.dtype(np_dtype).itemsize   # bytes touched
    plain = planner.cost(shape, np_dtype, placement, _P_SUM, _B1) + n * work
    gather = 0 if _planner.SHARED_ZERO_STORAGE else _planner.ZERO_GATHER_WEIGHT   # shared: nothing copied
    zero = (planner.cost(shape, np_dtype, placement, _P_SUM, _S0)
            + gather * planner.cost(shape, np_dtype, placement, _S0, _B1)
            + work + _planner.ZERO_FIXED_BYTES)
    return plain, zero


class SharedWeight:
    """One replicated weight's shards on the in-process ranks (``shards``, rank order) kept in one
    buffer, each rank updating its ``bounds`` rows of it in place through a view (``views``, made
    by :func:`reshare` with the buffer), ``flat`` the whole buffer as one flat view (made with the
    views: the gradient bucket's update keeps it from step to step, ``fused_sgd.BucketUpdate``).
    ``active``: :func:`reshare` found the buffer shared and held by nothing but the shards and
    these views as this step began."""

    __slots__ = ("shards", "bounds", "views", "flat", "active")

    def __init__(self, shards, bounds):
        self.shards, self.bounds, self.views, self.active = list(shards), list(bounds), [None] * len(shards), False
        self.flat = None

    def storage(self, variable, index):
        """The shared buffer for rank ``index``'s in-place update of its rows, where ``variable``
        (its shard) still holds it; else None (the shard's own copy-on-write copies it)."""
        if not self.holds(variable, index):
            return None
        base = self.views[index].base
        derived.modified(base)
        return base

    def holds(self, variable, index):
        """Whether ``variable`` (rank ``index``'s shard) holds the shared buffer now (:meth:`storage`
        without marking the buffer modified: a check of a step that writes nothing)."""
        view = self.views[index]
        return self.active and view is not None and variable._value is view.base

    def buffer(self):
        """The shared buffer where every shard holds it (an update of all the shards' rows at once:
        the gradient bucket's, ``fused_sgd.BucketUpdate``), marked modified once; else None."""
        base = self.views[0].base if self.active and self.views[0] is not None else None
        if base is None:
            return None
        for variable, view in zip(self.shards, self.views):
            if view is None or view.base is not base or variable._value is not base:
                return None
        derived.modified(base)
        return base

    def rows(self, variable, index):
        """Rank ``index``'s rows of the shared buffer (its view) for its update, or None: :meth:`storage`."""
        return None if self.storage(variable, index) is None else self.views[index]


def share_storage(bound):
    """In-process ranks' bound plans ``bound`` (rank order) of one planned step: gives each ZeRO-1
    weight's ``_VariableRows`` and ``_GatherRows`` steps its :class:`SharedWeight`, so an update
    writes its rows into the buffer the ranks share and the gather copies none; returns them,
    for :func:`reshare` to run before each step.

    The ranks of one process need not keep a replicated weight twice: with one buffer, rank ``i``
    updates its rows in place and the others' rows are already there (ZeRO-1's update without
    its all-gather; the same bits: the sums and the elementwise update are unchanged). What keeps
    a rank from reading rows another one is writing: the update runs after its gradient bucket's
    wait, which every rank reaches only after its ``_AllReduceStart``, so every other step of a
    rank that reads the weight must run before that start (an ancestor of it): checked here, per
    plan, else that weight keeps its own storage per rank. A read value still held when a rank
    updates (a fetched weight, a view) is a holder, and the update copies as copy-on-write does."""
    from tensorweave.distribute.plan_ops import _Rows
    from tensorweave.runtime import nogil_segments
    nogil_segments.update_handle(_Rows)       # (a rank plan's apply may update its rows in a nogil segment)
    per_rank = [_sharable(plan) for plan in bound]
    names = [list(w) for w in per_rank]
    if len(bound) < 2 or any(n != names[0] for n in names):
        return []
    groups = []
    for name in names[0]:
        shards = [w[name][0] for w in per_rank]
        if len({id(v) for v in shards}) != len(shards):
            continue
        group = SharedWeight(shards, [w[name][1].bounds for w in per_rank])
        groups.append(group)
        for i, w in enumerate(per_rank):
            _, rows_fn, gather_fn, pos, n_in = w[name]
            rows_fn.shared = (group, i)
            gather_fn.shared = list(gather_fn.shared) or [None] * n_in
            gather_fn.shared[pos] = (group, i)
    if groups:          # plain SGD on these weights: applied by their buckets' reductions
        from tensorweave.distribute import fused_sgd
        fused_sgd.install(bound)
    return groups


def _sharable(plan):
    """``{_VariableRows step name: (its variable, rows step fn, gather step fn, input position in
    the gather, the gather's input count)}`` for the weights of ``plan`` whose other readers all
    run before the bucket their update waits for (see :func:`share_storage`)."""
    steps, deps = plan.steps, plan.deps
    producer = {}
    for i, st in enumerate(steps):
        for s in (st.outs,) if st.single else st.outs:
            producer[s] = i
    out = {}
    for r, st in enumerate(steps):
        if st.node.op != "_VariableRows" or not hasattr(st.fn, "shared"):
            continue
        var = plan.initial[st.ins[0]]
        update = next((j for j in range(r + 1, len(steps)) if st.outs in steps[j].ins), None)
        gather = next((j for j in range(r + 1, len(steps)) if steps[j].node.op == "_GatherRows"
                       and any(plan.initial[s] is var for s in steps[j].ins)), None)
        if var is None or update is None or gather is None:
            continue
        starts = {producer.get(steps[w].ins[0]) for w in (producer.get(s) for s in steps[update].ins)
                  if w is not None and steps[w].node.op == "_AllReduceWait"}
        if not starts or None in starts:
            continue
        before = _ancestors(deps, starts)
        readers = [j for j, o in enumerate(steps) if j not in (r, update, gather)
                   and any(plan.initial[s] is var for s in o.ins)]
        if all(j in before for j in readers):
            st.fn.bounds = tuple(st.node.attrs["rows"])
            pos = next(k for k, s in enumerate(steps[gather].ins) if plan.initial[s] is var)
            out[st.node.name] = (var, st.fn, steps[gather].fn, pos, len(steps[gather].ins))
    return out


def _ancestors(deps, roots):
    seen, stack = set(), list(roots)
    while stack:
        for d in deps[stack.pop()]:
            if d not in seen:
                seen.add(d)
                stack.append(d)
    return seen


def reshare(groups):
    """Before a step's run: points each :class:`SharedWeight`'s shards at one buffer (and makes the
    ranks' row views of it) where they are not (a first run, or a shard given a buffer of its own
    by an assignment or a copy-on-write), and gives the group a fresh buffer where anything but
    the shards and the views holds it (a value someone read stays as read, as copy-on-write
    keeps it). Only shards of equal values are joined (a replicated weight's shards are; else the
    group stays inactive and the gather copies rows). Run by the first rank as its run starts:
    every rank's update waits for that rank's bucket, and the plan's reads of the weight end
    before the ranks' buckets start (:func:`share_storage`), so no rank holds a value of it then
    that this step's updates could change."""
    from tensorweave.ops import variables as _variables
    for g in groups:
        v0 = g.shards[0]._value
        joined = all(s._value is v0 for s in g.shards) and all(w is not None and w.base is v0 for w in g.views)
        if not joined:
            g.active = False
            if v0 is None or any(s._value is None or s._value.shape != v0.shape or s._value.dtype != v0.dtype
                                 or not np.array_equal(s._value, v0) for s in g.shards):
                continue
        # known holders of v0: the shards, the views and the flat view on it (the first shard's is in
        # _UNSHARED_REFS), and v0 here; any other is a value someone read
        known = sum(s._value is v0 for s in g.shards) + sum(w is not None and w.base is v0 for w in g.views) \
            + (g.flat is not None and g.flat.base is v0)
        held = _variables._storage_refs(g.shards[0]) > _variables._UNSHARED_REFS + known
        if joined and not held:
            g.active = True
            continue
        if held or v0.base is not None or not v0.flags.writeable or not v0.flags.c_contiguous:
            v0 = np.array(v0, order="C", copy=True)
            derived.track(v0)
        for s in g.shards:
            s._value = v0
        g.views = [v0[lo:hi] for lo, hi in g.bounds]
        g.flat = v0.reshape(-1)
        g.active = True


def choose_zero(planner, p):
    """Rewrites the update's plan ``p`` to ZeRO-1 for each variable where it is cheaper (or where
    the slots are ``S(0)`` already): the gradient boxed ``P -> S(0)``, the slots laid out ``S(0)``
    (in place, values kept), ``p.zero`` the (weight input, gradient input) pairs."""
    from tensorweave.core.context import eager_mode
    from tensorweave.distribute.interpreter import Layout, _plan
    from tensorweave.distribute.model_global import variable_to_global
    from tensorweave.distribute.ray.pieces import cluster_for
    placement, gp, op = planner.placement, planner.gp, p.op
    if placement.ndim != 1 or placement.size < 2 or cluster_for(placement) is not None:
        return
    k, variables = update_layout(op)
    picks, forced_vars = [], []
    for w, slots, g in variables:
        wt, gt = op.inputs[w], op.inputs[g]
        sharded = any(gp.layouts[id(op.inputs[s])]._sbp == _S0 for s in slots)
        if sharded:
            forced_vars.append(w)
        var, wlay, glay = _handle_variable(wt), gp.layouts.get(id(wt)), gp.layouts.get(id(gt))
        if var is None or wlay is None or glay is None or wlay._sbp != _B1 or glay._sbp != _P_SUM:
            continue
        shape = tuple(wlay._shape)
        if not shape or shape[0] < placement.size or glay._shape != shape or glay._dtype not in (
                _dt.float32, _dt.float64) or not _only_reader(planner, wt, op, ("ReadVariableOp",)):
            continue
        slot_vars = [_handle_variable(op.inputs[s]) for s in slots]
        slot_nd = [gp.layouts[id(op.inputs[s])]._sbp for s in slots]
        if any(v is None or not _only_reader(planner, op.inputs[s], op) for v, s in zip(slot_vars, slots)):
            continue
        if any(nd not in (_B1, _S0) for nd in slot_nd):
            continue
        forced = any(nd == _S0 for nd in slot_nd)
        plain, zero = zero_costs(planner, shape, glay._dtype.np_dtype, k)
        if forced or zero < plain:
            picks.append((w, slots, g, shape, glay._dtype.np_dtype, slot_vars, slot_nd))
    wrapped = bool(p.local_ops) and p.local_ops[0][0] == "_ZeroApply"
    if wrapped and set(forced_vars) - {pick[0] for pick in picks}:
        return      # the variable-op rule's in-kernel update + gather (eager_zero) covers them
    p.plans, p.in_nd = list(p.plans), list(p.in_nd)
    for w, slots, g, shape, np_dtype, slot_vars, slot_nd in picks:
        for v, s, nd in zip(slot_vars, slots, slot_nd):
            if nd != _S0:
                with eager_mode():
                    variable_to_global(v, placement, _S0)
            gp.layouts[id(op.inputs[s])] = Layout(shape, _dt.resource, _S0, placement)
            p.in_nd[s] = _S0
        p.plans[g] = _plan(shape, np_dtype, placement, _P_SUM, _S0)
        p.in_nd[g] = _S0
    if wrapped:       # the rank plans make the ZeRO-1 nodes instead
        p.local_ops = [(a["op_type"], a["op_attrs"]) for _, a in p.local_ops]
    p.zero = tuple((w, g) for w, _, g, *_ in picks)


def eager_zero(inputs, handles, n_in, num_variables, placement, want):
    """An eager update (the global interpreter) of a ``B`` weight whose slots are ``S(0)`` (a
    planned step chose ZeRO-1 for it): its gradient is wanted ``S(0)`` (``want`` is changed);
    returns the (weight input, gradient input) pairs for :func:`eager_zero_op`."""
    zero = []
    if placement.ndim != 1:
        return zero
    k = len(handles) // num_variables
    for j in range(num_variables):
        w, slots, g = handles[j * k], handles[j * k + 1:(j + 1) * k], n_in - num_variables + j
        if inputs[w]._sbp == _B1 and slots and all(inputs[s]._sbp == _S0 for s in slots):
            want[g] = _S0
            zero.append((w, g))
    return zero


def eager_zero_op(op_type, attrs, info, zero, placement):
    """The rank's ``_ZeroApply`` (plan_ops.py) for an eager ZeRO-1 update: ``op_type`` on the
    rank's rows of each weight of ``zero``, then the rows gathered."""
    from tensorweave.distribute import plan_ops  # noqa: F401 - registers _ZeroApply
    rows = [[w, info.in_slices[g][0].start, info.in_slices[g][0].stop] for w, g in zero]
    return "_ZeroApply", {"op_type": op_type, "op_attrs": attrs, "rows": rows, "ranks": list(placement.ranks),
                          "rank": placement.ranks[info.coords[0]]}


__all__ = ["SharedWeight", "choose_zero", "eager_zero", "eager_zero_op", "is_dense_update", "reshare",
           "share_storage", "update_layout", "zero_costs"]
