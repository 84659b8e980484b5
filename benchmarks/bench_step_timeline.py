"""One steady training step as a timeline (issue 18, mlp30): every kernel call, every hand-off and
every wait, on which thread, from the step's start; where the calling thread sits idle and for how
long each time, and the helper's idle gaps.

Recorded per step (``--steps`` of them after a warm-up; the step of median wall is printed whole):

* each CPU kernel call (op type) on any thread: start, end, that thread's CPU over it;
* each hand-off: ``gemm.share_tasks`` with a helper (its tasks' starts and ends on each thread, and
  the caller's ``wait``: from its own last task's end to the return), a product started early on the
  helper (``overlap.defer``) and collected (``overlap.join``: ``join`` rows, the caller's wait), and a
  threaded MKL call (``gemm._sleeping_after``: its wall against the caller's CPU over it);
* then as many steps not instrumented: each thread's CPU per step and the context switches
  (``bench_step_products.plain_steps``).

The summary sums, per step (medians): the calling thread's wall, CPU and idle (wall - CPU), its
waits by kind, the hand-offs by kind, and the helper's busy time in tasks. With ``--threads 1``
the same for one intra-op thread (no hand-off): the CPU a step costs without a second core.

    PYTHONPATH=$PWD python benchmarks/bench_step_timeline.py --workload mlp --steps 40
"""
import argparse
import collections
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402
from bench_step_products import plain_steps, wrap_kernels  # noqa: E402


def _now():
    return time.perf_counter_ns(), time.thread_time_ns()


class Recorder:
    """Events ``(kind, name, thread, start ns, end ns, thread CPU ns)`` while :attr:`on`; a lock-free
    list append (atomic under the GIL)."""

    def __init__(self):
        self.on, self.events = False, []

    def span(self, kind, name, run, *args, **kwargs):
        if not self.on:
            return run(*args, **kwargs)
        wall, cpu = _now()
        try:
            return run(*args, **kwargs)
        finally:
            end, cpu_end = _now()
            self.events.append((kind, name, threading.current_thread().name, wall, end, cpu_end - cpu))


def instrument(rec):
    """Wraps every registered CPU kernel, ``gemm.share_tasks`` (and its tasks), ``overlap.defer`` /
    ``join`` and ``gemm._sleeping_after``'s calls; before the model's plans are built (they bind
    these at build time)."""
    from tensorweave.kernels.cpu import gemm
    from tensorweave.runtime import overlap
    wrap_kernels(lambda name, kernel: lambda *args, **kwargs: rec.span("op", name, kernel, *args, **kwargs))
    share = gemm.share_tasks

    def share_tasks(tasks, parts):
        if not rec.on or len(tasks) < 2 or parts < 2 or gemm.inside_blocks_here():
            return share(tasks, parts)
        me, mine = threading.current_thread().name, []

        def task_of(task):
            def run():
                rec.span("task", "task", task)
                if threading.current_thread().name == me:
                    mine.append(time.perf_counter_ns())
            return run
        start = time.perf_counter_ns()
        share([task_of(t) for t in tasks], parts)
        end = time.perf_counter_ns()
        rec.events.append(("handoff", f"share {len(tasks)}", me, start, end, 0))
        rec.events.append(("wait", "share", me, max(mine, default=start), end, 0))
    gemm.share_tasks = share_tasks
    defer, join = overlap.defer, overlap.join
    overlap.defer = lambda fn, *args: rec.span("handoff", "defer", defer, fn, *args)
    overlap.join = lambda value: (rec.span("wait", "join", join, value) if type(value) is overlap.Pending
                                  else value)
    sleeping = gemm._sleeping_after
    gemm._sleeping_after = lambda run_mkl: (lambda: rec.span("handoff", "mkl threads", sleeping(run_mkl)))


def _step_rows(events, start):
    """The step's events from ``start`` in time order, as table rows."""
    rows = []
    for kind, name, thread, begin, end, cpu in sorted(events, key=lambda e: e[3]):
        rows.append(f"| {(begin - start) / 1e3:.0f} | {(end - begin) / 1e3:.0f} | {thread} | {kind} | {name} | "
                    f"{cpu / 1e3:.0f} |")
    return rows


#: the mlp step's kernels by phase (every other op type: "small ops", the loss's, the metrics', the
#: gradient's reshapes and sums)
PHASES = {"FusedMatMul": "forward products (+ bias, ReLU)", "MatMul": "backward products",
          "FusedMatMulReluGradBiasAddGrad": "backward products", "FusedMatMulGroupApplyAdam": "dW1 + Adam update"}


def phases(steps, main):
    """``{phase: (wall µs, caller CPU µs)}`` per step (medians): the calling thread's kernel calls by
    :data:`PHASES`, its waits (``share``/``join``), and the rest of the step outside kernels (the
    executor, the Keras step's Python)."""
    rows = collections.defaultdict(list)
    for wall, cpu, events in steps:
        sums = collections.defaultdict(lambda: [0.0, 0.0])
        for kind, name, thread, begin, end, tcpu in events:
            if thread != main or kind not in ("op", "wait"):
                continue
            key = PHASES.get(name, "small ops") if kind == "op" else f"caller waits ({name})"
            sums[key][0] += (end - begin) / 1e3
            sums[key][1] += tcpu / 1e3
        ops = [v for k, v in sums.items() if not k.startswith("caller waits")]
        sums["outside kernels (executor, Keras)"] = [wall / 1e3 - sum(v[0] for v in ops),
                                                     cpu / 1e3 - sum(v[1] for v in ops)]
        sums["step"] = [wall / 1e3, cpu / 1e3]
        for key in set(rows) | set(sums):
            rows[key].append(sums.get(key, (0.0, 0.0)))
    return {key: tuple(statistics.median(v[i] for v in values) for i in (0, 1)) for key, values in rows.items()}


def _helper_gaps(events, main):
    """ns between one piece of a helper thread's work (a shared task, a deferred product) and its
    next within the step: the helper asleep or waiting for a hand-off."""
    gaps, busy_until = [], None
    for begin, end in sorted((begin, end) for kind, _, thread, begin, end, _ in events
                             if thread != main and kind in ("task", "op")):
        if busy_until is not None and begin > busy_until:
            gaps.append(begin - busy_until)
        busy_until = end if busy_until is None else max(busy_until, end)
    return gaps


def summarize(steps, main):
    """Per-step sums (median over steps) of the calling thread's idle time and waits, the hand-offs
    and the helpers' task time."""
    out = collections.defaultdict(list)
    for wall, cpu, events in steps:
        sums = collections.Counter()
        for kind, name, thread, begin, end, tcpu in events:
            us = (end - begin) / 1e3
            if kind == "wait":
                sums[f"caller waits: {name} (µs)"] += us
                sums[f"caller waits: {name} (count)"] += 1
            elif kind == "handoff":
                sums[f"hand-offs: {name.split()[0]} (count)"] += 1
                if name == "mkl threads":
                    sums["caller idle inside MKL's threaded call (µs)"] += us - tcpu / 1e3
            elif kind == "task" and thread != main:
                sums["helper busy in shared tasks (µs)"] += us
            elif kind == "op" and thread != main:
                sums["helper busy in deferred products (µs)"] += us
            elif kind == "op":
                sums[f"caller in {name}: wall (µs)"] += us
                sums[f"caller in {name}: CPU (µs)"] += tcpu / 1e3
        for gap in _helper_gaps(events, main):
            sums["helper idle gaps inside the step (µs)"] += gap / 1e3
            sums["helper idle gaps inside the step (count)"] += 1
        sums["step wall (µs)"], sums["caller CPU (µs)"] = wall / 1e3, cpu / 1e3
        sums["caller idle = wall - CPU (µs)"] = (wall - cpu) / 1e3
        for key in set(out) | set(sums):
            out[key].append(sums.get(key, 0))
    return {key: statistics.median(values) for key, values in sorted(out.items())}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="mlp")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: one per core)")
    args = p.parse_args(argv)
    from tensorweave.kernels.cpu import gemm_tuning, jit
    rec = Recorder()
    instrument(rec)
    step, _, _ = bench_models.make_tensorweave(args.workload, bench_models.synthetic_batch(args.workload),
                                               args.threads, blas_threads=args.threads)
    for _ in range(10):
        step()
    jit.wait_for_compiles()
    main_name, steps = threading.current_thread().name, []
    load = [os.getloadavg()[0]]
    for _ in range(args.steps):
        rec.events = []
        rec.on = True
        wall, cpu = _now()
        step()
        end, cpu_end = _now()
        rec.on = False
        steps.append((end - wall, cpu_end - cpu, rec.events))
        steps[-1][2].append(("step", "step", main_name, wall, end, cpu_end - cpu))
    plain = plain_steps(step, args.steps)
    load.append(os.getloadavg()[0])
    print(f"cpu {gemm_tuning.cpu_model()}, load {load[0]:.1f} -> {load[1]:.1f}, {args.steps} steps of "
          f"{args.workload}, threads {args.threads or 'default'}")
    by_wall = sorted(steps, key=lambda s: s[0])
    wall, cpu, events = by_wall[len(by_wall) // 2]
    start = min(e[3] for e in events if e[0] == "step")
    print(f"the median step: wall {wall / 1e3:.0f} µs, caller CPU {cpu / 1e3:.0f} µs")
    print("| from start µs | wall µs | thread | kind | what | thread CPU µs |")
    print("|---|---|---|---|---|---|")
    print("\n".join(_step_rows(events, start)))
    print("per step, medians over the steps (instrumented):")
    for key, value in summarize(steps, main_name).items():
        print(f"  {key}: {value:.1f}")
    print("| phase (calling thread) | wall µs | CPU µs |\n|---|---|---|")
    for key, (w, c) in sorted(phases(steps, main_name).items(), key=lambda kv: -kv[1][0]):
        print(f"| {key} | {w:.0f} | {c:.0f} |")
    print("\n".join(plain))


if __name__ == "__main__":
    main()
