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
    world.shutdown()


if __name__ == "__main__":
    main()
