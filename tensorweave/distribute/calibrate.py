"""The planner's exchange rate between work and bytes moved, measured on this machine.

The planner weighs a signature's boxing bytes against a rank's work (a contraction's FLOPs /
``planner.FLOPS_PER_BYTE``). :func:`measure` times what the two cost on the calling thread: a
float32 GEMM of the planner's typical size (FLOP/s) and what a byte moved between in-process ranks
costs, a copy of a buffer of a few MB (bytes/s) — best of ``repeat`` each (the least disturbed
run on a shared machine). :func:`calibrate` sets ``FLOPS_PER_BYTE`` to the ratio
rounded to two significant digits. It is opt-in (``TW_PLANNER_CALIBRATE=1`` calibrates before
the first plan of a process), so plans stay reproducible by default; ``bench_distribute.py``
prints the measurement beside its figures.

>>> r = measure(repeat=2, n=64, nbytes=1 << 16)
>>> r["flops_per_s"] > 0 and r["bytes_per_s"] > 0 and r["flops_per_byte"] > 0
True
"""
import os
import time

import numpy as np

_done = [False]


def _best(fn, repeat):
    fn()
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return max(best, 1e-9)


def measure(repeat=7, n=256, nbytes=4 << 20):
    """``{"flops_per_s", "bytes_per_s", "flops_per_byte"}`` on the calling thread (its BLAS threads)."""
    from tensorweave.kernels.cpu import gemm
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    flops = 2.0 * n ** 3 / _best(lambda: gemm.matmul(a, b), repeat)
    x = np.ones(nbytes // 4, np.float32)
    out = np.empty_like(x)
    moved = x.nbytes / _best(lambda: np.copyto(out, x), repeat)
    return {"flops_per_s": flops, "bytes_per_s": moved, "flops_per_byte": flops / moved}


def calibrate(**kwargs):
    """Measures (:func:`measure`) and sets ``planner.FLOPS_PER_BYTE``; returns the measurement."""
    from tensorweave.distribute import planner
    r = measure(**kwargs)
    planner.FLOPS_PER_BYTE = float(f"{r['flops_per_byte']:.2g}")
    _done[0] = True
    return r


def calibrate_once_if_asked():
    """Calibrates before the process's first plan when ``TW_PLANNER_CALIBRATE=1``."""
    if not _done[0] and os.environ.get("TW_PLANNER_CALIBRATE", "0") == "1":
        calibrate()
    _done[0] = True


__all__ = ["measure", "calibrate", "calibrate_once_if_asked"]
