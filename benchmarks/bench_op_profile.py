"""Per-op wall and CPU profile of a ``bench_models`` training step (issue 18, conv18).

Every CPU kernel is wrapped (before the model is built) with a timer that records, per op
type and input shapes, the wall time and the *process* CPU time (all threads: the op's helper
threads and BLAS's threads count; the resnet's plan runs its ops one at a time) of each call.
``tw.profiler`` gives wall time only; on a shared machine the CPU column is the one that does
not depend on the other sessions' load. Prints one table, sorted by CPU time per step.

    PYTHONPATH=$PWD python benchmarks/bench_op_profile.py --workload resnet --steps 10
"""
import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402


def _shapes(args):
    out = []
    for a in args:
        s = getattr(a, "shape", None)
        if s is not None and len(s) >= 2:
            out.append("x".join(str(d) for d in s))
    return " ".join(out[:3])


def wrap_kernels(stats, on):
    """Wraps every registered CPU kernel; ``on[0]`` switches recording."""
    from tensorweave.core import registry
    for name in registry.registered_ops():
        opdef = registry.get_op(name)
        fn = opdef.kernels.get("CPU")
        if fn is None or getattr(fn, "_profiled", False):
            continue

        def timed(*args, _fn=fn, _name=name, **kwargs):
            if not on[0]:
                return _fn(*args, **kwargs)
            c0, m0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
            r = _fn(*args, **kwargs)
            w, c, m = time.perf_counter() - w0, time.process_time() - c0, time.thread_time() - m0
            s = stats[(_name, _shapes(args))]
            s[0] += 1
            s[1] += w
            s[2] += c
            s[3] += m
            return r
        timed._profiled = True
        timed.__wrapped__ = fn
        opdef.kernels["CPU"] = timed


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="resnet")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args(argv)
    import tensorweave  # noqa: F401  (registers the kernels)
    stats, on = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0]), [False]
    wrap_kernels(stats, on)
    data = bench_models.synthetic_batch(args.workload)
    step, _, _ = bench_models.make_tensorweave(args.workload, data, None)
    from tensorweave.kernels.cpu import jit
    for _ in range(3):
        jit.wait_for_compiles()
        step()
    on[0] = True
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        step()
    wall, cpu = (time.perf_counter() - w0) / args.steps, (time.process_time() - c0) / args.steps
    on[0] = False
    n = args.steps
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])
    tw_, tc = sum(v[1] for v in stats.values()) / n, sum(v[2] for v in stats.values()) / n
    print(f"{args.workload}: step wall {wall * 1e3:.1f} ms, CPU {cpu * 1e3:.1f} ms; in kernels wall "
          f"{tw_ * 1e3:.1f}, CPU {tc * 1e3:.1f}; load {os.getloadavg()}")
    print("| op | input shapes | calls/step | wall ms/step | CPU ms/step | calling thread's CPU ms/step | CPU/wall |")
    print("|---|---|---|---|---|---|---|")
    by_type = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for (name, shp), (c, w, cp, m) in rows:
        by_type[name][0] += w / n
        by_type[name][1] += cp / n
        by_type[name][2] += m / n
    for (name, shp), (c, w, cp, m) in rows[:args.top]:
        print(f"| {name} | {shp} | {c / n:g} | {w / n * 1e3:.2f} | {cp / n * 1e3:.2f} | {m / n * 1e3:.2f} "
              f"| {cp / max(w, 1e-9):.2f} |")
    print("\n| op type | wall ms/step | CPU ms/step | calling thread's CPU ms/step |\n|---|---|---|---|")
    for name, (w, cp, m) in sorted(by_type.items(), key=lambda kv: -kv[1][1])[:20]:
        print(f"| {name} | {w * 1e3:.2f} | {cp * 1e3:.2f} | {m * 1e3:.2f} |")


if __name__ == "__main__":
    main()
