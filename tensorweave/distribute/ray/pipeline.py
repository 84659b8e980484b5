"""Pipelines on Ray workers: each stage's layers and variables live on its workers, which run
their part of the schedule themselves (``pipeline_worker.py``); the driver only sends inputs in
and gets losses and gradient *shapes* back.

What :class:`~tensorweave.distribute.pipeline.Pipeline` delegates to when its placements are a
connected cluster's workers:

- **Binding (once per pipeline and cluster)**: each worker gets the stages it holds — the
  stage's callable (a Keras layer or model, a list of layers, a ``tw.Module``, a function) and
  the loss, written by Ray's cloudpickle as ``Cluster.run`` sends functions, except that every
  global variable is written as a *reference* to its shards' keys: the worker reads it back as
  its own shard (the ``Variable`` already in its store), so weights never travel and the
  stage's updates on the worker are the driver's variable's. Stages whose variables are all
  ``B`` on a 1-D placement run here (data parallel inside a stage: the micro-batch is split
  over the stage's workers and their gradients are partial sums, ``P``); a tensor-parallel
  stage (a variable split, ``S``) runs as planned functions bound on its workers
  (``pipeline_tp.py``: traced on the driver once per micro-batch shape, shipped once, run by
  ``w_step`` inside the same one call per worker; its gradients come back laid out as their
  variables). The driver walks the schedule instead (``ray_pipeline`` returns None: the
  in-process pipeline's code, each op of a stage one call per worker of it) only for an N-D
  mesh, a partial (``P``) variable, and a tensor-parallel stage its plans cannot carry
  (``pipeline_tp.Unplannable``: a draw reading the stage's values, the driver's local
  variables, several placements, a stage that does not trace; the reason is
  ``pipe.walked_because``). Seeded draws in a tensor-parallel stage are fed to its plans as one
  device's rows, unseeded ones from the step's entropy the driver sends (``pipeline_tp.py``); interleaved 1F1B runs with tensor-parallel virtual stages.
- **A step**: one call per worker with its actions of the schedule (``(stage, micro-batch,
  kind)`` in the schedule's order), the micro-batches of ``x`` (stage 0's workers) and ``y``
  (the last stage's), and the store keys its gradient sums get. Activations and their gradients
  go worker to worker (``send``/``recv`` of the cluster's transport: shared memory on one node,
  the object store otherwise). The answer: the weighted losses per micro-batch, each gradient's
  shape (the sums stay on the workers as the pieces of global tensors, ``B`` on a one-worker
  stage, ``P`` on a wider one), the tapes held at most, and seconds busy and waiting for
  hand-offs (:attr:`RayPipeline.last_step`).
- **Errors**: a stage's exception comes back as its own type through ``Cluster.run_each`` with
  ``.rank``, a note naming the stage, the action and the micro-batch, and the op error's own
  text (op, shapes, the user's line); the other workers' waits are aborted (no hang).

- **The update in the step call** (``Pipeline.train_step(x, y, optimizer)``): the driver's
  optimizer is built for the pipeline's variables (its slots are global variables beside
  them, on the stage's workers) and bound once per worker (its class and config; the slots as
  the worker's shards); each step's call then carries the step count and the learning rate
  (a schedule's value, or what ``optimizer.learning_rate = x`` set), and the worker applies
  its gradient sums to its shards itself — one call per worker per step in all, no gradient
  leaves its worker (a stage of several workers all-reduces among them). The driver's
  ``iterations`` goes up by one. ``forward_backward`` + ``optimizer.apply_gradients`` on the
  driver keeps working and gives the same weights (the same slot variables), op by op.
  ``global_clipnorm``: the workers clip together (each stage's squared gradient sum, one
  all-reduce of that scalar over the pipeline's workers, the same scale everywhere);
  ``use_ema``: the averages are slots beside the variables, updated by the workers;
  ``exclude_from_weight_decay``: resolved against the driver's variables, sent by index.
"""
import io
import json
import time

import numpy as np

from tensorweave.core import errors
from tensorweave.core.sbp import B, P
from tensorweave.distribute.layout import balanced_bounds
from tensorweave.distribute.ray.pieces import RemotePiece, RemoteVariable, _call, heap_of
from tensorweave.distribute.ray.pipeline_tp import TPPlans, _kind, tp_stages
from tensorweave.distribute.ray.pipeline_worker import w_bind, w_bind_optimizer, w_step


def _user_module(name):
    """Whether module ``name`` is the user's own code (a script's or a test's module the workers
    may not be able to import): not tensorweave's, not installed, not the standard library."""
    import sys
    import sysconfig
    module = sys.modules.get(name or "")
    path = getattr(module, "__file__", None)
    if path is None or name == "__main__" or name.split(".")[0] == "tensorweave":
        return False
    installed = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    return not any(path.startswith(root + "/") for root in installed if root)


def _pickler_class():
    import types

    from ray import cloudpickle
    from tensorweave.distribute.variables import GlobalVariable
    from tensorweave.ops.random_ops import Generator
    from tensorweave.ops.variables import Variable

    class _Pickler(cloudpickle.CloudPickler):
        """Ray's cloudpickle, with global variables written as their shards' keys per rank."""

        def persistent_id(self, obj):
            if isinstance(obj, GlobalVariable):
                if not all(isinstance(v, RemoteVariable) for v in obj._locals):
                    raise errors.FailedPreconditionError(
                        f"pipeline: variable '{obj.name}' lives on in-process ranks, not on the Ray workers (made "
                        "before tw.distribute.connect?). Hint: make the pipeline after connect")
                return "tw_variable", {v.rank: v.key for v in obj._locals}, obj.name
            if isinstance(obj, Generator):
                raise errors.UnimplementedError(
                    "pipeline: a stage holds a tw.random.Generator; on Ray workers its draws would come from copies "
                    "of it, not from the driver's one generator as on one device. Hint: an op seed "
                    "(tw.random.uniform(shape, seed=...)) or a stateless op (tw.random.stateless_uniform(shape, "
                    "seed=[a, b]))")
            if isinstance(obj, Variable):
                raise errors.FailedPreconditionError(
                    f"pipeline: a stage holds the local variable '{obj.name}'; on Ray a stage's variables must be "
                    "global on its placement. Hint: build Keras layers before making the pipeline")
            return None

        def reducer_override(self, obj):
            # the user's classes and functions travel by value (the workers may not have their module)
            if isinstance(obj, (type, types.FunctionType)):
                name = getattr(obj, "__module__", None)
                if name not in self.by_value and _user_module(name):
                    cloudpickle.register_pickle_by_value(__import__("sys").modules[name])
                    self.by_value.add(name)
            return super().reducer_override(obj)
    return _Pickler


def _dumps(obj):
    import sys

    from ray import cloudpickle
    buf = io.BytesIO()
    pickler = _pickler_class()(buf)
    pickler.by_value = set()
    try:
        pickler.dump(obj)
    finally:
        for name in pickler.by_value:
            cloudpickle.unregister_pickle_by_value(sys.modules[name])
    return buf.getvalue()


def _check_stage(pipe, s, placement):
    fn = pipe.stages[s]
    if getattr(fn, "built", True) is False:
        raise errors.FailedPreconditionError(
            f"pipeline: stage {s} is not built (its weights do not exist yet); on Ray its weights are made on the "
            "driver first. Hint: build it (layer.build(input_shape), or call the model once) before "
            "tw.distribute.pipeline")


class RayPipeline:
    """The Ray side of one :class:`~tensorweave.distribute.pipeline.Pipeline` on one cluster."""

    def __init__(self, pipe, cluster, tp=frozenset()):
        self.pipe, self.cluster = pipe, cluster
        self.tp = frozenset(tp)               # the tensor-parallel stages (planned: pipeline_tp.py)
        self.tp_plans = TPPlans(pipe, tp, cluster) if tp else None
        self.heap = heap_of(cluster)
        self.placements = pipe.placements
        self.ranks = sorted({r for p in self.placements for r in p.ranks})
        self.key = None
        self.last_step = None
        self._optimizers = {}     # id(optimizer) -> (optimizer, token, slot variables bound)
        self._seeded = None       # the driver's random-state cache when the workers' streams last restarted
        self._streams = {}        # names of the seeded streams the stages drew from (pipeline_random)

    def __del__(self):
        if self.key is not None:
            for r in self.ranks:
                self.heap.release(r, self.key)

    def _bind(self):
        pipe = self.pipe
        index = {id(v): j for j, v in enumerate(pipe.trainable_variables)}
        for s, placement in enumerate(self.placements):
            _check_stage(pipe, s, placement)
        key = self.heap.key()
        per_rank = []
        for r in self.ranks:
            held = [s for s, p in enumerate(self.placements) if r in p.ranks]
            stages = {s: (pipe.stages[s], [(index[id(v)], v) for v in getattr(pipe.stages[s], "trainable_variables", ())
                                           if id(v) in index]) for s in held}
            loss = pipe.loss if len(self.placements) - 1 in held else None
            per_rank.append((key, _dumps({"stages": stages, "loss": loss}), [p.ranks for p in self.placements],
                             sorted(self.tp)))
        _call(self.cluster, w_bind, per_rank, self.ranks)
        self.key = key

    def _rows(self, value, stage, what):
        """The micro-batches of ``value`` cut into each of ``stage``'s workers' slices."""
        a = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
        if a.ndim == 0:
            raise ValueError(f"pipeline: {what} must have a batch axis, got a scalar")
        # a tensor-parallel stage is one wide slice: each of its workers gets the whole micro-batch
        k, n = self.pipe.micro_batches, 1 if stage in self.tp else len(self.placements[stage].ranks)
        if a.shape[0] < k * n:
            raise ValueError(f"pipeline: {what} of shape {list(a.shape)} has {a.shape[0]} rows for {k} micro-batches "
                             f"over stage {stage}'s {n} workers. Hint: micro_batches x workers per stage <= batch size")
        bounds = balanced_bounds(a.shape[0], k)
        per_worker = [{} for _ in range(n)]
        for m, (lo, hi) in enumerate(bounds):
            for i, (a_lo, a_hi) in enumerate(balanced_bounds(hi - lo, n)):
                per_worker[i][m] = np.ascontiguousarray(a[lo + a_lo:lo + a_hi])
        return per_worker, [hi - lo for lo, hi in bounds], a.shape[0]

    def _slice(self, stage, rank):
        """Which row slice of a micro-batch ``rank`` holds on ``stage`` (all of it: a tensor-parallel one)."""
        return 0 if stage in self.tp else self.placements[stage].ranks.index(rank)

    def _owners(self):
        owner = {}
        for s, fn in enumerate(self.pipe.stages):
            for v in getattr(fn, "trainable_variables", ()):
                owner.setdefault(id(v), s)
        return owner

    def _bind_optimizer(self, optimizer):
        """Builds ``optimizer`` for the pipeline's variables on the driver (slot variables beside
        each variable) and gives every worker its copy (once, and again when it got new slots);
        returns the token the step calls name it by."""
        variables = self.pipe.trainable_variables
        if not optimizer.built:
            optimizer.build(variables)
        else:
            new = [v for v in variables if id(v) not in optimizer._index]
            if new:
                optimizer._extend(new)
        bound = self._optimizers.get(id(optimizer))
        if bound is not None and bound[0] is optimizer and bound[2] == len(optimizer._slots):
            return bound[1]
        index = {id(v): j for j, v in enumerate(variables)}
        owner = self._owners()
        from tensorweave.keras import optimizers
        described = optimizers.serialize(optimizer)        # JSON, as the parameter servers get theirs
        # the rate travels with each step; the global norm is clipped by the workers together (w_step)
        described["config"] = dict(described["config"], learning_rate=0.0, global_clipnorm=None)
        data = json.dumps(described)
        clip = float(optimizer.global_clipnorm) if optimizer.global_clipnorm and optimizer.global_clipnorm > 0 else None
        # exclude_from_weight_decay names the driver's variables (objects or a name pattern): resolved here
        excluded = [j for j, v in enumerate(variables) if not optimizer._use_weight_decay(v)]
        token = self.heap.key()
        slots = {r: {} for r in self.ranks}
        for (vid, name), slot in optimizer._slots.items():
            j = index.get(vid)
            if j is None:
                continue
            for piece in slot._locals:
                slots[piece.rank].setdefault(j, {})[name] = piece.key
        stage_ranks = {r: {} for r in self.ranks}
        for j, v in enumerate(variables):
            for r in self.placements[owner[id(v)]].ranks:
                stage_ranks[r][j] = self.placements[owner[id(v)]].ranks
        # a tensor-parallel stage's split variables: every worker adds its shard's squares to the global norm
        split = [j for j, v in enumerate(variables) if owner[id(v)] in self.tp and _kind([v.sbp]) == "tp"]
        _call(self.cluster, w_bind_optimizer, [(self.key, token, data, slots[r], stage_ranks[r], clip, excluded, split)
                                               for r in self.ranks], self.ranks)
        self._optimizers[id(optimizer)] = (optimizer, token, len(optimizer._slots))
        return token

    def _tp_names(self, x, y, train):
        """``{stage: {micro-batch: plan names}}`` of the tensor-parallel stages for a step of
        ``x``/``y`` (traced on the driver where new: ``pipeline_tp.Unplannable`` before any call)."""
        if self.tp_plans is None:
            return {}
        rows = self._rows(x, 0, "x")[1]           # too few rows: the user's error, not an unplannable stage
        if train:
            self._rows(y, len(self.placements) - 1, "y")
        return self.tp_plans.for_step(x, y, rows, train)

    def train_step(self, x, y, optimizer):
        """One training step with the update on the workers (one call per worker); the loss."""
        self._tp_names(_array(x), _array(y), True)        # a stage that cannot be planned: before any call
        if self.key is None:
            self._bind()
        token = self._bind_optimizer(optimizer)
        lr = optimizer.learning_rate
        lr = np.asarray(lr.numpy() if hasattr(lr, "numpy") else lr, np.float32)
        loss = self.step(x, y, update=(token, int(optimizer.iterations.numpy()), lr))
        optimizer.iterations.assign_add(np.int64(1))
        return loss

    def step(self, x, y=None, train=True, update=None):
        """One step's schedule on the workers: ``(loss, gradients, variables)`` when training,
        the outputs (a global tensor on the last stage's placement) for inference; with
        ``update`` (``train_step``) the loss, the update applied on the workers."""
        from tensorweave.distribute.global_tensor import GlobalTensor
        t0 = time.perf_counter()
        x, y = _array(x), (_array(y) if train else None)
        pipe, last = self.pipe, len(self.placements) - 1
        xs, rows, total = self._rows(x, 0, "x")
        plans = self._tp_names(x, y, train)
        if self.key is None:
            self._bind()
        if self.tp_plans is not None:
            self.tp_plans.ship(self.key)
        ys = self._rows(y, last, "y")[0] if train else None
        variables = pipe.trainable_variables
        owner = self._owners()
        grad_keys = {r: {} for r in self.ranks}
        if train and update is None:
            for j, v in enumerate(variables):
                for r in self.placements[owner[id(v)]].ranks:
                    grad_keys[r][j] = self.heap.key()
        from tensorweave.distribute import pipeline_random
        from tensorweave.ops.random_ops import current_state
        # draws in the stages as this process's would be: its global seed, a restart of the
        # workers' streams after each set_seed here (which gives the state a new cache), its
        # rule-2 counter and where its streams the stages drew from last time are
        state = current_state()
        seed = (state.seed, state.cache is not self._seeded)
        self._seeded = state.cache
        draws = (state.counter, pipeline_random.driver_positions(state, self._streams),
                 pipeline_random.step_entropy() if self.tp else None)
        per_rank = []
        for r in self.ranks:
            actions = [(a.stage, a.micro_batch, a.kind) for a in pipe.schedule
                       if r in self.placements[a.stage].ranks and (train or a.kind == "F")]
            x_r = xs[self._slice(0, r)] if r in self.placements[0].ranks else None
            y_r = weights = None
            if train and r in self.placements[last].ranks:
                i = self._slice(last, r)
                y_r = ys[i]
                weights = {m: len(y_r[m]) / total for m in y_r}
            mine = {s: plans[s] for s in self.tp if r in self.placements[s].ranks}
            per_rank.append((self.key, actions, rows, x_r, y_r, weights, grad_keys[r], train, update, seed, draws,
                             mine))
        answers = dict(zip(self.ranks, _call(self.cluster, w_step, per_rank, self.ranks)))
        report = answers[self.placements[last].ranks[0]][6]        # the last stage's forward: where draws are
        self._streams.update(dict.fromkeys(pipeline_random.driver_after_step(state, report)))
        from tensorweave.distribute.pipeline import idle_fraction
        workers = {r: {"busy_s": a[4] - a[5], "wait_s": a[5], "held": a[3]} for r, a in answers.items()}
        # the bubble as the workers saw it: over the longest step call, each worker's share not computing
        self.last_step = {"seconds": time.perf_counter() - t0, "workers": workers,
                          "measured_idle_fraction": idle_fraction([w["busy_s"] for w in workers.values()],
                                                                  max(a[4] for a in answers.values()))}
        # per stage, the most tapes one of its workers held at once (with virtual stages: all the worker's stages)
        pipe.held_activations = [max(answers[r][3] for r in p.ranks) for p in self.placements]
        if not train:
            return self._outputs(answers)
        loss = None
        for r in self.placements[last].ranks:       # micro-batch order per worker, then worker order
            part = None                             # (a tensor-parallel last stage: its first worker's)
            for m in sorted(answers[r][0]):
                part = answers[r][0][m] if part is None else part + answers[r][0][m]
            if part is not None:
                loss = part if loss is None else loss + part
        import tensorweave as tw
        if update is not None:
            return tw.constant(np.asarray(loss, np.float32))
        grads = []
        for j, v in enumerate(variables):
            placement = self.placements[owner[id(v)]]
            metas = [answers[r][1][j] for r in placement.ranks]
            if any(mt is None for mt in metas):
                grads.append(None)
                continue
            pieces = [RemotePiece(self.heap, r, grad_keys[r][j], *mt) for r, mt in zip(placement.ranks, metas)]
            # a tensor-parallel stage's gradients are laid out as their variables; a data-parallel
            # stage's are its workers' partial sums
            sbp = tuple(v.sbp) if owner[id(v)] in self.tp else (B,) if len(placement.ranks) == 1 else (P,)
            grads.append(GlobalTensor(pieces, placement, sbp, v.shape.as_list(), v.dtype))
        return tw.constant(np.asarray(loss, np.float32)), grads, variables

    def _outputs(self, answers):
        import tensorweave as tw
        placement = self.placements[-1]
        holders = placement.ranks[:1] if len(self.placements) - 1 in self.tp else placement.ranks
        parts = [answers[r][2] for r in holders]     # per worker, its rows of each micro-batch
        rows = [np.concatenate([parts[i][m] for i in range(len(parts))], axis=0) for m in range(len(parts[0]))]
        return tw.constant(np.concatenate(rows, axis=0)).to_global(placement=placement, sbp=tw.sbp.split(0))


def _array(value):
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def ray_pipeline(pipe):
    """The :class:`RayPipeline` of ``pipe`` when its placements are on a connected cluster and
    its workers can run the schedule themselves; None when the driver walks the schedule (not on
    Ray; a stage on an N-D mesh or with a partial variable: ``pipeline_tp.tp_stages``; a
    tensor-parallel stage found unplannable before: ``pipe.walked_because``)."""
    from tensorweave.distribute.ray.pieces import cluster_for
    clusters = {id(c): c for c in (cluster_for(p) for p in pipe.placements)}
    if len(clusters) != 1 or None in clusters.values():
        if any(c is not None for c in clusters.values()):
            raise errors.InvalidArgumentError("pipeline: some stages are on Ray workers and some on in-process ranks")
        return None
    cluster = next(iter(clusters.values()))
    tp = tp_stages(pipe)
    if tp is None or getattr(pipe, "walked_because", None):
        return None
    rp = getattr(pipe, "_ray", None)
    if rp is None or rp.cluster is not cluster:
        rp = pipe._ray = RayPipeline(pipe, cluster, tp)
    return rp


__all__ = ["RayPipeline", "ray_pipeline"]
