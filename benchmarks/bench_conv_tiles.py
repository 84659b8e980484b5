"""Same-process A/B of the convolutions' tile GEMMs (issue 18, conv18): a training step of a
``bench_models`` workload with ``conv_tiles.ENABLED`` on (a tile per core, each tile's GEMM on
one thread, library per shape class by measurement) and off (the earlier tiling), alternating
step by step (the order swapped every round), process CPU and wall per step. On a shared
machine this compares better than two processes: both sides see the same load.

    PYTHONPATH=$PWD python benchmarks/bench_conv_tiles.py --workload resnet --rounds 16
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
    p.add_argument("--workload", default="resnet")
    p.add_argument("--rounds", type=int, default=16)
    args = p.parse_args(argv)
    from tensorweave.kernels.cpu import conv_tiles
    data = bench_models.synthetic_batch(args.workload)
    step, _, _ = bench_models.make_tensorweave(args.workload, data, None)
    for flag in (True, False, True, False):      # warm both paths (and their shape classes' timings)
        conv_tiles.ENABLED = flag
        step()
    cpu, wall = {True: [], False: []}, {True: [], False: []}
    for r in range(args.rounds):
        for flag in (True, False) if r % 2 == 0 else (False, True):
            conv_tiles.ENABLED = flag
            c0, w0 = time.process_time(), time.perf_counter()
            step()
            cpu[flag].append(time.process_time() - c0)
            wall[flag].append(time.perf_counter() - w0)
    for flag, tag in ((True, "one-thread tiles"), (False, "old tiling")):
        print(f"{args.workload} {tag}: CPU ms/step median {np.median(cpu[flag]) * 1e3:.1f} "
              f"(min {np.min(cpu[flag]) * 1e3:.1f}), wall median {np.median(wall[flag]) * 1e3:.1f} "
              f"(min {np.min(wall[flag]) * 1e3:.1f})")
    print("load average", os.getloadavg())


if __name__ == "__main__":
    main()
