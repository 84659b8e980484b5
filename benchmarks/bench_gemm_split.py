"""Same-process A/B of the threaded products' split (issue 18, mlp18): a training step of a
``bench_models`` workload with ``gemm.split_parts`` on (each product above the one-thread size
timed per shape class: one-thread blocks of rows or columns on the intra-op threads, or the
library's own threads) and off (``TW_GEMM_SPLIT=0``: the library's threads), alternating in
rounds of ``--steps`` steps (the order swapped every round); process CPU and wall per step, the
load average, and each class's choice with its timings. Both sides see the same load, which on a
shared machine compares better than two processes.

    PYTHONPATH=$PWD python benchmarks/bench_gemm_split.py --workload mlp --rounds 12
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="mlp")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--steps", type=int, default=10, help="steps per side and round")
    args = p.parse_args(argv)
    from tensorweave.kernels.cpu import gemm
    data = bench_models.synthetic_batch(args.workload)
    step, _, _ = bench_models.make_tensorweave(args.workload, data, None)
    for flag in (True, False, True, False):      # warm both paths (and their shape classes' timings)
        gemm._split["on"] = flag
        step()
    cpu, wall = {True: [], False: []}, {True: [], False: []}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        for flag in (True, False) if r % 2 == 0 else (False, True):
            gemm._split["on"] = flag
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(args.steps):
                step()
            cpu[flag].append((time.process_time() - c0) / args.steps)
            wall[flag].append((time.perf_counter() - w0) / args.steps)
    load.append(os.getloadavg()[0])
    print(f"cpu {gemm_cpu()}, load {load[0]:.1f} -> {load[1]:.1f}, {args.rounds} rounds x {args.steps} steps")
    for flag, tag in ((True, "split (measured)"), (False, "library threads")):
        print(f"{args.workload} {tag}: CPU ms/step median {np.median(cpu[flag]) * 1e3:.2f} "
              f"(fastest {min(cpu[flag]) * 1e3:.2f}), wall median {np.median(wall[flag]) * 1e3:.2f} "
              f"(fastest {min(wall[flag]) * 1e3:.2f})")
    for cls, entry in sorted(gemm.tuner().choices.items()):
        if cls.startswith("threads:") or not entry.get("settled", True):    # this process's timings
            print(f"  {cls}: {entry}")


def gemm_cpu():
    from tensorweave.kernels.cpu import gemm_tuning
    return gemm_tuning.cpu_model()


if __name__ == "__main__":
    main()
