"""Self-attention at inference as one step: ``out = softmax(einsum(dot, key, query)) . value`` a
(batch, head) pair at a time, its ``[T, S]`` score tile kept in cache; the plan node
``runtime/passes/attention.py`` makes (``FusedAttention``, never a graph op).

Why: ``encoder2_predict``'s two blocks ran attention as three plan steps (scores ``aecd,abcd->acbe``,
``Softmax``, ``acbe,aecd->abcd``): 2.7 ms of the caller's CPU a call at load 4 for 2 x 4 heads of
128x128x64 (17 MFLOP: ~0.2 ms at one core's GEMM rate), the rest the stacks' fork-join over MKL's
threads, their operand transposes and the softmax's pass over 4 x 128 x 128 scores written out
(issue 18 session 20, att24). Here each pair is two ``cblas_?gemm`` calls from compiled code on
one MKL thread (strided views of the ``[B, T, H, D]`` operands: no transpose, no copy) and the
softmax between them on the tile while it is in cache: ``softmax_loops``' shift and normalize
loops, the exponentials between a tile block at a time (:func:`exp_tiles`: float32 in vector lanes,
within 1 ulp of ``e^x``, so float32 probabilities are within a few ulp of the ``Softmax`` kernel's,
not its bits; float64 NumPy's ``exp``, the kernel's bits); the two products may differ from the
stacked ones in the last bits (another GEMM blocking).

Which way a class of shapes runs is measured (``gemm.tuner()``, ``attention:<class>,p<parts>``):
``"mkl"`` the three steps apart (the incumbent; also where MKL is not loaded or the operands'
rows are not unit-stride), ``"one"`` fused on the calling thread (the choice under load, untimed),
``"rows"`` fused with blocks of pairs shared with the intra-op threads (``gemm.share_tasks``).
Timed on a quiet machine only (``gemm_tuning.quiet``), as the other stacks' ways.

>>> import numpy as np
>>> from tensorweave.kernels.cpu import attention_kernels as a
>>> q = k = v = np.ones((1, 2, 1, 2), np.float32)
>>> a.fused_attention(k, q, v, dot="aecd,abcd->acbe", combine="acbe,aecd->abcd").tolist()
[[[[1.0, 1.0]], [[1.0, 1.0]]]]
"""
import functools

import numpy as np

from tensorweave.kernels.cpu import gemm, gemm_tuning, linalg_kernels, nn_kernels, softmax_loops
from tensorweave.kernels.cpu.jit import njit

#: a block of pairs holds at most this many bytes of score tiles (L2 is 1-2 MB a core on the
#: machines measured; 4 tiles of 128x128 float32 are 256 KiB)
TILE_BLOCK_BYTES = 1 << 18
_NO_TRANS, _TRANS = gemm._NO_TRANS, gemm._TRANS

_shift = softmax_loops.shift.dispatcher
_normalize = softmax_loops.normalize.dispatcher


@njit
def scores_shift(fn, set_local, q, k, s, p0, p1):
    """``s[i] = q[b, :, h] @ k[b, :, h]^T`` shifted by its rows' maxima (``softmax_loops.shift``)
    for pairs ``p = p0 + i`` (``b, h = divmod(p, heads)``), each product on one MKL thread."""
    heads, t, d, n = q.shape[2], q.shape[1], q.shape[3], k.shape[1]
    item = q.itemsize
    before = gemm.set_threads_local(set_local, 1)
    for p in range(p0, p1):
        b, h = p // heads, p % heads
        tile = s[p - p0]
        gemm._cblas_gemm(fn, _NO_TRANS, _TRANS, t, n, d, q[b, :, h, :], q.strides[1] // item, k[b, :, h, :],
                         k.strides[1] // item, tile, n)
        _shift(tile, tile)
    gemm.set_threads_local(set_local, before)


@njit
def normalize_combine(fn, set_local, s, v, out, p0, p1):
    """``s[i]`` normalized (``softmax_loops.normalize``), then ``out[b, :, h] = s[i] @ v[b, :, h]``
    for pairs ``p = p0 + i``, each product on one MKL thread."""
    heads, t, n, dv = v.shape[2], s.shape[1], s.shape[2], v.shape[3]
    item = v.itemsize
    before = gemm.set_threads_local(set_local, 1)
    for p in range(p0, p1):
        b, h = p // heads, p % heads
        tile = s[p - p0]
        _normalize(tile)
        gemm._cblas_gemm(fn, _NO_TRANS, _NO_TRANS, t, dv, n, tile, n, v[b, :, h, :], v.strides[1] // item,
                         out[b, :, h, :], out.strides[1] // item)
    gemm.set_threads_local(set_local, before)


def _fusable(k, q, v):
    """``(fn, set_local)`` of MKL's one-thread GEMM for these operands, or None where the fused way
    cannot run: dtypes differ or are not float32/float64, not 4-D, rows not unit-stride, or no MKL
    with a per-thread setting (``gemm.compiled_gemm``)."""
    if not (k.dtype == q.dtype == v.dtype) or k.dtype not in (np.float32, np.float64) or k.ndim != 4 \
            or q.ndim != 4 or v.ndim != 4 or any(x.strides[3] != x.itemsize or x.shape[3] < 1 for x in (k, q, v)):
        return None
    got = gemm.compiled_gemm(k.dtype, q.shape[1], k.shape[1], q.shape[3])
    return None if got is None else got[:2]


def _apart(k, q, v, dot, combine):
    """The three plan steps the node stands for: ``Einsum``, last-axis ``Softmax``, ``Einsum``."""
    scores = linalg_kernels._einsum(k, q, equation=dot)
    return linalg_kernels._einsum(nn_kernels._softmax(scores, -1), v, equation=combine)


def over_pairs(pairs, tile_bytes, parts, run):
    """``run(p0, p1)`` over blocks of pairs of at most :data:`TILE_BLOCK_BYTES` of ``tile_bytes``
    tiles, shared by ``parts`` threads (1: all on this one; ``gemm.share_tasks``)."""
    step = max(1, min(TILE_BLOCK_BYTES // tile_bytes, -(-pairs // parts)))
    tasks = [functools.partial(run, p0, min(pairs, p0 + step)) for p0 in range(0, pairs, step)]
    if parts == 1 or len(tasks) == 1:
        for task in tasks:
            task()
    else:
        gemm.share_tasks(tasks, parts)


def pair_parts(pairs):
    """Threads ``pairs`` (batch, head) pairs may be shared over: the intra-op threads
    (``gemm.split_parts``), at most one per pair; 1 inside ``gemm.blocks_here``."""
    return 1 if gemm.inside_blocks_here() else max(1, min(gemm.split_parts(), pairs))


def _fused(k, q, v, fn, set_local, parts, out, probs=None):
    """The pairs in blocks (:func:`over_pairs`) into ``out``; each block's tiles in a scratch
    array, or, where ``probs`` (``[B * H, T, S]``, C-contiguous) is given, in its rows there: the
    probabilities a training step keeps for its backward (``attention_train``)."""
    pairs, t, n = q.shape[0] * q.shape[2], q.shape[1], k.shape[1]

    def block(p0, p1):
        pair_block(k, q, v, fn, set_local, out, p0, p1, None if probs is None else probs[p0:p1])
    over_pairs(pairs, t * n * q.itemsize, parts, block)
    return out


def pair_block(k, q, v, fn, set_local, out, p0, p1, s=None):
    """Pairs ``p0:p1`` (``b, h = divmod(p, heads)``) into ``out`` on this thread: scores, softmax
    and weighted sum, their tiles in ``s`` (``[p1 - p0, T, S]``; a scratch array when None)."""
    s = np.empty((p1 - p0, q.shape[1], k.shape[1]), q.dtype) if s is None else s
    scores_shift(fn, set_local, q, k, s, p0, p1)
    exp_tiles(s)
    normalize_combine(fn, set_local, s, v, out, p0, p1)


def exp_tiles(s):
    """``s = exp(s)`` in place for a C-contiguous block of shifted score tiles: float32 by
    ``softmax_loops.exp_in_place`` (vector lanes; within 1 ulp of ``e^x``, not NumPy's bits: NumPy's
    float32 ``exp`` runs scalar without AVX-512, ~1.4-1.7 ns a value on the AMD EPYC against 0.8;
    issue 18 sessions 25-26, trf29/trf30), float64 by NumPy's ``exp`` (its SIMD loop).

    >>> import numpy as np
    >>> s = np.array([[[0.0, -np.inf]]], np.float32)
    >>> exp_tiles(s); s.tolist()
    [[[1.0, 0.0]]]
    """
    if s.dtype == np.float32:
        softmax_loops.exp_in_place(s.reshape(-1))
    else:
        with np.errstate(all="ignore"):     # (rows of -inf: NaN, as the Softmax kernel's)
            np.exp(s, out=s)


#: this process's classes (tuples) -> "mkl", "one" or "rows"
_chosen = {}


def _way(k, q, v, dot, combine, fn, set_local, parts):
    """The way this class of shapes runs (see the module docstring), timed on its first call."""
    key = (q.dtype.char, q.shape, k.shape[1], v.shape[3], parts)
    got = _chosen.get(key)
    if got is None:
        b, t, h, d = q.shape
        cls = f"attention:{gemm_tuning.shape_class(t, k.shape[1], d, q.dtype.name, False, True, b * h)}," \
              f"v{v.shape[3].bit_length()},p{parts}"
        out = np.empty(q.shape[:3] + v.shape[3:], q.dtype)
        runners = {"mkl": functools.partial(_apart, k, q, v, dot, combine),
                   "one": functools.partial(_fused, k, q, v, fn, set_local, 1, out)}
        if parts > 1:
            runners["rows"] = functools.partial(_fused, k, q, v, fn, set_local, parts, out)
        # timings under load measure the other processes (``gemm._threaded_choice``): there the
        # fused step on this thread, which wakes no pool and no helper, runs untimed
        quiet = gemm_tuning.quiet()
        got = gemm._cached_threaded(cls, quiet)     # (an entry kept before the own-core probe: timed again)
        if got is None:
            got = gemm.timed_choice(cls, runners, "mkl", runners["one"]) if quiet else "one"
        _chosen[key] = got
    return got


def fused_attention(k, q, v, *, dot, combine):
    """``einsum(combine, softmax(einsum(dot, k, q), -1), v)`` for ``k [B, S, H, D]``, ``q [B, T, H,
    D]``, ``v [B, S, H, Dv]`` (``dot`` and ``combine`` of ``aecd,abcd->acbe`` and
    ``acbe,aecd->abcd``'s layout: ``runtime/passes/attention.py`` checks it), a new ``[B, T, H,
    Dv]`` array."""
    how = _fusable(k, q, v)
    if how is None:
        return _apart(k, q, v, dot, combine)
    parts = pair_parts(q.shape[0] * q.shape[2])
    way = _way(k, q, v, dot, combine, *how, parts)
    if way == "mkl":
        return _apart(k, q, v, dot, combine)
    out = np.empty(q.shape[:3] + v.shape[3:], q.dtype)
    return _fused(k, q, v, *how, parts if way == "rows" else 1, out)
