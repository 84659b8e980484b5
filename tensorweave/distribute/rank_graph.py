"""One rank's program as an op list the graph passes understand, so a planned rank plan gets the
same rewrites (remapping, fusion, in-place, ...) as a single-device ``tw.function``.

:func:`rank_ops` turns a :class:`~tensorweave.distribute.planner.GraphPlan` into rank ``index``'s
op list: every op of the planned graph as a pass node (``passes.ir.Node``) with the rank's op type
and attrs (the signatures' ``local`` hooks) and its *local* shapes, a ``_Boxing`` node in front
of the readers of each boxed tensor, a stateful op with ``B`` outputs wrapped in ``_Once``,
constants and shape-only values (their logical value) as ``Const`` nodes, each variable handle
naming the rank's shard. ``GraphPlan.rank_spec`` then runs ``executor.optimize`` and
``executor.lower`` on it, as ``build_spec`` does on one device.

The collectives stay where the planner put them, in the same order on every rank: ``_Boxing``
and ``_Once`` nodes are stateful here (never folded, merged, fused, pruned or moved), the passes
keep the relative order of the nodes they do not replace, and a rank's plan runs in list order
(``parallel=False``). Decisions the passes take on sizes (fusion's minimum, in-place's) may differ
between ranks of an uneven split; they never touch a collective, so the calls still match.

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> x = tw.constant(np.ones((4, 512), np.float32)).to_global(placement=p, sbp=tw.sbp.split(0))
>>> f = tw.function(lambda x: tw.reduce_sum(tw.tanh(x * 2.0 + 1.0) * 3.0))
>>> float(f(x)) == float(tw.reduce_sum(tw.tanh(tw.ones((4, 512)) * 2.0 + 1.0) * 3.0))
True
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.registry import get_op
from tensorweave.core.sbp import B, Partial, S
from tensorweave.core.shape import TensorShape
from tensorweave.distribute.layout import balanced_bounds, local_shape
from tensorweave.distribute.plan_control import CONTROL_FLOW, bind_control_flow
from tensorweave.distribute.plan_random import draws_stream, rank_stream
from tensorweave.runtime.passes.ir import Node, NodeDef, Value


def _collective_def(op_type, num_outputs=1):
    """A stateful stand-in of ``op_type``'s OpDef: the passes leave such nodes where they are."""
    d = get_op(op_type)
    return NodeDef(op_type, d.kernels, num_outputs, stateful=True, traits=d.traits)


class _Feed:
    """The op behind a rank's feed value (never in the op list; ``lower`` only reads its outputs)."""

    __slots__ = ("name", "outputs", "graph", "device", "control_inputs", "traceback", "_id", "type", "opdef")

    def __init__(self, t):
        self.name, self.graph, self.device, self.type = t.op.name, t.op.graph, t.op.device, t.op.type
        self.control_inputs, self.traceback, self._id, self.opdef = [], t.op.traceback, t.op._id, t.op.opdef
        self.outputs = []


class RankOps:
    """Rank ``index``'s op list (see the module docstring): ``ops``, ``feeds``/``fetches`` (its
    values of the graph's feeds and fetches) and ``targets`` (the stateful ops that must run)."""

    def __init__(self, gp, index, table, comm_ref, device, bucket_bytes=0, fold=True):
        self.gp, self.index, self.device = gp, index, device
        self.table, self.comm_ref = table, comm_ref
        self.rank = gp.placement.ranks[index]
        self.val = {}          # id(graph tensor) -> this rank's value (a Value)
        self.node = {}         # id(graph op) -> its node here (for control edges)
        self.boxed = {}        # (id(tensor), dst sbp) -> the boxed value
        self.ops = []
        self.reducible = {}    # id(_Boxing node) -> its bytes, for a P(sum) -> B all-reduce on the whole group
        self.feeds = [self._feed(t) for t in gp.feeds]
        for op in gp.ops:
            self._add(op)
        if bucket_bytes:
            self.bucket_all_reduces(bucket_bytes)
        self.fetches = [self.val[id(t)] for t in gp.fetches]
        self.unread_once()
        if bucket_bytes and fold:
            self.fold_once()
            self.once_before_wait()
        self.targets = [n for n in self.ops if n.opdef.stateful]

    # ---- values -------------------------------------------------------------------------------------
    def shape(self, t):
        """This rank's static shape of graph tensor ``t`` (its graph shape where no layout gives one)."""
        s = self.gp.local_shape(t, self.index) if id(t) in self.gp.layouts else None
        return t.shape if s is None else TensorShape(list(s))

    def _feed(self, t):
        v = Value(_Feed(t), 0, self.shape(t), t.dtype)
        v.op.outputs.append(v)
        self.val[id(t)] = v
        return v

    def _node(self, like, opdef, ins, attrs, outs, op_type, name=None, ctrl=()):
        n = Node(like, opdef, ins, attrs, outs, type_=op_type, name=name,
                 control_inputs=[self.node[id(c)] for c in ctrl if c is not None and id(c) in self.node])
        self.ops.append(n)
        return n

    def _input(self, t, plan):
        if plan is None:
            return self.val[id(t)]
        key = (id(t), plan.dst_sbp)
        v = self.boxed.get(key)
        if v is None:
            shape = TensorShape(list(local_shape(plan.shape, self.gp.placement, plan.dst_sbp, self.index)))
            n = self._node(t.op, _collective_def("_Boxing"), [self.val[id(t)]],
                           {"plan": self.gp._plan_dict(plan), "rank": self.rank, "comm": self.comm_ref},
                           [(shape, t.dtype)], "_Boxing", name=f"{t.op.name}/boxing")
            v = self.boxed[key] = n.outputs[0]
            if _all_reduce_of_sums(plan, self.gp.placement):
                self.reducible[id(n)] = (_nbytes(plan), _rows(plan, self.gp.placement, self.index))
        return v

    # ---- the gradient all-reduce, bucketed and started early ------------------------------------------
    def bucket_all_reduces(self, bucket_bytes):
        """Replaces the ``P(sum) -> B`` boxings by buckets of at most ``bucket_bytes`` (one tensor
        may exceed it): a bucket's ``_AllReduceStart`` right after the last of its inputs is
        computed, its ``_AllReduceWait`` where its first boxing was (before any reader). Tensors
        join in the order they are computed; a bucket closes when the next tensor is computed
        after one of the bucket's boxings (its start would come after its wait)."""
        pos = {id(n): i for i, n in enumerate(self.ops)}
        members = [n for n in self.ops if id(n) in self.reducible]
        if not members:
            return

        def made_at(n):
            return pos.get(id(n.inputs[0].op), -1)
        buckets, cur, size = [], [], 0
        for n in sorted(members, key=lambda n: (made_at(n), pos[id(n)])):
            nbytes = self.reducible[id(n)][0]
            if cur and (made_at(n) >= min(pos[id(m)] for m in cur) or size + nbytes > bucket_bytes):
                buckets.append(cur)
                cur, size = [], 0
            cur.append(n)
            size += nbytes
        buckets.append(cur)
        starts, waits, gone, rep = {}, {}, set(), {}
        for k, bucket in enumerate(buckets):
            first = min(bucket, key=lambda n: pos[id(n)])
            start = Node(first, _collective_def("_AllReduceStart"), [n.inputs[0] for n in bucket],
                         {"ranks": list(self.gp.placement.ranks), "comm": self.comm_ref, "op": "sum"},
                         [(TensorShape([]), _dt.variant)], type_="_AllReduceStart", name=f"all_reduce_bucket{k}/start",
                         control_inputs=())
            outs = [(n.outputs[0].shape, n.outputs[0].dtype) for n in bucket]
            wait = Node(first, _collective_def("_AllReduceWait", len(bucket)), [start.outputs[0]],
                        {"n": len(bucket), "outputs": [(s.as_list(), d.name) for s, d in outs],
                         "rows": [self.reducible[id(n)][1] for n in bucket]}, outs,
                        type_="_AllReduceWait", name=f"all_reduce_bucket{k}/wait", control_inputs=())
            starts.setdefault(max(made_at(n) for n in bucket), []).append(start)
            waits[id(first)] = wait
            gone.update(id(n) for n in bucket)
            rep.update((id(n.outputs[0]), w) for n, w in zip(bucket, wait.outputs))
        ops = list(starts.get(-1, ()))
        for i, n in enumerate(self.ops):
            if id(n) in waits:
                ops.append(waits[id(n)])
            elif id(n) not in gone:
                n.inputs = tuple(rep.get(id(v), v) for v in n.inputs)
                ops.append(n)
            ops.extend(starts.get(i, ()))
        self.ops = ops
        for key, v in list(self.val.items()):
            self.val[key] = rep.get(id(v), v)

    def unread_once(self):
        """``_Once`` nodes whose outputs no node reads and no fetch names skip their broadcast."""
        read = {id(v) for n in self.ops for v in n.inputs} | {id(v) for v in self.fetches}
        for n in self.ops:
            if n.type == "_Once" and not any(id(v) in read for v in n.outputs):
                n.attrs["broadcast"] = False

    def fold_once(self):
        """A ``_Once`` read (``ReadVariableOp``: the optimizer's step counter, a learning rate) that
        runs between a bucket's start and wait rides on the bucket's rendezvous instead of a
        broadcast of its own: it becomes ``_OnceInto`` (the first rank hands its values to the
        bucket's handle) and the wait outputs them too; its readers up to the wait move after it
        (only when none of them is stateful, so no collective moves)."""
        for k, start in enumerate([n for n in self.ops if n.type == "_AllReduceStart"]):
            pos = {id(n): i for i, n in enumerate(self.ops)}
            wait = next((n for n in self.ops[pos[id(start)]:] if n.type == "_AllReduceWait"
                         and n.inputs[0] is start.outputs[0]), None)
            if wait is None:
                continue
            folded = []
            for once in self.ops[pos[id(start)] + 1:pos[id(wait)]]:
                if once.type != "_Once" or once.attrs["op_type"] != "ReadVariableOp" or not once.attrs.get(
                        "broadcast", True):
                    continue
                made, later = {id(v) for v in once.outputs}, []
                for n in self.ops[pos[id(once)] + 1:pos[id(wait)]]:
                    if any(id(v) in made for v in n.inputs):
                        later.append(n)
                        made.update(id(v) for v in n.outputs)
                if any(n.opdef.stateful for n in later):
                    continue
                folded.append((once, later))
            if folded:
                self._fold(start, wait, folded)

    def once_before_wait(self):
        """A ``_Once`` after the last bucket's wait whose outputs no one reads (the optimizer's step
        counter's ``AssignAddVariableOp``) moves to right before that wait, with the input-free
        nodes it reads there (its variable's handle, a constant): the first rank then runs it while
        the bucket's round is still out (a step's only work the other ranks lack), not after the
        update, where it lengthened rank 0's tail. Only where no node from the wait on touches its
        variables and none of them is ordered before it (Adam's update, which reads the counter, is:
        the counter stays after it); it starts no collective, so the ranks' calls still match."""
        waits = [i for i, n in enumerate(self.ops) if n.type == "_AllReduceWait"]
        if not waits:
            return
        moved, at = [], waits[-1]
        for once in self.ops[at + 1:]:
            if once.type != "_Once" or once.attrs.get("broadcast", True):
                continue
            between = [n for n in self.ops[at:self.ops.index(once)] if all(n is not m for m in moved)]
            made = [v.op for v in once.inputs if any(v.op is n for n in between)]
            if any(op.inputs or op.control_inputs or op.type.startswith("_") for op in made):
                continue
            own = {id(_variable(v)) for v in once.inputs if _variable(v) is not None}
            if any(id(_variable(v)) in own for n in between for v in n.inputs if _variable(v) is not None):
                continue
            later = {id(n) for n in between}
            if any(id(c) in later and all(c is not op for op in made) for c in once.control_inputs):
                continue
            moved += [op for op in made if all(op is not m for m in moved)] + [once]
        if moved:
            gone = {id(n) for n in moved}
            rest = [n for n in self.ops if id(n) not in gone]
            wait = rest.index(self.ops[at])
            self.ops = rest[:wait] + moved + rest[wait:]

    def _fold(self, start, wait, folded):
        outs = [(v.shape, v.dtype) for once, _ in folded for v in once.outputs]
        n = wait.attrs["n"]
        attrs = dict(wait.attrs, extra=len(outs), outputs=wait.attrs["outputs"] + [
            (s.as_list() if s.rank is not None else None, d.name) for s, d in outs])
        new_wait = Node(wait, _collective_def("_AllReduceWait", n + len(outs)), wait.inputs, attrs,
                        [(v.shape, v.dtype) for v in wait.outputs] + outs, type_="_AllReduceWait", name=wait.name,
                        control_inputs=())
        rep = {id(a): b for a, b in zip(wait.outputs, new_wait.outputs)}
        extra = iter(new_wait.outputs[n:])
        gone, moved = {id(wait)}, []
        for once, later in folded:
            rep.update((id(v), next(extra)) for v in once.outputs)
            into = Node(once, _collective_def("_OnceInto", 0), (start.outputs[0],) + tuple(once.inputs),
                        dict(once.attrs), [], type_="_OnceInto", name=once.name, control_inputs=once.control_inputs)
            self.ops[self.ops.index(once)] = into
            gone.update(id(m) for m in later)
            moved += later
        ops = []
        for node in self.ops:
            if id(node) == id(wait):
                ops.append(new_wait)
                ops.extend(sorted(moved, key=self.ops.index))
            elif id(node) not in gone:
                ops.append(node)
        for node in ops:
            node.inputs = tuple(rep.get(id(v), v) for v in node.inputs)
        self.ops = ops
        self.fetches = [rep.get(id(v), v) for v in self.fetches]
        for key, v in list(self.val.items()):
            self.val[key] = rep.get(id(v), v)

    # ---- ops ----------------------------------------------------------------------------------------
    def _add(self, op):
        p = self.gp.op_plans[id(op)]
        kind = p.kind
        if kind == "variable":
            var = op.attrs["variable"]
            live = var._locals[self.index] if getattr(var, "is_global", False) else var
            attrs = {"variable": live, "shared_name": op.attrs["shared_name"], "dtype": var.dtype,
                     "shape": live._shape}
            n = self._node(op, op.opdef, [], attrs, [(TensorShape([]), _dt.resource)], "VarHandleOp")
            self.val[id(op.outputs[0])] = n.outputs[0]
            self.node[id(op)] = n
            return
        if kind in ("const", "metadata"):
            const = get_op("Const")
            for k, (o, v) in enumerate(zip(op.outputs, p.value)):
                v = np.asarray(v)
                n = self._node(op, const, [], {"value": v, "dtype": o.dtype}, [(TensorShape(list(v.shape)), o.dtype)],
                               "Const", name=op.name if k == 0 else f"{op.name}:{k}")
                self.val[id(o)] = n.outputs[0]
                self.node.setdefault(id(op), n)
            return
        if kind == "pin":
            self.val[id(op.outputs[0])] = self._input(op.inputs[0], p.plans[0])
            return
        if kind == "alias":           # a decomposition's stand-ins and results (plan_decompose.py)
            for o, t in zip(op.outputs, p.value):
                self.val[id(o)] = self.val[id(t)]
            last = self.ops[-1] if self.ops else None
            if last is not None:
                self.node[id(op)] = last
            return
        ins = [self._input(t, plan) for t, plan in zip(op.inputs, p.plans)]
        op_type, attrs = p.local_ops[self.index]
        outs = [(self.shape(o), o.dtype) for o in op.outputs]
        bound = False
        if draws_stream(op):          # the rank's own copy of the op's stream
            attrs = dict(attrs, state=self.table.ref("random_stream", op.name, rank_stream(self.gp, op, self.index)))
            bound = True
        elif op.type in CONTROL_FLOW:  # its bodies as nested plan specs
            attrs, bound = bind_control_flow(op, attrs, self.table, self), True
        if p.once:
            attrs = {"op_type": op_type, "op_attrs": attrs, "ranks": list(self.gp.placement.ranks),
                     "rank": self.rank, "comm": self.comm_ref}
            opdef, op_type = _collective_def("_Once", op.opdef.num_outputs), "_Once"
        else:
            opdef = get_op(op_type)
            if bound:                 # ``lower`` must not bind the op's single-device resources over these
                opdef = NodeDef(op_type, opdef.kernels, opdef.num_outputs, None, opdef.heavy, opdef.stateful,
                                opdef.traits)
        weights = [ins[w] for w, _ in p.zero]
        for w, g in p.zero:       # ZeRO-1 (zero_update.py): the gradient's reduce-scatter joins the buckets,
            plan, node = p.plans[g], ins[g].op      # the update writes the rank's rows of the weight
            if plan is not None and node.type == "_Boxing" and _all_reduce_of_sums(plan, self.gp.placement, (S(0),)):
                self.reducible[id(node)] = (_nbytes(plan), _rows(plan, self.gp.placement, self.index))
            lo, hi = balanced_bounds(self.gp.layouts[id(op.inputs[w])]._shape[0], self.gp.placement.size)[self.index]
            ins[w] = self._node(op, _collective_def("_VariableRows"), [ins[w]], {"rows": [lo, hi]},
                                [(TensorShape([]), _dt.resource)], "_VariableRows",
                                name=f"{op.name}/rows{w}").outputs[0]
        n = self._node(op, opdef, ins, dict(attrs), outs, op_type, ctrl=op.control_inputs)
        self.node[id(op)] = n
        for o, v in zip(op.outputs, n.outputs):
            self.val[id(o)] = v
        if p.zero:                # ... then every rank's rows are gathered into each weight, in place
            self._node(op, _collective_def("_GatherRows", 0), weights,
                       {"ranks": list(self.gp.placement.ranks), "comm": self.comm_ref}, [], "_GatherRows",
                       name=f"{op.name}/gather_rows")


def _variable(v):
    """The variable behind a handle value (None for any other value)."""
    return v.op.attrs.get("variable") if v.op.type == "VarHandleOp" else None


def _all_reduce_of_sums(plan, placement, dst=(B,)):
    """True for a boxing of partial sums to ``dst`` (``B``: an all-reduce; ``S(0)``: ZeRO-1's
    reduce-scatter of a gradient, its rows of the bucket's sums) over the whole (1-D) placement."""
    return (placement.ndim == 1 and plan.src_placement == placement and plan.dst_placement == placement
            and plan.src_sbp == (Partial("sum"),) and plan.dst_sbp == dst and plan.dtype.kind in "fiuc")


def _rows(plan, placement, index):
    """``[lo, hi)`` of rank ``index``'s rows for a reduce-scatter to ``S(0)``; None for an all-reduce."""
    if plan.dst_sbp == (B,):
        return None
    lo, hi = balanced_bounds(plan.shape[0], placement.size)[index]
    return [lo, hi]


def _nbytes(plan):
    return int(np.prod(plan.shape, dtype=np.int64)) * plan.dtype.itemsize


def rank_ops(gp, index, table, comm_ref, device, bucket_bytes=0, fold=True):
    """:class:`RankOps` of rank ``index`` (resources go into ``table``; ``comm_ref`` names its
    communicator; ``bucket_bytes`` > 0 buckets the all-reduces of partial sums; ``fold`` then
    folds ``_Once`` reads into the buckets)."""
    return RankOps(gp, index, table, comm_ref, device, bucket_bytes, fold)


__all__ = ["rank_ops", "RankOps"]
