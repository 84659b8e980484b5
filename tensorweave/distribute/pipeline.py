"""Pipeline parallelism: stages on disjoint placements, micro-batches, GPipe and 1F1B schedules.

``tw.distribute.pipeline(stages, micro_batches=k, schedule="1f1b", loss=fn)`` takes the
stages as ``(callable, placement)`` pairs (a Keras layer or model, a list of layers such as
``model.layers[:2]``, a ``tw.Module``, any function of one tensor; ``loss`` a function, a Keras
loss or its name); a stage's variables live on its placement (local ones are made
global there, replicated, with ``to_global``; Keras layers built by the first call get
their weights there). A step splits the batch into ``k`` micro-batches (balanced, along
axis 0) and runs the **schedule**, which is data: a list of :class:`Action`
``(time, stage, micro_batch, kind)`` with kind ``"F"`` (forward) or ``"B"`` (backward),
one time slot each. Activations go to the next stage and gradients come back by boxing
between the placements (recorded on the tapes, so the backward boxing is the forward's
dual); each stage's variable gradients are summed over the micro-batches, each
micro-batch's loss weighted by its share of the batch, so the step's loss and gradients
are those of the whole batch (for a loss that averages over its batch, as Keras losses do).

The schedules themselves are in ``pipeline_schedule.py``.

- ``"gpipe"`` (GPipe): every stage runs all forwards, then all backwards; a stage keeps
  the activations of all ``k`` micro-batches.
- ``"1f1b"`` (PipeDream-flush, Megatron's default): stage ``s`` runs ``p - s - 1`` warm-up
  forwards, then alternates one forward and one backward (steady state), then the
  remaining backwards (cool-down); it keeps at most ``p - s`` micro-batches' activations.

Both take ``2 (k + p - 1)`` slots for ``2 k`` actions per stage, so the idle share,
``bubble_fraction``, is ``(p - 1) / (k + p - 1)``; it is computed from the schedule itself.

``"interleaved_1f1b"`` (Megatron's virtual stages): the stages are listed in model order,
cycling through ``p`` placements (stage ``c`` on that of stage ``c % p``), so each device holds
``v`` model chunks; the bubble is ``(p - 1) / (v k + p - 1)``, ``v`` times smaller.

The stages run at the same time (``concurrent=True``, the default): one controller thread per
device walks that device's actions in schedule order and waits only for the hand-offs it needs
(an activation from the previous stage, a gradient from the next), and ``World.run`` locks per
rank, so stage 0's forward of micro-batch ``k + 1`` overlaps stage 1's work on ``k``. Each
stage's gradient sums are kept per stage and added in stage order, so the results are the
same bits as with ``concurrent=False`` (every action on the caller's thread, in time order).

Random draws in a stage (dropout, ``tw.random.*`` with an op seed or under the global seed) give
one device's values: each micro-batch's forward takes its rows of the draw the unpipelined step
makes for the whole batch, and the streams go on as one device's (``pipeline_random.py``; each
device's controller keeps the step's ``MicroBatchDraws``). ``measured_idle_fraction`` is the
bubble as it happened: ``1 - sum(busy) / (devices x seconds)``, waits for hand-offs not busy.

After ``tw.distribute.connect(num_workers=N)`` the placements are Ray worker processes and a
step runs there (``distribute/ray/pipeline.py``): each worker gets its stages once (their
variables are its own shards), then one call per worker and step carries its actions of the
schedule (and, with ``train_step``, the optimizer's update of its shards); activations and
gradients go worker to worker. ``last_step`` gives the step's wall
time (and on Ray each worker's busy and waiting seconds).

>>> import numpy as np, tensorweave as tw
>>> s0 = tw.placement("cpu", ranks=[0]); s1 = tw.placement("cpu", ranks=[1])
>>> pipe = tw.distribute.pipeline([(tw.nn.relu, s0), (tw.negative, s1)], micro_batches=4, schedule="1f1b")
>>> print(pipe.format_schedule())
stage 0: F0 F1 .. B0 F2 B1 F3 B2 .. B3
stage 1: .. F0 B0 F1 B1 F2 B2 F3 B3 ..
>>> pipe.bubble_fraction, pipe.peak_activations
(0.2, [2, 1])
>>> pipe(np.array([[-1.0], [2.0], [3.0], [-4.0]], np.float32)).numpy().ravel().tolist()
[-0.0, -2.0, -3.0, -0.0]
"""
import contextlib
import threading
import time

import numpy as np

from tensorweave.core import errors
from tensorweave.core.sbp import B, Partial, S
from tensorweave.distribute.layout import Placement, balanced_bounds
from tensorweave.distribute.pipeline_schedule import (SCHEDULES, Action, bubble_fraction, format_schedule,
                                                      interleaved_orders, make_schedule, peak_activations,
                                                      stage_orders)


def _batch_sbp(placement, rank):
    """A micro-batch's layout on a stage: split along axis 0 over the first mesh axis (data
    parallel inside the stage), B over the others; scalars B."""
    return tuple(S(0) if axis == 0 and rank > 0 else B for axis in range(placement.ndim))


def _grad_layout(nd):
    """A layout for the gradient of a tensor laid out as ``nd`` (a partial value's gradient is B)."""
    return tuple(B if isinstance(s, Partial) else s for s in nd)


class Pipeline:
    """Stages on placements run micro-batch by micro-batch in a schedule; see the module docstring."""

    def __init__(self, stages, micro_batches=1, schedule="1f1b", loss=None, concurrent=True):
        stages = list(stages)
        if not stages:
            raise ValueError("pipeline: no stages")
        self.stages, self.placements = [], []
        for i, st in enumerate(stages):
            if isinstance(st, (tuple, list)) and len(st) == 2 and isinstance(st[0], (list, tuple)) and st[0] and all(
                    callable(f) for f in st[0]):
                st = (_Chain(st[0]), st[1])            # a list of layers: applied in order
            if not (isinstance(st, (tuple, list)) and len(st) == 2 and callable(st[0])):
                raise TypeError(f"pipeline: stage {i} must be a (callable, placement) pair, got {st!r}")
            fn, placement = st
            if not isinstance(placement, Placement):
                raise TypeError(f"pipeline: stage {i}'s placement must be tw.placement(type, ranks), got {placement!r}")
            self.stages.append(fn)
            self.placements.append(placement)
        devices = len(self.placements)
        virtual = 1
        if schedule == "interleaved_1f1b":      # stage c on the device of stage c % p
            devices = len(dict.fromkeys(self.placements))
            virtual = len(self.placements) // devices
            wrong = [c for c, pl in enumerate(self.placements) if pl != self.placements[c % devices]]
            if len(self.placements) % devices or wrong:
                raise ValueError(
                    f"pipeline: interleaved_1f1b puts stage c on the placement of stage c % p (p = {devices} "
                    f"placements, each holding the same number of stages); got {len(self.placements)} stages on "
                    f"{[list(pl.ranks) for pl in self.placements]}. Hint: list the stages in model order, "
                    "cycling through the placements")
        for i in range(devices):
            for j in range(i):
                shared = sorted(set(self.placements[i].ranks) & set(self.placements[j].ranks))
                if shared:
                    raise ValueError(f"pipeline: stages {j} and {i} share ranks {shared} ({self.placements[j]!r} "
                                     f"and {self.placements[i]!r}); a pipeline's stages need disjoint placements")
        self.micro_batches = int(micro_batches)
        self.schedule_name = schedule
        self.virtual_stages = virtual
        self.concurrent = bool(concurrent)
        self.schedule = make_schedule(devices, self.micro_batches, schedule, virtual_stages=virtual)
        if isinstance(loss, (str, dict)):
            from tensorweave.keras import losses
            loss = losses.get(loss)
        self.loss = loss
        self.held_activations = None
        # why this pipeline's steps on Ray are walked op by op by the driver although its stages
        # looked plannable (``ray/pipeline_tp.Unplannable``); None: the workers run them
        self.walked_because = None
        self._ray = None        # the Ray side (distribute/ray/pipeline.py), made by the first step on workers
        self._last_seconds = None
        self._last_busy = None  # per device, the last step's seconds running actions (hand-off waits excluded)
        for fn, placement in zip(self.stages, self.placements):
            _place_stage(fn, placement)

    # ---- the schedule's figures --------------------------------------------------------------
    @property
    def bubble_fraction(self):
        """Idle share of the stages' slots in this schedule: (p - 1) / (k + p - 1)."""
        return bubble_fraction(self.schedule)

    @property
    def peak_activations(self):
        """Per stage, the most micro-batches whose activations it holds at once (from the
        schedule; the last step's measured counts are ``held_activations``)."""
        return peak_activations(self.schedule)

    def format_schedule(self):
        return format_schedule(self.schedule)

    @property
    def last_step(self):
        """The last step's measurements: ``{"seconds": wall time, "busy_s": per device the seconds
        it ran actions (waits for hand-offs excluded), "measured_idle_fraction"}``; on Ray workers
        instead, per worker rank, ``{"busy_s", "wait_s" (waiting for hand-offs), "held" (most
        tapes held)}`` and the measured idle fraction over the workers. None before the first step."""
        if self._ray is not None and self._ray.last_step is not None:
            return self._ray.last_step
        if self._last_seconds is None:
            return None
        busy = [self._last_busy.get(d, 0.0) for d in range(1 + max(a.on for a in self.schedule))]
        return {"seconds": self._last_seconds, "busy_s": busy,
                "measured_idle_fraction": idle_fraction(busy, self._last_seconds)}

    @property
    def measured_idle_fraction(self):
        """The bubble as it happened in the last step: ``1 - sum(busy) / (devices x seconds)``,
        each device's (Ray: worker's) busy seconds without its waits for hand-offs — the
        schedule's ``bubble_fraction`` plus hand-off and imbalance costs. None before a step."""
        last = self.last_step
        return None if last is None else last["measured_idle_fraction"]

    @property
    def trainable_variables(self):
        out, seen = [], set()
        for fn in self.stages:
            for v in getattr(fn, "trainable_variables", ()):
                if id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
        return out

    # ---- running --------------------------------------------------------------------------------
    def _micro_batches(self, value, stage, what):
        a = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
        if a.ndim == 0:
            raise ValueError(f"pipeline: {what} must have a batch axis, got a scalar")
        if a.shape[0] < self.micro_batches:
            raise ValueError(f"pipeline: {what} of shape {list(a.shape)} has {a.shape[0]} rows for "
                             f"{self.micro_batches} micro-batches. Hint: micro_batches <= batch size")
        from tensorweave.core.convert import convert_to_tensor
        placement = self.placements[stage]
        pieces = [a[lo:hi] for lo, hi in balanced_bounds(a.shape[0], self.micro_batches)]
        return [convert_to_tensor(p).to_global(placement=placement, sbp=_batch_sbp(placement, p.ndim))
                for p in pieces], [len(p) / a.shape[0] for p in pieces]

    def _forward(self, stage, x, tape):
        from tensorweave.distribute.model_global import _PlacementDistribution
        placement = self.placements[stage]
        if stage:
            if tape is not None:
                tape.watch(x)
            x = x.to_global(placement=placement, sbp=_batch_sbp(placement, x.shape.rank))
        with _PlacementDistribution(placement, None).scope(), stage_training(tape is not None or None):
            out = self.stages[stage](x)
        if not getattr(out, "is_global", False) or out.placement != placement:
            got = f"a global tensor on {out.placement!r}" if getattr(out, "is_global", False) else type(out).__name__
            raise errors.InvalidArgumentError(
                f"pipeline: stage {stage} returned {got}, not a tensor on its placement {placement!r}. "
                "Hint: a stage is a function of one tensor returning one tensor")
        return out

    def _forward_action(self, a, step, xs, ys, weights, tape_on=True):
        """Action ``a`` = F(stage, micro-batch): the stage's forward under its own tape (its input
        taken from the previous stage's hand-off), the output handed to the next stage."""
        import tensorweave as tw
        s, m, last = a.stage, a.micro_batch, len(self.stages) - 1
        inp = xs[m] if s == 0 else step.take((s - 1, m, "F"))
        # the stage's draws: this micro-batch's rows of one device's whole-batch draw (pipeline_random)
        draws = step.draws_in(a.on, s, m, None if s == 0 else step.take((s - 1, m, "R")))
        if not tape_on:
            with draws:
                out = self._forward(s, inp, None)
        else:
            with tw.GradientTape() as tape:
                with draws:
                    out = self._forward(s, inp, tape)
                if s == last:
                    out = self.loss(ys[m], out)
                    if out.shape.rank:      # per-example losses ("mse"): their mean, as Keras reduces
                        out = tw.reduce_mean(out)
                    out = tw.cast(out, tw.float32) * weights[m]
            step.saved[s][m] = (tape, inp, out)
            step.held[s] = max(step.held[s], len(step.saved[s]))
        if s == last:
            step.outputs.append(out)
        else:
            step.put((s, m, "R"), step.draws[a.on].outgoing(s))
            step.put((s, m, "F"), out)

    def _backward_action(self, a, step):
        """Action ``a`` = B(stage, micro-batch): the stage's tape differentiated, seeded with the
        gradient the next stage handed back (the last stage: its loss); the input's gradient
        boxed back to the previous stage's placement and handed to it; the variables' added to
        this stage's sums."""
        import tensorweave as tw
        s, m, last = a.stage, a.micro_batch, len(self.stages) - 1
        tape, inp, out = step.saved[s].pop(m)
        variables = list(tape.watched_variables())
        sources = ([inp] if s else []) + variables
        seed = None if s == last else [step.take((s + 1, m, "B"))]
        grads = tape.gradient(out, sources, output_gradients=seed)
        if s:
            g_in = grads[0]
            if g_in is None:        # the stage ignores its input (or it is not differentiable)
                g_in = tw.zeros_like(inp)
            step.put((s, m, "B"), g_in.to_global(placement=inp.placement, sbp=_grad_layout(inp.sbp)))
            grads = grads[1:]
        acc, order = step.acc[s], step.order[s]
        for v, g in zip(variables, grads):
            if g is None:
                continue
            g = tw.convert_to_tensor(g)
            if id(v) in acc:
                acc[id(v)] = acc[id(v)] + g
            else:
                acc[id(v)] = g
                order.append(v)

    def _drive(self, actions, run, step):
        """Runs ``run(a)`` for every action: with ``concurrent``, one controller thread per
        device walks that device's actions in time order (a hand-off it needs waits for the
        stage producing it), so stages on disjoint ranks compute at the same time; otherwise
        all in the schedule's order on this thread."""
        devices = sorted({a.on for a in actions})
        busy = self._last_busy = {}
        inner = run

        def run(a):             # the action's seconds, less those its thread waited in step.take
            t, waited = time.perf_counter(), step.waited()
            inner(a)
            busy[a.on] = busy.get(a.on, 0.0) + time.perf_counter() - t - (step.waited() - waited)
        if not self.concurrent or len(devices) == 1:
            for a in actions:
                run(a)
            return
        step_error = []
        lock = threading.Lock()

        def device_loop(d):
            try:
                for a in actions:
                    if a.on == d:
                        run(a)
            except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread below
                with lock:
                    step_error.append(e)
                step.fail(e)

        threads = [threading.Thread(target=device_loop, args=(d,), name=f"tw-pipeline-device{d}", daemon=True)
                   for d in devices]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if step_error:      # the first real failure (the other devices were only cancelled by it)
            raise next((e for e in step_error if not isinstance(e, _Cancelled)), step_error[0])

    def forward_backward(self, x, y):
        """Runs one step's schedule on batch ``x`` and targets ``y`` (arrays or tensors, one
        each): returns (loss, gradients, variables) — the whole batch's loss on the last stage,
        and each variable's gradient summed over the micro-batches (None where it got none), in
        the order of :attr:`trainable_variables` then any other variable a stage's tape watched."""
        if self.loss is None:
            raise ValueError("pipeline: training needs loss=fn(y_true, y_pred)")
        done = _ray_run(self, lambda on_ray: on_ray.step(x, y))
        if done is not _WALK:
            return done
        last = len(self.stages) - 1
        t0 = time.perf_counter()
        xs, weights = self._micro_batches(x, 0, "x")
        ys, _ = self._micro_batches(y, last, "y")
        step = _Step(len(self.stages), [int(p.shape[0]) for p in xs])
        self._drive(self.schedule, lambda a: (self._forward_action(a, step, xs, ys, weights) if a.kind == "F"
                                               else self._backward_action(a, step)), step)
        step.finish_draws(last)
        self._last_seconds = time.perf_counter() - t0
        self.held_activations = step.held
        total = None
        for out in step.outputs:
            total = out if total is None else total + out
        acc, order = {}, []
        for s in range(len(self.stages)):       # stage order: the same sums whichever thread ran first
            for v in step.order[s]:
                g = step.acc[s][id(v)]
                if id(v) in acc:
                    acc[id(v)] = acc[id(v)] + g
                else:
                    acc[id(v)] = g
                    order.append(v)
        known = {id(v) for v in self.trainable_variables}
        variables = self.trainable_variables + [v for v in order if id(v) not in known]
        return total, [acc.get(id(v)) for v in variables], variables

    def train_step(self, x, y, optimizer):
        """One step: the schedule's gradients applied with ``optimizer``; returns the loss. On Ray
        workers the update runs there, in the step's one call per worker."""
        if self.loss is None:
            raise ValueError("pipeline: training needs loss=fn(y_true, y_pred)")
        done = _ray_run(self, lambda on_ray: on_ray.train_step(x, y, optimizer))
        if done is not _WALK:
            return done
        loss, grads, variables = self.forward_backward(x, y)
        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        if optimizer.global_clipnorm and optimizer.global_clipnorm > 0 and len(
                {getattr(g, "placement", None) for g, _ in pairs}) > 1:
            with _clipped_across_placements(optimizer, pairs) as pairs:
                optimizer.apply_gradients(pairs)
        else:
            optimizer.apply_gradients(pairs)
        return loss

    def __call__(self, x):
        """Inference: every micro-batch through every stage (the schedule's forwards only); the
        outputs, concatenated on the last stage's placement."""
        import tensorweave as tw
        done = _ray_run(self, lambda on_ray: on_ray.step(x, train=False))
        if done is not _WALK:
            return done
        t0 = time.perf_counter()
        xs, _ = self._micro_batches(x, 0, "x")
        step = _Step(len(self.stages), [int(p.shape[0]) for p in xs])
        self._drive([a for a in self.schedule if a.kind == "F"],
                    lambda a: self._forward_action(a, step, xs, None, None, tape_on=False), step)
        step.finish_draws(len(self.stages) - 1)
        self._last_seconds = time.perf_counter() - t0
        return tw.concat(step.outputs, axis=0)

    def __repr__(self):
        return (f"<Pipeline {len(self.stages)} stages, {self.micro_batches} micro-batches, {self.schedule_name}, "
                f"bubble {self.bubble_fraction:.3f}>")


def idle_fraction(busy, seconds):
    """``1 - sum(busy) / (len(busy) x seconds)`` (0 when nothing was timed), at least 0.

    >>> idle_fraction([3.0, 1.0], 4.0)
    0.5
    """
    total = len(busy) * seconds
    return max(0.0, 1.0 - sum(busy) / total) if total > 0 else 0.0


def _on_ray(pipe):
    """The pipeline's Ray runner when its placements are a connected cluster's workers, else None."""
    from tensorweave.distribute.ray import cluster
    if cluster.current() is None:
        return None
    from tensorweave.distribute.ray.pipeline import ray_pipeline
    return ray_pipeline(pipe)


_WALK = object()


def _ray_run(pipe, call):
    """``call(the pipeline's Ray runner)`` when its stages run on Ray workers; ``_WALK`` when the
    driver walks the schedule instead (in-process ranks; a stage the workers cannot run: then
    ``pipe.walked_because`` says why, and later steps walk at once)."""
    on_ray = _on_ray(pipe)
    if on_ray is None:
        return _WALK
    from tensorweave.distribute.ray.pipeline_tp import Unplannable
    try:
        return call(on_ray)
    except Unplannable as e:
        pipe.walked_because = str(e)
        return _WALK


@contextlib.contextmanager
def stage_training(training):
    """Keras layers of a stage called as ``fn(x)`` see ``training`` as their flag's default (as
    Keras' train step calls ``model(x, training=True)``: ``Dropout`` is on while training)."""
    from tensorweave.keras.engine.layer import _call_ctx
    outer = _call_ctx.training
    _call_ctx.training = training
    try:
        yield
    finally:
        _call_ctx.training = outer


@contextlib.contextmanager
def _clipped_across_placements(optimizer, pairs):
    """``global_clipnorm`` over gradients on several placements (one op cannot read them all):
    each gradient's squared sum on its own placement, added here, and every gradient scaled by
    ``clip / max(norm, clip)`` — ``clip_by_global_norm`` — while the optimizer's own global clip
    is off (the norm of what it sees: divided by ``loss_scale_factor``)."""
    import tensorweave as tw
    clip = float(optimizer.global_clipnorm)
    squares = sum(float(np.asarray(tw.reduce_sum(tw.square(tw.convert_to_tensor(g))).numpy(), np.float64))
                  for g, _ in pairs)
    norm = float(np.sqrt(squares)) / (optimizer.loss_scale_factor or 1.0)
    scale = np.float32(clip / max(norm, clip))
    optimizer.global_clipnorm = None
    try:
        yield [(g * tw.cast(scale, g.dtype), v) for g, v in pairs]
    finally:
        optimizer.global_clipnorm = clip


class _Cancelled(Exception):
    """A device's controller stopped because another device's failed (never reaches the user)."""


class _Step:
    """One step's state shared by the devices' controller threads: hand-offs between stages
    (activations forward, gradients back), each stage's saved tapes, gradient sums, and the
    last stage's outputs; ``take`` waits for a hand-off (or another device's failure)."""

    def __init__(self, stages, rows=()):
        self.rows = list(rows)                       # per micro-batch, its rows of the batch
        self.draws = {}                              # per device, its MicroBatchDraws (pipeline_random)
        self.cond = threading.Condition()
        self._local = threading.local()      # per controller thread: seconds waited for hand-offs
        self.ready = {}                 # (stage, micro-batch, kind) -> what that action handed on
        self.error = None
        self.saved = [{} for _ in range(stages)]     # per stage: micro-batch -> (tape, input, output)
        self.held = [0] * stages                     # per stage: the most tapes held at once
        self.acc = [{} for _ in range(stages)]       # per stage: id(variable) -> gradient sum
        self.order = [[] for _ in range(stages)]
        self.outputs = []                            # the last stage's, in its order

    def draws_in(self, device, stage, m, came):
        """The context of ``stage``'s forward of micro-batch ``m`` on ``device``'s thread: its
        eager draws are its rows of one device's whole-batch draws, their streams continued from
        ``came`` (the previous stage's hand-off message) as one device's (``MicroBatchDraws``)."""
        from tensorweave.distribute.pipeline_random import MicroBatchDraws
        with self.cond:
            if not self.draws:              # the step's first forward: the rule-2 counter it starts from
                from tensorweave.ops.random_ops import current_state
                self.state = current_state()
                self.base = self.state.counter
            draws = self.draws.get(device)
            if draws is None:
                draws = self.draws[device] = MicroBatchDraws(sum(self.rows), self.base)
        return draws.micro_batch(stage, sum(self.rows[:m]), self.rows[m], came)

    def finish_draws(self, last):
        """After the step: every stream where one device's step leaves it, the rule-2 counter
        moved by the forward's unseeded draws (the per-micro-batch calls moved it more)."""
        from tensorweave.distribute.pipeline_random import driver_after_step
        if not self.draws:
            return
        report = None
        for draws in self.draws.values():
            draws.finish()
            report = draws.report(last) or report
        with self.state.lock:
            self.state.counter = self.base
        driver_after_step(self.state, report)

    def put(self, key, value):
        with self.cond:
            self.ready[key] = value
            self.cond.notify_all()

    def take(self, key):
        t = time.perf_counter()
        try:
            with self.cond:
                while key not in self.ready:
                    if self.error is not None:
                        raise _Cancelled(f"pipeline: stopped waiting for {key}: {self.error!r}")
                    self.cond.wait()
                return self.ready.pop(key)
        finally:
            self._local.waited = self.waited() + time.perf_counter() - t

    def waited(self):
        """Seconds the calling thread has spent in :meth:`take` this step."""
        return getattr(self._local, "waited", 0.0)

    def fail(self, error):
        with self.cond:
            if self.error is None:
                self.error = error
            self.cond.notify_all()


class _Chain:
    """A stage given as a list of layers (``model.layers[:2]``): applied in order."""

    def __init__(self, layers):
        self.layers = list(layers)

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def _collect(self, attr):
        out, seen = [], set()
        for layer in self.layers:
            for v in getattr(layer, attr, ()):
                if id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
        return out

    @property
    def variables(self):
        return self._collect("variables")

    @property
    def trainable_variables(self):
        return self._collect("trainable_variables")

    @property
    def built(self):
        return all(getattr(layer, "built", True) for layer in self.layers)

    def to_global(self, placement, sbp):
        for layer in self.layers:
            if getattr(layer, "built", True) and getattr(layer, "variables", None):
                layer.to_global(placement, sbp)


def _place_stage(fn, placement):
    """A stage's variables on its placement: local ones made global (replicated)."""
    variables = getattr(fn, "variables", None)
    if variables is None or callable(variables):
        return
    if any(not getattr(v, "is_global", False) for v in variables):
        if getattr(fn, "built", True) is False:
            return          # a Keras layer built by its first call, inside the stage's scope
        fn.to_global(placement, B)
    wrong = [v.name for v in variables if v.placement != placement]
    if wrong:
        raise ValueError(f"pipeline: stage on {placement!r} has variables {wrong[:3]} on another placement. "
                         "Hint: each stage's variables live on its own placement")


def pipeline(stages, micro_batches=1, schedule="1f1b", loss=None, concurrent=True):
    """A :class:`Pipeline` of ``stages`` (``(callable, placement)`` pairs on disjoint placements;
    with ``"interleaved_1f1b"`` the placements repeat: stage ``c`` on that of stage ``c % p``)
    run in ``micro_batches`` micro-batches by ``schedule`` (``"1f1b"``, ``"gpipe"`` or
    ``"interleaved_1f1b"``), trained with ``loss(y_true, y_pred)``. ``concurrent``: one
    controller thread per device, so stages compute at the same time (False: one after the
    other on the caller's thread, in the schedule's order; the results are the same).

    ``stages`` may instead be one function of the batch returning the loss whose layers live on
    several placements (a planned function cut into segments): its micro-batches run through
    its segments by the schedule (``plan_pipeline.PlannedPipeline``)."""
    if callable(stages) and not isinstance(stages, (list, tuple)):
        from tensorweave.distribute.plan_pipeline import PlannedPipeline
        return PlannedPipeline(stages, micro_batches=micro_batches, schedule=schedule, loss=loss,
                               concurrent=concurrent)
    return Pipeline(stages, micro_batches=micro_batches, schedule=schedule, loss=loss, concurrent=concurrent)


__all__ = ["Action", "Pipeline", "pipeline", "make_schedule", "stage_orders", "interleaved_orders", "bubble_fraction",
           "peak_activations", "format_schedule"]
