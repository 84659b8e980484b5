"""Plain SGD on a ZeRO-1 weight the in-process ranks share, applied by the gradient bucket's reduction.

In a planned data-parallel step on in-process ranks, a ZeRO-1 weight lives in one buffer the ranks
share (``zero_update.share_storage``), its gradient's sums come out of the bucketed all-reduce
(``collective.InProcessGroup.reduce_start``: each waiting rank sums chunks of the bucket) and the
update then writes each rank's rows of the weight. For plain SGD (Keras' ``SGD`` without
momentum: ``w = w - g * lr``) that is three passes over the gradient's bytes: the sum written,
read back by the update, the weight read and written. Here the rank that sums a chunk applies the
update to the weight's rows there at once (``collective._apply_chunk``): one pass, no sum kept.

:func:`install` does it on a bound step (each rank's :class:`~tensorweave.runtime.executor.Plan`)
where, on every rank alike, a ``ResourceApplyKerasMomentum`` / ``ResourceGroupApplyKerasMomentum``
with momentum 0 updates a weight through a shared ``_VariableRows`` view, with a gradient that
is a ZeRO-1 output of an ``_AllReduceWait`` read by that update only and a learning rate that
the same wait hands out (a ``_Once`` read folded into the bucket, ``rank_graph.fold_once``). The
graph is unchanged (``explain`` and the op types stay); three of its bound steps get other
functions: the bucket's start passes a :class:`BucketSGD` to ``all_reduce_start``, the wait
gives None for an applied gradient, and the update skips the variables whose gradient is None.
Where the weight is not shared when a step runs (a value someone holds, per-rank copies), its
:meth:`BucketSGD.targets` entry is None and the step runs unfused: the same bits either way (the
sum in rank order, then ``w - sum * lr`` in the weight's dtype, as the update kernel).

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

import numpy as np

from tensorweave.kernels.cpu.jit import njit_twin
from tensorweave.runtime.plan_spec import ResourceRef

#: :func:`install` gives buckets their fused SGD (benchmarks' ablation ``unfused_sgd`` and tests turn it
#: off; read when a planned step's rank plans are bound)
ENABLED = True
#: the update ops whose momentum-0 form is ``w - g * lr`` (training_kernels._sgd_flat)
SGD_OPS = ("ResourceApplyKerasMomentum", "ResourceGroupApplyKerasMomentum")


class BucketSGD:
    """One bucket's fused SGD, shared by the ranks' starts of that bucket: ``arrays`` the bucket
    positions updated in place, ``weights`` their :class:`~zero_update.SharedWeight` groups and
    ``extra`` the position of the learning rate among the wait's attached values."""

    __slots__ = ("arrays", "weights", "extra")

    def __init__(self, arrays, weights, extra):
        self.arrays, self.weights, self.extra = list(arrays), list(weights), extra

    def targets(self):
        """Per bucket array the flat shared buffer its sums are applied to, or None (collective:
        asked once per step, when every rank has started the bucket, so every rank's reads of the
        weights are done and the first rank's ``reshare`` has run)."""
        out = [None] * (max(self.arrays) + 1)
        for k, g in zip(self.arrays, self.weights):
            bufs = [g.storage(v, i) for i, v in enumerate(g.shards)]
            if bufs[0] is not None and all(b is bufs[0] for b in bufs) and bufs[0].flags.c_contiguous:
                out[k] = bufs[0].reshape(-1)
        return out

    def scale(self, pending):
        """The learning rate: the first rank's folded read, attached to the bucket's round."""
        return pending.extras(self.extra + 1)[self.extra]

    @staticmethod
    def apply_chunk(values, target, chunk, lr, scratch):
        """``target.flat[lo:hi] -= (the members' values there, summed in rank order) * lr``: the
        SGD step fused with the sum of its gradient's chunk (collective.InProcessGroup.reduce_wait),
        one pass over the bytes for two members; more members sum into ``scratch`` (in cache)
        first. The bits are the unfused sum's and update's (``w - g * lr``, the same operations)."""
        k, lo, hi = chunk[:3]
        dst = target[lo:hi]
        parts = [v[k].reshape(-1)[lo:hi] for v in values]
        if len(parts) == 2:
            _sum2_sgd(dst, parts[0], parts[1], lr)
            return
        tmp = scratch[:hi - lo]
        np.copyto(tmp, parts[0])
        for v in parts[1:]:
            np.add(tmp, v, out=tmp)
        np.multiply(tmp, lr, out=tmp)
        np.subtract(dst, tmp, out=dst)


def _sum2_sgd_numpy(w, a, b, lr):
    """:func:`_sum2_sgd` in NumPy (its twin while it compiles; the same operations, the same bits)."""
    t = np.add(a, b)
    np.multiply(t, lr, out=t)
    np.subtract(w, t, out=w)


@njit_twin(_sum2_sgd_numpy)
def _sum2_sgd(w, a, b, lr):
    for i in range(w.shape[0]):
        w[i] = w[i] - (a[i] + b[i]) * lr


def install(bound):
    """Gives each bucket of the ranks' bound plans ``bound`` (rank order) whose plain SGD updates
    qualify (module docstring) a :class:`BucketSGD`, on every rank or none; returns how many
    weights are applied by their buckets."""
    if not ENABLED:
        return 0
    found = [_candidates(plan) for plan in bound]
    if len(bound) < 2 or not found[0] or any(_shape(f) != _shape(found[0]) for f in found):
        return 0
    count = 0
    for start_name, (_, _, _, picks, extra) in found[0].items():
        if not picks:
            continue
        groups = [p[1] for p in picks]
        if any([p[1] for p in f[start_name][3]] != groups for f in found):
            continue        # the ranks disagree on the weights (their groups): leave the bucket alone
        spec = BucketSGD([p[0] for p in picks], groups, extra)
        for plan, f in zip(bound, found):
            start, wait, _, _, _ = f[start_name]
            _patch(plan, start, wait, spec)
        count += len(picks)
    return count


def _shape(found):
    return sorted((name, tuple(p[0] for p in v[3]), v[4]) for name, v in found.items())


def _candidates(plan):
    """``{start step name: (start index, wait index, update indices, [(bucket array, group, update
    index, variable position)], lr extra position)}`` of ``plan``."""
    steps = plan.steps
    producer, readers = {}, {}
    for i, st in enumerate(steps):
        for s in (st.outs,) if st.single else st.outs:
            producer[s] = i
        for s in st.ins:
            readers.setdefault(s, []).append(i)
    fetched = set(plan.fetch_slots)
    out = {}
    for u, st in enumerate(steps):
        if st.node.op not in SGD_OPS or st.node.attrs.get("momentum") or not isinstance(st.fn, functools.partial):
            continue
        n = st.node.attrs.get("num_variables", 1) if st.node.op.startswith("ResourceGroupApply") else 1
        if len(st.ins) != 2 * n + 1:
            continue
        lr = st.ins[n]
        w = producer.get(lr)
        if w is None or steps[w].node.op != "_AllReduceWait" or steps[w].single:
            continue
        wait = steps[w]
        nb, extra = wait.node.attrs.get("n", 1), wait.node.attrs.get("extra", 0)
        pos = list(wait.outs).index(lr)
        s = producer.get(wait.ins[0])
        if pos < nb or extra == 0 or s is None or steps[s].node.op != "_AllReduceStart":
            continue
        entry = out.setdefault(steps[s].node.name, (s, w, [], [], pos - nb))
        if entry[1] != w or entry[4] != pos - nb:
            continue
        rows = wait.node.attrs.get("rows") or [None] * nb
        for j in range(n):
            r, g = producer.get(st.ins[j]), st.ins[n + 1 + j]
            shared = getattr(steps[r].fn, "shared", None) if r is not None and \
                steps[r].node.op == "_VariableRows" else None
            if shared is None or producer.get(g) != w or readers.get(g) != [u] or g in fetched:
                continue
            k = list(wait.outs).index(g)
            if rows[k] is None:
                continue
            entry[3].append((k, shared[0], u, j))
        if u not in entry[2]:
            entry[2].append(u)
    for name, entry in out.items():
        entry[3].sort(key=lambda p: p[0])
    return out


def _patch(plan, s, w, spec):
    """The bound steps ``s`` (start), ``w`` (wait) and the updates reading the wait run with ``spec``."""
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
    for u in sorted({p for p in range(len(steps)) if steps[p].node.op in SGD_OPS and any(
            x in (wait.outs if not wait.single else (wait.outs,)) for x in steps[p].ins)}):
        steps[u].fn = _skipping(steps[u])
    plan.runner = None            # the generated runner bound the old step functions


def _skipping(step):
    """The update step without the variables whose gradient is None (applied by the bucket)."""
    kernel, attrs = step.fn.func, dict(step.fn.keywords)
    group = step.node.op.startswith("ResourceGroupApply")
    n = attrs.get("num_variables", 1) if group else 1

    def fn(*ins):
        keep = [j for j in range(n) if ins[n + 1 + j] is not None]
        if len(keep) == n:
            return kernel(*ins, **attrs)
        if not keep:
            return ()
        if not group:
            return kernel(*ins, **attrs)
        return kernel(*[ins[j] for j in keep], ins[n], *[ins[n + 1 + j] for j in keep],
                      **dict(attrs, num_variables=len(keep)))
    return fn


__all__ = ["BucketSGD", "SGD_OPS", "install"]
