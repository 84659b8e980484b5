"""Tensor-parallel pipeline stages on Ray workers at one call per worker per step: the driver's side.

A stage whose variables are split over its workers (Megatron's column-then-row pair: a kernel
``S(1)``, its bias ``S(0)``, the next kernel ``S(0)``) cannot run as the data-parallel stages do
(each worker its rows, eagerly): its ops need collectives between its workers. Here each such
stage is planned as ``tw.function`` s over its placement, once per micro-batch input shape, and
the plans are bound on the stage's workers as :class:`~tensorweave.distribute.ray.plans.RayRankPlans`
binds a planned step (``plans.rank_doc`` / ``plans.bind_plan``); the step's one call per worker
(``pipeline_worker.w_step``) then runs them with ``executor.run_plan``, their collectives on the
stage's group:

- ``forward(x) -> out`` (``x`` and ``out`` replicated, ``B``): a stage's forward in training
  and inference (the last stage in inference: its outputs);
- ``backward(x, g) -> (g_x, g_v...)``: the forward recomputed under a tape (no tape crosses
  calls: the worker keeps only ``x``), seeded with ``g``, the gradient of ``out``; ``g_x`` boxed
  to ``B`` (stage 0: none), each variable's gradient boxed to the variable's own SBP (each worker
  gets its shard's whole gradient: no all-reduce in the update);
- the last stage in training, one function ``(x, y, w) -> (loss, g_x, g_v...)``: the weighted
  loss (``w`` = the micro-batch's share of the batch) and its gradients at once, run at the
  stage's forward action; its backward action only hands ``g_x`` on.

Hand-offs treat the stage as one wide slice: every worker of it receives the whole micro-batch
(and the whole gradient of its output); only its first worker sends (its ``B`` values agree).

**Shapes without a walked step** (the stages' input shapes per micro-batch row count): a
stage's input shape is the previous stage's output shape, found by tracing: the tensor-parallel
stages' forwards are traced anyway, the other stages before a tensor-parallel one are traced into
a throw-away graph (shapes only, never run). Tracing makes no draw, and the driver's random state
(rule-2 counter, restored stream positions, graph streams) is saved and restored around it, so
what a later draw gives is unchanged (``tests/test_ray14_tp_pipeline.py``).

**Random draws in a tensor-parallel stage** (dropout, ``tw.random.*``; session 15): the logical
value of a draw must be one device's, the micro-batch's rows of the whole batch's draw, and the
op's stream must go on as one device's across micro-batches, stages and steps — what
``pipeline_random.MicroBatchDraws`` does for eager stages. So a stage's draws are not planned
ops: the first trace records each one (``random_ops.graph_draw_hook``, :class:`_Draws`: op,
shape, dtype, op seed), a second trace takes it as an argument after the function's own; at
the step every worker of the stage makes that eager draw inside the micro-batch's
``MicroBatchDraws`` (``pipeline_tp_worker.redraw``) — the same values on each, from the stream
positions and rule-2 count the step and the hand-off carry — and feeds it to the forward, and
the same values again to the backward that recomputes the forward (one mask for both). A draw
without any seed (a Keras ``Dropout`` with no seed and no global seed: TF's rule 1, fresh values
per call) cannot come from each worker's OS entropy — the stage's workers would hold different
values of one replicated tensor — so the driver sends each step a fresh 63-bit entropy
(``pipeline_random.step_entropy``) and every worker of the stage draws micro-batch ``m``'s
``k``-th such draw from the stream keyed ``(entropy, stage, m, k)``: one value on the stage's
workers, a new one per step, micro-batch and draw, as one device's unseeded draws are.
Interleaved 1F1B (a worker holding several virtual stages, tensor-parallel ones too) runs as
well: actions, hand-offs and plans are per stage.

Where this does not apply (:func:`tp_stages` is None, or :class:`Unplannable` at the first
step), the driver walks the schedule op by op (``pipeline.py``): a stage on an N-D mesh, a
partial (``P``) variable, a tensor-parallel stage with a draw that reads the stage's values
(``categorical``, ``shuffle``, a shape computed in the stage), one that updates a variable in its forward (a batch norm's moving statistics: forward and
backward would both update), closes over the driver's local variables, spans several
placements, or cannot be traced.

>>> from tensorweave.core.sbp import P, S
>>> _kind([(B,), (S(1),)]), _kind([(B,)]), _kind([(P,)])
('tp', 'rows', None)
"""
import contextlib

import numpy as np

from tensorweave.core.sbp import B, Broadcast, Partial

_RANDOM = ("Multinomial", "TruncatedNormal", "ParameterizedTruncatedNormal")
_READS = frozenset({"ReadVariableOp", "VarHandleOp", "VariableShape"})


class Unplannable(Exception):
    """A tensor-parallel stage that cannot run as planned functions (the driver walks instead)."""


def _kind(sbps):
    """How a stage whose variables have ``sbps`` runs on its workers: ``"rows"`` (all ``B``: data
    parallel, eagerly), ``"tp"`` (some variable split: planned), None (a partial variable)."""
    if any(isinstance(sb, Partial) for nd in sbps for sb in nd):
        return None
    return "rows" if all(isinstance(sb, Broadcast) for nd in sbps for sb in nd) else "tp"


def tp_stages(pipe):
    """The indexes of ``pipe``'s tensor-parallel stages (a frozenset, maybe empty), or None when
    some stage can run neither way on the workers (an N-D mesh, a partial variable)."""
    tp = set()
    for s, (fn, placement) in enumerate(zip(pipe.stages, pipe.placements)):
        if placement.ndim != 1:
            return None
        kind = _kind([getattr(v, "sbp", (B,)) for v in getattr(fn, "variables", None) or ()])
        if kind is None:
            return None
        if kind == "tp":
            tp.add(s)
    return frozenset(tp)


@contextlib.contextmanager
def _random_state_kept():
    """The driver's random state as it was before (tracing a stage must not move it)."""
    from tensorweave.ops.random_ops import current_state
    st = current_state()
    saved = (st.counter, dict(st.pending_graph), list(st.graph_states))
    try:
        yield
    finally:
        st.counter, st.pending_graph, st.graph_states = saved[0], saved[1], saved[2]


def _stage_call(pipe, s, train):
    """``x -> stage s's output`` as the walked path calls it (the placement's scope, Keras' flag)."""
    from tensorweave.distribute.model_global import _PlacementDistribution
    from tensorweave.distribute.pipeline import stage_training
    fn, placement = pipe.stages[s], pipe.placements[s]

    def call(x):
        with _PlacementDistribution(placement, None).scope(), stage_training(True if train else None):
            return fn(x)
    return call


def _spec(placement, shape, dtype):
    """A replicated global tensor of ``shape`` standing for a traced argument (no values)."""
    from tensorweave.distribute.global_tensor import GlobalTensor
    return GlobalTensor([None] * placement.size, placement, (B,) * placement.ndim, shape, dtype)


def output_shape(pipe, s, shape, dtype):
    """Stage ``s``'s output shape and dtype for an input of ``shape``/``dtype``, by tracing it
    into a graph that is never run (a stage that is not tensor-parallel)."""
    from tensorweave.core.graph import FuncGraph
    from tensorweave.ops.array_ops import placeholder
    graph = FuncGraph(f"pipeline_stage{s}_shape")
    with _random_state_kept(), graph.as_default():
        out = _stage_call(pipe, s, True)(placeholder(dtype, shape, name="x"))
    if out.shape.rank is None or not out.shape.is_fully_defined():
        raise Unplannable(f"stage {s}'s output shape {out.shape} is not known from its input's {list(shape)}")
    return tuple(out.shape.as_list()), out.dtype


_FED = ("RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt")


class _Draws:
    """While a tensor-parallel stage is traced (``random_ops.graph_draw_hook``): records each
    draw of the stage (op, constant inputs, attributes, dtype, op seed: what a worker needs to
    make the same eager draw, :func:`pipeline_tp_worker.redraw`) and, given the traced
    function's draw arguments ``args``, returns the k-th one for the k-th draw instead of adding
    the op. A draw whose shape or bounds the stage computes, a categorical or a shuffle (their
    inputs are the stage's values) is left in the graph (:class:`StagePlan` refuses it). A draw
    without any seed is recorded as such (the record's last field): its workers draw it from the
    step's entropy the driver sends, not each from its own OS entropy, which would differ."""

    def __init__(self, args=None):
        self.records, self.args = [], args

    def __call__(self, opdef, inputs, attrs, name, dtype, op_seed):
        from tensorweave.core.graph import constant_value
        if opdef.name not in _FED:
            return None
        values = [constant_value(t) for t in inputs]
        if any(v is None for v in values):
            return None
        # no seed at all (TF's rule 1): drawn from the step's driver entropy, one value for the stage's workers
        record = (opdef.name, [np.asarray(v) for v in values],
                  {k: v.name for k, v in attrs.items() if k not in ("seed", "seed2")},
                  None if dtype is None else dtype.name, op_seed, attrs["seed"] is None)
        k = len(self.records)
        self.records.append(record)
        if self.args is None:
            return None
        if k >= len(self.args):
            raise Unplannable("its draws changed between two traces")
        return self.args[k]

    def specs(self, placement):
        """Replicated specs of the draws (the traced function's extra arguments)."""
        from tensorweave.core.dtypes import as_dtype
        return [_spec(placement, tuple(int(d) for d in values[0].reshape(-1)), as_dtype(dtype))
                for _, values, _, dtype, _, _ in self.records]


@contextlib.contextmanager
def _traced_draws(draws):
    """``draws`` (a :class:`_Draws`) sees every graph draw made on this thread inside."""
    from tensorweave.ops.random_ops import graph_draw_hook
    outer = getattr(graph_draw_hook, "hook", None)
    graph_draw_hook.hook = draws
    try:
        yield draws
    finally:
        graph_draw_hook.hook = outer


class StagePlan:
    """One planned function of a tensor-parallel stage: its concrete function, which of its
    variables get a gradient (``has_grad``, by position in the stage's variables), its output
    shape, its draws (``draws``: records a worker draws from, fed after the function's own
    arguments); shipped to the stage's workers by :meth:`docs`."""

    def __init__(self, cf, has_grad=(), draws=()):
        self.cf, self.has_grad, self.draws = cf, tuple(has_grad), list(draws)
        planned = getattr(cf, "_global", None)
        if planned is None or not hasattr(planned, "plan"):
            raise Unplannable("it spans several placements" if planned is not None else "it holds no global value")
        from tensorweave.core import dtypes
        for op in cf.graph.get_operations():
            if op.type.startswith("Random") or op.type in _RANDOM:
                raise Unplannable(f"it draws random numbers ('{op.name}' ({op.type}))")
            # forward and backward both run the stage: an update (a batch norm's moving mean) would run twice
            if op.opdef.stateful and op.type not in _READS and any(x.dtype is dtypes.resource for x in op.inputs):
                raise Unplannable(f"it updates a variable ('{op.name}' ({op.type}))")
        self.plan = planned.plan
        self.captures = list(planned.captures)      # kept alive: the workers read their pieces

    def docs(self, cluster):
        """Per worker of the stage, ``(spec text, arrays, resources, capture references)``."""
        from tensorweave.distribute.ray.pieces import _ref
        out = []
        for i, r in enumerate(self.plan.placement.ranks):
            local_vars = []
            from tensorweave.distribute.ray.plans import rank_doc
            doc = rank_doc(self.plan, i, cluster, local_vars, {})
            if local_vars:
                raise Unplannable(f"it uses the driver's local variable '{local_vars[0].name}'")
            caps = [_ref(c._pieces[i], r, cluster, "pipeline stage") if getattr(c, "is_global", False)
                    else (None, np.asarray(c._value)) for c in self.captures]
            out.append(doc + (caps,))
        return out


def trace(pipe, s, kind, shape, dtype, other=None):
    """The :class:`StagePlan` of tensor-parallel stage ``s`` for an input of ``shape``: ``kind``
    ``"forward"`` (training: Keras layers see ``training=True``), ``"infer"`` (the forward for
    inference), ``"backward"`` (``other = (shape, dtype)`` of ``g``, the forward's output) or
    ``"loss"`` (the last stage's training step; ``other`` that of the targets)."""
    import tensorweave as tw
    placement = pipe.placements[s]
    index = {id(v): j for j, v in enumerate(pipe.trainable_variables)}
    variables = [v for v in getattr(pipe.stages[s], "trainable_variables", ()) if id(v) in index]
    call = _stage_call(pipe, s, kind != "infer")
    rep = (B,) * placement.ndim
    has_grad = []

    def box(t, sbp=rep):
        return tw.convert_to_tensor(t).to_global(placement=placement, sbp=sbp)

    def gradients(tape, out, x, seed):
        grads = tape.gradient(out, ([x] if s else []) + variables, output_gradients=seed)
        result = []
        if s:
            result.append(box(grads[0] if grads[0] is not None else tw.zeros_like(x)))
            grads = grads[1:]
        has_grad[:] = [g is not None for g in grads]
        return result + [box(g, v.sbp) for g, v in zip(grads, variables) if g is not None]

    hooks = []          # the trace's _Draws (one per trace: a second trace feeds the draws)

    def forward(x, *draws):
        with _traced_draws(_Draws(draws or None)) as d:
            hooks.append(d)
            return box(call(x))

    def backward(x, g, *draws):
        with tw.GradientTape() as tape:
            if s:
                tape.watch(x)
            with _traced_draws(_Draws(draws or None)) as d:
                hooks.append(d)
                out = call(x)
        return gradients(tape, out, x, g)

    def loss(x, y, w, *draws):
        with tw.GradientTape() as tape:
            if s:
                tape.watch(x)
            with _traced_draws(_Draws(draws or None)) as d:
                hooks.append(d)
                out = pipe.loss(y, call(x))
            if out.shape.rank:          # per-example losses ("mse"): their mean, as Keras reduces
                out = tw.reduce_mean(out)
            out = tw.cast(out, tw.float32) * w
        return [box(out)] + gradients(tape, out, x, None)

    args = [_spec(placement, shape, dtype)]
    if kind in ("forward", "infer"):
        fn = forward
    elif kind == "backward":
        fn, args = backward, args + [_spec(placement, *other)]
    else:
        fn, args = loss, args + [_spec(placement, *other), _spec(placement, (), tw.float32)]
    try:
        with _random_state_kept():
            cf = tw.function(fn).get_concrete_function(*args)
            found = hooks[-1].records
            if found:       # again, each draw an argument its workers feed (one device's rows of it)
                cf = tw.function(fn).get_concrete_function(*args, *hooks[-1].specs(placement))
                if len(hooks[-1].records) != len(found):
                    raise Unplannable("its draws changed between two traces")
    except Unplannable:
        raise
    except Exception as e:  # noqa: BLE001 - any tracing failure: the driver walks this stage instead
        raise Unplannable(f"tracing it failed: {type(e).__name__}: {e}") from e
    return StagePlan(cf, has_grad, found)


class TPPlans:
    """The planned functions of a pipeline's tensor-parallel stages ``tp`` on one cluster: traced
    on the driver once per stage, kind and input shape (:meth:`for_step`), shipped to the stage's
    workers once (:meth:`ship`: one call per worker of the stages with new plans)."""

    def __init__(self, pipe, tp, cluster):
        self.pipe, self.tp, self.cluster = pipe, frozenset(tp), cluster
        self.traced = {}      # (stage, kind, input shape, dtype, targets) -> (name, StagePlan)
        self.pending = {}     # rank -> [(name, spec text, arrays, resources, captures)] not bound yet
        self.steps = {}       # a step's shapes -> what for_step returned for them

    def _plan(self, s, kind, shape, dtype, other=None):
        key = (s, kind, tuple(shape), dtype.name, other and (tuple(other[0]), other[1].name))
        hit = self.traced.get(key)
        if hit is None:
            try:
                plan = trace(self.pipe, s, kind, shape, dtype, other)
                docs = plan.docs(self.cluster)       # before anything is kept
            except Unplannable as e:
                raise Unplannable(f"tensor-parallel stage {s} cannot run as planned functions on its workers "
                                  f"({kind}, input {list(shape)}): {e}") from e
            hit = self.traced[key] = (len(self.traced), plan)
            for r, doc in zip(self.pipe.placements[s].ranks, docs):
                self.pending.setdefault(r, []).append((hit[0],) + doc)
        return hit

    def output(self, s, shape, dtype):
        """Tensor-parallel stage ``s``'s output shape and dtype for an input of ``shape``."""
        out = self._plan(s, "forward", shape, dtype)[1].cf.outputs[0]
        return tuple(out.shape.as_list()), out.dtype

    def for_step(self, x, y, rows, train):
        """``{stage: {micro-batch: names}}`` of the plans a step of ``x`` (and targets ``y``) in
        micro-batches of ``rows`` runs: ``"F"``/``"B"``/``"L"`` their names, ``"grads"`` which of
        the stage's variables get a gradient. Traces what is new (no worker call)."""
        from tensorweave.core.dtypes import as_dtype
        key = (tuple(rows), tuple(x.shape[1:]), x.dtype.str, train and (tuple(y.shape[1:]), y.dtype.str))
        if key in self.steps:
            return self.steps[key]
        pipe, last = self.pipe, len(self.pipe.placements) - 1
        per_rows = {}
        for r in sorted(set(rows)):
            shapes = [((r,) + tuple(x.shape[1:]), as_dtype(x.dtype))]
            for s in range(max(self.tp)):     # each stage's input: the previous one's output, traced
                sh, dt = shapes[-1]
                shapes.append(self.output(s, sh, dt) if s in self.tp else output_shape(pipe, s, sh, dt))
            names = per_rows[r] = {}
            for s in sorted(self.tp):
                sh, dt = shapes[s]
                if train and s == last:
                    name, plan = self._plan(s, "loss", sh, dt, ((r,) + tuple(y.shape[1:]), as_dtype(y.dtype)))
                    names[s] = {"L": name, "grads": plan.has_grad, "D": plan.draws}
                elif train:
                    name, plan = self._plan(s, "backward", sh, dt, self.output(s, sh, dt))
                    forward = self._plan(s, "forward", sh, dt)
                    names[s] = {"F": forward[0], "B": name, "grads": plan.has_grad, "D": forward[1].draws}
                else:
                    plan = self._plan(s, "infer", sh, dt)
                    names[s] = {"F": plan[0], "D": plan[1].draws}
        out = self.steps[key] = {s: {m: per_rows[r][s] for m, r in enumerate(rows)} for s in self.tp}
        return out

    def ship(self, key):
        """Binds the plans traced since the last ship on their workers (pipeline ``key``)."""
        from tensorweave.distribute.ray.pieces import _call
        from tensorweave.distribute.ray.pipeline_worker import w_bind_plans
        if self.pending:
            ranks = sorted(self.pending)
            _call(self.cluster, w_bind_plans, [(key, self.pending[r]) for r in ranks], ranks)
            self.pending = {}


__all__ = ["Unplannable", "tp_stages", "trace", "output_shape", "StagePlan", "TPPlans"]
