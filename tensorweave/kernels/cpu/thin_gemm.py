"""A thin product (a batch-1 layer: fewer than ``gemm.MIN_PART`` rows against a large weight) as
column blocks on numba's thread pool, one block per thread, each a one-thread MKL call.

Why not the split of ``gemm._run_split``: its blocks go to the runtime's Python thread pool, whose
hand-off (a queue put, a wake-up, the GIL both ways: ~50 µs quiet, far more under load) costs more
than the whole product (1x512 @ 512x512: ~18 µs on one thread with the weight in L2), and whichever
thread is free takes the next block, so a core's L2 does not keep the same half of the weight from
one request to the next. Here ``numba.prange`` hands its fixed blocks to the same OpenMP/TBB
workers without Python (as the Adam update's chunks, ``training_kernels``) and block ``p`` runs on
worker ``p`` on every call: the mlp's 2.6 MB of weights, cold for one core (its 2 MiB L2), are
1.3 MB a core, so each core finds its halves in its own L2 on the next request.

Each block is MKL on one thread (``MKL_Set_Num_Threads_Local(1)`` around the call: MKL must not
start its own pool from inside a numba worker), so the bits are those of a one-thread MKL call of
the block, whichever thread runs it; the twin (while the loop compiles, or where numba has no
thread-safe pool) runs the same blocks in turn on the calling thread.

>>> import numpy as np
>>> from tensorweave.kernels.cpu import gemm, thin_gemm
>>> a, b = np.ones((1, 64), np.float32), np.ones((64, 48), np.float32)
>>> out = np.empty((1, 48), np.float32)
>>> if gemm.load() and np.float32 in gemm._gemm_serial:
...     thin_gemm.run(a, b, out, gemm._NO_TRANS, 64, gemm._NO_TRANS, 48, 48, 2, 32, parallel=False)
... else:
...     out[:] = a @ b
>>> out[0, :3].tolist()
[64.0, 64.0, 64.0]
"""
import os

import numba
import numpy as np

from tensorweave.kernels.cpu import gemm, jit
from tensorweave.kernels.cpu.jit import njit_twin


def _blocks_twin(fn, set_local, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, parts, step):
    """:func:`_blocks` on the calling thread, block after block (each the same one-thread MKL call)."""
    for p in range(parts):
        j = p * step
        w = min(n, j + step) - j
        if w > 0:
            gemm._ctypes_call_threads(set_local, 1, fn, trans_a, trans_b, m, w, k, a, lda, b[:, j:], ldb,
                                      c[:, j:], ldc)


@njit_twin(_blocks_twin, parallel=True)
def _blocks(fn, set_local, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, parts, step):
    """``c[:, j:j+step] = a @ b[:, j:j+step]`` for the ``parts`` blocks, block ``p`` on worker
    ``p``, each by the ``cblas_?gemm`` at ``fn`` on one MKL thread."""
    for p in numba.prange(parts):
        j = p * step
        w = min(n, j + step) - j
        if w > 0:
            before = gemm.set_threads_local(set_local, 1)
            gemm._cblas_gemm(fn, trans_a, trans_b, m, w, k, a, lda, b[:, j:], ldb, c[:, j:], ldc)
            gemm.set_threads_local(set_local, before)


def _addresses(dtype):
    """``(cblas_?gemm, MKL_Set_Num_Threads_Local)`` addresses of MKL's one-thread call for ``dtype``."""
    serial = gemm._gemm_serial[np.dtype(dtype)]
    return serial.args[2], serial.args[0]


def available(dtype):
    """Whether MKL's one-thread call is there for ``dtype`` (the blocks' library)."""
    return np.dtype(dtype) in gemm._gemm_serial


def run(a, b, out, op_a, lda, op_b, ldb, n, parts, step, parallel=True):
    """``out = a @ b`` (``out``'s ``n`` columns) as ``parts`` column blocks of ``step`` columns:
    on numba's pool where ``parallel`` and numba has a thread-safe one (``jit.parallel_loops``),
    else block after block here. ``op_a``/``op_b``: MKL's transpose codes, ``lda``/``ldb`` the
    leading dimensions (``gemm._operand``)."""
    args = arguments(a, b, out, op_a, lda, op_b, ldb, n, parts, step)
    if parallel and jit.parallel_loops(wait=False):
        _blocks(*args)
    else:
        _blocks_twin(*args)
    return out


def ready(args):
    """Whether the parallel loop can be timed now for ``args`` (:func:`run`'s ``_blocks`` arguments):
    numba's thread-safe pool is up and the loop compiled. Until then each call asks
    (``jit.parallel_loops(wait=False)``, which decides in the background after enough asks) and,
    once the pool is up, queues the loop's compile on the background thread: never a compile on
    the caller's thread (8 s here at load 10, pool start included)."""
    if not jit.parallel_loops(wait=False):
        return False
    if loop_compiled(args):
        return True
    if jit.BACKGROUND:
        _blocks._compile_for_args(*args)        # queues it (jit._Warming); the twin is not run
    return False


def loop_compiled(args):
    """Whether ``_blocks`` is compiled for ``args``' types."""
    from tensorweave.kernels.cpu import loop_choice
    return bool(_blocks.overloads) and loop_choice.compiled(_blocks, args)


def possible():
    """Whether the parallel loop may ever run in this process: False once numba has answered
    that it has no thread-safe pool (then a thin class's timing waits for nothing)."""
    state = jit._parallel
    return not (state.get("pid") == os.getpid() and not state.get("ok"))


def arguments(a, b, out, op_a, lda, op_b, ldb, n, parts, step):
    """``_blocks``' arguments for :func:`run`'s."""
    fn, set_local = _addresses(a.dtype)
    return (fn, set_local, op_a, op_b, out.shape[0], n, a.shape[1], a, lda, b, ldb, out, out.shape[1], parts, step)
