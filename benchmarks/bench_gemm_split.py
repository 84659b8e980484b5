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
    p.add_argument("--other", choices=("nosplit", "one"), default="nosplit",
                   help="the B side: the library's threads (TW_GEMM_SPLIT=0), or every product on one thread")
    args = p.parse_args(argv)
    import numpy as np_
    from tensorweave.kernels.cpu import gemm
    data = bench_models.synthetic_batch(args.workload)
    step, _, _ = bench_models.make_tensorweave(args.workload, data, None)
    f32 = np_.dtype(np_.float32)
    limit = gemm.serial_work(f32)

    def set_side(flag):
        if args.other == "one":      # everything under the one-thread size: one thread, its library
            gemm._serial_work[f32] = limit if flag else 1 << 62
        else:
            gemm._split["on"] = flag
    for flag in (True, False, True, False):      # warm both paths (and their shape classes' timings)
        set_side(flag)
        step()
    cpu, wall = {True: [], False: []}, {True: [], False: []}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        for flag in (True, False) if r % 2 == 0 else (False, True):
            set_side(flag)
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(args.steps):
                step()
            cpu[flag].append((time.process_time() - c0) / args.steps)
            wall[flag].append((time.perf_counter() - w0) / args.steps)
    load.append(os.getloadavg()[0])
    print(f"cpu {gemm_cpu()}, load {load[0]:.1f} -> {load[1]:.1f}, {args.rounds} rounds x {args.steps} steps")
    for flag, tag in ((True, "split (measured)"), (False, "library threads" if args.other == "nosplit" else "one thread")):
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
