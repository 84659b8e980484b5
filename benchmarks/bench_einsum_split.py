"""Attention's stacked Einsum products (issue 18, enc18): one batched call on MKL's threads
against the stack split over the cores (``kernels/cpu/einsum_matmul.py``), interleaved rounds,
wall and process CPU time per call; the encoder2 workload's shapes (batch 16, 4 heads, 128
positions, key size 64).

    PYTHONPATH=$PWD python benchmarks/bench_einsum_split.py --rounds 20 [--old /path/to/old/checkout]

``--old``: also time an older checkout's ``Einsum`` kernel (its ``kernels/cpu/linalg_kernels.py``
loaded from that path beside this one, the same GEMM module under it) in the same rounds.
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
    args = p.parse_args(argv)
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


if __name__ == "__main__":
    main()
