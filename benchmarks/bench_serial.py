"""Where a training step keeps one core idle (issue 18, core19): the calling thread's serial CPU.

On two cores a step's wall time is bounded below by the CPU of the thread that runs the plan
(the caller): the helper thread only takes the split products' blocks and the work handed to
it. This script times, per op family, the calling thread's CPU (``time.thread_time``) and the
process's CPU (all threads) of every kernel call; the *serial* column is the caller's CPU beyond
what other threads did during the call (``2 × caller − process``: a split product's blocks on the
helper, or a product started early on it, run beside as much of the caller's), plus the caller's
CPU outside the kernels (the executor's and Keras's Python: ``outside kernels``). Per-thread CPU
of the whole step comes from ``/proc/self/task``. CPU figures, unlike wall ones, hold on a
loaded machine; the load average is printed.

    PYTHONPATH=$PWD python benchmarks/bench_serial.py --workload mlp --steps 100
    PYTHONPATH=$PWD python benchmarks/bench_serial.py --workload transformer --ab 10 --steps 5

``--per-step``: instead, every step of the training plan (its op type) with the caller's and the
process's CPU inside it (which products run on the calling thread alone, and which run while the
helper computes another: ``runtime/overlap.py``).

``--ab``: the same step with a switch on and off in alternating rounds: ``--switch split``,
``split_passes`` (large elementwise passes split by rows; ``--split-bytes`` forces its threshold,
measured by wall, it is never below 8 MiB on a loaded machine); ``--switch sleep``, MKL's OpenMP
workers sleeping after a threaded class's call or spinning (with ``--force-threaded mkl`` where the
tuner kept every class split: it times none on a busy machine).

    PYTHONPATH=$PWD python benchmarks/bench_serial.py --workload mlp --ab 8 --steps 30 --switch sleep \\
        --force-threaded mkl
"""
import argparse
import collections
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402

#: op type -> family (the rest by name patterns in :func:`family`)
FAMILIES = {
    "FusedMatMulGroupApplyAdam": "Adam (fused with dW1's product)",
    "ResourceApplyAdam": "Adam update", "ApplyAdam": "Adam update", "FusedApplyAdam": "Adam update",
    "FusedSparseSoftmaxCrossEntropy": "softmax / cross-entropy", "Softmax": "softmax / cross-entropy",
    "SoftmaxGrad": "softmax / cross-entropy", "SigmoidCrossEntropyWithLogits": "softmax / cross-entropy",
    "LayerNorm": "layer norm", "LayerNormGrad": "layer norm",
    "BiasAddGrad": "bias-add / ReLU epilogues", "FusedReluGradBiasAddGrad": "bias-add / ReLU epilogues",
    "ReluGrad": "bias-add / ReLU epilogues", "Relu": "bias-add / ReLU epilogues",
    "BiasAdd": "bias-add / ReLU epilogues",
    "Sum": "reductions", "Mean": "reductions", "Max": "reductions",
    "AssignAddVariableOp": "metric scalars", "DivNoNan": "metric scalars", "BroadcastTo": "metric scalars",
}


def family(op, cpu, caller):
    """The family of a call: products split by size (the process's CPU beyond the caller's says
    the helper took a share), the rest by op type."""
    if op in ("MatMul", "FusedMatMul", "BatchMatMulV2", "Einsum", "FusedEinsum", "FusedMatMulReluGradBiasAddGrad"):
        return "products, split" if cpu > 1.1 * caller + 2e-6 else "products, one thread"
    if op in FAMILIES:
        return FAMILIES[op]
    if "Adam" in op:
        return "Adam update"
    return "other small ops (shapes, reads, casts, elementwise)"


def thread_cpu():
    """``{thread id: CPU seconds}`` of this process's threads (``/proc/self/task``)."""
    out, tick = {}, os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            pass
    return out


def thread_names():
    """``{thread id: name}``: the kernel's name of each thread of this process (``comm``: Python's
    threads, the runtime's helper among them, are ``python``; MKL's OpenMP workers
    ``openmp_worker``), so a per-thread table says which pool a thread belongs to."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                out[int(tid)] = f.read().strip()
        except OSError:
            pass
    return out


def force_threaded(backend):
    """Every threaded shape class this process has met (``gemm._split_chosen``) set to
    ``backend``: ``"mkl"`` (MKL's own threads), ``"one"`` (the calling thread alone) or
    ``"rows"``/``"cols"`` (a split, where that side has two blocks) — an A/B of the choice itself,
    which the tuner makes only on a quiet machine (under load every class keeps the split)."""
    from tensorweave.kernels.cpu import gemm
    for key in gemm._split_chosen:
        side = key[3] if backend == "rows" else key[4]
        if backend in ("mkl", "one") or side >= (2 * gemm.MIN_PART).bit_length():
            gemm._split_chosen[key] = backend


def profile(workload, steps, force=None):
    """Per-family ``[caller CPU, process CPU, serial caller CPU]`` seconds per step and the step's
    ``(wall, process CPU, caller CPU, per-thread CPU)``; ``force``: :func:`force_threaded`'s
    backend, set after the warm-up steps."""
    import tensorweave  # noqa: F401  (registers the kernels)
    from tensorweave.kernels.cpu import jit
    calls = []
    on = [False]
    _record_calls(calls, on)
    data = bench_models.synthetic_batch(workload)
    step, _, _ = bench_models.make_tensorweave(workload, data, None)
    for _ in range(3):
        jit.wait_for_compiles()
        step()
    if force:
        force_threaded(force)
        step()
    me = threading.get_native_id()
    t0 = thread_cpu()
    on[0] = True
    c0, m0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
    for _ in range(steps):
        step()
    wall, cpu, caller = time.perf_counter() - w0, time.process_time() - c0, time.thread_time() - m0
    on[0] = False
    t1, names = thread_cpu(), thread_names()
    per_thread = sorted(((t1[t] - t0.get(t, 0.0)) / steps, "caller" if t == me else f"{names.get(t, '?')}:{t}")
                        for t in t1)
    fam = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    in_kernels = 0.0
    for op, c, m, tid in calls:
        if tid != me:           # a product started early on the helper (runtime/overlap.py)
            fam["on the helper thread (overlapped products)"][1] += m / steps
            continue
        f = fam[family(op, c, m)]
        f[0] += m / steps
        f[1] += c / steps
        f[2] += max(0.0, 2 * m - c) / steps
        in_kernels += m
    outside = (caller - in_kernels) / steps
    fam["outside kernels (executor, Keras Python)"] = [outside, outside, outside]
    return fam, (wall / steps, cpu / steps, caller / steps, [p for p in per_thread if p[0] > 1e-5])


def _record_calls(calls, on):
    """Wraps every CPU kernel to keep each call's (op, process CPU, caller CPU) while ``on[0]``
    (the wrapper's own ~1 µs a call counts as ``outside kernels``)."""
    from tensorweave.core import registry
    for name in registry.registered_ops():
        opdef = registry.get_op(name)
        fn = opdef.kernels.get("CPU")
        if fn is None:
            continue

        def rec(*args, _fn=fn, _name=name, **kwargs):
            if not on[0]:
                return _fn(*args, **kwargs)
            c0, m0 = time.process_time(), time.thread_time()
            r = _fn(*args, **kwargs)
            calls.append((_name, time.process_time() - c0, time.thread_time() - m0, threading.get_native_id()))
            return r
        opdef.kernels["CPU"] = rec


def per_step(workload, steps, force=None):
    """``[(op type, caller CPU, process CPU), ...]`` seconds per training step for each step of
    the largest plan (the training step's), in plan order; the step functions are wrapped before
    the plan's runner is generated (``executor._sequential_runner``)."""
    import tensorweave  # noqa: F401
    from tensorweave.kernels.cpu import jit
    from tensorweave.runtime import executor
    plans, on = [], [False]
    make_runner = executor._sequential_runner

    def wrapped_runner(plan):
        acc = plan.cpu = [[0.0, 0.0] for _ in plan.steps]
        for i, st in enumerate(plan.steps):
            def timed(*args, _fn=st.fn, _acc=acc[i]):
                if not on[0]:
                    return _fn(*args)
                m0, c0 = time.thread_time(), time.process_time()
                try:
                    return _fn(*args)
                finally:
                    _acc[0] += time.thread_time() - m0
                    _acc[1] += time.process_time() - c0
            st.fn = timed
        plans.append(plan)
        return make_runner(plan)
    executor._sequential_runner = wrapped_runner
    try:
        data = bench_models.synthetic_batch(workload)
        step, _, _ = bench_models.make_tensorweave(workload, data, None)
        for _ in range(3):
            jit.wait_for_compiles()
            step()
        if force:
            force_threaded(force)
            step()
        on[0] = True
        for _ in range(steps):
            step()
        on[0] = False
    finally:
        executor._sequential_runner = make_runner
    # (the measured model's: ``make_tensorweave`` first trains a throw-away copy, whose plan is alike)
    plan = max(plans, key=lambda p: (len(p.steps), sum(m for m, _ in p.cpu)))
    return [(st.node.op if st.node is not None else "?", m / steps, c / steps)
            for st, (m, c) in zip(plan.steps, plan.cpu)]


#: what ``--ab`` switches: ``split``, large elementwise passes split by rows (``split_passes``);
#: ``sleep``, MKL's OpenMP workers sent to sleep after a threaded class's call (``gemm._split``,
#: ``TW_GEMM_SPIN``) — with ``--force-threaded mkl`` where the tuner kept every class split
SWITCHES = {"split": lambda on: _split_passes().ENABLED.__setitem__("on", on),
            "sleep": lambda on: _gemm()._split.__setitem__("sleep", on)}


def _split_passes():
    from tensorweave.kernels.cpu import split_passes
    return split_passes


def _gemm():
    from tensorweave.kernels.cpu import gemm
    return gemm


def ab(workload, rounds, steps, split_bytes, switch="split", force=None):
    """Same-process A/B of a switch (:data:`SWITCHES`) on (A) and off (B), rounds alternating
    (order swapped each round): median (fastest) caller CPU, process CPU, wall and each thread's
    CPU (by name, ``/proc/self/task``) per step of each side."""
    import numpy as np
    from tensorweave.kernels.cpu import jit, split_passes
    data = bench_models.synthetic_batch(workload)
    step, _, _ = bench_models.make_tensorweave(workload, data, None)
    if split_bytes is not None:
        split_passes._limit["bytes"] = split_bytes
    if force:
        step()
        force_threaded(force)
    turn = SWITCHES[switch]
    for on in (True, False, True, False):
        turn(on)
        step()
        jit.wait_for_compiles()
    got = {True: [], False: []}
    threads = {True: collections.defaultdict(list), False: collections.defaultdict(list)}
    me = threading.get_native_id()
    load0 = os.getloadavg()[0]
    for r in range(rounds):
        for on in (True, False) if r % 2 == 0 else (False, True):
            turn(on)
            t0 = thread_cpu()
            c0, m0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
            for _ in range(steps):
                step()
            got[on].append(((time.thread_time() - m0) / steps, (time.process_time() - c0) / steps,
                            (time.perf_counter() - w0) / steps))
            t1, names = thread_cpu(), thread_names()
            per = collections.Counter()
            for t in t1:
                if t != me:
                    per[names.get(t, "?")] += (t1[t] - t0.get(t, 0.0)) / steps
            for name in set(per) | set(threads[on]):
                threads[on][name].append(per.get(name, 0.0))
    turn(True)
    print(f"{workload}: {switch} A/B, {rounds} rounds x {steps} steps, load {load0:.2f} -> "
          f"{os.getloadavg()[0]:.2f}" + (f", threaded classes forced to {force}" if force else "")
          + (f", split threshold {split_passes.min_bytes()} bytes" if switch == "split" else "")
          + "; ms per step, median (fastest)")
    for on in (True, False):
        cols = np.array(got[on]) * 1e3
        others = ", ".join(f"{name} {np.median(v) * 1e3:.2f}" for name, v in sorted(threads[on].items()))
        print(f"  {switch} {'on ' if on else 'off'}: caller CPU {np.median(cols[:, 0]):.2f} ({cols[:, 0].min():.2f}), "
              f"process CPU {np.median(cols[:, 1]):.2f} ({cols[:, 1].min():.2f}), wall {np.median(cols[:, 2]):.2f} "
              f"({cols[:, 2].min():.2f}); other threads' CPU: {others}")
    wins = sum(a[1] < b[1] for a, b in zip(got[True], got[False]))
    print(f"  rounds where the process's CPU was lower with {switch} on: {wins}/{rounds}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="mlp")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--ab", type=int, default=0, metavar="ROUNDS",
                   help="instead: ROUNDS alternating rounds of --steps steps, --switch on and off")
    p.add_argument("--switch", choices=sorted(SWITCHES), default="split", help="what --ab switches")
    p.add_argument("--split-bytes", type=int, default=None,
                   help="with --ab: split passes from this many bytes (default: the measured threshold)")
    p.add_argument("--per-step", action="store_true", help="instead: CPU per step of the training plan")
    p.add_argument("--force-threaded", choices=("mkl", "one", "rows", "cols"), default=None,
                   help="every threaded product class on MKL's threads or split (force_threaded)")
    args = p.parse_args(argv)
    if args.per_step:
        load0 = os.getloadavg()[0]
        rows = per_step(args.workload, args.steps, args.force_threaded)
        print(f"{args.workload}: {args.steps} steps, load {load0:.2f} -> {os.getloadavg()[0]:.2f}; "
              "a step deferred to the helper (runtime/overlap.py) counts there, not in the caller's column")
        print("| plan step | op | caller CPU µs/step | process CPU µs/step |\n|---|---|---|---|")
        for i, (op, m, c) in enumerate(rows):
            print(f"| {i} | {op} | {m * 1e6:.0f} | {c * 1e6:.0f} |")
        return None
    if args.ab:
        return ab(args.workload, args.ab, args.steps, args.split_bytes, args.switch, args.force_threaded)
    load0 = os.getloadavg()[0]
    fam, (wall, cpu, caller, threads) = profile(args.workload, args.steps, args.force_threaded)
    print(f"{args.workload}: {args.steps} steps, load {load0:.2f} -> {os.getloadavg()[0]:.2f}; per step: wall "
          f"{wall * 1e3:.2f} ms, process CPU {cpu * 1e3:.2f}, caller CPU {caller * 1e3:.2f}")
    print("threads' CPU ms/step: " + ", ".join(f"{n} {c * 1e3:.2f}" for c, n in reversed(threads)))
    print("| op family | caller CPU µs/step | process CPU µs/step | caller serial µs/step |\n|---|---|---|---|")
    for name, (m, c, s) in sorted(fam.items(), key=lambda kv: -kv[1][2]):
        print(f"| {name} | {m * 1e6:.0f} | {c * 1e6:.0f} | {s * 1e6:.0f} |")
    total = sum(v[2] for v in fam.values())
    print(f"| **serial total** | | | **{total * 1e6:.0f}** |")


if __name__ == "__main__":
    main()
