"""``tw.profiler``: per-op time and bytes for graphs, ``tw.function`` calls and eager ops.

While a profile is active every node the executor runs (``Session.run``, ``tw.function``
calls, the bodies of ``cond``/``while_loop``) is timed, together with the plan run that
holds it; eager ops are timed too (``eager=True``, the default). Results come as a text
table per op type (or per node), a Chrome trace (open ``chrome://tracing`` or
https://ui.perfetto.dev and load the file), or the raw :class:`Event` list.

>>> import numpy as np, tensorweave as tw
>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     x = tf.placeholder(tf.float32, [64, 64], name="x")
...     y = tf.nn.relu(tf.matmul(x, x, name="mm"), name="act")
>>> with tf.Session(graph=g) as sess, tw.profiler.Profile() as prof:
...     for _ in range(3):
...         _ = sess.run(y, {x: np.ones((64, 64), np.float32)})
>>> sorted({(e.name, e.type) for e in prof.events if e.kind == "op"})
[('act', 'Relu'), ('mm', 'MatMul')]
>>> sum(e.kind == "op" for e in prof.events)   # each node once per run
6
>>> print(prof.table(top=2).splitlines()[0])  # doctest: +NORMALIZE_WHITESPACE
op type  calls  total ms  mean µs  % time  out bytes
>>> import os, tempfile
>>> path = prof.export_chrome_trace(os.path.join(tempfile.mkdtemp(), "trace.json"))

With no profile active the executor pays one global read per plan run, nothing per node,
and eager ops run their kernels unwrapped.

Times are wall-clock (``time.perf_counter_ns``). An op's *self* time excludes ops nested in
it (a ``While`` node excludes its body's nodes); "% time" is the share of all ops' self time.
The summary separates kernel time from *executor overhead*: the time inside plan runs
when no kernel was running on any thread (argument gathering, buffer release, scheduling).
"""
import collections
import json
import os
import threading
import time

from tensorweave.core import dispatch
from tensorweave.runtime.runtime import default_runtime

__all__ = ["Profile", "Event", "start", "stop", "active"]

Event = collections.namedtuple(
    "Event", "kind name type device start_ns end_ns thread_id thread_name bytes")
Event.__doc__ = """One timed interval.

``kind`` is ``"op"`` (a graph node run by the executor), ``"eager"`` (an op run eagerly),
``"run"`` (one plan run: ``Session.run``, a ``tw.function`` call, a loop body) or ``"copy"``
(a transfer between devices). ``bytes`` is the size of the outputs; for a run, the plan's
planned peak of live bytes (the memory plan of the graph passes; 0 when not planned).
"""
Event.duration_ns = property(lambda e: e.end_ns - e.start_ns)

_LOCK = threading.Lock()
_ACTIVE = None


def _nbytes(result):
    n = getattr(result, "nbytes", None)
    if n is not None:
        return int(n)
    if isinstance(result, (tuple, list)):
        return sum(int(getattr(r, "nbytes", 0) or 0) for r in result)
    return 0


class Profile:
    """Records ops while active; use as a context manager or with :meth:`start`/:meth:`stop`.

    ``eager``: also time ops executed eagerly (their kernels are wrapped while the profile is
    active and restored after).
    """

    def __init__(self, eager=True):
        self.eager = eager
        self._raw = []             # tuples in Event field order, appended from any thread
        self._threads = {}         # thread ident -> name at first sight
        self.start_ns = self.end_ns = None
        self._events = None

    # ---- lifecycle --------------------------------------------------------------------------
    def start(self):
        global _ACTIVE
        with _LOCK:
            if _ACTIVE is not None:
                raise RuntimeError("A tw.profiler profile is already active; stop it first "
                                   "(profiles do not nest)")
            if self.start_ns is not None:
                raise RuntimeError("This Profile has already run; create a new one")
            _ACTIVE = self
            self.start_ns = time.perf_counter_ns()
            if self.eager:
                dispatch.set_eager_hook(self._eager_call)
            default_runtime().profiler = self
        return self

    def stop(self):
        global _ACTIVE
        with _LOCK:
            if _ACTIVE is not self:
                raise RuntimeError("This profile is not active")
            default_runtime().profiler = None
            if self.eager:
                dispatch.set_eager_hook(None)
            self.end_ns = time.perf_counter_ns()
            _ACTIVE = None
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---- recording (called by the executor and the eager wrappers) --------------------------
    def _thread(self):
        tid = threading.get_ident()
        if tid not in self._threads:
            self._threads[tid] = threading.current_thread().name
        return tid

    def record_node(self, name, op_type, device, t0, t1, result):
        self._raw.append(("op" if op_type != "_Copy" else "copy", name, op_type, device, t0, t1,
                          self._thread(), _nbytes(result)))

    def record_run(self, label, n_steps, parallel, t0, t1, planned_peak_bytes=0):
        self._raw.append(("run", label, "parallel" if parallel else "sequential", "", t0, t1,
                          self._thread(), planned_peak_bytes or 0))

    def record_eager(self, op_type, device, t0, t1, result):
        self._raw.append(("eager", op_type, op_type, device, t0, t1, self._thread(), _nbytes(result)))

    def _eager_call(self, kernel, op_type, device, args, attrs):
        t0 = time.perf_counter_ns()
        r = kernel(*args, **attrs)
        t1 = time.perf_counter_ns()
        if default_runtime().profiler is self:   # the profile may have stopped while the kernel ran
            self.record_eager(op_type, device or "CPU", t0, t1, r)
        return r

    # ---- results ----------------------------------------------------------------------------
    @property
    def events(self):
        """All recorded :class:`Event` s, ordered by start time."""
        if self._events is None or len(self._events) != len(self._raw):
            raw = sorted(self._raw, key=lambda r: (r[4], -r[5]))  # outer before inner on ties
            self._events = [Event(k, n, t, d, s, e, tid, self._threads.get(tid, str(tid)), b)
                            for k, n, t, d, s, e, tid, b in raw]
        return self._events

    def _self_times(self):
        """Per event: its duration minus the durations of events nested in it on its thread."""
        events = self.events
        self_ns = [e.duration_ns for e in events]
        by_thread = collections.defaultdict(list)
        for i, e in enumerate(events):
            by_thread[e.thread_id].append(i)
        for idxs in by_thread.values():
            stack = []
            for i in idxs:   # already sorted by start; an outer event starts no later than its children
                e = events[i]
                while stack and events[stack[-1]].end_ns <= e.start_ns:
                    stack.pop()
                if stack and e.end_ns <= events[stack[-1]].end_ns:
                    self_ns[stack[-1]] -= e.duration_ns
                stack.append(i)
        return self_ns

    def stats(self, group_by="type"):
        """Rows ``{key, calls, total_ns, mean_ns, bytes, percent}`` over op and eager events.

        ``group_by``: ``"type"`` (op type) or ``"name"`` (node name; eager ops by type).
        ``total_ns`` is self time (nested ops excluded); ``percent`` is its share of all ops' self time.
        """
        if group_by not in ("type", "name"):
            raise ValueError(f"group_by must be 'type' or 'name', got {group_by!r}")
        self_ns = self._self_times()
        rows = {}
        for e, s in zip(self.events, self_ns):
            if e.kind == "run":
                continue
            key = e.type if group_by == "type" else e.name
            r = rows.get(key)
            if r is None:
                r = rows[key] = {"key": key, "calls": 0, "total_ns": 0, "bytes": 0}
            r["calls"] += 1
            r["total_ns"] += s
            r["bytes"] += e.bytes
        grand = sum(r["total_ns"] for r in rows.values()) or 1
        for r in rows.values():
            r["mean_ns"] = r["total_ns"] / r["calls"]
            r["percent"] = 100.0 * r["total_ns"] / grand
        return list(rows.values())

    def summary(self):
        """Totals in ns: profile wall time, time inside plan runs, kernels busy, executor overhead.

        ``executor_overhead_ns`` is the time inside top-level plan runs during which no op ran
        on any thread; ``outside_runs_ns`` is profiled time outside any plan run (Python around
        the calls: ``tw.function`` argument handling, Keras logs, eager dispatch ...).
        """
        events = self.events
        end = self.end_ns if self.end_ns is not None else time.perf_counter_ns()
        runs = _union([(e.start_ns, e.end_ns) for e in events if e.kind == "run"])
        ops = _union([(e.start_ns, e.end_ns) for e in events if e.kind in ("op", "copy")])
        in_runs = _length(runs)
        busy = _length(_intersect(runs, ops))
        return {"wall_ns": end - self.start_ns if self.start_ns is not None else 0,
                "runs": sum(1 for e in events if e.kind == "run"),
                "ops": sum(1 for e in events if e.kind in ("op", "copy")),
                "eager_ops": sum(1 for e in events if e.kind == "eager"),
                "in_runs_ns": in_runs, "kernel_busy_ns": busy,
                "executor_overhead_ns": in_runs - busy,
                "outside_runs_ns": max(0, (end - self.start_ns if self.start_ns else 0) - in_runs),
                "planned_peak_bytes": max((e.bytes for e in events if e.kind == "run"), default=0)}

    def table(self, sort_by="total", top=20, group_by="type"):
        """A text table: op type (or node), calls, total ms, mean µs, % time, output bytes.

        ``sort_by``: ``"total"``, ``"calls"``, ``"mean"``, ``"bytes"`` or ``"name"``;
        ``top``: the number of rows (None for all). A summary of executor overhead follows.
        """
        keys = {"total": lambda r: -r["total_ns"], "calls": lambda r: -r["calls"],
                "mean": lambda r: -r["mean_ns"], "bytes": lambda r: -r["bytes"],
                "name": lambda r: r["key"]}
        if sort_by not in keys:
            raise ValueError(f"sort_by must be one of {sorted(keys)}, got {sort_by!r}")
        rows = sorted(self.stats(group_by), key=keys[sort_by])
        shown = rows if top is None else rows[:top]
        width = max([len("op type")] + [len(r["key"]) for r in shown])
        head = "op type" if group_by == "type" else "node"
        lines = [f"{head:<{width}}  {'calls':>7}  {'total ms':>10}  {'mean µs':>10}  {'% time':>7}  "
                 f"{'out bytes':>10}"]
        for r in shown:
            lines.append(f"{r['key']:<{width}}  {r['calls']:>7d}  {r['total_ns'] / 1e6:>10.3f}  "
                         f"{r['mean_ns'] / 1e3:>10.1f}  {r['percent']:>6.1f}%  {_human(r['bytes']):>10}")
        if top is not None and len(rows) > top:
            rest = rows[top:]
            lines.append(f"{'(' + str(len(rest)) + ' more)':<{width}}  {sum(r['calls'] for r in rest):>7d}  "
                         f"{sum(r['total_ns'] for r in rest) / 1e6:>10.3f}  {'':>10}  "
                         f"{sum(r['percent'] for r in rest):>6.1f}%  {_human(sum(r['bytes'] for r in rest)):>10}")
        s = self.summary()
        if s["runs"]:
            share = 100.0 * s["executor_overhead_ns"] / (s["in_runs_ns"] or 1)
            lines.append(f"-- {s['runs']} plan runs, {s['in_runs_ns'] / 1e6:.3f} ms: kernels "
                         f"{s['kernel_busy_ns'] / 1e6:.3f} ms, executor overhead "
                         f"{s['executor_overhead_ns'] / 1e6:.3f} ms ({share:.1f}%); outside runs "
                         f"{s['outside_runs_ns'] / 1e6:.3f} ms of {s['wall_ns'] / 1e6:.3f} ms profiled"
                         + (f"; planned peak {_human(s['planned_peak_bytes'])}" if s["planned_peak_bytes"] else ""))
        return "\n".join(lines)

    def export_chrome_trace(self, path):
        """Writes the events as Chrome trace JSON (``traceEvents``, complete "X" events in µs)."""
        pid = os.getpid()
        origin = self.start_ns or 0
        # Small thread numbers in order of first appearance read better than 15-digit idents.
        tids = {ident: i + 1 for i, ident in enumerate(self._threads)}
        trace = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "tensorweave"}}]
        for ident, name in self._threads.items():
            trace.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tids[ident], "args": {"name": name}})
        for e in self.events:
            args = {"type": e.type, "device": e.device}
            if e.kind != "run":
                args["bytes"] = e.bytes
            trace.append({"name": e.name, "cat": e.kind, "ph": "X", "pid": pid, "tid": tids[e.thread_id],
                          "ts": (e.start_ns - origin) / 1e3, "dur": e.duration_ns / 1e3, "args": args})
        with open(path, "w") as f:
            json.dump({"traceEvents": trace, "displayTimeUnit": "ms"}, f)
        return path




def _union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def _intersect(a, b):
    """Intersection of two sorted, disjoint interval lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append([s, e])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _length(intervals):
    return sum(e - s for s, e in intervals)


def _human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0


def start(eager=True):
    """Starts and returns a new :class:`Profile` (``tw.profiler.stop()`` ends it)."""
    return Profile(eager=eager).start()


def stop():
    """Stops the active profile and returns it."""
    prof = _ACTIVE
    if prof is None:
        raise RuntimeError("No tw.profiler profile is active")
    return prof.stop()


def active():
    """The active :class:`Profile`, or None."""
    return _ACTIVE
