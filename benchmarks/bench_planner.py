"""The whole-graph planner: planning time of a ~1,000-op graph, and a planned data-parallel MLP
step vs one device. Prints one JSON object per line; timings are never asserted in tests.

* ``plan``: a tw.function of ``--layers`` blocks (matmul, bias add, relu, a residual, a
  layer-norm-like mean/variance, ...) over a batch ``S(0)`` with ``B`` and ``S(1)``/``S(0)``
  weights (model-parallel pairs), traced once; the row gives the op count, the planner's time
  (``plan_graph``: signatures, look-ahead, the joint search, boxing plans) and the time to emit
  every rank's spec; A/B: planning with the joint search off (greedy) and on, interleaved
  rounds, wall and process CPU ms, and the bytes each plan boxes; and the joint search without
  the session-14 shortcuts (``planner.RULE_COST_MEMO``, ``plan_search.SHARED_WORK`` off).
* ``overhead``: a chain of 75 small ops on a split tensor, eager global (a hand-off to every
  rank per op) vs planned (one hand-off per call), ms per call.
* ``mlp``: ``bench_distribute.py``'s MLP step (784-512-512-10, SGD) inside tw.function on
  ``--ranks`` in-process ranks (batch ``S(0)``, weights ``B``, one BLAS thread per rank) vs the
  same tw.function on one device with one thread: steps/s and the ratio (target >= 1.6x).

Usage: ``python benchmarks/bench_planner.py [--layers 67] [--ranks 2] [--batch 256] [--steps 30]``.
"""
import argparse
import json
import time

import numpy as np

import tensorweave as tw
from tensorweave.core.sbp import B, S


def bench_plan(layers, ranks):
    from tensorweave.distribute.planner import plan_graph
    p = tw.placement("cpu", ranks=list(range(ranks)))
    rng = np.random.default_rng(0)
    x = tw.constant(rng.standard_normal((64, 32)).astype(np.float32)).to_global(placement=p, sbp=S(0))
    ws = []
    for i in range(layers):
        split = i % 3 == 0       # every third block model-parallel
        a, b = (tw.constant(rng.standard_normal((32, 32)).astype(np.float32)) for _ in range(2))
        a = a.to_global(placement=p, sbp=S(1) if split else B)
        b = b.to_global(placement=p, sbp=S(0) if split else B)
        ws.append((a, b))

    def f(x, *flat):
        h = x
        for i in range(layers):
            a, b = flat[2 * i], flat[2 * i + 1]
            y = tw.nn.relu(tw.matmul(h, a) + 0.1)
            y = tw.matmul(y, b)
            mean = tw.reduce_mean(y, axis=1, keepdims=True)
            var = tw.reduce_mean(tw.square(y - mean), axis=1, keepdims=True)
            h = h + (y - mean) * tw.math.rsqrt(var + 1e-5)
        return tw.reduce_sum(h)
    flat = [t for pair in ws for t in pair]
    fn = tw.function(f)
    cf = fn.get_concrete_function(x, *flat)
    gp0 = cf._global.plan
    feeds = gp0.feeds
    layouts = [(p, gp0.layouts[id(t)]._sbp) if id(t) not in gp0.local else None for t in feeds]
    from tensorweave.distribute import plan_search, planner
    best_plan = best_emit = None
    # the joint search on / off, and on without the session-14 shortcuts (the look-ahead's memo,
    # shared work figures): interleaved rounds (wall, process CPU)
    ab = {True: [], False: [], "slow": []}
    for _ in range(3):
        for on in (False, True, "slow"):
            plan_search.SEARCH = bool(on)
            planner.RULE_COST_MEMO = plan_search.SHARED_WORK = on != "slow"
            t0, c0 = time.perf_counter(), time.process_time()
            gp_ab = plan_graph(gp0.fetches, [], feeds, layouts, p)
            ab[on].append((time.perf_counter() - t0, time.process_time() - c0, gp_ab))
        plan_search.SEARCH = planner.RULE_COST_MEMO = plan_search.SHARED_WORK = True
        t0 = time.perf_counter()
        gp = plan_graph(gp0.fetches, [], feeds, layouts, p)
        t1 = time.perf_counter()
        for i in range(p.size):
            gp.rank_spec(i)
        t2 = time.perf_counter()
        best_plan = min(best_plan or 1e9, t1 - t0)
        best_emit = min(best_emit or 1e9, t2 - t1)
    greedy, joint = ab[False][-1][2], ab[True][-1][2]
    print(json.dumps({"bench": "plan", "ops": len(gp.ops), "ranks": ranks, "first_plan_ms": round(gp0.seconds * 1e3, 1),
                      "plan_ms": round(best_plan * 1e3, 1),
                      "rank_specs_ms": round(best_emit * 1e3, 1),
                      "boxings": sum(1 for q in gp.op_plans.values() for b in q.plans if b is not None),
                      "greedy_plan_ms": [round(w * 1e3, 1) for w, _, _ in ab[False]],
                      "greedy_plan_cpu_ms": [round(c * 1e3, 1) for _, c, _ in ab[False]],
                      "joint_plan_ms": [round(w * 1e3, 1) for w, _, _ in ab[True]],
                      "joint_plan_cpu_ms": [round(c * 1e3, 1) for _, c, _ in ab[True]],
                      "joint_no_shortcuts_ms": [round(w * 1e3, 1) for w, _, _ in ab["slow"]],
                      "joint_no_shortcuts_cpu_ms": [round(c * 1e3, 1) for _, c, _ in ab["slow"]],
                      "greedy_bytes": plan_search.plan_cost(greedy), "joint_bytes": plan_search.plan_cost(joint),
                      "search_costs": {"greedy": joint.search.greedy, "dp": joint.search.dp,
                                       "kept": joint.search.kept, "evals": joint.search.evals},
                      "loadavg": open("/proc/loadavg").read().split()[:3]}))


def bench_overhead(ranks, n_ops=50, repeat=20):
    """A chain of ``n_ops`` small elementwise ops on a split (16, 16) tensor: eager global (a
    hand-off to every rank per op) vs the same function planned (one hand-off per call)."""
    p = tw.placement("cpu", ranks=list(range(ranks)))
    x = tw.constant(np.ones((16, 16), np.float32)).to_global(placement=p, sbp=S(0))

    def f(x):
        for i in range(n_ops // 2):
            x = tw.tanh(x * 0.5 + 0.1)
        return x
    planned = tw.function(f)
    planned(x)
    times = {}
    for name, fn in (("eager", f), ("planned", planned)):
        best = None
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(repeat):
                fn(x)
            dt = (time.perf_counter() - t0) / repeat
            best = dt if best is None else min(best, dt)
        times[name] = best
    print(json.dumps({"bench": "overhead", "ops": 3 * (n_ops // 2), "ranks": ranks,
                      "eager_ms": round(times["eager"] * 1e3, 2), "planned_ms": round(times["planned"] * 1e3, 2),
                      "speedup": round(times["eager"] / times["planned"], 1)}))


def bench_mlp(ranks, batch, steps):
    """bench_distribute.py's MLP step (eager there) inside tw.function: one device vs planned."""
    import os
    import sys
    import warnings
    from threadpoolctl import threadpool_limits
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_distribute import make, steps_per_s
    warnings.simplefilter("ignore")
    with threadpool_limits(1):
        local = tw.function(make(None, batch))
        glob = tw.function(make(tw.placement("cpu", ranks=list(range(ranks))), batch))
        one, dp = [], []
        for _ in range(3):        # alternate, best of 3
            one.append(steps_per_s(local, steps))
            dp.append(steps_per_s(glob, steps))
    print(json.dumps({"bench": "planned_data_parallel_mlp", "batch": batch, "ranks": ranks,
                      "one_device_steps_s": round(max(one), 2), "planned_steps_s": round(max(dp), 2),
                      "speedup": round(max(dp) / max(one), 2), "target": 1.6}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=67)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--only", choices=["plan", "overhead", "mlp"])
    a = ap.parse_args()
    if a.only in (None, "plan"):
        bench_plan(a.layers, a.ranks)
    if a.only in (None, "overhead"):
        bench_overhead(a.ranks)
    if a.only in (None, "mlp"):
        bench_mlp(a.ranks, a.batch, a.steps)


if __name__ == "__main__":
    main()
