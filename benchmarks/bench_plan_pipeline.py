"""Micro-batching inside one planned function on two placements (plan_pipeline.py) against the
same function run whole (its segments one after another).

An MLP 784-512-512-10, batch 256: layer 1 on rank 0, layers 2-3 and the loss on rank 1. Per
variant the median wall time of ``forward_backward`` (loss and gradients, no update) over
``--steps`` steps after 3 warm-up steps, and for the pipelines the schedule's bubble fraction and
the measured idle share of the stages (``pipe.stats``).

    python benchmarks/bench_plan_pipeline.py --steps 20
"""
import argparse
import os
import platform
import statistics
import time

import numpy as np

import tensorweave as tw
from tensorweave.core.sbp import B, S


def _model(p0, p1, rng):
    shapes = [(784, 512), (512, 512), (512, 10)]
    ws = [tw.Variable((rng.standard_normal(s) * 0.05).astype(np.float32), placement=p, sbp=B)
          for s, p in zip(shapes, (p0, p1, p1))]

    def loss(x, y):
        h = tw.nn.relu(tw.matmul(x, ws[0])).to_global(placement=p1, sbp=S(0))
        h = tw.nn.relu(tw.matmul(h, ws[1]))
        return tw.reduce_mean(tw.square(tw.matmul(h, ws[2]) - y))
    return ws, loss


def _time(fn, steps):
    for _ in range(3):
        fn()
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--micro-batches", type=int, default=4)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    p0, p1 = tw.placement("cpu", ranks=[0]), tw.placement("cpu", ranks=[1])
    ws, loss = _model(p0, p1, rng)
    x = tw.constant(rng.standard_normal((256, 784)).astype(np.float32)).to_global(placement=p0, sbp=S(0))
    y = tw.constant(rng.standard_normal((256, 10)).astype(np.float32)).to_global(placement=p1, sbp=S(0))

    @tw.function
    def whole(x, y):
        with tw.GradientTape() as tape:
            value = loss(x, y)
        return value, tape.gradient(value, ws)
    print(f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"whole function (segments in order): {_time(lambda: whole(x, y), args.steps):.2f} ms/step")
    for schedule in ("gpipe", "1f1b"):
        pipe = tw.distribute.pipeline(loss, micro_batches=args.micro_batches, schedule=schedule)
        ms = _time(lambda: pipe.forward_backward(x, y), args.steps)
        st = pipe.stats
        print(f"{schedule} x {args.micro_batches}: {ms:.2f} ms/step, bubble {st.bubble_fraction:.3f}, "
              f"measured idle {st.measured_idle_fraction:.3f}")
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
