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
import ctypes
import threading

from tensorweave.kernels import threads
from tensorweave.kernels.cpu import gemm


def share(controller_threads, n_ranks):
    """Threads per rank when ``n_ranks`` ranks run at once and the controller uses ``controller_threads``."""
    return max(1, int(controller_threads) // max(1, int(n_ranks)))


def for_ranks(n_ranks):
    """:func:`share` of the calling (controller) thread's BLAS threads (read live, ~4 µs)."""
    return share(threads.intra_op_threads(), n_ranks)


def controller_counts(n_ranks):
    """``(share, counts)``: :func:`for_ranks` ``n_ranks`` and the calling thread's per-thread BLAS
    counts read on the way (``[(lib, count)]``, for :func:`held`): each library's count is read
    once per planned step. Why it matters: these reads run on the controller before every step
    while the other ranks wait for it at their first collective, and right after a step's products
    they run cold (~35 µs for MKL's, where a loop of them takes ~1 µs each)."""
    libs, readers = _blas_readers()
    counts = [read() for read in readers]
    n = share(max(counts, default=1), n_ranks)
    return n, [(lib, k) for lib, k in zip(libs, counts) if lib.internal_api == "mkl"]


def _blas_readers():
    """``(libraries, their count readers)``: ``threads._blas()`` and each one's :func:`_reader`, kept
    while the same function gives them from the same threadpoolctl controller (made once a process:
    its libraries never change). Built every step, the list took ~10 µs of the controller's ~35 for
    three libraries' counts right after a step (session 24, AMD EPYC)."""
    key = (threads._blas, threads._controller)
    got = _kept_readers.get("blas")
    if got is None or got[0] != key or key[1] is None:
        libs = threads._blas()
        got = _kept_readers["blas"] = ((threads._blas, threads._controller), libs, [_reader(lib) for lib in libs])
    return got[1], got[2]


_kept_readers = {}  # "blas" -> ((threads._blas, its controller), libraries, readers): _blas_readers
_readers = {}       # id(library controller) -> (controller, its count's reader): _reader


def _reader(lib):
    """A function reading ``lib``'s thread count (threadpoolctl's ``lib.num_threads``): for MKL its
    C getter, for NumPy's OpenBLAS the ctypes getter ``gemm`` holds it at one thread with
    (:func:`_numpy_openblas_getter`), for another OpenBLAS on its own threads (SciPy's) its getter
    (:func:`_openblas_getter`), each looked up once and called holding the GIL
    (:func:`_holding_gil`); any other library threadpoolctl's read. threadpoolctl looks the symbol
    up by name on every read: half of the controller's ~37 µs reading three libraries' counts right
    after a step (19 µs the direct calls, 6.7 -> 3.5 warm; session 22, AMD EPYC, load 5); SciPy's
    OpenBLAS through it took 11.6 µs right after a step where MKL's C getter took 5.7 (session 24)."""
    got = _readers.get(id(lib))
    if got is not None and got[0] is lib:
        return got[1]
    fn = None
    if lib.internal_api == "mkl":
        fn = getattr(getattr(lib, "dynlib", None), "MKL_Get_Max_Threads", None)
    elif lib.internal_api == "openblas":
        fn = _numpy_openblas_getter(lib) or _openblas_getter(lib)
    if fn is None:
        fn = lambda: lib.num_threads        # noqa: E731 - any other library: threadpoolctl's read
    else:
        fn = _holding_gil(fn, ctypes.c_int)
    _readers[id(lib)] = (lib, fn)
    return fn


def _numpy_openblas_getter(lib):
    """``gemm``'s getter of NumPy's OpenBLAS count (``gemm._openblas_threads``) where ``lib`` is the
    library it reads, else None (another OpenBLAS, SciPy's say): one reader of that count for both."""
    found = gemm._openblas_threads()
    so = gemm._openblas.get("library")
    if found is None or so is None or getattr(so, "_name", None) != getattr(lib, "filepath", None):
        return None
    return found[0]


def _openblas_getter(lib):
    """The ``openblas_get_num_threads`` of OpenBLAS ``lib`` (threadpoolctl's controller: its ``dynlib``),
    named as its build names it (a ``scipy_`` prefix, a ``64_`` suffix: the names threadpoolctl tries);
    None where it threads with OpenMP (its count is OpenMP's, threadpoolctl reads that) or has none."""
    so = getattr(lib, "dynlib", None)
    if so is None or getattr(lib, "threading_layer", None) == "openmp":
        return None
    for prefix in ("", "scipy_"):
        for suffix in ("", "64_", "_64"):
            fn = getattr(so, f"{prefix}openblas_get_num_threads{suffix}", None)
            if fn is not None:
                return fn
    return None


def _holding_gil(fn, restype, *argtypes):
    """The C function behind ctypes function ``fn`` called without dropping the GIL (``PYFUNCTYPE``).
    A library's thread-count getter or setter returns at once; dropped, the GIL went to whichever
    thread wanted it: the controller restores its counts right after the other ranks finished, as
    the rank just finished wants the GIL back to reach its next wait (a hand-off and a wake-up each way)."""
    return ctypes.PYFUNCTYPE(restype, *argtypes)(ctypes.cast(fn, ctypes.c_void_p).value)


def _numba_counts():
    """numba's ``(get, set)`` of the calling thread's thread count: once numba has launched its
    threads, the threading layer's own two functions (called holding the GIL, :func:`_holding_gil`),
    which ``numba.get_num_threads`` / ``set_num_threads`` call after checking that launch under two
    locks (~2 of their ~3 µs; a planned step makes three such calls on the controller, between the
    ranks' steps, while the other ranks wait); before the launch (or where a numba version names
    them otherwise) numba's."""
    if _numba_launched:
        return _numba_launched[0]
    from numba.np.ufunc import parallel
    if getattr(parallel, "_is_initialized", False):
        get, put = getattr(parallel, "_get_num_threads", None), getattr(parallel, "_set_num_threads", None)
        if get is not None and put is not None:
            # launched once for the process: the same two from now on
            _numba_launched.append((_holding_gil(get, ctypes.c_int), _holding_gil(put, None, ctypes.c_int)))
            return _numba_launched[0]
    import numba
    return numba.get_num_threads, numba.set_num_threads


_numba_launched = []    # [(get, set)] once numba's threads are launched: _numba_counts


def _per_thread_libs():
    return [lib for lib in threads._blas() if lib.internal_api == "mkl"]


class _Set(threading.local):
    """``n``: on a rank's own thread, the count :func:`use` set there last (None elsewhere)."""
    n = None


_set = _Set()


def use(n):
    """Sets the calling thread's per-thread kernel thread counts (MKL, numba) to ``n`` where they
    differ (read live, ~2 µs when nothing changes); returns ``n``. On a rank's own thread
    (``ranks.Rank``'s loop: nothing else sets its counts for good — a one-thread product sets MKL's
    and restores it) the count set last is remembered, and the same ``n`` again reads nothing: the
    reads are ctypes calls, which drop the GIL, and a planned step makes this call on every other
    rank as it starts, while the first rank's thread runs its first ops' Python (issue 13 dp23)."""
    if _set.n == n:
        return n
    import numba
    for lib in _per_thread_libs():
        if lib.num_threads != n:
            lib.set_num_threads(n)
    gemm.limit_split_here(n)
    m = min(n, numba.config.NUMBA_NUM_THREADS)
    get, put = _numba_counts()
    if get() != m:
        put(m)
    if _own_rank_thread():
        _set.n = n
    return n


def _own_rank_thread():
    """Whether the calling thread is an in-process rank's own thread (not the controller running a
    rank's work inline, ``Rank.run_here``)."""
    from tensorweave.distribute import ranks
    rank = getattr(ranks._local, "rank", None)
    return rank is not None and rank._thread is threading.current_thread()


@contextlib.contextmanager
def held(n, counts=None):
    """:func:`use` ``n`` for the body, then the calling thread's previous per-thread counts again
    (:func:`take` and :func:`restore` around it)."""
    taken = take(n, counts)
    try:
        yield n
    finally:
        restore(taken)


def take(n, counts=None):
    """Sets the calling thread's per-thread counts to ``n`` (a controller thread running one rank's
    plan itself, ``World.run(..., inline=True)``) and returns what :func:`restore` sets back after
    the run: only the counts that differed. Two plain calls, not a context manager: a planned step's
    controller makes them around every run while the other ranks wait for it, the restore right
    after the step's products, cold (with the counts' C calls holding the GIL: 35-41 µs of thread
    CPU a step where :func:`held` took 49-54; session 23, AMD EPYC, load 8-11).
    ``counts``: the per-thread libraries' counts as :func:`controller_counts` read them on this
    thread just now (reading them again through :func:`use` and before restoring took ~20 µs)."""
    changed = []
    for lib, k in counts if counts is not None else [(lib, lib.num_threads) for lib in _per_thread_libs()]:
        if k != n:
            lib.set_num_threads(n)
            changed.append((lib, k))
    split_before = gemm.limit_split_here(n)
    get, put = _numba_counts()
    m = min(n, _numba_cap())
    numba_before = get()
    if numba_before == m:
        return changed, split_before, None, None     # numba's right already: nothing to set back
    put(m)
    return changed, split_before, put, numba_before


def restore(taken):
    """Sets back what :func:`take` changed on the calling thread (``taken``: its result)."""
    changed, split_before, put, numba_before = taken
    gemm.limit_split_here(split_before)
    for lib, k in changed:
        lib.set_num_threads(k)
    if put is not None:
        put(numba_before)


def _numba_cap():
    """numba's most threads (``NUMBA_NUM_THREADS``: fixed once its threads are launched)."""
    import numba
    return numba.config.NUMBA_NUM_THREADS


__all__ = ["share", "for_ranks", "controller_counts", "use", "held", "take", "restore"]
