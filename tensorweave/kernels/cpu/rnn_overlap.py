"""The sequence-wide products of a recurrent kernel run beside its step loop, on the other core.

A fused recurrent kernel's step loop (``rnn_gemm``) is serial: one small product and one pass per
step, on one thread. Its sequence-wide products are not: the input projection of every step
(``x @ kernel``) before the loop, and after backpropagation through time the input and weight
gradients (``dz @ kernel^T``, and ``[x | h_prev]^T @ dz`` for both weights). Run after the loop on the library's
threads (as before), they left the second core idle through the whole loop; on the lstm workload
(2-core AMD EPYC) the loops were ~14 of the ~36 ms of kernel CPU time, the four products ~21.

So the steps are cut into spans (:func:`spans`, :data:`CHUNK_STEPS` steps each) and the products
are cut along time with them, each span's on one thread: the forward loop waits for its span's
projection only (the helper thread projects the next spans meanwhile); the backward loop hands
each finished span's gradient products to the helper thread and, once it is done with its own
steps, takes the remaining ones itself (:class:`Tasks`). Every task writes its own output, and a
weight gradient is the sum of the spans' parts added in the order the backward loop leaves the spans
(:class:`OrderedSum`: a part finished ahead of its turn waits in a buffer, so a few buffers live at
once instead of one per span), so the bits do not depend on which thread ran what, nor when.

Where this does not pay — one core, a loop on several threads, no loop plan, or
``TW_RNN_OVERLAP=0`` — the kernels make the same calls with a single span, on the library's
threads.

While the products run on two threads at once, NumPy's OpenBLAS (process-wide thread count) is
held at one thread (:func:`one_thread`, counted, so that overlapping holders restore once).

>>> from tensorweave.kernels.cpu import rnn_overlap
>>> rnn_overlap.spans(20, 8)
[(0, 4), (4, 12), (12, 20)]
>>> rnn_overlap.original(4, 12, 20, go_backwards=True)
(8, 16)
>>> import numpy as np
>>> total = rnn_overlap.OrderedSum((2,), np.float64, order=[1, 0])
>>> for i in (0, 1):            # part 0 comes first, but waits for part 1's turn
...     part = total.buffer(); part[:] = i + 1; total.put(i, part)
>>> total.result().tolist()
[3.0, 3.0]
"""
import contextlib
import os
import queue
import threading

import numpy as np

#: steps per span (the first span is half as long: the forward loop waits for its projection)
CHUNK_STEPS = 8
#: ``TW_RNN_OVERLAP=0``: the products after (before) the loop, on the library's threads
ENABLED = os.environ.get("TW_RNN_OVERLAP", "1") != "0"


def spans(t, chunk=None):
    """Processed-step spans ``[(s0, s1), ...]`` covering ``range(t)`` in order (``chunk`` steps
    each, default :data:`CHUNK_STEPS` read at the call)."""
    chunk = CHUNK_STEPS if chunk is None else chunk
    if t <= 0:
        return []
    cuts = [0, min(t, max(1, chunk // 2))]
    while cuts[-1] < t:
        cuts.append(min(t, cuts[-1] + chunk))
    return list(zip(cuts[:-1], cuts[1:]))


def original(s0, s1, t, go_backwards):
    """The original time indices ``[a, e)`` of processed steps ``[s0, s1)``."""
    return (t - s1, t - s0) if go_backwards else (s0, s1)


def enabled(plan):
    """Whether a kernel whose loop runs under ``plan`` (``rnn_gemm.Plan`` or None) overlaps."""
    from tensorweave.kernels import threads
    return ENABLED and plan is not None and plan.threads == 1 and threads.cores() >= 2


# ---- NumPy's OpenBLAS held at one thread ---------------------------------------------------------
def one_thread():
    """NumPy's OpenBLAS on one thread inside (process-wide; nested and concurrent holders counted,
    the first sets, the last restores). Nothing where its count cannot be set. It is the split
    products' hold (``gemm._openblas_one_thread``): one counter for every holder in the process, so
    a kernel's hold ending while a split product's is still open cannot restore the count under it."""
    from tensorweave.kernels.cpu import gemm
    if gemm._openblas_threads() is None:
        return contextlib.nullcontext()
    return gemm._openblas_one_thread()


# ---- the helper thread ---------------------------------------------------------------------------
class _Helper:
    """One daemon thread running queued callables (a forked child starts its own)."""

    def __init__(self):
        self.pid = None
        self.jobs = None
        self.lock = threading.Lock()

    def submit(self, job):
        with self.lock:
            if self.pid != os.getpid():
                self.jobs, self.pid = queue.SimpleQueue(), os.getpid()
                threading.Thread(target=self._run, args=(self.jobs,), name="tw-rnn", daemon=True).start()
            self.jobs.put(job)

    @staticmethod
    def _run(jobs):
        while True:
            jobs.get()()


_helper = _Helper()


class Tasks:
    """A kernel's side work: callables taken in order by the helper thread (``overlap``) or by
    the kernel's thread when it has nothing else to do (:meth:`wait`, :meth:`finish`). A task never
    waits for anything, so neither thread can wait on the other for long."""

    def __init__(self, overlap):
        self.overlap = overlap
        self.todo = []
        self.next = 0
        self.running = 0
        self.error = None
        self.cond = threading.Condition()

    def add(self, fn):
        """Queues ``fn()``; returns an Event set when it has run (or failed)."""
        done = threading.Event()
        with self.cond:
            self.todo.append((fn, done))
        if self.overlap:
            _helper.submit(self.run_one)
        return done

    def run_one(self):
        """Runs the oldest task not yet taken; False if none was left."""
        with self.cond:
            if self.next == len(self.todo):
                return False
            fn, done = self.todo[self.next]
            self.next += 1
            self.running += 1
        try:
            fn()
        except BaseException as e:   # noqa: BLE001 - raised again on the kernel's thread
            self.error = e
        finally:
            done.set()
            with self.cond:
                self.running -= 1
                self.cond.notify_all()
        return True

    def _raise(self):
        if self.error is not None:
            raise self.error

    def wait(self, done):
        """Until ``done`` (an :meth:`add` Event) is set, running queued tasks meanwhile."""
        while not done.is_set():
            if not self.run_one():
                done.wait()
        self._raise()

    def finish(self):
        """Runs what is left, waits for the helper's tasks under way; raises a task's error."""
        while self.run_one():
            pass
        with self.cond:
            while self.running:
                self.cond.wait()
        self._raise()


class OrderedSum:
    """The sum of parts numbered ``order``'s entries, added in that order (``order[0]`` is the sum's
    first term) whichever thread finishes which part when, so its bits are fixed. A part ready
    before its turn waits; its buffer (:meth:`buffer`) is reused once added, so as many buffers
    exist as parts were ever out of turn at once, plus one, instead of one per part. One thread at
    a time adds (the others hand their part over and return: a task never waits)."""

    def __init__(self, shape, dtype, order):
        self.shape, self.dtype, self.order = shape, dtype, list(order)
        self.turn = 0                       # index in ``order`` of the next part to add
        self.total = None
        self.pending = {}                   # part number -> its buffer, ready before its turn
        self.free = []                      # buffers already added, to reuse
        self.buffers = 0                    # buffers allocated (tests)
        self.adding = False
        self.lock = threading.Lock()

    def buffer(self):
        """An array of the parts' shape to compute a part into (contents undefined)."""
        with self.lock:
            if self.free:
                return self.free.pop()
            self.buffers += 1
        return np.empty(self.shape, self.dtype)

    def put(self, i, part):
        """Part ``i`` is ready in ``part`` (a :meth:`buffer`): added now if its turn has come, with
        every later part already waiting; else kept until then."""
        with self.lock:
            self.pending[i] = part
            if self.adding:                 # the thread adding will find it
                return
            self.adding = True
        while True:
            with self.lock:
                nxt = self.pending.pop(self.order[self.turn], None) if self.turn < len(self.order) else None
                if nxt is None:
                    self.adding = False
                    return
                self.turn += 1
                first = self.total is None
                if first:
                    self.total = nxt
            if not first:                   # only this thread touches the total while adding
                np.add(self.total, nxt, out=self.total)
                with self.lock:
                    self.free.append(nxt)

    def result(self):
        """The sum, once every part was put."""
        if self.turn != len(self.order):
            raise RuntimeError(f"OrderedSum: {len(self.order) - self.turn} of {len(self.order)} parts not added")
        return np.zeros(self.shape, self.dtype) if self.total is None else self.total    # no parts: a zero-length sequence
