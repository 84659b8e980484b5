"""Optimizer updates of ZeRO-1 weights the in-process ranks share, applied by the gradient bucket's reduction.

In a planned data-parallel step on in-process ranks, a ZeRO-1 weight lives in one buffer the ranks
share (``zero_update.share_storage``), its slots in ``S(0)`` shards (each rank its rows), its
gradient's sums come out of the bucketed all-reduce (``collective.InProcessGroup.reduce_start``:
each waiting rank sums chunks of the bucket) and the update then writes each rank's rows of the
weight and of its slots. That is passes over the gradient's bytes: the sum written, read back by
the update, the weight and slots read and written. Here the rank that sums a chunk applies the
update to the weight's and the owning rank's slots' elements there at once
(``BucketUpdate.apply_chunk``): one pass, no sum kept. Updates (``fused_rules.py``): plain SGD
(``w - g * lr``), SGD with momentum (Nesterov too), Adam (bias correction included; AMSGrad
too), RMSprop (momentum, centered), Adagrad, Lion and Adamax, each with its weight decay where it has one
(AdamW, Keras' ``weight_decay=``) — each with its kernel's operations in its order, so the bits are
the unfused step's.

:func:`install` does it on a bound step (each rank's :class:`~tensorweave.runtime.executor.Plan`)
where, on every rank alike, an update of ``FUSED_OPS`` (or its
``ResourceGroupApply*``) updates a weight through a shared ``_VariableRows`` view, with a
gradient that is a ZeRO-1 output of an ``_AllReduceWait`` read by that update only, slots read
by that update only, and scalars (learning rate; Adam's step) that the same wait hands out (a
``_Once`` read folded into the bucket, ``rank_graph.fold_once``) or one step makes of them and
constants (Adam's ``iterations + 1``: the bucket's reduction runs that step's function). The
graph is unchanged (``explain`` and the op types stay); three of its bound steps get other
functions: the bucket's start passes a :class:`BucketUpdate` to ``all_reduce_start``, the wait
gives None for an applied gradient, and the update skips the variables whose gradient is None.
Where the weight is not shared when a step runs (a value someone holds, per-rank copies), its
:meth:`BucketUpdate.targets` entry is None and the step runs unfused: the same bits either way.

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> w = tw.Variable(np.ones((64, 8), np.float32), placement=p, sbp=tw.sbp.broadcast)
>>> x = tw.constant(np.ones((32, 64), np.float32)).to_global(placement=p, sbp=tw.sbp.split(0))
>>> opt = tw.keras.optimizers.SGD(0.5)
>>> @tw.function
... def step(x):
...     with tw.GradientTape() as tape:
...         loss = tw.reduce_sum(tw.matmul(x, w)) / 32.0
...     opt.apply_gradients([(tape.gradient(loss, w), w)])
>>> step(x); step(x)
>>> float(w.numpy()[0, 0])
0.0
"""
import functools

from tensorweave.distribute import fused_rules
from tensorweave.distribute.layout import balanced_bounds
from tensorweave.runtime.plan_spec import ResourceRef

#: :func:`install` gives buckets their fused updates (benchmarks' ablation ``unfused_sgd`` and tests turn it
#: off; read when a planned step's rank plans are bound)
ENABLED = True
#: the update ops a bucket can apply (``fused_rules.rule_for`` says which of their forms)
FUSED_OPS = ("ResourceApplyKerasMomentum", "ResourceGroupApplyKerasMomentum", "ResourceApplyAdam",
             "ResourceGroupApplyAdam", "ResourceApplyKerasRMSprop", "ResourceGroupApplyKerasRMSprop",
             "ResourceApplyAdagradV2", "ResourceGroupApplyAdagradV2", "ResourceApplyLion", "ResourceGroupApplyLion",
             "ResourceApplyAdamax", "ResourceGroupApplyAdamax")


class _Target:
    """Where one bucket array's sums go: ``weight`` the flat buffer the ranks share, ``slots`` per
    member its slot shards (flat, its rows only; empty for plain SGD) starting at element
    ``offsets[member]`` of the weight. ``size``/``dtype``: the weight's (``collective._targets``)."""

    __slots__ = ("weight", "slots", "offsets", "size", "dtype")

    def __init__(self, weight, slots, offsets):
        self.weight, self.slots, self.offsets = weight, slots, offsets
        self.size, self.dtype = weight.size, weight.dtype


class BucketUpdate:
    """One bucket's fused update, shared by the ranks' starts of that bucket: ``arrays`` the bucket
    positions applied, ``weights`` their :class:`~zero_update.SharedWeight` groups, ``slots`` per
    array the slot variables per rank (rank order), ``rule`` the update (``fused_rules._Rule``) and
    ``scalars(extras)`` its scalar inputs from the values the wait hands out (``extras`` of them)."""

    __slots__ = ("arrays", "weights", "slots", "rule", "scalars", "extras", "_rows", "_kept")

    def __init__(self, arrays, weights, slots, rule, scalars, extras):
        self.arrays, self.weights, self.slots = list(arrays), list(weights), list(slots)
        self.rule, self.scalars, self.extras = rule, scalars, extras
        self._rows = {}         # (array, weight shape) -> (cols, offsets), or None: not the balanced rows
        self._kept = None       # (the last targets, each weight's flat view they update): targets()

    def targets(self):
        """Per bucket array its :class:`_Target`, or None (collective: asked once per step, when
        every rank has started the bucket, so every rank's reads of the weights are done and the
        first rank's ``reshare`` has run). None where the weight is not in the shared buffer now,
        or its slots' shards are not the balanced rows the reduction's chunks are cut at. This
        runs under the group's lock while the other ranks wait, so what does not change between
        steps is made once: each weight's members' row bounds, and without slots (plain SGD) the
        targets themselves, kept while every weight is in the buffer they update (its
        ``SharedWeight.flat``, which ``zero_update.reshare`` counts as a known holder; a new buffer
        is a new view): the benchmark MLP's three weights in the step, 40-49 µs of thread CPU made
        again, 26-30 checked (session 25, AMD EPYC, load 2). Slots are taken each step
        (copy-on-write counts the references to their storage)."""
        kept = self._kept
        if kept is not None:
            for g, flat in zip(self.weights, kept[1]):
                if g.flat is not flat or g.buffer() is None:
                    break
            else:
                return kept[0]
            self._kept = None
        out = [None] * (max(self.arrays) + 1)
        flats = []
        for k, g, slots in zip(self.arrays, self.weights, self.slots):
            buf = g.buffer()
            if buf is None or not buf.flags.c_contiguous:
                continue
            rows = self._rows.get((k, buf.shape), False)
            if rows is False:
                rows = self._rows[k, buf.shape] = _balanced_rows(buf, g.bounds)
            if rows is None:
                continue
            cols, offsets = rows
            if self.rule.slots:
                mine = [[s._storage_for_update().reshape(-1) for s in per_rank] for per_rank in slots]
                if any(a.size != (hi - lo) * cols or a.dtype != buf.dtype
                       for per_rank, (lo, hi) in zip(mine, g.bounds) for a in per_rank):
                    continue
            else:           # plain SGD: no slots to take or check
                mine = [()] * len(g.bounds)
            flat = g.flat
            if flat is not None and flat.base is buf:
                flats.append(flat)
            else:           # (a buffer whose flat view is not at hand: made for this step only)
                flat = buf.reshape(-1)
            out[k] = _Target(flat, mine, offsets)
        if not self.rule.slots and len(flats) == len(self.weights):
            self._kept = (out, flats)
        return out

    def scale(self, pending, dtype):
        """The kernel's factors in ``dtype``, from the first rank's folded reads attached to the round."""
        return self.rule.factors(self.scalars(pending.extras(self.extras)), dtype)

    def apply_chunk(self, values, target, chunk, factors, scratch):
        """The update of the chunk's elements (``(array, lo, hi, owner)``) with the members' values
        there summed in rank order: the weight's there, and the slots' of the member owning those
        rows (collective.InProcessGroup.reduce_wait; ``fused_rules``: the unfused step's bits)."""
        k, lo, hi, owner = chunk
        slots = target.slots[owner]
        if slots:           # (plain SGD has none: no list made per chunk)
            off = target.offsets[owner]
            slots = [s[lo - off:hi - off] for s in slots]
        self.rule.apply([v[k].reshape(-1)[lo:hi] for v in values], target.weight[lo:hi], slots, factors, scratch)


def _balanced_rows(buf, bounds):
    """``(cols, element offset of each member's rows)`` of a weight buffer whose members' row
    ``bounds`` are the balanced ones the reduction's chunks are cut at; else None."""
    rows = buf.shape[0] if buf.ndim else 1
    cols = buf.size // rows if rows else 0
    if [tuple(b) for b in bounds] != balanced_bounds(rows, len(bounds)):
        return None
    return cols, [lo * cols for lo, _ in bounds]


def install(bound):
    """Gives each bucket of the ranks' bound plans ``bound`` (rank order) whose updates qualify
    (module docstring) a :class:`BucketUpdate`, on every rank or none; returns how many weights
    are applied by their buckets."""
    if not ENABLED:
        return 0
    found = [_candidates(plan) for plan in bound]
    if len(bound) < 2 or not found[0] or any(_shape(f) != _shape(found[0]) for f in found):
        return 0
    count = 0
    for start_name, entry in found[0].items():
        picks = entry[3]
        if not picks:
            continue
        groups = [p[1] for p in picks]
        if any([p[1] for p in f[start_name][3]] != groups for f in found):
            continue        # the ranks disagree on the weights (their groups): leave the bucket alone
        slots = [[f[start_name][3][i][4] for f in found] for i in range(len(picks))]
        rule, recipes = entry[4]
        spec = BucketUpdate([p[0] for p in picks], groups, slots, rule, entry[5],
                            1 + max(_extra_positions(recipes)))
        for plan, f in zip(bound, found):
            _patch(plan, f[start_name][0], f[start_name][1], f[start_name][2], spec)
        count += len(picks)
    return count


def _shape(found):
    return sorted((name, tuple(p[0] for p in v[3]), v[4]) for name, v in found.items())


def _extra_positions(recipes):
    for r in recipes:
        if r[0] == "extra":
            yield r[1]
        else:
            yield from (x[1] for x in r[2] if x[0] == "extra")


def _candidates(plan):
    """``{start step name: (start index, wait index, update indices, [(bucket array, group, update
    index, variable position, slot variables)], (rule, scalar recipes), scalars function)}`` of ``plan``."""
    steps = plan.steps
    producer, readers, users = {}, {}, {}
    for i, st in enumerate(steps):
        for s in (st.outs,) if st.single else st.outs:
            producer[s] = i
        for s in st.ins:
            readers.setdefault(s, []).append(i)
            if plan.initial[s] is not None:
                users.setdefault(id(plan.initial[s]), set()).add(i)
    fetched = set(plan.fetch_slots)
    out = {}
    for u, st in enumerate(steps):
        rule = fused_rules.rule_for(st.node.op, st.node.attrs) if st.node.op in FUSED_OPS else None
        if rule is None or not isinstance(st.fn, functools.partial):
            continue
        n = st.node.attrs.get("num_variables", 1) if st.node.op.startswith("ResourceGroupApply") else 1
        k = 1 + rule.slots
        if len(st.ins) != n * k + rule.scalars + n:
            continue
        recipes = [_recipe(plan, producer, s) for s in st.ins[n * k:n * k + rule.scalars]]
        waits = {r[0] for r in recipes if r is not None}
        if None in recipes or len(waits) != 1:
            continue
        w = waits.pop()
        wait = steps[w]
        nb = wait.node.attrs.get("n", 1)
        s = producer.get(wait.ins[0])
        if s is None or steps[s].node.op != "_AllReduceStart":
            continue
        how = (rule, tuple(r[1] for r in recipes))
        entry = out.setdefault(steps[s].node.name, (s, w, [], [], how, _scalars(steps, [r[2] for r in recipes])))
        if entry[1] != w or entry[4] != how:
            continue
        rows = wait.node.attrs.get("rows") or [None] * nb
        for j in range(n):
            r, g = producer.get(st.ins[j * k]), st.ins[n * k + rule.scalars + j]
            shared = getattr(steps[r].fn, "shared", None) if r is not None and \
                steps[r].node.op == "_VariableRows" else None
            slots = [plan.initial[x] for x in st.ins[j * k + 1:(j + 1) * k]]
            if shared is None or producer.get(g) != w or readers.get(g) != [u] or g in fetched:
                continue
            if any(v is None or users.get(id(v)) != {u} for v in slots):
                continue        # a slot read elsewhere: the chunks would change it under that reader
            kk = list(wait.outs).index(g)
            if rows[kk] is None:
                continue
            entry[3].append((kk, shared[0], u, j, tuple(slots)))
        if u not in entry[2]:
            entry[2].append(u)
    for name, entry in out.items():
        entry[3].sort(key=lambda p: p[0])
    return out


def _recipe(plan, producer, slot):
    """``(wait index, shape, how)`` of an update's scalar input ``slot``: one of the values a bucket's
    wait hands out beside its sums (a folded ``_Once`` read: ``("extra", position)``), or one step's
    output from such values and constants (Adam's step, ``iterations + 1``); None otherwise."""
    steps = plan.steps
    p = producer.get(slot)
    if p is None:
        return None
    st = steps[p]
    if st.node.op == "_AllReduceWait":
        pos = _extra_of(st, slot)
        return None if pos is None else (p, ("extra", pos), ("extra", pos))
    if not st.single or not callable(st.fn):
        return None
    ins, waits = [], set()
    for x in st.ins:
        q = producer.get(x)
        if q is None:
            if plan.initial[x] is None or x in plan.feed_slots:
                return None
            ins.append(("const", plan.initial[x]))
        elif steps[q].node.op == "_AllReduceWait" and _extra_of(steps[q], x) is not None:
            waits.add(q)
            ins.append(("extra", _extra_of(steps[q], x)))
        else:
            return None
    if len(waits) != 1:
        return None
    shape = ("step", st.node.op, tuple(i if i[0] == "extra" else ("const",) for i in ins))
    return waits.pop(), shape, ("step", st.fn, ins)


def _extra_of(wait, slot):
    """The position of ``slot`` among the extra values ``wait`` hands out after its sums, or None."""
    if wait.single:
        return None
    nb, extra = wait.node.attrs.get("n", 1), wait.node.attrs.get("extra", 0)
    pos = list(wait.outs).index(slot) - nb
    return pos if 0 <= pos < extra else None


def _scalars(steps, recipes):
    """``scalars(extras)``: the update's scalar inputs from the wait's extra values (``recipes``)."""
    def one(extras, r):
        if r[0] == "extra":
            return extras[r[1]]
        return r[1](*[extras[i[1]] if i[0] == "extra" else i[1] for i in r[2]])
    return lambda extras: [one(extras, r) for r in recipes]


def _patch(plan, s, w, updates, spec):
    """The bound steps ``s`` (start), ``w`` (wait) and ``updates`` (those reading the wait) run with ``spec``."""
    steps = plan.steps
    start, wait = steps[s], steps[w]
    comm, group, op = start.node.attrs["comm"], tuple(start.node.attrs["ranks"]), start.node.attrs.get("op", "sum")
    if isinstance(comm, ResourceRef):     # the spec's reference to the rank's communicator, as bound
        comm = plan.resources[comm.index]

    def start_fn(*pieces):
        return comm(group).all_reduce_start(pieces, op, apply=spec)
    start.fn = start_fn
    nb, rows, extra = wait.node.attrs.get("n", 1), wait.node.attrs.get("rows"), wait.node.attrs.get("extra", 0)

    def wait_fn(handle):
        values = handle.wait()
        if rows:        # this rank's rows of a ZeRO-1 sum; None: applied by the reduction
            values = [v if r is None or v is None else v[r[0]:r[1]] for v, r in zip(values, rows)]
        if extra:
            values = list(values) + list(handle.extras(extra))
        return tuple(values)        # several outputs: the lr is one of them
    wait.fn = wait_fn
    for u in updates:
        steps[u].fn = _skipping(steps[u], spec.rule)
    plan.runner = None            # the generated runner bound the old step functions


def _skipping(step, rule):
    """The update step without the variables whose gradient is None (applied by the bucket)."""
    kernel, attrs = step.fn.func, dict(step.fn.keywords)
    group = step.node.op.startswith("ResourceGroupApply")
    n = attrs.get("num_variables", 1) if group else 1
    k, s = 1 + rule.slots, rule.scalars

    def fn(*ins):
        keep = [j for j in range(n) if ins[n * k + s + j] is not None]
        if len(keep) == n:
            return kernel(*ins, **attrs)
        if not keep:
            return ()
        return kernel(*[h for j in keep for h in ins[j * k:(j + 1) * k]], *ins[n * k:n * k + s],
                      *[ins[n * k + s + j] for j in keep], **dict(attrs, num_variables=len(keep)))
    return fn


__all__ = ["BucketUpdate", "FUSED_OPS", "install"]
