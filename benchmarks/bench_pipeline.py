"""Pipeline throughput on in-process ranks: the benchmark MLP (784-512-512-10, SGD, batch
``--batch``) as a 2-stage 1F1B pipeline (layer 1 on rank 0, layers 2-3 on rank 1, ``--micro-batches``
micro-batches), one BLAS thread per call, against the same MLP on one device; prints one JSON
object per line.

Rows: ``one_device``; ``pipelined_sequential`` (``concurrent=False``: one controller runs the
actions one after the other, so only the pipeline's overhead shows); ``pipelined_concurrent``
(one controller thread per stage, ranks locked per rank: stage 0's forward of micro-batch
``k + 1`` overlaps stage 1's work on ``k``). The ideal ratio of a balanced 2-stage pipeline is
``2 (1 - bubble)`` (1.6x at 4 micro-batches) before micro-batching's smaller GEMMs and the
per-op hand-offs of eager global tensors. The models and steps are ``bench_distribute.py``'s.

``--hidden H`` widens the two hidden layers (784-H-H-10) so each stage's GEMMs outweigh the
per-op hand-offs.

Usage: ``python benchmarks/bench_pipeline.py [--batch 256] [--micro-batches 4] [--steps 10] [--rounds 3]
[--hidden 512]``.
"""
import argparse
import json
import os
import sys
import warnings

from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_distribute  # noqa: E402
from bench_distribute import make, make_pipeline, steps_per_s  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=512)
    args = ap.parse_args()
    bench_distribute.SIZES = (784, args.hidden, args.hidden, 10)     # make/make_pipeline read it
    warnings.simplefilter("ignore")
    with threadpool_limits(1):
        local = make(None, args.batch)
        pipe, piped = make_pipeline(args.batch, args.micro_batches)
        best = {"one_device": 0.0, "pipelined_sequential": 0.0, "pipelined_concurrent": 0.0}
        for _ in range(args.rounds):          # alternate, best of rounds
            best["one_device"] = max(best["one_device"], steps_per_s(local, args.steps))
            pipe.concurrent = False
            best["pipelined_sequential"] = max(best["pipelined_sequential"], steps_per_s(piped, args.steps))
            pipe.concurrent = True
            best["pipelined_concurrent"] = max(best["pipelined_concurrent"], steps_per_s(piped, args.steps))
    one = best["one_device"]
    for row, value in best.items():
        print(json.dumps({"row": row, "batch": args.batch, "hidden": args.hidden, "stages": 2,
                          "micro_batches": args.micro_batches, "schedule": "1f1b", "bubble_fraction": round(pipe.bubble_fraction, 3),
                          "steps_s": round(value, 2), "vs_one_device": round(value / one, 2),
                          "load": round(os.getloadavg()[0], 1)}), flush=True)


if __name__ == "__main__":
    main()
