"""Attention's stacked Einsum products (issue 18, enc18): one batched call on MKL's threads
against the stack split over the cores (``kernels/cpu/einsum_matmul.py``), interleaved rounds,
wall and process CPU time per call; the encoder2 workload's shapes (batch 16, 4 heads, 128
positions, key size 64).

    PYTHONPATH=$PWD python benchmarks/bench_einsum_split.py --rounds 20 [--old /path/to/old/checkout]

``--old``: also time an older checkout's ``Einsum`` kernel (its ``kernels/cpu/linalg_kernels.py``
loaded from that path beside this one, the same GEMM module under it) in the same rounds.

``--pair``: instead, encoder2_predict's feed-forward half (``FusedEinsumPair``: 1x128x256 @ 256x512
+ bias, ReLU, @ 512x256 + bias; issue 18, enc28) on each way forced, ``"one"`` (the two
``FusedEinsum`` calls) and ``"rows"`` (blocks of rows, both products each, over the intra-op
threads), interleaved rounds of ``--calls`` calls: wall, process CPU and the calling thread's CPU
per call.
"""
import importlib.util
import argparse
import os
import time

import numpy as np

#: (equation, operand shapes): scores, weighted sum, and their gradients (as the tape builds them)
CASES = [("aecd,abcd->acbe", [(16, 128, 4, 64), (16, 128, 4, 64)]),
         ("acbe,aecd->abcd", [(16, 4, 128, 128), (16, 128, 4, 64)]),
         ("abcd,acbe->aecd", [(16, 128, 4, 64), (16, 4, 128, 128)]),
         ("abcd,aecd->acbe", [(16, 128, 4, 64), (16, 128, 4, 64)])]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--old", default=None, help="an older checkout whose Einsum kernel is timed too")
    p.add_argument("--pair", action="store_true", help="time FusedEinsumPair's two ways instead")
    p.add_argument("--calls", type=int, default=20, help="calls per round (--pair)")
    args = p.parse_args(argv)
    if args.pair:
        return time_pair(args.rounds, args.calls)
    old = None
    if args.old:
        spec = importlib.util.spec_from_file_location(
            "old_linalg_kernels", os.path.join(args.old, "tensorweave", "kernels", "cpu", "linalg_kernels.py"))
        old = importlib.util.module_from_spec(spec)
        from tensorweave.core import registry
        real = registry.register_kernel
        registry.register_kernel = lambda *a, **k: (lambda fn: fn)    # not registered a second time
        try:
            spec.loader.exec_module(old)
        finally:
            registry.register_kernel = real
    from tensorweave.kernels.cpu import einsum_matmul, gemm, gemm_tuning
    rng = np.random.default_rng(0)
    print(f"cpu {gemm_tuning.cpu_model()}, load {os.getloadavg()}, parts {gemm.split_parts()}")
    print("| equation | way | wall ms (median) | CPU ms (median) | max abs diff vs float64 |")
    print("|---|---|---|---|---|")
    for eq, shapes in CASES:
        a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
        lhs, so = eq.split("->")
        sa, sb = lhs.split(",")
        plan = einsum_matmul._plan(sa, sb, so, a.shape, b.shape)
        size, batch, left, right, inner = plan[:5]
        ways = {"mkl": lambda: einsum_matmul._product(a, b, sa, sb, so, size, batch, left, right, inner),
                "split": lambda: einsum_matmul._split(a, b, sa, sb, so, size, batch, left, right, inner,
                                                      max(2, gemm.split_parts()))}
        if old is not None:
            ways["old"] = lambda: old._einsum_as_matmul(a, b, sa, sb, so)
        ref = np.einsum(eq, a.astype(np.float64), b.astype(np.float64))
        times = {w: ([], []) for w in ways}
        for w in ways.values():
            w()
        for _ in range(args.rounds):
            for name, w in ways.items():
                c0, w0 = time.process_time(), time.perf_counter()
                w()
                times[name][0].append(time.perf_counter() - w0)
                times[name][1].append(time.process_time() - c0)
        for name, w in ways.items():
            wall, cpu = (np.median(t) * 1e3 for t in times[name])
            print(f"| {eq} | {name} | {wall:.2f} | {cpu:.2f} | {np.abs(w() - ref).max():.1e} |")
    print(f"load after {os.getloadavg()}")


def time_pair(rounds, calls):
    """``--pair`` (see the module docstring)."""
    from tensorweave.kernels.cpu import einsum_bias_kernels as ebk, gemm, gemm_tuning
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 128, 256)).astype(np.float32)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.05 for s in ((256, 512), (512, 256)))
    b1, b2 = (rng.standard_normal(n).astype(np.float32) for n in (512, 256))
    args = (a, w1, b1, w2, b2, "abc,cd->abd", "abd,de->abe", True, False)
    ref = np.maximum(a.astype(np.float64) @ w1 + b1, 0) @ w2 + b2
    parts = gemm.split_parts()
    print(f"cpu {gemm_tuning.cpu_model()}, load {os.getloadavg()}, parts {parts}")

    def forced(way):
        def run():
            ebk._pair_chosen.clear()
            ebk._pair_chosen[(a.shape, a.strides, w1.shape, w1.strides, w2.shape, w2.strides, "f", args[5],
                              args[6], parts)] = way
            for _ in range(calls):
                y = ebk.fused_einsum_pair(*args)
            return y
        return run
    ways = {"one": forced("one"), "rows": forced("rows")}
    times = {w: ([], [], []) for w in ways}
    for w in ways.values():
        w()
    for _ in range(rounds):
        for name, w in ways.items():
            c0, t0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
            w()
            for got, clock, start in zip(times[name], (time.perf_counter, time.process_time, time.thread_time),
                                         (w0, c0, t0)):
                got.append((clock() - start) / calls)
    print("| way | wall µs/call (median) | process CPU µs/call | calling thread's CPU µs/call | max abs diff |")
    print("|---|---|---|---|---|")
    for name, w in ways.items():
        wall, cpu, mine = (np.median(t) * 1e6 for t in times[name])
        print(f"| {name} | {wall:.0f} | {cpu:.0f} | {mine:.0f} | {np.abs(w() - ref).max():.1e} |")
    print(f"load after {os.getloadavg()}")


if __name__ == "__main__":
    main()
