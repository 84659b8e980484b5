"""Per-op wall and CPU profile of a ``bench_models`` training step (issue 18, conv18).

Every CPU kernel is wrapped (before the model is built) with a timer that records, per op
type and input shapes, the wall time and the *process* CPU time (all threads: the op's helper
threads and BLAS's threads count; the resnet's plan runs its ops one at a time) of each call.
``tw.profiler`` gives wall time only; on a shared machine the CPU column is the one that does
not depend on the other sessions' load. Prints one table, sorted by CPU time per step.

A second table (issue 18 session 15, net19) sums the CPU time per op *family* (convolution
forward, input gradient, filter gradient, batch norm forward and backward, ReLU, pooling, the
optimizer update, other) and, for the convolutions, sets it against the time their multiply-adds
would take at this machine's one-thread GEMM rate (``--gflops``, by default measured here: a
128x784 @ 784x512 product on the library ``gemm`` picks for one thread). The two gradients of
a ``FusedConv2DBackprop`` run side by side on two threads; each is timed on its own thread
(``thread_time`` around the runners of ``conv_kernels``), so the family split holds there too.

    PYTHONPATH=$PWD python benchmarks/bench_op_profile.py --workload resnet --steps 10

The plan nodes that are no graph ops (the grouped projections, the fused attention) are timed
too (issue 18 session 20, att24), so ``--workload encoder2_predict`` gives its per-step table.

``--peer torch --threads N`` prints PyTorch's own table of the same workload instead
(``torch.profiler``'s "self CPU" per op and step, which is the op's elapsed time on the calling
thread, its other threads' work not counted; and the process CPU per step), beside ours (issue 18,
enc28).

``--nodes`` times the plan's own steps instead (issue 18, enc30): no kernel is wrapped, so the plan
passes match as in a plain run (wrapped kernels are not the stock ones a pass looks for: the tables
above show a plan without ``FusedBlockTail`` / ``FusedHeadAttention``). Per node and step: wall,
process CPU (all threads), the calling thread's CPU, the helpers' share (process less calling
thread) and the wall between the node and the one before it on the calling thread (the
executor's own time). ``tw.profiler`` is switched on so the plan runs its self-timing twin::

    PYTHONPATH=$PWD python benchmarks/bench_op_profile.py --workload encoder2_predict --nodes --steps 200
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


def wrap_kernels(stats, on, flops_fwd=None):
    """Wraps every registered CPU kernel; ``on[0]`` switches recording; ``flops_fwd[0]`` adds up
    the forward convolutions' flops (channels last)."""
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
            if flops_fwd is not None and _name in ("Conv2D", "FusedConv2D"):
                flops_fwd[0] += conv_flops(args[1].shape, r.shape)
            s[0] += 1
            s[1] += w
            s[2] += c
            s[3] += m
            return r
        timed._profiled = True
        timed.__wrapped__ = fn
        opdef.kernels["CPU"] = timed


def wrap_plan_nodes(stats, on):
    """Times the kernels of plan nodes that are no graph ops (``FusedEinsumGroup``,
    ``FusedAttention``: the passes bind them when a plan is built, so wrap before the model's
    first call), into ``stats`` as :func:`wrap_kernels` does."""
    import importlib
    for module, attr, name in (("einsum_group_kernels", "fused_einsum_group", "FusedEinsumGroup"),
                               ("attention_kernels", "fused_attention", "FusedAttention"),
                               ("attention_train", "attention_forward", "FusedAttentionTrain"),
                               ("attention_train", "attention_backward", "FusedAttentionGrad"),
                               ("layer_norm_kernels", "add_layer_norm", "AddLayerNorm"),
                               ("einsum_bias_kernels", "fused_einsum_pair", "FusedEinsumPair")):
        try:        # (an older tree, for an A/B, lacks the newer ones)
            module = importlib.import_module(f"tensorweave.kernels.cpu.{module}")
        except ImportError:
            continue
        fn = getattr(module, attr, None)
        if fn is None:
            continue

        def timed(*args, _fn=fn, _name=name, **kwargs):
            if not on[0]:
                return _fn(*args, **kwargs)
            c0, m0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
            r = _fn(*args, **kwargs)
            s = stats[(_name, _shapes(args))]
            s[0] += 1
            s[1] += time.perf_counter() - w0
            s[2] += time.process_time() - c0
            s[3] += time.thread_time() - m0
            return r
        setattr(module, attr, timed)


#: op type -> family of the second table (types not listed: "other")
FAMILIES = {
    "Conv2D": "conv forward", "FusedConv2D": "conv forward",
    "Conv2DBackpropInput": "conv input-gradient", "Conv2DBackpropFilter": "conv filter-gradient",
    "BatchNormTraining": "batch norm fwd", "FusedBatchNormTrainingRelu": "batch norm fwd (+relu)",
    "BatchNormTrainingGrad": "batch norm bwd", "FusedReluGradBatchNormTrainingGrad": "batch norm bwd (+relu grad)",
    "FusedBatchNormTrainingAddRelu": "batch norm fwd (+add, relu)",
    "FusedReluGradBatchNormTrainingGradSelect": "batch norm bwd (+relu grad, select)",
    "Relu": "relu", "ReluGrad": "relu", "FusedReluGradBiasAddGrad": "relu grad + bias grad",
    "MaxPool": "pooling", "MaxPoolGrad": "pooling", "AvgPool": "pooling", "AvgPoolGrad": "pooling",
    "Mean": "pooling",
    "FusedMatMulGroupApplyAdam": "optimizer update", "ResourceApplyAdam": "optimizer update",
    "AddN": "adds (residual, gradient sums)", "AddV2": "adds (residual, gradient sums)",
    "MatMul": "dense", "FusedMatMul": "dense", "FusedMatMulReluGradBiasAddGrad": "dense (+relu grad, bias grad)",
    "Einsum": "einsum products", "FusedEinsum": "einsum products", "FusedEinsumGroup": "einsum products",
    "FusedEinsumPair": "einsum products",
    "FusedAttention": "attention (scores, softmax, weighted sum)",
    "FusedAttentionTrain": "attention (scores, softmax, weighted sum)",
    "FusedAttentionGrad": "attention gradient (5 products' work + softmax grad)",
    "LayerNorm": "layer norm", "LayerNormGrad": "layer norm", "AddLayerNorm": "layer norm (+residual add)",
    "Softmax": "softmax", "SoftmaxGrad": "softmax",
}


def conv_flops(f_shape, y_shape):
    """Multiply-adds x2 of a channels-last convolution (the same count for each gradient)."""
    n, out, ksize_c = y_shape[0], y_shape[1:-1], f_shape[:-1]
    prod = 1
    for d in tuple(out) + tuple(ksize_c):
        prod *= int(d)
    return 2.0 * n * prod * int(f_shape[-1])


def wrap_conv_gradients(fam, lock, on):
    """Times each convolution gradient on the thread that runs it (the pair kernel runs the two
    side by side); ``fam[kind] = [CPU seconds, flops]``."""
    from tensorweave.kernels.cpu import conv_kernels

    def wrap(name, kind, flops_of):
        make = getattr(conv_kernels, name)

        def runner(*args, **kwargs):
            run = make(*args, **kwargs)
            if not on[0]:
                return run
            flops = flops_of(*args)

            def timed():
                t0 = time.thread_time()
                r = run()
                with lock:
                    fam[kind][0] += time.thread_time() - t0
                    fam[kind][1] += flops
                return r
            return timed
        setattr(conv_kernels, name, runner)
    # (input_sizes, f, dy, ...) and (x, filter_sizes, dy, ...); channels last in the benchmarks
    wrap("backprop_input_runner", "conv input-gradient",
         lambda sizes, f, dy, *a: conv_flops(f.shape, dy.shape))
    wrap("backprop_filter_runner", "conv filter-gradient",
         lambda x, sizes, dy, *a: conv_flops([int(v) for v in sizes], dy.shape))


def one_thread_gflops():
    """GFLOP/s of a 128x784 @ 784x512 float32 product on one thread (``gemm``'s one-thread library)."""
    import numpy as np
    from tensorweave.kernels.cpu import gemm
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((128, 784), np.float32), rng.standard_normal((784, 512), np.float32)
    out = np.empty((128, 512), np.float32)
    times = []
    for _ in range(30):
        t0 = time.thread_time()
        gemm.matmul(a, b, out=out, one_thread=True)
        times.append(time.thread_time() - t0)
    times.sort()
    return 2.0 * 128 * 784 * 512 / max(times[len(times) // 2], 1e-9) / 1e9


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="resnet")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--gflops", type=float, default=None,
                   help="one-thread GEMM rate for the bound column (default: measured here)")
    p.add_argument("--peer", choices=("torch",), default=None, help="profile PyTorch's run instead")
    p.add_argument("--threads", type=int, default=1, help="the peer's intra-op threads")
    p.add_argument("--nodes", action="store_true", help="time the plan's nodes (see the module docstring)")
    args = p.parse_args(argv)
    if args.peer:
        return torch_profile(args.workload, args.steps, args.threads, args.top)
    if args.nodes:
        return node_profile(args.workload, args.steps, args.top)
    import threading

    import tensorweave  # noqa: F401  (registers the kernels)
    stats, on = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0]), [False]
    flops_fwd = collections.defaultdict(float)
    wrap_kernels(stats, on, flops_fwd)
    wrap_plan_nodes(stats, on)
    fam, fam_lock = collections.defaultdict(lambda: [0.0, 0.0]), threading.Lock()
    wrap_conv_gradients(fam, fam_lock, on)
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
    print_families(by_type, fam, flops_fwd[0], n, args.gflops or one_thread_gflops(), cpu)


def time_plan_steps(stats):
    """Makes the profiler's self-timing plan steps (``executor._timed``) also record, per node name,
    [calls, wall, process CPU, calling thread's CPU, wall since the calling thread's last node end,
    op type] into ``stats`` (seconds)."""
    from tensorweave.runtime import executor
    last = [None]

    def timed(step, rt):
        fn, node = step.fn, step.node

        def run(*args):
            w0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
            try:
                return fn(*args)
            finally:
                w1 = time.perf_counter()
                s = stats[node.name]
                s[0] += 1
                s[1] += w1 - w0
                s[2] += time.process_time() - c0
                s[3] += time.thread_time() - m0
                s[4] += 0.0 if last[0] is None else w0 - last[0]
                s[5] = node.op
                last[0] = w1
        return run
    executor._timed = timed
    return last


def node_profile(workload, steps, top):
    """The plan's nodes of ``workload``'s request, timed (``--nodes``, module docstring)."""
    import tensorweave as tw
    stats = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0, ""])
    last = time_plan_steps(stats)
    data = bench_models.synthetic_batch(workload)
    step, _, _ = bench_models.make_tensorweave(workload, data, None)
    from tensorweave.kernels.cpu import jit
    for _ in range(3):
        jit.wait_for_compiles()
        step()
    with tw.profiler.Profile():
        step()
        stats.clear()
        c0, m0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
        for _ in range(steps):
            last[0] = None
            step()
        wall, cpu, main = ((time.perf_counter() - w0) / steps, (time.process_time() - c0) / steps,
                           (time.thread_time() - m0) / steps)
    n = steps
    nw, nc, nm, gap = (sum(v[i] for v in stats.values()) / n for i in (1, 2, 3, 4))
    print(f"{workload}: {len(stats)} nodes; request wall {wall * 1e3:.2f} ms, process CPU {cpu * 1e3:.2f} ms, "
          f"calling thread's CPU {main * 1e3:.2f} ms; in nodes wall {nw * 1e3:.2f}, CPU {nc * 1e3:.2f} "
          f"(calling thread {nm * 1e3:.2f}), between nodes {gap * 1e3:.2f}; load {os.getloadavg()}")
    print("| node | op | wall µs | process CPU µs | calling thread µs | helpers µs | CPU/wall | gap before µs |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (c, w, cp, m, g, op) in sorted(stats.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"| {name} | {op} | {w / n * 1e6:.0f} | {cp / n * 1e6:.0f} | {m / n * 1e6:.0f} | "
              f"{(cp - m) / n * 1e6:.0f} | {cp / max(w, 1e-12):.2f} | {g / n * 1e6:.1f} |")


def torch_profile(workload, steps, threads, top):
    """PyTorch's per-op table of ``workload`` (``peers.make_torch``: ``predict`` in eval mode
    under ``no_grad``) on ``threads`` threads: the profiler's self time (elapsed, calling thread)
    per step of each op, and whether the encoder layers took the fused inference path
    (``aten::_transformer_encoder_layer_fwd``)."""
    import peers
    from torch.profiler import ProfilerActivity, profile
    data = bench_models.synthetic_batch(workload)
    step = peers.make_torch(workload, data, threads)[0]
    for _ in range(5):
        step()
    c0, w0 = time.process_time(), time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    wall, cpu = (time.perf_counter() - w0) / steps, (time.process_time() - c0) / steps
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    fast = any(e.key == "aten::_transformer_encoder_layer_fwd" for e in rows)
    print(f"torch {workload}, {threads} thread(s): step wall {wall * 1e3:.2f} ms, process CPU {cpu * 1e3:.2f} ms "
          f"(profiler on); fused encoder path: {fast}; load {os.getloadavg()}")
    print("| op | calls/step | self CPU µs/step | CPU µs/step (with children) |\n|---|---|---|---|")
    for e in rows[:top]:
        print(f"| {e.key} | {e.count / steps:g} | {e.self_cpu_time_total / steps:.0f} "
              f"| {e.cpu_time_total / steps:.0f} |")


def print_families(by_type, fam, flops_fwd, steps, gflops, step_cpu):
    """The per-family table (see the module docstring); ``by_type``: op type -> [wall, CPU,
    calling thread's CPU] per step; ``fam``: the gradients' [CPU seconds, flops] over ``steps``."""
    cpu = collections.defaultdict(float)
    for name, (_, cp, _) in by_type.items():
        if name.startswith("FusedConv") and name.endswith("Backprop"):
            continue                       # split into its two gradients below
        cpu[FAMILIES.get(name, "other")] += cp
    flops = {"conv forward": flops_fwd / steps}
    for kind, (sec, fl) in fam.items():
        cpu[kind] += sec / steps
        flops[kind] = fl / steps
    print(f"\n(one-thread GEMM rate {gflops:.0f} GFLOP/s; step CPU {step_cpu * 1e3:.1f} ms)")
    print("| family | CPU ms/step | share | GFLOP/step | CPU ms at the GEMM rate | CPU / bound |")
    print("|---|---|---|---|---|---|")
    total = sum(cpu.values())
    for name, c in sorted(cpu.items(), key=lambda kv: -kv[1]):
        fl = flops.get(name)
        bound = fl / (gflops * 1e9) if fl else None
        print(f"| {name} | {c * 1e3:.2f} | {c / max(total, 1e-12):.0%} | " +
              (f"{fl / 1e9:.3f} | {bound * 1e3:.2f} | {c / bound:.2f}x |" if bound else "| | |"))


if __name__ == "__main__":
    main()
