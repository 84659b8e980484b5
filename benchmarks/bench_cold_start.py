"""Cold start (issue 18): a fresh process's first training step, against its steady steps.

For each workload of ``bench_models.WORKLOADS`` a fresh process imports tensorweave, builds the
model and times its first ``train_on_batch`` (every numba kernel compiled in the process: numba's
on-disk cache stores pickles, which the project never loads from a file), the median of the next
steps, and the first ``predict_on_batch`` of one sample.

Each row also has the seconds spent in numba's compile/load (``jit_s``) during the first step
and the machine's load average. Usage::

    python benchmarks/bench_cold_start.py [--only mlp,cnn] [--rounds 2]

Timings are never asserted in tests; figures live in BENCHMARKS.md.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def worker(workload, steps):
    t0 = time.perf_counter()
    import numba.core.dispatcher as dispatcher
    jit = [0.0]
    compile_for_args = dispatcher.Dispatcher._compile_for_args

    def timed(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return compile_for_args(self, *args, **kwargs)
        finally:
            jit[0] += time.perf_counter() - t
    dispatcher.Dispatcher._compile_for_args = timed
    import tensorweave as tw
    from bench_models import synthetic_batch
    from peers import _keras_model
    import_s = time.perf_counter() - t0
    data = synthetic_batch(workload)
    tw.keras.utils.set_random_seed(0)
    model, loss = _keras_model(tw.keras, tw.keras.layers, workload)
    model.compile(optimizer=tw.keras.optimizers.Adam(1e-3), loss=loss)
    t = time.perf_counter()
    model.train_on_batch(data["x"], data["y"])
    first = time.perf_counter() - t
    jit_first = jit[0]
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        model.train_on_batch(data["x"], data["y"])
        times.append(time.perf_counter() - t)
    t = time.perf_counter()
    model.predict_on_batch(data["x"][:1])
    predict_first = time.perf_counter() - t
    times.sort()
    return {"import_s": round(import_s, 2), "first_step_s": round(first, 3), "jit_s": round(jit_first, 2),
            "steady_ms": round(times[len(times) // 2] * 1e3, 2), "predict_first_s": round(predict_first, 3)}


def run(workload, steps):
    env = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(k, None)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", workload, "--steps", str(steps)],
                         env=env, capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?") \
        if os.path.exists("/proc/cpuinfo") else "?"
    row.update({"workload": workload, "cpu": cpu, "loadavg": round(os.getloadavg()[0], 2)})
    row["first_over_steady"] = round(row["first_step_s"] * 1e3 / row["steady_ms"], 1)
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="mlp,cnn,lstm,fasttext")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker, a.steps)))
        return 0
    for _ in range(a.rounds):
        for workload in a.only.split(","):
            print(json.dumps(run(workload, a.steps)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
