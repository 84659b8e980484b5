"""Synchronous parameter-server training across a server's death: a server journals every change
since its last save, so a restarted one (Ray's restart runs ``ParameterServer(index, path)``)
comes back with exactly its state, half-complete rounds included; on Ray, ``kill -9`` of a server
mid-round leaves the final weights equal to single-process training (rtol 2e-5)."""
import asyncio
import os
import signal
import sys

import numpy as np
import pytest

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


ray = pytest.importorskip("ray")
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ROWS, FIELDS, BATCH, ROUNDS = 30, 3, 6, 3


def _data():
    rng = np.random.default_rng(8)
    ids = rng.integers(0, ROWS, size=(2 * BATCH * ROUNDS, FIELDS)).astype(np.int64)
    return ids, (ids.sum(axis=1) % 2).astype(np.float32)


def _model():
    tw.keras.utils.set_random_seed(5)
    model = tw.keras.Sequential([tw.keras.Input(shape=(FIELDS,), dtype="int64"),
                                 tw.keras.layers.Embedding(ROWS, 4, name="table"), tw.keras.layers.Flatten(),
                                 tw.keras.layers.Dense(1, name="logit")], name="restart")
    return model


def _loss(model, x, y):
    return tw.reduce_mean(tw.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=tw.reshape(model(x), [-1])))


def _step(model, optimizer, x, y):
    with tw.GradientTape() as tape:
        loss = _loss(model, x, y)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def test_kill_9_of_a_server_mid_round_leaves_synchronous_training_equal_to_a_failure_free_run(tmp_path):
    ray_cluster.connect(num_workers=2, timeout=120)
    resolver = tw.distribute.cluster_resolver.SimpleClusterResolver(
        tw.train.ClusterSpec({"worker": ["w0", "w1"], "ps": ["ps0", "ps1"]}))
    strategy = tw.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=tw.distribute.experimental.partitioners.FixedShardsPartitioner(2),
        synchronous=True, checkpoint_dir=str(tmp_path))
    try:
        with strategy.scope():
            model = _model()
            optimizer = tw.keras.optimizers.Adam(0.05)
        initial = [v.numpy() for v in model.weights]
        strategy.save()
        coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        ids, labels = _data()
        iterator = iter(coordinator.create_per_worker_dataset(lambda ctx: tw.data.Dataset.from_tensor_slices(
            (ids, labels)).shard(2, ctx.input_pipeline_id).batch(BATCH)))
        server = strategy.parameter_servers[0]
        _, pid, _ = ray.get(server.ping.remote())

        def step(iterator):
            if ps_variable.current_step().number == 3:      # round 1, worker 1: before it pulls anything
                os.kill(pid, signal.SIGKILL)
            x, y = next(iterator)
            return _step(model, optimizer, x, y)

        coordinator.fetch([coordinator.schedule(step, args=(iterator,)) for _ in range(2 * ROUNDS)])
        _, new_pid, restored = ray.get(server.ping.remote())
        assert new_pid != pid and restored
        final = [v.numpy() for v in model.weights]
        coordinator.shutdown()
    finally:
        strategy.shutdown()
        ray_cluster.shutdown()
    reference = _model()
    reference.set_weights(initial)
    opt = tw.keras.optimizers.Adam(0.05)
    for r in range(ROUNDS):
        _step(reference, opt, ids[r * 2 * BATCH:(r + 1) * 2 * BATCH], labels[r * 2 * BATCH:(r + 1) * 2 * BATCH])
    for a, b in zip(final, reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)
    assert not np.allclose(final[0], initial[0])
