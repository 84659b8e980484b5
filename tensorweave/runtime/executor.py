"""The executor: runs the part of a graph that some fetches need.

A :class:`Plan` is compiled once per (graph version, fetches, targets, feeds): the needed
ops in topological order, each bound to its kernel (attrs fixed), value slots instead of
dicts, copies where an edge crosses devices, and for every slot the step after which no
one reads it (its buffer is dropped then). Chains run in a tight loop on the calling
thread; plans with independent heavy ops run dependency-driven on a thread pool, where
each finished node releases its consumers. Kernels are pure (stateful ops are ordered by
control edges), so results do not depend on the schedule.

A plan is built in stages (prune -> passes -> place -> [SBP] -> lower -> schedule -> bind,
see ``docs/design/executor.md``): everything up to ``schedule`` produces a
:class:`~tensorweave.runtime.plan_spec.PlanSpec` (data, shippable to another rank);
:func:`bind` makes it runnable on a :class:`~tensorweave.runtime.runtime.Runtime`.

Profiling (``tw.profiler``) sets the runtime's ``profiler``; :func:`run_plan` then runs a
copy of the plan whose steps time themselves. With no profiler active the only cost is one
attribute read per ``run_plan`` call, never per node.
"""
import functools
import operator
import threading
import time

from tensorweave.core import errors, upcalls
from tensorweave.core.plan_data import Resource, SubGraph
from tensorweave.core.registry import _OPS, get_op
from tensorweave.kernels import threads
from tensorweave.core import devices
from tensorweave.runtime import nogil_segments, overlap
from tensorweave.runtime.plan_spec import (COPY_OP, LocalValue, NodeSpec, PlanSpec, ResourceRef,
                                           ResourceTable)
from tensorweave.runtime.runtime import _same_buffer, default_runtime

class Step:
    __slots__ = ("fn", "ins", "outs", "single", "op", "device", "node")

    def __init__(self, fn, ins, outs, single, op, device, node=None):
        self.fn, self.ins, self.outs, self.single, self.op, self.device = fn, ins, outs, single, op, device
        self.node = node              # the NodeSpec it was bound from (name, type, traceback)


class Plan:
    """A runnable schedule for one fetch/feed signature: a :class:`PlanSpec` bound to kernels,
    resources and a :class:`Runtime`. Calling it runs it: ``plan(feed_values)``."""

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
        self.runtime = None
        self.spec = None
        self.resources = None         # the live objects the spec's resource table resolved to
        self.runner = None            # the steps as straight-line Python (_sequential_runner), made on first use

    def __len__(self):
        return len(self.steps)

    def __call__(self, feed_values):
        return run_plan(self, feed_values)


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


# ---- building: prune -> place -> [SBP] -> passes -> lower -> schedule -> bind ------------------
def build_plan(fetches, targets, feeds, soft_placement=None, parallel=None, runtime=None, log_placement=False):
    """The runnable plan computing ``fetches`` (and running ``targets``) from ``feeds``;
    ``log_placement`` prints each node's device (besides the runtime's own setting)."""
    rt = runtime or default_runtime()
    table = ResourceTable()
    ops_out = []
    spec = build_spec(fetches, targets, feeds, soft_placement, parallel, rt, table, ops_out, log_placement)
    spec.resources = table.descs
    return bind(spec, rt, table.live, ops_out)


def build_spec(fetches, targets, feeds, soft_placement=None, parallel=None, runtime=None, table=None,
               ops_out=None, log_placement=False):
    """The :class:`PlanSpec` (data) of a plan; ``table`` collects its resources (a fresh one
    makes this the outermost spec); ``ops_out`` receives the op behind each node."""
    rt = runtime or default_runtime()
    outermost = table is None
    if outermost:
        table = ResourceTable()
    feed_ids = {id(t): i for i, t in enumerate(feeds)}
    ops = prune(fetches, targets, feed_ids)
    placed = place(ops, rt, soft_placement, log_placement)
    # (the distribute planner's SBP stage goes here: it sees placed ops, before the passes)
    ops, fetches, pass_stats = optimize(ops, fetches, targets, feeds, placed)
    spec, ops_of_nodes = lower(ops, placed, fetches, feeds, rt, table, soft_placement)
    schedule(spec, parallel)
    spec.pass_stats = pass_stats
    if outermost:
        spec.resources = table.descs
    if ops_out is not None:
        ops_out.extend(ops_of_nodes)
    return spec


def prune(fetches, targets, feed_ids):
    """Stage 1: the ops the fetches and targets need, in creation (topological) order."""
    return needed_ops([t.op for t in fetches if id(t) not in feed_ids] + list(targets), feed_ids)


def optimize(ops, fetches, targets, feeds, placed=None):
    """Stage 3: the graph passes (``runtime/passes``) on placed ops: a rewritten op list, the
    graph untouched; a fused kernel is used only where the op's device type has one."""
    from tensorweave.runtime import passes
    return passes.optimize(ops, fetches, targets, feeds, placed=placed)


def place(ops, runtime, soft_placement=None, log_placement=False):
    """Stage 2: each op's device among the runtime's devices (``{id(op): device name}``)."""
    out = {}
    for op in ops:
        device = runtime.place(op.device, op.opdef, soft_placement)
        runtime.log(op.name, op.type, device, log_placement)
        out[id(op)] = device
    return out


def _device_of_node(node, placed, runtime, soft_placement):
    orig = getattr(node, "orig", None)
    d = placed.get(id(orig)) if orig is not None else None
    if d is None or devices.device_type_of(d) not in node.opdef.kernels:
        d = runtime.place(node.device, node.opdef, soft_placement)
    return d


def _inplace_index(op):
    """``k`` when ``op`` is the memory pass's in-place variant of an op with the ``inplace`` trait
    (rebuilt from the trait where the plan is bound), else None."""
    k = getattr(op, "inplace_of", None)
    if k is None or op.type not in _OPS or "inplace" not in _OPS[op.type].traits:
        return None
    return k


def _kernel_ref(op, device):
    """None when the node runs its op's registered kernel (found again by name where the plan
    is bound), else the kernel itself as a LocalValue (generated by a graph pass)."""
    dev_type = devices.device_type_of(device)
    kernel = op.opdef.kernel(dev_type)
    registered = _OPS.get(op.type)
    if registered is not None and registered.kernels.get(dev_type) is kernel:
        return None
    return LocalValue(kernel)


def _data(value, op, runtime, table, soft_placement):
    """A bind-hook value as plan data: sub-graphs become nested specs, resources references."""
    if isinstance(value, SubGraph):
        return build_spec(value.outputs, value.targets, list(value.inputs) + [p for _, p in value.graph.captures],
                          soft_placement, None, runtime, table)
    if isinstance(value, Resource):
        return table.ref(value.kind, value.name, value.live)
    if callable(value) and not isinstance(value, type):
        return LocalValue(value)
    return value


def lower(ops, placed, fetches, feeds, runtime, table, soft_placement=None):
    """Stage 4: nodes over integer slots, copy nodes where an edge crosses devices, presets
    for ops whose value is fixed by their attrs. Returns (spec, op behind each node). A node a
    pass made runs where the op it stands for was placed."""
    feed_ids = {id(t) for t in feeds}
    slot_of = {}
    n = 0
    feed_slots = []
    for t in feeds:
        slot_of[id(t)] = n
        feed_slots.append(n)
        n += 1
    nodes, node_ops, ctrl = [], [], []
    presets = []
    passed_on = {}     # id(preset op) -> the nodes it had to wait for
    slot_waits = {}    # its output slot -> the same nodes
    producer = {}
    copy_slot = {}
    node_of_op = {}
    for op in ops:
        device = placed.get(id(op))
        if device is None:
            device = placed[id(op)] = _device_of_node(op, placed, runtime, soft_placement)
        ins = []
        for t in op.inputs:
            s = slot_of[id(t)]
            src_dev = placed.get(id(t.op)) if id(t) not in feed_ids else device
            if src_dev is not None and src_dev != device and t.dtype.name != "resource":
                key = (s, device)
                if key not in copy_slot:
                    copy_slot[key] = n
                    nodes.append(NodeSpec(f"_Copy_to_{device}", COPY_OP, device, {"src": src_dev, "dst": device},
                                          (s,), n, True))
                    node_ops.append(None)
                    ctrl.append(())
                    producer[n] = len(nodes) - 1
                    n += 1
                s = copy_slot[key]
            ins.append(s)
        outs = []
        for t in op.outputs:
            if id(t) not in feed_ids:
                slot_of[id(t)] = n
            outs.append(n)
            n += 1
        if op.type in PRESET_OPS:
            # Its value is fixed by its attributes: computed now, placed in the slot
            # before every run, no step at run time. Ordering edges that ran through it
            # (tw.function chains stateful ops) pass on to its consumers.
            if op.type == "VarHandleOp":
                value = table.ref("variable", op.attrs.get("shared_name"), op.attrs["variable"],
                                  dtype=op.attrs["dtype"], shape=op.attrs["shape"])
            else:
                kernel = op.opdef.kernel(devices.device_type_of(device))
                value = kernel(**{k: v for k, v in op.attrs.items() if k[0] != "_"})
            presets.append((outs[0], value))
            passed_on[id(op)] = slot_waits[outs[0]] = _control_steps(op, node_of_op, passed_on)
            continue
        attrs = {k: v for k, v in op.attrs.items() if k[0] != "_"}
        if op.opdef.bind is not None:
            for k, v in op.opdef.bind(op).items():
                attrs[k] = _data(v, op, runtime, table, soft_placement)
        single = op.opdef.num_outputs == 1  # ops with a variable output count return sequences
        h = is_heavy(op)
        inplace = _inplace_index(op)
        nodes.append(NodeSpec(op.name, op.type, device, attrs, ins, outs[0] if single and outs else tuple(outs),
                              single, h, bool(h and callable(op.opdef.heavy)), op.traceback,
                              getattr(op, "fused", None), None if inplace is not None else _kernel_ref(op, device),
                              inplace))
        node_ops.append(op)
        ctrl.append(_control_steps(op, node_of_op, passed_on))
        node_of_op[id(op)] = len(nodes) - 1
        for o in outs:
            producer[o] = len(nodes) - 1
    deps = []
    for node, c in zip(nodes, ctrl):
        d = {producer[s] for s in node.ins if s in producer}
        for s in node.ins:
            d.update(slot_waits.get(s, ()))
        d.update(c)
        deps.append(tuple(sorted(d)))
    graph = next((op.graph for op in ops), None)
    label = (f"function:{graph.name}" if getattr(graph, "is_function_graph", False)
             else "Session.run" if graph is not None else "run")
    spec = PlanSpec(nodes, n, feed_slots, [slot_of[id(t)] for t in fetches], presets, deps, label)
    return spec, node_ops


def schedule(spec, parallel=None):
    """Stage 5: buffer lifetimes (per node the slots freed after it), reader counts for the
    parallel schedule, and whether running in parallel is worth it."""
    nodes = spec.nodes
    keep = set(spec.fetch_slots) | set(spec.feed_slots)
    last = {}
    for i, nd in enumerate(nodes):
        for s in nd.ins:
            last[s] = i
    frees = [[] for _ in nodes]
    for s, i in last.items():
        if s not in keep:
            frees[i].append(s)
    unread = []
    for i, nd in enumerate(nodes):  # outputs nobody reads are dropped at once
        u = tuple(o for o in nd.out_slots() if o not in last and o not in keep)
        frees[i].extend(u)
        unread.append(u)
    spec.frees = [tuple(f) for f in frees]
    spec.unread = unread
    readers = {}
    for nd in nodes:
        for s in set(nd.ins):
            readers[s] = readers.get(s, 0) + 1
    spec.readers = readers
    spec.keep = keep
    heavy = [nd.heavy for nd in nodes]
    spec.parallel = _worth_parallel(nodes, spec.deps, heavy) if parallel is None else bool(parallel)
    # Opaque nodes (Python functions, control-flow bodies) may block on each other (a
    # barrier, a queue), so they overlap even when BLAS owns every core.
    spec.opaque = any(nd.opaque for nd in nodes)
    return spec


def bind(spec, runtime=None, resources=None, ops=None):
    """Stage 6: a runnable :class:`Plan` from ``spec``: kernels from the registry (by op type
    and device type), nested specs bound too, resource references resolved to ``resources``
    (this process's live objects) or else through ``runtime`` (a rank that got the spec as data)."""
    rt = runtime or default_runtime()
    if resources is None:
        resources = resolve_resources(spec.resources or [], rt)
    steps = []
    num_copies = 0
    for i, node in enumerate(spec.nodes):
        if node.op == COPY_OP:
            fn = _copy_step(rt.copy_fn(node.attrs["src"], node.attrs["dst"]), node.attrs["src"], node.attrs["dst"])
            num_copies += 1
        else:
            if node.kernel is not None:
                kernel = node.kernel.value
            elif node.inplace is not None:
                from tensorweave.kernels.cpu.fused_loop_kernels import inplace_kernel
                kernel = inplace_kernel(node.op, node.inplace)
            else:
                kernel = get_op(node.op).kernel(devices.device_type_of(node.device))
            attrs = {k: _bound(v, rt, resources) for k, v in node.attrs.items()} if node.attrs else None
            if getattr(kernel, "_tw_factory", False):
                fn = kernel(**(attrs or {}))       # a kernel made from its attrs once (a fused loop)
            else:
                fn = functools.partial(kernel, **attrs) if attrs else kernel
        steps.append(Step(fn, node.ins, node.outs, node.single, ops[i] if ops else None, node.device, node))
    plan = Plan(steps, spec.n_slots, spec.feed_slots, spec.fetch_slots, spec.frees, spec.deps, spec.parallel,
                num_copies)
    plan.initial = [None] * spec.n_slots
    for s, v in spec.presets:
        plan.initial[s] = _bound(v, rt, resources)
    plan.readers = spec.readers
    plan.pass_stats = spec.pass_stats
    plan.planned_peak_bytes = spec.pass_stats.get("planned_peak_bytes")
    plan.keep = spec.keep
    plan.heavy = [nd.heavy for nd in spec.nodes]
    plan.opaque = spec.opaque
    plan.unread = spec.unread
    plan.label = spec.label
    plan.runtime, plan.spec, plan.resources = rt, spec, resources
    return plan


def _copy_step(hook, src, dst):
    if hook is _same_buffer:
        return _identity
    return lambda value: hook(value, src, dst)


def _identity(value):
    return value


def _bound(v, rt, resources):
    if isinstance(v, PlanSpec):
        return bind(v, rt, resources)
    if isinstance(v, ResourceRef):
        return resources[v.index]
    if isinstance(v, LocalValue):
        return v.value
    return v


def resolve_resources(descs, runtime):
    """Live objects for a spec's resource table on ``runtime``: its variables by name; random
    streams by name, made from the spec's seed key and position on first use."""
    out = []
    for d in descs:
        obj = runtime.resources.get((d["kind"], d["name"]))
        if obj is None:
            if d["kind"] != "random_stream":
                obj = runtime.resource(d["kind"], d["name"])   # raises, naming it
            else:
                from tensorweave.ops.random_ops import stream_from_state
                obj = runtime.add_resource("random_stream", d["name"], stream_from_state(d.get("state"), d["name"]))
        out.append(obj)
    return out


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


def run_plan(plan, feed_values):
    """Executes ``plan`` with values for its feeds; returns the fetched values in order."""
    if plan.runtime.profiler is not None:
        return _run_profiled(plan, feed_values)
    parallel = plan.parallel and (plan.opaque or threads.inter_op_slots() > 1)
    if not parallel:
        runner = plan.runner
        if runner is None:
            runner = plan.runner = _sequential_runner(plan)
        if runner is not False and len(feed_values) >= len(plan.feed_slots):
            if runner.nogil_due:       # the second run: steady, recorded for segments (nogil_segments.py)
                runner.nogil_due = False
                return nogil_segments.steady(plan, feed_values)
            try:
                return runner(feed_values)
            except Exception as e:  # noqa: BLE001 - re-raised naming the node
                raise node_error(plan.steps[_failed_step(runner, e)], e) from e
    vals = plan.initial.copy()
    for s, v in zip(plan.feed_slots, feed_values):
        vals[s] = v
    if parallel:
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


#: plans with more steps than this run on the loop of _run_sequential (a generated function's
#: size and compile time grow with the plan)
RUNNER_MAX_STEPS = 2000


def _sequential_runner(plan, segments=None):
    """``run(feed_values) -> fetched values``: :func:`_run_sequential`'s loop over ``plan`` unrolled
    into generated Python, one line per step, slots as local variables, step functions and
    presets bound as default arguments; a freed slot's local is set to None after its last
    reader, as the loop does. Why: a batch-1 ``predict`` is a few ms of products in 9 steps,
    and the loop's per-step work (an argument list built, attribute reads, the frees) was a
    tenth of the call. Returns False for plans over :data:`RUNNER_MAX_STEPS` steps. The
    code is made here from the plan's own slot numbers (no user text enters it).

    Products that ``overlap.schedule`` starts early are started at their launch step
    (``overlap.defer``; the variable reads they wait for, ``overlap.early_reads``, moved there),
    the steps until their join inside a ``try`` that waits for them on a failure
    (``overlap.abandon``), and collected before the join step (``overlap.join``); an error of
    theirs names their own step.

    ``segments`` (``{first step: nogil_segments.Segment}``): each segment's steps as one line
    calling it (none spans a product started early, ``nogil_segments.steady``)."""
    steps = plan.steps
    if len(steps) > RUNNER_MAX_STEPS:
        return False
    ns = {"_outs": _outs, "_defer": overlap.defer, "_join": overlap.join, "_abandon": overlap.abandon}
    params, body = [], []            # body: (indent, text, step index or None)
    known = set()
    segments = segments or {}
    inside = {j for seg in segments.values() for j in range(seg.first, seg.first + len(seg.steps))}
    early = {j: (launch, join) for j, launch, join in overlap.schedule(plan)}
    launches = {launch: j for j, (launch, _) in early.items()}
    # variable reads a started product waits for, run at its launch instead of their place
    moved = {launch: overlap.early_reads(plan.deps, j, launch) for j, (launch, _) in early.items()}
    hoisted = {r for reads in moved.values() for r in reads}
    joins = {join: j for j, (_, join) in early.items()}
    depth = [1]

    def use(slot):
        slot = operator.index(slot)     # only digits enter the source, whatever a loaded plan holds
        if slot not in known:      # read before any step writes it: a preset (or None, as the loop has)
            known.add(slot)
            ns[f"p{slot}"] = plan.initial[slot]
            params.append(f"s{slot}=p{slot}")
        return f"s{slot}"

    def join(i):
        j = joins.pop(i)
        out = f"s{operator.index(steps[j].outs)}"
        depth[0] -= 1
        body.append((depth[0], "except BaseException:", None))
        body.append((depth[0] + 1, f"_abandon({out})", None))
        body.append((depth[0] + 1, "raise", None))
        body.append((depth[0], f"{out} = _join({out})", j))
    for j, slot in enumerate(plan.feed_slots):
        slot = operator.index(slot)
        known.add(slot)
        body.append((1, f"s{slot} = feeds[{j}]", None))
    for i, st in enumerate(steps):
        if i in inside and i not in segments:
            continue
        ns[f"f{i}"] = segments.get(i, st.fn)
        params.append(f"f{i}=f{i}")
    def emit(i, st):
        call = f"f{i}({', '.join(use(x) for x in st.ins)})"
        if st.single:
            out = f"s{operator.index(st.outs)}"
            known.add(st.outs)
        elif st.outs:
            out = "".join(f"s{operator.index(x)}, " for x in st.outs) + f"= _outs({call}, {len(st.outs)})"
            known.update(st.outs)
            call = None
        else:
            out = None
        body.append((depth[0], call if out is None else out if call is None else f"{out} = {call}", i))
    for i, st in enumerate(steps):
        if i in joins:
            join(i)
        if i in launches:
            j = launches[i]
            for r in moved[i]:
                emit(r, steps[r])
            body.append((depth[0], f"s{operator.index(steps[j].outs)} = _defer(f{j}, "
                                   f"{', '.join(use(x) for x in steps[j].ins)})", j))
            known.add(steps[j].outs)
            body.append((depth[0], "try:", None))
            depth[0] += 1
        if i in segments:
            emit(i, segments[i])
        elif i not in early and i not in hoisted and i not in inside:
            emit(i, st)
        for x in plan.frees[i]:
            if i not in inside or x in known:
                body.append((depth[0], f"s{operator.index(x)} = None", None))
    if len(steps) in joins:
        join(len(steps))
    body.append((1, f"return [{', '.join(use(x) for x in plan.fetch_slots)}]", None))
    src = f"def run(feeds, {', '.join(params)}):\n" + "".join(f"{'    ' * d}{b}\n" for d, b, _ in body)
    # line numbers of the generated source start at 1, with `def` on line 1
    lines = {n + 2: i for n, (_, _, i) in enumerate(body) if i is not None}
    exec(compile(src, f"<plan {plan.label}>", "exec"), ns)   # noqa: S102 - our own generated code
    run = ns["run"]
    run.step_of_line = lines
    run.overlap = sorted(early.items())
    run.nogil_due = not segments and nogil_segments.due(plan)
    return run


def _outs(r, n):
    """A multi-output step's ``n`` values (padded with None, as the loop's ``zip`` leaves them)."""
    r = tuple(r)
    return r if len(r) == n else (r + (None,) * n)[:n]


def _failed_step(runner, exc):
    """The index of the step whose line of ``runner`` raised ``exc`` (a segment's step: the
    index it tagged the exception with)."""
    tagged = getattr(exc, "tw_step", None)
    if tagged is not None:
        return tagged
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is runner.__code__:
            return runner.step_of_line[tb.tb_lineno]
        tb = tb.tb_next
    raise exc


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
    pool = plan.runtime.pool()

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
    prof = plan.runtime.profiler
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
    rt = plan.runtime
    twin = Plan([Step(_timed(st, rt), st.ins, st.outs, st.single, st.op, st.device, st.node) for st in plan.steps],
                plan.n_slots, plan.feed_slots, plan.fetch_slots, plan.frees, plan.deps, plan.parallel,
                plan.num_copies)
    for attr in ("readers", "keep", "heavy", "unread", "opaque", "initial", "planned_peak_bytes", "label",
                 "runtime", "spec", "resources"):
        setattr(twin, attr, getattr(plan, attr))
    return twin


def _timed(step, rt):
    fn, node, device = step.fn, step.node, step.device
    name, op_type = node.name, node.op

    def timed(*args):
        r = None
        t0 = time.perf_counter_ns()
        try:
            r = fn(*args)
            return r
        finally:   # a failing node is recorded too: the trace shows where the run stopped
            t1 = time.perf_counter_ns()
            prof = rt.profiler   # read again: the profile may have stopped while the kernel ran
            if prof is not None:
                prof.record_node(name, op_type, device, t0, t1, r)
    return timed


def node_error(step, exc):
    op = step.node
    if op.op == COPY_OP:
        return errors.InternalError(f"Copy to {step.device} failed: {exc}")
    where = f"[[node {op.name} (op: {op.type}) on {step.device}" + (
        f", defined at {op.traceback}]]" if op.traceback else "]]")
    msg = exc.message if isinstance(exc, errors.OpError) else f"{type(exc).__name__}: {exc}"
    cls = type(exc) if isinstance(exc, errors.OpError) else (
        errors.ResourceExhaustedError if isinstance(exc, MemoryError) else errors.InvalidArgumentError)
    err = cls(f"{msg}\n  {where}", op=step.op)
    if type(exc) is cls:
        # what a subclass carries beyond OpError's fields (CollectiveTimeoutError.missing: the
        # ranks that did not arrive; notes), which its constructor set to a default here
        for key, value in vars(exc).items():
            if key not in ("message", "op", "node_def"):
                setattr(err, key, value)
    return err


def run_fragment(fetches):
    """The values (arrays) of graph tensors ``fetches`` computed with no feeds on the default runtime
    (what ``Variable`` runs for an initial value traced inside a function)."""
    return run_plan(build_plan(fetches, [], []), [])


upcalls.install(run_fragment=run_fragment)
