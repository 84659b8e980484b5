"""Cold start (issue 18): a fresh process's first training steps, against its steady steps.

For each workload of ``bench_models.WORKLOADS`` a fresh process imports tensorweave, builds the
model and times its first ``train_on_batch`` (every numba kernel compiled in the process: numba's
on-disk cache stores pickles, which the project never loads from a file), the first
``--epoch-steps`` steps together (``first_epoch_s``: the main job's first epoch is 29 steps of
batch 128), the median of the next steps, and the first ``predict_on_batch`` of one sample.
``epoch_over_steady`` is ``first_epoch_s`` over ``epoch-steps`` steady steps: the issue's target
is 2.

Each row also has the seconds the first step waited for numba compiling on its own thread
(``jit_s``), the seconds of compiling done on the background thread meanwhile (``bg_jit_s``:
kernels with a NumPy twin answer through it until compiled, see ``kernels/cpu/jit.py``), the
process's CPU seconds for the first epoch, and the machine's load average. ``--compare`` runs
every workload twice per round, alternating, with the background compiles off
(``TW_JIT_BACKGROUND=0``: every kernel compiles on its first call) and on. ``--demo`` instead
times the main job's epochs (``python -m tensorweave --epochs 3``), as Keras reports them.
Usage::

    python benchmarks/bench_cold_start.py [--only mlp,cnn] [--rounds 2] [--compare] [--demo]

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


def worker(workload, steps, epoch_steps):
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
    from tensorweave.kernels.cpu import jit as tw_jit
    cpu0 = time.process_time()
    t = time.perf_counter()
    model.train_on_batch(data["x"], data["y"])
    first = time.perf_counter() - t
    jit_first = jit[0]
    for _ in range(epoch_steps - 1):
        model.train_on_batch(data["x"], data["y"])
    epoch = time.perf_counter() - t
    epoch_cpu = time.process_time() - cpu0
    bg = tw_jit.background_compile_seconds()
    for _ in range(3):       # kernels first met after the first epoch (the parallel Adam) compile too
        tw_jit.wait_for_compiles()
        model.train_on_batch(data["x"], data["y"])
    tw_jit.wait_for_compiles()
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
            "bg_jit_s": round(bg, 2), "first_epoch_s": round(epoch, 2), "first_epoch_cpu_s": round(epoch_cpu, 2),
            "steady_ms": round(times[len(times) // 2] * 1e3, 2), "predict_first_s": round(predict_first, 3)}


def run(workload, steps, epoch_steps, background=None):
    env = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(k, None)
    if background is not None:
        env["TW_JIT_BACKGROUND"] = "1" if background else "0"
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", workload, "--steps", str(steps),
                          "--epoch-steps", str(epoch_steps)], env=env, capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?") \
        if os.path.exists("/proc/cpuinfo") else "?"
    row.update({"workload": workload, "cpu": cpu, "loadavg": round(os.getloadavg()[0], 2)})
    row["first_over_steady"] = round(row["first_step_s"] * 1e3 / row["steady_ms"], 1)
    row["epoch_over_steady"] = round(row["first_epoch_s"] * 1e3 / (epoch_steps * row["steady_ms"]), 2)
    if background is not None:
        row["background"] = background
    return row


def demo(epochs=3):
    """The main job's epoch times (Keras' ``verbose=2`` lines), in a fresh process."""
    import re
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "tensorweave", "--epochs", str(epochs), "--save", "none",
                          "--verbose", "2"], capture_output=True, text=True, check=True)
    seconds = [float(v) for v in re.findall(r"^\S+ - (\d+(?:\.\d+)?)s", out.stdout, re.M)]
    return {"demo_epoch_s": seconds, "wall_s": round(time.perf_counter() - t, 1),
            "loadavg": round(os.getloadavg()[0], 2)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="mlp,cnn,lstm,fasttext")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--epoch-steps", type=int, default=29)
    p.add_argument("--compare", action="store_true", help="background compiles off and on, alternating")
    p.add_argument("--demo", action="store_true", help="time the main job's epochs instead")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker, a.steps, a.epoch_steps)))
        return 0
    for _ in range(a.rounds):
        if a.demo:
            print(json.dumps(demo()), flush=True)
            continue
        for workload in a.only.split(","):
            for background in ((False, True) if a.compare else (None,)):
                print(json.dumps(run(workload, a.steps, a.epoch_steps, background)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
