"""ParameterServerStrategy on Ray: the DeepFM example's model with its tables sharded over two
parameter servers. Synchronous rounds equal single-process steps on the concatenated batch
(rtol 2e-5), also when a worker is killed (-9) mid-step and its step re-run; asynchronous
training lowers the loss; each server holds only its shards, a worker only the rows it touched;
errors name what went wrong."""
import importlib.util
import os
import pathlib
import signal
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tensorweave as tw  # noqa: E402
from tensorweave.distribute.ps import variable as ps_variable  # noqa: E402
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402

_path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "ps_recommendation.py"
_spec = importlib.util.spec_from_file_location("ps_recommendation", _path)
ex = importlib.util.module_from_spec(_spec)
sys.modules["ps_recommendation"] = ex
_spec.loader.exec_module(ex)
# the workers cannot import this module or the example: their functions travel by value
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(ex)

ROWS, FIELDS, DIM, BATCH, ROUNDS = 60, 3, 4, 8, 3


@pytest.fixture(scope="module")
def cluster():
    c = ray_cluster.connect(num_workers=2, timeout=120)
    yield c
    ray_cluster.shutdown()


# one strategy (two server actors) per mode for the module: each test builds its own model,
# whose variables are new ones on the same servers
@pytest.fixture(scope="module")
def sync_strategy(cluster):
    strategy = _strategy(True)
    yield strategy
    strategy.shutdown()


@pytest.fixture(scope="module")
def async_strategy(cluster, tmp_path_factory):
    strategy = _strategy(False, checkpoint_dir=str(tmp_path_factory.mktemp("ps")))
    yield strategy
    strategy.shutdown()


def _strategy(synchronous, num_ps=2, partitioner=None, **kw):
    resolver = tw.distribute.cluster_resolver.SimpleClusterResolver(
        tw.train.ClusterSpec({"worker": ["w0", "w1"], "ps": [f"ps{i}" for i in range(num_ps)]}))
    partitioner = partitioner or tw.distribute.experimental.partitioners.FixedShardsPartitioner(num_ps)
    return tw.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner,
                                                              synchronous=synchronous, **kw)


def _model():
    tw.keras.utils.set_random_seed(3)
    model = ex.DeepFM(ROWS, dim=DIM, hidden=(8,))
    model(np.zeros((1, FIELDS), np.int64))
    return model


def _data():
    return ex.click_data(ROWS, 2 * BATCH * ROUNDS, fields=FIELDS, seed=5)


def _reference(weights, rounds=ROUNDS):
    """Single-process training on the concatenated batches, from ``weights``."""
    ids, clicks = _data()
    model = _model()
    model.set_weights(weights)
    opt = tw.keras.optimizers.Adam(0.05)
    losses = []
    for r in range(rounds):
        x, y = ids[r * 2 * BATCH:(r + 1) * 2 * BATCH], clicks[r * 2 * BATCH:(r + 1) * 2 * BATCH]
        with tw.GradientTape() as tape:
            loss = ex.loss_fn(model, x, y)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        losses.append(float(loss))
    return model.get_weights(), losses


def _train_sync(strategy, step_factory=ex.make_step, rounds=ROUNDS):
    """Synchronous training on 2 workers; returns (initial weights, final weights, losses, coordinator)."""
    with strategy.scope():
        model = _model()
        optimizer = tw.keras.optimizers.Adam(0.05)
    initial = [v.numpy() for v in model.weights]
    coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    ids, clicks = _data()
    dataset = coordinator.create_per_worker_dataset(lambda ctx: ex.worker_batches(ids, clicks, BATCH, ctx))
    iterator = iter(dataset)
    step = step_factory(model, optimizer)
    values = [coordinator.schedule(step, args=(iterator,)) for _ in range(2 * rounds)]
    coordinator.join()
    losses = coordinator.fetch(values)
    final = [v.numpy() for v in model.weights]
    coordinator.shutdown()
    return initial, final, losses, coordinator


def _assert_close(got, want):
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)


def test_synchronous_rounds_equal_single_process_training(sync_strategy):
    initial, final, losses, _ = _train_sync(sync_strategy)
    want, want_losses = _reference(initial)
    _assert_close(final, want)
    assert not np.allclose(final[0], initial[0])                      # the table did train
    # a round's loss is the mean of its two workers' losses: the loss of the concatenated batch
    np.testing.assert_allclose(np.mean(np.reshape(losses, (ROUNDS, 2)), axis=1), want_losses, rtol=2e-5)


def _killing_step(model, optimizer):
    """The example's step, but the process of worker 1 kills itself (-9) in the middle of its
    second step (rows pulled, gradients not yet pushed), once."""
    inner = ex.make_step(model, optimizer)
    marker = os.environ["TW_PS14_KILL_MARKER"]          # read here, on the coordinator

    def step(iterator):
        s = ps_variable.current_step()
        if s.worker == 1 and s.number == 3 and not os.path.exists(marker):
            original = optimizer.apply_gradients

            def die(*a, **k):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
                return original(*a, **k)
            optimizer.apply_gradients = die
            try:
                return inner(iterator)
            finally:
                optimizer.apply_gradients = original
        return inner(iterator)
    return step


def test_a_killed_worker_is_restarted_and_its_step_rerun_with_the_same_batch(sync_strategy, tmp_path, monkeypatch):
    marker = tmp_path / "killed"
    monkeypatch.setenv("TW_PS14_KILL_MARKER", str(marker))
    initial, final, losses, coordinator = _train_sync(sync_strategy, _killing_step)
    assert marker.exists() and coordinator.restarts == [0, 1]
    want, want_losses = _reference(initial)
    _assert_close(final, want)
    np.testing.assert_allclose(np.mean(np.reshape(losses, (ROUNDS, 2)), axis=1), want_losses, rtol=2e-5)


def test_asynchronous_training_lowers_the_loss(async_strategy):
    with async_strategy.scope():
        model = ex.DeepFM(ROWS, dim=DIM, hidden=(8,))
        model(np.zeros((1, FIELDS), np.int64))
        optimizer = tw.keras.optimizers.Adagrad(0.2)
    coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(async_strategy)
    ids, clicks = ex.click_data(ROWS, 4096, fields=FIELDS, seed=7)
    iterator = iter(coordinator.create_per_worker_dataset(
        lambda ctx: ex.worker_batches(ids, clicks, 64, ctx).repeat()))
    step = ex.make_step(model, optimizer)
    losses = coordinator.fetch([coordinator.schedule(step, args=(iterator,)) for _ in range(40)])
    coordinator.shutdown()
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    assert last < 0.9 * first, (first, last)


def test_a_million_row_table_is_never_whole_in_one_process(async_strategy):
    rows = 1_000_000
    with async_strategy.scope():
        model = ex.DeepFM(rows, dim=32, hidden=(8,))
        model(np.zeros((1, FIELDS), np.int64))
        optimizer = tw.keras.optimizers.Adagrad(0.1)
    table = model.embedding.embeddings
    assert isinstance(table, tw.distribute.ShardedVariable) and table.shard_shapes == [(500000, 32)] * 2
    assert not hasattr(table, "_value")                      # the coordinator's object is only a layout
    name = table.name[:-2]
    held = async_strategy.server_shapes()
    mine = [{k: v for k, v in shapes.items() if k.startswith(name + "/")} for shapes in held]
    assert [len(m) for m in mine] == [1, 1]                   # each server one half, not the other's
    assert {**mine[0], **mine[1]} == {f"{name}/part_0": (500000, 32), f"{name}/part_1": (500000, 32)}
    ids, clicks = ex.click_data(rows, 64, fields=FIELDS, seed=2)

    def step(iterator):
        x, y = next(iterator)
        with tw.GradientTape() as tape:
            loss = ex.loss_fn(model, x, y)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        # what this worker pulled: its variables for the step
        pulled = {k: v.shape.as_list() for k, (v, _) in ps_variable.current_step().locals.items()}
        return pulled, grads[0].values.shape, x

    coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(async_strategy)
    iterator = iter(coordinator.create_per_worker_dataset(lambda ctx: ex.worker_batches(ids, clicks, 16, ctx)))
    before = table.sparse_read(ids[:32]).numpy()
    pulled, grad_rows, batch = coordinator.fetch(coordinator.schedule(step, args=(iterator,)))
    coordinator.shutdown()
    assert pulled[table._key] == [len(np.unique(batch)), 32]  # only the unique rows of the batch travelled
    assert grad_rows[0] == 16 * FIELDS
    after = table.sparse_read(ids[:32]).numpy()
    assert not np.allclose(before, after)


def test_errors_of_a_step_surface_with_their_type_and_the_workers_rank(async_strategy):
    with async_strategy.scope():
        table = tw.keras.layers.Embedding(10, 2)
        table.build(None)
    coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(async_strategy)

    def lookup(ids):
        return table(np.asarray(ids))

    value = coordinator.schedule(lookup, args=([3, 12],))
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"id 12 is out of range for the sharded table "
                       r"'embedding(_\d+)?/embeddings' of shape \[10, 2\]") as info:
        value.fetch()
    assert info.value.rank in (0, 1)
    with pytest.raises(tw.errors.InvalidArgumentError):      # join raises the first error once
        coordinator.join()
    coordinator.join()

    def build_on_the_worker():
        tw.keras.layers.Dense(3)(np.zeros((1, 2), np.float32))

    with pytest.raises(RuntimeError, match=r"created the weight .*kernel' \[2, 3\] on a worker. Hint: build the "
                       r"model inside strategy.scope\(\)"):
        coordinator.fetch(coordinator.schedule(build_on_the_worker))
    with pytest.raises(RuntimeError):
        coordinator.join()
    # the coordinator reads the table itself (no gradient there)
    np.testing.assert_array_equal(coordinator.fetch(coordinator.schedule(lookup, args=([1, 2],))),
                                  table(np.array([1, 2])).numpy())
    coordinator.shutdown()


def test_a_killed_server_is_restarted_from_its_last_checkpoint(async_strategy):
    with async_strategy.scope():
        model = ex.DeepFM(ROWS, dim=DIM, hidden=(8,))
        model(np.zeros((1, FIELDS), np.int64))
        optimizer = tw.keras.optimizers.Adagrad(0.2)
    async_strategy.save()
    saved = [v.numpy() for v in model.weights]
    coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(async_strategy)
    ids, clicks = ex.click_data(ROWS, 1024, fields=FIELDS, seed=9)
    iterator = iter(coordinator.create_per_worker_dataset(
        lambda ctx: ex.worker_batches(ids, clicks, 32, ctx).repeat()))
    step = ex.make_step(model, optimizer)
    coordinator.fetch([coordinator.schedule(step, args=(iterator,)) for _ in range(4)])
    trained = [v.numpy() for v in model.weights]
    server = async_strategy.parameter_servers[0]
    _, pid, restored = ray.get(server.ping.remote())
    assert not restored
    os.kill(pid, signal.SIGKILL)
    # Ray restarts the server, which loads its last save and replays its journal of the changes
    # since; calls to it wait and are sent again
    now = [v.numpy() for v in model.weights]
    _, new_pid, restored = ray.get(server.ping.remote())
    assert new_pid != pid and restored
    assert not np.array_equal(trained[0], saved[0])
    for a, b in zip(now, trained):                           # nothing lost
        np.testing.assert_array_equal(a, b)
    losses = coordinator.fetch([coordinator.schedule(step, args=(iterator,)) for _ in range(4)])
    coordinator.shutdown()
    assert np.all(np.isfinite(losses))


def test_a_synchronous_step_that_raises_still_completes_its_round(sync_strategy):
    with sync_strategy.scope():
        model = _model()
        optimizer = tw.keras.optimizers.SGD(0.1)
    ids, clicks = _data()
    inner = ex.make_step(model, optimizer)

    def step(iterator):
        if ps_variable.current_step().number == 1:
            raise ValueError("bad batch")
        return inner(iterator)

    def twice(iterator):
        x, y = next(iterator)
        with tw.GradientTape() as tape:
            loss = ex.loss_fn(model, x, y)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    def two_batches(iterator):
        inner(iterator)
        return inner(iterator)

    coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(sync_strategy)
    iterator = iter(coordinator.create_per_worker_dataset(
        lambda ctx: ex.worker_batches(ids, clicks, BATCH, ctx).repeat()))
    values = [coordinator.schedule(step, args=(iterator,)) for _ in range(4)]    # rounds 0 and 1
    with pytest.raises(ValueError, match="bad batch") as info:
        coordinator.join()                        # no hang: worker 1 still reported to round 0
    assert info.value.rank == 1
    assert np.isfinite(values[0].fetch()) and np.isfinite(values[3].fetch())
    with pytest.raises(tw.errors.FailedPreconditionError, match="apply_gradients was called twice in one step"):
        coordinator.fetch([coordinator.schedule(twice, args=(iterator,)) for _ in range(2)])
    with pytest.raises(tw.errors.FailedPreconditionError):
        coordinator.join()
    with pytest.raises(tw.errors.FailedPreconditionError, match=r"embeddings': looked up again in the same step with "
                       r"ids not pulled by its first lookup. Hint: look a table up once per step"):
        coordinator.fetch([coordinator.schedule(two_batches, args=(iterator,)) for _ in range(2)])
    with pytest.raises(tw.errors.FailedPreconditionError):
        coordinator.join()
    coordinator.shutdown()
