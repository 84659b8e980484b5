"""Core engine benchmark: prints one JSON object per line.

Rows:

* ``machine``: CPU model, cores, NumPy's BLAS (threadpoolctl), library versions;
* ``eager_add``: eager dispatch of a 10-element float32 add, µs per op (median of repeats);
  peers (PyTorch, JAX, TensorFlow) measured the same way when importable, else noted absent;
* ``graph_chain``: ``Session.run`` of a chain of 100 small ops (10-element adds), µs per node,
  after a first (plan-building) run that is not counted;
* ``matmul``: 2048x2048 float32 matmul, GFLOP/s of ``tw.matmul`` (eager) and of ``np.matmul`` on the
  same machine (fastest of alternating runs), and their ratio; unless ``--no-peers``, then against
  the peers (``--peers``, timed after: see ``matmul_peers``) with the ratio to the fastest of them
  (``ratio_vs_best_peer``, wall; ``cpu_ratio_vs_best_peer``, GFLOP per CPU-second);
* ``matmul_peers`` (``--only matmul``): the same product by tensorweave, NumPy, PyTorch and JAX in
  one process, the four alternating call by call (a burst of load hits all of them): wall GFLOP/s
  (fastest call) and GFLOP per CPU-second of the process (median call; on a busy machine wall
  time measures the other processes), each against the best peer, and the route tensorweave's
  product takes (``gemm_route.decision``).

Usage: ``python benchmarks/bench_core.py [--quick] [--only matmul] [--peers torch,jax]``. Timings are
never asserted in tests; the targets are in BENCHMARKS.md.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

TARGETS = {"eager_add_us": 5.0, "graph_us_per_node": 3.0, "matmul_ratio_vs_numpy": 0.95,
           "matmul_ratio_vs_best_peer": 0.95}


def emit(row):
    print(json.dumps(row), flush=True)


def per_call_us(fn, number, repeat):
    """Median over ``repeat`` runs of the mean time of one call, in µs (``number`` calls a run)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        for _ in range(number):
            fn()
        times.append((time.perf_counter_ns() - t0) / number / 1e3)
    return statistics.median(times), min(times)


def machine_info():
    info = {"row": "machine", "python": platform.python_version(), "numpy": np.__version__,
            "platform": platform.platform()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        info["cpu"] = fields.get("Model name", "").strip()
        info["cpus"] = int(fields.get("CPU(s)", "0").strip() or 0)
        info["threads_per_core"] = fields.get("Thread(s) per core", "").strip()
    except (OSError, subprocess.SubprocessError, ValueError):
        info["cpu"] = platform.processor()
        info["cpus"] = os.cpu_count()
    try:
        import threadpoolctl
        info["blas"] = [{k: p.get(k) for k in ("internal_api", "version", "num_threads", "architecture")}
                        for p in threadpoolctl.threadpool_info() if p.get("user_api") == "blas"]
    except ImportError:
        info["blas"] = "threadpoolctl not installed"
    from tensorweave.kernels.cpu import aot
    info["aot_stale"] = aot.stale_sources()
    if info["aot_stale"]:
        print(f"WARNING: the ahead-of-time kernels are stale for {', '.join(info['aot_stale'])}: tensorweave's "
              f"processes compile them during their first steps (`make aot` rebuilds)", file=sys.stderr, flush=True)
    return info


# ---- eager add --------------------------------------------------------------------------------
def bench_eager_add(number, repeat):
    import tensorweave as tw
    x = tw.constant(np.arange(10, dtype=np.float32))
    y = tw.constant(np.ones(10, dtype=np.float32))
    median, best = per_call_us(lambda: tw.add(x, y), number, repeat)
    op_median, _ = per_call_us(lambda: x + y, number, repeat)
    numpy_median, _ = per_call_us(lambda: np.add(x._value, y._value), number, repeat)
    return {"row": "eager_add", "framework": "tensorweave", "us_per_op": round(median, 3),
            "best_us_per_op": round(best, 3), "operator_us_per_op": round(op_median, 3),
            "numpy_add_us": round(numpy_median, 3), "target_us": TARGETS["eager_add_us"],
            "meets_target": median <= TARGETS["eager_add_us"]}


def _peer_add(name):
    """(callable doing one eager 10-element float32 add, version) or raises ImportError."""
    if name == "torch":
        import torch
        torch.set_num_threads(1)
        a = torch.arange(10, dtype=torch.float32)
        b = torch.ones(10, dtype=torch.float32)
        return (lambda: torch.add(a, b)), torch.__version__
    if name == "jax":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        import jax
        import jax.numpy as jnp
        a = jnp.arange(10, dtype=jnp.float32)
        b = jnp.ones(10, dtype=jnp.float32)
        return (lambda: jnp.add(a, b).block_until_ready()), jax.__version__
    if name == "tensorflow":
        import tensorflow as tf
        a = tf.range(10, dtype=tf.float32)
        b = tf.ones(10, dtype=tf.float32)
        return (lambda: tf.add(a, b)), tf.__version__
    raise ValueError(name)


def bench_peers(tw_us, number, repeat):
    rows = []
    for name in ("torch", "jax", "tensorflow"):
        try:
            fn, version = _peer_add(name)
        except ImportError as e:
            rows.append({"row": "eager_add", "framework": name, "absent": True, "why": str(e)[:120]})
            continue
        except Exception as e:  # noqa: BLE001 - a broken peer install must not stop the benchmark
            rows.append({"row": "eager_add", "framework": name, "absent": True,
                         "why": f"{type(e).__name__}: {str(e)[:120]}"})
            continue
        median, best = per_call_us(fn, number, repeat)
        rows.append({"row": "eager_add", "framework": name, "version": version, "us_per_op": round(median, 3),
                     "best_us_per_op": round(best, 3),
                     "tensorweave_over_peer": round(tw_us / median, 3)})
    return rows


# ---- graph chain ------------------------------------------------------------------------------
def bench_graph_chain(n_nodes, number, repeat):
    import tensorweave.compat.v1 as tf
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [10], name="x")
        one = tf.constant(np.ones(10, np.float32), name="one")
        y = x
        for _ in range(n_nodes):
            y = tf.add(y, one)
    feed = {x: np.zeros(10, np.float32)}
    with tf.Session(graph=g) as sess:
        t0 = time.perf_counter_ns()
        first = sess.run(y, feed)                      # builds and caches the plan
        first_us = (time.perf_counter_ns() - t0) / 1e3
        assert float(first[0]) == n_nodes
        median, best = per_call_us(lambda: sess.run(y, feed), number, repeat)
    per_node = median / n_nodes
    return {"row": "graph_chain", "nodes": n_nodes, "us_per_run": round(median, 2),
            "us_per_node": round(per_node, 3), "best_us_per_node": round(best / n_nodes, 3),
            "first_run_us": round(first_us, 1), "target_us_per_node": TARGETS["graph_us_per_node"],
            "meets_target": per_node <= TARGETS["graph_us_per_node"]}


# ---- matmul --------------------------------------------------------------------------------------
def bench_matmul(n, rounds):
    import tensorweave as tw
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    ta, tb = tw.constant(a), tw.constant(b)
    flop = 2.0 * n ** 3

    def run_once(fn):
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    # Alternate the two calls so that frequency changes or a noisy neighbour hit both alike, and
    # take the fastest run of each: a compute-bound call is only ever slowed down by noise.
    np_t, tw_t = [], []
    np.matmul(a, b), tw.matmul(ta, tb)
    for _ in range(rounds):
        np_t.append(run_once(lambda: np.matmul(a, b)))
        tw_t.append(run_once(lambda: tw.matmul(ta, tb)))
    tw_gf, np_gf = flop / min(tw_t) / 1e9, flop / min(np_t) / 1e9
    np.testing.assert_allclose(tw.matmul(ta, tb).numpy(), a @ b, rtol=1e-3, atol=1e-2)
    ratio = tw_gf / np_gf
    return {"row": "matmul", "n": n, "dtype": "float32", "tensorweave_gflops": round(tw_gf, 2),
            "numpy_gflops": round(np_gf, 2), "ratio_vs_numpy": round(ratio, 3),
            "median_ratio": round(statistics.median(np_t) / statistics.median(tw_t), 3),
            "target_ratio": TARGETS["matmul_ratio_vs_numpy"],
            "meets_target": ratio >= TARGETS["matmul_ratio_vs_numpy"]}


def _peer_matmul(name, a, b):
    """``(run, version)``: one ``a @ b`` by PyTorch or JAX, finished when it returns; ImportError
    where the peer is absent."""
    if name == "torch":
        import torch
        torch.set_num_threads(os.cpu_count() or 1)     # its default; says so in the row
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        return (lambda: torch.matmul(ta, tb)), torch.__version__
    if name == "jax":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        import jax
        import jax.numpy as jnp
        ja, jb = jnp.asarray(a), jnp.asarray(b)
        product = jax.jit(jnp.matmul)
        return (lambda: product(ja, jb).block_until_ready()), jax.__version__
    raise ValueError(name)


def bench_matmul_peers(n, rounds, peers):
    """Rows ``matmul_peers``: see the module docstring. tensorweave's product is timed first alone
    (before any peer is imported: ``torch.set_num_threads`` also sets the MKL tensorweave loaded),
    then alternating with the peers."""
    import tensorweave as tw
    from tensorweave.kernels.cpu import gemm_route
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    ta, tb = tw.constant(a), tw.constant(b)
    flop = 2.0 * n ** 3
    runs = {"tensorweave": (lambda: tw.matmul(ta, tb), tw.__version__ if hasattr(tw, "__version__") else ""),
            "numpy": (lambda: np.matmul(a, b), np.__version__)}
    runs["tensorweave"][0]()
    alone = _timed({"tensorweave": runs["tensorweave"][0]}, rounds)["tensorweave"]
    rows = []
    for name in peers:
        try:
            runs[name] = _peer_matmul(name, a, b)
        except ImportError as e:
            rows.append({"row": "matmul_peers", "framework": name, "absent": True, "why": str(e)[:120]})
    got = _timed({name: run for name, (run, _) in runs.items()}, rounds)
    got["tensorweave (alone, first)"] = alone
    gf = {name: (flop / min(w) / 1e9, flop / statistics.median(c) / 1e9) for name, (w, c) in got.items()}
    best = [max(gf[p][i] for p in gf if p in peers) if any(p in gf for p in peers) else None for i in (0, 1)]
    route = gemm_route.decision(a, b)
    for name, (wall, cpu) in gf.items():
        rows.append({"row": "matmul_peers", "framework": name, "n": n, "dtype": "float32",
                     "version": runs.get(name, (None, ""))[1], "wall_gflops": round(wall, 1),
                     "cpu_gflops_per_cpu_s": round(cpu, 1),
                     "over_best_peer_wall": round(wall / best[0], 3) if best[0] else None,
                     "over_best_peer_cpu": round(cpu / best[1], 3) if best[1] else None,
                     **({"route": route} if name.startswith("tensorweave") else {})})
    rows.append({"row": "matmul_peers", "load_average": round(os.getloadavg()[0], 2)})
    return rows


def peer_summary(rows):
    """The ``matmul`` row's fields from :func:`bench_matmul_peers`'s rows: each peer's wall GFLOP/s,
    the fastest peer, and tensorweave's ratio to it in the same alternating run (wall and CPU).

    >>> peer_summary([{"row": "matmul_peers", "framework": "tensorweave", "wall_gflops": 140.0,
    ...                "over_best_peer_wall": 1.1, "over_best_peer_cpu": 1.2},
    ...               {"row": "matmul_peers", "framework": "numpy", "wall_gflops": 139.0},
    ...               {"row": "matmul_peers", "framework": "torch", "wall_gflops": 127.3, "over_best_peer_wall": 1.0},
    ...               {"row": "matmul_peers", "framework": "jax", "absent": True}])["best_peer"]
    'torch'
    """
    timed = {r["framework"]: r for r in rows if "wall_gflops" in r}
    peers = {name: r["wall_gflops"] for name, r in timed.items()
             if name not in ("numpy", "tensorweave") and not name.startswith("tensorweave ")}
    ours = timed.get("tensorweave", {})
    ratio = ours.get("over_best_peer_wall")
    return {"peers_gflops": peers, "best_peer": max(peers, key=peers.get) if peers else None,
            "ratio_vs_best_peer": ratio, "cpu_ratio_vs_best_peer": ours.get("over_best_peer_cpu"),
            "meets_peer_target": None if ratio is None else ratio >= TARGETS["matmul_ratio_vs_best_peer"],
            "absent_peers": [r["framework"] for r in rows if r.get("absent")]}


def _timed(runs, rounds):
    """``{name: ([wall s], [process CPU s])}`` of each call, the runs alternating call by call (for a
    2048² product, ~80 ms a call, the previous framework's idle workers spinning 1-2 ms on the other
    core weigh ~2 %; for short products time blocks, as ``bench_gemm_backends.py`` does)."""
    for run in runs.values():
        run()
    got = {name: ([], []) for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            w0, c0 = time.perf_counter(), time.process_time()
            run()
            got[name][1].append(time.process_time() - c0)
            got[name][0].append(time.perf_counter() - w0)
    return got


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run, not a measurement)")
    p.add_argument("--no-peers", action="store_true", help="skip PyTorch/JAX/TensorFlow")
    p.add_argument("--only", choices=("matmul",), help="only the matmul against NumPy and the peers")
    p.add_argument("--peers", default="torch,jax", help="peers of the matmul rows (comma-separated)")
    args = p.parse_args(argv)
    scale = 10 if args.quick else 1
    n, rounds = (2048, 15) if not args.quick else (512, 3)
    peers = [p for p in args.peers.split(",") if p]
    emit(machine_info())
    if args.only == "matmul":
        for row in bench_matmul_peers(n, rounds, peers):
            emit(row)
        return 0
    add = bench_eager_add(number=20000 // scale, repeat=7)
    emit(add)
    emit(bench_graph_chain(100, number=2000 // scale, repeat=7))
    # Before the peers are imported: torch.set_num_threads(1) also limits the MKL that
    # tensorweave loaded in this process to one thread (see kernels/cpu/gemm.py); the peers'
    # matmuls come after, PyTorch at its default thread count, alternating with tensorweave's.
    row = bench_matmul(n, rounds)
    if not args.no_peers:
        row.update(peer_summary(bench_matmul_peers(n, rounds, peers)))
    emit(row)
    if not args.no_peers:
        for row in bench_peers(add["us_per_op"], number=20000 // scale, repeat=7):
            emit(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
