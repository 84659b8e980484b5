"""MKL's GEMM against NumPy's BLAS in one process, on the mlp's training-step shapes and 2048²,
and what the tuner (kernels/cpu/gemm_tuning.py) picks for each, from an empty cache.

Timings interleave the two libraries call by call (a burst of load from other processes hits
both) and report medians. Run: ``python benchmarks/bench_gemm_backends.py [--reps N]``.
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
os.environ["TW_BLAS_TUNE"] = "1"

from tensorweave.kernels.cpu import gemm, gemm_tuning  # noqa: E402


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


def _mkl(a, b, out):
    op_a, op_b, op_c = gemm._operand(a), gemm._operand(b), gemm._operand(out)
    fn = gemm._gemm[a.dtype]
    (m, k), n = a.shape, b.shape[1]
    return lambda: fn(op_a[0], op_b[0], m, n, k, a, op_a[1], b, op_b[1], out, op_c[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=41)
    ap.add_argument("--threads", type=int, default=0, help="BLAS threads of both libraries (0: as is)")
    args = ap.parse_args()
    if args.threads:
        from threadpoolctl import threadpool_limits
        limits = threadpool_limits(args.threads)   # noqa: F841 (held for the run)
    if not gemm._gemm:
        raise SystemExit("MKL is not loaded (pip install 'tensorweave[mkl]')")
    print(f"CPU: {gemm_tuning.cpu_model()}, {os.cpu_count()} cores; numpy {np.__version__}; {gemm._mkl_version()}; "
          f"BLAS threads: {args.threads or 'default'}; load average {os.getloadavg()[0]:.1f}")
    print("| product (M×K×N) | MKL µs | NumPy µs | MKL GFLOP/s | NumPy GFLOP/s | NumPy/MKL time | tuner picked |")
    print("|---|---|---|---|---|---|---|")
    for name, a, b in _shapes():
        out = np.empty((a.shape[0], b.shape[1]), np.float32)
        runs = {"mkl": _mkl(a, b, out), "numpy": lambda a=a, b=b, out=out: np.matmul(a, b, out=out)}
        reps = args.reps if a.shape[0] * b.shape[1] * a.shape[1] < 1 << 30 else max(5, args.reps // 4)
        times = {k: [] for k in runs}
        for run in runs.values():
            run()
        for _ in range(reps):
            for k, run in runs.items():
                t0 = time.perf_counter()
                run()
                times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        flop = 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
        gemm.matmul(a, b)   # the tuner's own short timing, from an empty cache
        trans = (gemm._operand(a)[0] == gemm._TRANS, gemm._operand(b)[0] == gemm._TRANS)
        picked = gemm.choice(a.shape[0], b.shape[1], a.shape[1], np.float32, *trans)
        cls = gemm_tuning.shape_class(a.shape[0], b.shape[1], a.shape[1], "float32", *trans)
        if not gemm.tuner().choices[cls]["settled"]:
            picked += " (unsettled)"
        print(f"| {name} | {med['mkl'] * 1e6:.0f} | {med['numpy'] * 1e6:.0f} | {flop / med['mkl'] / 1e9:.0f} "
              f"| {flop / med['numpy'] / 1e9:.0f} | {med['numpy'] / med['mkl']:.2f} | {picked} |")


if __name__ == "__main__":
    main()
