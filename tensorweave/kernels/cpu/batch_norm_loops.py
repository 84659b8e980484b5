"""Compiled loops (numba) of the fused batch-norm training kernels, channels last (``[M, C]``
rows), and their NumPy twins (same operations in the same order: the same bits) that run while
numba compiles them in the background (``jit.njit_twin``).

Sums are taken in float64 over rows added four at a time (pairwise inside the group, then into
the accumulator), as ``nn_loops.column_sums``: the order is fixed, so the bits are too. The
statistics are sums of ``x - shift`` (``shift`` a sample of each channel), so a large mean does
not cancel the variance away (``E[(x-k)^2] - E[x-k]^2`` with ``k`` near the mean).

The three sum loops are compiled with ``noalias`` (``jit.njit``): they add into ``s1``/``s2`` once per
group of rows, and without the promise each channel loop re-checks at run time whether those overlap
the rows (per pass, same-process A/B, load 12: 18-28 % less thread CPU at 16 channels, 7-25 % at 32,
7-11 % at 64; the same bits). ``batch_norm_kernels`` hands them fresh ``np.zeros`` accumulators and
vectors it computed (tests/test_res22_noalias.py checks every call). The elementwise passes gained
nothing measurable from it (within the load's noise either way) and do not set it.

>>> import numpy as np
>>> from tensorweave.kernels.cpu.batch_norm_loops import moments_twin
>>> s1, s2 = np.zeros(1), np.zeros(1)
>>> moments_twin(np.array([[1.0], [3.0]], np.float32), np.zeros(1), s1, s2)
>>> s1.tolist(), s2.tolist()
([4.0], [10.0])
"""
import numpy as np

from tensorweave.kernels.cpu.jit import njit, njit_twin


def _add_rows(acc, d):
    """``acc += d``'s rows as the compiled loops add them: four-row groups ``(r0 + r1) + (r2 + r3)``
    one after another, then the remaining rows one by one."""
    m4 = d.shape[0] // 4 * 4
    g = d[:m4].reshape(-1, 4, d.shape[1])
    parts = np.concatenate([acc[None], (g[:, 0] + g[:, 1]) + (g[:, 2] + g[:, 3]), d[m4:]])
    acc[:] = np.cumsum(parts, axis=0)[-1]   # cumsum adds row after row: the loop's order


def moments_twin(x, shift, s1, s2):
    d = x.astype(np.float64) - shift
    _add_rows(s1, d)
    _add_rows(s2, d * d)


@njit_twin(moments_twin, noalias=True)
def moments(x, shift, s1, s2):
    """``s1[c] += sum(x[:, c] - shift[c])``, ``s2[c] += sum((x[:, c] - shift[c]) ** 2)`` in float64."""
    m, n = x.shape
    i = 0
    while i + 4 <= m:
        for c in range(n):
            d0 = np.float64(x[i, c]) - shift[c]
            d1 = np.float64(x[i + 1, c]) - shift[c]
            d2 = np.float64(x[i + 2, c]) - shift[c]
            d3 = np.float64(x[i + 3, c]) - shift[c]
            s1[c] += (d0 + d1) + (d2 + d3)
            s2[c] += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3)
        i += 4
    for r in range(i, m):
        for c in range(n):
            d = np.float64(x[r, c]) - shift[c]
            s1[c] += d
            s2[c] += d * d


def grad_sums_twin(dy, x, mean, s1, s2):
    g = dy.astype(np.float64)
    _add_rows(s1, g)
    _add_rows(s2, g * (x.astype(np.float64) - mean))


@njit(inline="always")
def _add_group(s1, s2, c, g0, g1, g2, g3, x, i, mean):
    """Channel ``c``'s gradient sums of rows ``i:i+4`` (``g0..g3``: their ``dy`` in float64):
    ``s1[c] += (g0 + g1) + (g2 + g3)``, ``s2[c] +=`` the same grouping of ``g * (x - mean)``. The
    one accumulation of the three ``grad_sums`` loops (inlined into each: numba's IR, no call)."""
    s1[c] += (g0 + g1) + (g2 + g3)
    s2[c] += ((g0 * (np.float64(x[i, c]) - mean[c]) + g1 * (np.float64(x[i + 1, c]) - mean[c]))
              + (g2 * (np.float64(x[i + 2, c]) - mean[c]) + g3 * (np.float64(x[i + 3, c]) - mean[c])))


@njit(inline="always")
def _add_row(s1, s2, c, g, x, r, mean):
    """:func:`_add_group` of one row ``r`` (the rows after the last group of four)."""
    s1[c] += g
    s2[c] += g * (np.float64(x[r, c]) - mean[c])


@njit_twin(grad_sums_twin, noalias=True)
def grad_sums(dy, x, mean, s1, s2):
    """``s1[c] += sum(dy[:, c])``, ``s2[c] += sum(dy[:, c] * (x[:, c] - mean[c]))`` in float64:
    the two reductions of the gradient in one pass over ``dy`` and ``x``."""
    m, n = x.shape
    i = 0
    while i + 4 <= m:
        for c in range(n):
            _add_group(s1, s2, c, np.float64(dy[i, c]), np.float64(dy[i + 1, c]), np.float64(dy[i + 2, c]),
                       np.float64(dy[i + 3, c]), x, i, mean)
        i += 4
    for r in range(i, m):
        for c in range(n):
            _add_row(s1, s2, c, np.float64(dy[r, c]), x, r, mean)


def scale_shift_twin(x, a, b, y):
    np.multiply(x, a, out=y)
    np.add(y, b, out=y)


@njit_twin(scale_shift_twin)
def scale_shift(x, a, b, y):
    """``y = x * a + b`` per channel (``a``, ``b`` in ``y``'s dtype): the normalisation, its
    scale and its offset in one pass."""
    m, n = x.shape
    for r in range(m):
        for c in range(n):
            y[r, c] = x[r, c] * a[c] + b[c]


def input_grad_twin(dy, x, mean, a, b, k, dx):
    t = np.subtract(x, mean, out=dx)
    t *= b
    t += dy * a
    t += k


@njit_twin(input_grad_twin)
def input_grad(dy, x, mean, a, b, k, dx):
    """``dx = (x - mean) * b + dy * a + k`` per channel (all in ``dx``'s dtype): the input
    gradient of the normalisation in one pass."""
    m, n = x.shape
    for r in range(m):
        for c in range(n):
            dx[r, c] = ((x[r, c] - mean[c]) * b[c] + dy[r, c] * a[c]) + k[c]


# ---- with the ReLU after the batch norm (``FusedBatchNormTrainingRelu`` and its gradient) ----------
def scale_shift_relu_twin(x, a, b, y):
    scale_shift_twin(x, a, b, y)
    np.maximum(y, np.zeros((), y.dtype), out=y)


@njit_twin(scale_shift_relu_twin)
def scale_shift_relu(x, a, b, y):
    """``y = max(x * a + b, 0)`` per channel: :func:`scale_shift` then ``Relu``'s
    ``np.maximum`` (NaN stays NaN), in one pass."""
    m, n = x.shape
    zero = y.dtype.type(0)
    for r in range(m):
        for c in range(n):
            y[r, c] = np.maximum(x[r, c] * a[c] + b[c], zero)


def _masked(g, f):
    """``ReluGrad``'s select: ``g`` where ``f > 0``, else 0."""
    return np.where(f > 0, g, np.zeros((), g.dtype))


@njit
def _live(gv, fv):
    """:func:`_masked` of one element, both already loaded: ``gv`` where ``fv > 0``, else 0. Why
    loaded first: in ``g[r, c] if f[r, c] > 0 else 0`` the load of ``g`` is conditional, LLVM may
    not move it out of the branch (it cannot prove the address readable), and the channel loop
    stayed scalar; with both loads ahead the select is a vector blend (AMD EPYC, AVX2, one thread
    at load 14, the same bits: ``grad_sums_relu`` 65536x16 1349 -> 675 µs, the select's 1188 -> 798,
    ``input_grad_relu`` 1405 -> 971; 0.66-0.96x at 32-64 channels; issue 18, res26). A plain
    ``njit`` (LLVM inlines it): with numba's ``inline="always"`` the ahead-of-time build of
    ``nogil_ops.run_program``, built after this module, failed to type (pycc, numba 0.68)."""
    return gv if fv > 0 else type(gv)(0)


def grad_sums_relu_twin(g, f, x, mean, s1, s2):
    grad_sums_twin(_masked(g, f), x, mean, s1, s2)


@njit_twin(grad_sums_relu_twin, noalias=True)
def grad_sums_relu(g, f, x, mean, s1, s2):
    """:func:`grad_sums` of ``dy = g where f > 0 else 0`` (``ReluGrad(g, f)``), read on the fly."""
    m, n = x.shape
    i = 0
    while i + 4 <= m:
        for c in range(n):
            g0, g1 = np.float64(_live(g[i, c], f[i, c])), np.float64(_live(g[i + 1, c], f[i + 1, c]))
            g2, g3 = np.float64(_live(g[i + 2, c], f[i + 2, c])), np.float64(_live(g[i + 3, c], f[i + 3, c]))
            _add_group(s1, s2, c, g0, g1, g2, g3, x, i, mean)
        i += 4
    for r in range(i, m):
        for c in range(n):
            _add_row(s1, s2, c, np.float64(_live(g[r, c], f[r, c])), x, r, mean)


def input_grad_relu_twin(g, f, x, mean, a, b, k, dx):
    input_grad_twin(_masked(g, f), x, mean, a, b, k, dx)


@njit_twin(input_grad_relu_twin)
def input_grad_relu(g, f, x, mean, a, b, k, dx):
    """:func:`input_grad` of ``dy = g where f > 0 else 0`` (``ReluGrad(g, f)``), read on the fly."""
    m, n = x.shape
    for r in range(m):
        for c in range(n):
            dx[r, c] = ((x[r, c] - mean[c]) * b[c] + _live(g[r, c], f[r, c]) * a[c]) + k[c]


# ---- with a residual add and the ReLU after the batch norm (``FusedBatchNormTrainingAddRelu``) -----
def scale_shift_add_relu_twin(x, s, a, b, y):
    scale_shift_twin(x, a, b, y)
    np.add(y, s, out=y)
    np.maximum(y, np.zeros((), y.dtype), out=y)


@njit_twin(scale_shift_add_relu_twin)
def scale_shift_add_relu(x, s, a, b, y):
    """``y = max((x * a + b) + s, 0)`` per channel: :func:`scale_shift`, the residual ``AddV2``
    of ``s`` (the shortcut) and ``Relu`` in one pass (a residual block's end: three passes
    over the activations became one)."""
    m, n = x.shape
    zero = y.dtype.type(0)
    for r in range(m):
        for c in range(n):
            y[r, c] = np.maximum((x[r, c] * a[c] + b[c]) + s[r, c], zero)


def grad_sums_relu_select_twin(g, f, x, dz, mean, s1, s2):
    dz[:] = _masked(g, f)
    grad_sums_twin(dz, x, mean, s1, s2)


@njit_twin(grad_sums_relu_select_twin, noalias=True)
def grad_sums_relu_select(g, f, x, dz, mean, s1, s2):
    """:func:`grad_sums_relu` that also writes the select ``dz = g where f > 0 else 0``: where the
    ``ReluGrad`` has other readers (a residual block's shortcut), its pass goes into the sums'."""
    m, n = x.shape
    i = 0
    while i + 4 <= m:
        for c in range(n):
            d0, d1 = _live(g[i, c], f[i, c]), _live(g[i + 1, c], f[i + 1, c])
            d2, d3 = _live(g[i + 2, c], f[i + 2, c]), _live(g[i + 3, c], f[i + 3, c])
            dz[i, c], dz[i + 1, c], dz[i + 2, c], dz[i + 3, c] = d0, d1, d2, d3
            _add_group(s1, s2, c, np.float64(d0), np.float64(d1), np.float64(d2), np.float64(d3), x, i, mean)
        i += 4
    for r in range(i, m):
        for c in range(n):
            d = _live(g[r, c], f[r, c])
            dz[r, c] = d
            _add_row(s1, s2, c, np.float64(d), x, r, mean)
