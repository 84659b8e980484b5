"""The executor: runs the part of a graph that some fetches need.

A :class:`Plan` is compiled once per (graph version, fetches, targets, feeds): the needed
ops in topological order, each bound to its kernel (attrs fixed), value slots instead of
dicts, copies where an edge crosses devices, and for every slot the step after which no
one reads it (its buffer is dropped then). Chains run in a tight loop on the calling
thread; plans with independent heavy ops run dependency-driven on a thread pool, where
each finished node releases its consumers. Kernels are pure (stateful ops are ordered by
control edges), so results do not depend on the schedule.

Profiling (``tw.profiler``) sets :data:`_profiler`; :func:`run_plan` then runs a copy of
the plan whose steps time themselves. With no profiler active the only cost is one global
read per ``run_plan`` call, never per node.
"""
import functools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from tensorweave.core import errors
from tensorweave.runtime import devices, threads

_POOL = None
_POOL_LOCK = threading.Lock()


def _pool():
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                _POOL = ThreadPoolExecutor(max_workers=max(4, os.cpu_count() or 2),
                                           thread_name_prefix="tw-executor")
    return _POOL


class Step:
    __slots__ = ("fn", "ins", "outs", "single", "op", "device")

    def __init__(self, fn, ins, outs, single, op, device):
        self.fn, self.ins, self.outs, self.single, self.op, self.device = fn, ins, outs, single, op, device


class Plan:
    """A compiled, reusable schedule for one fetch/feed signature."""

    def __init__(self, steps, n_slots, feed_slots, fetch_slots, frees, deps, parallel, num_copies):
        self.steps = steps
        self.n_slots = n_slots
        self.feed_slots = feed_slots
        self.fetch_slots = fetch_slots
        self.frees = frees            # per step: slots no one reads afterwards
        self.deps = deps              # per step: indices of steps it waits for
        self.parallel = parallel
        self.num_copies = num_copies
        self.instrumented = None      # the self-timing twin used while profiling (built lazily)

    def __len__(self):
        return len(self.steps)


def _copy_between(value):
    # Logical CPU devices share host memory and values are never written in place,
    # so a CPU-to-CPU transfer is the same buffer. Other device types override this.
    return value


def needed_ops(fetch_ops, feed_ids):
    """Ops the fetches depend on (through data and control edges), stopping at fed tensors."""
    seen = {}
    stack = list(fetch_ops)
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen[id(op)] = op
        for t in op.inputs:
            if id(t) not in feed_ids:
                stack.append(t.op)
        stack.extend(c for c in op.control_inputs if c is not None)
    return sorted(seen.values(), key=lambda o: o._id)


def build_plan(fetches, targets, feeds, soft_placement=None, parallel=None):
    feed_ids = {id(t): i for i, t in enumerate(feeds)}
    ops = needed_ops([t.op for t in fetches if id(t) not in feed_ids] + list(targets), feed_ids)
    # Graph passes (runtime/passes): a rewritten op list; the user's graph is untouched.
    from tensorweave.runtime import passes
    ops, fetches, pass_stats = passes.optimize(ops, fetches, targets, feeds)
    slot_of = {}
    n = 0
    feed_slots = []
    for t in feeds:
        slot_of[id(t)] = n
        feed_slots.append(n)
        n += 1
    steps = []
    preset = []
    passed_on = {}     # id(preset op) -> the steps it had to wait for
    slot_waits = {}    # its output slot -> the same steps
    producer_step = {}
    op_device = {}
    num_copies = 0
    copy_slot = {}
    step_of_op = {}
    for op in ops:
        device = devices.place(op.device, op.opdef, soft_placement)
        devices.log_placement(op.name, op.type, device)
        op_device[id(op)] = device
        ins = []
        for t in op.inputs:
            s = slot_of[id(t)]
            src_dev = op_device.get(id(t.op)) if id(t) not in feed_ids else device
            if src_dev is not None and src_dev != device and t.dtype.name != "resource":
                key = (s, device)
                if key not in copy_slot:
                    copy_slot[key] = n
                    steps.append(Step(_copy_between, (s,), n, True, None, device))
                    producer_step[n] = len(steps) - 1
                    n += 1
                    num_copies += 1
                s = copy_slot[key]
            ins.append(s)
        outs = []
        for t in op.outputs:
            if id(t) not in feed_ids:
                slot_of[id(t)] = n
            outs.append(n)
            n += 1
        kernel = op.opdef.kernel(devices.device_type_of(device))
        # While an eager profile is active the registry holds timing wrappers; a plan must
        # bind the real kernel, or its nodes would be timed twice and stay wrapped after.
        kernel = getattr(kernel, "_tw_unprofiled", kernel)
        attrs = {k: v for k, v in op.attrs.items() if k[0] != "_"}
        if op.opdef.bind is not None:
            attrs.update(op.opdef.bind(op))
        fn = functools.partial(kernel, **attrs) if attrs else kernel
        if op.type in PRESET_OPS:
            # Its value is fixed by its attributes: computed now, placed in the slot
            # before every run, no step at run time. Ordering edges that ran through it
            # (tw.function chains stateful ops) pass on to its consumers.
            preset.append((outs[0], fn()))
            passed_on[id(op)] = slot_waits[outs[0]] = _control_steps(op, step_of_op, passed_on)
            continue
        single = op.opdef.num_outputs == 1  # ops with a variable output count return sequences
        steps.append(Step(fn, tuple(ins), outs[0] if single and outs else tuple(outs), single, op, device))
        step_of_op[id(op)] = len(steps) - 1
        for o in outs:
            producer_step[o] = len(steps) - 1
    fetch_slots = [slot_of[id(t)] for t in fetches]
    # dependencies between steps (data + control)
    deps = []
    for st in steps:
        d = {producer_step[s] for s in st.ins if s in producer_step}
        for s in st.ins:
            d.update(slot_waits.get(s, ()))
        if st.op is not None:
            d.update(_control_steps(st.op, step_of_op, passed_on))
        deps.append(tuple(sorted(d)))
    # last reader of every slot; fetched and fed slots are kept
    keep = set(fetch_slots) | set(feed_slots)
    last = {}
    for i, st in enumerate(steps):
        for s in st.ins:
            last[s] = i
    frees = [[] for _ in steps]
    for s, i in last.items():
        if s not in keep:
            frees[i].append(s)
    for i, st in enumerate(steps):  # outputs nobody reads are dropped at once
        outs = (st.outs,) if st.single else st.outs
        frees[i].extend(o for o in outs if o not in last and o not in keep)
    frees = [tuple(f) for f in frees]
    heavy = [st.op is not None and is_heavy(st.op) for st in steps]
    if parallel is None:
        parallel = _worth_parallel(steps, deps, heavy)
    plan = Plan(steps, n, feed_slots, fetch_slots, frees, deps, parallel, num_copies)
    plan.initial = [None] * n
    for s, v in preset:
        plan.initial[s] = v
    # For the parallel schedule "last reader" is a count, not a position.
    readers = {}
    for st in steps:
        for s in set(st.ins):
            readers[s] = readers.get(s, 0) + 1
    plan.readers = readers
    plan.pass_stats = pass_stats
    plan.planned_peak_bytes = pass_stats.get("planned_peak_bytes")
    plan.keep = keep
    plan.heavy = heavy
    # Opaque nodes (Python functions, control-flow bodies) may block on each other (a
    # barrier, a queue), so they overlap even when BLAS owns every core.
    plan.opaque = any(h and callable(st.op.opdef.heavy) for h, st in zip(heavy, steps))
    plan.unread = [tuple(o for o in ((st.outs,) if st.single else st.outs) if o not in last and o not in keep)
                   for st in steps]
    return plan


def _control_steps(op, step_of_op, passed_on):
    d = set()
    for c in op.control_inputs:
        if c is not None:
            if id(c) in step_of_op:
                d.add(step_of_op[id(c)])
            else:
                d.update(passed_on.get(id(c), ()))
    return d


# Ops whose output depends only on their attributes (a constant, a variable's handle).
PRESET_OPS = frozenset({"Const", "VarHandleOp"})

# An op counts as heavy (worth its own thread) when it touches this many elements or more;
# below that, handing it to another thread costs more than it saves.
HEAVY_ELEMENTS = 1 << 17


def is_heavy(op):
    h = op.opdef.heavy
    if not h:
        return False
    if callable(h):
        return bool(h(op))
    n = 0
    for t in list(op.inputs) + list(op.outputs):
        dims = t.shape.as_tuple()
        if dims is None:
            return True
        size = 1
        for d in dims:
            size *= 1024 if d is None else d
        n += size
    return n >= HEAVY_ELEMENTS


def _worth_parallel(steps, deps, heavy):
    """True when two heavy ops (big matmuls, convs, py_functions ...) can run at the same time.

    Whether they *may* is decided per run (:func:`threads.inter_op_slots`): with BLAS on
    every core, two matmuls side by side only fight over the cores."""
    level = []
    heavy_at = {}
    for i, st in enumerate(steps):
        lv = 1 + max((level[d] for d in deps[i]), default=0)
        level.append(lv)
        if heavy[i]:
            heavy_at[lv] = heavy_at.get(lv, 0) + 1
            if heavy_at[lv] > 1:
                return True
    return False


# The active ``tw.profiler`` recorder, or None. Only tensorweave.profiler sets it.
_profiler = None


def run_plan(plan, feed_values):
    """Executes ``plan`` with values for its feeds; returns the fetched values in order."""
    if _profiler is not None:
        return _run_profiled(plan, feed_values)
    vals = plan.initial.copy()
    for s, v in zip(plan.feed_slots, feed_values):
        vals[s] = v
    if plan.parallel and (plan.opaque or threads.inter_op_slots() > 1):
        _run_parallel(plan, vals)
    else:
        _run_sequential(plan, vals)
    return [vals[s] for s in plan.fetch_slots]


def _run_sequential(plan, vals):
    frees = plan.frees
    i = 0
    try:
        for i, st in enumerate(plan.steps):
            r = st.fn(*[vals[s] for s in st.ins])
            if st.single:
                vals[st.outs] = r
            else:
                for s, v in zip(st.outs, r):
                    vals[s] = v
            for s in frees[i]:
                vals[s] = None
    except Exception as e:  # noqa: BLE001 - re-raised naming the node
        raise node_error(plan.steps[i], e) from e


def _run_parallel(plan, vals):
    steps, deps = plan.steps, plan.deps
    n = len(steps)
    if n == 0:
        return
    consumers = [[] for _ in steps]
    for i, d in enumerate(deps):
        for j in d:
            consumers[j].append(i)
    pending = [len(d) for d in deps]
    remaining = dict(plan.readers)
    keep, unread = plan.keep, plan.unread
    lock = threading.Lock()
    done = threading.Event()
    state = {"left": n, "error": None}
    pool = _pool()

    heavy = plan.heavy

    def run_chain(starts):
        # Light nodes run on this thread; a heavy node that becomes ready while this thread
        # has other work goes to the pool, so heavy nodes overlap without paying a thread
        # hand-off for every small op.
        local = list(starts)
        while local:
            i = local.pop()
            if state["error"] is not None:
                done.set()
                return
            st = steps[i]
            try:
                r = st.fn(*[vals[s] for s in st.ins])
                if st.single:
                    vals[st.outs] = r
                else:
                    for s, v in zip(st.outs, r):
                        vals[s] = v
            except BaseException as e:  # noqa: BLE001 - reported to the caller
                state["error"] = (st, e)
                done.set()
                return
            ready = []
            with lock:
                for s in set(st.ins):
                    remaining[s] -= 1
                    if remaining[s] == 0 and s not in keep:
                        vals[s] = None
                for s in unread[i]:
                    vals[s] = None
                for c in consumers[i]:
                    pending[c] -= 1
                    if pending[c] == 0:
                        ready.append(c)
                state["left"] -= 1
                if state["left"] == 0:
                    done.set()
            for c in ready:
                if heavy[c] and local:
                    pool.submit(run_chain, (c,))
                else:
                    local.append(c)

    roots = [i for i in range(n) if not deps[i]]
    heavy_roots = [r for r in roots if heavy[r]]
    here = [r for r in roots if not heavy[r]] or heavy_roots[:1]
    for r in heavy_roots:
        if r not in here:
            pool.submit(run_chain, (r,))
    run_chain(here)
    done.wait()
    if state["error"] is not None:
        st, e = state["error"]
        raise node_error(st, e) from e


# ---- profiling ----------------------------------------------------------------------------------
def _run_profiled(plan, feed_values):
    """``run_plan`` on the plan's self-timing twin, bracketed by one "run" record."""
    twin = getattr(plan, "instrumented", None)
    if twin is None:
        twin = plan.instrumented = _instrument(plan)
    prof = _profiler
    parallel = twin.parallel and (twin.opaque or threads.inter_op_slots() > 1)
    t0 = time.perf_counter_ns()
    try:
        vals = twin.initial.copy()
        for s, v in zip(twin.feed_slots, feed_values):
            vals[s] = v
        if parallel:
            _run_parallel(twin, vals)
        else:
            _run_sequential(twin, vals)
        return [vals[s] for s in twin.fetch_slots]
    finally:
        if prof is not None:
            prof.record_run(twin.label, len(twin.steps), parallel, t0, time.perf_counter_ns(),
                            twin.planned_peak_bytes)


def _instrument(plan):
    """A copy of ``plan`` whose step functions record (op, device, start, end, thread, bytes)."""
    twin = Plan([Step(_timed(st), st.ins, st.outs, st.single, st.op, st.device) for st in plan.steps],
                plan.n_slots, plan.feed_slots, plan.fetch_slots, plan.frees, plan.deps, plan.parallel,
                plan.num_copies)
    for attr in ("readers", "keep", "heavy", "unread", "opaque", "initial", "planned_peak_bytes"):
        setattr(twin, attr, getattr(plan, attr))
    graph = next((st.op.graph for st in plan.steps if st.op is not None), None)
    twin.label = (f"function:{graph.name}" if getattr(graph, "is_function_graph", False)
                  else "Session.run" if graph is not None else "run")
    return twin


def _timed(step):
    fn, op, device = step.fn, step.op, step.device
    name, op_type = (op.name, op.type) if op is not None else (f"_Copy_to_{device}", "_Copy")

    def timed(*args):
        r = None
        t0 = time.perf_counter_ns()
        try:
            r = fn(*args)
            return r
        finally:   # a failing node is recorded too: the trace shows where the run stopped
            t1 = time.perf_counter_ns()
            prof = _profiler   # read again: the profile may have stopped while the kernel ran
            if prof is not None:
                prof.record_node(name, op_type, device, t0, t1, r)
    return timed


def node_error(step, exc):
    op = step.op
    if op is None:
        return errors.InternalError(f"Copy to {step.device} failed: {exc}")
    where = f"[[node {op.name} (op: {op.type}) on {step.device}" + (
        f", defined at {op.traceback}]]" if op.traceback else "]]")
    msg = exc.message if isinstance(exc, errors.OpError) else f"{type(exc).__name__}: {exc}"
    cls = type(exc) if isinstance(exc, errors.OpError) else (
        errors.ResourceExhaustedError if isinstance(exc, MemoryError) else errors.InvalidArgumentError)
    err = cls(f"{msg}\n  {where}", op=op)
    return err
