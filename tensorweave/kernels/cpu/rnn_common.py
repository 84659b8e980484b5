"""Shared plumbing of the fused recurrent kernels (``lstm_kernels.py``, ``gru_kernels.py``,
``simple_rnn_kernels.py``).

Every fused recurrent kernel has the same frame: one GEMM projects the input of all steps
(``x @ kernel``, written straight into the reserve space), a step loop runs per step one
small GEMM plus one compiled pass over the batch rows, and backpropagation through time ends
with three GEMMs over all ``[batch * time]`` rows (``dx``, ``d kernel``, ``d recurrent_kernel``);
the LSTM cuts these along time into spans run beside its step loop (``rnn_overlap``,
:class:`SpanGrads`, time-major operands).
The sequence-wide GEMMs go through ``gemm.py``; the step loops are compiled whole and call the
BLAS library from inside (``rnn_gemm.py``); numba's ``np.dot`` would load scipy's OpenBLAS,
whose spinning threads fight the other libraries'.

Layout: batch-major like the user's ``[batch, time, ...]`` arrays, so no transposing copies.
The reserve space (an output of raw bytes whose size ``ops/rnn_ops.py`` declares) is
``[batch, time, k * units]`` floats, indexed by the *original* time index (lining up with
``x``'s rows under ``go_backwards``), and it holds the state entering each step in its last
``units`` columns, so ``h_prev`` of all steps is one strided ``[batch * time, units]`` GEMM
operand. Outputs are in processed order.

Masks (``[batch, time]``, True = use the step) are handled per batch row in the compiled
passes; without a mask an all-true one is passed, so there is one code path.
float16/bfloat16 compute in float32.
"""
import numpy as np

from tensorweave.kernels.cpu import gemm, rnn_overlap
from tensorweave.kernels.cpu.util import low_precision


def work_dtype(x):
    return np.dtype(np.float32) if x.dtype in low_precision() else x.dtype


def contiguous(a, wd):
    """``a`` as a C-contiguous array of the work dtype (a copy only where needed). The compiled
    passes then always see the same argument types: one compilation per dtype."""
    return np.ascontiguousarray(a, dtype=wd)


def step_mask(mask, b, t):
    return np.ones((b, t), np.bool_) if mask is None else np.ascontiguousarray(mask, dtype=np.bool_)


def project_inputs(x, kernel, wd, res):
    """``x @ kernel`` for all steps, written into the reserve's first ``kernel.shape[1]`` columns."""
    b, t, f = x.shape
    rows = res.reshape(b * t, res.shape[2])
    gemm.matmul(contiguous(x, wd).reshape(b * t, f), contiguous(kernel, wd), out=rows[:, :kernel.shape[1]])


def time_major(x, wd):
    """``x`` (``[B, T, F]``) as a C-contiguous ``[T, B, F]`` array of the work dtype (a copy): the
    rows of a span of steps are then one block, a GEMM operand (``rnn_overlap``)."""
    return np.ascontiguousarray(np.swapaxes(x, 0, 1), dtype=wd)


class SpanGrads:
    """The input and weight gradients of a recurrence from its time-major pre-activation gradients
    ``dz`` (``[T, B, G]``), cut along time into ``n`` spans (``rnn_overlap``): per span two
    products, each writing its own output (``tasks``): ``dx`` and both weight gradients as one
    product, ``[x_t | h_prev]^T @ dz`` (``[F + U, G]``: one pass over the span's ``dz``, and a
    product twice as tall runs faster per multiply-add than two: 11.6 -> 10.9 ms over the lstm's
    80 steps on Zen 4, session 22). The weight gradient is the sum of the spans' parts added in
    ``order`` (default: the backward loop's, last span first) as they come
    (``rnn_overlap.OrderedSum``: a few part buffers, not ``n``). ``one_thread``: each product on
    one thread (they run beside the step loop); else on the library's threads."""

    def __init__(self, x, kernel, res, u, dz, wd, n, one_thread, order=None):
        t, b, g = dz.shape
        f = x.shape[2]
        order = list(range(n - 1, -1, -1)) if order is None else order
        self.x, self.kernel = contiguous(x, wd), contiguous(kernel, wd)
        self.res, self.u, self.dz, self.one_thread = res, u, dz, one_thread
        self.dx = np.empty((t, b, f), wd)
        self.dw = rnn_overlap.OrderedSum((f + u, g), wd, order)

    def tasks(self, i, a, e):
        """The products of span ``i`` (original steps ``[a, e)``), as two callables."""
        rows = self.dz[a:e].reshape(-1, self.dz.shape[2])
        f, u, one = self.x.shape[2], self.u, self.one_thread

        def dw():
            inputs = np.empty((e - a, self.x.shape[0], f + u), self.x.dtype)    # [x_t | h_prev], time-major
            inputs[:, :, :f] = np.swapaxes(self.x[:, a:e], 0, 1)
            inputs[:, :, f:] = np.swapaxes(self.res[:, a:e, self.res.shape[2] - u:], 0, 1)
            part = self.dw.buffer()
            gemm.matmul(inputs.reshape(-1, f + u).T, rows, out=part, one_thread=one)
            self.dw.put(i, part)

        def dx():
            gemm.matmul(rows, self.kernel.T, out=self.dx[a:e].reshape(-1, f), one_thread=one)
        return dw, dx

    def results(self):
        """``(dx [B, T, F], d kernel, d recurrent_kernel)`` (the two weight gradients are row
        blocks of one array: C-contiguous views)."""
        dw = self.dw.result()
        f = self.x.shape[2]
        return np.ascontiguousarray(np.swapaxes(self.dx, 0, 1)), dw[:f], dw[f:]


def reserve_bytes(res):
    """The ``[batch, time, cols]`` float reserve as the op's ``[batch, time, cols * itemsize]``
    bytes (batch first, so a batch split of the op splits its reserve along axis 0 too)."""
    return np.ascontiguousarray(res).view(np.uint8)


def reserve_floats(reserve, wd, b, t):
    """The inverse of ``reserve_bytes``."""
    return np.ascontiguousarray(reserve).view(wd)


def input_grads(x, kernel, dz, wd):
    """``dx`` (``[B, T, F]``) and the kernel's gradient from the pre-activation gradients
    ``dz`` (``[B, T, G]``, original time order)."""
    b, t, f = x.shape
    rows = dz.reshape(b * t, dz.shape[2])
    dx = gemm.matmul(rows, contiguous(kernel, wd).T).reshape(b, t, f)
    return dx, gemm.matmul(contiguous(x, wd).reshape(b * t, f).T, rows)


def h_prev_rows(res, u):
    """The states entering every step, ``[batch * time, units]`` (a strided view of the reserve)."""
    b, t, cols = res.shape
    return res.reshape(b * t, cols)[:, cols - u:]


def cast_all(dtype, *arrays):
    return tuple(a.astype(dtype, copy=False) for a in arrays)
