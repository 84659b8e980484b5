"""Cases of the recurrent step loops built ahead of time (``aot_kernels``: the LSTM's
``_forward_rows`` / ``_backward_rows``, float32 and float64), for ``test_cold18_aot``'s check that
every built signature gives the JIT's bits: ``(kernel, args, output positions)`` as its ``_cases``."""
import numpy as np

from tensorweave.kernels.cpu import gemm, rnn_gemm
from tensorweave.kernels.cpu import lstm_kernels as lstm
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
