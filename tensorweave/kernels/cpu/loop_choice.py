"""A compiled loop or its NumPy twin: chosen by timing both on this machine, per kernel and shape
class, remembered on disk.

Why: a kernel made by ``jit.njit_twin`` has two implementations giving the same bits, the numba
loop and its NumPy twin (``nn_loops_twins``, the recurrent kernels' Python step loops). By rule the
twin answered only while numba compiled; but which one is faster depends on the CPU (vector width,
NumPy's SIMD dispatch) and the shape (a broadcast ``np.add`` over a wide bias runs at memory speed
like the loop; a scatter by ``np.add.at`` does not). So the first call of a class, once the loop is
compiled, times both on scratch copies of its arguments (a few calls each, interleaved, on this
thread's CPU clock: both run on the calling thread), with ``gemm_tuning``'s rules: the compiled
loop (the incumbent) stays unless the twin is ``gemm_tuning.MARGIN`` faster by the median and by
the fastest call; a timing made while the machine was busy, or whose median and fastest call
disagree, holds for this process only. A timing whose run raised holds the incumbent, unsettled.

A class is timed only once the loop is compiled for the call's types (JIT, or built at install:
``aot``) and every kernel its twin calls is compiled (``needs``: the recurrent twins call the
compiled step pass and ``rnn_gemm.rows``): timing would otherwise compile them, seconds of LLVM.
Until then the old rule holds (the dispatcher: the twin while compiling) and nothing is recorded.
A loop may carry ``probe(args) -> args`` timing a shorter call (a few steps of a long sequence).

Choices live in ``loop-tuning.json`` next to the GEMM tuning file (``gemm_tuning.cache_path``),
keyed by the CPU model, cores and the numba, llvmlite and NumPy versions; plain JSON, checked on
read (``gemm_tuning.Tuner``). ``TW_LOOPS=numba``: the old rule (compiled loop once compiled, its
twin until then), no timing; ``TW_LOOPS=numpy``: always the twin; unset (or ``auto``): measured.

>>> import numpy as np
>>> from tensorweave.kernels.cpu import loop_choice
>>> loop_choice.shape_class((np.zeros((128, 500), np.float32), np.zeros(500, np.float32), True))
'f8x9,f9,T'
"""
import contextlib
import os
import time

import numpy as np

from tensorweave.kernels.cpu import gemm_tuning

MODES = ("auto", "numba", "numpy")
MODE = os.environ.get("TW_LOOPS", "auto").strip().lower()
BACKENDS = ("numba", "numpy")
INCUMBENT = "numba"
_state = {"tuner": None}
_chosen = {}            # (kernel name, exact argument key) -> backend, this process (settled or not)


def mode():
    """``TW_LOOPS`` checked: one of :data:`MODES`."""
    if MODE not in MODES:
        raise ValueError(f"TW_LOOPS={MODE!r}: expected one of {', '.join(MODES)} "
                         "(numba: compiled loops once compiled; numpy: NumPy twins; auto: by measurement)")
    return MODE


def shape_class(args):
    """The bucket a timing stands for: per array argument its dtype and the log2 bucket of each
    dimension, per bool argument T/F (it switches work on or off); other scalars (addresses,
    step indices, codes) do not change the work per element and are left out."""
    parts = []
    for a in args:
        if isinstance(a, np.ndarray):
            parts.append(a.dtype.char + "x".join(str(d.bit_length()) for d in a.shape))
        elif isinstance(a, (bool, np.bool_)):
            parts.append("T" if a else "F")
    return ",".join(parts)


def _key(kernel, args):
    """What this process's choices are keyed by: the kernel and the exact shapes, dtypes and bool
    arguments (built per call, so kept cheaper than :func:`shape_class`: ~1 µs)."""
    return (kernel, *[(a.shape, a.dtype.num) if isinstance(a, np.ndarray) else a if a is True or a is False
                      else None for a in args])


def machine_key():
    """What a loop timing holds for: CPU model, cores, and the compiler's and NumPy's versions."""
    import llvmlite
    import numba
    return gemm_tuning.machine_key({"numba": numba.__version__, "llvmlite": llvmlite.__version__,
                                    "numpy": np.__version__})


def cache_path():
    """``loop-tuning.json`` in the folder of the GEMM tuning file."""
    return gemm_tuning.sibling_path("loop-tuning.json")


class LoopTuner(gemm_tuning.Tuner):
    """``gemm_tuning.Tuner`` whose timings are made here (scratch arguments, a CPU clock)."""

    def record(self, cls, times, incumbent=INCUMBENT, settle=True, others_before=0):
        """``gemm_tuning.Tuner.record`` of ``{backend: [seconds]}``; ``None`` (the run raised):
        the incumbent, for this process only."""
        if times is None:
            self.choices[cls] = {"backend": incumbent, "settled": False}
            return incumbent
        return super().record(cls, times, incumbent, settle, others_before)


def tuner():
    """This process's :class:`LoopTuner` (its file read on first use)."""
    if _state["tuner"] is None:
        _state["tuner"] = LoopTuner(cache_path(), machine_key(), BACKENDS)
    return _state["tuner"]


def reset():
    """Forgets this process's choices and tuner (tests; a changed cache path)."""
    _state["tuner"] = None
    _chosen.clear()


def name_of(kernel):
    """``module.function`` of a numba dispatcher (the start of its classes' names)."""
    fn = kernel.py_func
    return f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__qualname__}"


def compiled(kernel, args):
    """Whether ``kernel`` has a compiled version for ``args``'s types (JIT or built at install)."""
    try:
        signature = tuple(kernel.typeof_pyval(a) for a in args)
    except (TypeError, ValueError):
        return False
    return signature in kernel.overloads or signature in getattr(kernel, "aot_signatures", ())


def _any_compiled(kernel):
    return bool(getattr(kernel, "overloads", None) or getattr(kernel, "aot_signatures", None))


def _scratch(a):
    """A copy of a writable array argument of the same numba type (C, F or strided layout), so
    timed calls can write into it; anything else as it is."""
    if not isinstance(a, np.ndarray) or not a.flags.writeable:
        return a
    if a.flags.c_contiguous:
        return a.copy(order="C")
    if a.flags.f_contiguous:
        return a.copy(order="F")
    copy = np.empty(a.shape + (2,), a.dtype)[..., 0]      # strided, as the original
    copy[...] = a
    return copy


def measure(kernel, args, clock=None):
    """``{backend: [seconds]}`` of the compiled loop and its twin on scratch copies of ``args``,
    interleaved (``gemm_tuning``'s rounds and budget; each call timed by ``gemm_tuning._time_call``,
    by this thread's CPU time unless ``clock`` is given); None when a run raised or the copies'
    types have no compiled loop."""
    scratch = tuple(_scratch(a) for a in args)
    if not compiled(kernel, scratch):
        return None
    twin = kernel.twin
    runners = {"numba": lambda: kernel(*scratch), "numpy": lambda: twin(*scratch)}
    try:
        with np.errstate(all="ignore"):       # values in scratch drift over repeated calls
            return gemm_tuning.measure(runners, clock or time.thread_time)
    except Exception:                         # noqa: BLE001 - a twin failing on drifted values: keep the loop
        return None


def choose(kernel, args, probe=None, needs=()):
    """``"numba"`` or ``"numpy"`` for a call of ``kernel`` (an ``njit_twin`` dispatcher) with
    ``args``. ``probe``: maps ``args`` to a shorter call to time; ``needs``: the numba kernels
    the twin calls, which must be compiled before a timing counts."""
    chosen = mode()
    if chosen != "auto":
        return chosen
    key = _key(kernel, args)
    found = _chosen.get(key)
    if found is not None:
        return found
    cls = f"{name_of(kernel)}:{shape_class(args)}"
    found = tuner().backend(cls)
    if found is None:
        # the old rule (twin while compiling), unrecorded; ``needs`` first: typing the arguments
        # costs ~170 µs a call, and under the ahead-of-time build the passes a loop has built in
        # never compile on their own, so each call of a span loop asked here again (rnn27)
        if not all(_any_compiled(k) for k in needs) or not compiled(kernel, args):
            return INCUMBENT
        timed = probe(args) if probe is not None else args
        before = gemm_tuning.others_running()
        found = tuner().record(cls, measure(kernel, timed), others_before=before)
    _chosen[key] = found
    return found


def run(kernel, *args):
    """``kernel(*args)`` or its twin's, whichever :func:`choose` says (with the kernel's own
    ``probe``/``needs`` attributes where it has them). A class already chosen costs a dict
    lookup (~1 µs); ``TW_LOOPS=numba`` nothing."""
    if MODE == "numba":
        return kernel(*args)
    found = _chosen.get(_key(kernel, args)) if MODE == "auto" else None
    if found is None:
        found = choose(kernel, args, getattr(kernel, "probe", None), getattr(kernel, "needs", ()))
    return (kernel.twin if found == "numpy" else kernel)(*args)


class Chosen:
    """A ``jit.njit_twin`` kernel as Python callers see it: each call runs :func:`run`. Compiled
    callers keep the dispatcher (``.dispatcher``); other attributes are the dispatcher's.

    >>> import numpy as np
    >>> from tensorweave.kernels.cpu import nn_loops
    >>> y = np.ones((2, 3), np.float32)
    >>> nn_loops.bias_act(y, np.full(3, -2, np.float32), True); y.tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher
        self.__doc__ = dispatcher.__doc__

    def __call__(self, *args):
        kernel = self.dispatcher                # run(kernel, *args), its fast path inlined
        if MODE == "numba":
            return kernel(*args)
        found = _chosen.get(_key(kernel, args)) if MODE == "auto" else None
        if found == "numba":
            return kernel(*args)
        return run(kernel, *args)

    def __getattr__(self, name):
        return getattr(self.__dict__["dispatcher"], name)


@contextlib.contextmanager
def forced(backend):
    """Within: every choice is ``backend`` (``auto``, ``numba`` or ``numpy``); benchmarks compare them."""
    global MODE
    before = MODE
    MODE = backend
    try:
        yield
    finally:
        MODE = before
