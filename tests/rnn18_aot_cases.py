"""Cases of the recurrent step loops built ahead of time (``aot_kernels``: the LSTM's, GRU's and
SimpleRNN's ``_forward_rows`` / ``_backward_rows``, float32 and float64), for ``test_cold18_aot``'s check that
every built signature gives the JIT's bits: ``(kernel, args, output positions)`` as its ``_cases``."""
import numpy as np

from tensorweave.kernels.cpu import gemm, rnn_gemm
from tensorweave.kernels.cpu import gru_kernels as gru
from tensorweave.kernels.cpu import lstm_kernels as lstm
from tensorweave.kernels.cpu import simple_rnn_kernels as simple
from tensorweave.kernels.cpu.rnn_activations import CODES


def rnn_cases(seed=18):
    """One forward and one backward span per dtype, on each library the loops can call."""
    rng = np.random.default_rng(seed)
    b, t, u = 3, 6, 4
    for dtype in (np.float32, np.float64):
        plans = []
        found = rnn_gemm.openblas_gemm(dtype)
        if found is not None:
            plans.append((found[1], found[0]))
        if gemm._gemm_serial:
            plans.append((rnn_gemm.LP64, gemm._gemm_serial[np.dtype(dtype)].args[2]))
        for interface, fn in plans:
            def r(*shape):
                return rng.standard_normal(shape).astype(dtype)
            mask = rng.random((b, t)) > 0.3
            act, ract = CODES["tanh"], CODES["sigmoid"]
            fwd = (interface, fn, r(2, b, u), r(2, b, u), r(u, 4 * u), np.zeros((b, 4 * u), dtype), r(t, b, 4 * u),
                   np.zeros((b, t, 7 * u), dtype), r(4 * u), np.zeros((b, t, u), dtype), mask, act, ract, False,
                   True, 1, 5)
            yield lstm._forward_rows, fwd, (2, 3, 5, 7, 9)
            res = rng.random((b, t, 7 * u)).astype(dtype)
            bwd = (interface, fn, res, r(b, t, u), np.zeros((t, b, 4 * u), dtype), r(b, u), r(b, u), r(b, u),
                   np.zeros((b, u), dtype), np.zeros(7 * u, dtype), r(4 * u, u), mask, act, ract, True, False, 0, 6,
                   -1)
            yield lstm._backward_rows, bwd, (4, 5, 6, 7, 8, 9)
            yield from _gru_simple_cases(r, rng, mask, interface, fn, dtype, b, t, u, act, ract)


def _gru_simple_cases(r, rng, mask, interface, fn, dtype, b, t, u, act, ract):
    def zeros(*shape):
        return np.zeros(shape, dtype)
    for reset_after in (True, False):
        n = 3 if reset_after else 2
        rk = r(u, 3 * u)
        rk_zr, rk_h = (rk, rk) if reset_after else (rk[:, :2 * u].copy(), rk[:, 2 * u:].copy())
        res = zeros(b, t, 5 * u)
        res[:, :, :3 * u] = r(b, t, 3 * u)
        fwd = (interface, fn, r(b, u), zeros(b, u), rk_zr, rk_h, zeros(b, n * u), zeros(b, u), res, r(3 * u),
               r(3 * u), zeros(b, t, u), mask, act, ract, reset_after, False, reset_after)
        yield gru._forward_rows, fwd, (2, 3, 6, 7, 8, 11)
        rk_t = r(3 * u, u)
        bwd = (interface, fn, rng.random((b, t, 5 * u)).astype(dtype), r(b, t, u), zeros(b, t, 3 * u),
               zeros(b, t, 3 * u) if reset_after else zeros(1, 1, 1), r(b, u), zeros(b, u), zeros(b, u),
               zeros(b, u), zeros(4 * u), rk_t, rk_t[:2 * u].copy(), rk_t[2 * u:].copy(), mask, act, ract,
               reset_after, True, False)
        yield gru._backward_rows, bwd, (4, 5, 6, 7, 8, 9)
    res = zeros(b, t, 2 * u)
    res[:, :, :u] = r(b, t, u)
    fwd = (interface, fn, r(b, u), zeros(b, u), r(u, u), zeros(b, u), res, r(u), zeros(b, t, u), mask, act, True,
           False)
    yield simple._forward_rows, fwd, (2, 3, 5, 6, 8)
    bwd = (interface, fn, rng.random((b, t, 2 * u)).astype(dtype), r(b, t, u), zeros(b, t, u), r(b, u), zeros(b, u),
           zeros(b, u), zeros(u), r(u, u), mask, act, False, True)
    yield simple._backward_rows, bwd, (4, 5, 6, 7, 8)
