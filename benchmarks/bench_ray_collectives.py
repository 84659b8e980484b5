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

``--gloo`` runs the issue's comparison instead: each collective (all_reduce, reduce_scatter,
all_gather, all_to_all) of ``--gloo-sizes`` MB float32 (the full buffer: each rank's all-reduce
input, reduce-scatter input, all-to-all input, all-gather output) on ``--gloo-ranks`` local Ray
workers over shared memory vs ``torch.distributed`` with gloo between as many processes started
by this run on loopback, both kept running and alternated ``--rounds`` times per case (a change of
the load hits both); ms per call (median of the rounds of the max over ranks of the median of
``--repeat`` calls, each call between two barriers),
algorithm bandwidth (size / time) and ``vs_gloo`` = gloo's time / ours (> 1: we are faster).

``--nodes 2`` runs the comparison across Ray nodes: ``--nodes`` local Ray nodes started by this
run (``ray start`` processes, ``distribute/ray/local_nodes.py``: each its own raylet and object
store) hold the ranks, for each of ``--nodes-ranks``: as many ranks as nodes (one per node, the
object store) or more (``PACK``: several per node, the hierarchy ``hier`` and the object store);
an all-reduce of ``--gloo-sizes`` MB against gloo processes on loopback, alternated ``--rounds``
times. Besides ms per call each row gives the CPU time per call of every process involved (the
nodes' process trees: raylets, object stores, rank actors; the gloo processes), which a loaded
machine does not inflate as it does wall time.

Usage: ``python benchmarks/bench_ray_collectives.py [--ranks 2] [--sizes 0.0625 4 64] [--repeat 7] [--fit]``
or ``python benchmarks/bench_ray_collectives.py --gloo [--gloo-ranks 2 4] [--gloo-sizes 1 10 100] [--repeat 5]
[--rounds 3]`` or ``python benchmarks/bench_ray_collectives.py --nodes 2 [--nodes-ranks 2 4] [--gloo-sizes 1 100]``.
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


GLOO_KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")


def _tw_calls(comm, kind, n_floats):
    """The call of ``kind`` on a buffer of ``n_floats`` (see the module docstring for what the size is)."""
    n, i = comm.size, comm.index
    x = np.full(n_floats, float(i + 1), np.float32)
    if kind == "all_reduce":
        return lambda: comm.all_reduce(x)
    if kind == "reduce_scatter":
        return lambda: comm.reduce_scatter(x)
    if kind == "all_gather":
        piece = x[: n_floats // n].copy()
        return lambda: comm.all_gather(piece)
    chunks = np.array_split(x, n)
    return lambda: comm.all_to_all(chunks, axis=0)


def _torch_calls(dist, torch, kind, n_floats, n):
    x = torch.full((n_floats,), 1.0)
    if kind == "all_reduce":
        return lambda: dist.all_reduce(x)
    if kind == "reduce_scatter":
        out = torch.empty(n_floats // n)
        return lambda: dist.reduce_scatter_tensor(out, x)
    if kind == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        piece, out = x[: n_floats // n].clone(), torch.empty(n_floats)
        return lambda: gather(out, piece)
    out = torch.empty(n_floats)
    return lambda: dist.all_to_all_single(out, x)


def _median_ms(call, barrier, repeat):
    call()                                  # first call: buffers, connections
    times = []
    for _ in range(repeat):
        barrier()
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _n_floats(mb, ranks):
    n = max(int(round(mb * (1 << 20) / 4)), ranks)
    return n - n % ranks                     # every rank's piece the same size (gloo needs it)


def _tw_case(worker, case, repeat, transport="shm"):
    comm = worker.comm(transport=transport)
    kind, mb = case
    return _median_ms(_tw_calls(comm, kind, _n_floats(mb, comm.size)), comm.barrier, repeat)


def _gloo_rank(rank, ranks, port, inbox, results):
    """A gloo rank: runs each case it is sent (``(kind, MB, repeat)``; None ends) and answers its time."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks)
    try:
        for kind, mb, repeat in iter(inbox.get, None):
            results.put((rank, _median_ms(_torch_calls(dist, torch, kind, _n_floats(mb, ranks), ranks),
                                          dist.barrier, repeat)))
    finally:
        dist.destroy_process_group()


class _Gloo:
    """``ranks`` gloo processes started here (loopback TCP), kept for the whole comparison."""

    def __init__(self, ranks):
        import multiprocessing as mp
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ctx = mp.get_context("spawn")
        self.results, self.inboxes = ctx.Queue(), [ctx.Queue() for _ in range(ranks)]
        self.procs = [ctx.Process(target=_gloo_rank, args=(r, ranks, port, self.inboxes[r], self.results))
                      for r in range(ranks)]
        for p in self.procs:
            p.start()

    @property
    def pids(self):
        return [p.pid for p in self.procs]

    def time(self, case, repeat):
        for q in self.inboxes:
            q.put((*case, repeat))
        return max(self.results.get(timeout=1800)[1] for _ in self.inboxes)

    def close(self):
        for q in self.inboxes:
            q.put(None)
        for p in self.procs:
            p.join()


def _vs_gloo(args):
    """Each case alternates ``--rounds`` times between gloo and our workers (both kept running, so a
    change of the machine's load hits both); the medians of the rounds are compared."""
    from tensorweave.distribute.ray import cluster as rc
    cases = [(kind, mb) for mb in args.gloo_sizes for kind in GLOO_KINDS]
    for ranks in args.gloo_ranks:
        gloo = _Gloo(ranks)
        c = rc.connect(num_workers=ranks, transport="shm")
        try:
            for kind, mb in cases:
                g, t = [], []
                for _ in range(args.rounds):
                    g.append(gloo.time((kind, mb), args.repeat))
                    t.append(max(c.run(_tw_case, (kind, mb), args.repeat)))
                g, t = statistics.median(g), statistics.median(t)
                size = _n_floats(mb, ranks) * 4
                print(json.dumps({"row": kind, "ranks": ranks, "MB": round(size / (1 << 20), 2),
                                  "shm_ms": round(t, 2), "gloo_ms": round(g, 2),
                                  "shm_GB_s": round(size / t / 1e6, 2), "gloo_GB_s": round(size / g / 1e6, 2),
                                  "vs_gloo": round(g / t, 2), "load": round(os.getloadavg()[0], 2)}), flush=True)
        finally:
            rc.shutdown()
            gloo.close()


def _tree_cpu(pids):
    """CPU seconds so far of the processes ``pids`` and all their descendants."""
    import psutil
    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root] + root.children(recursive=True)
        except psutil.Error:
            continue
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
    return total


def _cpu_ms(pids, calls, run):
    """``(run(), CPU ms per call of the processes pids)``."""
    before = _tree_cpu(pids)
    out = run()
    return out, (_tree_cpu(pids) - before) * 1e3 / calls


def _across_nodes(args):
    """``--nodes``: all-reduces on ranks spread over local Ray nodes vs gloo (see the docstring)."""
    import ray

    from tensorweave.distribute.ray import cluster as rc
    from tensorweave.distribute.ray.local_nodes import LocalNodes
    per_node = max(-(-r // args.nodes) for r in args.nodes_ranks)
    with LocalNodes(count=args.nodes, cpus=per_node, object_store_mb=args.object_store_mb) as nodes:
        node_pids = [p.pid for p in nodes.procs]
        for ranks in args.nodes_ranks:
            gloo = _Gloo(ranks)
            c = rc.connect(address=nodes.address, num_workers=ranks,
                           strategy="STRICT_SPREAD" if ranks == args.nodes else "PACK")
            try:
                where = [n for _, _, n in ray.get([w.ping.remote() for w in c.workers])]
                transports = list(rc.candidates(where))
                print(json.dumps({"row": "placement", "ranks": ranks, "nodes": len(set(where)),
                                  "per_node": sorted(where.count(n) for n in set(where)),
                                  "chosen_transport": c.transport}), flush=True)
                for t in transports:      # the groups (rendezvous actors: processes) made before any timing
                    c.run(lambda w, t=t: w.comm(transport=t).barrier())
                for mb in args.gloo_sizes:
                    case, calls = ("all_reduce", mb), args.repeat + 1
                    got = {t: [] for t in transports + ["gloo"]}
                    for _ in range(args.rounds):
                        got["gloo"].append(_cpu_ms(gloo.pids, calls, lambda: gloo.time(case, args.repeat)))
                        for t in transports:
                            got[t].append(_cpu_ms(node_pids, calls, lambda t=t: max(c.run(
                                _tw_case, case, args.repeat, t))))
                    row = {"row": "all_reduce_across_nodes", "ranks": ranks, "nodes": args.nodes,
                           "MB": round(_n_floats(mb, ranks) * 4 / (1 << 20), 2)}
                    for t, v in got.items():
                        row[f"{t}_ms"] = round(statistics.median(a for a, _ in v), 2)
                        row[f"{t}_cpu_ms"] = round(statistics.median(b for _, b in v), 2)
                    for t in transports:
                        row[f"{t}_vs_gloo"] = round(row["gloo_ms"] / row[f"{t}_ms"], 2)
                    row["load"] = round(os.getloadavg()[0], 2)
                    print(json.dumps(row), flush=True)
            finally:
                rc.shutdown()
                gloo.close()


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
    ap.add_argument("--gloo", action="store_true", help="compare with torch.distributed gloo (see the docstring)")
    ap.add_argument("--gloo-ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--gloo-sizes", type=float, nargs="+", default=[1.0, 10.0, 100.0])
    ap.add_argument("--rounds", type=int, default=3, help="--gloo: alternations of gloo and ours per case")
    ap.add_argument("--nodes", type=int, default=0, help="ranks on this many local Ray nodes (see the docstring)")
    ap.add_argument("--nodes-ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--object-store-mb", type=int, default=1024, help="--nodes: each node's object store")
    args = ap.parse_args()
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        os.environ.pop(var, None)
    print(json.dumps({"row": "machine", "cpu": _cpu_model(), "cores": os.cpu_count(),
                      "load": os.getloadavg()[0], "python": sys.version.split()[0]}), flush=True)
    if args.nodes:
        # the nodes run with token authentication (local_nodes.node_env); a driver attaching by
        # address uses it only when told (set before Ray is imported)
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    import ray
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    if args.nodes:
        return _across_nodes(args)
    if args.gloo:
        return _vs_gloo(args)
    from tensorweave.distribute.ranks import World
    from tensorweave.distribute.ray import cluster as rc
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
                      for t in ("shm", "object_store")}
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
