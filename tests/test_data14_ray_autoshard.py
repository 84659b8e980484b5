"""``MultiWorkerMirroredStrategy`` on 2 Ray workers honours a pipeline's ``AutoShardPolicy``:
FILE gives each worker its own files, OFF gives every worker everything, and either way the
final weights equal single-process training on the global batches the workers' pieces make
up (what ``experimental_distribute_dataset`` shows on the driver)."""
import os
import signal
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tensorweave as tw  # noqa: E402
import tensorweave.data  # noqa: E402,F401
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402
from tensorweave.distribute.ray import multi_worker_replica  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
keras = tw.keras
P = tw.data.experimental.AutoShardPolicy


@pytest.fixture(scope="module")
def strategy():
    ray_cluster.connect(num_workers=2, timeout=120)
    yield tw.distribute.MultiWorkerMirroredStrategy(tw.distribute.RayClusterResolver(num_workers=2))
    ray_cluster.shutdown()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """3 files of 7, 4 and 6 numbers (uneven, so the workers run out at different steps)."""
    d = tmp_path_factory.mktemp("autoshard")
    rng = np.random.default_rng(3)
    out = []
    for i, n in enumerate((7, 4, 6)):
        p = d / f"part-{i}.txt"
        p.write_text("".join(f"{v:.6f}\n" for v in rng.standard_normal(n)))
        out.append(str(p))
    return out


def _parse(line):
    v = tw.strings.to_number(line, tw.float32)
    return tw.stack([v, v * v - 0.5]), tw.reshape(2.0 * v + 1.0, [1])


def _pipeline(files, policy, batch=5):
    opts = tw.data.Options()
    opts.experimental_distribute.auto_shard_policy = policy
    return tw.data.TextLineDataset(files).map(_parse).batch(batch).with_options(opts)


def _model():
    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def _global_batches(distributed):
    """The global batch of each step: the workers' pieces, concatenated."""
    out = []
    for step in distributed:
        xs, ys = zip(*step.values)
        out.append((np.concatenate(xs), np.concatenate(ys)))
    return out


def _reference_fit(batches, epochs):
    ref = _model()
    ds = tw.data.Dataset.from_generator(
        lambda: iter(batches), output_signature=(tw.TensorSpec([None, 2], tw.float32),
                                                 tw.TensorSpec([None, 1], tw.float32)))
    history = ref.fit(ds, epochs=epochs, verbose=0)
    return ref, history


def _assert_same_weights(a, b):
    for u, v in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(u, v, rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("policy", [P.FILE, P.AUTO, P.OFF])
def test_fit_follows_the_auto_shard_policy(strategy, files, policy):
    ds = _pipeline(files, policy)
    distributed = strategy.experimental_distribute_dataset(ds)
    batches = _global_batches(distributed)
    rows = sum(len(x) for x, _ in batches)
    if policy == P.OFF:
        assert distributed.policy == P.OFF and rows == 2 * 17          # every worker read everything
    else:
        # FILE (AUTO over files): worker 0 read files 0 and 2 (13 rows), worker 1 file 1 (4 rows);
        # in pieces of 3, 2, 3 ... and 2, 3, ... rows: 5 steps, worker 1 without rows from the 3rd
        assert distributed.policy == P.FILE and rows == 17
        assert [len(x) for x, _ in batches] == [3 + 2, 2 + 2, 3, 2, 3]
    ref, want = _reference_fit(batches, epochs=2)
    with strategy.scope():
        model = _model()
    got = model.fit(distributed if policy == P.FILE else ds, epochs=2, verbose=0)
    _assert_same_weights(model, ref)
    np.testing.assert_allclose(got.history["loss"], want.history["loss"], rtol=2e-5)


def test_data_policy_and_file_errors_on_the_driver(strategy, files):
    # DATA: the existing slicing of each global batch (the single-process fit of the pipeline)
    ds = _pipeline(files, P.DATA)
    ref = _model()
    ref.fit(ds, epochs=1, verbose=0)
    with strategy.scope():
        model = _model()
    model.fit(ds, epochs=1, verbose=0)
    _assert_same_weights(model, ref)
    # FILE on a source without files, and too few files, fail before any worker is asked
    opts = tw.data.Options()
    opts.experimental_distribute.auto_shard_policy = P.FILE
    x = np.zeros((4, 2), np.float32)
    with strategy.scope():
        bad = _model()
    with pytest.raises(tw.errors.NotFoundError, match="unshardable source dataset: TensorSliceDataset"):
        bad.fit(tw.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(2).with_options(opts), verbose=0)
    with pytest.raises(tw.errors.InvalidArgumentError, match="only has 1 file"):
        bad.fit(_pipeline(files[:1], P.AUTO), verbose=0)
    assert os.path.exists(files[0])


def _validation(files, policy):
    """4-row batches of every file's rows (HINT: lines ``i::n`` through a hinted shard)."""
    ds = tw.data.TextLineDataset(files)
    if policy == P.HINT:
        ds = ds.shard(tw.data.experimental.SHARD_HINT, tw.data.experimental.SHARD_HINT)
    opts = tw.data.Options()
    opts.experimental_distribute.auto_shard_policy = policy
    return ds.map(_parse).batch(4).with_options(opts)


def _read_files(worker):
    """The files of the validation pipeline this worker read (its rebuilt copy's reader)."""
    (policy, ds, _), = worker.store["multi_worker_replica"]._val_pipelines.values()
    while not hasattr(ds, "_files"):
        ds = ds._inputs[0]
    return [os.path.basename(f) for f in ds._files]


@pytest.mark.parametrize("policy", [P.FILE, P.OFF, P.HINT])
def test_validation_follows_the_auto_shard_policy(strategy, files, policy):
    # TF (2.21, Keras 3) evaluates validation data through strategy.experimental_distribute_dataset
    # too (keras/src/backend/tensorflow/trainer.py: TFEpochIterator), so the policy applies to it
    with strategy.scope():
        model = _model()
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    got = model.fit(_pipeline(files, P.DATA), epochs=1, validation_data=_validation(files, policy), verbose=0)
    read = strategy.cluster.run(_read_files)
    if policy == P.FILE:
        assert read == [["part-0.txt", "part-2.txt"], ["part-1.txt"]]
    else:                                 # OFF, HINT: every worker opens every file
        assert read == [["part-0.txt", "part-1.txt", "part-2.txt"]] * 2
    ref = _model()
    ref.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    ref.set_weights(model.get_weights())
    loss, mae = ref.evaluate(tw.data.TextLineDataset(files).map(_parse).batch(4), verbose=0)
    np.testing.assert_allclose([got.history["val_loss"][0], got.history["val_mae"][0]], [loss, mae], rtol=2e-5)
    with pytest.raises(tw.errors.InvalidArgumentError, match="only has 1 file"):
        model.fit(_pipeline(files, P.DATA), validation_data=_validation(files[:1], P.FILE), verbose=0)


class _KillAfter(keras.callbacks.Callback):
    """SIGKILLs rank ``rank``'s process after global batch ``batch`` of epoch 0 (from the
    driver, between steps: the point is exact)."""

    def __init__(self, cluster, batch, rank=1):
        super().__init__()
        self.cluster, self.batch, self.rank, self.epoch, self.done = cluster, batch, rank, None, False

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if not self.done and (self.epoch, batch) == (0, self.batch):
            self.done = True
            os.kill(self.cluster.run(lambda w: os.getpid(), ranks=[self.rank])[0], signal.SIGKILL)


def test_a_worker_lost_mid_epoch_leaves_its_pieces_to_a_survivor(strategy, files):
    # FILE: worker 1 reads part-1 alone (pieces of 2 and 2 rows); it dies after step 0 of epoch 0.
    # The epoch keeps its split: rank 0 reads on worker 1's pipeline from step 1 (its last piece
    # joining rank 0's own), so every step trains on the global batch of the run without the
    # failure (a re-split would cut rank 0's 17 rows into batches of 5); rank 1 rejoins at
    # epoch 1, where the split is the 2 workers' again
    ds = _pipeline(files, P.FILE)
    batches = _global_batches(strategy.experimental_distribute_dataset(ds))
    ref, want = _reference_fit(batches, epochs=2)
    elastic = tw.distribute.MultiWorkerMirroredStrategy(
        tw.distribute.RayClusterResolver(num_workers=2),
        failure_config=tw.distribute.FailureConfig(max_failures=1, elastic=True, rejoin=True))
    with elastic.scope():
        model = _model()
    cluster = strategy.cluster
    pids = cluster.run(lambda w: os.getpid())
    got = model.fit(ds, epochs=2, verbose=0, callbacks=[_KillAfter(cluster, batch=0)])
    now = cluster.run(lambda w: os.getpid())
    assert now[0] == pids[0] and now[1] != pids[1]              # rank 1 died and rejoined; rank 0 carried on
    _assert_same_weights(model, ref)
    np.testing.assert_allclose(got.history["loss"], want.history["loss"], rtol=2e-5)
    assert cluster.run(multi_worker_replica.progress) == [(1, 5, 10)] * 2
