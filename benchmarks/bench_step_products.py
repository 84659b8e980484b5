"""Each product of a training step timed inside the step against the same product, with the same
operands, alone (issue 18, mlp29): where a step's time goes beyond its products' own.

Per product of ``gemm.matmul`` / ``gemm.matmul_then`` (at least 2^20 multiply-adds) in a
``bench_models`` workload's step: wall, the calling thread's CPU and the process's CPU, median over
the steps, and the thread it ran on (a product started early runs on the helper, ``runtime/
overlap.py``; its process CPU then includes the caller's work beside it); then the same call
repeated alone right after each round (interleaved, so both see the same load). Then the CPU each
thread of the process spent per step over as many steps again, not instrumented
(``/proc/self/task/*/schedstat``: the caller, the runtime's
helper, MKL's OpenMP workers) and the voluntary context switches per step (each a thread that slept
and had to be woken: a hand-off's cost on a VM). ``matmul_then`` rows (``+after``) include the
fused update of the grouped optimizer step; its product alone is the row above it. Also the
calling thread's CPU per step inside the kernels, by op type, and outside them.

    PYTHONPATH=$PWD python benchmarks/bench_step_products.py --workload mlp --rounds 5 --steps 20
"""
import argparse
import collections
import glob
import os
import resource
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402

MIN_WORK = 1 << 20


def _name(a, b):
    """``"MxK@KxN:TT"`` of a 2-D product (``T``: read transposed)."""
    def t(x):
        return "T" if x.strides[0] == x.itemsize and x.shape[0] > 1 else "N"
    return f"{a.shape[0]}x{a.shape[1]}@{b.shape[0]}x{b.shape[1]}:{t(a)}{t(b)}"


def _clocks():
    return time.perf_counter(), time.thread_time(), time.process_time()


def _since(start):
    return tuple(now - then for now, then in zip(_clocks(), start))


def _threads():
    """``{tid: (name, CPU ns)}`` of this process's threads."""
    out = {}
    for task in glob.glob("/proc/self/task/*"):
        try:
            with open(task + "/comm") as f, open(task + "/schedstat") as g:
                out[task.rsplit("/", 1)[1]] = (f.read().strip(), int(g.read().split()[0]))
        except (OSError, ValueError, IndexError):
            continue
    return out


def plain_steps(step, n):
    """Runs ``step`` ``n`` times, not instrumented; returns the report's lines: the wall a step, each
    thread's CPU per step (``/proc/self/task/*/schedstat``) and all threads', and the voluntary
    (each a thread that slept and had to be woken) and involuntary context switches per step."""
    before, usage = _threads(), resource.getrusage(resource.RUSAGE_SELF)
    plain = time.perf_counter()
    for _ in range(n):
        step()
    plain = (time.perf_counter() - plain) / n
    after, usage_after = _threads(), resource.getrusage(resource.RUSAGE_SELF)
    lines, total = [f"then {n} steps not instrumented, wall {plain * 1e6:.0f} µs a step; per thread, CPU µs per step:"], 0
    for tid, (name, ns) in sorted(after.items(), key=lambda kv: -kv[1][1]):
        spent = (ns - before.get(tid, (name, 0))[1]) / n / 1e3
        total += spent
        if spent >= 1:
            lines.append(f"  {name} ({tid}): {spent:.0f}")
    lines.append(f"  all threads: {total:.0f}")
    lines.append(f"voluntary context switches per step: {(usage_after.ru_nvcsw - usage.ru_nvcsw) / n:.1f} "
                 f"(involuntary {(usage_after.ru_nivcsw - usage.ru_nivcsw) / n:.1f})")
    return lines


def instrument(gemm, seen):
    """Wraps ``gemm.matmul``/``matmul_then`` to append ``(name, thread, (wall, thread, process), (a, b))``
    to ``seen["calls"]`` while ``seen["on"]``; returns the unwrapped ``matmul``."""
    matmul, then = gemm.matmul, gemm.matmul_then

    def timed(run, suffix):
        def call(a, b, *args, **kwargs):
            if not seen["on"] or a.ndim != 2 or b.ndim != 2 or a.shape[0] * a.shape[1] * b.shape[1] < MIN_WORK:
                return run(a, b, *args, **kwargs)
            start = _clocks()
            out = run(a, b, *args, **kwargs)
            seen["calls"].append((_name(a, b) + suffix, threading.current_thread().name, _since(start), (a, b)))
            return out
        return call
    gemm.matmul, gemm.matmul_then = timed(matmul, ""), timed(then, "+after")
    return matmul


def instrument_ops(seen):
    """Wraps every registered CPU kernel (made before the model's plans bind them) to add each
    call's calling-thread CPU to ``seen["ops"][op type]`` while ``seen["on"]``, on the thread that
    runs the step only (a product started early runs on the helper)."""
    main = threading.main_thread()

    def timed(name, kernel):
        def call(*args, **kwargs):
            if not seen["on"] or threading.current_thread() is not main:
                return kernel(*args, **kwargs)
            start = time.thread_time()
            try:
                return kernel(*args, **kwargs)
            finally:
                seen["ops"][name].append(time.thread_time() - start)
        return call
    wrap_kernels(timed)


def wrap_kernels(wrap):
    """Replaces every registered CPU kernel (not a kernel factory) by ``wrap(op type, kernel)``,
    which keeps the kernel's attributes."""
    from tensorweave.core import registry
    for name, opdef in list(registry._OPS.items()):
        kernel = opdef.kernels.get("CPU")
        if kernel is not None and not getattr(kernel, "_tw_factory", False):
            call = wrap(name, kernel)
            call.__dict__.update(getattr(kernel, "__dict__", {}))
            opdef.kernels["CPU"] = call


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="mlp")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20, help="steps per round (and alone-calls per product)")
    args = p.parse_args(argv)
    from tensorweave.kernels.cpu import gemm, gemm_tuning, jit
    seen = {"on": False, "calls": [], "ops": collections.defaultdict(list)}
    matmul = instrument(gemm, seen)
    instrument_ops(seen)
    step, _, _ = bench_models.make_tensorweave(args.workload, bench_models.synthetic_batch(args.workload), None)
    for _ in range(10):
        step()
    jit.wait_for_compiles()
    inside, alone, steps = collections.defaultdict(list), collections.defaultdict(list), []
    load = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        seen["calls"].clear()
        seen["on"] = True
        for _ in range(args.steps):
            start = _clocks()
            step()
            steps.append(_since(start))
        seen["on"] = False
        last = {}
        for name, thread, times, operands in seen["calls"]:
            inside[name].append((thread, times))
            last[name] = operands
        for name, (a, b) in last.items():
            for _ in range(args.steps):
                start = _clocks()
                matmul(a, b)
                alone[name].append(_since(start))
    n = args.rounds * args.steps
    plain = plain_steps(step, n)
    load.append(os.getloadavg()[0])

    def med(rows, i):
        return round(statistics.median(r[i] for r in rows) * 1e6)
    print(f"cpu {gemm_tuning.cpu_model()}, load {load[0]:.1f} -> {load[1]:.1f}, {args.rounds} rounds x {args.steps} "
          f"steps of {args.workload}, products instrumented")
    print(f"step: wall {med(steps, 0)} µs, calling thread CPU {med(steps, 1)}, process CPU {med(steps, 2)}")
    print("| product | thread | in step: wall / caller CPU / process CPU µs | alone: wall / caller CPU / process CPU µs |")
    print("|---|---|---|---|")
    for name, rows in inside.items():
        thread = collections.Counter(t for t, _ in rows).most_common(1)[0][0]
        times = [r for _, r in rows]
        one = alone.get(name)
        print(f"| {name} | {thread} | {med(times, 0)} / {med(times, 1)} / {med(times, 2)} | "
              + (f"{med(one, 0)} / {med(one, 1)} / {med(one, 2)} |" if one else "- |"))
    ops = {name: sum(times) / n * 1e6 for name, times in seen["ops"].items()}
    in_ops = sum(ops.values())
    print(f"calling thread CPU per step, µs: in kernels {in_ops:.0f}, outside them (the executor, the Keras "
          f"step's Python) {med(steps, 1) - in_ops:.0f}; by op type (calls per step):")
    for name, cpu in sorted(ops.items(), key=lambda kv: -kv[1])[:16]:
        print(f"  {name}: {cpu:.0f} ({len(seen['ops'][name]) / n:.0f})")
    print("\n".join(plain))


if __name__ == "__main__":
    main()
