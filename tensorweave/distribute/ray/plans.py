"""Planned ``tw.function`` s on Ray workers: each rank's plan spec shipped once, then one call
per worker per step.

The planner's per-rank :class:`~tensorweave.runtime.plan_spec.PlanSpec` (``GraphPlan.rank_spec``)
leaves the driver as data: ``saving.plan_io.plan_to_json`` (JSON text plus a dict of arrays for
large constants; variables by name, dtype and shape only). The worker checks and binds it with
``plan_io.plan_from_json`` on its own runtime, handing it the live objects of the plan's
resource table by index: its communicator (``worker.comm``), its shards of the global
variables (already in its store: :mod:`~tensorweave.distribute.ray.pieces`), and its own copies
of the driver's *local* variables the plan uses (an optimizer's ``iterations``).

A step is one call per worker: the keys (or, for local arguments, the values) of its feeds;
it runs its bound plan and keeps its pieces of the global outputs in its store (the driver
gets shapes back; local outputs come from the first rank). Local variables are the driver's
state: the first rank runs their updates (``_Once``), sends their values back with the step's
answer and the driver writes them into its variables; a value the driver changed between steps
travels with the next step. A step with only global outputs of static shape and no local variable
goes *ahead* from the plan's second call on (``Cluster.post_each``): its pieces are made from the
plan's shapes and the call returns before the workers answer (read at the next call).
"""
import json
import time
import weakref

import numpy as np

from tensorweave.core import errors
from tensorweave.distribute.ray.spec_buckets import merge_buckets
from tensorweave.distribute.ray.pieces import (RemotePiece, _call, _meta, _ref, _w_apply, heap_of, resolve,
                                                worker_runtime)


class _Bound:
    """What ``plan_io.plan_to_json`` reads of a bound plan: the spec and its live resources."""

    __slots__ = ("spec", "resources")

    def __init__(self, spec, resources):
        self.spec, self.resources = spec, resources


class RayRankPlans:
    """A :class:`~tensorweave.distribute.planner.GraphPlan` run on the Ray workers of its
    placement (what ``plan_function.RankPlans`` delegates to when the placement is on Ray)."""

    latest = None          # a weak reference to the last one made (benchmarks/bench_ray_dp.py)

    def __init__(self, plan, cluster):
        RayRankPlans.latest = weakref.ref(self)
        self.plan, self.cluster, self.placement = plan, cluster, plan.placement
        self.heap = heap_of(cluster)
        self.key = None
        self.local_vars = []
        self._synced = []
        self._answered = False

    def __del__(self):
        if self.key is not None:
            for r in self.placement.ranks:
                self.heap.release(r, self.key)

    def _ship(self):
        """Sends each rank its spec (once) and binds it there."""
        ranks = self.placement.ranks
        key = self.heap.key()
        per_rank, local_index = [], {}
        for i, r in enumerate(ranks):
            per_rank.append([key, *rank_doc(self.plan, i, self.cluster, self.local_vars, local_index)])
        values = [np.array(v._read()) for v in self.local_vars]
        for args in per_rank:
            args.append(values)
        _call(self.cluster, _w_bind_plan, per_rank, ranks)
        self._synced = values
        self.key = key

    def run(self, feeds):
        """``feeds[i]``: rank ``i``'s feed values (pieces or local values); returns per fetch its
        layout (None: local) and the ranks' pieces (:class:`RemotePiece` s; a local fetch: its
        value first)."""
        if self.key is None:
            self._ship()
        gp, ranks, heap = self.plan, self.placement.ranks, self.heap
        global_out = [id(t) not in gp.local for t in gp.fetches]
        pushes = []
        for j, v in enumerate(self.local_vars):
            cur = np.asarray(v._read())
            if not np.array_equal(cur, self._synced[j]):
                pushes.append((j, np.array(cur)))
        per_rank, keys = [], []
        for i, r in enumerate(ranks):
            out_keys = [heap.key() if g else None for g in global_out]
            keys.append(out_keys)
            per_rank.append((self.key, [_ref(f, r, self.cluster, f"planned {gp.label}") for f in feeds[i]], out_keys,
                             pushes, i == 0))
        metas = self._static_metas() if not pushes and self._answered else None
        if metas is not None and _post(self.cluster, _w_run_plan, per_rank, ranks, metas):
            return [(gp.layouts[id(t)], [RemotePiece(heap, r, keys[i][j], *metas[i][j]) for i, r in enumerate(ranks)])
                    for j, t in enumerate(gp.fetches)]
        answers = _call(self.cluster, _w_run_plan, per_rank, ranks, steady=True)
        self._answered = True             # the plan ran once with its answers read: later steps may go ahead
        back = answers[0][1]
        for j, v in enumerate(back):
            self.local_vars[j]._write(v)
            self._synced[j] = v
        out = []
        for j, t in enumerate(gp.fetches):
            if global_out[j]:
                pieces = [RemotePiece(heap, r, keys[i][j], *answers[i][0][j]) for i, r in enumerate(ranks)]
                out.append((gp.layouts[id(t)], pieces))
            else:
                out.append((None, [answers[0][0][j]] + [None] * (len(ranks) - 1)))
        return out


    def _static_metas(self):
        """Per rank, per fetch ``(shape, dtype str)`` of its piece, known before the step runs — or
        None (the step waits for its answers): post-ahead off, a local fetch or a driver-local
        variable (their values come back with the answer), a shape not fully static. Kept after
        the first look."""
        if not self.cluster.post_ahead:
            return None
        if not hasattr(self, "_metas"):
            self._metas = None
            gp = self.plan
            if not self.local_vars and all(id(t) not in gp.local for t in gp.fetches):
                from tensorweave.distribute.layout import local_shape
                try:
                    shapes = [tuple(int(d) for d in gp.layouts[id(t)]._shape) for t in gp.fetches]
                    dts = [np.dtype(t.dtype.np_dtype).str for t in gp.fetches]
                    self._metas = [[(local_shape(s, self.placement, gp.layouts[id(t)]._sbp, i), dt)
                                    for s, dt, t in zip(shapes, dts, gp.fetches)]
                                   for i in range(len(self.placement.ranks))]
                except (TypeError, ValueError, AttributeError):
                    self._metas = None            # an unknown dimension, a dtype with no NumPy twin
        return self._metas

    def loop_on_workers(self, feeds, steps):
        """Runs the bound plan ``steps`` times on each worker at once with no driver in between (a
        benchmark's decomposition of a step); per rank ``(wall s, thread CPU s, exchanges, seconds
        waiting for peers)``. The plan's variable updates happen."""
        if self.key is None:
            self._ship()
        ranks = self.placement.ranks
        per_rank = [(self.key, [_ref(f, r, self.cluster, "loop") for f in feeds[i]], steps)
                    for i, r in enumerate(ranks)]
        return _call(self.cluster, _w_loop_plan, per_rank, ranks)


def _post(cluster, fn, per_rank, ranks, metas):
    """Posts a planned step ahead (``Cluster.post_each``) with the heap's freed keys, as ``_call``
    sends them; when its answers are read, each rank's pieces must be as ``metas`` said."""
    heap = heap_of(cluster)

    def check(answers):
        got = [[None if m is None else (tuple(m[0]), np.dtype(m[1]).str) for m in a[0]] for a in answers]
        if got != [[(tuple(s), d) for s, d in m] for m in metas]:
            raise errors.InternalError(f"a planned step posted ahead made pieces {got}, not the {metas} its plan "
                                       "says (set TW_RAY_POST_AHEAD=0 and report this)")
    return cluster.post_each(_w_apply, lambda: [(heap.take_freed(r), fn, args) for r, args in zip(ranks, per_rank)],
                             ranks, check)


def rank_doc(plan, index, cluster, local_vars, local_index):
    """``(spec JSON text, its arrays, resource references)`` of rank ``plan.placement.ranks[index]``
    of a :class:`~tensorweave.distribute.planner.GraphPlan`, what :func:`bind_plan` binds on that
    worker; the driver's local variables the plan uses are appended to ``local_vars`` (indexed
    by ``local_index``: ``id`` -> position) and referenced by position."""
    r = plan.placement.ranks[index]
    spec, live = plan.rank_spec(index)
    if cluster.merge_buckets:
        merge_buckets(spec)           # one gradient all-reduce per step (spec_buckets.py)
    doc, tensors = _plan_io().plan_to_json(_Bound(spec, live), variable_values=False)
    res = []
    for desc, obj in zip(spec.resources or [], live):
        if desc["kind"] == "communicator":
            res.append(("comm", None))
        elif isinstance(obj, RemotePiece):
            res.append(("key", _ref(obj, r, cluster, f"plan {spec.label}")[0]))
        elif desc["kind"] == "variable":
            j = local_index.get(id(obj))
            if j is None:
                j = local_index[id(obj)] = len(local_vars)
                local_vars.append(obj)
            res.append(("local", j))
        elif desc["kind"] == "random_stream":     # the worker continues it from the position in the doc
            res.append(("stream", len(res)))
        else:
            raise errors.UnimplementedError(
                f"plan {spec.label}: a {desc['kind']} resource ({desc['name']!r}) cannot run on Ray workers yet")
    return json.dumps(doc), tensors, res


def _w_loop_plan(worker, key, refs, steps):
    from tensorweave.runtime import executor
    plan, _ = worker.store[key]
    feeds = [resolve(worker, r) for r in refs]
    groups = list(getattr(worker, "_shm_groups", ()))
    x0, w0 = sum(g._seq for g in groups), sum(g.waited for g in groups)
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(steps):
        executor.run_plan(plan, feeds)
    return (time.perf_counter() - t0, time.thread_time() - c0, sum(g._seq for g in groups) - x0,
            sum(g.waited for g in groups) - w0)


def _plan_io():
    from tensorweave.saving import plan_io
    return plan_io


def _w_bind_plan(worker, key, doc_text, tensors, res, local_values):
    worker.store[key] = bind_plan(worker, doc_text, tensors, res, local_values)


def bind_plan(worker, doc_text, tensors, res, local_values):
    """``(bound plan, its local variables)`` on this worker of what :func:`rank_doc` wrote."""
    from tensorweave.core.context import init_scope
    from tensorweave.ops.variables import Variable
    rt = worker_runtime(worker)
    with init_scope():
        local_vars = [Variable(np.array(v), trainable=False, name=f"driver_local_{j}")
                      for j, v in enumerate(local_values)]
    doc = json.loads(doc_text)

    def live_of(kind, ref):
        if kind == "stream":
            from tensorweave.ops.random_ops import stream_from_state
            return stream_from_state(doc["resources"][ref]["state"], f"plan for rank {worker.rank}")
        return rt.resource("communicator", "world") if kind == "comm" else \
            worker.store[ref] if kind == "key" else local_vars[ref]
    live = [live_of(kind, ref) for kind, ref in res]
    plan = _plan_io().plan_from_json(doc, tensors, rt, where=f"plan for rank {worker.rank}", live=live)
    return plan, local_vars


def _w_run_plan(worker, key, refs, out_keys, pushes, first):
    from tensorweave.runtime import executor
    plan, local_vars = worker.store[key]
    for j, v in pushes:
        local_vars[j]._write(v)
    t0 = time.perf_counter()
    outs = executor.run_plan(plan, [resolve(worker, r) for r in refs])
    worker.plan_seconds = getattr(worker, "plan_seconds", 0.0) + time.perf_counter() - t0
    store, metas = worker.store, []
    for o, k in zip(outs, out_keys):
        if k is None:
            metas.append(np.asarray(o) if first else None)
        else:
            store[k] = o = np.asarray(o)
            metas.append(_meta(o))
    return metas, [np.array(v._read()) for v in local_vars] if first else ()
