"""Same-run A/B benchmark of two tensorweave checkouts (issue 12's "no regression" check).

Runs ``bench_core.py`` (eager add, 100-node graph chain, 2048² matmul) and the training step of
``bench_models.py``'s workloads for checkout A and checkout B in the same run, alternating
A/B/A/B so that a busy spell of a shared machine falls on both alike:

* core: ``--core-runs`` processes per checkout, in the order A B B A A B ... (each a whole
  ``bench_core.py --no-peers``);
* models: for each of ``--pairs`` pairs of fresh processes (one per checkout, both warmed up,
  kernels compiled) and each workload, ``--rounds`` timed repeats each, alternating, the order
  rotated every round (``bench_models.measure_interleaved``'s protocol and repeat length).

The harness (this directory's ``bench_core.py`` and ``bench_models.py``) is the same for both; only
the package differs (``PYTHONPATH=<checkout>``), so a change to the harness cannot show as a change
of the package. Prints JSON rows, then a Markdown table of medians, B/A ratios, the CPU model and
the load averages seen.

Usage: ``python benchmarks/bench_ab.py --a /path/old --b /path/new [--only mlp,cnn] [--pairs 2]
[--rounds 5] [--core-runs 4] [--threads 1]``. Timings are never asserted in tests; figures live in BENCHMARKS.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_models  # noqa: E402  (the harness beside this file)

CORE_FIELDS = (("eager_add", "us_per_op", "eager add µs/op"), ("graph_chain", "us_per_node", "graph chain µs/node"),
               ("matmul", "tensorweave_gflops", "matmul 2048² GFLOP/s"))


def _env(checkout):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([checkout, HERE])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(k, None)
    return env


def package_of(checkout):
    """The ``tensorweave`` a process started for ``checkout`` imports (checked, not assumed)."""
    out = subprocess.run([sys.executable, "-c", "import tensorweave; print(tensorweave.__file__)"],
                         env=_env(checkout), cwd=checkout, capture_output=True, text=True, check=True)
    path = out.stdout.strip()
    if not path.startswith(os.path.abspath(checkout) + os.sep):
        raise SystemExit(f"{checkout}: tensorweave resolves to {path}, not into the checkout")
    return path


def core_run(label, checkout):
    out = subprocess.run([sys.executable, os.path.join(HERE, "bench_core.py"), "--no-peers"], env=_env(checkout),
                         cwd=checkout, capture_output=True, text=True, timeout=1800)
    rows = {r["row"]: r for r in (json.loads(line) for line in out.stdout.splitlines() if line.startswith("{"))}
    if out.returncode or not all(name in rows for name, _, _ in CORE_FIELDS):
        raise SystemExit(f"bench_core failed for {label}:\n{out.stderr[-2000:]}")
    return {"row": "core", "side": label, **{f: rows[name][f] for name, f, _ in CORE_FIELDS},
            "loadavg": round(os.getloadavg()[0], 2)}


class _CheckoutWorker(bench_models._Worker):
    """``bench_models``' worker protocol, with the package of one checkout."""

    def __init__(self, label, checkout, workload, timeout, threads=None):
        import tempfile
        self.framework, self.workload, self.row, self.label = label, workload, None, label
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--only", workload]
        if threads:
            cmd += ["--threads", str(threads)]
        self.errors = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
                                     text=True, env=_env(checkout), cwd=checkout)
        first = self.answer(timeout)
        if first is not None and "ready" not in first:
            self._fail(error=f"not ready: {first}")


def model_pair(sides, workload, rounds, timeout, threads=None):
    """One pair of fresh processes: per side the per-repeat ms and the final row."""
    workers = [_CheckoutWorker(label, path, workload, timeout, threads) for label, path in sides]
    times = {w.label: [] for w in workers}
    for r in range(rounds):
        for w in (workers if r % 2 == 0 else workers[::-1]):
            time.sleep(bench_models.SETTLE_S)
            ans = w.send("run", timeout) if w.alive else None
            if ans is None:
                raise SystemExit(f"{w.label} {workload}: {w.row}")
            times[w.label].append(ans["ms"])
    rows = []
    for w in workers:
        final = w.send("done", timeout)
        w.proc.wait()
        rows.append({"row": "model", "side": w.label, "workload": workload, "ms": times[w.label],
                     "cpu_ms_per_step": final.get("cpu_ms_per_step"), "loss_last": final.get("loss_last"),
                     "steps_per_repeat": final.get("steps_per_repeat"), "loadavg": round(os.getloadavg()[0], 2)})
    return rows


def worker(workload, threads):
    from tensorweave.kernels.cpu import jit
    if not hasattr(jit, "wait_for_compiles"):
        # a checkout from before the background compiler: its kernels compiled on first call
        jit.wait_for_compiles = lambda: None
    return bench_models.worker_main("tensorweave", workload, False, threads)


def table(rows, labels, cpu):
    a, b = labels
    lines = [f"CPU: {cpu}; load averages (1 min) seen: {min(r['loadavg'] for r in rows)}-"
             f"{max(r['loadavg'] for r in rows)}", "",
             f"| benchmark | {a} | {b} | {b}/{a} | runs |", "|---|---|---|---|---|"]
    for name, field, title in CORE_FIELDS:
        vals = {s: [r[field] for r in rows if r["row"] == "core" and r["side"] == s] for s in labels}
        if all(vals.values()):
            ma, mb = statistics.median(vals[a]), statistics.median(vals[b])
            lines.append(f"| {title} | {ma:.3g} | {mb:.3g} | {mb / ma:.3f} | {len(vals[a])} + {len(vals[b])} |")
    for w in dict.fromkeys(r["workload"] for r in rows if r["row"] == "model"):
        ms = {s: [t for r in rows if r["row"] == "model" and r["workload"] == w and r["side"] == s for t in r["ms"]]
              for s in labels}
        cp = {s: [r["cpu_ms_per_step"] for r in rows if r["row"] == "model" and r["workload"] == w
                  and r["side"] == s] for s in labels}
        ma, mb = statistics.median(ms[a]), statistics.median(ms[b])
        ca, cb = statistics.median(cp[a]), statistics.median(cp[b])
        lines.append(f"| {w} ms/step (CPU ms/step) | {ma:.2f} ({ca:.2f}) | {mb:.2f} ({cb:.2f}) | "
                     f"{mb / ma:.3f} ({cb / ca:.3f}) | {len(ms[a])} + {len(ms[b])} repeats |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", help="checkout A (the baseline)")
    p.add_argument("--b", help="checkout B")
    p.add_argument("--labels", default="A,B")
    p.add_argument("--only", default="mlp,cnn,lstm,fasttext", help="bench_models workloads ('' for none)")
    p.add_argument("--pairs", type=int, default=2, help="fresh process pairs per workload")
    p.add_argument("--rounds", type=int, default=5, help="timed repeats per process")
    p.add_argument("--core-runs", type=int, default=4, help="bench_core runs per checkout (0: none)")
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--threads", type=int, default=None,
                   help="intra-op (BLAS) threads of the model workers (default: one per core); "
                        "1 is far less sensitive to a busy machine")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    workloads = [w for w in args.only.split(",") if w]
    if args.worker:
        return worker(workloads[0], args.threads)
    if not (args.a and args.b):
        p.error("--a and --b are required")
    labels = args.labels.split(",")
    sides = [(labels[0], os.path.abspath(args.a)), (labels[1], os.path.abspath(args.b))]
    from bench_core import machine_info
    info = machine_info()
    info.update(packages={label: package_of(path) for label, path in sides},
                loadavg_start=[round(v, 2) for v in os.getloadavg()], date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                threads=args.threads or "default")
    print(json.dumps(info), flush=True)
    rows = []
    for i in range(args.core_runs):
        for label, path in (sides if i % 2 == 0 else sides[::-1]):
            rows.append(core_run(label, path))
            print(json.dumps(rows[-1]), flush=True)
    for pair in range(args.pairs):
        for w in workloads:
            for row in model_pair(sides if pair % 2 == 0 else sides[::-1], w, args.rounds, args.timeout,
                                  args.threads):
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\n" + table(rows, labels, info.get("cpu")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
