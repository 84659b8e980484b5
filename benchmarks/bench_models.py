"""Model benchmark (issue 5): ms per training step of the four Keras benchmark models.

For each workload (mlp, cnn, lstm, fasttext, defined in issue 5; gru, transformer and the batch-1
``predict`` latencies mlp_predict and cnn_predict, resnet, encoder2 and widedeep, added for issue 18;
all in ``WORKLOADS``, models in ``peers.py``) and each
framework (tensorweave's ``tw.keras`` ``train_on_batch``; PyTorch, JAX and Keras 3 on TensorFlow
when installed, see ``peers.py``) a subprocess of its own builds the model with Adam(1e-3) on a
synthetic float32 batch and warms up; then the frameworks' timed repeats alternate, round by
round (:func:`measure_interleaved`), so that a busy spell of a shared machine slows every
framework of the workload alike instead of whichever ran then. Prints one JSON row per
(workload, framework) on stdout, then a table of tensorweave / best-peer ratios on stderr.

Row fields:

* ``ms_per_step``: median over ``repeats`` of the mean step time of one repeat
  (``steps_per_repeat`` steps, chosen from the warm-up so that a repeat lasts about a second);
  ``best_ms`` the fastest repeat; ``first_step_ms`` the first step (tracing/compiling);
  ``cpu_ms_per_step`` the process's CPU time (all threads, user + system) per step, median over
  repeats: with ``--threads 1`` it is the least load-sensitive figure on a shared machine;
* ``rss_base_mb``: resident memory after imports, model and data, before the first step;
* ``rss_step_peak_mb``: peak RSS during the timed steps minus ``rss_base_mb``: the memory a
  steady-state training step holds on top of the model (gradients, optimizer slots,
  activations, workspace, caches). The kernel's peak counter (VmHWM) is reset after warm-up
  through ``/proc/self/clear_refs`` so compile-time peaks do not count; where that is not
  possible the row says ``rss_method: ru_maxrss`` (peak over the whole run instead);
* ``rss_warmup_peak_mb``: ``getrusage`` ru_maxrss minus ``rss_base_mb`` (includes tracing/compiling);
* ``tracemalloc_step_peak_mb`` (tensorweave only): the peak of NumPy allocations (NumPy reports
  its buffers to ``tracemalloc``) during one step, above the level at its start;
* ``warmup_retained_mb`` (tensorweave only): the resident memory one step of a throw-away copy of
  the model (a 2-sample batch, before ``rss_base_mb`` is taken) leaves behind once that copy is
  freed (heap trimmed): machine code compiled in it, libraries mapped on first use (MKL's),
  per-process caches (tuning, plans) — kept out of the step memory as PyTorch's kernels and
  libraries are (inside its baseline). ``warmup_compiles``: the numba compiles of that step
  (with a current ahead-of-time build only loops the build cannot hold, such as fused elementwise
  loops made from a graph). Until session 25 the figure was ``jit_code_mb``, measured with the
  copy still alive: it counted the copy's weights and optimizer slots (widedeep's 1M-row tables
  and their Adam slots: 262 of its 277 MB, with no compile), and since a Keras model's reference
  cycles outlived the function, ``rss_base_mb`` counted them too (widedeep 560 MB, 299 now). JAX's
  and TensorFlow's compilations happen in their first step and stay in their step figures.

The framework ``tensorweave-blas1`` is tensorweave with NumPy's BLAS limited to one thread
(threadpoolctl), a diagnostic for thread oversubscription; the ratios use plain ``tensorweave``.
TensorFlow may live in another interpreter (it pins its own dependencies): pass
``--tf-python PATH`` or set ``TW_BENCH_TF_PYTHON``.

``--threads N`` gives every framework N intra-op threads (BLAS for tensorweave; on a shared
machine ``--threads 1`` is far less sensitive to other processes than spinning thread pools).
``--profile DIR`` instead profiles tensorweave's training steps with ``tw.profiler``: a per-op
table (stderr), JSON rows with the kernel/overhead split and the time per phase of the step
(forward+loss, backward, optimizer, metrics), Chrome traces and tables in DIR
(``--sequential`` runs the plans on the sequential executor, a diagnostic).

Usage: ``python benchmarks/bench_models.py [--quick] [--only mlp,cnn] [--peers torch,jax] [--threads N]``.
Timings are never asserted in tests; figures live in BENCHMARKS.md.
"""
import argparse
import contextlib
import json
import os
import resource
import statistics
import select
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

WORKLOADS = {
    # name: (batch, input shape without batch, input kind, number of classes or None for binary)
    "mlp": (128, (784,), "float", 10),
    "cnn": (128, (28, 28, 1), "float", 10),
    "lstm": (32, (80,), "ids", None),
    "fasttext": (32, (400,), "ids", None),
    # issue 18's further workloads (small sizes; not written for JAX)
    "gru": (32, (80,), "ids", None),
    "transformer": (32, (64,), "ids", None),
    "mlp_predict": (1, (784,), "float", 10),
    "cnn_predict": (1, (28, 28, 1), "float", 10),
    "resnet": (64, (32, 32, 3), "float", 10),
    "encoder2": (16, (128,), "ids", None),
    "widedeep": (256, (8,), "ids1m", None),
    # the encoder's inference on one sequence (issue 18 enc18; PyTorch and TensorFlow peers only)
    "encoder2_predict": (1, (128,), "ids", None),
}
#: inference-only workloads: ``predict_on_batch`` (PyTorch: the module in eval mode under
#: ``no_grad``) of the named training workload's model, at batch 1 — a request's latency
PREDICT = {"mlp_predict": "mlp", "cnn_predict": "cnn", "encoder2_predict": "encoder2"}
#: tensorweave with its GEMM backend forced (``TW_BLAS``) or tuned per shape class from an empty
#: tuning cache (``TW_BLAS_TUNE=1``): same-run comparisons of the backend choice (issue 18)
TW_VARIANTS = {"mkl": {"TW_BLAS": "mkl"}, "numpy": {"TW_BLAS": "numpy"},
               "tune": {"TW_BLAS": "auto", "TW_BLAS_TUNE": "1"},
               # convolutions' tile GEMMs as before issue 18 session 11 (conv_tiles.py)
               "convold": {"TW_CONV_ONE_THREAD": "0"},
               # threaded products on the library's own threads, never split (gemm.split_parts)
               "nosplit": {"TW_GEMM_SPLIT": "0"},
               # recurrent kernels' sequence-wide products after the loop, as before issue 18 session 12
               "nooverlap": {"TW_RNN_OVERLAP": "0"},
               # no product started early beside another on the helper thread (runtime/overlap.py),
               # as before issue 18 session 14
               "nopair": {"TW_OVERLAP_PRODUCTS": "0"},
               # layer norm as the composite (as before issue 18 session 14, ln18); the softmax gradient as one op (off by default)
               "lnold": {"TW_FUSED_LAYER_NORM": "0"}, "smfused": {"TW_FUSED_SOFTMAX_GRAD": "1"},
               "ln18old": {"TW_FUSED_LAYER_NORM": "0"},
               # batch-1 products without the weights' transposed layout (kernels/cpu/thin_layout.py),
               # as before issue 18 pred23
               "noflip": {"TW_THIN_LAYOUT": "0"},
               # attention's three steps apart at inference, as before issue 18 session 20 (att24)
               "noatt": {"TW_REMAP_ATTENTION": "0"},
               # a residual add and the layer norm after it as two steps, as before issue 18 session 22 (enc26)
               "nores": {"TW_RESIDUAL_NORM": "0"}}
FRAMEWORKS = ("tensorweave", "tensorweave-blas1", "torch", "jax", "tensorflow") + tuple(
    f"tensorweave-{v}" for v in TW_VARIANTS)
PEER_NAMES = ("torch", "jax", "tensorflow")


def synthetic_batch(workload):
    """The same batch for every framework: float32 inputs or int32 ids, int32 class or float32 0/1 labels.

    >>> b = synthetic_batch("lstm")
    >>> b["x"].shape, b["x"].dtype.name, b["y"].shape
    ((32, 80), 'int32', (32, 1))
    """
    batch, shape, kind, classes = WORKLOADS[workload]
    rng = np.random.default_rng(0)
    if kind == "float":
        x = rng.standard_normal((batch,) + shape, dtype=np.float32)
    else:
        x = rng.integers(0, 1_000_000 if kind == "ids1m" else 20000, (batch,) + shape).astype(np.int32)
    if classes:
        y = rng.integers(0, classes, batch).astype(np.int32)
    else:
        y = rng.integers(0, 2, (batch, 1)).astype(np.float32)
    return {"x": x, "y": y}


def make_tensorweave(workload, data, threads, blas_threads=None, compile_first=True):
    """tw.keras's model (the same Keras code as the Keras 3 peer); ``blas_threads`` caps the BLAS
    libraries' threads (NumPy's, and MKL where ``gemm.library()`` reports it).

    ``compile_first``: one training step of a throw-away copy of the model compiles the numba
    kernels before the baseline RSS is taken, so the step memory counts data (gradients, slots,
    activations), not machine code — PyTorch's kernels are in its shared libraries, inside its
    baseline. What that step leaves behind once the copy is freed is ``warmup_retained_mb``, its
    numba compiles ``warmup_compiles`` (module docstring)."""
    import gc

    import tensorweave as tw
    from peers import _keras_model
    if blas_threads is not None:
        from threadpoolctl import threadpool_limits
        make_tensorweave._limit = threadpool_limits(blas_threads)   # kept alive for the process
    keras = tw.keras
    x, y = data["x"], data["y"]

    def build():
        keras.utils.set_random_seed(0)
        model, loss = _keras_model(keras, keras.layers, PREDICT.get(workload, workload))
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
        return model

    from tensorweave.kernels.cpu import gemm
    info = {"blas_threads": blas_threads, "gemm": gemm.library()}
    if compile_first:
        before = current_rss_mb()
        with counted_compiles() as compiled:
            warm = build()
            if workload in PREDICT:
                warm.predict_on_batch(x[:1])
            else:
                warm.train_on_batch(x[:2], y[:2])   # a 2-sample batch: the same kernels, little data
            from tensorweave.kernels.cpu import jit
            jit.wait_for_compiles()                 # the kernels that compiled in the background
        del warm                                    # its weights and slots are no code
        gc.collect()
        _release_free_heap()
        info["warmup_retained_mb"] = round(current_rss_mb() - before, 1)
        info["warmup_compiles"] = len(compiled)
    model = build()

    if workload in PREDICT:
        def step():
            return float(np.asarray(model.predict_on_batch(x)).sum())
    else:
        def step():
            return float(model.train_on_batch(x, y))
    step.model = model
    return step, tw.__version__ if hasattr(tw, "__version__") else "dev", info


@contextlib.contextmanager
def counted_compiles():
    """A list that gets one entry (the kernel's name) per numba compile, on any thread, while the
    block runs (numba's ``numba:compile`` events).

    >>> import numba
    >>> with counted_compiles() as compiled:
    ...     _ = numba.njit(lambda v: v + 1)(1)
    >>> len(compiled)
    1
    """
    from numba.core import event

    class Listener(event.Listener):
        def on_start(self, ev):
            pass

        def on_end(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__qualname__)
    compiled, listener = [], Listener()
    event.register("numba:compile", listener)
    try:
        yield compiled
    finally:
        event.unregister("numba:compile", listener)


# ---- memory ------------------------------------------------------------------------------------
def _release_free_heap():
    """Returns freed heap pages to the OS (glibc ``malloc_trim``), so memory freed before the
    baseline is not silently reused by the measured steps; a no-op elsewhere."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(field)


def current_rss_mb():
    try:
        return _status_kb("VmRSS") / 1024.0
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def reset_peak_rss():
    """Resets the kernel's peak-RSS counter (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb(reset_ok):
    if reset_ok:
        try:
            return _status_kb("VmHWM") / 1024.0
        except OSError:
            pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ---- one framework's process: build and warm up, then timed repeats on request ----------------
def prepare(framework, workload, quick, threads=None):
    """Builds ``framework``'s model, runs the first and the warm-up steps; returns the state
    :func:`timed_repeat` and :func:`final_row` use."""
    explicit = threads is not None
    threads = threads or os.cpu_count() or 1
    data = synthetic_batch(workload)
    if framework == "tensorweave" or framework[len("tensorweave-"):] in TW_VARIANTS:
        step, version, info = make_tensorweave(workload, data, threads, blas_threads=threads if explicit else None)
    elif framework == "tensorweave-blas1":
        step, version, info = make_tensorweave(workload, data, threads, blas_threads=1)
    else:
        import peers
        step, version, info = peers.PEERS[framework](workload, data, threads)
    st = {"framework": framework, "workload": workload, "step": step, "version": version, "info": info,
          "threads": threads, "rss_base": current_rss_mb(), "times": [], "cpu": []}
    t0 = time.perf_counter()
    st["loss_first"] = st["loss"] = step()
    st["first_ms"] = (time.perf_counter() - t0) * 1e3
    warm = []
    for _ in range(2 if quick else 5):
        t0 = time.perf_counter()
        step()
        warm.append(time.perf_counter() - t0)
    if framework.startswith("tensorweave"):
        # Kernels answer through their NumPy twins until compiled in the background
        # (kernels/cpu/jit.py): the timed steps start once every kernel a step meets is compiled.
        from tensorweave.kernels.cpu import jit
        for _ in range(2):
            jit.wait_for_compiles()
            step()
        jit.wait_for_compiles()
    st["warmup_steps"] = 1 + len(warm)
    target_s = 0.3 if quick else 1.0
    st["steps_per_repeat"] = int(min(1000, max(1, round(target_s / max(statistics.median(warm), 1e-6)))))
    st["reset_ok"] = reset_peak_rss()
    st["rss_at_reset"] = current_rss_mb()
    return st


def timed_repeat(st):
    """One repeat: ``steps_per_repeat`` steps; records ms and CPU ms per step."""
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(st["steps_per_repeat"]):
        st["loss"] = st["step"]()
    st["times"].append((time.perf_counter() - t0) / st["steps_per_repeat"] * 1e3)
    st["cpu"].append((time.process_time() - c0) / st["steps_per_repeat"] * 1e3)
    return st["times"][-1]


def final_row(st):
    times, cpu, rss_base = st["times"], st["cpu"], st["rss_base"]
    step_peak = peak_rss_mb(st["reset_ok"])
    row = {"row": "model", "workload": st["workload"], "framework": st["framework"], "version": st["version"],
           "ms_per_step": round(statistics.median(times), 3), "best_ms": round(min(times), 3),
           "cpu_ms_per_step": round(statistics.median(cpu), 3),
           "repeats": len(times), "steps_per_repeat": st["steps_per_repeat"], "warmup_steps": st["warmup_steps"],
           "first_step_ms": round(st["first_ms"], 1), "loss_first": round(st["loss_first"], 5),
           "loss_last": round(st["loss"], 5),
           "rss_base_mb": round(rss_base, 1), "rss_after_warmup_mb": round(st["rss_at_reset"], 1),
           "rss_step_peak_mb": round(step_peak - rss_base, 1),
           "rss_warmup_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0 - rss_base, 1),
           "rss_method": "VmHWM reset after warm-up" if st["reset_ok"] else "ru_maxrss",
           "cpu_threads": st["threads"], **{k: v for k, v in st["info"].items() if v is not None}}
    if st["framework"].startswith("tensorweave"):
        import tracemalloc
        tracemalloc.start()
        start, _ = tracemalloc.get_traced_memory()
        st["step"]()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        row["tracemalloc_step_peak_mb"] = round((peak - start) / 2 ** 20, 2)
    return row


def worker_main(framework, workload, quick, threads):
    """A framework's process: prints ``{"ready": true}`` once warmed up, then answers each
    ``run`` line on stdin with one timed repeat (``{"ms": ...}``) and ``done`` with its row."""
    try:
        st = prepare(framework, workload, quick, threads)
    except (ImportError, NotImplementedError) as e:     # not installed, or the workload not written for it
        print(json.dumps({"row": "model", "workload": workload, "framework": framework, "absent": True,
                          "why": str(e)[:200]}), flush=True)
        return 0
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() == "run":
            print(json.dumps({"ms": timed_repeat(st)}), flush=True)
        elif line.strip() == "done":
            break
    print(json.dumps(final_row(st)), flush=True)
    return 0


#: pause before each timed repeat: the previous framework's idle thread pools (OpenMP, BLAS,
#: Eigen) spin for a while after its last step and would take cores from the next one
SETTLE_S = 0.3


class _Worker:
    """The parent's handle on one framework's process: JSON lines out, commands in, with a
    deadline per answer; a worker that fails or runs out of time leaves an error row."""

    def __init__(self, framework, workload, quick, python, threads):
        self.framework, self.workload, self.row = framework, workload, None
        cmd = [python, os.path.abspath(__file__), "--worker", framework, "--only", workload]
        if quick:
            cmd.append("--quick")
        if threads:
            cmd += ["--threads", str(threads)]
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):    # every framework with OpenBLAS's own choice
            env.pop(k, None)
        variant = TW_VARIANTS.get(framework[len("tensorweave-"):]) if framework.startswith("tensorweave-") else None
        if variant:
            env.update(variant)
            if "TW_BLAS_TUNE" in variant:               # tuned in this process, from nothing
                self.tuning = tempfile.TemporaryDirectory()
                env["TW_TUNING_CACHE"] = os.path.join(self.tuning.name, "gemm-tuning.json")
        self.errors = tempfile.TemporaryFile(mode="w+")   # a file: a chatty stderr cannot fill a pipe
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
                                         text=True, env=env)
        except OSError as e:   # e.g. --tf-python names an interpreter that is not there
            self.proc = None
            self._fail(absent=True, why=f"cannot start {python}: {e}")

    @property
    def alive(self):
        return self.proc is not None and self.row is None

    def _fail(self, **fields):
        self.row = {"row": "model", "workload": self.workload, "framework": self.framework, **fields}
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    def answer(self, timeout):
        """The worker's next JSON line, or None (then ``row`` holds the failure)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                self._fail(error=f"timed out after {timeout}s")
                return None
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait()
                self.errors.seek(0)
                self._fail(error=self.errors.read()[-400:] or f"exited with {self.proc.returncode}")
                return None
            if line.startswith("{"):
                return json.loads(line)

    def send(self, command, timeout):
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass   # it died: answer() reports how
        return self.answer(timeout)


def measure_interleaved(frameworks, workload, quick, pythons, timeout, threads):
    """Rows for ``frameworks`` on ``workload``: each framework in its own process, warmed up one
    after the other, then their timed repeats alternate (round r: every framework once, in an
    order rotated by r), so a slow or busy period of the shared machine falls on all of them
    instead of on whichever was running then."""
    workers = []
    for fw in frameworks:
        w = _Worker(fw, workload, quick, pythons[fw], threads)
        if w.alive:
            first = w.answer(timeout)
            if first is not None and "ready" not in first:
                w.row = first        # the worker's own row: the framework is absent
                w.proc.wait()
        workers.append(w)
    for r in range(3 if quick else 7):
        live = [w for w in workers if w.alive]
        for w in live[r % len(live):] + live[:r % len(live)] if live else []:
            time.sleep(SETTLE_S)
            w.send("run", timeout)
    for w in workers:
        if w.alive:
            row = w.send("done", timeout)
            if row is not None:
                w.row = row
                w.proc.wait()
    for w in workers:
        w.row["loadavg"] = [round(v, 2) for v in os.getloadavg()]
    return [w.row for w in workers]


# ---- where tensorweave's time goes ---------------------------------------------------------------
PHASES = ("forward+loss", "backward", "optimizer", "metrics")


def _record_phases(model):
    """Patches tape.gradient / optimizer.apply_gradients so the traced step's ops get a phase.

    Ops are numbered in creation order while ``train_step`` is traced: the forward pass and
    loss first, then ``tape.gradient``'s ops, then the optimizer's, then the metrics'. The
    op counts at the two calls' boundaries split the graph; returns a dict filled on tracing.
    """
    import tensorweave as tw
    from tensorweave.core.graph import get_default_graph
    marks = {}
    tape_gradient = tw.GradientTape.gradient
    apply_gradients = model.optimizer.apply_gradients

    def gradient(self, *a, **k):
        g = get_default_graph()
        marks.setdefault("graph", g)
        marks.setdefault("backward", len(g._ops))
        out = tape_gradient(self, *a, **k)
        marks.setdefault("optimizer", len(g._ops))
        return out

    def apply(*a, **k):
        g = get_default_graph()
        marks["optimizer"] = len(g._ops)
        out = apply_gradients(*a, **k)
        marks["metrics"] = len(g._ops)
        return out
    tw.GradientTape.gradient = gradient
    model.optimizer.apply_gradients = apply
    marks["_restore"] = lambda: setattr(tw.GradientTape, "gradient", tape_gradient)
    return marks


def _phase_of(marks):
    bounds = [marks.get(p, 10 ** 9) for p in ("backward", "optimizer", "metrics")]

    def phase(op_id):
        return PHASES[sum(op_id >= b for b in bounds)]
    return {op.name: phase(op._id) for op in marks["graph"].get_operations()} if "graph" in marks else {}


def profile_tensorweave(workload, steps, out_dir, blas_threads=None, sequential=False):
    """Profiles ``steps`` warm training steps with tw.profiler; returns a JSON row, writes a trace + table.

    ``sequential`` builds every plan with the sequential executor (a diagnostic: per-op times
    of a parallel plan include time the op's thread waited for a core).
    """
    import tensorweave as tw
    from tensorweave.runtime import executor
    if sequential:
        build = executor.build_plan
        executor.build_plan = lambda *a, **k: build(*a, **{**k, "parallel": False})
    data = synthetic_batch(workload)
    step, _, _ = make_tensorweave(workload, data, os.cpu_count() or 1, blas_threads, compile_first=False)
    model = step.model
    marks = _record_phases(model)
    step()
    marks["_restore"]()
    from tensorweave.kernels.cpu import jit
    for _ in range(3):
        jit.wait_for_compiles()                 # profile compiled kernels, not their NumPy twins
        step()
    plain = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        plain.append((time.perf_counter() - t0) / steps * 1e3)
    with tw.profiler.Profile(eager=True) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        profiled_ms = (time.perf_counter() - t0) / steps * 1e3
    s = prof.summary()
    table = prof.table(sort_by="total", top=15)
    tag = workload + ("-blas%d" % blas_threads if blas_threads else "") + ("-seq" if sequential else "")
    os.makedirs(out_dir, exist_ok=True)
    trace = prof.export_chrome_trace(os.path.join(out_dir, f"tensorweave_{tag}.trace.json"))
    phase_of = _phase_of(marks)
    phases = {p: 0 for p in PHASES}
    phase_types = {p: {} for p in PHASES}
    for e, self_ns in zip(prof.events, prof._self_times()):
        if e.kind == "op" and e.name in phase_of:
            p = phase_of[e.name]
            phases[p] += self_ns
            phase_types[p][e.type] = phase_types[p].get(e.type, 0) + self_ns
    phase_ms = {p: round(v / steps / 1e6, 3) for p, v in phases.items()}
    top_types = {p: {t: round(v / steps / 1e6, 3) for t, v in sorted(d.items(), key=lambda kv: -kv[1])[:6]}
                 for p, d in phase_types.items()}
    phase_lines = "\n".join(f"   {p:<13} {phase_ms[p]:8.3f} ms/step  top: " +
                             ", ".join(f"{t} {v:.2f}" for t, v in top_types[p].items()) for p in PHASES)
    with open(os.path.join(out_dir, f"tensorweave_{tag}.table.txt"), "w") as f:
        f.write(table + "\nphases (self time of the traced step's nodes):\n" + phase_lines + "\n")
    per = {k: round(v / steps / 1e6, 3) for k, v in s.items() if k.endswith("_ns")}
    return {"row": "profile", "workload": workload, "blas_threads": blas_threads or "default",
            "executor": "sequential" if sequential else "default", "steps": steps,
            "ms_per_step_unprofiled": round(statistics.median(plain), 3),
            "ms_per_step_profiled": round(profiled_ms, 3),
            "per_step_ms": per, "phase_ms": phase_ms, "phase_top_types_ms": top_types,
            "nodes_per_step": s["ops"] // steps, "runs_per_step": s["runs"] / steps,
            "plan_kinds": sorted({e.type for e in prof.events if e.kind == "run"}),
            "by_type": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
                        for r in sorted(prof.stats(), key=lambda r: -r["total_ns"])[:15]],
            "trace": trace, "table": table + "\nphases:\n" + phase_lines}


# ---- driver ----------------------------------------------------------------------------------------
def ratio_table(rows, workloads, peers):
    """Markdown table: ms/step per framework, the best peer, tensorweave/best-peer, RSS vs PyTorch.

    >>> rows = [{"workload": "mlp", "framework": f, "ms_per_step": ms, "rss_step_peak_mb": 10.0}
    ...         for f, ms in (("tensorweave", 6.0), ("torch", 5.0), ("jax", 3.0))]
    >>> table, summary = ratio_table(rows, ["mlp"], ["torch", "jax"])
    >>> summary["mlp"]["best_peer"], summary["mlp"]["ratio"]
    ('jax', 2.0)
    >>> print(table.splitlines()[-1])
    | mlp | 6.00 | - | 5.00 | 3.00 | jax | 2.00× | - | 10 / 10 |
    """
    by = {(r["workload"], r["framework"]): r for r in rows if "ms_per_step" in r}
    cols = ["tensorweave", "tensorweave-blas1"] + list(peers)
    head = ("| workload | " + " | ".join(f"{c} ms" for c in cols) + " | best peer | tw / best | "
            "tw-blas1 / best | step RSS MB tw / torch |")
    lines = [head, "|" + "---|" * (len(cols) + 5)]
    summary = {}
    for w in workloads:
        cells = [f"{by[(w, c)]['ms_per_step']:.2f}" if (w, c) in by else "-" for c in cols]
        peer_rows = [(by[(w, p)]["ms_per_step"], p) for p in peers if (w, p) in by]
        best = min(peer_rows) if peer_rows else None
        tw = by.get((w, "tensorweave"))
        tw1 = by.get((w, "tensorweave-blas1"))
        ratio = tw["ms_per_step"] / best[0] if tw and best else None
        ratio1 = tw1["ms_per_step"] / best[0] if tw1 and best else None
        torch_row = by.get((w, "torch"))
        mem = (f"{tw['rss_step_peak_mb']:.0f} / {torch_row['rss_step_peak_mb']:.0f}"
               if tw and torch_row else "-")
        lines.append(f"| {w} | " + " | ".join(cells) + f" | {best[1] if best else '-'} | "
                     f"{'%.2f×' % ratio if ratio else '-'} | {'%.2f×' % ratio1 if ratio1 else '-'} | {mem} |")
        fastest = min((by[(w, p)]["best_ms"], p) for p in peers if (w, p) in by and "best_ms" in by[(w, p)]) \
            if peer_rows and tw and "best_ms" in tw else None
        summary[w] = {"best_peer": best[1] if best else None, "best_peer_ms": best[0] if best else None,
                      # the same ratio from each framework's fastest repeat: noise only ever adds time
                      "ratio_of_fastest_repeats": round(tw["best_ms"] / fastest[0], 3) if fastest else None,
                      "tensorweave_ms": tw["ms_per_step"] if tw else None,
                      "ratio": round(ratio, 3) if ratio else None,
                      "ratio_blas1": round(ratio1, 3) if ratio1 else None}
    return "\n".join(lines), summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer, shorter repeats (a smoke run)")
    p.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated workloads")
    # (a workload a peer is not written for gives an "absent" row)
    p.add_argument("--peers", default=",".join(PEER_NAMES), help="comma-separated peers (torch,jax,tensorflow)")
    p.add_argument("--no-blas1", action="store_true", help="skip the tensorweave-blas1 diagnostic")
    p.add_argument("--tw-variants", default="", help="comma-separated tensorweave GEMM variants run beside the "
                   f"default in the same rounds: {', '.join(TW_VARIANTS)} (TW_BLAS=mkl / numpy / per-class tuning)")
    p.add_argument("--threads", type=int, default=None,
                   help="intra-op threads for every framework (default: each framework's default for "
                        "this machine's cores; PyTorch set to the core count)")
    p.add_argument("--tf-python", default=os.environ.get("TW_BENCH_TF_PYTHON", sys.executable),
                   help="interpreter with tensorflow (default: this one; env TW_BENCH_TF_PYTHON)")
    p.add_argument("--timeout", type=int, default=900,
                   help="seconds a framework's process may take to warm up, or for one timed repeat")
    p.add_argument("--profile", metavar="DIR", help="instead of timing peers: profile tensorweave's steps "
                   "with tw.profiler, print the per-op table, write Chrome traces and tables to DIR")
    p.add_argument("--sequential", action="store_true", help="with --profile: build every plan with the "
                   "sequential executor (a diagnostic)")
    p.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    workloads = [w for w in args.only.split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            p.error(f"unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
    if args.worker:
        return worker_main(args.worker, workloads[0], args.quick, args.threads)
    if args.profile:
        for w in workloads:
            row = profile_tensorweave(w, 3 if args.quick else 10, args.profile, args.threads, args.sequential)
            print(f"\n== {w}: {row['ms_per_step_profiled']:.2f} ms/step profiled "
                  f"({row['ms_per_step_unprofiled']:.2f} unprofiled)\n{row.pop('table')}", file=sys.stderr)
            print(json.dumps(row), flush=True)
        return 0
    peers = [x for x in args.peers.split(",") if x]
    for x in peers:
        if x not in PEER_NAMES:
            p.error(f"unknown peer {x!r}; choose from {', '.join(PEER_NAMES)}")

    from bench_core import machine_info
    info = machine_info()
    info["loadavg_start"] = [round(v, 2) for v in os.getloadavg()]
    info["date"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    info["threads"] = args.threads or "default"
    print(json.dumps(info), flush=True)
    blas1 = not args.no_blas1 and args.threads != 1     # with --threads 1 it is plain tensorweave
    variants = [f"tensorweave-{v}" for v in args.tw_variants.split(",") if v]
    for v in variants:
        if v not in FRAMEWORKS:
            p.error(f"unknown --tw-variants entry {v[len('tensorweave-'):]!r}; choose from {', '.join(TW_VARIANTS)}")
    frameworks = ["tensorweave"] + variants + (["tensorweave-blas1"] if blas1 else []) + peers
    pythons = {fw: args.tf_python if fw == "tensorflow" else sys.executable for fw in frameworks}
    rows = []
    for w in workloads:
        for row in measure_interleaved(frameworks, w, args.quick, pythons, args.timeout, args.threads):
            rows.append(row)
            print(json.dumps(row), flush=True)
    present = [x for x in peers if any(r["framework"] == x and "ms_per_step" in r for r in rows)]
    table, summary = ratio_table(rows, workloads, present)
    print(json.dumps({"row": "ratios", "tensorweave_over_best_peer": summary,
                      "loadavg_end": [round(v, 2) for v in os.getloadavg()]}), flush=True)
    print("\n" + table, file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
