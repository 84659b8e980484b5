"""MultiWorkerMirroredStrategy on local Ray: callbacks on the driver with the global logs,
sharded validation, a worker killed (SIGKILL) mid-training — restarted and resumed from the
latest checkpoint, or elastic (the state re-boxed onto the survivors, the lost worker joining
again) — with the final weights of a run without the failure, and compressed gradients."""
import os
import signal
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tensorweave as tw  # noqa: E402
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402
from tensorweave.distribute.ray import multi_worker_replica  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
keras = tw.keras


@pytest.fixture(scope="module")
def cluster():
    c = ray_cluster.connect(num_workers=2, timeout=120)
    yield c
    ray_cluster.shutdown()


def _strategy(**kw):
    return tw.distribute.MultiWorkerMirroredStrategy(tw.distribute.RayClusterResolver(num_workers=2), **kw)


def _data(n=30):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 3)).astype(np.float32)
    y = (x @ rng.standard_normal((3, 2)) + 0.1).astype(np.float32)
    return x, y


def _model(optimizer="sgd", metrics=None):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(2)])
    model.compile(optimizer=optimizer, loss="mse", metrics=metrics)
    return model


def _same(a, b, rtol=2e-5):
    for u, v in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(u, v, rtol=rtol, atol=1e-7)


class _Record(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches, self.epochs, self.kernels = [], [], []

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append((batch, dict(logs)))
        self.kernels.append(self.model.layers[0].kernel.numpy().copy())     # the driver's model follows the workers

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append((epoch, dict(logs)))


def _pid(worker):
    return os.getpid()


class _KillAt(keras.callbacks.Callback):
    """SIGKILLs rank ``rank``'s process after global batch ``batch`` of ``epoch`` (once)."""

    def __init__(self, cluster, epoch, batch, rank=1):
        super().__init__()
        self.cluster, self.at, self.rank, self.epoch, self.done = cluster, (epoch, batch), rank, None, False

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if not self.done and (self.epoch, batch) == self.at:
            self.done = True
            os.kill(self.cluster.run(_pid, ranks=[self.rank])[0], signal.SIGKILL)


def test_callbacks_run_on_the_driver_with_the_global_logs(cluster):
    # 24 rows, batches of 7 (4 + 3 rows per worker, the last 2 + 1); validation 6 rows sharded 3 + 3
    x, y = _data()
    ref, rec_ref = _model("adam", ["mae"]), _Record()
    sched = lambda epoch, lr: lr * 0.5  # noqa: E731
    want = ref.fit(x, y, batch_size=7, epochs=2, shuffle=False, verbose=0, validation_split=0.2,
                   callbacks=[rec_ref, keras.callbacks.LearningRateScheduler(sched)])
    strategy = _strategy()
    with strategy.scope():
        model = _model("adam", ["mae"])
    rec = _Record()
    got = model.fit(x, y, batch_size=7, epochs=2, shuffle=False, verbose=0, validation_split=0.2,
                    callbacks=[rec, keras.callbacks.LearningRateScheduler(sched)])
    _same(model, ref)                 # the halved learning rate reached the workers
    assert [b for b, _ in rec.batches] == [b for b, _ in rec_ref.batches] == [0, 1, 2, 3] * 2
    for (_, a), (_, b) in zip(rec.batches + rec.epochs, rec_ref.batches + rec_ref.epochs):
        assert a.keys() == b.keys()
        for k in b:       # loss and mae over both workers' rows (mae's state summed), val_* over both shards
            np.testing.assert_allclose(a[k], b[k], rtol=2e-5, err_msg=k)
    for a, b in zip(rec.kernels, rec_ref.kernels):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)
    assert got.history.keys() == want.history.keys() == {"loss", "mae", "val_loss", "val_mae", "learning_rate"}
    # EarlyStopping stops the workers too (no epoch improves the loss by min_delta=1)
    stop = keras.callbacks.EarlyStopping("loss", patience=0, min_delta=1.0)
    assert model.fit(x, y, batch_size=7, epochs=5, verbose=0, callbacks=[stop]).epoch == [0, 1]


def test_a_killed_worker_is_restarted_and_the_fit_resumes_from_the_backup(cluster, tmp_path):
    x, y = _data()

    def run(callbacks, failure_config=None):
        strategy = _strategy(failure_config=failure_config)
        with strategy.scope():
            model = _model("adam")
        np.random.seed(0)                       # the shuffling seed the workers get
        return model, model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=callbacks)
    clean, clean_history = run([])
    # 4 steps per epoch, a backup every 3 steps: the latest before the kill (after step 2 of
    # epoch 1) is the one after step 1 of epoch 1; the fit resumes at step 2 of epoch 1
    backup = keras.callbacks.BackupAndRestore(tmp_path / "backup", save_freq=3)
    pids = cluster.run(_pid)
    model, history = run([backup, _KillAt(cluster, epoch=1, batch=2)], tw.distribute.FailureConfig(max_failures=1))
    new_pids = cluster.run(_pid)
    assert new_pids[0] == pids[0] and new_pids[1] != pids[1]          # rank 1 was restarted
    _same(model, clean)                                              # no batch trained twice or skipped
    assert history.epoch == [0, 1, 2]
    for e in (0, 2):        # epoch 1's logged loss covers the steps after the backup only
        np.testing.assert_allclose(history.history["loss"][e], clean_history.history["loss"][e], rtol=2e-5)
    assert int(model.optimizer.iterations.numpy()) == 4 * 3
    # without a failure left, the death is an error naming the ranks
    strategy = _strategy()
    with strategy.scope():
        doomed = _model()
    with pytest.raises((ray.exceptions.RayActorError, tw.distribute.CollectiveAbortedError)) as info:
        doomed.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[_KillAt(cluster, 0, 1)])
    assert "max_failures=0" in "".join(getattr(info.value, "__notes__", []))
    cluster.restart_worker(1)


def test_a_restart_without_a_checkpoint_starts_the_fit_again(cluster):
    x, y = _data()
    ref = _model("sgd")
    ref.fit(x, y, batch_size=10, epochs=2, shuffle=False, verbose=0)
    strategy = _strategy(failure_config=tw.distribute.FailureConfig(max_failures=1))
    with strategy.scope():
        model = _model("sgd")
    history = model.fit(x, y, batch_size=10, epochs=2, shuffle=False, verbose=0, callbacks=[_KillAt(cluster, 1, 0)])
    _same(model, ref)
    assert history.epoch == [0, 1]


def _die_in_step(rank, epoch, step):
    """A pipeline function that SIGKILLs the worker of ``rank`` while it reads the batch of
    ``(epoch, step)``: the death comes in the middle of a multi-step call."""
    def hook(x):
        ctx = multi_worker_replica.replica_context()
        if ctx is not None and (ctx.rank, ctx.epoch, ctx.step) == (rank, epoch, step):
            os.kill(os.getpid(), signal.SIGKILL)
        return x
    return hook


@pytest.mark.parametrize("rejoin", [False, True])
def test_elastic_training_continues_on_the_survivors_without_a_restart(cluster, rejoin):
    x, y = _data(40)
    ds = tw.data.Dataset.from_tensor_slices((x, y)).batch(8)
    ref = _model("adam")
    ref.fit(ds, epochs=3, verbose=0)
    hook = _die_in_step(rank=1, epoch=0, step=2)
    killing = ds.map(lambda a, b: (tw.reshape(tw.numpy_function(hook, [a], tw.float32), [-1, 3]), b))
    strategy = _strategy(failure_config=tw.distribute.FailureConfig(max_failures=1, elastic=True, rejoin=rejoin))
    with strategy.scope():
        model = _model("adam")
    pid0 = cluster.run(_pid, ranks=[0])[0]
    history = model.fit(killing, epochs=3, verbose=0)
    assert cluster.run(_pid, ranks=[0])[0] == pid0                     # rank 0 was never restarted
    _same(model, ref)              # the same global batches: rank 0 took rank 1's rows from step 2 on
    np.testing.assert_allclose(history.history["loss"], ref.history.history["loss"], rtol=2e-5)
    if rejoin:                     # rank 1 rejoined at epoch 1 and holds the same state
        assert cluster.run(multi_worker_replica.progress) == [(2, 5, 15)] * 2
    else:                          # rank 1 stayed lost: rank 0 alone did epochs 1 and 2
        assert cluster.run(multi_worker_replica.progress, ranks=[0]) == [(2, 5, 15)]
        cluster.restart_worker(1)


@pytest.mark.parametrize("compression,rtol", [("bf16", 2e-2), ("fp16", 2e-3), ("int8", 2e-2)])
def test_compressed_gradients_follow_the_uncompressed_loss_curve(cluster, compression, rtol):
    x, y = _data(64)
    plain = _strategy()
    with plain.scope():
        base = _model(keras.optimizers.SGD(0.05))
    want = base.fit(x, y, batch_size=16, epochs=4, shuffle=False, verbose=0).history["loss"]
    options = tw.distribute.experimental.CommunicationOptions(compression=compression)
    squeezed = _strategy(communication_options=options)
    with squeezed.scope():
        model = _model(keras.optimizers.SGD(0.05))
    got = model.fit(x, y, batch_size=16, epochs=4, shuffle=False, verbose=0).history["loss"]
    # the stated tolerance: every epoch's loss within rtol of uncompressed training's
    np.testing.assert_allclose(got, want, rtol=rtol)
    assert got[-1] < got[0] * 0.8                                      # and it does learn
    sent, full = squeezed.last_fit_traffic["sent"], squeezed.last_fit_traffic["uncompressed"]
    assert plain.last_fit_traffic["sent"] == plain.last_fit_traffic["uncompressed"] == full
    ratio = {"bf16": 2, "fp16": 2, "int8": 4}[compression]
    grads = 4 * (3 * 4 + 4 + 4 * 2 + 2)              # float32 gradient bytes of one contribution
    steps = 2 * 4 * 4                                 # 2 workers x 4 steps x 4 epochs
    assert full == steps * (grads + 8) and sent < full
    assert sent == steps * (grads // ratio + (4 if compression == "int8" else 0) + 8)    # + one int8 block scale


class _OwnStep(keras.Sequential):
    """A model with its own train_step (Keras' "customizing fit" pattern)."""

    def train_step(self, data):
        x, y = data
        with tw.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = tw.reduce_mean(tw.square(y_pred - y))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self._loss_tracker.update_state(loss)
        return {"loss": self._loss_tracker.result()}


def test_a_model_with_its_own_train_step_keeps_it_on_the_workers(cluster):
    x, y = _data()

    def model():
        keras.utils.set_random_seed(1)
        m = _OwnStep([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(2)])
        m.compile("adam", "mae")      # the step trains on its own loss (mse), not the compiled one
        return m
    strategy = _strategy()
    with strategy.scope():
        got_model = model()
    # 24 rows in batches of 7: shards of 4 and 3 rows (the last 2 and 1), so the gradients must be
    # weighted by the rows to give the global batch's; 16 rows in batches of 8: even shards, so the
    # combined loss tracker (a mean of the workers' means) is the batch's loss too
    got_model.fit(x[:24], y[:24], batch_size=7, epochs=2, shuffle=False, verbose=0)
    ref = model()
    ref.fit(x[:24], y[:24], batch_size=7, epochs=2, shuffle=False, verbose=0)
    _same(got_model, ref)
    got = got_model.fit(x[:16], y[:16], batch_size=8, epochs=1, shuffle=False, verbose=0)
    want = ref.fit(x[:16], y[:16], batch_size=8, epochs=1, shuffle=False, verbose=0)
    _same(got_model, ref)
    np.testing.assert_allclose(got.history["loss"], want.history["loss"], rtol=2e-5)
