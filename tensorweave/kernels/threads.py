"""How many threads the CPU work may use: BLAS inside an op, numba loops, ops side by side.

Two kinds of parallelism compete for the same cores: *intra-op* (OpenBLAS/MKL threads
inside one matmul, numba's parallel loops) and *inter-op* (the executor running two ready
ops at once). When both take every core, threads spin against each other — a measured 1.7×
slowdown of the MLP training step on 2 cores. The rule here: the executor runs at most
``cores // intra_op_threads`` heavy ops at a time, and with BLAS already using every core
it runs plans sequentially. ``tw.config.threading`` sets either number explicitly.

Idle OpenBLAS workers also take cores: after each threaded call they spin for 2**28 cycles
(~0.1 s) before sleeping, while tensorweave's own threads (tiled convolutions, numba loops,
side-by-side ops) want those cores. :func:`quiet_idle_blas_workers` (run when tensorweave
is imported) shortens the spin to 2**22 cycles (~1.5 ms): the cnn training step went from
125-133 to 95-96 ms, its user CPU time from 225 to 135 ms per step. Not shorter: a worker
that has gone to sleep takes ~0.3 ms to wake for the next GEMM (a 128x784 @ 784x512 product
took 926 instead of 513 µs after a 0.5 ms pause), and the mlp step's GEMMs are ~0.1-0.6 ms
apart — medians of its step 3.4-4.2 ms with 2**22 against 3.8-4.8 ms with 2**4, cnn alike.

>>> from tensorweave.kernels import threads
>>> threads.cores() >= 1 and threads.intra_op_threads() >= 1
True
>>> threads.inter_op_slots() >= 1
True
"""
import contextlib
import ctypes
import os
import threading

import numpy as np  # noqa: F401 - BLAS must be loaded before threadpoolctl looks for it
# Imported with tensorweave, not on first use: its import defines dataclasses (an exec),
# and the first use may be while a model file is being loaded.
from threadpoolctl import ThreadpoolController

_lock = threading.RLock()
_controller = None
_inter_op = [0]   # 0: derived from the cores and the intra-op threads
_single = {"depth": 0, "limit": None}


class _Affinity(threading.local):
    """The calling thread's core count as last read, and the :data:`_generation` it was read in
    (class defaults: a new thread reads its mask on its first :func:`cores`)."""
    generation = -1
    count = 0


_affinity = _Affinity()
#: bumped by :func:`affinity_changed`: every thread's cached count is read again on its next call
_generation = [0]


def cores():
    """The cores the calling thread may run on (its affinity mask, not the machine's count).

    Read once per thread and kept: ``os.sched_getaffinity`` took ~2 µs, and a batch-1 product's
    routing asked three times (issue 18 session 17). What changes the mask invalidates the kept
    count through :func:`affinity_changed`: ``tw.config.threading`` (both setters), a forked child
    (``os.register_at_fork``); after ``os.sched_setaffinity`` (or ``taskset`` on a running
    process) call ``threads.affinity_changed()``.

    >>> before = cores()
    >>> affinity_changed()
    >>> cores() == before
    True
    """
    mine = _affinity
    if mine.generation != _generation[0]:
        mine.generation = _generation[0]   # before the read: a bump during it makes the next call read again
        mine.count = _read_cores()
    return mine.count


def _read_cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def affinity_changed():
    """Makes every thread read its affinity mask again on its next :func:`cores` (after
    ``os.sched_setaffinity``; the thread settings call it themselves)."""
    _generation[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=affinity_changed)


def _blas():
    global _controller
    if _controller is None:
        with _lock:
            if _controller is None:
                _controller = ThreadpoolController()
    return [lib for lib in _controller.lib_controllers if lib.user_api == "blas"]


#: log2 of the cycles an idle OpenBLAS worker spins before sleeping (see the module docstring).
IDLE_BLAS_SPIN_LOG2 = 22


def quiet_idle_blas_workers():
    """Makes idle OpenBLAS workers sleep after ~1.5 ms instead of ~0.1 s (see the module docstring).

    OpenBLAS reads ``OPENBLAS_THREAD_TIMEOUT`` when it starts its workers, so this sets it,
    has OpenBLAS re-read its environment and stops the workers; the next threaded call starts
    them again with the new timeout. A value the user set is left alone, and other BLAS
    libraries are not touched. Returns whether OpenBLAS was reconfigured. Must not run while
    another thread is inside BLAS (it runs at import)."""
    if "OPENBLAS_THREAD_TIMEOUT" in os.environ:
        return False
    done = False
    for lib in _blas():
        if lib.internal_api != "openblas":
            continue
        try:
            so = ctypes.CDLL(lib.filepath)
            read_env, stop_workers = so.openblas_read_env, so.blas_thread_shutdown_
        except (OSError, AttributeError):   # an OpenBLAS without these entry points
            continue
        os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(IDLE_BLAS_SPIN_LOG2)
        read_env()
        stop_workers()
        done = True
    return done


def intra_op_threads():
    """Threads one BLAS call uses now (read live: ``threadpool_limits`` may change it)."""
    libs = _blas()
    return max((lib.num_threads for lib in libs), default=1)


def set_intra_op_threads(n):
    """Threads for one op's BLAS and numba work; ``0`` restores one per core."""
    affinity_changed()
    n = int(n) or cores()
    for lib in _blas():
        lib.set_num_threads(n)
    import numba
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


@contextlib.contextmanager
def single_threaded_blas():
    """BLAS on one thread while any caller is inside — for kernels that split their own work
    over the intra-op threads (kernels/cpu/tiles.py). Counted, so overlapping callers restore
    BLAS's own count when the last one leaves; ~10 µs per entry."""
    with _lock:
        if _single["depth"] == 0:
            libs = _blas()
            _single["limit"] = [(lib, lib.num_threads) for lib in libs]
            for lib in libs:
                lib.set_num_threads(1)
        _single["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _single["depth"] -= 1
            if _single["depth"] == 0:
                for lib, n in _single.pop("limit"):
                    lib.set_num_threads(n)
                _single["limit"] = None


def set_inter_op_slots(n):
    """Heavy ops the executor may run at once; ``0`` derives it from the cores."""
    affinity_changed()
    _inter_op[0] = max(0, int(n))


def inter_op_slots():
    """Heavy ops that may run at the same time without oversubscribing the cores."""
    if _inter_op[0]:
        return _inter_op[0]
    return max(1, cores() // max(1, intra_op_threads()))
