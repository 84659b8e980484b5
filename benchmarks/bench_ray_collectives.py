"""Collectives between Ray rank actors (shared-memory and object-store transports) vs
in-process rank threads vs NumPy on the same bytes, in one run. One JSON object per line.

For each size (``--sizes`` in MB, float32) and collective (all_reduce, all_gather of each
rank's piece, a small 8-byte all_reduce for latency), ``--ranks`` ranks run the collective
``--repeat`` times; the row gives the median ms per call measured on the ranks themselves
(between two barriers) for Ray over shared memory, over the object store, and for in-process ranks, and a one-thread ``np.add`` of the
same bytes for scale. The machine's CPU model and load, and the transport ``connect``'s probe chose, are printed first.

Usage: ``python benchmarks/bench_ray_collectives.py [--ranks 2] [--sizes 0.0625 4 64] [--repeat 7]``.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np


def _cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _timed(comm, kind, n_floats, repeat):
    x = np.full(n_floats, float(comm.index + 1), np.float32)
    call = {"all_reduce": lambda: comm.all_reduce(x),
            "all_gather": lambda: comm.all_gather(x[: n_floats // comm.size])}[kind]
    call()
    times = []
    for _ in range(repeat):
        comm.barrier()
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sizes", type=float, nargs="+", default=[0.0625, 4.0, 64.0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        os.environ.pop(var, None)
    print(json.dumps({"row": "machine", "cpu": _cpu_model(), "cores": os.cpu_count(),
                      "load": os.getloadavg()[0], "python": sys.version.split()[0]}), flush=True)
    import ray
    from tensorweave.distribute.ranks import World
    from tensorweave.distribute.ray import cluster as rc
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    c = rc.connect(num_workers=args.ranks)
    print(json.dumps({"row": "probe", "chosen_transport": c.transport}), flush=True)
    world = World()
    ranks = list(range(args.ranks))
    try:
        cases = [("all_reduce", 8 / (1 << 20))] + [(k, mb) for mb in args.sizes for k in ("all_reduce", "all_gather")]
        for kind, mb in cases:
            n = max(int(round(mb * (1 << 20) / 4)), args.ranks)
            on_ray = {t: max(c.run(lambda w, t=t, k=kind, n=n: _timed(w.comm(transport=t), k, n, args.repeat)))
                      for t in rc.TRANSPORTS}
            group = world.group(ranks)
            in_proc = max(world.run(ranks, lambda i, k=kind, n=n: _timed(group.communicator(i), k, n, args.repeat)))
            a, b = np.ones(n, np.float32), np.ones(n, np.float32)
            t = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                np.add(a, b, out=a)
                t.append(time.perf_counter() - t0)
            print(json.dumps({"row": kind, "MB": round(n * 4 / (1 << 20), 4), "ranks": args.ranks,
                              "shm_ms": round(on_ray["shm"] * 1e3, 3),
                              "object_store_ms": round(on_ray["object_store"] * 1e3, 3),
                              "in_process_ms": round(in_proc * 1e3, 3),
                              "numpy_add_ms": round(statistics.median(t) * 1e3, 3),
                              "shm_vs_object_store": round(on_ray["shm"] / on_ray["object_store"], 2),
                              "shm_vs_in_process": round(on_ray["shm"] / in_proc, 2)}), flush=True)
    finally:
        rc.shutdown()
        world.shutdown()


if __name__ == "__main__":
    main()
