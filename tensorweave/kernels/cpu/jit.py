"""The one way CPU kernels compile loops: numba's ``njit`` with the project's settings.

- ``nogil=True``: compiled loops release the GIL, so the executor's thread pool can run
  two of them at once.
- ``cache=False``: numba's on-disk cache stores pickles, and nothing read from a file is
  unpickled here (DESIGN §5); compiling stays lazy (per kernel and dtype, on first call), so a
  program compiles only what it uses. Kernels that dominate a cold start (seconds of LLVM each)
  have a NumPy *twin* giving the same bits (:func:`njit_twin`): their first calls run the twin
  while numba compiles on a background thread.
  Not chosen: a cache of compiled machine code (numba's, or one of our own that stores only
  object code). A file of machine code in a writable directory *is* code: whoever can write
  that directory runs code in every later tensorweave process, and no validation of such a
  file as data can rule that out. Python's ``__pycache__`` has the same property, but the
  project's rule (DESIGN §5, SECURITY.md: nothing read from a file runs) is stricter than
  Python's. Ahead-of-time compilation into the installed package is installed code, not a
  cache: the loops a cold training step meets are built at install time with the deprecated
  ``numba.pycc`` (numba 0.68) for fixed signatures (``aot_kernels.py``), checked against the hash
  the build recorded and put into their dispatchers when defined (``aot.py``); where no build
  is there (no C compiler, ``TW_AOT=0``) or it does not check out, this module's path runs.
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
import atexit
import functools
import os
import queue
import threading
import time

import numba
import numba.core.compiler
import numpy as np

from tensorweave.kernels.cpu import aot

#: rounds an idle GNU OpenMP worker spins before sleeping (see the module docstring)
GOMP_SPIN = 10000
_parallel = {"pid": None, "ok": False}
_parallel_lock = threading.Lock()


class _NoAliasCompiler(numba.core.compiler.Compiler):
    """numba's compiler with ``Flags.noalias``: every pointer argument of the compiled function (the
    array arguments' data among them) marked ``noalias`` for LLVM, as parfors does where it proved
    no aliasing. Not an ``njit`` option in numba; set by :func:`njit`'s ``noalias``."""

    def __init__(self, typingctx, targetctx, library, args, return_type, flags, locals):
        flags = flags.copy()
        flags.noalias = True
        super().__init__(typingctx, targetctx, library, args, return_type, flags, locals)


def njit(fn=None, noalias=False, **options):
    """``numba.njit`` with the settings above. Usable bare or with numba options.

    ``noalias=True``: the caller promises that no two array arguments of a call share memory,
    and LLVM may then keep per-loop runtime alias checks out (the Winograd transforms' short
    channel loops: 11-24 % per 16-channel tile, BENCHMARKS.md session 17). A kernel ever called
    in place must not set it. The ahead-of-time build compiles such a kernel with the same flag
    (``f.tw_noalias``, read by ``aot_build``)."""
    def compile_(f):
        opts = {"nogil": True, "cache": False, "error_model": "numpy", **options}
        if noalias:
            f.tw_noalias = True
            opts["pipeline_class"] = _NoAliasCompiler
        kernel = numba.njit(f, **opts)
        aot.attach(kernel)
        return kernel
    return compile_ if fn is None else compile_(fn)


def _probe(out):
    for i in numba.prange(out.shape[0]):
        out[i] = i


#: ``parallel_loops(wait=False)`` answers False this many times before it queues the decision:
#: starting numba's thread pool and compiling a parallel loop costs ~2 s of CPU on the background
#: thread, which holds the GIL for much of it (on a loaded machine the training thread then waits
#: for the GIL while that thread waits for a core). The callers' one-thread loops (built ahead
#: of time, ``aot.py``) give the same bits meanwhile; :func:`wait_for_compiles` queues it at once.
PARALLEL_AFTER = 100


def _queue_parallel():
    _parallel["queued"] = os.getpid()
    _compiler.submit(parallel_loops)


def parallel_loops(wait=True):
    """Whether kernels may run ``parallel=True`` loops in this process (see the module
    docstring). Decided on first use — a tiny parallel loop starts numba's thread pool; a
    threading layer the user chose (``NUMBA_THREADING_LAYER``) is kept, and used only if
    thread-safe. ``wait=False``: until decided, False; after ``PARALLEL_AFTER`` such calls
    the decision (a compile) is made on the background compiler thread."""
    pid = os.getpid()
    if _parallel["pid"] == pid:
        return _parallel["ok"]
    if not wait and BACKGROUND:
        if _parallel.get("queued") != pid:
            asked = _parallel.get("asked")
            asked = _parallel["asked"] = (pid, asked[1] + 1 if asked and asked[0] == pid else 1)
            if asked[1] > PARALLEL_AFTER:
                _queue_parallel()
        return False
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


# ---- compiling in the background -----------------------------------------------------------------
#: ``TW_JIT_BACKGROUND=0``: kernels with a twin compile on their first call, as the others do
BACKGROUND = os.environ.get("TW_JIT_BACKGROUND", "1") != "0"


class _Compiler:
    """One daemon thread running queued compile jobs (callables), one at a time.

    At exit it finishes the job under way (LLVM must not be torn down mid-compile) and drops
    the rest; before a ``fork`` it waits for the job under way, so the child never inherits
    numba's compiler lock held by a thread it does not have. Between jobs it yields, so a
    kernel compiling on its caller's thread waits for one job at most."""

    def __init__(self):
        self.jobs = queue.SimpleQueue()
        self.busy = threading.Lock()        # held while a job runs
        self.pid = os.getpid()              # this process (kept up to date across forks)
        self.thread_pid = None              # the process whose thread runs the jobs
        self.stopped = False
        self.seconds = 0.0                  # time spent in jobs (for benchmarks)
        self.clock = time.perf_counter      # what ``seconds`` is measured with

    def submit(self, job):
        """Queues ``job()``; False when no more jobs run (the interpreter is exiting)."""
        if self.stopped:
            return False
        if self.thread_pid != os.getpid():  # first use, or a forked child: a thread of its own
            self.jobs, self.thread_pid = queue.SimpleQueue(), os.getpid()
            threading.Thread(target=self._run, args=(self.jobs,), name="tw-jit", daemon=True).start()
        self.jobs.put(job)
        return True

    def _run(self, jobs):
        while True:
            job = jobs.get()
            with self.busy:
                if self.stopped:
                    return
                t = self.clock()
                try:
                    job()
                except Exception:           # noqa: BLE001 - jobs report through their own state
                    pass
                self.seconds += self.clock() - t
            time.sleep(0.001)               # a compile waiting on numba's lock goes first

    def stop(self):
        self.stopped = True
        with self.busy:
            pass


_compiler = _Compiler()
atexit.register(_compiler.stop)
if hasattr(os, "register_at_fork"):
    def _forked():
        _compiler.busy.release()
        _compiler.pid = os.getpid()
    os.register_at_fork(before=_compiler.busy.acquire, after_in_parent=_compiler.busy.release,
                        after_in_child=_forked)


def wait_for_compiles():
    """Blocks until every compile queued so far has finished (tests, benchmarks), the parallel
    loops' decision included once they were asked for (see ``PARALLEL_AFTER``)."""
    pid = os.getpid()
    asked = _parallel.get("asked")
    if asked and asked[0] == pid and _parallel.get("queued") != pid and _parallel["pid"] != pid:
        _queue_parallel()
    if _compiler.stopped or _compiler.thread_pid != pid:
        return
    done = threading.Event()
    _compiler.submit(done.set)
    done.wait()


def background_compile_seconds():
    """Seconds this process's background thread has spent compiling kernels."""
    return _compiler.seconds


class _Warming:
    """Stands in for a kernel's ``_compile_for_args``, which numba's dispatcher calls when no
    compiled version matches the arguments' types: queues the compile on the background
    thread and hands back the NumPy twin, which the dispatcher then calls. A hit costs
    nothing (numba's own type dispatch, in C); each new signature gets the twin until it is
    compiled. A compile that failed is retried on the caller's thread, so its error shows."""

    def __init__(self, dispatcher, twin):
        self.dispatcher = dispatcher
        self.twin = twin
        self.queued = {}                    # signature -> the process that queued it (a fork's child queues again)
        self.failed = set()

    def __call__(self, *args, **kws):
        d = self.dispatcher
        signature = tuple(d.typeof_pyval(a) for a in args)
        if kws or signature in self.failed or threading.current_thread().name == "tw-jit":
            return type(d)._compile_for_args(d, *args, **kws)
        if self.queued.get(signature) != _compiler.pid:
            self.queued[signature] = _compiler.pid
            if not _compiler.submit(functools.partial(self._compile, signature)):
                return type(d)._compile_for_args(d, *args)
        return self.twin

    def _compile(self, signature):
        try:
            self.dispatcher.compile(signature)
        except Exception:                   # noqa: BLE001 - shown by the retry on the caller's thread
            self.failed.add(signature)


def njit_twin(twin, **options):
    """Decorator: :func:`njit` of the function, whose calls run ``twin`` (a NumPy function of
    the same arguments giving the same bits: same operations in the same order, no
    reassociation — tests compare them) while numba compiles their signature on a background
    thread, so a result never depends on when a compile finished. ``TW_JIT_BACKGROUND=0``:
    compiled on first call, as :func:`njit`. The twin stays reachable as ``kernel.twin``."""
    def wrap(fn):
        kernel = njit(fn, **options)
        kernel.twin = twin
        if BACKGROUND:
            kernel._compile_for_args = _Warming(kernel, twin)
        return kernel
    return wrap


def compile_now(kernel, *args):
    """Compiles ``kernel`` for ``args``'s types on this thread; returns what runs the JIT's loop
    for them (tests compare it with its twin): ``kernel``, or where an ahead-of-time loop serves
    these types (``aot.py``), the JIT's compiled entry point. A ``loop_choice.Chosen`` kernel
    gives its dispatcher's (the choice between loop and twin is not made here)."""
    kernel = getattr(kernel, "dispatcher", kernel)
    signature = tuple(kernel.typeof_pyval(a) for a in args)
    kernel.compile(signature)
    if signature in getattr(kernel, "aot_signatures", ()):
        return kernel.overloads[signature].entry_point
    return kernel
