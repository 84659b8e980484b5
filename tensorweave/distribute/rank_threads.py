"""How many threads one in-process rank's kernels may use: the controller's share, split over the ranks.

In-process ranks are threads of one process, so they share its cores. Some thread settings are
per *calling thread*: MKL's thread count under Intel OpenMP (``threadpool_limits(1)`` on the main
thread leaves a rank thread at one thread per core), numba's ``set_num_threads`` and the parts a
product may be split into (``gemm.limit_split_here``). Left alone, two
rank threads on two cores each ran MKL on two threads — four threads plus their spinning OpenMP
workers on two cores. So before a rank runs its plan it sets these per-thread counts to
:func:`share` — the controller thread's BLAS threads divided by the ranks running at once (at
least one); process-wide settings (OpenBLAS's count) are the controller's and are left alone.

>>> share(4, 2), share(1, 2), share(2, 3)
(2, 1, 1)
>>> use(1)               # on a rank thread: MKL and numba at one thread here
1
"""
import contextlib

from tensorweave.kernels import threads


def share(controller_threads, n_ranks):
    """Threads per rank when ``n_ranks`` ranks run at once and the controller uses ``controller_threads``."""
    return max(1, int(controller_threads) // max(1, int(n_ranks)))


def for_ranks(n_ranks):
    """:func:`share` of the calling (controller) thread's BLAS threads (read live, ~4 µs)."""
    return share(threads.intra_op_threads(), n_ranks)


def _per_thread_libs():
    return [lib for lib in threads._blas() if lib.internal_api == "mkl"]


def use(n):
    """Sets the calling thread's per-thread kernel thread counts (MKL, numba) to ``n`` where they
    differ (read live, ~2 µs when nothing changes); returns ``n``."""
    import numba

    from tensorweave.kernels.cpu import gemm
    for lib in _per_thread_libs():
        if lib.num_threads != n:
            lib.set_num_threads(n)
    gemm.limit_split_here(n)
    m = min(n, numba.config.NUMBA_NUM_THREADS)
    if numba.get_num_threads() != m:
        numba.set_num_threads(m)
    return n


@contextlib.contextmanager
def held(n):
    """:func:`use` ``n`` for the body, then the calling thread's previous per-thread counts again
    (a controller thread running one rank's plan itself, ``World.run(..., inline=True)``)."""
    import numba

    from tensorweave.kernels.cpu import gemm
    libs = _per_thread_libs()
    before = [lib.num_threads for lib in libs], numba.get_num_threads()
    split_before = gemm.limit_split_here(None)
    use(n)
    try:
        yield n
    finally:
        gemm.limit_split_here(split_before)
        for lib, k in zip(libs, before[0]):
            if lib.num_threads != k:
                lib.set_num_threads(k)
        if numba.get_num_threads() != before[1]:
            numba.set_num_threads(before[1])


__all__ = ["share", "for_ranks", "use", "held"]
