"""LSTM kernels (forward + backpropagation through time) with their sequence-wide products beside
the step loop (``rnn_overlap``) or not: wall time, process CPU time and NumPy's peak memory
(``tracemalloc``) per step, in interleaved rounds of one process (issue 18, session 13).

Modes: ``off`` (one span, products on the library's threads, ``TW_RNN_OVERLAP=0``'s path),
``inline`` (spans, but every task on the kernel's thread: the cost of cutting the products),
``overlap`` (spans on the helper thread: the default), ``overlap-held`` (``overlap`` with the
session-12 weight-gradient sum: one part buffer per span, summed at the end); ``MODE@N``: with spans of
``N`` steps (``rnn_overlap.CHUNK_STEPS``, session 22); ``overlap-three`` (session 13's two
weight-gradient products per span, before session 22 joined them). Also ``--loops``:
the same step with every loop compiled, every loop its twin, and chosen by measurement.

    python benchmarks/bench_rnn_overlap.py --rounds 7
"""
import argparse
import json
import os
import platform
import statistics
import time
import tracemalloc

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_var, None)

import numpy as np  # noqa: E402

from tensorweave.kernels.cpu import gemm, jit, loop_choice, rnn_common, rnn_overlap  # noqa: E402
from tensorweave.kernels.cpu import lstm_kernels as lk  # noqa: E402


class _HeldSpanGrads(rnn_common.SpanGrads):
    """Session 12's weight gradients: a buffer per span, summed in span order at the end."""

    def __init__(self, x, kernel, res, u, dz, wd, n, one_thread, order=None):
        super().__init__(x, kernel, res, u, dz, wd, n, one_thread, order)
        f, g = x.shape[2], dz.shape[2]
        self.xt = rnn_common.time_major(x, wd)
        self.dk_parts, self.drk_parts = np.empty((n, f, g), wd), np.empty((n, u, g), wd)

    def tasks(self, i, a, e):
        rows = self.dz[a:e].reshape(-1, self.dz.shape[2])
        f, u, one = self.xt.shape[2], self.u, self.one_thread

        def dx():
            gemm.matmul(rows, self.kernel.T, out=self.dx[a:e].reshape(-1, f), one_thread=one)

        def dk():
            gemm.matmul(self.xt[a:e].reshape(-1, f).T, rows, out=self.dk_parts[i], one_thread=one)

        def drk():
            h_prev = np.ascontiguousarray(np.swapaxes(self.res[:, a:e, self.res.shape[2] - u:], 0, 1))
            gemm.matmul(h_prev.reshape(-1, u).T, rows, out=self.drk_parts[i], one_thread=one)
        return dk, drk, dx

    def results(self):
        def total(parts):
            return parts[0] if len(parts) == 1 else parts.sum(axis=0)
        return (np.ascontiguousarray(np.swapaxes(self.dx, 0, 1)), total(self.dk_parts), total(self.drk_parts))


class _ThreeSpanGrads(rnn_common.SpanGrads):
    """Session 13's span products: ``d kernel`` and ``d recurrent_kernel`` as two products, each
    summed over spans as they come (session 22 made them one product, ``[x_t | h_prev]^T @ dz``)."""

    def __init__(self, x, kernel, res, u, dz, wd, n, one_thread, order=None):
        super().__init__(x, kernel, res, u, dz, wd, n, one_thread, order)
        f, g, order = x.shape[2], dz.shape[2], self.dw.order
        self.xt = rnn_common.time_major(x, wd)
        self.dk, self.drk = rnn_overlap.OrderedSum((f, g), wd, order), rnn_overlap.OrderedSum((u, g), wd, order)

    def tasks(self, i, a, e):
        rows = self.dz[a:e].reshape(-1, self.dz.shape[2])
        f, u, one = self.xt.shape[2], self.u, self.one_thread

        def dk():
            part = self.dk.buffer()
            gemm.matmul(self.xt[a:e].reshape(-1, f).T, rows, out=part, one_thread=one)
            self.dk.put(i, part)

        def drk():
            h_prev = np.ascontiguousarray(np.swapaxes(self.res[:, a:e, self.res.shape[2] - u:], 0, 1))
            part = self.drk.buffer()
            gemm.matmul(h_prev.reshape(-1, u).T, rows, out=part, one_thread=one)
            self.drk.put(i, part)
        return dk, drk, super().tasks(i, a, e)[1]

    def results(self):
        return np.ascontiguousarray(np.swapaxes(self.dx, 0, 1)), self.dk.result(), self.drk.result()


def _case(b, t, f, u, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, t, f)).astype(np.float32)
    h0, c0 = np.zeros((2, b, u), np.float32)
    k = (rng.standard_normal((f, 4 * u)) * 0.05).astype(np.float32)
    rk = (rng.standard_normal((u, 4 * u)) * 0.05).astype(np.float32)
    bias = np.zeros(4 * u, np.float32)
    attrs = dict(activation="tanh", recurrent_activation="sigmoid", go_backwards=False, zero_output_for_mask=False)

    def step():
        out, h, c, res = lk.lstm_sequence(x, h0, c0, k, rk, bias, **attrs)
        return lk.lstm_sequence_grad(x, h0, c0, k, rk, res, np.ones_like(out), np.zeros_like(h), np.zeros_like(c),
                                     **attrs)
    return step


def _set_mode(mode):
    mode, _, chunk = mode.partition("@")           # "overlap@16": spans of 16 steps
    rnn_overlap.CHUNK_STEPS = int(chunk) if chunk else _CHUNK
    rnn_overlap.ENABLED = mode != "off"
    rnn_common.SpanGrads = {"overlap-held": _HeldSpanGrads, "overlap-three": _ThreeSpanGrads}.get(mode, _ORIGINAL)
    rnn_overlap._helper.submit = (lambda job: None) if mode == "inline" else _SUBMIT


_ORIGINAL, _SUBMIT, _CHUNK = rnn_common.SpanGrads, rnn_overlap._helper.submit, rnn_overlap.CHUNK_STEPS


def _one(step):
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    w, c, th = time.perf_counter(), time.process_time(), time.thread_time()
    step()
    w, c, th = time.perf_counter() - w, time.process_time() - c, time.thread_time() - th
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return w, c, th, peak


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--shape", default="32,80,128,128", help="batch,time,features,units (the lstm workload's)")
    p.add_argument("--modes", default="off,inline,overlap,overlap-held")
    p.add_argument("--loops", action="store_true", help="A/B the loop choice instead (numba, numpy, auto)")
    a = p.parse_args()
    b, t, f, u = (int(v) for v in a.shape.split(","))
    step = _case(b, t, f, u)
    modes = ["numba", "numpy", "auto"] if a.loops else a.modes.split(",")
    for mode in modes * 2:                              # warm-up: compiles, the loop choice timed
        with loop_choice.forced(mode if a.loops else "numba"):
            if not a.loops:
                _set_mode(mode)
            step()
            jit.wait_for_compiles()
    got = {m: [] for m in modes}
    for r in range(a.rounds):
        for mode in modes if r % 2 == 0 else modes[::-1]:   # interleaved, alternating order
            with loop_choice.forced(mode if a.loops else "numba"):
                if not a.loops:
                    _set_mode(mode)
                got[mode].append(_one(step))
    _set_mode("overlap")
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    rows = {}
    for mode, xs in got.items():
        rows[mode] = {"wall_ms": round(statistics.median(x[0] for x in xs) * 1e3, 1),
                      "process_cpu_ms": round(statistics.median(x[1] for x in xs) * 1e3, 1),
                      "thread_cpu_ms": round(statistics.median(x[2] for x in xs) * 1e3, 1),
                      "numpy_peak_mb": round(statistics.median(x[3] for x in xs) / 2 ** 20, 1)}
    print(json.dumps({"shape_btfu": [b, t, f, u], "rounds": a.rounds, "cpu": cpu, "cores": os.cpu_count(),
                      "loadavg": open("/proc/loadavg").read().split()[:3], "gemm": gemm.library(),
                      "modes": rows}, indent=1))


if __name__ == "__main__":
    main()
