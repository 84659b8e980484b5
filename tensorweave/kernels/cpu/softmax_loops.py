"""Compiled row loops (numba) of the last-axis ``Softmax`` over C-contiguous ``[M, N]`` rows, and
their NumPy twins (``nn_kernels._softmax_np``'s operations, the same bits; ``jit.njit_twin``),
chosen per shape class by ``loop_choice.Chosen``.

Why: attention's scores have short rows (the transformer's 64 keys, 4096 rows a step), and NumPy's
row reductions (``np.fmax.reduce``, ``np.sum`` along the last axis) pay a per-row setup that made
``Softmax`` the largest op of the transformer step (1.9 ms of caller CPU at load 5 for [32, 2, 64,
64], issue 18 session 18, tx22). :func:`shift` (the row's shift and the subtraction) and
:func:`normalize` (the row sum and the division) are one pass each; the exponential stays
NumPy's (``np.exp`` in place, between them), so its bits are NumPy's own.

The row sum is NumPy's pairwise summation in the rows' dtype (``_pairwise_sum`` of NumPy's
``loops_utils``: under 8 values one by one from 0; up to 128 eight accumulators started from the
first eight values, stepped by 8, added pairwise, then the tail; above that the two halves, the
first a multiple of 8 long, that tree walked with an explicit stack so the loops have no
recursive call and are built ahead of time: ``aot_kernels``), so ``np.sum(e, axis=-1)`` and the
loop agree bit for bit (tests/test_tx22_softmax_loops.py compares them over row lengths 1 to 1025).

>>> import numpy as np
>>> from tensorweave.kernels.cpu import softmax_loops
>>> e = np.zeros((1, 3), np.float32)
>>> softmax_loops.shift_twin(np.array([[1.0, 2.0, np.nan]], np.float32), e); e.tolist()
[[-1.0, 0.0, nan]]
"""
import numpy as np

from tensorweave.kernels.cpu import loop_choice
from tensorweave.kernels.cpu.jit import njit, njit_twin

#: NumPy's pairwise summation block (``PW_BLOCKSIZE``)
BLOCK = 128


def shift_twin(x, e):
    m = np.fmax.reduce(x, axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, np.zeros((), x.dtype))
    np.subtract(x, m, out=e)


@njit_twin(shift_twin)
def shift(x, e):
    """Per row: ``e = x - m``, ``m`` the row's largest value not NaN (``np.fmax``), 0 where ``m`` is
    infinite or the row all NaN (a maximum is exact: only the sign of a zero shift may differ from
    the twin's, which leaves ``exp`` of each difference unchanged). The maximum in eight lanes
    started at -inf (a NaN never replaces a lane: ``v > lane`` is false), so eight independent
    selects a step instead of one chain; a row whose lanes end at -inf (all -inf or NaN) is shifted
    by 0, as the twin's."""
    rows, n = x.shape
    zero = x.dtype.type(0.0)
    low = x.dtype.type(-np.inf)
    n8 = n - n % 8
    for r in range(rows):
        xr = x[r]
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = low
        for c in range(0, n8, 8):
            a0 = xr[c] if xr[c] > a0 else a0
            a1 = xr[c + 1] if xr[c + 1] > a1 else a1
            a2 = xr[c + 2] if xr[c + 2] > a2 else a2
            a3 = xr[c + 3] if xr[c + 3] > a3 else a3
            a4 = xr[c + 4] if xr[c + 4] > a4 else a4
            a5 = xr[c + 5] if xr[c + 5] > a5 else a5
            a6 = xr[c + 6] if xr[c + 6] > a6 else a6
            a7 = xr[c + 7] if xr[c + 7] > a7 else a7
        for c in range(n8, n):
            a0 = xr[c] if xr[c] > a0 else a0
        m = max(max(max(a0, a1), max(a2, a3)), max(max(a4, a5), max(a6, a7)))
        if not np.isfinite(m):
            m = zero
        er = e[r]
        for c in range(n):
            er[c] = xr[c] - m


#: levels of :func:`pairwise_sum`'s tree it has room for: each halves the length, so 64 covers any
#: int64 length; a level holds at most a join mark and a right half waiting on the node stack
DEPTH = 64


@njit
def block_sum(a, lo, n):
    """NumPy's sum of ``a[lo:lo + n]`` for ``n <= BLOCK`` (a leaf of :func:`pairwise_sum`): under 8
    values one by one from 0, else eight accumulators stepped by 8, added pairwise, then the tail."""
    if n < 8:
        res = a.dtype.type(0.0)
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - n % 8:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for k in range(i, n):
        res += a[lo + k]
    return res


@njit
def pairwise_sum(a, lo, n):
    """NumPy's pairwise sum of ``a[lo:lo + n]`` in ``a``'s dtype (see the module docstring).

    NumPy recurses: above :data:`BLOCK` values, the sum of the first ``n2`` (half, rounded down to
    a multiple of 8) plus the sum of the rest. Here the same tree is walked with an explicit
    stack, so the loop has no recursive call (plain loops for ``aot_build``, as every other built
    kernel): a node is popped as ``(lo, n)``; a leaf pushes its :func:`block_sum` on the value
    stack; a larger node pushes a join mark (size -1) under its right and left halves, and the
    mark, popped after both, adds the two values on top (left + right, NumPy's order)."""
    if n <= BLOCK:
        return block_sum(a, lo, n)
    nodes = np.empty((3 * DEPTH, 2), np.int64)
    values = np.empty(DEPTH + 1, a.dtype)
    nodes[0, 0], nodes[0, 1] = lo, n
    top, filled = 1, 0
    while top:
        top -= 1
        start, size = nodes[top, 0], nodes[top, 1]
        if size < 0:                            # both halves summed: join them
            filled -= 1
            values[filled - 1] = values[filled - 1] + values[filled]
        elif size <= BLOCK:
            values[filled] = block_sum(a, start, size)
            filled += 1
        else:
            half = size // 2
            half -= half % 8
            nodes[top, 0], nodes[top, 1] = start, -1
            nodes[top + 1, 0], nodes[top + 1, 1] = start + half, size - half
            nodes[top + 2, 0], nodes[top + 2, 1] = start, half
            top += 3
    return values[0]


def normalize_twin(e):
    e /= np.sum(e, axis=1, keepdims=True)


@njit_twin(normalize_twin)
def normalize(e):
    """Per row, in place: ``e /= sum(e)`` (NumPy's pairwise sum in the rows' dtype)."""
    for r in range(e.shape[0]):
        row = e[r]
        s = pairwise_sum(row, 0, row.shape[0])
        for c in range(row.shape[0]):
            row[c] = row[c] / s


def softmax_rows(x, out):
    """``out = softmax(x)`` along the last axis of C-contiguous ``[M, N]`` rows (N >= 1)."""
    shift(x, out)
    np.exp(out, out=out)
    normalize(out)


# Python callers: the compiled loop or its twin, chosen per shape class by measurement
shift, normalize = loop_choice.Chosen(shift), loop_choice.Chosen(normalize)
