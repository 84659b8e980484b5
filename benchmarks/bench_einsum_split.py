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

``--tail``: instead, encoder2_predict's block after its attention (``FusedBlockTail``: the output
projection, residual + layer norm, the feed-forward pair, residual + layer norm; issue 18, enc29)
on each way forced, ``"one"`` (the four kernels) and ``"rows"`` (blocks of rows, the whole chain
each, over the intra-op threads), as ``--pair``.

``--heads``: instead, encoder2_predict's Q/K/V group and attention (``FusedHeadAttention``; enc29)
on each way forced, ``"one"`` (the two kernels) and ``"rows"`` (blocks of heads, their projection
columns and attention each, over the intra-op threads), as ``--pair``.
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
    p.add_argument("--tail", action="store_true", help="time FusedBlockTail's two ways instead")
    p.add_argument("--heads", action="store_true", help="time FusedHeadAttention's two ways instead")
    p.add_argument("--calls", type=int, default=20, help="calls per round (--pair, --tail, --heads)")
    args = p.parse_args(argv)
    if args.pair:
        return time_pair(args.rounds, args.calls)
    if args.tail:
        return time_tail(args.rounds, args.calls)
    if args.heads:
        return time_heads(args.rounds, args.calls)
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
    from tensorweave.kernels.cpu import einsum_bias_kernels as ebk, gemm
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 128, 256)).astype(np.float32)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.05 for s in ((256, 512), (512, 256)))
    b1, b2 = (rng.standard_normal(n).astype(np.float32) for n in (512, 256))
    args = (a, w1, b1, w2, b2, "abc,cd->abd", "abd,de->abe", True, False)
    ref = np.maximum(a.astype(np.float64) @ w1 + b1, 0) @ w2 + b2
    key = (a.shape, a.strides, w1.shape, w1.strides, w2.shape, w2.strides, "f", args[5], args[6], gemm.split_parts())
    _time_ways(ebk._pair_chosen, key, lambda: ebk.fused_einsum_pair(*args), ref, rounds, calls)


def time_tail(rounds, calls):
    """``--tail`` (see the module docstring)."""
    from tensorweave.kernels.cpu import block_tail_kernels as btk, gemm
    rng = np.random.default_rng(0)
    r = lambda *s, scale=1.0: (rng.standard_normal(s) * scale).astype(np.float32)     # noqa: E731
    ops = (r(1, 128, 4, 64), r(4, 64, 256, scale=0.06), r(256), r(1, 128, 256), 1 + r(256, scale=0.1), r(256),
           r(256, 512, scale=0.06), r(512), r(512, 256, scale=0.04), r(256), 1 + r(256, scale=0.1), r(256))
    attrs = dict(proj="abcd,cde->abe", first="abc,cd->abd", second="abd,de->abe", relu0=False, relu1=True,
                 relu2=False, eps1=1e-5, eps2=1e-5, rms1=False, rms2=False)
    h, wo, bo, x, g1, be1, w1, b1, w2, b2, g2, be2 = (o.astype(np.float64) for o in ops)

    def norm(v, g, b):
        return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-5) * g + b
    y1 = norm(x + np.einsum("abcd,cde->abe", h, wo) + bo, g1, be1)
    ref = norm(y1 + np.maximum(y1 @ w1 + b1, 0) @ w2 + b2, g2, be2)
    key = (h.shape, ops[0].strides, x.shape, ops[3].strides, wo.shape, ops[1].strides, w1.shape, ops[6].strides,
           w2.shape, ops[8].strides, "f", attrs["proj"], attrs["first"], attrs["second"], gemm.split_parts())
    _time_ways(btk._chosen, key, lambda: btk.block_tail(*ops, **attrs), ref, rounds, calls)


def time_heads(rounds, calls):
    """``--heads`` (see the module docstring)."""
    from tensorweave.kernels.cpu import gemm, head_attention_kernels as hak
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 128, 256)).astype(np.float32)
    ops = [(rng.standard_normal((256, 4, 64)) * 0.06).astype(np.float32) for _ in range(3)] + \
        [rng.standard_normal((4, 64)).astype(np.float32) for _ in range(3)]
    for w in ops:
        w.flags.writeable = False       # (as a variable's value: the stacks are kept)
    group = dict(equation="abc,cfde->abfde", count=3, weight_axis=1, out_axis=2, bias=True, relu=False,
                 scales=(None, 0.125, None))
    att = dict(dot="aecd,abcd->acbe", combine="acbe,aecd->abcd", at=(0, 1, 2))
    k, q, v = (np.einsum("abc,cde->abde", x.astype(np.float64), ops[i]) + ops[3 + i] for i in range(3))
    s = np.einsum(att["dot"], k, q * 0.125)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum(att["combine"], p / p.sum(-1, keepdims=True), v)
    key = (x.shape, x.strides, ops[0].shape, "f", group["equation"], 3, att["at"], gemm.split_parts())
    _time_ways(hak._chosen, key, lambda: hak.head_attention(x, *ops, **group, **att), ref, rounds, calls,
               ("one", "rows"))


def _time_ways(chosen, key, call, ref, rounds, calls, names=("one", "rows")):
    """``call()`` with ``chosen[key]`` forced ``"one"`` and ``"rows"`` in turn: interleaved rounds of
    ``calls`` calls, a table of wall, process CPU and calling thread's CPU per call (medians)."""
    from tensorweave.kernels.cpu import gemm, gemm_tuning
    print(f"cpu {gemm_tuning.cpu_model()}, load {os.getloadavg()}, parts {gemm.split_parts()}")

    def forced(way):
        def run():
            chosen.clear()
            chosen[key] = way
            for _ in range(calls):
                y = call()
            return y
        return run
    ways = {name: forced(name) for name in names}
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
    outs = {name: w() for name, w in ways.items()}
    for name in ways:
        wall, cpu, mine = (np.median(t) * 1e6 for t in times[name])
        print(f"| {name} | {wall:.0f} | {cpu:.0f} | {mine:.0f} | {np.abs(outs[name] - ref).max():.1e} |")
    print(f"the two ways' bits equal: {np.array_equal(*outs.values())}; load after {os.getloadavg()}")


if __name__ == "__main__":
    main()
