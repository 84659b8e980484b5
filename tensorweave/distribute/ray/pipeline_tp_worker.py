"""A tensor-parallel stage's actions on one of its workers, inside the step's one call
(``pipeline_worker.w_step``): the stage's planned functions (``pipeline_tp.py``, bound once per
micro-batch shape by ``w_bind_plans``) run with ``executor.run_plan``, their collectives on the
stage's group; every worker of the stage runs the same actions in the same order (SPMD).

- ``F``, not the last stage: ``out = forward(x, draws...)`` (``x`` the whole micro-batch, received
  by every worker of the stage; ``draws`` its rows of the stage's random draws, :func:`redraw`);
  only ``x`` and the draws are kept for the backward; the first worker sends ``out`` on.
- ``F`` of the last stage while training: ``(loss, g_x, g_v...) = loss(x, y, w, draws...)`` at once, kept
  for the ``B`` action; the first worker reports the loss.
- ``B``: ``(g_x, g_v...) = backward(x, g, draws...)`` (the forward's draws again) with ``g`` the
  gradient of the stage's output from the next stage; the first worker sends ``g_x`` back; each
  ``g_v`` (this worker's shard's whole gradient, laid out as its variable) is added to the
  step's sums.

>>> sorted(_KINDS)
['B', 'F', 'L']
"""
import numpy as np

from tensorweave.distribute.ray.pipeline_worker import _receive, _receive_info, _send

_KINDS = {"F": "forward", "B": "backward", "L": "the last stage's loss and gradients"}


def redraw(record, unseeded_key=None):
    """The eager draw ``record`` (``pipeline_tp._Draws``) stands for, made as the stage's code
    makes it on one device: inside a micro-batch's forward (``MicroBatchDraws.micro_batch``) it
    is this micro-batch's rows of the whole batch's draw, its stream continued as one device's.
    A draw without any seed comes from the stream ``unseeded_key`` (the same on every worker of
    the stage: ``pipeline_random.unseeded_key``) instead of this worker's OS entropy."""
    from tensorweave.core.dtypes import as_dtype
    from tensorweave.core.registry import get_op
    from tensorweave.ops.array_ops import constant
    from tensorweave.ops.random_ops import _run_random, _SeedState
    op, inputs, attrs, dtype, op_seed, unseeded = record
    attrs = {k: as_dtype(v) for k, v in attrs.items()}
    inputs = [constant(v) for v in inputs]
    if unseeded:
        from tensorweave.distribute.pipeline_random import _run_on
        if unseeded_key is None:
            raise ValueError(f"'{op}' draws without any seed in a tensor-parallel stage: its workers need the "
                             "step's key (pipeline_random.unseeded_key) to draw one value")
        value, _ = _run_on(get_op(op), inputs, dict(attrs, seed=None, seed2=None), None, _SeedState(unseeded_key),
                           None)
        return value
    out = _run_random(get_op(op), inputs, attrs, op_seed, None, None if dtype is None else as_dtype(dtype))
    return np.asarray(out.numpy())


def _run(worker, wp, name, feeds):
    from tensorweave.distribute.ray.pieces import resolve
    from tensorweave.runtime import executor
    plan, caps = wp.plans[name]
    return executor.run_plan(plan, list(feeds) + [resolve(worker, c) for c in caps])


def tp_forward(worker, wp, comm, run, s, m, all_rows, xs, ys, weights, train):
    last, rows, me = len(wp.placements) - 1, all_rows[m], worker.rank
    x = np.asarray(xs[m]) if s == 0 else _receive(wp, comm, run, rows, s - 1, s, me, ("F", s - 1, m))
    came = None if s == 0 else _receive_info(wp, comm, run, rows, s - 1, s, me, ("F", s - 1, m))
    names = run.plans[s][m]
    with run.draws.micro_batch(s, sum(all_rows[:m]), rows, came):
        drawn = [redraw(record, run.draws.unseeded_key(s, m, k)) for k, record in enumerate(names.get("D", ()))]
    first = me == wp.placements[s][0]
    if train and s == last:
        outs = _run(worker, wp, names["L"], [x, np.asarray(ys[m]), np.asarray(weights[m], np.float32)] + drawn)
        run.saved[(s, m)] = outs[1:]
        run.peak = max(run.peak, len(run.saved))
        if first:
            run.losses[m] = np.asarray(outs[0])
        return
    out = _run(worker, wp, names["F"], [x] + drawn)[0]
    if train:
        run.saved[(s, m)] = (x, drawn)
        run.peak = max(run.peak, len(run.saved))
    if s == last:
        if first:
            run.outputs[m] = np.asarray(out)
    else:
        _send(wp, comm, rows, out, s, s + 1, me, ("F", s, m), run.draws.outgoing(s))


def tp_backward(worker, wp, comm, run, s, m, rows):
    last, me = len(wp.placements) - 1, worker.rank
    names = run.plans[s][m]
    if s == last:
        outs = run.saved.pop((s, m))
    else:
        x, drawn = run.saved.pop((s, m))
        g = _receive(wp, comm, run, rows, s + 1, s, me, ("B", s + 1, m))
        outs = _run(worker, wp, names["B"], [x, g] + drawn)       # the forward's draws again
    if s:
        _send(wp, comm, rows, outs[0], s, s - 1, me, ("B", s, m))
        outs = outs[1:]
    with_grad = [j for (j, _), has in zip(wp.stages[s][1], names["grads"]) if has]
    for j, g in zip(with_grad, outs):
        g = np.asarray(g)
        run.acc[j] = g if j not in run.acc else run.acc[j] + g
