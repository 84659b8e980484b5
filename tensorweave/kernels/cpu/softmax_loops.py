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

:func:`exp_in_place` is a float32 exponential in vector lanes for the fused attention's score
tiles (``attention_kernels.exp_tiles``: the inference and training steps), within 1 ulp of ``e^x``
but not NumPy's bits; ``Softmax`` keeps NumPy's ``exp``.

>>> import numpy as np
>>> from tensorweave.kernels.cpu import softmax_loops
>>> e = np.zeros((1, 3), np.float32)
>>> softmax_loops.shift_twin(np.array([[1.0, 2.0, np.nan]], np.float32), e); e.tolist()
[[-1.0, 0.0, nan]]
"""
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

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


@intrinsic
def _float32_of(typingctx, bits):
    """The float32 whose bits are the int32 ``bits`` (a bitcast: no instruction)."""
    if bits != types.int32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


_f = np.float32
#: :func:`exp_in_place`'s input range: above it ``e^x`` is inf, below it rounds to 0 (``e^-104``
#: is under half the smallest subnormal float32); NaN passes through
EXP_LOW, EXP_HIGH = _f(-104.0), _f(89.0)
_LOG2E, _HALF, _ONE = _f(1.4426950408889634), _f(0.5), _f(1.0)
#: ln 2 in two parts (Cody and Waite): ``k * LN2_HI`` is exact for the ``k`` of the range
_LN2_HI, _LN2_LO = _f(0.693359375), _f(-2.12194440e-4)
#: ``e^r = 1 + r + r^2 P(r)`` for ``|r| <= ln 2 / 2``: Cephes' ``expf`` polynomial (relative error
#: about 1e-7 in float32 arithmetic)
_P0, _P1, _P2 = _f(1.9875691500e-4), _f(1.3981999507e-3), _f(8.3334519073e-3)
_P3, _P4, _P5 = _f(4.1665795894e-2), _f(1.6666665459e-1), _f(5.0000001201e-1)


@njit
def exp_in_place(a):
    """``a = exp(a)`` for a contiguous float32 vector, within 1 ulp of ``e^x`` (NumPy's ``np.exp``:
    2.4 ulp; not its bits): ``x = k ln 2 + r``, ``e^r`` by a polynomial, times ``2^k`` built from
    its bits in two halves (``2^(k // 2) * 2^(k - k // 2)``: both normal over the whole range, so
    no branch for the large and tiny results). Plain float32 arithmetic and selects, no call: LLVM
    runs it in the CPU's widest vectors (8 lanes with AVX2). NumPy's float32 ``exp`` has SIMD
    loops on AVX-512 only: on an AVX2 CPU (the AMD EPYC of session 25) it took 1.5 ns a value, the
    training forward's 262,144 scores ~0.39 ms of the transformer step; here 0.8 ns (issue 18,
    session 25, trf29).

    >>> a = np.array([0.0, 1.0, -np.inf, np.inf, np.nan], np.float32)
    >>> exp_in_place(a); a.tolist()
    [1.0, 2.7182817459106445, 0.0, inf, nan]
    """
    for i in range(a.shape[0]):
        x = a[i]
        c = EXP_LOW if x < EXP_LOW else x       # (NaN stays NaN through both, and through p)
        c = EXP_HIGH if c > EXP_HIGH else c
        kf = np.floor(c * _LOG2E + _HALF)
        r = c - kf * _LN2_HI - kf * _LN2_LO
        p = (((((_P0 * r + _P1) * r + _P2) * r + _P3) * r + _P4) * r + _P5) * (r * r) + r + _ONE
        k = np.int32(kf if kf == kf else _HALF)     # (a NaN's exponent: any; its p is NaN)
        half = np.int32(k >> 1)
        # every value stored, none kept by a branch: a conditional store became a masked store
        # (``vmaskmovps``), 1.3 ns a value on Zen 4 instead of 0.8
        a[i] = p * _float32_of(np.int32((half + 127) << 23)) * _float32_of(np.int32((k - half + 127) << 23))


def softmax_rows(x, out):
    """``out = softmax(x)`` along the last axis of C-contiguous ``[M, N]`` rows (N >= 1)."""
    shift(x, out)
    np.exp(out, out=out)
    normalize(out)


# Python callers: the compiled loop or its twin, chosen per shape class by measurement
shift, normalize = loop_choice.Chosen(shift), loop_choice.Chosen(normalize)
