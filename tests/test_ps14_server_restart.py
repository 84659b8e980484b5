"""A parameter server journals every change since its last save, so a restarted one (Ray's
restart runs ``ParameterServer(index, path)``) comes back with exactly its state, half-complete
rounds included (the Ray test, ``kill -9`` mid-round, is in ``test_ps14_ray.py``)."""
import asyncio

import numpy as np

import tensorweave as tw
from tensorweave.distribute.ps import variable as ps_variable
from tensorweave.distribute.ps.server import ParameterServer

SGD = ps_variable.optimizer_key(tw.keras.optimizers.SGD(0.5))


def _run(coro):
    return asyncio.run(coro)


def _push(server, round, slot, rows, value):
    return _run(server.push(SGD, round, slot, 2, True, [("t", 0, np.array(rows), np.full((len(rows), 2), value,
                                                                                      np.float32)),
                                                        ("d", 0, None, np.full(3, value, np.float32))]))


def test_a_restarted_server_replays_its_journal_and_keeps_half_complete_rounds(tmp_path):
    path = str(tmp_path / "ps-0.safetensors")
    s = ParameterServer(0, path)
    _run(s.create("t", 0, np.arange(12, dtype=np.float32).reshape(6, 2), "table"))
    _run(s.create("d", 0, np.ones(3, np.float32), "dense"))
    _push(s, 0, 0, [1, 4], 1.0)
    _push(s, 0, 1, [4], 3.0)                   # round 0 applied
    _push(s, 1, 0, [2], 2.0)                   # round 1 half done when the save is taken
    assert _run(s.save()) == 1
    _push(s, 2, 1, [5], 4.0)                   # after the save: only in the journal
    with open(path + ".journal", "ab") as f:   # a record cut short by the kill
        f.write(b"\x40\x00\x00\x00\x00\x00\x00\x00{\"op\": \"pu")
    r = ParameterServer(0, path)
    assert r.restored and r.version == 1
    for server in (s, r):                      # the other workers' pushes complete the rounds
        _push(server, 1, 1, [0, 2], 5.0)
        _push(server, 2, 0, [3], 6.0)
        assert server.version == 3
    for key in ("t", "d"):
        np.testing.assert_array_equal(_run(r.pull(key, 0, None)), _run(s.pull(key, 0, None)))
    assert int(r._optimizer(SGD).iterations.numpy()) == 3


def test_global_steps_of_asynchronous_pushes_survive_a_save_and_a_journal_replay(tmp_path):
    # server 0 numbers the asynchronous steps of an optimizer with a schedule (TF's one iterations
    # variable); a push applies at its global step: a schedule's rate there, whatever this server saw
    decay = ps_variable.optimizer_key(tw.keras.optimizers.SGD(
        tw.keras.optimizers.schedules.ExponentialDecay(1.0, decay_steps=1, decay_rate=0.5)))
    path = str(tmp_path / "ps-0.safetensors")
    s = ParameterServer(0, path)
    _run(s.create("d", 0, np.zeros(2, np.float32), "dense"))
    assert [_run(s.take_step(decay)) for _ in range(3)] == [0, 1, 2]
    assert _run(s.take_step(SGD)) == 0                              # counted per optimizer
    _run(s.save())
    assert _run(s.take_step(decay)) == 3                            # after the save: in the journal only
    _run(s.push(decay, None, 0, 1, True, [("d", 0, None, np.ones(2, np.float32))], None, 3))
    np.testing.assert_allclose(s._var("d", 0).numpy(), [-0.125, -0.125])     # rate 0.5 ** 3, not 0.5 ** 0
    r = ParameterServer(0, path)
    np.testing.assert_allclose(r._var("d", 0).numpy(), [-0.125, -0.125])
    assert _run(r.take_step(decay)) == 4 and _run(r.take_step(SGD)) == 1
