"""Boxing on in-process ranks vs plain NumPy on the same bytes: prints one JSON object per line.

For each boxing kind (P->B all-reduce, P->S reduce-scatter, S->B all-gather, S(0)->S(1)
all-to-all, B->S slice, and a transfer between disjoint placements) a float32 tensor of
``--mb`` MB is boxed on ``--ranks`` in-process ranks; the row gives ms per boxing, the bytes
the plan moves between ranks, GB/s of those bytes, and the same bytes through a NumPy copy
(``np.copyto``) and a NumPy sum (``np.add`` of two arrays) on one thread for scale.

Usage: ``python benchmarks/bench_boxing.py [--mb 64] [--ranks 2] [--repeat 5]``. Timings are
never asserted in tests.
"""
import argparse
import json
import time

import numpy as np

from tensorweave.core.sbp import B, P, S
from tensorweave.distribute.boxing import box, plan_boxing
from tensorweave.distribute.layout import Placement, split_to_pieces
from tensorweave.distribute.ranks import World


def best_s(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=64.0)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = args.ranks
    rows = int(args.mb * 2**20 / 4 / 256)
    x = np.random.default_rng(0).standard_normal((rows, 256)).astype(np.float32)
    world = World()
    here = Placement("cpu", list(range(n)))
    there = Placement("cpu", list(range(n, 2 * n)))
    cases = [("all_reduce", (P,), (B,), here), ("reduce_scatter", (P,), (S(0),), here),
             ("all_gather", (S(0),), (B,), here), ("all_to_all", (S(0),), (S(1),), here),
             ("slice", (B,), (S(0),), here), ("transfer", (S(0),), (S(0),), there)]
    for name, src, dst, dst_p in cases:
        plan = plan_boxing(x.shape, x.dtype, here, src, dst, dst_p)
        pieces = split_to_pieces(x, here, src)
        t = best_s(lambda: box(pieces, plan, world), args.repeat)
        moved = plan.bytes or x.nbytes
        a, b = np.empty(moved // 4, np.float32), np.ones(moved // 4, np.float32)
        t_copy = best_s(lambda: np.copyto(a, b), args.repeat)
        t_sum = best_s(lambda: np.add(a, b, out=a), args.repeat)
        print(json.dumps({"kind": name, "ranks": n, "tensor_mb": round(x.nbytes / 2**20, 1),
                          "moved_mb": round(plan.bytes / 2**20, 1), "ms": round(t * 1e3, 2),
                          "gb_s": round(moved / t / 1e9, 2), "numpy_copy_gb_s": round(moved / t_copy / 1e9, 2),
                          "numpy_add_gb_s": round(moved / t_sum / 1e9, 2),
                          "vs_copy": round(t_copy / t, 2)}), flush=True)
    small_op_overhead(args.ranks, args.repeat)
    world.shutdown()


def small_op_overhead(n, repeat):
    """µs per eager op on a 10-element float32 tensor: local vs global (S(0) on ``n`` ranks):
    the fixed cost of the global interpreter (rule, choice, one hand-off to every rank thread)."""
    import tensorweave as tw
    x = tw.constant(np.ones(10, np.float32))
    g = x.to_global(placement=tw.placement("cpu", ranks=list(range(n))), sbp=tw.sbp.split(0))
    local = best_s(lambda: [tw.add(x, x) for _ in range(200)], repeat) / 200
    glob = best_s(lambda: [tw.add(g, g) for _ in range(50)], repeat) / 50
    print(json.dumps({"row": "small_op", "ranks": n, "local_us": round(local * 1e6, 1),
                      "global_us": round(glob * 1e6, 1)}), flush=True)


if __name__ == "__main__":
    main()
