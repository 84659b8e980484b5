"""One gradient all-reduce per step on Ray workers: consecutive all-reduce buckets of a rank's
plan spec merged into one.

The planner (``rank_graph.bucket_all_reduces``) closes a bucket when a later gradient is
computed after one of the bucket's boxings: the benchmark MLP's SGD step, whose planned
``0.01 * g`` products sit between the updates, gets six single-array buckets, so a step is seven
exchanges. In-process ranks lose little per exchange; a Ray worker's exchange is a counter wait on
shared memory, i.e. a wait for the peer's next time slice on a loaded machine. Here, on the
spec the driver ships (``plans.RayRankPlans._ship``), buckets that follow each other in the
plan's sequence of collectives are merged when no start of the group depends on a wait of the
group (data or ordering edges): one ``_AllReduceStart`` of every input, after the last of them,
then one ``_AllReduceWait`` whose outputs are the old waits' slots, and the nodes re-ordered
(stable topological order by the old positions: the gradients' producers move up, the readers
of the sums move after the wait). The all-reduce of a bucket reduces each element in rank
order as before (``ShmCommunicator.all_reduce_start``): the same bits. Buckets of a ZeRO-1
reduce-scatter (``rows``) or with folded ``_Once`` values stay as they are.

Every rank's spec is transformed by the same rule on the same sequence of collectives, so the
ranks still make the same collective calls in the same order.
"""
import heapq

from tensorweave.runtime import executor
from tensorweave.runtime.plan_spec import NodeSpec

MAX_BYTES = 64 << 20     # no bigger merged bucket (its flat copy is one more buffer per rank)
_COLLECTIVES = ("_Boxing", "_Once", "_OnceInto", "_AllReduceStart", "_AllReduceWait", "_GatherRows",
                "_VariableRows", "_ZeroApply")


def _plain_bucket(start, wait):
    a = wait.attrs
    return not a.get("extra") and not any(r is not None for r in (a.get("rows") or ()))


def _bytes(wait):
    import numpy as np
    from tensorweave.core import dtypes as _dt
    return sum(int(np.prod(s or [0], dtype=np.int64)) * np.dtype(_dt.as_dtype(d).np_dtype).itemsize
               for s, d in wait.attrs["outputs"])


def _groups(spec):
    """Lists of ``(start index, wait index)`` to merge: runs of plain buckets with the same
    group attrs, consecutive in the sequence of collective nodes."""
    nodes = spec.nodes
    wait_of = {}
    for i, n in enumerate(nodes):
        if n.op == "_AllReduceWait":
            wait_of[n.ins[0]] = i
    seq = [i for i, n in enumerate(nodes) if n.op in _COLLECTIVES]
    groups, cur = [], []
    k = 0
    while k < len(seq):
        i = seq[k]
        n = nodes[i]
        w = wait_of.get(n.outs) if n.op == "_AllReduceStart" else None
        pair_ok = (w is not None and k + 1 < len(seq) and seq[k + 1] == w and _plain_bucket(n, nodes[w]))
        if pair_ok:
            same = cur and all(nodes[cur[0][0]].attrs.get(a) == n.attrs.get(a) for a in ("ranks", "comm", "op"))
            if cur and not same:
                groups.append(cur)
                cur = []
            cur.append((i, w))
            k += 2
            continue
        if cur:
            groups.append(cur)
            cur = []
        k += 1
    if cur:
        groups.append(cur)
    return [g for g in groups if len(g) > 1]


def _preds(spec):
    producer = {}
    for i, n in enumerate(spec.nodes):
        for s in n.out_slots():
            producer[s] = i
    return [sorted({producer[s] for s in n.ins if s in producer} | set(spec.deps[i] or ()))
            for i, n in enumerate(spec.nodes)]


def _ancestors(preds, i):
    seen, todo = set(), [i]
    while todo:
        for p in preds[todo.pop()]:
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


def _legal(preds, group):
    """The runs of ``group`` that can be one bucket: a start that depends on an earlier wait of
    its run (through data or ordering) begins a new run; no run over :data:`MAX_BYTES`."""
    runs, cur, waits = [], [], set()
    for s, w in group:
        if cur and (_ancestors(preds, s) & waits):
            runs.append(cur)
            cur, waits = [], set()
        cur.append((s, w))
        waits.add(w)
    runs.append(cur)
    return [r for r in runs if len(r) > 1]


def merge_buckets(spec):
    """``spec`` with each run of mergeable all-reduce buckets as one (see the module docstring);
    returns the number of buckets removed. Changes ``spec`` in place and re-schedules it."""
    limit = MAX_BYTES
    preds = _preds(spec)
    runs = []
    for group in _groups(spec):
        for run in _legal(preds, group):
            part, size = [], 0
            for s, w in run:
                b = _bytes(spec.nodes[w])
                if part and size + b > limit:
                    if len(part) > 1:
                        runs.append(part)
                    part, size = [], 0
                part.append((s, w))
                size += b
            if len(part) > 1:
                runs.append(part)
    if not runs:
        return 0
    nodes = list(spec.nodes)
    key = {i: float(i) for i in range(len(nodes))}
    new_of = {}                        # old index -> the merged node's index (old start / wait)
    for run in runs:
        s0, w0 = run[-1]               # the merged pair sits where the last start was
        starts, waits = [nodes[s] for s, _ in run], [nodes[w] for _, w in run]
        ins = tuple(x for st in starts for x in st.ins)
        outs = tuple(o for wt in waits for o in wt.out_slots())
        attrs = dict(waits[0].attrs, n=len(outs),
                     outputs=[o for wt in waits for o in wt.attrs["outputs"]],
                     rows=[r for wt in waits for r in (wt.attrs.get("rows") or [None] * wt.attrs["n"])])
        nodes[s0] = NodeSpec(starts[-1].name, starts[-1].op, starts[-1].device, dict(starts[-1].attrs), ins,
                             starts[-1].outs, starts[-1].single, traceback=starts[-1].traceback)
        nodes[w0] = NodeSpec(waits[-1].name, waits[-1].op, waits[-1].device, attrs, (starts[-1].outs,), outs,
                             False, traceback=waits[-1].traceback)
        key[w0] = key[s0] + 0.5
        for s, w in run[:-1]:
            new_of[s], new_of[w] = s0, w0
    keep = [i for i in range(len(nodes)) if i not in new_of]
    pred = {i: set() for i in keep}
    for j in range(len(nodes)):       # a merged node waits for what each of its parts waited for
        i = new_of.get(j, j)
        pred[i].update(new_of.get(p, p) for p in preds[j])
    for run in runs:                  # the merged wait reads the merged start
        pred[run[-1][1]].add(run[-1][0])
    for i in keep:
        pred[i].discard(i)
    order = _stable_topo(keep, pred, key)
    index = {old: k for k, old in enumerate(order)}
    spec.nodes = [nodes[i] for i in order]
    spec.deps = [tuple(sorted(index[p] for p in pred[i])) for i in order]
    executor.schedule(spec, parallel=spec.parallel)
    return sum(len(r) - 1 for r in runs)


def _stable_topo(keep, pred, key):
    """The nodes in ``keep`` in a topological order of ``pred``, each as early as its old
    position (``key``) allows."""
    succ, left = {i: [] for i in keep}, {i: len(pred[i]) for i in keep}
    for i in keep:
        for p in pred[i]:
            succ[p].append(i)
    ready = [(key[i], i) for i in keep if left[i] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(i)
        for j in succ[i]:
            left[j] -= 1
            if left[j] == 0:
                heapq.heappush(ready, (key[j], j))
    if len(out) != len(keep):
        raise RuntimeError("merge_buckets: the merged plan has a cycle (a bug: the merge was checked for it)")
    return out
