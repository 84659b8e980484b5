"""Large elementwise passes split over the intra-op threads, by rows of the output (issue 18, core19).

Why: on two cores a training step's wall time is bounded below by the CPU of the thread running
the plan; the products are split over both cores (``gemm.split_parts``), but every other kernel
ran on the calling thread alone while the helper idled. In the transformer step the bias adds,
ReLU and the attention scores' elementwise passes ([32, 64, 128] to [32, 2, 64, 64] floats) were
~2 ms of the calling thread's CPU per step, serial. A pass above :func:`min_bytes` (measured once
per machine: where a split beat one thread, like ``gemm.serial_work``; cached with the GEMM
tuner's thresholds) is cut into row blocks shared with the helper (``gemm.share_tasks``: a helper
that has not started when the caller runs out of blocks is not waited for).

Same bits: only IEEE operations that round each element on its own (add, subtract, multiply,
maximum, minimum, a bias add, ``AddN``'s chain of adds: :func:`add_n`) are split, so a block computes exactly the elements the whole pass
would, whichever thread takes it. ``TW_SPLIT_PASSES=0`` (or ``ENABLED["on"] = False``, read per
call) keeps every pass on the calling thread.

>>> import numpy as np
>>> add = binary(np.add)
>>> x = np.arange(6, dtype=np.float32).reshape(3, 2)
>>> add(x, np.ones(2, np.float32)).tolist()
[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
"""
import functools
import math
import os

import numpy as np

from tensorweave.kernels.cpu import gemm, gemm_tuning, nn_loops

#: read per call: ``TW_SPLIT_PASSES=0`` runs every pass on the calling thread (for A/B comparisons)
ENABLED = {"on": os.environ.get("TW_SPLIT_PASSES", "1") != "0"}
#: blocks per thread: a helper that starts late takes fewer of them, the caller the rest
BLOCKS_PER_PART = 2
#: output sizes (bytes) timed for :func:`min_bytes`, 64 KiB .. 4 MiB
LADDER = tuple(1 << s for s in range(16, 23))
#: the threshold where two walks disagree: split only passes of the largest size timed
DEFAULT_BYTES = LADDER[-1]
#: the measured threshold (bytes; None until first needed), per process
_limit = {"bytes": None}


def min_bytes():
    """Output bytes from which a pass is split: measured once per machine (a few ms, the first
    time a pass could be split), cached in the GEMM tuner's file; a one-core machine never splits."""
    got = _limit["bytes"]
    if got is None:
        if gemm._cores() < 2:
            got = 1 << 62
        else:
            got = gemm.tuner().threshold("split-pass:bytes", lambda: gemm_tuning.serial_threshold(
                _runners, LADDER, work_of=lambda nbytes: nbytes), DEFAULT_BYTES)
        _limit["bytes"] = got
    return got


def _runners(nbytes):
    """``{"serial": run, "threaded": run}``: a float32 add of ``nbytes`` of output, whole or split."""
    rows = 64
    x, y = np.random.default_rng(nbytes).standard_normal((2, rows, nbytes // 4 // rows)).astype(np.float32)
    out = np.empty_like(x)
    return {"serial": lambda: np.add(x, y, out=out),
            "threaded": lambda: over_rows(rows, 2, lambda r0, r1: np.add(x[r0:r1], y[r0:r1], out=out[r0:r1]))}


def parts_for(nbytes, rows):
    """Threads to split a pass writing ``nbytes`` in ``rows`` leading rows over (1: not split):
    ``gemm.split_parts`` (1 on a rank thread or a one-thread run), never inside
    ``gemm.blocks_here`` (a product is out on the helper), and only from :func:`min_bytes`."""
    if rows < 2 or not ENABLED["on"] or nbytes < LADDER[0]:
        return 1
    parts = gemm.split_parts()
    if parts < 2 or gemm.inside_blocks_here() or nbytes < min_bytes():
        return 1
    return parts


def over_rows(rows, parts, run):
    """``run(r0, r1)`` over contiguous blocks of ``rows`` (``BLOCKS_PER_PART`` per thread), on this
    thread and ``parts - 1`` helpers (``gemm.share_tasks``); ``run`` must write disjoint rows."""
    n = min(rows, parts * BLOCKS_PER_PART)
    cuts = [rows * i // n for i in range(n + 1)]
    gemm.share_tasks([functools.partial(run, cuts[i], cuts[i + 1]) for i in range(n)], parts)


def flat_by_rows(loop, args, shape, nbytes):
    """``loop(*args)`` (flat arrays of ``prod(shape)`` elements and scalars), split by the leading
    rows over the intra-op threads when the pass is large (:func:`parts_for`): each element is
    computed on its own, so the bits are the whole loop's. (The ResNet's ReLU gradient and residual
    add + ReLU, [64, 32, 32, 16] floats, ran on the calling thread alone: issue 18 session 19.)"""
    rows = shape[0] if shape else 0
    parts = parts_for(nbytes, rows) if nbytes else 1
    if parts < 2:
        loop(*args)
        return
    per = math.prod(shape[1:])
    over_rows(rows, parts, lambda r0, r1: loop(
        *(a[r0 * per:r1 * per] if isinstance(a, np.ndarray) else a for a in args)))


def index_cuts(idx, blocks):
    """Bounds ``[0, ..., len(idx)]`` of about ``blocks`` runs of a sorted index array, each cut
    moved back to its index's first occurrence: every index (a variable's row) falls in one run,
    so updates of a row given twice stay in their order on one thread. Empty runs dropped.

    >>> index_cuts(np.array([0, 1, 1, 1, 2, 5, 5, 7]), 4)
    [0, 1, 4, 5, 8]
    """
    n = len(idx)
    inner = np.searchsorted(idx, idx[[n * i // blocks for i in range(1, blocks)]]).tolist() if n else []
    return sorted(set([0, *inner, n]))


def binary(ufunc):
    """The kernel ``ufunc(x, y)`` (an elementwise NumPy ufunc rounding each element on its own),
    split by the output's leading rows when both operands are float arrays of one dtype and the
    pass is large (:func:`parts_for`)."""
    def kernel(x, y):
        if type(x) is not np.ndarray or type(y) is not np.ndarray or x.dtype != y.dtype or x.dtype.kind != "f" \
                or max(x.nbytes, y.nbytes) < LADDER[0]:
            return ufunc(x, y)
        if gemm.split_parts() < 2:      # (asked first: a rank thread's passes skip the shape's ~12 µs)
            return ufunc(x, y)
        shape = x.shape if x.shape == y.shape else np.broadcast_shapes(x.shape, y.shape)
        rows = shape[0] if shape else 0
        parts = parts_for(x.dtype.itemsize * math.prod(shape), rows)     # (np.prod: ~8 µs)
        if parts < 2:
            return ufunc(x, y)
        out = np.empty(shape, x.dtype)
        nd = len(shape)

        def run(r0, r1):
            a = x[r0:r1] if x.ndim == nd and x.shape[0] == rows else x
            b = y[r0:r1] if y.ndim == nd and y.shape[0] == rows else y
            ufunc(a, b, out=out[r0:r1])
        over_rows(rows, parts, run)
        return out
    kernel.__name__ = kernel.__qualname__ = f"split_{ufunc.__name__}"
    kernel.__doc__ = f"``np.{ufunc.__name__}`` split by rows when large (``split_passes.binary``)."
    return kernel


def add_n(*xs):
    """``AddN``: ``((x0 + x1) + x2) + ...``, split by rows when the operands are float arrays of
    one shape and dtype and the pass is large (:func:`parts_for`); each element is added in the
    same order either way, so the bits are the whole pass's. (The ResNet's gradient sums at the
    residual blocks, [64, 32, 32, 16] floats, ran on the calling thread alone: issue 18 session 19.)

    >>> x = np.arange(4, dtype=np.float32).reshape(2, 2)
    >>> add_n(x, x, np.ones((2, 2), np.float32)).tolist()
    [[1.0, 3.0], [5.0, 7.0]]
    """
    x0 = xs[0]
    parts = 1
    if type(x0) is np.ndarray and x0.dtype.kind == "f" and x0.ndim and all(
            type(x) is np.ndarray and x.dtype == x0.dtype and x.shape == x0.shape for x in xs[1:]):
        parts = parts_for(x0.nbytes, x0.shape[0])
    if parts < 2:
        out = np.asarray(np.add(xs[0], xs[1]))  # an owned array (np.add of 0-d gives a scalar)
        for x in xs[2:]:
            np.add(out, x, out=out)
        return out
    out = np.empty_like(x0)

    def run(r0, r1):
        o = np.add(xs[0][r0:r1], xs[1][r0:r1], out=out[r0:r1])
        for x in xs[2:]:
            np.add(o, x[r0:r1], out=o)
    over_rows(x0.shape[0], parts, run)
    return out


def relu(x, out=None):
    """``max(x, 0)``, split by rows when large (see :func:`binary`); contiguous float32/float64 by
    ``nn_loops.relu`` (or its NumPy twin, by measurement: ``loop_choice``). ``out``: ``x`` itself
    for the op's in-place variant (``fused_loop_kernels.inplace_kernel``; any other array: NumPy).

    >>> x = np.array([-1.0, 2.0], np.float32)
    >>> relu(x).tolist(), relu(x, out=x) is x, x.tolist()
    ([0.0, 2.0], True, [0.0, 2.0])
    """
    zero = np.zeros((), x.dtype)
    if type(x) is not np.ndarray or x.dtype.kind != "f" or x.ndim == 0 or not (out is None or out is x):
        return np.maximum(x, zero, out=out)
    out = np.empty_like(x) if out is None else x
    if x.dtype in _LOOP_DTYPES and x.flags.c_contiguous:
        def run(r0, r1):
            nn_loops.relu(x[r0:r1].reshape(-1), out[r0:r1].reshape(-1))
    else:
        def run(r0, r1):
            np.maximum(x[r0:r1], zero, out=out[r0:r1])
    parts = parts_for(x.nbytes, x.shape[0])
    if parts < 2:
        run(0, x.shape[0])
    else:
        over_rows(x.shape[0], parts, run)
    return out


relu._tw_out = True     # takes out= (the op's in-place variant runs this loop: fused_loop_kernels.inplace_kernel)
_LOOP_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
