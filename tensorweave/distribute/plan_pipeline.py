"""Micro-batching inside one planned function on several placements: a pipeline schedule run
over the function's segments (``tw.distribute.pipeline(fn, micro_batches=k, schedule=...)``).

``fn(*batch) -> loss`` is a ``tw.function`` (or a Python function, traced as one) whose layers
live on different placements, values moved between them by ``to_global``: planned as one graph
cut into per-placement segments (``plan_placements.py``). Run whole, the segments go one after
another — forward of stage 1 | forward and backward of stage 2 | backward of stage 1 — and one
stage always idles. Here the batch arguments are split into ``k`` balanced micro-batches (along
axis 0, each keeping its argument's placement and SBP) and the planned forward and backward
halves (``plan_tape._MultiHalves``: the backward fetches the variables' gradients only) are run
per micro-batch as a :class:`~pipeline.Pipeline`'s schedule: the forward segments on stage
``s``'s placement are action ``F(s, m)``, the backward segments there ``B(s, m)``, GPipe or 1F1B
(``pipeline_schedule.py``), one controller thread per stage walking its actions, so stage 1's
forward of micro-batch ``m + 1`` runs on its rank threads while stage 2 works on ``m``. Each
micro-batch's backward is seeded with its share of the batch (rows / batch rows), so the step's
loss and gradients are the whole batch's for a loss that averages over the batch (the gradients
summed in micro-batch order, the same bits whichever stage finished first).

The stats of the last step (:class:`PipelineStats`: the schedule's bubble fraction, the wall time,
each stage's busy seconds and the idle share measured from them) are ``pipe.stats``;
``tw.distribute.explain(pipe, *batch)`` lists the segments, the transfers and the schedule with
its bubble. As in every micro-batched pipeline, ops that mix rows of the batch (batch statistics)
see one micro-batch, and a random draw draws per micro-batch.

>>> import numpy as np, tensorweave as tw
>>> p1, p2 = tw.placement("cpu", ranks=[0, 1]), tw.placement("cpu", ranks=[2, 3])
>>> w1 = tw.Variable(np.full((3, 4), 0.5, np.float32), placement=p1, sbp=tw.sbp.broadcast)
>>> w2 = tw.Variable(np.full((4, 1), 0.25, np.float32), placement=p2, sbp=tw.sbp.broadcast)
>>> def loss(x, y):
...     h = tw.nn.relu(tw.matmul(x, w1)).to_global(placement=p2, sbp=tw.sbp.split(0))
...     return tw.reduce_mean(tw.square(tw.matmul(h, w2) - y))
>>> pipe = tw.distribute.pipeline(loss, micro_batches=4, schedule="1f1b")
>>> x = tw.constant(np.ones((8, 3), np.float32)).to_global(placement=p1, sbp=tw.sbp.split(0))
>>> y = tw.constant(np.zeros((8, 1), np.float32)).to_global(placement=p2, sbp=tw.sbp.split(0))
>>> value, grads, variables = pipe.forward_backward(x, y)
>>> float(value), [g.shape.as_list() for g in grads]
(2.25, [[3, 4], [4, 1]])
>>> print(pipe.format_schedule())
stage 0: F0 F1 .. B0 F2 B1 F3 B2 .. B3
stage 1: .. F0 B0 F1 B1 F2 B2 F3 B3 ..
>>> pipe.stats.bubble_fraction
0.2
"""
import threading
import time

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.sbp import B
from tensorweave.distribute.layout import balanced_bounds
from tensorweave.distribute.pipeline import Pipeline, _Step
from tensorweave.distribute.pipeline_schedule import bubble_fraction, make_schedule
from tensorweave.distribute.ray.pieces import cluster_for, is_remote

__all__ = ["PlannedPipeline", "PipelineStats"]

_SCHEDULES = ("1f1b", "gpipe")
_READS = frozenset({"ReadVariableOp", "VarHandleOp", "VariableShape"})


class PipelineStats:
    """One step of a :class:`PlannedPipeline`: ``schedule``, ``micro_batches``, ``stages`` (each
    stage's ranks), ``bubble_fraction`` (the schedule's idle slots over all slots,
    ``(p - 1) / (k + p - 1)``), ``seconds`` (wall time of the step), ``busy_seconds`` (per stage, the
    time its controller spent running its segments), ``measured_idle_fraction`` (``1 -
    sum(busy) / (p * seconds)``: the bubble and the hand-offs as they happened) and ``held`` (per
    stage, the most micro-batches whose activations it held at once, counted in the values kept:
    each value is dropped after its last reader, so 1F1B holds ``p - s``, GPipe ``k``)."""

    def __init__(self, schedule, micro_batches, stages, bubble, seconds, busy, held):
        self.schedule, self.micro_batches, self.stages = schedule, micro_batches, stages
        self.bubble_fraction, self.seconds, self.busy_seconds, self.held = bubble, seconds, busy, held

    @property
    def measured_idle_fraction(self):
        total = self.seconds * len(self.stages)
        return max(0.0, 1.0 - sum(self.busy_seconds) / total) if total > 0 else 0.0

    def to_dict(self):
        return {"schedule": self.schedule, "micro_batches": self.micro_batches, "stages": self.stages,
                "bubble_fraction": self.bubble_fraction, "seconds": self.seconds,
                "busy_seconds": list(self.busy_seconds), "measured_idle_fraction": self.measured_idle_fraction,
                "held": list(self.held)}

    def __repr__(self):
        return (f"<PipelineStats {self.schedule} {len(self.stages)} stages x {self.micro_batches} micro-batches: "
                f"bubble {self.bubble_fraction:.3f}, measured idle {self.measured_idle_fraction:.3f}, "
                f"{self.seconds * 1e3:.1f} ms>")


def _fail(what, hint):
    site = errors.user_frame()
    return errors.InvalidArgumentError(f"pipeline: {what}" + (f"\n  Created at: {site}" if site else "")
                                       + f"\n  Hint: {hint}")


class _MicroPlan:
    """The planned halves of ``fn`` for one micro-batch signature, grouped by stage: ``forward[s]``
    and ``backward[s]`` are the segments stage ``s`` runs for ``F`` and ``B``."""

    def __init__(self, fn, args):
        from tensorweave.distribute.plan_tape import _MultiHalves
        cf = fn.get_concrete_function(*args)
        mpf = getattr(cf, "_global", None)
        if mpf is None or not hasattr(mpf, "segments"):
            where = "no global value" if mpf is None else f"one placement ({mpf.placement!r})"
            raise _fail(f"'{fn._name}' holds {where}: there are no stages to pipeline",
                        "put the layers' variables on different placements and move the activations between them "
                        "with x.to_global(placement=..., sbp=...); on one placement use the tw.function itself")
        if len(cf.outputs) != 1 or cf.outputs[0].shape.rank != 0 or not cf.outputs[0].dtype.is_floating:
            got = ", ".join(f"{t.dtype.name}{t.shape.as_list()}" for t in cf.outputs) or "nothing"
            raise _fail(f"'{fn._name}' must return one floating scalar, the loss; it returns {got}",
                        "return tw.reduce_mean(...) of the per-example losses")
        self.cf, self.mpf = cf, mpf
        for seg in mpf.segments:         # run per micro-batch, an update would happen k times
            for op in seg.ops:
                if op.opdef.stateful and op.type not in _READS and any(x.dtype is _dt.resource for x in op.inputs):
                    raise _fail(f"'{fn._name}' updates a variable ('{op.name}' ({op.type})"
                                + (f" at {op.traceback}" if op.traceback else "") + "); a micro-batched function "
                                "computes the loss only, once per micro-batch",
                                "return the loss and let the pipeline take the gradients: "
                                "pipe.train_step(*batch, optimizer=opt) applies them once per step")
        h = mpf._tape_halves = getattr(mpf, "_tape_halves", None) or _MultiHalves(mpf)
        self.halves, self.loss = h, cf.outputs[0]
        self.placements = []
        for seg in h.forward:
            if seg.placement not in self.placements:
                self.placements.append(seg.placement)
            elif seg.placement != self.placements[-1]:
                raise _fail(f"the forward of '{fn._name}' returns to {seg.placement!r} after another placement "
                            f"(segments on {[list(s.placement.ranks) for s in h.forward]}); a stage runs once per "
                            "micro-batch", "compute each stage's layers on its placement once, in order "
                            "(stage 1, then stage 2, ...)")
        layouts = {id(t): lay for t, lay in zip(mpf.feeds, [cf.graph._tw_globals.inputs.get(id(p))
                                                            for p in mpf.feeds])}
        for seg in h.forward:
            for t in seg.plan.fetches:
                layouts[id(t)] = None if id(t) in seg.plan.local else (seg.placement, seg.plan.layouts[id(t)]._sbp)
        loss_layout = layouts[id(self.loss)]
        if loss_layout is None:
            raise _fail(f"the loss of '{fn._name}' is a local value (no global value reaches it)",
                        "compute the loss from the last stage's global tensors")
        self.loss_placement = loss_layout[0]
        n_in = len(cf.inputs)
        self.variables = cf.trainable_variables
        self.grads = h.grads[n_in:]
        wanted = [g for g in self.grads if g is not None]
        key = ((self.loss_placement, (B,) * self.loss_placement.ndim),)
        backward = h.backward_segments(key, [layouts[id(t)] for t in h.saved], wanted) if wanted else []
        self.forward = [[seg for seg in h.forward if seg.placement == p] for p in self.placements]
        self.backward = [[] for _ in self.placements]
        last = len(self.placements)
        for seg in backward:
            s = self.placements.index(seg.placement) if seg.placement in self.placements else last
            if s >= last:
                raise _fail(f"the backward of '{fn._name}' runs on {seg.placement!r} after stage {last}'s "
                            f"(backward segments on {[list(x.placement.ranks) for x in backward]})",
                            "keep each stage's layers and variables on one placement")
            last = s
            self.backward[s].append(seg)
        self._releases()

    def _releases(self):
        """``release[(kind, stage)]``: the values a micro-batch no longer needs once that action
        ran (their last reader; the loss and the gradients are kept for the step's sums), so a
        stage holds the activations of the micro-batches it has not yet run backward for — 1F1B's
        ``p - s``, not all ``k``; ``saved_by[s]``: what stage ``s``'s forward leaves for later."""
        p = len(self.placements)
        order = [("F", s) for s in range(p)] + [("B", s) for s in reversed(range(p))]
        segs = {("F", s): self.forward[s] for s in range(p)}
        segs.update({("B", s): self.backward[s] for s in range(p)})
        keep = {id(self.loss)} | {id(g) for g in self.grads if g is not None}
        last = {}
        for i, key in enumerate(order):
            for seg in segs[key]:
                for t in seg.feeds:
                    last[id(t)] = i
                for t in seg.plan.fetches:
                    last.setdefault(id(t), i)
        self.release = {key: [] for key in order}
        for tid, i in last.items():
            if tid not in keep:
                self.release[order[i]].append(tid)
        self.saved_by = [{id(t) for seg in self.forward[s] for t in seg.plan.fetches
                          if id(t) not in keep and last[id(t)] > s} for s in range(p)]


def _shape(value):
    shape = getattr(value, "shape", None)
    return list(shape.as_list()) if hasattr(shape, "as_list") else list(np.shape(value))


def _split(value, k, index):
    """``value`` (a batch argument) as ``k`` balanced micro-batches along axis 0, each laid out as
    ``value`` (a global one keeps its placement and SBP)."""
    from tensorweave.core.convert import convert_to_tensor
    a = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if a.ndim == 0 or a.shape[0] < k:
        raise _fail(f"argument {index} of shape {list(a.shape)} has "
                    + ("no batch axis" if a.ndim == 0 else f"{a.shape[0]} rows") + f" for {k} micro-batches",
                    "pass batch tensors (split along axis 0) and micro_batches <= the batch size")
    pieces = [a[lo:hi] for lo, hi in balanced_bounds(a.shape[0], k)]
    if getattr(value, "is_global", False):
        return [convert_to_tensor(p).to_global(placement=value.placement, sbp=value.sbp) for p in pieces]
    return [convert_to_tensor(p) for p in pieces]


class PlannedPipeline(Pipeline):
    """A planned function on several placements run micro-batch by micro-batch in a schedule (see
    the module docstring); made by ``tw.distribute.pipeline(fn, micro_batches=k, schedule=...)``.
    ``forward_backward(*batch)`` -> (loss, gradients, variables), ``train_step(*batch,
    optimizer=opt)``, ``pipe(*batch)`` the loss without gradients; ``stats`` the last step's
    :class:`PipelineStats`."""

    def __init__(self, fn, micro_batches=1, schedule="1f1b", loss=None, concurrent=True):
        from tensorweave.runtime.function import Function, function
        if schedule not in _SCHEDULES:
            raise ValueError(f"pipeline: schedule {schedule!r} for a planned function; expected one of {_SCHEDULES} "
                             "(interleaved_1f1b needs the stages listed: pass (stage, placement) pairs)")
        if int(micro_batches) < 1:
            raise ValueError(f"pipeline: micro_batches must be >= 1, got {micro_batches}")
        if loss is not None:                  # fn is the model: loss(y, fn(x)), averaged
            model, loss_fn = fn, _loss(loss)

            def fn(x, y):
                import tensorweave as tw
                return tw.reduce_mean(loss_fn(y, model(x)))
            fn.__name__ = getattr(model, "__name__", type(model).__name__)
        self.fn = fn if isinstance(fn, Function) else function(fn)
        self.micro_batches, self.schedule_name, self.concurrent = int(micro_batches), schedule, bool(concurrent)
        self.virtual_stages, self.loss, self.schedule = 1, loss, None
        self.stages = self.placements = None
        self.held_activations, self.stats = None, None
        self._ray, self._last_seconds = None, None
        self._plans = {}

    # ---- planning --------------------------------------------------------------------------
    def _plan(self, args):
        """(per micro-batch its argument list and plan, the micro-batches' weights)."""
        if not args:
            raise _fail("no batch arguments", "call it with the batch tensors fn takes, e.g. pipe.forward_backward(x, y)")
        k = self.micro_batches
        shapes = [_shape(a) for a in args]
        if len({tuple(s[:1]) for s in shapes}) > 1:
            raise _fail(f"the batch arguments have different row counts: shapes {shapes}",
                        "every argument is split along axis 0 into the same micro-batches")
        split = [_split(a, k, i) for i, a in enumerate(args)]
        mbs = [[s[m] for s in split] for m in range(k)]
        plans = []
        for m_args in mbs:
            key = tuple((tuple(a.shape.as_list()), getattr(a, "placement", None), getattr(a, "sbp", None))
                        for a in m_args)
            plan = self._plans.get(key)
            if plan is None:
                plan = self._plans[key] = _MicroPlan(self.fn, m_args)
            if self.placements is None:
                self.placements = list(plan.placements)
                self.stages = [None] * len(self.placements)
                self.schedule = make_schedule(len(self.placements), k, self.schedule_name)
            elif plan.placements != self.placements:
                raise _fail(f"micro-batches of different shapes put the stages on different placements "
                            f"({[list(p.ranks) for p in plan.placements]} and "
                            f"{[list(p.ranks) for p in self.placements]})", "give every micro-batch the same layouts")
            plans.append(plan)
        return list(zip(mbs, plans)), [a[0].shape.as_list()[0] / shapes[0][0] for a in mbs]

    @property
    def bubble_fraction(self):
        if self.schedule is None:
            raise ValueError("pipeline: the stages of a planned function are known once it is planned: call it (or "
                             "tw.distribute.explain(pipe, *batch)) first")
        return bubble_fraction(self.schedule)

    @property
    def trainable_variables(self):
        plan = next(iter(self._plans.values()), None)
        return [] if plan is None else list(plan.variables)

    @property
    def last_step(self):
        return None if self.stats is None else self.stats.to_dict()

    # ---- running ---------------------------------------------------------------------------
    def _run(self, args, backward):
        from tensorweave.distribute.plan_placements import run_segment
        mbs, weights = self._plan(args)
        actions = [a for a in self.schedule if backward or a.kind == "F"]
        last = len(self.placements) - 1
        values = [plan.mpf.feed_values(m_args) for m_args, plan in mbs]
        step = _Step(len(self.placements))
        busy = [0.0] * len(self.placements)
        lock = threading.Lock()

        def run(a):
            s, m = a.stage, a.micro_batch
            plan, vals = mbs[m][1], values[m]
            if a.kind == "F" and s:
                step.take((s - 1, m, "F"))
            elif a.kind == "B" and s < last:
                step.take((s + 1, m, "B"))
            elif a.kind == "B":              # the last stage seeds its backward with the micro-batch's share
                pl = plan.loss_placement
                seed = np.asarray(weights[m], plan.loss.dtype.np_dtype)
                vals[id(plan.halves.gphs[0])] = ((pl, (B,) * pl.ndim), [seed] * pl.size)
            t0 = time.perf_counter()
            for seg in (plan.forward if a.kind == "F" else plan.backward)[s]:
                run_segment(seg, vals)
            for tid in plan.release[(a.kind, s)]:
                vals.pop(tid, None)
            # micro-batches whose stage-s activations are held now (the values dicts themselves)
            held = sum(any(tid in v for tid in p.saved_by[s]) for (_, p), v in zip(mbs, values))
            with lock:
                busy[s] += time.perf_counter() - t0
                step.held[s] = max(step.held[s], held)
            step.put((s, m, a.kind), True)

        t0 = time.perf_counter()
        if any(cluster_for(p) is not None for p in self.placements):
            for a in actions:        # Ray workers: the driver calls them in the schedule's order, one at a time
                run(a)
        else:
            self._drive(actions, run, step)
        self._last_seconds = seconds = time.perf_counter() - t0
        self.held_activations = step.held if backward else None
        self.stats = PipelineStats(self.schedule_name, self.micro_batches, [list(p.ranks) for p in self.placements],
                                   bubble_fraction(self.schedule), seconds, busy, list(step.held))
        return mbs, weights, values

    def _loss_value(self, mbs, weights, values):
        from tensorweave.core.tensor import EagerTensor
        from tensorweave.distribute.global_tensor import to_global
        from tensorweave.distribute.layout import assemble
        from tensorweave.distribute.ray.pieces import local_pieces
        total = 0.0
        for (_, plan), w, vals in zip(mbs, weights, values):
            (pl, nd), pieces = vals[id(plan.loss)]
            total += w * float(assemble(local_pieces(pieces), (), pl, nd))
        plan = mbs[0][1]
        pl = plan.loss_placement
        return to_global(EagerTensor(np.asarray(total, plan.loss.dtype.np_dtype), plan.loss.dtype), pl, (B,) * pl.ndim)

    def forward_backward(self, *batch):
        """One step on the batch arguments of ``fn`` (each split into the micro-batches): (the whole
        batch's loss, each variable's gradient summed over the micro-batches — None where it has
        none —, the variables ``fn`` trains)."""
        from tensorweave.distribute.global_tensor import GlobalTensor
        mbs, weights, values = self._run(batch, backward=True)
        first = mbs[0][1]
        grads = []
        for j, v in enumerate(first.variables):
            acc = None
            for (_, plan), vals in zip(mbs, values):     # micro-batch order: the same bits every run
                gt = plan.grads[j]
                if gt is None:
                    continue
                lay, pieces = vals[id(gt)]
                if acc is not None and acc[0] == lay and not is_remote(pieces):
                    acc = (lay, [a + b for a, b in zip(acc[1], pieces)])
                elif acc is None:
                    acc = (lay, list(pieces) if is_remote(pieces) else [np.array(p, copy=True) for p in pieces])
                else:             # on Ray workers, or planned in another layout: added as global tensors
                    g = _global(acc, gt) + _global((lay, pieces), gt)
                    acc = ((g.placement, g.sbp), list(g._pieces))
            grads.append(None if acc is None else GlobalTensor(acc[1], acc[0][0], acc[0][1],
                                                                tuple(v.shape.as_list()), v.dtype))
        return self._loss_value(mbs, weights, values), grads, list(first.variables)

    def train_step(self, *batch, optimizer=None):
        """One step: the micro-batches' summed gradients applied with ``optimizer`` (a keyword, or
        the last argument as in the stage pipeline's ``train_step(x, y, optimizer)``); returns the
        loss."""
        if optimizer is None and batch and hasattr(batch[-1], "apply_gradients"):
            batch, optimizer = batch[:-1], batch[-1]
        if optimizer is None:
            raise TypeError("pipeline: train_step(*batch, optimizer=...) needs an optimizer")
        loss, grads, variables = self.forward_backward(*batch)
        optimizer.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None])
        return loss

    def __call__(self, *batch):
        """The whole batch's loss, the micro-batches' forwards only (the schedule's ``F`` actions)."""
        return self._loss_value(*self._run(batch, backward=False))

    def explain(self, *batch):
        """:func:`tw.distribute.explain` of the pipeline: a micro-batch's forward and backward
        segments, their transfers, and the schedule with its bubble fraction."""
        from tensorweave.distribute.explain import explain_pipeline
        mbs, _ = self._plan(batch)
        plan = mbs[0][1]
        info = {"micro_batches": self.micro_batches, "schedule": self.schedule_name,
                "stages": [list(p.ranks) for p in self.placements], "bubble_fraction": bubble_fraction(self.schedule),
                "peak_activations": self.peak_activations, "grid": self.format_schedule(),
                "forward_segments": [len(f) for f in plan.forward], "backward_segments": [len(b) for b in plan.backward]}
        segments = [seg for f in plan.forward for seg in f] + [seg for b in reversed(plan.backward) for seg in b]
        return explain_pipeline(self.fn._name, plan.mpf, segments, info)

    def __repr__(self):
        stages = "?" if self.placements is None else len(self.placements)
        return (f"<PlannedPipeline '{self.fn._name}': {stages} stages, {self.micro_batches} micro-batches, "
                f"{self.schedule_name}>")


def _global(acc, t):
    from tensorweave.distribute.global_tensor import GlobalTensor
    (pl, nd), pieces = acc
    return GlobalTensor(pieces, pl, nd, tuple(t.shape.as_list()), t.dtype)


def _loss(loss):
    if isinstance(loss, (str, dict)):
        from tensorweave.keras import losses
        return losses.get(loss)
    return loss
