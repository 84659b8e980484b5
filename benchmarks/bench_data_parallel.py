"""Data-parallel scaling on in-process ranks: the benchmark MLP (784-512-512-10, batch 256,
SGD) trained on 2 ranks (batch ``S(0)``, weights ``B``, gradients all-reduced by boxing) with
one BLAS thread per rank, against one rank with one BLAS thread. Prints one JSON object per
line: the CPU, then samples/s of each and their ratio (the issue's target: >= 1.6x), medians
of ``--steps`` timed steps after warm-up, the two runs alternating ``--rounds`` times.

Usage: ``python benchmarks/bench_data_parallel.py [--steps 10] [--rounds 3]``.
"""
import argparse
import json
import os
import statistics
import time

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_var, None)

import numpy as np  # noqa: E402

import tensorweave as tw  # noqa: E402


def _cpu():
    try:
        return next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        return "?"


def _step_fn(params, opt):
    def step(x, y):
        with tw.GradientTape() as tape:
            h = tw.nn.relu(tw.matmul(x, params[0]) + params[1])
            h = tw.nn.relu(tw.matmul(h, params[2]) + params[3])
            logits = tw.matmul(h, params[4]) + params[5]
            loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss
    return step


def _params(placement=None):
    rng = np.random.default_rng(0)
    shapes = [(784, 512), (512,), (512, 512), (512,), (512, 10), (10,)]
    vals = [(rng.standard_normal(s) * 0.05).astype(np.float32) for s in shapes]
    if placement is None:
        return [tw.Variable(v) for v in vals]
    return [tw.Variable(v, placement=placement, sbp=tw.sbp.broadcast) for v in vals]


def _time(step, x, y, steps):
    for _ in range(2):
        step(x, y)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        float(step(x, y))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    tw.config.threading.set_intra_op_parallelism_threads(1)
    print(json.dumps({"row": "machine", "cpu": _cpu(), "cores": os.cpu_count(), "load": os.getloadavg()[0]}),
          flush=True)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((args.batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, args.batch).astype(np.int64)
    p2 = tw.placement("cpu", ranks=[0, 1])
    one = _step_fn(_params(), tw.keras.optimizers.SGD(0.01))
    two = _step_fn(_params(p2), tw.keras.optimizers.SGD(0.01))
    xg = tw.constant(x).to_global(placement=p2, sbp=tw.sbp.split(0))
    yg = tw.constant(y).to_global(placement=p2, sbp=tw.sbp.split(0))
    t1, t2 = [], []
    for _ in range(args.rounds):
        t1.append(_time(one, tw.constant(x), tw.constant(y), args.steps))
        t2.append(_time(two, xg, yg, args.steps))
    s1, s2 = args.batch / statistics.median(t1), args.batch / statistics.median(t2)
    print(json.dumps({"row": "mlp_data_parallel", "batch": args.batch, "one_rank_samples_s": round(s1),
                      "two_ranks_samples_s": round(s2), "speedup": round(s2 / s1, 2),
                      "one_rank_ms": round(statistics.median(t1) * 1e3, 2),
                      "two_ranks_ms": round(statistics.median(t2) * 1e3, 2)}), flush=True)


if __name__ == "__main__":
    main()
