"""The ways a threaded product of few rows can run, side by side per shape class (issue 18, enc25):
one thread (the class's one-thread library), MKL's threads (workers sent to sleep after the call,
as ``gemm._threaded_choice`` times them, and left spinning), and the product split by rows or
columns over the intra-op threads (``gemm._run_split``), with what this machine's tuning file holds
for the class and whether the calling thread had its core (``own_core.had_core``) at the start.

Each way runs blocks of ``--calls`` calls, the ways alternating in ``--rounds`` rounds (a burst of
other processes' load hits every way); medians per call of the wall time and of the process's CPU
time (all threads: a helper's block and MKL's workers count). Default shapes: encoder2_predict's
products at one sequence of 128 (Q/K/V group, output projection, both feed-forward layers);
``--shapes mlp``: the mlp training step's nine (each Dense layer's ``x @ W``, ``dY @ W.T`` and
``X.T @ dY``; a shape's ``:NT`` / ``:TN`` suffix reads that operand transposed, as the step does).
Each line also names the route ``gemm.matmul`` takes for the product here (``gemm_route.decision``:
class, backend, settled) and that class's entry in the tuning file.

    PYTHONPATH=$PWD python benchmarks/bench_small_m.py [--shapes mlp|128x256x768,128x512x784:NT] [--rounds 5]

Timings are never asserted in tests; figures live in BENCHMARKS.md (with the load printed here).
"""
import argparse
import functools
import os
import statistics
import time

import numpy as np

from tensorweave.kernels.cpu import gemm, gemm_route, own_core

SHAPES = "128x256x768,128x256x256,128x256x512,128x512x256"      # m x k x n
#: the mlp step's products (batch 128; layers 784-512-512-10), m x k x n with the transposed operand
MLP = ",".join(f"128x{i}x{o},128x{o}x{i}:NT,{i}x128x{o}:TN" for i, o in ((784, 512), (512, 512), (512, 10)))


def operands(shape, rng):
    """``(a, b)`` float32 of a ``MxKxN[:XY]`` shape: ``X``/``Y`` ``T`` reads that operand as the
    transpose of a C-contiguous array (a weight's ``W.T``, an input's ``X.T``).

    >>> a, b = operands("4x3x2:TN", np.random.default_rng(0))
    >>> a.shape, a.flags.f_contiguous, b.shape, b.flags.c_contiguous
    ((4, 3), True, (3, 2), True)
    """
    dims, _, flags = shape.partition(":")
    m, k, n = (int(x) for x in dims.split("x"))
    ta, tb = ((flags or "NN")[i] == "T" for i in (0, 1))
    a = rng.standard_normal((k, m) if ta else (m, k), np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n), np.float32)
    return (a.T if ta else a), (b.T if tb else b)


def ways(a, b, parts):
    """``{way: run()}`` of one ``a @ b`` float32 product into one output."""
    (m, k), n = a.shape, b.shape[1]
    out = np.empty((m, n), np.float32)
    op_a, op_b, _, _, _, seen = gemm._product(a, b)
    op_c = (gemm._NO_TRANS, n)
    mkl = gemm._mkl_runner(gemm._gemm[a.dtype], a, b, out, op_a, op_b, op_c, m, n, k)
    got = {"one": functools.partial(gemm._run_one, a, b, out, op_a, op_b, op_c, m, n, k, seen),
           "mkl": gemm._sleeping_after(mkl), "mkl-spin": mkl}
    for axis in ("rows", "cols"):
        got[axis] = functools.partial(gemm._run_split, axis, a, b, out, op_a, op_b, op_c, k, parts)
    return got


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=SHAPES, help="m x k x n[:NT|TN] products, comma-separated, or mlp")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=40, help="calls per way and round")
    args = p.parse_args(argv)
    parts = max(2, gemm.split_parts())
    rng = np.random.default_rng(0)
    print(f"load {os.getloadavg()}, {parts} parts, serial_work {gemm.serial_work(np.float32)}")
    for shape in (MLP if args.shapes == "mlp" else args.shapes).split(","):
        a, b = operands(shape, rng)
        gemm.matmul(a, b)                       # its class chosen (timed, where quiet) as in a step
        route = gemm_route.decision(a, b)
        entry = gemm.tuner().choices.get(route[0]) if route else None
        runs = ways(a, b, parts)
        had = own_core.had_core(runs["one"])
        for run in runs.values():
            run()
        wall, cpu = {w: [] for w in runs}, {w: [] for w in runs}
        for r in range(args.rounds):
            for way in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                w0, c0 = time.perf_counter(), time.process_time()
                for _ in range(args.calls):
                    runs[way]()
                wall[way].append((time.perf_counter() - w0) / args.calls * 1e6)
                cpu[way].append((time.process_time() - c0) / args.calls * 1e6)
        cells = "  ".join(f"{w} {statistics.median(wall[w]):.0f}/{statistics.median(cpu[w]):.0f}" for w in runs)
        print(f"{shape} (µs wall/CPU) {cells}; had its core: {had}; route: {route}; file: {entry}")
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
