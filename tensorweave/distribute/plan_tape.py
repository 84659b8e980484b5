"""An outer ``GradientTape`` over a call of a planned ``tw.function`` (global tensors inside).

As for a single-device function (``runtime/function.py``), the tape sees the call as ONE op:
gradient ops are added once to the function's graph (``ConcreteFunction._backward_graph``:
upstream placeholders, the gradient of every input and trainable variable, the forward tensors
those read — the *saved* values). Here both halves are planned over the ranks:

* the **forward** plan computes the outputs and the saved values (``planner.plan_graph`` with
  them all as fetches); each rank keeps its pieces of the saved values, laid out as planned;
* the **backward** plan is fed the upstream gradients (as the tape hands them: global tensors
  in any layout of the placement, local tensors, or none: zeros) and the saved pieces with
  their forward layouts, and fetches the gradients. It is planned once per layout of the
  upstream gradients (usually one: ``ones_like`` of a loss is ``B``).

So the backward sees exactly the forward that ran (the same random draws), each half is one
hand-off per rank, and gradients come back as global tensors laid out as planned (a ``B``
weight's gradient ``P`` under a split batch, as in eager global code). A local input's or
local variable's gradient is its logical value, a local tensor.

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> w = tw.Variable(np.ones((3, 2), np.float32), placement=p, sbp=tw.sbp.broadcast)
>>> f = tw.function(lambda x: tw.reduce_sum(tw.square(tw.matmul(x, w))))
>>> x = tw.constant(np.ones((4, 3), np.float32)).to_global(placement=p, sbp=tw.sbp.split(0))
>>> with tw.GradientTape() as tape:
...     loss = f(x)
>>> g = tape.gradient(loss, w)
>>> float(loss), g.numpy().tolist()[0]
(72.0, [24.0, 24.0])
"""
import numpy as np

from tensorweave.core import errors
from tensorweave.core.dispatch import record_custom
from tensorweave.core.tensor import EagerTensor, Tensor

__all__ = ["call_recorded"]

# Forward tensors the backward recomputes instead of being fed: no inputs, no state (a
# variable's handle names each rank's shard; a constant is the same everywhere).
_RECOMPUTED = frozenset({"Const", "VarHandleOp"})


class _Halves:
    """The forward plan of a planned function under a tape and its backward plans."""

    def __init__(self, pf):
        from tensorweave.distribute.plan_function import RankPlans
        from tensorweave.distribute.planner import plan_graph
        cf = pf.cf
        self.gphs, self.grads, saved = cf._backward_graph()
        self.saved = [t for t in saved if t.op.type not in _RECOMPUTED]
        graph = cf.graph
        feeds = list(cf.inputs) + [p for _, p in graph.captures]
        layouts = [graph._tw_globals.inputs.get(id(p)) for p in feeds]
        targets = [graph._last_stateful] if graph._last_stateful is not None else []
        self.forward = RankPlans(plan_graph(list(cf.outputs) + self.saved, targets, feeds, layouts, pf.placement,
                                            f"function:{graph.name}/forward", unpriced=self.saved))
        self.fetched = [g for g in self.grads if g is not None]
        self.backward = {}          # upstream layouts -> RankPlans
        self.pf = pf

    def backward_plans(self, key, saved_layouts):
        rp = self.backward.get(key)
        if rp is None:
            from tensorweave.distribute.plan_function import RankPlans
            from tensorweave.distribute.planner import plan_graph
            pf = self.pf
            layouts = [None if nd is None else (pf.placement, nd) for nd in key] + saved_layouts
            rp = self.backward[key] = RankPlans(plan_graph(
                self.fetched, [], self.gphs + self.saved, layouts, pf.placement, f"function:{pf.cf.graph.name}/backward"))
        return rp


def _halves(pf):
    h = getattr(pf, "_tape_halves", None)
    if h is None:
        h = pf._tape_halves = _Halves(pf)
    return h


def _wrap(pf, dtype, lay, pieces):
    from tensorweave.distribute.global_tensor import GlobalTensor
    if lay is None:
        return EagerTensor(pieces[0], dtype)
    return GlobalTensor(pieces, pf.placement, lay._sbp, lay._shape, dtype)


def call_recorded(pf, flat_inputs):
    """Runs the planned function ``pf`` (a ``PlannedFunction``) on ``flat_inputs`` and records
    the call on the active tapes with its gradient; returns the outputs as ``pf`` does."""
    h = _halves(pf)
    n_ranks = pf.placement.size
    fetched = h.forward.run([pf._feeds(flat_inputs, i) for i in range(n_ranks)])
    outputs = pf.outputs
    outs = [_wrap(pf, t.dtype, lay, pieces) for t, (lay, pieces) in zip(outputs, fetched)]
    saved = fetched[len(outputs):]
    record_custom(_PlannedCallRecord(pf, h, list(flat_inputs) + pf.cf._watched_handles(), outs, saved))
    return outs


class _PlannedCallRecord:
    """The tape's record of one planned call (see the module docstring)."""

    __slots__ = ("pf", "halves", "inputs", "outputs", "saved", "type", "name", "attrs", "opdef")

    def __init__(self, pf, halves, inputs, outputs, saved):
        self.pf, self.halves, self.inputs, self.outputs, self.saved = pf, halves, inputs, outputs, saved
        self.type = self.name = "PartitionedCall"
        self.attrs = {}
        self.opdef = None

    def _upstream(self, grads):
        """(layout key, per rank the upstream feed values) of the tape's output gradients."""
        placement = self.pf.placement
        key, per_rank = [], [[] for _ in range(placement.size)]
        for g, o in zip(grads, self.pf.outputs):
            if isinstance(g, Tensor) and not isinstance(g, EagerTensor) and not getattr(g, "is_global", False):
                raise NotImplementedError("Differentiating a planned tw.function call twice (higher order through "
                                          "a function call) is not supported; take the gradients inside the function")
            if getattr(g, "is_global", False):
                if g.placement != placement:
                    from tensorweave.core.sbp import B
                    g = g.to_global(placement=placement, sbp=(B,) * placement.ndim)
                key.append(g.sbp)
                for i in range(placement.size):
                    per_rank[i].append(g._pieces[i])
                continue
            value = np.zeros(o.shape.as_list(), o.dtype.np_dtype) if g is None else np.asarray(g._value)
            key.append(None)
            for i in range(placement.size):
                per_rank[i].append(value)
        return tuple(key), per_rank

    def grad_fn(self, op, *grads):
        h, pf = self.halves, self.pf
        key, per_rank = self._upstream(grads)
        saved_layouts = [None if lay is None else (pf.placement, lay._sbp) for lay, _ in self.saved]
        rp = h.backward_plans(key, saved_layouts)
        for i in range(pf.placement.size):
            per_rank[i].extend(pieces[i] for _, pieces in self.saved)
        results = iter(rp.run(per_rank))
        out = []
        for x, gt in zip(self.inputs, h.grads):
            if gt is None:
                out.append(None)
                continue
            lay, pieces = next(results)
            g = _wrap(pf, gt.dtype, lay, pieces)
            out.append(_as_layout_of(x, g, pf.placement))
        return out


def _as_layout_of(x, g, placement):
    """``g`` as ``x``'s kind: a local input's gradient is local (its logical value), a global
    input's is global (a local gradient, the same on every rank, becomes ``B``)."""
    from tensorweave.core.sbp import B
    if getattr(x, "is_global", False):
        if getattr(g, "is_global", False):
            return g
        from tensorweave.distribute.global_tensor import to_global
        return to_global(g, placement, (B,) * placement.ndim)
    if getattr(g, "is_global", False):
        return EagerTensor(g.numpy(), g.dtype)
    if not isinstance(g, Tensor):
        raise errors.InternalError(f"planned call gradient: unexpected {type(g).__name__}")
    return g


# ---- a function on several placements (plan_placements.py) -------------------------------------------
class _MultiHalves:
    """The forward and backward of a function on several placements, each planned as segments
    (``plan_placements.plan_placements``); the backward once per upstream layout."""

    def __init__(self, mpf):
        from tensorweave.distribute.plan_placements import plan_placements
        from tensorweave.runtime import executor
        cf = mpf.cf
        self.gphs, self.grads, saved = cf._backward_graph()
        self.saved = [t for t in saved if t.op.type not in _RECOMPUTED]
        graph = cf.graph
        self.info, self.name = graph._tw_globals, graph.name
        layouts = [self.info.inputs.get(id(p)) for p in mpf.feeds]
        targets = [graph._last_stateful] if graph._last_stateful is not None else []
        fetches = list(cf.outputs) + self.saved
        ops = executor.prune(fetches, targets, {id(t): i for i, t in enumerate(mpf.feeds)})
        self.forward = plan_placements(ops, fetches, mpf.feeds, layouts, self.info, f"function:{graph.name}/forward")
        self.fetched = [g for g in self.grads if g is not None]
        self.backward = {}

    def backward_segments(self, key, saved_layouts, fetched=None):
        """The backward's segments for upstream layouts ``key``, computing ``fetched`` (default:
        every gradient; a pipeline asks for the variables' only)."""
        fetched = self.fetched if fetched is None else list(fetched)
        cache = (key, tuple(id(t) for t in fetched))
        segs = self.backward.get(cache)
        if segs is None:
            from tensorweave.distribute.plan_placements import plan_placements
            from tensorweave.runtime import executor
            feeds = self.gphs + self.saved
            ops = executor.prune(fetched, [], {id(t): i for i, t in enumerate(feeds)})
            segs = self.backward[cache] = plan_placements(ops, fetched, feeds, list(key) + saved_layouts, self.info,
                                                          f"function:{self.name}/backward")
        return segs


def _global_or_local(t, lay, v):
    from tensorweave.distribute.global_tensor import GlobalTensor
    return EagerTensor(v, t.dtype) if lay is None else GlobalTensor(v, lay[0], lay[1], tuple(t.shape.as_list()), t.dtype)


def call_recorded_multi(mpf, flat_inputs):
    """:func:`call_recorded` for a ``plan_placements.MultiPlacementFunction``: the forward's
    segments run (outputs and saved values kept as laid out, on their placements) and the call is
    recorded with a gradient that runs the backward's segments."""
    from tensorweave.distribute.plan_placements import run_segments
    h = getattr(mpf, "_tape_halves", None)
    if h is None:
        h = mpf._tape_halves = _MultiHalves(mpf)
    values = run_segments(h.forward, mpf.feed_values(flat_inputs))
    outs = [_global_or_local(t, *values[id(t)]) for t in mpf.outputs]
    saved = [values[id(t)] for t in h.saved]
    record_custom(_MultiCallRecord(mpf, h, list(flat_inputs) + mpf.cf._watched_handles(), outs, saved))
    return outs


class _MultiCallRecord:
    """The tape's record of one call of a function on several placements."""

    __slots__ = ("mpf", "halves", "inputs", "outputs", "saved", "type", "name", "attrs", "opdef")

    def __init__(self, mpf, halves, inputs, outputs, saved):
        self.mpf, self.halves, self.inputs, self.outputs, self.saved = mpf, halves, inputs, outputs, saved
        self.type = self.name = "PartitionedCall"
        self.attrs = {}
        self.opdef = None

    def grad_fn(self, op, *grads):
        from tensorweave.distribute.plan_placements import run_segments
        h, values, key = self.halves, {}, []
        for g, o, p in zip(grads, self.mpf.outputs, h.gphs):
            if isinstance(g, Tensor) and not isinstance(g, EagerTensor) and not getattr(g, "is_global", False):
                raise NotImplementedError("Differentiating a planned tw.function call twice (higher order through "
                                          "a function call) is not supported; take the gradients inside the function")
            if getattr(g, "is_global", False):         # fed on its own placement: moved where it is read
                key.append((g.placement, g.sbp))
                values[id(p)] = ((g.placement, g.sbp), list(g._pieces))
            else:
                key.append(None)
                values[id(p)] = (None, np.zeros(o.shape.as_list(), o.dtype.np_dtype) if g is None
                                 else np.asarray(g._value))
        saved_layouts = [lay for lay, _ in self.saved]
        for t, v in zip(h.saved, self.saved):
            values[id(t)] = v
        run_segments(h.backward_segments(tuple(key), saved_layouts), values)
        out = []
        for x, gt in zip(self.inputs, h.grads):
            if gt is None:
                out.append(None)
                continue
            g = _global_or_local(gt, *values[id(gt)])
            out.append(_as_layout_of(x, g, getattr(x, "placement", None)))
        return out
