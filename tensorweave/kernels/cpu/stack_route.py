"""Which threads run a stack of products (``gemm._batched``: attention's per-head products, any
3-D ``matmul``): MKL's batched call on every core, or the calling thread alone (on the library
measured faster on one thread for the stack's class, ``gemm._serial_library``) — by the stack's
multiply-adds against a threshold measured once per machine.

Why measured: the batched call is one fork-join over the cores. For a small stack the hand-off
and the join cost more than the second core gives back (and on a busy machine the join waits for
a descheduled worker, whose spinning after the call is CPU the step pays), while a large stack
runs nearly twice as fast. Where the two meet depends on the CPU and its libraries, and a stack's
threads take whole matrices where a 2-D product's cut one, so a stack's crossover is its own.
Before, every stack above ``gemm.MIN_WORK`` went to the threaded call, whatever its size, even
beside another product on the other core (``runtime/overlap.py``) (issue 18 session 17, tx21).

The walk: stacks of :data:`LADDER_COUNT` square products of the sides in :data:`LADDER`, MKL's
batched call on one thread against every core's (``gemm_tuning.serial_threshold``), kept in the
GEMM tuner's file as ``stack-serial:<dtype>`` once two quiet processes' walks agree
(``Tuner.threshold``); until then the 2-D products' own threshold (``gemm.serial_work``: a stack
no larger in all than a product that runs on one thread runs on one thread).

>>> from tensorweave.kernels.cpu import stack_route
>>> stack_route.on_one_thread(np.float32, 64 * stack_route.LADDER_COUNT * stack_route.LADDER[-1] ** 3)
False
"""
import functools

import numpy as np

from tensorweave.kernels.cpu import gemm_tuning

#: sides of the square products timed, :data:`LADDER_COUNT` to a stack (32 K .. 16.8 M multiply-adds)
LADDER = (16, 24, 32, 48, 64, 96, 128)
LADDER_COUNT = 8
#: dtype -> this process's threshold (multiply-adds); tests set entries
_limit = {}


def ceiling():
    """The largest threshold a walk can answer (threads never winning: twice the top rung); a stack
    at least this large takes the threads without looking the threshold up (nor walking)."""
    return 2 * LADDER_COUNT * LADDER[-1] ** 3


def on_one_thread(dtype, work):
    """Whether a stack of ``work`` multiply-adds of ``dtype`` runs on one thread: under
    :func:`one_thread_work`."""
    dtype = np.dtype(dtype)
    limit = _limit.get(dtype)
    if limit is None:
        if work >= ceiling():
            return False
        limit = one_thread_work(dtype)
    return work < limit


def one_thread_work(dtype):
    """Stacks of ``dtype`` under this many multiply-adds run on one thread (0: none do, as on one
    core or without MKL's batched call on one thread); measured once per machine (see the
    module's docstring)."""
    from tensorweave.kernels.cpu import gemm      # (gemm imports this module)
    dtype = np.dtype(dtype)
    got = _limit.get(dtype)
    if got is None:
        if dtype not in gemm._gemm_batch or dtype not in gemm._gemm_serial or gemm._cores() < 2:
            got = 0
        else:
            got = gemm.tuner().threshold(f"stack-serial:{dtype.name}", functools.partial(walk, dtype),
                                         gemm.serial_work(dtype))
        _limit[dtype] = got
    return got


def walk(dtype):
    """``(work, settled)``: one walk of :data:`LADDER` (``gemm_tuning.serial_threshold``)."""
    return gemm_tuning.serial_threshold(functools.partial(runners, np.dtype(dtype)), LADDER,
                                        lambda side: LADDER_COUNT * side ** 3)


def runners(dtype, side):
    """``{"serial": run, "threaded": run}``: MKL's batched call of a stack of :data:`LADDER_COUNT`
    ``side``-cubed products on one thread and on every core."""
    from tensorweave.kernels.cpu import gemm
    rng = np.random.default_rng(side)
    a, b = rng.standard_normal((2, LADDER_COUNT, side, side)).astype(dtype)
    out = np.empty((LADDER_COUNT, side, side), dtype)
    fn, set_local, step = gemm._gemm_batch[dtype], gemm._gemm_serial[dtype].args[0], side * side

    def threaded():
        fn(gemm._NO_TRANS, gemm._NO_TRANS, side, side, side, a, side, step, b, side, step, out, side, step,
           LADDER_COUNT)

    def serial():
        with gemm._mkl_local_threads(set_local, 1):
            threaded()
    return {"serial": serial, "threaded": threaded}
