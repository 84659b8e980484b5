"""The whole-graph planner: a traced graph on logical shapes -> one plan spec per rank.

Input: the needed ops of a graph whose tensors have *logical* shapes, the layouts of its
global feeds (placement + N-D SBP; other feeds are local values, ``B``), and global variables
captured by handle (``VarHandleOp`` of a :class:`GlobalVariable`, laid out as the variable).
Every op gets a layout decision, in topological order:

* ``Const``, ops on local values only: local (every rank computes the same, ``B``); a
  stateful one (a local variable's update, a print) runs once, on the first rank, and its
  outputs are broadcast (``_Once``), as the eager interpreter does.
* ``_ToGlobal`` (``x.to_global(...)`` inside the function): the user's pinned layout wins; the
  input is boxed to it.
* shape-only ops (``Shape``, ``Size``, ...) of global tensors: their logical value, a constant.
* an op whose output rows depend on its values (``UniqueSegmentSum`` of a sparse gradient):
  replicated, its open outputs ``B`` with a bound for the cost model (``plan_bounded.py``).
* any other op with a global input: the eager interpreter's candidates
  (``interpreter.candidates``: the op's SBP rule per mesh axis, handles keep their layout) and
  choice (``interpreter.choose``) by boxing bytes, plus a *look-ahead*: for each output layout a
  candidate gives, the least boxing its consumers would then need (pinned layouts, variable
  updates, the consumers' own rules given the inputs decided so far), and a rank's work under
  the candidate (a contraction's FLOPs / ``FLOPS_PER_BYTE``, else the bytes it writes): the
  look-ahead and the work apply where the candidates differ in their outputs' layouts. Ties
  go to the rule's order.

Each boxing becomes a ``_Boxing`` node (the plan as data; a tensor boxed to one layout once,
shared by its readers), each op its per-rank (op type, attrs) from the signatures' ``local``
hooks. :meth:`GraphPlan.rank_spec` emits rank ``i``'s :class:`PlanSpec` (local shapes, its
variable shards as resources, the communicator as the ``("communicator", "world")``
resource): data, runnable by ``executor.bind`` on any runtime that has those resources. Nodes
run in one order on every rank (``parallel=False``), so collectives stay matched.

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> @tw.function
... def f(x, w):
...     return tw.reduce_sum(tw.matmul(x, w), axis=0)
>>> x = tw.constant(np.ones((4, 3), np.float32)).to_global(placement=p, sbp=tw.sbp.split(0))
>>> w = tw.constant(np.ones((3, 2), np.float32)).to_global(placement=p, sbp=tw.sbp.broadcast)
>>> y = f(x, w)
>>> y.sbp, y.numpy().tolist()
((P,), [12.0, 12.0])
"""
import time
import warnings

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.sbp import B, Broadcast, Partial, S
from tensorweave.core.sbp_rules import with_signs
from tensorweave.distribute import plan_ops  # noqa: F401 - registers _Boxing, _Once, _ToGlobal
from tensorweave.distribute.boxing import parse_sbp
from tensorweave.distribute.interpreter import (_METADATA_OPS, _cost, _key, _known, _piece_shapes, _plan, _warned,
                                                Layout, candidates, choose, decide, decision, metadata_values)
from tensorweave.distribute.layout import Placement, local_shape
from tensorweave.distribute.plan_bounded import Bounded, keep_bounded_b, plan_data_dependent, refuse_bounded
from tensorweave.distribute.plan_decompose import class_split, plan_decomposed
from tensorweave.distribute.plan_control import CONTROL_FLOW, check_local_control_flow, holds_draw, plan_nested
from tensorweave.distribute.plan_search import search
from tensorweave.distribute.plan_random import draw_lookahead, draws_stream, planning_order
from tensorweave.distribute.zero_update import choose_zero, is_dense_update
from tensorweave.runtime import executor
from tensorweave.runtime.plan_spec import ResourceTable

DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0"

# The planner's exchange rate between work and bytes moved, and the ops whose work is a
# contraction's FLOPs. Measured (calibrate.py) on the 2-core AMD EPYC of BENCHMARKS.md: one
# thread multiplies 57-84 GFLOP/s (256^3 float32) and copies a 4 MB buffer at 13-47 GB/s (in
# cache; 16 GB/s for 16 MB): 1.2-4.7 FLOPs per byte moved at load 24, so 4 (was 10, a guess).
# TW_PLANNER_CALIBRATE=1 measures it in each process instead.
FLOPS_PER_BYTE = 4
_CONTRACTIONS = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"})
# A rank's all-reduces of partial sums (the gradient all-reduce of data parallelism) go in buckets
# of about this many bytes, each started as soon as its tensors are computed (rank_graph.py); 0: one
# blocking all-reduce per tensor where it is needed.
ALL_REDUCE_BUCKET_BYTES = 4 << 20
# The ZeRO-1 choice (zero_update.py): a replicated weight whose gradient is a partial sum may be
# updated in shards (gradient reduce-scattered, each rank updating its rows of the weight and of
# its slots, which then live S(0), the weight all-gathered) when the planner's costs say so.
# ZERO_FIXED_BYTES is that path's per-variable overhead in byte-equivalents (two more kernel calls,
# the gather's copy loop: ~20 us, the time to move ~16 KiB), so tiny biases stay all-reduced.
# ZERO_GATHER_WEIGHT prices the gather's bytes against the update's bytes touched: it reads and
# writes each row (2x) from another rank's just-written cache lines, measured 2.6x slower per byte
# than the fused update (MLP 784-512-512-10, Adam, 2 ranks, AMD EPYC: the half update saved
# 0.25-0.35 ms, the gather of 334k floats cost 0.18-0.26 ms), so 5.
ZERO_UPDATES = True
ZERO_FIXED_BYTES = 16 << 10
ZERO_GATHER_WEIGHT = 5
# In-process ranks share one buffer per ZeRO-1 weight (zero_update.share_storage): each rank
# updates its rows of it in place and the gather copies nothing, so the gather is priced at 0
# (its rendezvous is in ZERO_FIXED_BYTES) and SGD's weights are updated in shards too.
SHARED_ZERO_STORAGE = True
# A _Once read (the optimizer's step counter) between a bucket's start and wait rides on the
# bucket's rendezvous instead of a broadcast of its own (rank_graph.fold_once).
FOLD_ONCE_READS = True
# The look-ahead's question "what does consumer c pay for input k in layout nd" is answered once
# per distinct (op, layouts, decided inputs) in a plan: a 1,000-op graph of repeated layers asks
# 4,484 times and has 70 distinct answers (False: ask every time; tests compare the plans).
RULE_COST_MEMO = True
# A function's results (a tw.function's outputs, a tape's gradients, Session.run's fetches) are
# priced by the joint search (plan_search) at the layout the caller reads them in: the logical
# value, B (``numpy()``, a local op, the next step's replicated input), unless a ``to_global`` pin
# fixes the result's layout. A result left P or S costs the boxing its reader then pays, so the
# search lays it out P only where that costs less than the alternatives. False: results are free
# (before session 15: a gradient left P, its all-reduce paid outside the plan by whoever reads it).
PRICE_OUTPUTS = True
_P_SUM, _B1 = (Partial("sum"),), (B,)


def pinned_layout(op):
    """(placement, N-D SBP) a ``_ToGlobal`` op pins."""
    a = op.attrs
    return Placement(a["placement_type"], a["ranks"]), tuple(parse_sbp(s) for s in a["sbp"])


class OpPlan:
    """The planner's decision for one op: ``kind`` (``"const"``, ``"variable"``, ``"local"``,
    ``"once"``, ``"pin"``, ``"metadata"``, ``"global"``, ``"alias"``: its outputs are the tensors
    ``value`` names, ``plan_decompose.py``), the chosen per-axis signatures,
    input/output N-D SBPs, a boxing plan per input (None: as it is), the per-rank (op type,
    attrs), and for constants their value."""

    __slots__ = ("op", "kind", "sigs", "in_nd", "out_nd", "plans", "local_ops", "value", "once", "zero")

    def __init__(self, op, kind, sigs=(), in_nd=(), out_nd=(), plans=(), local_ops=None, value=None, once=False):
        self.op, self.kind, self.sigs, self.in_nd, self.out_nd = op, kind, sigs, in_nd, out_nd
        self.plans, self.local_ops, self.value, self.once = plans, local_ops, value, once
        self.zero = ()          # ZeRO-1 updates: (weight handle input, gradient input) pairs (zero_update.py)


class GraphPlan:
    """The planned graph (see the module docstring): ``layouts`` per tensor (id -> Layout),
    ``local`` (ids of tensors no global value reaches), ``op_plans`` (id(op) -> OpPlan),
    ``seconds`` (planning time)."""

    def __init__(self, ops, feeds, fetches, placement, label):
        self.ops, self.feeds, self.fetches, self.placement, self.label = ops, feeds, fetches, placement, label
        self.layouts, self.local, self.op_plans = {}, set(), {}
        self.seconds = 0.0
        self.search = None            # (greedy cost, kept cost) of the joint search (plan_search.py)
        self._plan_dicts = {}
        self.slot_bytes = {}          # rank index -> {slot: bytes} of the last rank_spec (explain's memory)

    # ---- emitting a rank's spec ------------------------------------------------------------------
    def _plan_dict(self, plan):
        d = self._plan_dicts.get(id(plan))
        if d is None:
            d = self._plan_dicts[id(plan)] = (plan, plan.to_dict())
        return d[1]

    def rank_spec(self, index, comm=None):
        """``(spec, live resources)`` of rank ``placement.ranks[index]``: a :class:`PlanSpec`
        whose feeds are the graph's feeds (each rank's piece of a global one) and whose fetches
        are the rank's pieces of the fetches; ``live`` are the objects its resource table names
        in this process (the communicator ``comm``, the rank's variable shards). The rank's op
        list (``rank_graph.py``) goes through the graph passes as a single-device plan does."""
        from tensorweave.distribute.rank_graph import rank_ops
        from tensorweave.runtime.passes.ir import nbytes
        rank = self.placement.ranks[index]
        table = ResourceTable()
        comm_ref = table.ref("communicator", "world", comm if comm is not None else ("communicator", rank))
        r = rank_ops(self, index, table, comm_ref, DEVICE, ALL_REDUCE_BUCKET_BYTES, FOLD_ONCE_READS)
        spec, node_ops = lower_rank_ops(r, table, f"{self.label}/rank{rank}")
        spec.resources = table.descs
        sizes = self.slot_bytes[index] = {}
        for s, v in zip(spec.feed_slots, r.feeds):
            sizes[s] = nbytes(v) or 0
        for s, v in spec.presets:
            sizes[s] = int(getattr(v, "nbytes", 0))
        for node, op in zip(spec.nodes, node_ops):
            for s, v in zip(node.out_slots(), op.outputs):
                sizes[s] = nbytes(v) or 0
        return spec, table.live

    def local_shape(self, t, index):
        """Rank ``index``'s shape of tensor ``t`` (its logical shape when local; None: unknown)."""
        lay = self.layouts[id(t)]
        if lay._shape is None or lay._dtype is _dt.resource or isinstance(lay, Bounded):
            return None
        return lay._shape if id(t) in self.local else local_shape(lay._shape, self.placement, lay._sbp, index)

    def nbytes(self, t, index):
        """Bytes of rank ``index``'s piece of ``t`` (0 when unknown or not an array)."""
        shape = self.local_shape(t, index)
        return 0 if shape is None else _nbytes(shape, t.dtype)


def lower_rank_ops(r, table, label):
    """``(spec, node ops)``: a rank's op list (``rank_graph.RankOps``) through the graph passes and
    lowered, its resources into ``table``, its nodes run in list order (collectives matched). Also
    used for the nested plans of control-flow bodies (``plan_control.py``)."""
    from tensorweave.runtime.runtime import default_runtime
    placed = {id(n.orig): DEVICE for n in r.ops}
    placed.update((id(n), DEVICE) for n in r.ops)
    ops, fetches, stats = executor.optimize(r.ops, r.fetches, r.targets, r.feeds, placed)
    placed.update((id(n), DEVICE) for n in ops)
    spec, node_ops = executor.lower(ops, placed, fetches, r.feeds, default_runtime(), table)
    spec.label, spec.pass_stats = label, stats
    executor.schedule(spec, parallel=False)
    return spec, node_ops


def _count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _nbytes(shape, dtype):
    try:
        itemsize = np.dtype(dtype.np_dtype).itemsize
    except (TypeError, AttributeError):
        return 0
    return int(np.prod(shape, dtype=np.int64)) * itemsize


class _Planner:
    def __init__(self, gp, lookahead, free_fetches=False):
        self.gp = gp
        # whether the joint search may change the fetches' layouts (a function's results, yes; a
        # segment's values read on another placement, a control-flow body's results, no)
        self.free_fetches = free_fetches
        self.fetch_prices = None     # id(fetch) -> bytes by its layout (plan_op_list; plan_search.py)
        self.placement = gp.placement
        self.nd_b = (B,) * gp.placement.ndim
        self.lookahead = lookahead
        self.consumers = {}
        for op in gp.ops:
            for k, t in enumerate(op.inputs):
                self.consumers.setdefault(id(t), []).append((op, k))
        self._ahead = {}
        self._costs = {}
        self._rule_costs = {}     # _rule_cost's answers by (op, layouts, attrs, outputs; decided inputs)

    def cost(self, shape, dtype, placement, src, dst):
        """Boxing bytes on this placement (memoised without hashing the placement)."""
        if src == dst:
            return 0
        key = (shape, dtype, src, dst)
        c = self._costs.get(key)
        if c is None:
            c = _cost(shape, dtype, placement, src, dst)
            if ALL_REDUCE_BUCKET_BYTES and src == _P_SUM and dst == _B1 and placement.ndim == 1:
                c //= 2     # bucketed: the ranks add the pieces once, chunks shared (an all-gather's bytes)
            self._costs[key] = c
        return c

    def layout(self, t, op):
        lay = self.gp.layouts.get(id(t))
        if lay is None or lay._shape is None:
            raise errors.UnimplementedError(
                f"the global graph planner needs static logical shapes: input '{t.name}' of '{op.name}' "
                f"({op.type}) has shape {t.shape}. Hint: give the function inputs (or the TF1 placeholders) a fully known shape")
        return lay

    def set_local(self, t):
        shape = _known(t.shape)
        self.gp.layouts[id(t)] = Layout(shape if shape is not None else None, t.dtype, self.nd_b, self.placement) \
            if shape is not None else _Unknown(t.dtype)
        self.gp.local.add(id(t))

    def run(self):
        self.free = set()         # draws (and pure ops on them only): planned before their first consumer
        self.spliced = {}         # id(op) -> the ops of its decomposition (plan_decompose.py)
        self.records = {}         # id(op) -> its candidates, for the joint search (plan_search.py)
        for op in planning_order(self.gp.ops, self.gp.local, self.free):
            self.gp.op_plans[id(op)] = self.plan_op(op)
        if self.spliced:          # a decomposition's ops run in place of its op, right before it
            self.gp.ops = [o for op in self.gp.ops for o in self.spliced.get(id(op), []) + [op]]
        self.gp.search = search(self)  # the joint search (plan_search.py): never costlier than greedy

    def plan_op(self, op):
        gp, t = self.gp, op.type
        if t == "VarHandleOp":
            var = op.attrs["variable"]
            out = op.outputs[0]
            if getattr(var, "is_global", False):
                if var.placement != self.placement:
                    raise errors.UnimplementedError(
                        f"variable '{var.name}' lives on {var.placement!r} but the function's global tensors on "
                        f"{self.placement!r}: one placement per planned function for now")
                gp.layouts[id(out)] = Layout(tuple(var.shape.as_list()), _dt.resource, var.sbp, self.placement)
            else:
                gp.layouts[id(out)] = Layout((), _dt.resource, self.nd_b, self.placement)
                gp.local.add(id(out))
            return OpPlan(op, "variable")
        if t == "Const":
            self.set_local(op.outputs[0])
            kernel = op.opdef.kernel("CPU")
            return OpPlan(op, "const", value=[kernel(**{k: v for k, v in op.attrs.items() if k[0] != "_"})])
        glob = [id(x) not in gp.local for x in op.inputs]
        if t == "_ToGlobal":
            return self.plan_pin(op)
        if not any(glob) and not draws_stream(op) and not (t in CONTROL_FLOW and holds_draw(op)):
            for o in op.outputs:
                self.set_local(o)
            if t in CONTROL_FLOW:
                check_local_control_flow(op)
            elif op.opdef.bind is not None:
                self.refuse(op)
            attrs = {k: v for k, v in op.attrs.items() if k[0] != "_"}
            once = op.opdef.stateful
            return OpPlan(op, "once" if once else "local", local_ops=[(t, attrs)] * self.placement.size,
                          plans=[None] * len(op.inputs), once=once)
        ins = [self.layout(x, op) for x in op.inputs]
        bounded = any(isinstance(lay, Bounded) for lay in ins)
        if bounded and t in _METADATA_OPS:     # the shape a rank holds, not the layout's bound
            return plan_data_dependent(self, op, ins, [(_known(o.shape), o.dtype) for o in op.outputs])
        if bounded and t in CONTROL_FLOW:
            refuse_bounded(op, next(k for k, lay in enumerate(ins) if isinstance(lay, Bounded)))
        if t in _METADATA_OPS:
            values = metadata_values(op.opdef, ins, op.attrs)
            for o in op.outputs:
                self.set_local(o)
            return OpPlan(op, "metadata", value=values)
        if t in CONTROL_FLOW:          # bodies planned on these layouts (plan_control.py)
            return plan_nested(self, op, ins)
        if op.opdef.bind is not None and not draws_stream(op):
            self.refuse(op)
        if any(lay._dtype is _dt.resource and id(x) in gp.local for x, lay in zip(op.inputs, ins)):
            return self.plan_local_variable_op(op, ins)
        out_specs = [(_known(o.shape), o.dtype) for o in op.outputs]
        if any(shape is None for shape, _ in out_specs):
            return plan_data_dependent(self, op, ins, out_specs)
        kernel_attrs = {k: v for k, v in op.attrs.items() if k[0] != "_"}
        attrs = with_signs(t, [lay._sbp for lay in ins], lambda i: self.const_value(op.inputs[i]), dict(op.attrs))
        combos, has_rule = candidates(op.opdef, ins, attrs, out_specs, self.placement)
        if bounded:                    # data-dependent rows: read as B only (plan_bounded.py)
            combos = keep_bounded_b(op, ins, combos, self.nd_b)
            combo, cost = choose(ins, combos, self.placement, cost_fn=self.cost)
            d = decision(op.opdef, ins, kernel_attrs, out_specs, self.placement, combo, cost, has_rule)
        elif self.lookahead and len({tuple(c[2]) for c in combos}) > 1:
            combo, cost = choose(ins, combos, self.placement,
                                 lambda c: self.ahead(op, c[2]) + self.work(op, ins, out_specs, c), self.cost)
            d = decision(op.opdef, ins, kernel_attrs, out_specs, self.placement, combo, cost, has_rule)
        else:
            d = decide(op.opdef, ins, attrs, kernel_attrs, out_specs, self.placement)
        sigs, in_nd, out_nd, cost, has_rule, plans, local_ops = d
        if cost and not bounded and class_split(op, ins):      # a split class axis: its partial log-sum-exp instead
            p = plan_decomposed(self, op, ins)
            if p is not None:
                return p
        if cost and not has_rule and t not in _warned:
            _warned.add(t)
            warnings.warn(f"'{t}' has no SBP rule for these inputs: its global inputs are boxed to broadcast (B) and "
                          f"every rank computes the whole result (in the planned graph, op '{op.name}')", stacklevel=4)
        once = op.opdef.stateful and all(lay._dtype is not _dt.resource for lay in ins) and all(
            isinstance(x, Broadcast) for nd in out_nd for x in nd) and not draws_stream(op) and t not in CONTROL_FLOW
        for o, (shape, dtype), nd in zip(op.outputs, out_specs, out_nd):
            gp.layouts[id(o)] = Layout(shape, dtype, nd, self.placement)
        p = OpPlan(op, "global", sigs, in_nd, out_nd, plans, local_ops, once=once)
        if ZERO_UPDATES and is_dense_update(t):
            choose_zero(self, p)
        if not (bounded or once or op.opdef.stateful or t in CONTROL_FLOW or id(op) in self.free or draws_stream(op)
                or any(lay._dtype is _dt.resource for lay in ins) or any(dt is _dt.resource for _, dt in out_specs)):
            self.records[id(op)] = (ins, combos, out_specs, kernel_attrs, has_rule)
        return p

    def const_value(self, t):
        """The value of ``t`` when it is a constant of the graph (a sign decides some rules), else None."""
        p = self.gp.op_plans.get(id(t.op))
        return p.value[t.op.outputs.index(t)] if p is not None and p.kind == "const" else None

    def plan_local_variable_op(self, op, ins):
        """An op on a *local* variable (a Keras layer's local weights) with global inputs: the
        global inputs are boxed to ``B`` (their logical value, as an eager tape hands a local
        weight its gathered gradient) and the op runs once, on the first rank (the variable is
        one object of this process)."""
        if any(lay._dtype is _dt.resource and id(x) not in self.gp.local for x, lay in zip(op.inputs, ins)):
            raise errors.InvalidArgumentError(
                f"'{op.name}' ({op.type}) takes a local variable's handle and a global variable's: hint: create both "
                f"with tw.Variable(..., placement={self.placement!r}, sbp=...)")
        plans = [None if id(x) in self.gp.local or lay._sbp == self.nd_b else
                 _plan(lay._shape, lay._dtype.np_dtype, self.placement, lay._sbp, self.nd_b)
                 for x, lay in zip(op.inputs, ins)]
        for o in op.outputs:
            self.set_local(o)
        attrs = {k: v for k, v in op.attrs.items() if k[0] != "_"}
        return OpPlan(op, "once", in_nd=[self.nd_b] * len(ins), out_nd=[self.nd_b] * len(op.outputs), plans=plans,
                      local_ops=[(op.type, attrs)] * self.placement.size, once=True)

    def plan_pin(self, op):
        placement, nd = pinned_layout(op)
        if placement != self.placement:
            raise errors.UnimplementedError(
                f"'{op.name}': to_global onto {placement!r} inside a planned function whose global tensors are on "
                f"{self.placement!r}: one placement per planned function for now")
        src = self.layout(op.inputs[0], op)
        if isinstance(src, Bounded) and nd != src._sbp:
            refuse_bounded(op, 0)
        plan = None if src._sbp == nd else _plan(src._shape, src._dtype.np_dtype, self.placement, src._sbp, nd)
        self.gp.layouts[id(op.outputs[0])] = type(src)(src._shape, src._dtype, nd, self.placement)
        return OpPlan(op, "pin", in_nd=[nd], out_nd=[nd], plans=[plan])

    def refuse(self, op):
        raise errors.UnimplementedError(
            f"'{op.name}' ({op.type}) binds process resources (a random stream, control flow, a Python function) "
            "and is not planned for global tensors yet. Hint: run the global computation eagerly")

    # ---- look-ahead ------------------------------------------------------------------------------------
    def work(self, op, ins, out_specs, combo):
        """A rank's compute under ``combo`` in byte-equivalents (bytes moved and work are one
        currency): a contraction's FLOPs / :data:`FLOPS_PER_BYTE`, else the bytes it writes.
        Between signatures that move as much, the one leaving each rank less to do wins, and a
        data-parallel weight gradient stays ``S x S -> P`` (an all-reduce of the gradient) rather
        than gathering the activations to compute it whole on every rank."""
        outs = [_piece_shapes(shape, self.placement, nd)[0] for (shape, _), nd in zip(out_specs, combo[2])]
        if op.type in _CONTRACTIONS and outs:
            a = _piece_shapes(ins[0]._shape, self.placement, combo[1][0])[0]
            if len(a) >= 2:
                k = a[-2] if op.attrs.get("transpose_a") or op.attrs.get("adj_x") else a[-1]
                return 2 * _count(outs[0]) * k / FLOPS_PER_BYTE
        return sum(_count(s) * np.dtype(dt.np_dtype).itemsize for s, (_, dt) in zip(outs, out_specs)
                   if dt is not _dt.resource and dt is not _dt.string)

    def ahead(self, op, out_nds):
        """The least boxing bytes the consumers of ``op`` would need if its outputs had ``out_nds``."""
        if id(op) in self.free:        # a draw's layout follows its consumers' other inputs (plan_random.py)
            return draw_lookahead(self, op, out_nds)
        total = 0
        for o, nd in zip(op.outputs, out_nds):
            for c, k in self.consumers.get(id(o), ()):
                total += self.consumer_cost(c, k, o, nd)
        return total

    def consumer_cost(self, c, k, o, nd):
        key = (id(c), k, nd)
        hit = self._ahead.get(key)
        if hit is not None:
            return hit
        shape = _known(o.shape)
        cost = 0
        if shape is not None:
            np_dtype = o.dtype.np_dtype
            if c.type == "_ToGlobal":
                placement, want = pinned_layout(c)
                cost = self.cost(shape, np_dtype, self.placement, nd, want) if placement == self.placement else 0
            elif c.type not in _METADATA_OPS and c.opdef.bind is None:
                cost = self._rule_cost(c, k, Layout(shape, o.dtype, nd, self.placement))
        self._ahead[key] = cost
        return cost

    def _rule_cost(self, c, k, hyp):
        lays, decided = [], [k]
        for j, x in enumerate(c.inputs):
            if j == k:
                lays.append(hyp)
                continue
            lay = self.gp.layouts.get(id(x))
            if lay is not None and lay._shape is not None:
                decided.append(j)
            else:
                shape = _known(x.shape)
                if shape is None:
                    return 0
                lay = Layout(shape, x.dtype, self.nd_b, self.placement)
            lays.append(lay)
        out_specs = [(_known(o.shape), o.dtype) for o in c.outputs]
        if any(s is None for s, _ in out_specs):
            return 0
        attrs = dict(c.attrs)
        # a graph of repeated layers asks the same question of many consumers: the answer is a
        # function of the op, the layouts, which of them are decided and the output specs
        memo = _key(c.opdef, lays, attrs, out_specs, self.placement) if RULE_COST_MEMO else None
        if memo is not None:
            memo = (memo, tuple(decided))
            hit = self._rule_costs.get(memo)
            if hit is not None:
                return hit
        try:
            combos, _ = candidates(c.opdef, lays, attrs, out_specs, self.placement)
        except errors.OpError:
            return 0
        best = self._least_rule_cost(lays, decided, combos, out_specs)
        if memo is not None:
            self._rule_costs[memo] = best
        return best

    def _least_rule_cost(self, lays, decided, combos, out_specs):
        """The least over ``combos`` of boxing the decided inputs plus what padding one to ``P`` costs later."""
        best = None
        for combo in combos:
            cost = 0
            for j in decided:
                cost += self.cost(lays[j]._shape, lays[j]._dtype.np_dtype, self.placement, lays[j]._sbp, combo[1][j])
            cost += self.made_partial_cost(lays, decided, combo, out_specs)
            if best is None or cost < best:
                best = cost
        return best or 0

    def made_partial_cost(self, lays, decided, combo, out_specs):
        """What a consumer's signature that pads or fills a decided input to ``P`` (a local step,
        no bytes) costs later: its partial outputs reduced, at the cheapest reduction (to ``B`` or
        a split) — otherwise ``S(1)`` beside an ``S(0)`` input looks free (both padded to ``P``,
        ``P + P -> P``) and the reduction that follows is never counted. 0 where no input is made
        partial (a contraction's own ``S(k) x S(k) -> P`` is priced by its consumers)."""
        if not any(isinstance(d, Partial) and not isinstance(s, Partial)
                   for j in decided for s, d in zip(lays[j]._sbp, combo[1][j])):
            return 0
        total = 0
        for (shape, dtype), nd in zip(out_specs, combo[2]):
            if shape is None or dtype in (_dt.resource, _dt.string) or not any(isinstance(s, Partial) for s in nd):
                continue
            options = [tuple(B if isinstance(s, Partial) else s for s in nd)]
            options += [tuple(S(a) if isinstance(s, Partial) else s for s in nd) for a in range(len(shape))]
            total += min(self.cost(shape, dtype.np_dtype, self.placement, nd, o) for o in options)
        return total


class _Unknown:
    """A local tensor of unknown shape (fine until a global op reads it)."""

    __slots__ = ("_dtype",)
    _shape = None

    def __init__(self, dtype):
        self._dtype = dtype


def plan_graph(fetches, targets, feeds, feed_layouts, placement, label="planned", lookahead=True, unpriced=()):
    """The :class:`GraphPlan` computing ``fetches`` (running ``targets``) from ``feeds``;
    ``feed_layouts[i]`` is feed ``i``'s ``(placement, N-D SBP)`` or None (a local value). The
    fetches are the caller's results, priced at ``B`` (:data:`PRICE_OUTPUTS`), but ``unpriced``
    (values the caller hands on in whatever layout they have: a tape's saved tensors)."""
    from tensorweave.distribute.calibrate import calibrate_once_if_asked
    calibrate_once_if_asked()
    t0 = time.perf_counter()
    feed_ids = {id(t): i for i, t in enumerate(feeds)}
    skip = {id(t) for t in unpriced}
    prices = output_prices([t for t in fetches if id(t) not in skip], placement) if PRICE_OUTPUTS else None
    gp = plan_op_list(executor.prune(fetches, targets, feed_ids), fetches, feeds, feed_layouts, placement, label,
                      lookahead, free_fetches=True, fetch_prices=prices)
    gp.seconds = time.perf_counter() - t0
    return gp


def output_prices(results, placement):
    """id(result) -> a function of its N-D SBP: the bytes the caller's read of its logical value
    (boxing to ``B``, unbucketed: outside the plan) moves; for the results of known static shape.

    >>> import numpy as np, tensorweave as tw
    >>> from tensorweave.core.sbp import B, P
    >>> t = tw.function(lambda: tw.zeros([256])).get_concrete_function().graph.outputs[0]
    >>> price = output_prices([t], tw.placement("cpu", ranks=[0, 1]))[id(t)]
    >>> price((B,)), price((P,)) > 0
    (0, True)
    """
    prices = {}
    for t in results:
        shape = _known(t.shape)
        if shape is None or t.dtype is _dt.resource:
            continue
        b = (B,) * placement.ndim

        def price(nd, shape=shape, dtype=t.dtype.np_dtype):
            return _cost(shape, dtype, placement, tuple(nd), b)
        prices[id(t)] = price
    return prices or None


def plan_op_list(ops, fetches, feeds, feed_layouts, placement, label="planned", lookahead=True, free_fetches=False,
                 fetch_prices=None):
    """:func:`plan_graph` of a given op list (topological order; what the fetches need from the
    feeds): one placement's segment of a graph on several placements (``plan_placements.py``).
    ``free_fetches``: the joint search may change the fetches' layouts (``plan_search.py``);
    ``fetch_prices``: id(fetch) -> a function of its N-D SBP giving the bytes its readers on
    other placements pay for that layout: the search may change those fetches' layouts, priced."""
    gp = GraphPlan(ops, list(feeds), list(fetches), placement, label)
    planner = _Planner(gp, lookahead, free_fetches)
    planner.fetch_prices = fetch_prices
    for t, lay in zip(feeds, feed_layouts):
        if lay is None:
            planner.set_local(t)
        else:
            shape = _known(t.shape)
            gp.layouts[id(t)] = Layout(shape, t.dtype, lay[1], placement)
    planner.run()
    return gp


__all__ = ["plan_graph", "plan_op_list", "GraphPlan", "OpPlan"]
