"""The worker's side of a pipeline on Ray: its stages (bound once) and one step's actions.

A worker keeps a :class:`WorkerStages` in its store: the stage objects it holds (each stage's
callable with its variables resolved to the worker's own shards, the loss on the last stage's
workers). A step is one call: the worker walks its actions of the schedule in order — a
forward under its own tape (its input received from the previous stage's workers, its output
sent to the next stage's), a backward seeded with the gradient received from the next stage
(the last stage: its weighted loss), the input's gradient sent back — and sums each variable's
gradient over its micro-batches in its store. Hand-offs are point to point (``send`` never
blocks, ``recv`` waits for the one it needs) over the cluster's transport between workers,
so a stage starts a micro-batch as soon as its input has arrived.

With an optimizer (``Pipeline.train_step``) the same call ends with the update: the worker's
copy of the optimizer (bound once: built from the driver's class and config, its slots the
worker's shards of the driver's slot variables) applies the step's gradient sums to the
worker's shards, with the driver's step count and learning rate of this step; a stage of
several workers first all-reduces its gradients (one buffer per stage).

Seeded random ops in a stage (dropout) give each micro-batch its rows of the draw the
unpipelined step makes for the whole batch (``pipeline_random.py``; the driver's global seed
travels with the call).

Rows: micro-batch ``m`` has ``rows[m]`` rows; on a stage of ``n`` workers worker ``i`` holds the
balanced slice ``i`` of them (``S(0)``). A hand-off sends each receiver the rows it holds of the
sender's slice, so stages of different widths meet (data parallel inside a stage). A
tensor-parallel stage (``WorkerStages.tp``; run by planned functions, ``pipeline_tp_worker.py``)
is one wide slice: every worker of it holds the whole micro-batch, its first worker sends.

>>> _overlaps(5, 2, 1)          # 5 rows from 2 workers to 1: both send all they hold
[(0, 0, 0, 3), (1, 0, 3, 5)]
"""
import io
import json
import pickle
import time

import numpy as np

from tensorweave.distribute.layout import balanced_bounds
from tensorweave.distribute.pipeline_random import decode, encode


def _overlaps(rows, n_src, n_dst):
    """``(src index, dst index, lo, hi)`` for every pair whose balanced slices of ``rows`` rows share rows."""
    src, dst = balanced_bounds(rows, n_src), balanced_bounds(rows, n_dst)
    return [(i, j, max(a, c), min(b, d)) for i, (a, b) in enumerate(src) for j, (c, d) in enumerate(dst)
            if max(a, c) < min(b, d)]


class _Unpickler(pickle.Unpickler):
    """Reads the driver's stage objects; a global variable (a persistent id naming its shards'
    keys per rank) becomes this worker's shard, the variable in its store."""

    def __init__(self, data, worker):
        super().__init__(io.BytesIO(data))
        self.worker = worker

    def persistent_load(self, pid):
        kind, keys, name = pid
        if kind != "tw_variable":
            raise pickle.UnpicklingError(f"pipeline: unknown reference {pid!r}")
        if self.worker.rank not in keys:
            # another stage's variable reached through this stage's objects (a Keras layer's model)
            return _Elsewhere(name, sorted(keys), self.worker.rank)
        return self.worker.store[keys[self.worker.rank]]


class _Elsewhere:
    """Stands for a variable of another stage on this worker: using it is an error naming it."""

    def __init__(self, name, ranks, rank):
        self._what = (name, ranks, rank)

    def __getattr__(self, attr):
        if attr.startswith("__") or attr == "_what":
            raise AttributeError(attr)
        name, ranks, rank = self._what
        raise RuntimeError(f"pipeline: variable '{name}' lives on workers {ranks}, not on worker {rank}: a stage "
                           "may only use its own variables")


class WorkerStages:
    """A worker's stages of one pipeline: ``stages[s] = (callable, variables)`` (variables by
    their index in the pipeline's ``trainable_variables``), the loss, and where each stage's
    workers are (``placements[s]``: its ranks)."""

    def __init__(self, worker, data, placements, tp=()):
        payload = _Unpickler(data, worker).load()
        self.stages = payload["stages"]
        self.loss = payload["loss"]
        self.placements = [tuple(p) for p in placements]
        self.ranks = tuple(sorted({r for p in self.placements for r in p}))
        self.optimizers = {}      # token -> (optimizer, [(variable index, shard, its stage's ranks, mode)], clip)
        self.tp = frozenset(tp)   # the tensor-parallel stages: run by the planned functions in ``plans``
        self.plans = {}           # name -> (bound plan, its captures' references)

    def width(self, stage):
        """How many row slices a micro-batch is cut into on ``stage``: one on a tensor-parallel stage."""
        return 1 if stage in self.tp else len(self.placements[stage])

    def holders(self, stage, i):
        """The workers of ``stage`` holding row slice ``i`` (a tensor-parallel stage: all; the first sends)."""
        return self.placements[stage] if stage in self.tp else (self.placements[stage][i],)

    def slice_of(self, stage, rank):
        return 0 if stage in self.tp else self.placements[stage].index(rank)


def w_bind(worker, key, data, placements, tp=()):
    worker.store[key] = WorkerStages(worker, data, placements, tp)


def w_bind_plans(worker, key, plans):
    """Binds planned functions of the pipeline ``key``'s tensor-parallel stages on this worker:
    ``plans`` is ``[(name, spec text, arrays, resources, capture references)]`` (``plans.rank_doc``)."""
    from tensorweave.distribute.ray.plans import bind_plan
    wp = worker.store[key]
    for name, doc, tensors, res, caps in plans:
        wp.plans[name] = (bind_plan(worker, doc, tensors, res, [])[0], caps)


def w_bind_optimizer(worker, key, token, data, slots, stage_ranks, clip=None, excluded=(), split=()):
    """Makes this worker's copy of an optimizer of the pipeline ``key``: ``data`` is its class
    and config (the learning rate a number, set every step), ``slots[j][name]`` the store key of
    this worker's shard of variable ``j``'s slot ``name`` (``use_ema``'s averages are slots too),
    ``stage_ranks[j]`` the workers of ``j``'s stage (its gradients are all-reduced over them), for
    every variable ``j`` it holds; ``clip`` the driver's ``global_clipnorm`` (the workers clip
    together: :func:`_clip_globally`), ``excluded`` the variables without weight decay, ``split``
    the variables split over their (tensor-parallel) stage's workers."""
    wp = worker.store[key]
    from tensorweave.keras import optimizers
    opt = optimizers.deserialize(json.loads(data))
    held = {j: v for _, variables in wp.stages.values() for j, v in variables}
    index = {id(v): j for j, v in held.items()}
    opt._exclude_ids = {id(held[j]) for j in excluded if j in held}

    def from_store(reference, name=None, initializer="zeros"):
        j = index[id(reference)]
        try:
            slot = worker.store[slots.get(j, {})[name]]
        except KeyError:
            raise RuntimeError(f"pipeline: the optimizer {cls.__name__} on worker {worker.rank} asks for a slot "
                               f"'{name}' of variable {j} that the driver's optimizer does not have") from None
        opt._slots[(id(reference), name)] = slot
        return slot

    opt.add_variable_from_reference = from_store      # build() takes the driver's slots, not new zeros
    try:
        opt.build([held[j] for j in sorted(held)])
    finally:
        del opt.add_variable_from_reference
    modes = _modes(wp, held, split)
    wp.optimizers[token] = (opt, [(j, held[j], tuple(stage_ranks[j]), modes[j]) for j in sorted(held)], clip)


def _modes(wp, held, split):
    """How the gradient of each variable ``j`` in ``held`` is on this worker: ``"rows"`` (a
    data-parallel stage's partial sum, all-reduced over the stage), ``"split"`` (its shard's whole
    gradient, ``j`` in ``split``), ``"replicated"`` (the whole gradient, the same on every worker of
    a tensor-parallel stage).

    >>> wp = object.__new__(WorkerStages); wp.tp, wp.stages = {1}, {1: (None, [(2, "w"), (3, "b")])}
    >>> _modes(wp, {0: "v", 2: "w", 3: "b"}, [2])
    {0: 'rows', 2: 'split', 3: 'replicated'}
    """
    tp = {j for s in wp.tp if s in wp.stages for j, _ in wp.stages[s][1]}     # only the stages held here
    split = set(split)
    return {j: "rows" if j not in tp else "split" if j in split else "replicated" for j in held}


class _Run:
    """One step's state on a worker: saved tapes, gradient sums, losses, outputs and the time
    spent waiting for hand-offs."""

    def __init__(self):
        self.saved, self.acc, self.losses, self.outputs = {}, {}, {}, {}
        self.held = self.peak = 0
        self.wait = 0.0


def w_step(worker, key, actions, rows, xs, ys, weights, grad_keys, train, update=None, seed=None, draws=None,
           plans=None):
    """Runs this worker's ``actions`` (``(stage, micro-batch, kind)`` in schedule order) of one
    step, then with ``update = (optimizer token, step count, learning rate)`` applies the
    gradient sums to its shards; ``seed`` is ``(the driver's global random seed, whether it was
    set since the last step)``: the worker's streams restart as the driver's did; ``draws`` is
    ``(the driver's rule-2 counter, its streams' positions, the step's entropy for tensor-parallel
    stages' unseeded draws)`` (``pipeline_random``); ``plans[s][m]``
    names the bound planned functions of tensor-parallel stage ``s`` for micro-batch ``m``. Returns
    ``(losses, gradient metas, outputs, peak tapes held, seconds, seconds waiting, the random
    report of the last stage's forward)``."""
    import tensorweave as tw
    from tensorweave.distribute.ray.pieces import worker_runtime
    from tensorweave.distribute.pipeline_random import MicroBatchDraws
    from tensorweave.ops import random_ops
    worker_runtime(worker).bind_thread()      # the rank's runtime (one CPU), as the worker's eager ops use
    if seed is not None and (seed[1] or random_ops.current_state().seed != seed[0]):
        random_ops.set_seed(seed[0])          # seeded draws as the driver's (one device's) would be
    wp = worker.store[key]
    comm = worker.comm(wp.ranks)
    t0 = time.perf_counter()
    run = _Run()
    run.draws = MicroBatchDraws(sum(rows), *(draws or (0, None)))
    run.plans = plans or {}
    from tensorweave.distribute.ray.pipeline_tp_worker import tp_backward, tp_forward
    for s, m, kind in actions:
        try:
            if kind == "F":
                (tp_forward if s in wp.tp else _forward)(worker, wp, comm, run, s, m, rows, xs, ys, weights, train)
            else:
                (tp_backward if s in wp.tp else _backward)(worker, wp, comm, run, s, m, rows[m])
        except BaseException as e:
            if hasattr(e, "add_note"):
                e.add_note(f"(pipeline stage {s}, {'forward' if kind == 'F' else 'backward'} of micro-batch {m}, "
                           f"on Ray worker {worker.rank})")
            raise
    run.draws.finish()
    if update is not None:
        _update(worker, wp, run, *update)
    metas = {}
    for j, k in grad_keys.items():
        g = run.acc.get(j)
        if g is None:
            metas[j] = None
            continue
        worker.store[k] = g = np.asarray(g.numpy() if hasattr(g, "numpy") else tw.convert_to_tensor(g).numpy())
        metas[j] = (g.shape, g.dtype.str)
    outputs = [run.outputs[m] for m in sorted(run.outputs)]
    report = run.draws.report(len(wp.placements) - 1)
    return run.losses, metas, outputs, run.peak, time.perf_counter() - t0, run.wait, report


def _update(worker, wp, run, token, iterations, learning_rate):
    """The optimizer's step on this worker's shards: gradients of a stage of several workers
    summed over them first (one all-reduce of one buffer per stage), then applied with the
    driver's step count and learning rate."""
    import tensorweave as tw
    opt, held, clip = wp.optimizers[token]
    grads = {j: run.acc[j] for j, _, _, _ in held if j in run.acc}
    by_stage = {}
    for j, _, ranks, mode in held:
        if len(ranks) > 1 and j in grads and mode == "rows":
            by_stage.setdefault(ranks, []).append(j)
    for ranks, js in by_stage.items():
        parts = [np.asarray(tw.convert_to_tensor(grads[j]).numpy()) for j in js]
        flat = worker.comm(ranks).all_reduce(np.concatenate([p.reshape(-1) for p in parts]))
        at = 0
        for j, p in zip(js, parts):
            grads[j] = tw.constant(np.asarray(flat[at:at + p.size]).reshape(p.shape))
            at += p.size
    if clip is not None:
        _clip_globally(worker, wp, opt, clip, grads, held)
    pairs = [(tw.convert_to_tensor(grads[j]), v) for j, v, _, _ in held if j in grads]
    if not pairs:
        return
    opt.iterations.assign(np.int64(iterations))
    opt._learning_rate.assign(np.asarray(learning_rate, opt._learning_rate.dtype.np_dtype))
    opt.apply_gradients(pairs)


def _clip_globally(worker, wp, opt, clip, grads, held):
    """``global_clipnorm`` over every stage's gradients: each stage's first worker adds up its
    gradients' squares (a stage's workers hold the same all-reduced sums; on a tensor-parallel
    stage every worker adds its split variables' shards, the first its replicated ones), one all-reduce of
    that scalar over the pipeline's workers gives the global norm, and every worker scales its
    gradients by ``clip / max(norm, clip)`` — ``clip_by_global_norm`` of the one-device update
    (the norm of the gradients the optimizer sees: divided by ``loss_scale_factor``)."""
    import tensorweave as tw
    squares = 0.0
    for j, v, ranks, mode in held:
        if j in grads and (worker.rank == ranks[0] or mode == "split"):
            g = np.asarray(tw.convert_to_tensor(grads[j]).numpy(), np.float64)
            squares += float(np.sum(g * g))
    total = worker.comm(wp.ranks).all_reduce(np.array([squares], np.float64))
    norm = np.sqrt(float(np.asarray(total).reshape(-1)[0])) / (opt.loss_scale_factor or 1.0)
    scale = clip / max(norm, clip)
    for j, v, _, _ in held:
        if j in grads:
            g = tw.convert_to_tensor(grads[j])
            grads[j] = g * tw.cast(np.float32(scale), g.dtype)


def _index(wp, stage):
    return wp.placements[stage].index


def _receive(wp, comm, run, rows, src_stage, dst_stage, me, tag):
    """This worker's rows of a micro-batch hand-off from ``src_stage``'s workers."""
    i_me = wp.slice_of(dst_stage, me)
    t = time.perf_counter()
    parts = [comm.recv(wp.ranks.index(wp.holders(src_stage, i)[0]), tag)
             for i, j, _, _ in _overlaps(rows, wp.width(src_stage), wp.width(dst_stage)) if j == i_me]
    run.wait += time.perf_counter() - t
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)


def _send(wp, comm, rows, value, src_stage, dst_stage, me, tag, info=None):
    """Sends each of ``dst_stage``'s workers the rows it holds of this worker's slice ``value``
    (and ``info``, the forward's random message, from the first of its senders); on a
    tensor-parallel stage only the first worker sends (the others hold the same values)."""
    i_me = wp.slice_of(src_stage, me)
    if wp.holders(src_stage, i_me)[0] != me:
        return
    lo_me = balanced_bounds(rows, wp.width(src_stage))[i_me][0]
    value = np.asarray(value)
    overlaps = _overlaps(rows, wp.width(src_stage), wp.width(dst_stage))
    for i, j, lo, hi in overlaps:
        if i == i_me:
            for dst in wp.holders(dst_stage, j):
                comm.send(value[lo - lo_me:hi - lo_me], wp.ranks.index(dst), tag)
                if info is not None and i == min(a for a, b, _, _ in overlaps if b == j):
                    comm.send(encode(info), wp.ranks.index(dst), ("R",) + tuple(tag[1:]))


def _receive_info(wp, comm, run, rows, src_stage, dst_stage, me, tag):
    """The forward's random message from the first of this worker's senders."""
    i_me = wp.slice_of(dst_stage, me)
    first = min(i for i, j, _, _ in _overlaps(rows, wp.width(src_stage), wp.width(dst_stage)) if j == i_me)
    t = time.perf_counter()
    info = decode(comm.recv(wp.ranks.index(wp.holders(src_stage, first)[0]), ("R",) + tuple(tag[1:])))
    run.wait += time.perf_counter() - t
    return info


def _forward(worker, wp, comm, run, s, m, all_rows, xs, ys, weights, train):
    import tensorweave as tw
    from tensorweave.distribute.pipeline import stage_training
    fn, variables = wp.stages[s]
    last, rows = len(wp.placements) - 1, all_rows[m]
    x = tw.constant(xs[m] if s == 0 else _receive(wp, comm, run, rows, s - 1, s, worker.rank, ("F", s - 1, m)))
    came = None if s == 0 else _receive_info(wp, comm, run, rows, s - 1, s, worker.rank, ("F", s - 1, m))
    lo, hi = balanced_bounds(rows, len(wp.placements[s]))[wp.placements[s].index(worker.rank)]
    draws = run.draws.micro_batch(s, sum(all_rows[:m]) + lo, hi - lo, came)     # its rows of the batch's draws
    if not train:
        with draws:
            out = fn(x)
    else:
        with tw.GradientTape() as tape:
            if s:
                tape.watch(x)
            tape.watch([v for _, v in variables])     # the worker's shards are not trainable variables
            with draws, stage_training(True):
                out = fn(x)
            if s == last:
                out = wp.loss(tw.constant(ys[m]), out)
                if out.shape.rank:          # per-example losses ("mse"): their mean, as Keras reduces
                    out = tw.reduce_mean(out)
                out = tw.cast(out, tw.float32) * weights[m]
        run.saved[(s, m)] = (tape, x, out)
        run.peak = max(run.peak, len(run.saved))
    if s == last:
        if train:
            run.losses[m] = np.asarray(out.numpy())
        else:
            run.outputs[m] = np.asarray(out.numpy())
    else:
        _send(wp, comm, rows, out.numpy(), s, s + 1, worker.rank, ("F", s, m), run.draws.outgoing(s))


def _backward(worker, wp, comm, run, s, m, rows):
    import tensorweave as tw
    fn, variables = wp.stages[s]
    last = len(wp.placements) - 1
    tape, x, out = run.saved.pop((s, m))
    seed = None
    if s != last:
        seed = [tw.constant(_receive(wp, comm, run, rows, s + 1, s, worker.rank, ("B", s + 1, m)))]
    sources = ([x] if s else []) + [v for _, v in variables]
    grads = tape.gradient(out, sources, output_gradients=seed)
    if s:
        g_in = grads[0]
        g_in = tw.zeros_like(x) if g_in is None else tw.convert_to_tensor(g_in)  # a stage ignoring its input
        _send(wp, comm, rows, g_in.numpy(), s, s - 1, worker.rank, ("B", s, m))
        grads = grads[1:]
    for (j, _), g in zip(variables, grads):
        if g is None:
            continue
        g = tw.convert_to_tensor(g)
        run.acc[j] = g if j not in run.acc else run.acc[j] + g
