"""A steady plan's runs of compiled steps as single GIL-free calls (``docs/design/nogil-steps.md``).

On a plan's second sequential run (:func:`steady`, from ``executor.run_plan``) the steps run
once more the Python way while each value's shape is recorded; every maximal run of
consecutive steps that have a *compiled form* (:func:`_form`: the opcodes of
``kernels/cpu/nogil_ops.py``, and ``ReadVariableOp``, whose read moves to the run's start —
nothing inside a run writes a variable) becomes a :class:`Segment`: one instruction table for
``nogil_ops.run_program``, the buffers of values used only inside it allocated once (reused
as values die, in place where an elementwise op's input dies there), fresh arrays for the
values read after it. The plan's runner is then generated with one line per segment
(``executor._sequential_runner``); steps without a compiled form run as before.

A segment checks its inputs (type, shape, dtype, layout) and, when it holds products, the
calling thread's share of the cores (which decides a product's route, ``gemm._way``) before
entering; a mismatch runs its steps the Python way (errors name their node) and sends the plan
back to be recorded again (a shape change re-plans). ``TW_NOGIL_SEGMENTS=0`` (or
:func:`set_enabled`) turns segments off.

>>> import tensorweave as tw
>>> v = tw.Variable(np.ones((64, 64), np.float32))
>>> f = tw.function(lambda x: tw.nn.relu(tw.matmul(x, v) + x))
>>> x = tw.constant(np.ones((64, 64), np.float32))
>>> [float(f(x).numpy()[0, 0]) for _ in range(3)]
[65.0, 65.0, 65.0]
"""
import os
import threading

import numpy as np

from tensorweave.kernels.cpu import gemm, nogil_ops
from tensorweave.runtime import overlap
from tensorweave.ops.variables import Variable

F32 = np.dtype(np.float32)
#: ``dtypes``' mark of a value the step returns as a NumPy float32 scalar (``Mean``'s): a
#: segment computes it into a one-element buffer of its own and returns that element
SCALAR = "scalar"
#: on/off (``TW_NOGIL_SEGMENTS=0`` off): read when a plan's runner is made
_switch = {"on": os.environ.get("TW_NOGIL_SEGMENTS", "1") != "0"}
#: products the schedule starts early kept in segments where ``overlap.defer`` would run them at once (a
#: rank thread's, :func:`_placed`); ``TW_NOGIL_EARLY_PRODUCTS=0`` keeps them out. Read when a plan is
#: recorded. (Off until session 24: their +0.3-1.4 ms thread CPU a step was the ReLU gradient after them,
#: written in place by a scalar loop; now by ``nogil_ops.relu_mask``)
_keep_early = {"on": os.environ.get("TW_NOGIL_EARLY_PRODUCTS", "1") != "0"}
#: fewest compiled instructions worth a segment
MIN_INSTRUCTIONS = 2
#: instructions that count as that many: a step of several NumPy calls, worth a segment alone (a
#: rank plan's cross-entropy between a product started early and the ``_Boxing`` after it; the
#: one-device plan's optimizer apply, after the join of the product started early it reads)
_LABELS = (np.dtype(np.int32), np.dtype(np.int64))
_WEIGHT = {nogil_ops.XENT: MIN_INSTRUCTIONS, nogil_ops.APPLY: MIN_INSTRUCTIONS}
_ELEMENTWISE = (nogil_ops.ADD, nogil_ops.RELU, nogil_ops.RELU_GRAD)
_PRODUCTS = (nogil_ops.GEMM, nogil_ops.GEMM_OPENBLAS)
#: forms of steps a segment runs in Python at its start: a variable's read, a ZeRO-1 weight's rows (a view
#: for the apply to update: ``_VariableRows``)
_PYTHON = ("read", "view")
#: the handle types an apply's row may update (``_storage_for_update()``: the array it writes):
#: local variables, and a ZeRO-1 weight's rows (:func:`update_handle`, from ``distribute``)
_HANDLES = {Variable}
#: the optimizer applies :data:`nogil_ops.APPLY` runs (a segment ends after one: no row after it can
#: fail and send the steps the Python way once the variables were written)
_APPLIES = ("ResourceApplyKerasMomentum", "ResourceGroupApplyKerasMomentum")
_EMPTY = (np.zeros((0, nogil_ops.WIDTH), np.int64), np.zeros(0, np.int64))   # a program of no rows, no addresses


def update_handle(cls):
    """Lets an apply in a segment update handles of type ``cls``: ``_read()`` their value, and
    ``_storage_for_update()`` the contiguous array the update writes (copy-on-write taken)."""
    _HANDLES.add(cls)


def enabled():
    return _switch["on"]


#: a plan whose segments missed their checks this often (inputs of new shapes or layouts on every
#: few calls) is no longer recorded
MAX_MISSES = 3


def due(plan):
    """Whether ``plan``'s plain runner, made now, should record its second run for segments."""
    return _switch["on"] and getattr(plan, "nogil_misses", 0) < MAX_MISSES


def set_enabled(on):
    """Turns segments on or off for plans whose runner is made from now on; returns the old setting."""
    old, _switch["on"] = _switch["on"], bool(on)
    return old


def _array_ok(v, ndim=None, dtype=F32):
    return type(v) is np.ndarray and v.dtype == dtype and v.flags.c_contiguous and v.flags.aligned and v.size > 0 \
        and (ndim is None or v.ndim == ndim)


def _form(st, args):
    """``(opcode, input slots, ints)`` of step ``st`` on argument values ``args``, ``"read"`` for a
    variable read, ``"view"`` for a ZeRO-1 weight's rows (``_VariableRows``: the handle an apply
    updates), or None (no compiled form: the step runs as before)."""
    nd = st.node
    attrs, ins = nd.attrs or {}, st.ins
    padded = getattr(st.fn, "rows_padded", None)        # (a local pad's step, ``plan_ops._local_boxing``)
    if padded is not None:
        return _pad_form(ins, args, *padded)
    if nd.op == "FusedSparseSoftmaxCrossEntropy":
        return _xent_form(nd, ins, args, attrs) if nd.kernel is None else None
    if nd.op in _APPLIES:
        return _apply_form(ins, args, attrs) if nd.kernel is None else None
    if nd.op == "_VariableRows":
        return "view" if nd.kernel is None and len(args) == 1 and type(args[0]) is Variable else None
    if nd.kernel is not None or not all(_array_ok(a) for a in args if nd.op != "ReadVariableOp"):
        return None
    if nd.op == "ReadVariableOp" and nd.inplace is None:
        return "read"
    if nd.op == "MatMul" and len(args) == 2 and args[0].ndim == 2 and args[1].ndim == 2:
        a = args[0].T if attrs.get("transpose_a") else args[0]
        b = args[1].T if attrs.get("transpose_b") else args[1]
        got = gemm._product(a, b)
        if got is False or F32 not in gemm._gemm_serial:
            return None
        op_a, op_b, m, n, k, seen = got
        if gemm.route(F32, m, n, k) != "one":
            return None       # threads, split or thin: the plan's own choice stays in Python
        ints = (op_a[0], op_b[0], m, n, k, op_a[1], op_b[1], n)
        library = gemm._serial_chosen.get(seen)
        if library == "mkl1":
            return nogil_ops.GEMM, ins, ints
        # NumPy's OpenBLAS: np.matmul calls its cblas_sgemm where no size is 1 (else gemv, dot or its own loop)
        if library == "numpy1" and min(m, n, k) > 1 and nogil_ops.openblas_sgemm() is not None:
            return nogil_ops.GEMM_OPENBLAS, ins, ints
        return None
    if nd.op == "AddV2" and len(args) == 2:
        x, y = args
        if x.shape == y.shape:
            return nogil_ops.ADD, ins, (1, x.size)
        if x.ndim == 2 and y.shape == x.shape[1:]:
            return nogil_ops.ADD, ins, x.shape
        return None
    if nd.op == "Relu" and len(args) == 1:
        return nogil_ops.RELU, (ins[0], -1), (args[0].size,)
    if nd.op == "ReluGrad" and len(args) == 2 and args[0].shape == args[1].shape:
        return nogil_ops.RELU_GRAD, ins, (args[0].size,)
    if nd.op == "SumToLike" and len(args) == 2 and args[0].ndim == 2 and args[1].shape == args[0].shape[1:] \
            and args[0].shape[1] >= 8:
        return nogil_ops.COLSUM, (ins[0], -1), args[0].shape
    if nd.op == "Mean" and len(args) == 1 and args[0].ndim == 1 and not attrs.get("keepdims") \
            and attrs.get("axis") in (None, (0,), (-1,)):
        return nogil_ops.MEAN, (ins[0], -1), (args[0].size,)
    return None


def _pad_form(ins, args, total, lo, hi):
    """A data-parallel rank's ``S(0) -> P(sum)`` boxing (``plan_ops._local_boxing``: its piece as rows
    ``[lo, hi)`` of ``total`` rows of zeros) on a float32 piece of ``hi - lo`` rows."""
    if len(args) != 1 or not _array_ok(args[0]) or args[0].ndim == 0 or args[0].shape[0] != hi - lo:
        return None
    row = args[0].size // args[0].shape[0]
    return nogil_ops.PAD, (ins[0], -1), (args[0].size, total * row, lo * row)


def _xent_form(nd, ins, args, attrs):
    """``FusedSparseSoftmaxCrossEntropy`` without its mean tail, on float32 logits ``[N, C]``,
    int32/int64 labels ``[N]`` and (``scaled``) a float32 scale of one value or ``[N, 1]``, where
    NumPy's float32 ``exp`` loop was found (``ufunc_loops``): ins logits, labels, scale."""
    if attrs.get("mean") or len(args) != 2 + bool(attrs.get("scaled")) or nogil_ops.exp_loop() is None:
        return None
    x, labels = args[:2]
    if not (_array_ok(x, 2) and _array_ok(labels, 1, labels.dtype) and labels.dtype in _LABELS
            and labels.shape == x.shape[:1] and x.shape[1] > 0):
        return None
    scale = args[2] if attrs.get("scaled") else None
    if scale is not None and not (_array_ok(scale) and (scale.size == 1 or scale.shape == (x.shape[0], 1))):
        return None
    return nogil_ops.XENT, ins[:3], (*x.shape, labels.dtype.itemsize * 8, 0 if scale is None else scale.size)


def _apply_form(ins, args, attrs):
    """``ResourceApplyKerasMomentum`` (or its group) of float32 variables without weight decay, the
    rate a one-value float32 array (a variable's read): ins rate, gradients; ints the handles'
    slots (weight, momentum slot per variable), their shapes, the momentum, nesterov."""
    n, k = attrs.get("num_variables", 1), 2 if attrs.get("momentum") else 1
    if attrs.get("weight_decay") or len(args) != n * k + 1 + n:
        return None
    lr, grads = args[n * k], args[n * k + 1:]
    live = [j for j in range(n) if grads[j] is not None]      # (None: applied by its bucket, fused_sgd)
    handles = [args[j * k + i] for j in live for i in range(k)]
    if not (live and all(type(h) in _HANDLES for h in handles) and _array_ok(lr) and lr.size == 1):
        return None
    shapes = [h._read().shape for h in handles]
    if not all(_array_ok(h._read()) and _array_ok(g) and g.shape == w for h, g, w in
               zip(handles, (grads[j] for j in live for _ in range(k)), shapes)):
        return None
    return nogil_ops.APPLY, (ins[n * k], *(ins[n * k + 1 + j] for j in live)), \
        ([ins[j * k + i] for j in live for i in range(k)], shapes, float(attrs.get("momentum") or 0.0),
         bool(attrs.get("nesterov")), tuple(ins[n * k + 1 + j] for j in range(n) if grads[j] is None))


def steady(plan, feed_values):
    """Runs ``plan`` once by its own runner's code with each step recording its form and the
    shapes it saw, builds its segments and makes its runner run them (or leaves the runner as it
    is where there are none); returns the fetches."""
    from tensorweave.runtime import executor
    plan.overlap_kept = None        # (the recording run starts products early as the plain runner does)
    forms, shapes, dtypes = [None] * len(plan.steps), {}, {}
    kept = [st.fn for st in plan.steps]
    for i, st in enumerate(plan.steps):
        st.fn = _recorder(st, i, forms, shapes, dtypes)
    try:
        runner = executor._sequential_runner(plan)      # (products started early start as always)
    finally:
        for st, fn in zip(plan.steps, kept):
            st.fn = fn
    try:
        fetched = runner(feed_values)
    except Exception as e:  # noqa: BLE001 - re-raised naming the node
        raise executor.node_error(plan.steps[executor._failed_step(runner, e)], e) from e
    segments, plan.overlap_kept = _placed(plan, forms, shapes, dtypes)
    if segments:
        plan.runner = executor._sequential_runner(plan, segments)
        nogil_ops.run_program(*_EMPTY)     # the interpreter compiling from now (background)
    return fetched


def _placed(plan, forms, shapes, dtypes):
    """``({first step: Segment}, products kept at their place)``. A product ``overlap.schedule``
    starts early (and the reads moved to its start) stays out of segments, which start at its
    launch and at its join, where the runner's own lines go — unless (``_keep_early``)
    :func:`overlap.defer` runs it at once on this thread (a rank thread's products are not split:
    ``overlap.hands_off``): then it is a compiled step of a segment, right before its launch step
    (:func:`_launch_order`), and the plan's schedule leaves it out (``plan.overlap_kept``). A
    segment holding it asks ``hands_off`` on entry: a thread that would hand it off runs the steps
    the Python way and the plan is recorded again with the schedule whole (:meth:`Segment._python`)."""
    early = overlap.schedule(plan)
    keep = set() if not _keep_early["on"] or overlap.hands_off() else \
        {j for j, _, _ in early if forms[j] is not None and forms[j][0] in _PRODUCTS}
    moves = {launch: (*overlap.early_reads(plan.deps, j, launch), j) for j, launch, _ in early if j in keep}
    while True:
        placed, cuts = list(forms), set()
        for j, launch, join in early:
            if j not in keep:
                for k in (j, *overlap.early_reads(plan.deps, j, launch)):
                    placed[k] = None
                cuts.update((launch, join))
        segments = {seg.first: seg for seg in _segments(plan, placed, shapes, dtypes, cuts, moves)}
        inside = {seg.first + k for seg in segments.values() for k in range(len(seg.steps))}
        if keep <= inside:
            for seg in segments.values():
                seg.kept = any(seg.first + k in keep for k in range(len(seg.steps)))
            return segments, frozenset(keep) or None
        keep &= inside      # (one left in Python keeps its overlap: no segment's check guards it)


def _recorder(st, i, forms, shapes, dtypes):
    """``st.fn`` recording into ``forms[i]`` its compiled form (after it ran: a product's first
    run on this thread may have made its class's choice) and into ``shapes`` (``dtypes``) its
    values' shapes (dtypes); no value is kept (a variable's array held would make its update copy it)."""
    fn = st.fn

    def run(*args):
        r = fn(*args)
        for s, a in zip(st.ins, args):
            if type(a) is np.ndarray:
                shapes[s], dtypes[s] = a.shape, a.dtype
        form = _form(st, args)
        got = (r,) if st.single else tuple(r) if isinstance(r, (tuple, list)) else ()
        if form == "view":
            forms[i] = form if type(r) in _HANDLES else None
        elif form is not None and form[0] == nogil_ops.MEAN and type(r) is np.float32:
            forms[i], shapes[st.outs], dtypes[st.outs] = form, (1,), SCALAR   # (the kernel's NumPy scalar)
        elif form is not None and len(got) == len(_outs(st)) and all(_array_ok(v) for v in got):
            forms[i] = form
            shapes.update(zip(_outs(st), (v.shape for v in got)))
        return r
    return run


def _outs(st):
    """The slots step ``st`` writes."""
    return (st.outs,) if st.single else tuple(st.outs)


def _segments(plan, forms, shapes, dtypes, cuts=(), moves=None):
    """The :class:`Segment` of each maximal run of steps with a compiled form (none holding a
    step of ``cuts`` but as its first), in :func:`_launch_order` by ``moves``."""
    later = _read_after(plan)
    run = []
    for i, form in enumerate(forms + [None]):
        if form is not None and not (i in cuts and run) and not (run and forms[run[-1]][0] == nogil_ops.APPLY):
            run.append(i)
            continue
        if _apply_reads_out(plan, run, forms, later):
            run.pop()       # (its variables' reads are handed on: the update runs the Python way)
        if sum(_WEIGHT.get(forms[j][0], 1) for j in run if forms[j] not in _PYTHON) >= MIN_INSTRUCTIONS:
            run = _launch_order(run, moves)
            yield Segment(plan, run, [forms[j] for j in run], shapes, later, dtypes)
        run = [i] if form is not None else []


def _launch_order(run, moves):
    """``run`` with each product kept whose launch step it holds (``moves``: launch step -> the reads
    the product waits for, then the product) placed right before that step, where the plain runner
    starts it: the Python way's order (and its memory traffic)."""
    held = set(run)
    moved = {k for launch, ks in (moves or {}).items() if launch in held for k in ks}
    if not moved:
        return run
    order = []
    for i in run:
        if i in moves:
            order.extend(moves[i])
        if i not in moved:
            order.append(i)
    return order


def _apply_reads_out(plan, run, forms, later):
    """Whether ``run`` ends in an optimizer apply while a variable read of the run is read after it:
    the segment resolves the variables' storages before its reads (``Variable._storage_for_update``,
    copy-on-write), so such a value would see the update the Python way's copy keeps from it."""
    if not run or forms[run[-1]][0] != nogil_ops.APPLY:
        return False
    return any(forms[j] == "read" and plan.steps[j].outs in later[run[-1]] for j in run)


def _read_after(plan):
    """Per step index, the slots some later step (or the fetches) reads: ``later[i]``."""
    later, seen = [None] * len(plan.steps), set(plan.fetch_slots) | set(getattr(plan, "keep", None) or ())
    for i in range(len(plan.steps) - 1, -1, -1):
        later[i] = frozenset(seen)
        seen.update(plan.steps[i].ins)
    return later


class Segment:
    """Steps ``first..last`` of a plan as one call: ``segment(*values of ins) -> values of outs``
    (what the generated runner calls in their place)."""

    single = False
    #: it holds a product the plan's schedule would start early (``_placed``): a thread that would
    #: hand it off runs the steps the Python way, and the plan is recorded again
    kept = False

    def __init__(self, plan, members, forms, shapes, later, dtypes=None):
        self.plan, self.steps = plan, [plan.steps[j] for j in members]
        self.members, self.first = list(members), min(members)      # (_launch_order: not always rising)
        made = {o for st in self.steps for o in _outs(st)}
        self.ins = tuple(dict.fromkeys(s for st in self.steps for s in st.ins if s not in made))
        made_all = dict.fromkeys(o for st in self.steps for o in _outs(st))
        self.outs = tuple(s for s in made_all if s in later[max(members)])
        self.dtypes = {s: d for s, d in (dtypes or {}).items() if d != F32}       # (the labels')
        self.reads = [(plan.steps[j].fn, self.ins.index(plan.steps[j].ins[0]), plan.steps[j].outs)
                      for j, f in zip(members, forms) if f == "read"]
        code = [(f[0], tuple(f[1]), _outs(plan.steps[j]), f[2]) for j, f in zip(members, forms) if f not in _PYTHON]
        apply = code[-1][3] if code and code[-1][0] == nogil_ops.APPLY else None
        #: the apply's variables (slots of their handles) and shapes: storages resolved on each call;
        #: the gradients it skips (None: the bucket applied them, ``fused_sgd``), checked None on entry
        self.handles, self.handle_shapes, self.absent = (list(apply[0]), apply[1], apply[4]) if apply else ([], [], ())
        #: the ``_VariableRows`` views (a ZeRO-1 weight's rows) the apply updates or a later step reads,
        #: made at the start; one whose gradient the bucket applied is not made at all
        self.views = [(plan.steps[j].fn, self.ins.index(plan.steps[j].ins[0]), plan.steps[j].outs)
                      for j, f in zip(members, forms) if f == "view"
                      and (plan.steps[j].outs in self.handles or plan.steps[j].outs in self.outs)]
        made_here = {o for _, _, outs, _ in code for o in outs}
        # address table: values from outside (inputs, reads), fresh outputs, internal buffers, OpenBLAS's
        # cblas_sgemm, MKL's cblas_sgemm and set-threads, NumPy's exp loop and its data
        self.checked = list(dict.fromkeys(s for _, ins, _, _ in code for s in ins if s >= 0 and s not in made_here))
        self.fresh = [s for s in self.outs if s in made_here and self.dtypes.get(s) != SCALAR]
        self.shapes = shapes
        #: per value from outside: slot, dtype, shape, the address bits that must be clear
        self.expect = [(s, d, shapes[s], 0 if d == SCALAR else np.dtype(d).itemsize - 1)
                       for s, d in ((s, self.dtypes.get(s, F32)) for s in self.checked)]
        slot_at = {s: j for j, s in enumerate(self.checked + self.fresh)}
        n_fixed = len(slot_at)
        self.buffers = self._allocate(code, slot_at, shapes)
        self.scalars = [(s, self.buffers[slot_at[s] - n_fixed]) for s in self.outs
                        if self.dtypes.get(s) == SCALAR]
        if apply:       # the momentum, a float32 of the segment's own
            self.buffers.append(np.array([apply[2]], F32))
        self.at_handles = n_fixed + len(self.buffers)
        self.addrs = np.zeros(self.at_handles + len(self.handles) + 5, np.int64)
        for j, buf in enumerate(self.buffers):
            self.addrs[n_fixed + j] = buf.ctypes.data
        serial = gemm._gemm_serial.get(F32)
        if serial is not None:
            self.addrs[-4], self.addrs[-3] = serial.args[2], serial.args[0]   # cblas_sgemm, set-threads
        self.openblas = any(op == nogil_ops.GEMM_OPENBLAS for op, _, _, _ in code)
        if self.openblas:
            self.addrs[-5] = nogil_ops.openblas_sgemm()
        n = len(self.addrs)
        rows = []
        for r, (op, ins, outs, ints) in enumerate(code):
            if op == nogil_ops.APPLY:
                rows += self._apply_rows(ins, ints, slot_at)
                continue
            row = np.zeros(nogil_ops.WIDTH, np.int64)
            ops = [slot_at[s] if s >= 0 else -1 for s in ins[:2]] + [-1] * (2 - len(ins[:2]))
            row[:4] = [op, ops[0], ops[1], slot_at[outs[0]]]
            row[4:4 + len(ints)] = ints
            row[12:] = [n - 5, 0] if op == nogil_ops.GEMM_OPENBLAS else [n - 4, n - 3]
            if op == nogil_ops.XENT:        # outs (losses, gradient); the scale (or any index: none read), exp
                row[3] = slot_at[outs[1]]
                row[9:11] = [slot_at[ins[2]] if len(ins) > 2 else 0, slot_at[outs[0]]]
                row[12:] = [n - 2, n - 1]
                self.addrs[-2:] = nogil_ops.exp_loop()
            rows.append(row)
        self.program = np.array(rows, np.int64).reshape(len(rows), nogil_ops.WIDTH)
        self.has_gemm = any(op in _PRODUCTS for op, _, _, _ in code)
        self.share = gemm._share() if self.has_gemm else None
        self.lock = threading.Lock()
        self.runs = {"compiled": 0, "python": 0, "why": None}     # (tests, benchmarks: which way calls ran)

    def _apply_rows(self, ins, ints, slot_at):
        """:data:`nogil_ops.APPLY`'s rows, one per variable: gradient, rate, weight storage, size,
        momentum slot storage (-1: none), the momentum's buffer, nesterov."""
        handles, shapes, momentum, nesterov, _ = ints
        k = 2 if momentum else 1
        rows = []
        for i, grad in enumerate(ins[1:]):
            row = np.zeros(nogil_ops.WIDTH, np.int64)
            size = int(np.prod(shapes[i * k], dtype=np.int64))
            row[:8] = [nogil_ops.APPLY, slot_at[grad], slot_at[ins[0]], self.at_handles + i * k, size,
                       self.at_handles + i * k + 1 if momentum else -1, self.at_handles - 1, nesterov]
            rows.append(row)
        return rows

    def _allocate(self, code, slot_at, shapes):
        """Buffers for the values made and used only here, one per value alive at once: a value
        dead after an instruction frees its buffer for the next of its size; an elementwise
        instruction writes into its first input's buffer when that value dies there."""
        last = {}
        for r, (_, ins, _, _) in enumerate(code):
            for s in ins:
                last[s] = r
        buffers, free, at = [], {}, {}
        n_fixed = len(slot_at)
        for r, (op, ins, outs, _) in enumerate(code):
            for out in outs:
                if out in slot_at:
                    pass
                elif op in _ELEMENTWISE and ins[0] in at and last[ins[0]] == r and ins[0] not in self.fresh:
                    slot_at[out] = slot_at[ins[0]]
                    at[out] = at.pop(ins[0])
                else:
                    size = int(np.prod(shapes[out], dtype=np.int64))
                    pool = free.get(size) if self.dtypes.get(out) != SCALAR else None    # (a scalar's: its own)
                    j = pool.pop() if pool else None
                    if j is None:
                        j = len(buffers)
                        buffers.append(np.empty(max(size, 1), F32))
                    at[out], slot_at[out] = j, n_fixed + j
            for s in set(ins):
                if s in at and last.get(s) == r and s not in outs:
                    j = at.pop(s)
                    free.setdefault(buffers[j].size, []).append(j)
        return buffers

    def __call__(self, *ins):
        moved = self.has_gemm and gemm._share() != self.share or self.kept and overlap.hands_off()
        if moved or not self.lock.acquire(False):
            return self._python(ins, moved, "share or busy")
        try:
            vals = dict(zip(self.ins, ins))
            addrs = self.addrs
            if any(vals[s] is not None for s in self.absent):
                return self._python(ins, False, "a gradient its bucket did not apply")
            # the apply's storages first: the reads below hand out the same arrays (copy-on-write)
            try:
                for fn, k, out in self.views:
                    vals[out] = fn(ins[k])
                storages = [vals[s]._storage_for_update() if type(vals[s]) in _HANDLES else None
                            for s in self.handles]
            except Exception:  # noqa: BLE001 - raised again by the apply step, named
                return self._python(ins, False, "variable failed")
            for j, v in enumerate(storages):
                if not (_array_ok(v) and v.shape == self.handle_shapes[j]):
                    return self._python(ins, True, f"variable {self.handles[j]}")
                addrs[self.at_handles + j] = nogil_ops.address(v)
            try:
                for fn, k, out in self.reads:
                    vals[out] = fn(ins[k])
            except Exception:  # noqa: BLE001 - raised again by its own step, named
                return self._python(ins, False, "read failed")
            shapes, address = self.shapes, nogil_ops.address
            for j, (s, dtype, shape, misaligned) in enumerate(self.expect):
                v = vals[s]
                # (a recorded shape has elements; the address's low bits stand for NumPy's aligned flag)
                if type(v) is not np.ndarray or v.shape != shape or v.dtype != dtype or not v.flags.c_contiguous:
                    return self._python(ins, True, f"input {s}")
                a = address(v)
                if a & misaligned:
                    return self._python(ins, True, f"input {s}")
                addrs[j] = a
            base = len(self.checked)
            for j, s in enumerate(self.fresh):
                v = vals[s] = np.empty(shapes[s], F32)
                addrs[base + j] = address(v)
            if self.openblas:       # NumPy's OpenBLAS on one thread, as gemm._numpy_serial holds it
                gemm._hold_one_thread()
                try:
                    got = nogil_ops.run_program(self.program, addrs)
                finally:
                    gemm._release_one_thread()
            else:
                got = nogil_ops.run_program(self.program, addrs)
            if got != 0:        # (compiling, or bad input: its step raises the kernel's error)
                return self._python(ins, False, "compiling" if got == nogil_ops.NOT_READY else "bad input")
            for s, buf in self.scalars:
                vals[s] = buf[0]
            self.runs["compiled"] += 1
            return tuple(vals[s] for s in self.outs)
        finally:
            self.lock.release()

    def _python(self, ins, replan, why):
        """The member steps the Python way (a failing one tagged with its index for
        ``executor.node_error``); ``replan``: the plan is recorded again on a later run."""
        self.runs["python"] += 1
        self.runs["why"] = why
        if replan:
            self.plan.nogil_misses = getattr(self.plan, "nogil_misses", 0) + 1
            self.plan.runner, self.plan.overlap_kept = None, None      # (products started early again)
        vals = dict(zip(self.ins, ins))
        for k, st in enumerate(self.steps):
            try:
                r = st.fn(*[vals[s] for s in st.ins])
            except Exception as e:
                e.tw_step = self.members[k]
                raise
            vals.update(zip(_outs(st), (r,) if st.single else r))
        return tuple(vals[s] for s in self.outs)
