"""Which thread holds the GIL, sampled: per instrumented thread and per label (an op), how long it held it.

The question in-process ranks raise (issue 13): two rank threads of one process run side by side only
where neither needs the GIL, so the GIL-held part of a rank's step is what limits their scaling. No
profiler in the venv tells it (a sampling profiler sees where a thread *is*, not whether it holds
the lock). Here a compiled loop (numba, ``nogil``: it never takes the GIL itself) reads CPython's own
GIL record, ``_PyRuntime.ceval.gil`` (``last_holder``: the holder's thread state; ``locked``), every
``period_us`` and counts, per registered thread, samples where that thread holds the GIL, under the
label the thread set last (:meth:`GilSampler.enter`: a slot in an array, no lock). The record's place
in ``_PyRuntime`` is found, not assumed: the switch interval is set to a marker value for a moment and
the words ``(interval, this thread's state, locked=1)`` are looked for (CPython 3.11's ``struct
_gil_runtime_state``); where they are not found (another interpreter version), :func:`available` is
False and nothing is sampled.

A measurement tool for benchmarks, not the library: it reads process memory in a way no API promises.

>>> s = GilSampler(["work"], threads=1)          # doctest: +SKIP
>>> s.register(0); s.start(); s.enter(0, 0); sum(range(10**6)); s.leave(0); s.stop()
>>> s.held_ms()[0]["work"] > 0                   # doctest: +SKIP
True
"""
import ctypes
import sys
import threading
import time

import numpy as np

_MARK = 4321            # the switch interval (µs) that marks the GIL record while it is looked for
_WORDS = 4096           # how far into _PyRuntime to look (64-bit words)
_layout = {}


def _thread_state():
    get = ctypes.pythonapi.PyThreadState_Get
    get.restype = ctypes.c_void_p
    return get()


def _find():
    """(words over _PyRuntime, index of ``last_holder``, index of ``locked``) or None."""
    if "found" in _layout:
        return _layout["found"]
    found = None
    if sys.implementation.name == "cpython" and sys.version_info[:2] == (3, 11) and ctypes.sizeof(ctypes.c_void_p) == 8:
        base = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
        words = np.frombuffer((ctypes.c_uint64 * _WORDS).from_address(base), np.uint64)
        before = sys.getswitchinterval()
        sys.setswitchinterval(_MARK * 1e-6)
        try:
            me = _thread_state()
            hits = [int(i) for i in np.nonzero(words[:-2] == _MARK)[0]
                    if int(words[i + 1]) == me and int(words[i + 2]) & 0xFFFFFFFF == 1]
        finally:
            sys.setswitchinterval(before)
        if len(hits) == 1:
            found = (words, hits[0] + 1, hits[0] + 2)
    _layout["found"] = found
    return found


def available():
    """True where the GIL's record was found (CPython 3.11 on a 64-bit machine)."""
    return _find() is not None


def switches():
    """CPython's count of GIL hand-offs between threads so far (``switch_number``, the word after
    ``locked``: raised when a thread takes the GIL that another held last), or None. A count, so
    unlike held time it does not grow with the machine's load: each hand-off is a wake-up of a
    waiting thread (a futex; on a VM an IPI) and a cold start of the Python that follows."""
    found = _find()
    return None if found is None else int(found[0][found[2] + 1])


def _compiled():
    """``(sample, loop)``: one sample of the GIL record into ``counts``, and the sampling loop (both
    compiled ``nogil``: they never take the GIL themselves)."""
    if "loop" in _layout:
        return _layout["sample"], _layout["loop"]
    import numba
    usleep = ctypes.CDLL(None).usleep
    usleep.argtypes, usleep.restype = [ctypes.c_uint], ctypes.c_int

    @numba.njit(nogil=True, cache=False)
    def sample(words, holder_at, locked_at, states, where, counts):
        holder = words[holder_at]
        locked = (words[locked_at] & 0xFFFFFFFF) != 0
        for t in range(states.size):
            counts[t, where[t], 1 if locked and holder == states[t] else 0] += 1

    @numba.njit(nogil=True, cache=False)
    def loop(words, holder_at, locked_at, states, where, counts, stop, period_us):
        n = 0
        while stop[0] == 0:
            sample(words, holder_at, locked_at, states, where, counts)
            n += 1
            usleep(period_us)
        return n
    _layout["sample"], _layout["loop"] = sample, loop
    return sample, loop


class GilSampler:
    """Samples the GIL's holder for ``threads`` registered threads; ``labels``: what they do (an index
    each, set by :meth:`enter`); one more label, ``"outside"``, is a thread's state between labels."""

    def __init__(self, labels, threads, period_us=20):
        self.labels = list(labels) + ["outside"]
        self.outside = len(self.labels) - 1
        self.states = np.zeros(threads, np.uint64)
        self.where = np.full(threads, self.outside, np.int64)
        self.counts = np.zeros((threads, len(self.labels), 2), np.int64)
        self.stop_flag = np.zeros(1, np.int64)
        self.period_us = period_us
        self.samples, self.seconds, self._thread = 0, 0.0, None

    def register(self, t):
        """The calling thread is thread ``t``."""
        self.states[t] = _thread_state()

    def enter(self, t, label):
        self.where[t] = label

    def leave(self, t):
        self.where[t] = self.outside

    def start(self):
        words, holder_at, locked_at = _find()
        loop = _compiled()[1]
        # compiled here, not on the sampling thread: a compile there would take the sampled time
        loop(words, holder_at, locked_at, self.states, self.where, np.zeros_like(self.counts), np.ones(1, np.int64),
             self.period_us)
        self.stop_flag[0] = 0
        out = {}

        def run():
            out["n"] = loop(words, holder_at, locked_at, self.states, self.where, self.counts, self.stop_flag,
                            self.period_us)
        self._out = out
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self):
        self.stop_flag[0] = 1
        self._thread.join()
        self.seconds += time.perf_counter() - self._t0
        self.samples += self._out["n"]

    def fractions(self):
        """Per thread ``{label: share of its samples under that label in which it held the GIL}``:
        on a loaded machine a thread holding the GIL may be off its core (the wall ms of
        :meth:`held_ms` grow with the load), while this share of an op's time stays comparable."""
        return [{lab: round(float(c[1]) / float(c[0] + c[1]), 3) for lab, c in zip(self.labels, per_thread)
                 if c[0] + c[1]} for per_thread in self.counts]

    def held_ms(self, per=1):
        """Per thread ``{label: ms the thread held the GIL under it}`` (samples scaled to the sampled
        wall time), divided by ``per`` (e.g. steps)."""
        scale = self.seconds / max(self.samples, 1) * 1e3 / per
        return [{lab: round(float(c[1]) * scale, 3) for lab, c in zip(self.labels, per_thread) if c[1]}
                for per_thread in self.counts]
