"""Collectives between Ray rank actors (shared-memory and object-store transports) vs
in-process rank threads vs NumPy on the same bytes, in one run. One JSON object per line.

For each size (``--sizes`` in MB, float32) and collective (all_reduce, all_gather of each
rank's piece, a small 8-byte all_reduce for latency), ``--ranks`` ranks run the collective
``--repeat`` times; the row gives the median ms per call measured on the ranks themselves
(between two barriers) for Ray over shared memory, over the object store, and for in-process
ranks, and a one-thread ``np.add`` of the same bytes for scale. The machine's CPU model and
load, and the transport ``connect``'s probe chose, are printed first.

``--fit`` adds a row for ``MultiWorkerMirroredStrategy``: examples/s of Keras ``fit`` of an MLP
(784-256-256-10, batch ``--batch`` per worker) on the Ray workers vs single-process ``fit`` with
one worker's batch on one thread (the issue's data-parallel scaling ratio; each worker has one
Ray CPU). A first ``fit`` on each side builds and traces (the workers keep the model), so the
timed ``fit`` pays per call only for sending the weights and data.

Usage: ``python benchmarks/bench_ray_collectives.py [--ranks 2] [--sizes 0.0625 4 64] [--repeat 7] [--fit]``.
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


def _mlp():
    import tensorweave as tw
    keras = tw.keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _fit_rate(model, x, y, batch):
    model.fit(x[:batch * 2], y[:batch * 2], batch_size=batch, epochs=1, shuffle=False, verbose=0)   # compile
    t0 = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    return len(x) / (time.perf_counter() - t0)


def _fit_row(ranks, batch, steps):
    import tensorweave as tw
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch * ranks * steps, 784)).astype(np.float32)
    y = rng.integers(0, 10, len(x))
    # one thread here, as each worker has (Ray sets OMP_NUM_THREADS=1 for a one-CPU actor)
    tw.config.threading.set_intra_op_parallelism_threads(1)
    single = _fit_rate(_mlp(), x[: batch * steps], y[: batch * steps], batch)
    with tw.distribute.MultiWorkerMirroredStrategy().scope():
        model = _mlp()
    multi = _fit_rate(model, x, y, batch * ranks)
    print(json.dumps({"row": "fit_mlp", "ranks": ranks, "batch_per_worker": batch, "steps": steps,
                      "single_process_examples_per_s": round(single), "ray_workers_examples_per_s": round(multi),
                      "speedup": round(multi / single, 2)}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sizes", type=float, nargs="+", default=[0.0625, 4.0, 64.0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--fit", action="store_true", help="also time MultiWorkerMirroredStrategy's fit of an MLP")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
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
        if args.fit:
            _fit_row(args.ranks, args.batch, args.steps)
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
