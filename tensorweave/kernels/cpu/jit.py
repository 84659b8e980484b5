"""The one way CPU kernels compile loops: numba's ``njit`` with the project's settings.

- ``nogil=True``: compiled loops release the GIL, so the executor's thread pool can run
  two of them at once.
- ``cache=False``: numba's on-disk cache stores pickles, and nothing read from a file is
  unpickled here (DESIGN §5); compiling stays lazy (per kernel and dtype, on first call), so a
  program compiles only what it uses.
- ``error_model="numpy"``: division by zero gives inf/NaN as in NumPy instead of raising;
  without the zero check loops with a division vectorize (2.6x on the Adam update).
- no ``fastmath``: results must match the NumPy references bit for bit where the
  arithmetic is the same (no reassociation, NaN and inf kept).
- ``parallel=True`` loops (``numba.prange``) only where :func:`parallel_loops` says so:
  numba's thread pool must be thread-safe (TBB or OpenMP — the executor may run two kernels
  at once, which numba's fallback "workqueue" pool does not survive), and is not used in
  a process forked from one that started it (OpenMP's pool does not survive a fork).
  GNU OpenMP's idle workers spin 10^4 rounds (``GOMP_SPINCOUNT``, unless the user set it)
  instead of ~3*10^5 before sleeping: spinning on after a parallel update, they slowed the
  cnn's next convolution tiles (its step with the two-core update against without, medians
  in one process: 54-56 vs 53 ms with the default spin, 40-45 vs 44-50 ms with 10^4).

>>> import numpy as np
>>> from tensorweave.kernels.cpu.jit import njit
>>> @njit
... def total(a):
...     s = 0.0
...     for x in a:
...         s += x
...     return s
>>> float(total(np.arange(4.0)))
6.0
"""
import os
import threading

import numba
import numpy as np

#: rounds an idle GNU OpenMP worker spins before sleeping (see the module docstring)
GOMP_SPIN = 10000
_parallel = {"pid": None, "ok": False}
_parallel_lock = threading.Lock()


def njit(fn=None, **options):
    """``numba.njit`` with the settings above. Usable bare or with numba options."""
    def compile_(f):
        return numba.njit(f, **{"nogil": True, "cache": False, "error_model": "numpy", **options})
    return compile_ if fn is None else compile_(fn)


def _probe(out):
    for i in numba.prange(out.shape[0]):
        out[i] = i


def parallel_loops():
    """Whether kernels may run ``parallel=True`` loops in this process (see the module
    docstring). Decided on first use — a tiny parallel loop starts numba's thread pool; a
    threading layer the user chose (``NUMBA_THREADING_LAYER``) is kept, and used only if
    thread-safe."""
    if _parallel["pid"] == os.getpid():
        return _parallel["ok"]
    with _parallel_lock:
        if _parallel["pid"] != os.getpid():
            _parallel["ok"] = _parallel["pid"] is None and _start_parallel()
            _parallel["pid"] = os.getpid()
    return _parallel["ok"]


def _start_parallel():
    chose = numba.config.THREADING_LAYER
    os.environ.setdefault("GOMP_SPINCOUNT", str(GOMP_SPIN))   # read when numba loads libgomp
    if chose == "default" and "NUMBA_THREADING_LAYER" not in os.environ:
        numba.config.THREADING_LAYER = "threadsafe"   # TBB or OpenMP, never workqueue
    try:
        njit(parallel=True)(_probe)(np.empty(2))
        return numba.threading_layer() in ("tbb", "omp")
    except (ValueError, ImportError, RuntimeError):   # no thread-safe layer here
        numba.config.THREADING_LAYER = chose
        return False
