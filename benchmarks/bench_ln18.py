"""Issue 18 session 14 (ln18): the fused layer norm and one-op softmax gradient, A/B in one process.

Two copies of a workload's tw.keras model (``bench_models.make_tensorweave``), one traced with
``LayerNormalization`` and ``Softmax``'s gradient as composites (as before this session), one with the
fused ops; their steps alternate round by round (the order flipped each round), each timed by wall
clock and by process CPU time (all threads). A loaded shared machine slows both alike; the CPU
time is the steadier figure. ``--kernels``: the kernels alone on the encoder's shapes (per call,
thread CPU time of one thread: the compiled loops on one row block vs NumPy's composite passes).

Usage: ``PYTHONPATH=. python benchmarks/bench_ln18.py [--only encoder2,encoder2_predict] [--rounds 9]
[--steps 2] [--kernels]``. One JSON row per workload and variant on stdout. Figures go to
BENCHMARKS.md, never to tests.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _steps(workload):
    """``{"composite": step, "fused": step}``, each traced under its setting (read at trace time)."""
    from bench_models import make_tensorweave, synthetic_batch
    from tensorweave.keras.layers import normalization
    from tensorweave.kernels.cpu import jit
    from tensorweave.ops import softmax_grad_ops
    data = synthetic_batch(workload)
    steps = {}
    for name, on in (("composite", False), ("fused", True)):
        normalization.FUSED_LAYER_NORM = softmax_grad_ops.FUSED = on
        step, _, _ = make_tensorweave(workload, data, os.cpu_count() or 1, compile_first=not steps)
        step()                                  # traced here, with this setting
        steps[name] = step
    normalization.FUSED_LAYER_NORM = softmax_grad_ops.FUSED = True
    for step in steps.values():
        step()
    jit.wait_for_compiles()
    for step in steps.values():
        step()
    return steps


def compare(workload, rounds, per_round):
    steps = _steps(workload)
    times = {k: {"wall": [], "cpu": []} for k in steps}
    order = list(steps)
    for r in range(rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            w, c = time.perf_counter(), time.process_time()
            for _ in range(per_round):
                steps[name]()
            times[name]["cpu"].append((time.process_time() - c) / per_round * 1e3)
            times[name]["wall"].append((time.perf_counter() - w) / per_round * 1e3)
    rows = []
    for name, t in times.items():
        rows.append({"workload": workload, "variant": name, "rounds": rounds, "steps_per_round": per_round,
                     "ms_per_step": round(statistics.median(t["wall"]), 2), "best_ms": round(min(t["wall"]), 2),
                     "cpu_ms_per_step": round(statistics.median(t["cpu"]), 2), "best_cpu_ms": round(min(t["cpu"]), 2)})
    return rows


def kernels(reps=15):
    """Per call (one thread's CPU time, median): the fused kernels vs the composites' NumPy passes."""
    from tensorweave.kernels.cpu import layer_norm_kernels as lnk
    from tensorweave.kernels.cpu import jit
    from tensorweave.kernels.cpu import layer_norm_loops as loops
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2048, 256)).astype(np.float32)
    g, b = np.ones(256, np.float32), np.zeros(256, np.float32)
    e = np.exp(rng.standard_normal((8192, 128))).astype(np.float32)
    p = e / e.sum(1, keepdims=True)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    dp = rng.standard_normal(p.shape).astype(np.float32)
    y, mean, inv = lnk._layer_norm(x, g, b, 1e-5, -1, False)
    zeros = np.zeros(2048, np.float32)
    jit.compile_now(loops.forward, x, g, b, np.float64(1e-5), False, y.copy(), mean.copy(), inv.copy())
    jit.compile_now(loops.backward, dy, x, g, mean, inv, zeros.astype(np.float64), zeros.astype(np.float64), False,
                    y.copy(), np.zeros(256), np.zeros(256))
    jit.compile_now(loops.softmax_grad, p, dp, np.float32(1), p.copy())

    def ln_np():
        m = x.mean(-1, keepdims=True)
        v = np.square(x - m).mean(-1, keepdims=True)
        a = 1 / np.sqrt(v + 1e-5) * g
        return x * a + (b - m * a)

    def ln_grad_np():
        m = x.mean(-1, keepdims=True)
        a = 1 / np.sqrt(np.square(x - m).mean(-1, keepdims=True) + 1e-5)
        xh = (x - m) * a
        gy = dy * g
        return (a * (gy - gy.mean(-1, keepdims=True) - xh * (gy * xh).mean(-1, keepdims=True)),
                (dy * xh).sum(0), dy.sum(0))

    cases = {"layer_norm_fused": lambda: lnk._layer_norm(x, g, b, 1e-5, -1, False),
             "layer_norm_numpy": ln_np,
             "layer_norm_grad_fused": lambda: lnk._layer_norm_grad(dy, x, g, mean, inv, zeros, zeros, 1e-5, -1, False),
             "layer_norm_grad_numpy": ln_grad_np,
             "softmax_grad_fused": lambda: lnk._softmax_grad(p, dp, -1, 1.0),
             "softmax_grad_numpy": lambda: p * (dp - (dp * p).sum(-1, keepdims=True))}
    out = {k: [] for k in cases}
    for _ in range(reps):
        for name, fn in cases.items():
            c, w = time.process_time(), time.perf_counter()
            fn()
            out[name].append(((time.process_time() - c) * 1e3, (time.perf_counter() - w) * 1e3))
    return [{"kernel": k, "cpu_ms": round(statistics.median(c for c, _ in v), 3),
             "wall_ms": round(statistics.median(w for _, w in v), 3)} for k, v in out.items()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="encoder2,encoder2_predict")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=2, help="steps per variant per round")
    ap.add_argument("--kernels", action="store_true")
    args = ap.parse_args(argv)
    print(json.dumps({"row": "machine", "loadavg": open("/proc/loadavg").read().split()[:3],
                      "cpu": next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                                   if ln.startswith("model name")), "?")}), flush=True)
    if args.kernels:
        for row in kernels():
            print(json.dumps(row), flush=True)
    for w in [w for w in args.only.split(",") if w]:
        for row in compare(w, args.rounds, args.steps):
            print(json.dumps(row), flush=True)
    print(json.dumps({"row": "load_after", "loadavg": open("/proc/loadavg").read().split()[:3]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
