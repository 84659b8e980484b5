"""MKL's GEMM against NumPy's BLAS in one process, on the mlp's training-step shapes and 2048²,
each library on its own threads and on one thread, and the route the tuner
(kernels/cpu/gemm_tuning.py) takes for each product, from an empty cache.

How it times (why not call by call): each library runs a *block* of calls, the first untimed, and
the blocks alternate in rounds (a burst of load from other processes hits both); per-call medians
over the rounds. Timed call by call, each library's call starts while the other library's idle
workers still spin (OpenBLAS's ~2 ms, ``threads.IDLE_BLAS_SPIN_LOG2``; MKL's ``KMP_BLOCKTIME``
1 ms) on the second core: on the Intel Xeon of session 15 that took MKL's 128x784 @ 784x512 from
174-182 GFLOP/s to 93-124 and made MKL look 30 % slower than OpenBLAS (``--interleave call``
shows it). Columns: wall GFLOP/s; GFLOP per CPU-second of the process (``process_time``: on a
busy machine wall time measures the other processes, CPU time counts this one's work and its
spinning); one-thread GFLOP per CPU-second of the calling thread (``thread_time``: the kernels
alone, unaffected by load).

Run: ``python benchmarks/bench_gemm_backends.py [--rounds N] [--interleave block|call]``; the route
column is the opt-in per-class tuning's (``TW_BLAS_TUNE=1``), ``TW_BLAS_TUNE=0`` shows the default
path's (one-thread classes, splits).
"""
import argparse
import os
import statistics
import tempfile
import time

import numpy as np

# before tensorweave is imported: tuning on, into a throwaway cache
os.environ.setdefault("TW_TUNING_CACHE", os.path.join(tempfile.mkdtemp(), "gemm-tuning.json"))
os.environ.pop("TW_BLAS", None)
os.environ["TW_BLAS_TUNE"] = os.environ.get("TW_BLAS_TUNE", "1")

from tensorweave.kernels.cpu import gemm, gemm_route, gemm_tuning  # noqa: E402


def _shapes():
    """``(name, a, b)``: each Dense layer's forward product and its two backward ones."""
    rng = np.random.default_rng(0)
    rows = []
    for fan_in, fan_out in ((784, 512), (512, 512), (512, 10)):
        x = rng.standard_normal((128, fan_in)).astype(np.float32)
        w = rng.standard_normal((fan_in, fan_out)).astype(np.float32)
        dy = rng.standard_normal((128, fan_out)).astype(np.float32)
        rows += [(f"x@W 128x{fan_in}x{fan_out}", x, w),
                 (f"dY@W.T 128x{fan_out}x{fan_in}", dy, w.T),
                 (f"X.T@dY {fan_in}x128x{fan_out}", x.T, dy)]
    big = rng.standard_normal((2048, 2048)).astype(np.float32)
    rows.append(("2048²", big, big.T.copy()))
    return rows


def _runs(a, b, out):
    """``{name: run}``: MKL's threaded and one-thread calls, NumPy's threaded and one-thread ones.

    MKL's one-thread call is compiled for the operands first when no build serves it (a branch
    that changed ``gemm.py``, ``TW_AOT=0``): until then it runs its ``ctypes`` twin, which read
    3-7x slower than the compiled call on the Intel Xeon of issue 18 session 16 (9216x27 @ 27x16:
    439-474 µs of thread CPU against 150-156; OpenBLAS 244-301), so one-thread timings taken before
    the compile finished showed OpenBLAS 1.5-3x faster where the tuner's cache had MKL faster."""
    op_a, op_b, op_c = gemm._operand(a), gemm._operand(b), gemm._operand(out)
    (m, k), n = a.shape, b.shape[1]
    if not gemm._stub_compiled(a, b, out):
        from tensorweave.kernels.cpu import jit
        serial = gemm._gemm_serial[a.dtype]
        jit.compile_now(gemm._call_threads, *serial.args, op_a[0], op_b[0], m, n, k, a, op_a[1], b, op_b[1],
                        out, op_c[1])

    def mkl(fn):
        return lambda: fn(op_a[0], op_b[0], m, n, k, a, op_a[1], b, op_b[1], out, op_c[1])
    return {"mkl": (mkl(gemm._gemm[a.dtype]), time.process_time),
            "numpy": (lambda: np.matmul(a, b, out=out), time.process_time),
            "mkl1": (mkl(gemm._gemm_serial[a.dtype]), time.thread_time),
            "numpy1": (lambda: gemm._numpy_serial(a, b, out), time.thread_time)}


def _time(runs, rounds, calls, interleave):
    """``{name: (median wall s, median CPU s) per call}`` over ``rounds`` rounds."""
    got = {name: ([], []) for name in runs}
    for _ in range(rounds):
        if interleave == "call":
            for _ in range(calls):
                for name, (run, clock) in runs.items():
                    w0, c0 = time.perf_counter(), clock()
                    run()
                    got[name][0].append(time.perf_counter() - w0)
                    got[name][1].append(clock() - c0)
            continue
        for name, (run, clock) in runs.items():
            run()     # untimed: the other library's idle workers stop spinning meanwhile
            w0, c0 = time.perf_counter(), clock()
            for _ in range(calls):
                run()
            got[name][0].append((time.perf_counter() - w0) / calls)
            got[name][1].append((clock() - c0) / calls)
    return {name: (statistics.median(w), statistics.median(c)) for name, (w, c) in got.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--interleave", choices=("block", "call"), default="block",
                    help="alternate the libraries block by block (default) or call by call")
    ap.add_argument("--threads", type=int, default=0, help="BLAS threads of both libraries (0: as is)")
    args = ap.parse_args()
    if args.threads:
        from threadpoolctl import threadpool_limits
        limits = threadpool_limits(args.threads)   # noqa: F841 (held for the run)
    if not gemm._gemm or not gemm._gemm_serial or gemm._openblas_threads() is None:
        raise SystemExit("needs MKL (pip install 'tensorweave[mkl]') and NumPy's OpenBLAS")
    print(f"CPU: {gemm_tuning.cpu_model()} ({gemm_tuning.cpu_generation()}), {os.cpu_count()} cores; "
          f"numpy {np.__version__}; {gemm._mkl_version()}; BLAS threads: {args.threads or 'default'}; "
          f"timed by {args.interleave}; load average {os.getloadavg()[0]:.1f}")
    print("| product (M×K×N) | MKL GFLOP/s wall (CPU) | NumPy wall (CPU) | MKL 1 thread (CPU) "
          "| NumPy 1 thread (CPU) | route: tuning class → backend |")
    print("|---|---|---|---|---|---|")
    for name, a, b in _shapes():
        out = np.empty((a.shape[0], b.shape[1]), np.float32)
        flop = 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
        calls = max(1, min(20, int(2e8 / flop)))          # a block of ~1-2 ms at 100-200 GFLOP/s
        rounds = args.rounds if flop < 1e10 else max(3, args.rounds // 2)
        med = _time(_runs(a, b, out), rounds, calls, args.interleave)
        gf = {k: (flop / w / 1e9, flop / c / 1e9) for k, (w, c) in med.items()}
        gemm.matmul(a, b)   # the tuner's own short timing, from an empty cache
        cls, backend, settled = gemm_route.decision(a, b) or ("(stays in NumPy)", "numpy", True)
        route = f"{cls or '(not split)'} → {backend}" + ("" if settled else " (unsettled)")
        print(f"| {name} | {gf['mkl'][0]:.0f} ({gf['mkl'][1]:.0f}) | {gf['numpy'][0]:.0f} ({gf['numpy'][1]:.0f}) "
              f"| {gf['mkl1'][1]:.0f} | {gf['numpy1'][1]:.0f} | {route} |")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
