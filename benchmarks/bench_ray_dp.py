"""Planned steps on Ray workers: the driver's per-step overhead and the data-parallel throughput
of the benchmark MLP. One JSON object per line (the machine's CPU model and load first).

* ``overhead``: a planned ``tw.function`` of one tiny op (``x * 2`` on 8 floats, ``S(0)`` over 2
  workers): each call is one message per worker and one answer, so its time is the per-step
  cost of driving the workers. The row gives the median wall µs per call on Ray — with an actor
  call per worker (``compiled_steps`` off), through the compiled Ray graph and through the step
  channel (``channel_*``; alternated 3 times, best of each) — and on the in-process ranks, and the
  driver's own CPU µs per call on Ray (``time.process_time``: what the single controller spends per step, the rest is waiting
  for the workers).
* ``dp_mlp``: the MLP of ``bench_distribute.py`` (784-512-512-10, ReLU, softmax cross-entropy,
  SGD) trained by a planned ``tw.function`` step (batch ``S(0)``, weights ``B``, the gradient
  all-reduce planned) with ``--batch`` examples per worker: on 1 worker (placement ``[2]``)
  and on 2 workers (``[0, 1]``, twice the global batch), each worker one Ray CPU and one BLAS
  thread, both through step channels (``ray/step_channel.py``: binary frames over FIFOs, the
  default since session 16; compiled Ray graphs before; one live at a time, hence a third,
  otherwise idle worker for the one-worker steps). Examples/s of each and their
  ratio (the issue's target: >= 1.8x). The 2-worker steps also without the step gate (the driver
  in Ray's spinning channel read: ``Cluster.step_gate``), alternated, with the driver's CPU per step.

  ``--optimizer sgd|adam`` picks the update; the 2-worker step runs twice, with the planner's
  buckets merged into one (``ray/spec_buckets.py``, the default) and as planned (``unmerged_*``),
  alternated; ``same_round_speedups`` are the ratios of each round (the figure that holds on a
  shared machine); ``--gate-ablation`` adds the step without the step gate.
* ``dp_decompose`` (``--decompose``): each worker runs the bound plan ``--steps`` times in a loop with
  no driver in between (``RayRankPlans.loop_on_workers``), per rank wall ms, thread CPU ms,
  exchanges and ms waiting for peers per step: ``alone`` (the 1-worker plan on worker 2, the others
  idle), ``two_no_exchange`` (1-worker plans on workers 0 and 1 at once: compute contending for the
  cores), ``planned_unmerged`` / ``planned_merged`` (the 2-worker plan). Where the 2-worker step
  loses time: ``two_no_exchange`` vs ``alone`` (contention), the planned rows vs ``two_no_exchange``
  (exchanges), the driven step vs the planned rows (the driver, Ray's channels, the gate).
  The ``idle_worker_cpu_ms_per_s`` row first: each worker's CPU while nothing runs, with the
  2-worker compiled graph live (its workers wait in Ray's spinning channel read) and with none.

Usage: ``python benchmarks/bench_ray_dp.py [--batch 256] [--steps 20] [--calls 300] [--rounds 3]
[--optimizer sgd|adam] [--decompose] [--gate-ablation] [--no-overhead] [--ab]``.

``--loops-ab``: per round, the one- and two-worker steps through the step channel with post-ahead
(``fifo_ahead``: ``ray/step_channel.py``, ``Cluster.post_each``), without it (``fifo``) and through the
compiled Ray graph (``graph``): examples/s, the driver's CPU ms per step and each worker's process CPU ms
per step (the evidence on a loaded machine), then each loop's idle workers' CPU per second.

``--exchange-ab`` (with ``--no-overhead``): only the gradient bucket over shared memory before session 17
(``concat``: a flat concatenation per dtype, reduced into a fresh buffer) and now (``direct``:
``distribute/shm_reduce.py``), alternated, the 2-worker plan looped on its workers: per rank the thread CPU
ms per step of the whole step and of its buckets, beside the 1-worker plan alone and two at once.

``--ab``: each round also runs both steps with a compiled graph per set live at once (the tree before
session 13, whose idle graphs' workers spin in Ray's channel read): ``both_graphs_live_*``.
"""
import argparse
import json
import os
import statistics
import time
import warnings

import numpy as np

import tensorweave as tw
from bench_distribute import SIZES, mlp_loss
from bench_ray_collectives import _cpu_model


def _tiny_step(placement):
    x = tw.constant(np.arange(8, dtype=np.float32)).to_global(placement=placement, sbp=tw.sbp.split(0))
    f = tw.function(lambda x: x * 2.0)
    f(x)                              # trace, plan, ship
    return lambda: f(x)


def _timed_calls(call, n):
    times, cpu0 = [], time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    _drain()
    return statistics.median(times) * 1e6, (time.process_time() - cpu0) / n * 1e6


def _dp_step(placement, batch_per_worker, optimizer="sgd"):
    """The planned training step on ``placement``, its explanation, and ``(RayRankPlans, feeds)``
    for running it on the workers with no driver in between (``--decompose``)."""
    from tensorweave.distribute.ray.plans import RayRankPlans
    n = placement.size
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch_per_worker * n, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], batch_per_worker * n).astype(np.int32)
    params = []
    for a, b in zip(SIZES, SIZES[1:]):
        w = (rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
        params += [tw.Variable(w, placement=placement, sbp=tw.sbp.broadcast),
                   tw.Variable(np.zeros(b, np.float32), placement=placement, sbp=tw.sbp.broadcast)]
    x = tw.constant(x).to_global(placement=placement, sbp=tw.sbp.split(0))
    y = tw.constant(y).to_global(placement=placement, sbp=tw.sbp.split(0))
    opt = tw.keras.optimizers.Adam(1e-3) if optimizer == "adam" else None

    @tw.function
    def step(x, y):
        with tw.GradientTape() as tape:
            loss = mlp_loss(params, x, y)
        grads = tape.gradient(loss, params)
        if opt is not None:
            opt.apply_gradients(zip(grads, params))
        else:
            for p, g in zip(params, grads):
                p.assign_sub(0.01 * g)
        return loss
    step(x, y)
    plans = RayRankPlans.latest()
    feeds = [[x._pieces[i], y._pieces[i]] for i in range(n)]
    return lambda: step(x, y), tw.distribute.explain(step, x, y), (plans, feeds)


def _loop_together(cluster, runs, steps):
    """Each ``(plans, feeds)`` of ``runs`` run ``steps`` times on its workers, all at once with no
    driver in between; per rank (in the order of ``runs``) ``(wall ms, thread CPU ms, exchanges,
    ms waiting for peers)`` per step."""
    from tensorweave.distribute.ray.pieces import _call, _ref
    from tensorweave.distribute.ray.plans import _w_loop_plan
    cluster._drop_graphs()          # a live graph's workers spin in Ray's read beside the loops timed here
    per_rank, ranks = [], []
    for plans, feeds in runs:
        for i, r in enumerate(plans.placement.ranks):
            per_rank.append((plans.key, [_ref(f, r, cluster, "loop") for f in feeds[i]], steps))
            ranks.append(r)
    got = _call(cluster, _w_loop_plan, per_rank, ranks)
    return [[round(v * 1e3 / steps, 2) for v in g[:2]] + [g[2] / steps, round(g[3] * 1e3 / steps, 2)] for g in got]


def _process_cpu(worker):
    return time.process_time()


def _idle_cpu(cluster, seconds):
    """Each worker's process CPU ms per second while the driver sleeps ``seconds`` (no step)."""
    before = cluster.run(_process_cpu)
    time.sleep(seconds)
    return [round((b - a) * 1e3 / seconds, 1) for a, b in zip(before, cluster.run(_process_cpu))]


def _plan_ms(worker):
    return getattr(worker, "plan_seconds", 0.0) * 1e3


def _drain():
    """Waits for the steps posted ahead (``Cluster.post_each``): a timed run ends with its last step."""
    from tensorweave.distribute.ray.cluster import current
    current().drain()


def _rate(step, steps, examples):
    """Examples/s, and the driver's CPU ms per step (what it takes from the workers' cores).
    Three untimed steps first: the steps of another set of ranks ran last, and this set takes
    the compiled graph over at its second step in a row (``ray/cluster.py:next_live``)."""
    for _ in range(3):
        step()
    t0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    _drain()
    return examples * steps / (time.perf_counter() - t0), (time.process_time() - cpu0) / steps * 1e3


def _rate_cpu(cluster, step, steps, examples):
    """:func:`_rate` with each worker's process CPU ms per step (its share of the cores: compute,
    exchanges, and whatever its step loop burns while it waits)."""
    for _ in range(3):
        step()
    before = cluster.run(_process_cpu)
    t0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    _drain()
    rate, driver = examples * steps / (time.perf_counter() - t0), (time.process_time() - cpu0) / steps * 1e3
    workers = [round((b - a) * 1e3 / steps, 2) for a, b in zip(before, cluster.run(_process_cpu))]
    return rate, round(driver, 2), workers


def _loops_ab(cluster, one, two, args):
    """``--loops-ab``: per round, both step loops (``Cluster.step_loop``: the step channel's FIFOs,
    the compiled Ray graph), each timing the one-worker and the two-worker step; then each loop's
    idle workers' CPU per second with the two-worker loop live."""
    rows = {"fifo_ahead": [], "fifo": [], "graph": []}
    for _ in range(args.rounds):
        for loop in rows:
            cluster.step_loop, cluster.post_ahead = loop[:4], loop == "fifo_ahead"
            cluster._drop_graphs()
            r1 = _rate_cpu(cluster, one, args.steps, args.batch)
            r2 = _rate_cpu(cluster, two, args.steps, 2 * args.batch)
            rows[loop].append({"speedup": round(r2[0] / r1[0], 2), "one_ex_s": round(r1[0]), "two_ex_s": round(r2[0]),
                               "driver_cpu_ms": [r1[1], r2[1]], "worker_cpu_ms_one": r1[2],
                               "worker_cpu_ms_two": r2[2], "live": type(cluster._graphs.get((0, 1))).__name__})
    idle = {}
    cluster.post_ahead = True
    for loop in ("fifo", "graph"):
        cluster.step_loop = loop
        cluster._drop_graphs()
        two(), two()
        _drain()
        idle[loop] = _idle_cpu(cluster, 1.0)
    cluster.step_loop = "fifo"
    cluster._drop_graphs()
    print(json.dumps({"row": "loops_ab", "rounds": rows, "idle_worker_cpu_ms_per_s_two_live": idle,
                      "load_1m": round(os.getloadavg()[0], 2)}), flush=True)


def _both_graphs_live(cluster, sets):
    """The tree before session 13 (``--ab``): a compiled graph per set of ranks, all live at once."""
    from tensorweave.distribute.ray.cluster import _StepGraph
    cluster._drop_graphs()
    for ranks in sets:
        cluster._graphs[ranks] = _StepGraph(cluster.workers, ranks, cluster._gate_path(ranks))


def _concatenated_bucket(comm, arrays, op, ride):
    """The bucket before session 17 (``--exchange-ab``): per dtype one flat concatenation, reduced by
    ``ShmGroup.all_reduce_large`` / ``all_reduce_one_round`` into a fresh buffer, then sliced."""
    from tensorweave.distribute.shm_reduce import per_dtype
    return per_dtype(arrays, ride, lambda flats, ride: comm._all_reduce(np.concatenate(flats), op, ride))


def _w_bucket_path(worker, name):
    """This worker's shared-memory buckets take path ``name`` (``concat``: :func:`_concatenated_bucket`;
    ``direct``: ``shm_reduce.reduce_bucket``, the tree's), each bucket's thread CPU added to
    ``worker.exchange_cpu``; returns the total so far."""
    from tensorweave.distribute import shm
    from tensorweave.distribute.shm_reduce import reduce_bucket

    def timed(comm, arrays, op, ride):
        t0 = time.thread_time()
        try:
            if name == "concat":
                return _concatenated_bucket(comm, arrays, op, ride)
            return reduce_bucket(comm.group, arrays, op, ride)
        finally:
            worker.exchange_cpu = getattr(worker, "exchange_cpu", 0.0) + time.thread_time() - t0
    shm.ShmCommunicator._bucket = timed
    return getattr(worker, "exchange_cpu", 0.0)


def _exchange_ab(cluster, one_plans, two_plans, args):
    """``--exchange-ab``: per round (the order reversed each round), the 2-worker plan looped on its
    workers with no driver (``_loop_together``) with the bucket as before (``concat``) and as now
    (``direct``), and for context the 1-worker plan alone and two 1-worker plans at once; per rank
    thread CPU ms per step of the whole step and of its buckets (exchange)."""
    solo = [_dp_step(tw.placement("cpu", ranks=[r]), args.batch, args.optimizer)[2] for r in (0, 1)]
    rows = {"alone": [], "two_no_exchange": [], "concat": [], "direct": []}
    for k in range(args.rounds):
        for name in ("concat", "direct") if k % 2 == 0 else ("direct", "concat"):
            before = cluster.run(_w_bucket_path, name, ranks=[0, 1])
            step = _loop_together(cluster, [two_plans], args.steps)
            after = cluster.run(_w_bucket_path, name, ranks=[0, 1])
            rows[name].append({"load_1m": round(os.getloadavg()[0], 2),
                               "step_cpu_ms": [r[1] for r in step], "wait_ms": [r[3] for r in step],
                               "exchange_cpu_ms": [round((b - a) * 1e3 / args.steps, 2)
                                                   for a, b in zip(before, after)]})
        rows["alone"].append(_loop_together(cluster, [one_plans], args.steps)[0][1])
        rows["two_no_exchange"].append([r[1] for r in _loop_together(cluster, solo, args.steps)])
    cluster.run(_w_bucket_path, "direct", ranks=[0, 1])
    print(json.dumps({"row": "exchange_ab", "steps": args.steps, "rounds": rows,
                      "load_1m": round(os.getloadavg()[0], 2)}), flush=True)


def _one_blas_thread(worker):
    from threadpoolctl import threadpool_limits
    threadpool_limits(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    ap.add_argument("--decompose", action="store_true")
    ap.add_argument("--gate-ablation", action="store_true")
    ap.add_argument("--no-overhead", action="store_true")
    ap.add_argument("--loops-ab", action="store_true", help="the step channel vs the compiled graph, alternated")
    ap.add_argument("--ab", action="store_true", help="each round also with both sets' graphs live (the old tree)")
    ap.add_argument("--exchange-ab", action="store_true",
                    help="only the bucket before and now, alternated, looped on the workers (no driver)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print(json.dumps({"cpu": _cpu_model(), "cores": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2)}),
          flush=True)
    cluster = tw.distribute.connect(num_workers=3)
    try:
        cluster.run(_one_blas_thread)
        p2 = tw.placement("cpu", ranks=[0, 1])
        if not args.no_overhead:
            tiny = _tiny_step(p2)
            calls, compiled, channel = [], [], []
            for _ in range(3):           # alternate actor calls, the compiled graph and the step channel, best of 3
                cluster.compiled_steps = False
                calls.append(_timed_calls(tiny, args.calls))
                cluster.compiled_steps = True
                for loop, got in (("graph", compiled), ("fifo", channel)):
                    cluster.step_loop = loop
                    cluster._drop_graphs()
                    tiny()
                    got.append(_timed_calls(tiny, args.calls))
            on_ray, on_graph, on_channel = min(calls), min(compiled), min(channel)
            with tw.distribute.in_process():
                in_process = _timed_calls(_tiny_step(p2), args.calls)
            print(json.dumps({"row": "overhead", "workers": 2, "transport": cluster.transport,
                              "ray_us_per_step": round(on_ray[0], 1), "ray_driver_cpu_us_per_step": round(on_ray[1], 1),
                              "compiled_us_per_step": round(on_graph[0], 1),
                              "compiled_driver_cpu_us_per_step": round(on_graph[1], 1),
                              "channel_us_per_step": round(on_channel[0], 1),
                              "channel_driver_cpu_us_per_step": round(on_channel[1], 1),
                              "channel_used": type(cluster._graphs.get((0, 1))).__name__,
                              "in_process_us_per_step": round(in_process[0], 1),
                              "load_1m": round(os.getloadavg()[0], 2)}), flush=True)
        one, _, one_plans = _dp_step(tw.placement("cpu", ranks=[2]), args.batch, args.optimizer)
        cluster.merge_buckets = False
        unmerged, explained, unmerged_plans = _dp_step(p2, args.batch, args.optimizer)
        cluster.merge_buckets = True
        two, _, two_plans = _dp_step(p2, args.batch, args.optimizer)
        if args.exchange_ab:
            _exchange_ab(cluster, one_plans, two_plans, args)
            return
        if args.loops_ab:
            _loops_ab(cluster, one, two, args)
        r1, r2, r2u, r2_spin, plan_ms, used, ab = [], [], [], [], [], [], []
        for _ in range(args.rounds):          # alternate, best of each
            r1.append(_rate(one, args.steps, args.batch))
            used.append(cluster._graphs.get((2,)) is not None)
            before = cluster.run(_plan_ms)
            r2.append(_rate_cpu(cluster, two, args.steps, 2 * args.batch))
            used.append(cluster._graphs.get((0, 1)) is not None)
            plan_ms.append([round((b - a) / args.steps, 2) for a, b in zip(before, cluster.run(_plan_ms))][:2])
            r2u.append(_rate_cpu(cluster, unmerged, args.steps, 2 * args.batch))
            if args.ab:                       # the old tree: both graphs live (their idle loops spinning)
                _both_graphs_live(cluster, [(2,), (0, 1)])
                ab.append((_rate(one, args.steps, args.batch), _rate(two, args.steps, 2 * args.batch)))
                cluster._drop_graphs()
            if args.gate_ablation:
                cluster.step_gate = False  # the driver in Ray's spinning channel read (recompiled)
                cluster._drop_graphs()
                two()
                r2_spin.append(_rate(two, args.steps, 2 * args.batch))
                cluster.step_gate = True
                cluster._drop_graphs()
                one(), two()
        collectives = [c["kind"] for c in explained.to_dict()["collectives"]]
        (e1, c1), (e2, c2, _), (e2u, c2u, _) = max(r1), max(r2), max(r2u)
        best = max(range(len(r2)), key=lambda k: r2[k][0])
        row = {"row": "dp_mlp", "optimizer": args.optimizer, "batch_per_worker": args.batch,
               "one_worker_examples_s": round(e1), "two_workers_examples_s": round(e2), "speedup": round(e2 / e1, 2),
               "unmerged_examples_s": round(e2u), "unmerged_speedup": round(e2u / e1, 2),
               "same_round_speedups": [round(b[0] / a[0], 2) for a, b in zip(r1, r2)],
               "driver_cpu_ms_per_step": [round(c1, 2), round(c2, 2), round(c2u, 2)],
               "two_workers_ms_per_step": round(2 * args.batch / e2 * 1e3, 2),
               "workers_plan_ms_per_step": plan_ms[best],
               "worker_cpu_ms_per_step_merged_unmerged": [[r[2][:2] for r in r2], [r[2][:2] for r in r2u]],
               "target": 1.8, "planner_buckets": collectives,
               "compiled_used": [all(used[::2]), all(used[1::2])],
               "load_1m": round(os.getloadavg()[0], 2)}
        if ab:
            row.update(both_graphs_live_speedup=round(max(b for _, b in ab)[0] / max(a for a, _ in ab)[0], 2),
                       both_graphs_live_same_round=[round(b[0] / a[0], 2) for a, b in ab],
                       both_graphs_live_examples_s=[round(max(a for a, _ in ab)[0]), round(max(b for _, b in ab)[0])])
        if r2_spin:
            e3, c3 = max(r2_spin)
            row.update(no_gate_examples_s=round(e3), no_gate_speedup=round(e3 / e1, 2),
                       no_gate_driver_cpu_ms_per_step=round(c3, 2))
        print(json.dumps(row), flush=True)
        if args.decompose:
            two()                             # the 2-worker graph live: what its workers burn between steps
            spin = _idle_cpu(cluster, 1.0)
            cluster._drop_graphs()
            print(json.dumps({"row": "idle_worker_cpu_ms_per_s", "graph_0_1_live": spin,
                              "no_graph": _idle_cpu(cluster, 1.0), "load_1m": round(os.getloadavg()[0], 2)}),
                  flush=True)
            solo = [_dp_step(tw.placement("cpu", ranks=[r]), args.batch, args.optimizer)[2] for r in (0, 1)]
            rows = {"alone": [], "two_no_exchange": [], "planned_unmerged": [], "planned_merged": []}
            for _ in range(args.rounds):      # alternated; per rank [wall ms, CPU ms, exchanges, wait ms] per step
                rows["alone"].append(_loop_together(cluster, [one_plans], args.steps))
                rows["two_no_exchange"].append(_loop_together(cluster, solo, args.steps))
                rows["planned_unmerged"].append(_loop_together(cluster, [unmerged_plans], args.steps))
                rows["planned_merged"].append(_loop_together(cluster, [two_plans], args.steps))
            best_of = {k: min(v, key=lambda per_rank: max(r[0] for r in per_rank)) for k, v in rows.items()}
            print(json.dumps({"row": "dp_decompose", "optimizer": args.optimizer,
                              "per_rank_wall_cpu_exchanges_wait_ms": best_of,
                              "driven_two_workers_ms_per_step": row["two_workers_ms_per_step"],
                              "driven_one_worker_ms_per_step": round(args.batch / e1 * 1e3, 2),
                              "load_1m": round(os.getloadavg()[0], 2)}), flush=True)
    finally:
        tw.distribute.shutdown()


if __name__ == "__main__":
    main()
