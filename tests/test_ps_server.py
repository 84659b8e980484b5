"""The parameter-server actor's logic without Ray (its class run in this process): synchronous
rounds applied once all slots pushed, in slot order whatever the arrival order, averaged; a
re-run push of an applied round ignored; asynchronous pushes applied at once; sparse rows
updated alone; pulls of rows; checkpoints restored by a new server."""
import asyncio
import json

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute.ps import variable as ps_variable
from tensorweave.distribute.ps.server import ParameterServer


def _run(coro):
    return asyncio.run(coro)


def _server(table=None, dense=None):
    s = ParameterServer(0)
    _run(s.create("t", 0, np.arange(12, dtype=np.float32).reshape(6, 2) if table is None else table, "table"))
    _run(s.create("d", 0, np.ones(3, np.float32) if dense is None else dense, "dense"))
    return s


SGD = ps_variable.optimizer_key(tw.keras.optimizers.SGD(0.5))


def test_a_round_is_applied_once_every_slot_pushed_in_slot_order():
    a, b = _server(), _server()
    g0 = [("d", 0, None, np.array([1.0, 2.0, 3.0], np.float32)), ("t", 0, np.array([1, 4]), np.ones((2, 2), np.float32))]
    g1 = [("d", 0, None, np.array([3.0, 0.0, 1.0], np.float32)), ("t", 0, np.array([4]), np.full((1, 2), 3, np.float32))]
    assert _run(a.push(SGD, 0, 0, 2, True, g0)) == 0             # half a round: nothing applied yet
    np.testing.assert_array_equal(_run(a.pull("d", 0, None)), np.ones(3))
    assert _run(a.push(SGD, 0, 1, 2, True, g1)) == 1
    _run(b.push(SGD, 0, 1, 2, True, g1))                          # the other arrival order
    _run(b.push(SGD, 0, 0, 2, True, g0))
    for s in (a, b):
        np.testing.assert_allclose(_run(s.pull("d", 0, None)), 1 - 0.5 * np.array([2.0, 1.0, 2.0]))
        table = _run(s.pull("t", 0, None))
        np.testing.assert_allclose(table[[1, 4]], [[2 - 0.25, 3 - 0.25], [8 - 1.0, 9 - 1.0]])
        np.testing.assert_array_equal(table[[0, 2, 3, 5]], np.arange(12, dtype=np.float32).reshape(6, 2)[[0, 2, 3, 5]])
        assert int(s._optimizer(SGD).iterations.numpy()) == 1
    np.testing.assert_array_equal(_run(a.pull("t", 0, np.array([4, 1]))), _run(a.pull("t", 0, None))[[4, 1]])


def test_a_rerun_push_of_an_applied_round_is_ignored_and_rounds_apply_in_order():
    s = _server()
    g = [("d", 0, None, np.ones(3, np.float32))]
    _run(s.push(SGD, 1, 0, 1, True, g))                           # round 1 before round 0: waits
    np.testing.assert_array_equal(_run(s.pull("d", 0, None)), np.ones(3))
    assert _run(s.push(SGD, 0, 0, 1, True, g)) == 2               # both apply, in order
    assert _run(s.push(SGD, 0, 0, 1, True, g)) == 2               # a re-run of round 0: ignored
    np.testing.assert_allclose(_run(s.pull("d", 0, None)), np.zeros(3))


def test_untrained_slots_count_for_the_round_but_do_not_step_the_optimizer():
    s = _server()
    assert _run(s.push(None, 0, 0, 2, False, [])) == 0
    assert _run(s.push(None, 0, 1, 2, False, [])) == 1
    assert s._optimizers == {}
    _run(s.push(SGD, 1, 0, 2, True, []))                          # a training round with no gradient here
    _run(s.push(None, 1, 1, 2, False, []))
    assert int(s._optimizer(SGD).iterations.numpy()) == 1
    np.testing.assert_array_equal(_run(s.pull("d", 0, None)), np.ones(3))


def test_asynchronous_pushes_apply_at_once():
    s = _server()
    assert _run(s.push(SGD, None, 0, 1, True, [("d", 0, None, np.array([2.0, 0.0, 0.0], np.float32))])) == 1
    np.testing.assert_allclose(_run(s.pull("d", 0, None)), [0.0, 1.0, 1.0])


def test_a_pull_waits_for_its_round():
    s = _server()

    async def scenario():
        pull = asyncio.ensure_future(s.pull("d", 0, None, 1))
        await asyncio.sleep(0)
        assert not pull.done()                                    # version 0 < 1
        await s.push(SGD, 0, 0, 1, True, [("d", 0, None, np.ones(3, np.float32))])
        return await pull
    np.testing.assert_allclose(_run(scenario()), 0.5 * np.ones(3))


def test_different_optimizers_in_one_round_are_an_error():
    s = _server()
    other = ps_variable.optimizer_key(tw.keras.optimizers.SGD(0.5, momentum=0.9))
    _run(s.push(SGD, 0, 0, 2, True, []))
    with pytest.raises(ValueError, match="different optimizers in one round"):
        _run(s.push(other, 0, 1, 2, True, []))


def test_a_checkpoint_restores_shards_optimizer_state_and_version(tmp_path):
    path = str(tmp_path / "ps-0.safetensors")
    adam = ps_variable.optimizer_key(tw.keras.optimizers.Adam(0.1))
    s = ParameterServer(0, path)
    assert not s.restored
    _run(s.create("t", 0, np.zeros((4, 2), np.float32), "table"))
    _run(s.push(adam, None, 0, 1, True, [("t", 0, np.array([2]), np.ones((1, 2), np.float32))]))
    _run(s.create("a", 0, np.zeros(3, np.float32), "after"))      # made after the optimizer: its slots come last
    _run(s.push(adam, None, 0, 1, True, [("a", 0, None, np.ones(3, np.float32))]))
    assert _run(s.save()) == 2
    _run(s.push(adam, None, 0, 1, True, [("t", 0, np.array([2]), np.ones((1, 2), np.float32))]))
    r = ParameterServer(0, path)                                  # what Ray's restart runs (save + journal)
    assert r.restored and r.version == 3 and _run(r.shapes()) == {"table/part_0": (4, 2), "after/part_0": (3,)}
    np.testing.assert_allclose(_run(r.pull("t", 0, None)), _run(s.pull("t", 0, None)), rtol=1e-6)
    _run(r.push(adam, None, 0, 1, True, [("a", 0, None, np.ones(3, np.float32))]))
    _run(s.push(adam, None, 0, 1, True, [("a", 0, None, np.ones(3, np.float32))]))
    np.testing.assert_allclose(_run(r.pull("a", 0, None)), _run(s.pull("a", 0, None)), rtol=1e-6)
    assert json.loads(adam)["class_name"].lower() == "adam"


def test_gradient_rows_are_summed_per_unique_row_and_mapped_to_global_rows():
    step = ps_variable.Step()
    var = ps_variable.ShardedVariable("k", "table", [10, 2], "float32", True, [(0, 0, 5), (1, 5, 5)], [None, None])
    step.locals["k"] = (None, np.array([1, 6, 8]))                # the step pulled global rows 1, 6, 8
    g = tw.IndexedSlices(tw.constant(np.arange(8, dtype=np.float32).reshape(4, 2)), tw.constant([2, 0, 2, 1]),
                         [3, 2])
    rows, values = ps_variable._rows_of(var, step, g)
    np.testing.assert_array_equal(rows, [1, 6, 8])
    np.testing.assert_array_equal(values, [[2, 3], [6, 7], [0 + 4, 1 + 5]])
    rows, values = ps_variable._rows_of(var, None, tw.constant(np.ones((10, 2), np.float32)))
    assert rows is None and values.shape == (10, 2)


def test_a_pushed_rate_is_applied_and_a_new_rate_keeps_the_optimizers_state():
    # the coordinator's optimizer.learning_rate = x reaches the server with each push; the
    # optimizer (its slots, its step count) stays the same one, as on one process
    s = _server()
    momentum = [ps_variable.optimizer_key(tw.keras.optimizers.SGD(rate, momentum=0.5)) for rate in (0.5, 0.1)]
    g = [("d", 0, None, np.ones(3, np.float32))]
    _run(s.push(momentum[0], 0, 0, 1, True, g, 0.5))
    _run(s.push(momentum[1], 1, 0, 1, True, g, 0.1))              # the copy's config says 0.1; the push too
    _run(s.push(momentum[0], 2, 0, 1, True, g, 0.25))             # a stale copy's config: the pushed rate wins
    w = tw.Variable(np.ones(3, np.float32))
    ref = tw.keras.optimizers.SGD(0.5, momentum=0.5)
    for rate in (0.5, 0.1, 0.25):
        ref.learning_rate = rate
        ref.apply_gradients([(tw.constant(np.ones(3, np.float32)), w)])
    np.testing.assert_allclose(_run(s.pull("d", 0, None)), w.numpy(), rtol=1e-6)
    assert len(s._optimizers) == 1 and int(s._optimizer(momentum[1]).iterations.numpy()) == 3

