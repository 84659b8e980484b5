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
(``TW_JIT_BACKGROUND=0``: every kernel compiles on its first call) and on; ``--compare-aot``
without and with the kernels built ahead of time (``TW_AOT=0`` / default, ``kernels/cpu/aot.py``).
``--demo`` instead times the main job's epochs (``python -m tensorweave --epochs 3``), as Keras
reports them, with the process's CPU seconds. ``--phases`` runs the main job's training in this
process and splits its epochs: wall, process CPU, main-thread CPU, seconds of background
compiling, each compile (thread CPU) and each twin's main-thread CPU. ``--compiles`` lists every
numba compile of a fresh process (numba's ``numba:compile`` events: kernel, argument types, thread,
thread CPU) per workload, run as ``bench_models`` runs it (its throw-away step, then ``--steps``
steps), and for ``demo`` the main job's training (``--epochs``, default 2); a process with the
build current should list none but the fused loops made from a graph (never built) and the
parallel Adam after ``jit.PARALLEL_AFTER`` large updates.
Usage::

    python benchmarks/bench_cold_start.py [--only mlp,cnn] [--rounds 2] [--compare | --compare-aot]
    python benchmarks/bench_cold_start.py --demo [--compare-aot] [--epochs 6]
    python benchmarks/bench_cold_start.py --phases [--epochs 4]
    python benchmarks/bench_cold_start.py --compiles [--only mlp,cnn,demo] [--steps 3]

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


def _env(variant):
    """The environment of a fresh process for ``variant`` (None: as is)."""
    env = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(k, None)
    env.update(VARIANTS.get(variant, {}))
    return env


#: ``--compare``: background compiles off/on; ``--compare-aot``: ahead-of-time kernels off/on
VARIANTS = {"foreground": {"TW_JIT_BACKGROUND": "0"}, "background": {"TW_JIT_BACKGROUND": "1"},
            "jit": {"TW_AOT": "0"}, "aot": {"TW_AOT": "1"}}


def run(workload, steps, epoch_steps, variant=None):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", workload, "--steps", str(steps),
                          "--epoch-steps", str(epoch_steps)], env=_env(variant), capture_output=True, text=True,
                         check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?") \
        if os.path.exists("/proc/cpuinfo") else "?"
    row.update({"workload": workload, "cpu": cpu, "loadavg": round(os.getloadavg()[0], 2)})
    row["first_over_steady"] = round(row["first_step_s"] * 1e3 / row["steady_ms"], 1)
    row["epoch_over_steady"] = round(row["first_epoch_s"] * 1e3 / (epoch_steps * row["steady_ms"]), 2)
    if variant is not None:
        row["variant"] = variant
    return row


def demo(epochs=3, variant=None):
    """The main job's epoch times (Keras' ``verbose=2`` lines) and CPU seconds, in a fresh process."""
    import re
    import resource
    t = time.perf_counter()
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-m", "tensorweave", "--epochs", str(epochs), "--save", "none",
                          "--verbose", "2"], env=_env(variant), capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = [float(v) for v in re.findall(r"^\S+ - (\d+(?:\.\d+)?)s", out.stdout, re.M)]
    row = {"demo_epoch_s": seconds, "wall_s": round(time.perf_counter() - t, 1),
           "cpu_s": round(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, 1),
           "loadavg": round(os.getloadavg()[0], 2)}
    if variant is not None:
        row["variant"] = variant
    return row


def phases(epochs):
    """The main job's training in this process, split per epoch and per compile and twin."""
    import collections
    import threading
    import numba.core.dispatcher as dispatcher
    t0, c0 = time.perf_counter(), time.process_time()
    compiles, twins = [], collections.defaultdict(lambda: [0, 0.0])
    compile = dispatcher.Dispatcher.compile

    def timed_compile(self, sig):
        t, c, n = time.perf_counter(), time.thread_time(), len(self.overloads)
        try:
            return compile(self, sig)
        finally:
            if len(self.overloads) > n:
                compiles.append({"kernel": self.py_func.__qualname__, "thread": threading.current_thread().name,
                                 "wall_s": round(time.perf_counter() - t, 2), "cpu_s": round(time.thread_time() - c, 2)})
    dispatcher.Dispatcher.compile = timed_compile
    import tensorweave  # noqa: F401 - timed
    from tensorweave import keras
    from tensorweave.examples import mnist
    from tensorweave.kernels.cpu import jit
    warming = jit._Warming.__call__

    def timed_twin(self, *args, **kws):
        fn = warming(self, *args, **kws)
        if fn is not self.twin:
            return fn

        def twin(*a, **k):
            c = time.thread_time()
            try:
                return self.twin(*a, **k)
            finally:
                entry = twins[self.dispatcher.py_func.__qualname__]
                entry[0] += 1
                entry[1] += time.thread_time() - c
        return twin
    jit._Warming.__call__ = timed_twin
    rows = [{"phase": "import tensorweave", "wall_s": round(time.perf_counter() - t0, 2),
             "cpu_s": round(time.process_time() - c0, 2)}]

    class Split(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.at = (time.perf_counter(), time.process_time(), time.thread_time(), jit.background_compile_seconds())

        def on_epoch_end(self, epoch, logs=None):
            t, c, m, b = self.at
            rows.append({"phase": f"epoch {epoch + 1}", "wall_s": round(time.perf_counter() - t, 2),
                         "cpu_s": round(time.process_time() - c, 2), "main_cpu_s": round(time.thread_time() - m, 2),
                         "bg_compile_wall_s": round(jit.background_compile_seconds() - b, 2),
                         "loadavg": round(os.getloadavg()[0], 2)})
    t, c = time.perf_counter(), time.process_time()
    keras.utils.set_random_seed(0)
    (x, y), _ = mnist.load("cnn")
    model = mnist.build_model("cnn", keras)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    rows.append({"phase": "data, model, compile", "wall_s": round(time.perf_counter() - t, 2),
                 "cpu_s": round(time.process_time() - c, 2)})
    model.fit(x, y, batch_size=128, epochs=epochs, validation_split=0.1, verbose=0, callbacks=[Split()])
    jit.wait_for_compiles()
    for row in rows:
        print(json.dumps(row))
    for row in compiles:
        print(json.dumps({"compile": row}))
    for name, (calls, cpu) in sorted(twins.items(), key=lambda kv: -kv[1][1]):
        print(json.dumps({"twin": name, "calls": calls, "main_cpu_s": round(cpu, 2)}))


def compiles(workload, steps, epochs):
    """The numba compiles of this (fresh) process running ``workload``: one dict per compile."""
    import threading
    from numba.core import event
    found, phase, open_ = [], ["import"], threading.local()

    class Compiles(event.Listener):
        def on_start(self, ev):
            open_.__dict__.setdefault("stack", []).append(time.thread_time())

        def on_end(self, ev):
            d, started = ev.data["dispatcher"], open_.stack.pop()
            found.append({"kernel": f"{d.py_func.__module__}.{d.py_func.__qualname__}",
                          "args": ", ".join(str(a) for a in ev.data["args"]), "phase": phase[0],
                          "thread": threading.current_thread().name, "nested": bool(open_.stack),
                          "cpu_s": round(time.thread_time() - started, 2)})
    event.register("numba:compile", Compiles())
    import tensorweave  # noqa: F401 - its import-time compiles are listed too
    from tensorweave.kernels.cpu import jit
    if workload == "demo":
        from tensorweave.examples import mnist
        phase[0] = f"main job, {epochs} epochs"
        mnist.train("cnn", epochs=epochs, save=None, verbose=0)
    else:
        from bench_models import make_tensorweave, synthetic_batch
        phase[0] = "throw-away step"
        step, _, _ = make_tensorweave(workload, synthetic_batch(workload), threads=None)
        phase[0] = "steps"
        for _ in range(steps):
            step()
    jit.wait_for_compiles()
    return found


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="mlp,cnn,lstm,fasttext")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--epoch-steps", type=int, default=29)
    p.add_argument("--compare", action="store_true", help="background compiles off and on, alternating")
    p.add_argument("--compare-aot", action="store_true", help="ahead-of-time kernels off and on, alternating")
    p.add_argument("--demo", action="store_true", help="time the main job's epochs instead")
    p.add_argument("--phases", action="store_true", help="split the main job's epochs in this process")
    p.add_argument("--epochs", type=int, default=None, help="--demo (default 3) and --phases (default 4)")
    p.add_argument("--compiles", action="store_true", help="list every numba compile per workload (fresh processes)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker and a.compiles:
        for row in compiles(a.worker, a.steps, a.epochs or 2):
            print(json.dumps(row))
        return 0
    if a.worker:
        print(json.dumps(worker(a.worker, a.steps, a.epoch_steps)))
        return 0
    if a.phases:
        phases(a.epochs or 4)
        return 0
    if a.compiles:
        for workload in a.only.split(","):
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--compiles", "--worker", workload,
                                  "--steps", str(a.steps), "--epochs", str(a.epochs or 2)], env=_env(None),
                                 capture_output=True, text=True, check=True)
            rows = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
            print(json.dumps({"workload": workload, "compiles": len(rows), "loadavg": round(os.getloadavg()[0], 2),
                              "list": rows}), flush=True)
        return 0
    variants = ("foreground", "background") if a.compare else ("jit", "aot") if a.compare_aot else (None,)
    for _ in range(a.rounds):
        for variant in variants:
            if a.demo:
                print(json.dumps(demo(a.epochs or 3, variant)), flush=True)
                continue
            for workload in a.only.split(","):
                print(json.dumps(run(workload, a.steps, a.epoch_steps, variant)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
