"""Keras callbacks: EarlyStopping, ModelCheckpoint, CSVLogger, ReduceLROnPlateau,
LearningRateScheduler, TerminateOnNaN, LambdaCallback, BackupAndRestore, TensorBoard."""
import csv
import glob
import importlib.util
import json
import os
import struct
import subprocess
import sys
import warnings

import numpy as np
import pytest

from tensorweave import keras
from tensorweave.keras import callbacks as C


@pytest.fixture(autouse=True)
def _fresh_names():
    keras.backend.clear_session()
    keras.utils.set_random_seed(1)


def _data(n=48, d=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (x @ rng.normal(size=(d, 1)) + 0.1 * rng.normal(size=(n, 1))).astype(np.float32)
    return x, y


def _model(lr=0.05, optimizer=None, metrics=None):
    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=optimizer or keras.optimizers.SGD(lr), loss="mse", metrics=metrics)
    return model


class Inject(C.Callback):
    """Puts ``values[epoch]`` into the epoch logs under ``key`` (so a later callback sees it),
    and records the weights at each epoch end."""

    def __init__(self, values, key="score"):
        super().__init__()
        self.values, self.key, self.weights = list(values), key, []

    def on_epoch_end(self, epoch, logs=None):
        logs[self.key] = self.values[epoch]
        self.weights.append(self.model.get_weights())


def _same(ws1, ws2):
    return len(ws1) == len(ws2) and all(np.array_equal(a, b) for a, b in zip(ws1, ws2))


# ---- EarlyStopping ---------------------------------------------------------------------------
def test_early_stopping_patience_restores_best_weights_and_prints(capsys):
    x, y = _data()
    model = _model()
    inject = Inject([5.0, 4.0, 3.0, 3.5, 3.2, 3.1, 2.0, 1.0])
    stop = C.EarlyStopping(monitor="score", mode="min", patience=3, verbose=1, restore_best_weights=True)
    history = model.fit(x, y, epochs=8, batch_size=16, shuffle=False, verbose=0, callbacks=[inject, stop])
    # Best at epoch index 2; epochs 3, 4, 5 don't improve: the third of them stops training.
    assert history.epoch == [0, 1, 2, 3, 4, 5]
    assert stop.stopped_epoch == 5 and stop.best == 3.0 and stop.best_epoch == 2 and model.stop_training
    assert _same(model.get_weights(), inject.weights[2])
    assert not _same(model.get_weights(), inject.weights[5])
    assert capsys.readouterr().out == ("Epoch 6: early stopping\n"
                                       "Restoring model weights from the end of the best epoch: 3.\n")


def test_early_stopping_on_val_loss_auto_mode():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(64, 4)).astype(np.float32), rng.normal(size=(64, 1)).astype(np.float32)
    vx, vy = rng.normal(size=(32, 4)).astype(np.float32), rng.normal(size=(32, 1)).astype(np.float32)
    model = _model(optimizer=keras.optimizers.Adam(0.05))
    record = Inject([0.0] * 40, key="unused")
    stop = C.EarlyStopping(patience=2, restore_best_weights=True)   # monitor="val_loss", mode="auto"
    history = model.fit(x, y, epochs=40, batch_size=16, shuffle=False, validation_data=(vx, vy), verbose=0,
                        callbacks=[record, stop])
    val = history.history["val_loss"]
    best = int(np.argmin(val))
    assert len(val) < 40, "fitting noise must overfit, so val_loss rises and training stops"
    assert stop.best_epoch == best and len(val) == best + 3
    assert _same(model.get_weights(), record.weights[best])


@pytest.mark.parametrize("kwargs, values, stopped", [
    ({}, [5.0, 4.0, 4.5, 4.6, 4.7], 3),                       # patience 2 after the best (epoch 1)
    ({"baseline": 2.0}, [5.0, 4.0, 4.5, 4.6, 4.7], 2),        # improvements that miss the baseline still count
    ({"min_delta": 0.5}, [5.0, 4.9, 4.8, 3.0, 2.9], 2),       # changes < min_delta are no improvement
    ({"start_from_epoch": 2, "patience": 0}, [1.0, 2.0, 3.0, 4.0, 5.0], 3),
])
def test_early_stopping_baseline_min_delta_start_from_epoch(kwargs, values, stopped):
    x, y = _data()
    args = {"monitor": "score", "mode": "min", "patience": 2, **kwargs}
    stop = C.EarlyStopping(**args)
    history = _model().fit(x, y, epochs=5, verbose=0, callbacks=[Inject(values), stop])
    assert stop.stopped_epoch == stopped and history.epoch[-1] == stopped


def test_early_stopping_modes_and_errors():
    x, y = _data()
    model = _model(metrics=["mae"])
    stop = C.EarlyStopping(monitor="score")
    with pytest.raises(ValueError, match="monitor=score, but it isn't able to automatically determine"):
        model.fit(x, y, epochs=2, verbose=0, callbacks=[Inject([1.0, 2.0]), stop])
    # "auto" takes the direction from the compiled metric: accuracy goes up, mae down.
    acc = C.EarlyStopping(monitor="val_accuracy")
    clf = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(2, activation="softmax")])
    clf.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    clf.fit(x, (y[:, 0] > 0).astype(np.int64), epochs=1, validation_split=0.25, verbose=0, callbacks=[acc])
    assert acc.monitor_op is np.greater
    mae = C.EarlyStopping(monitor="mae")
    model.fit(x, y, epochs=1, verbose=0, callbacks=[mae])
    assert mae.monitor_op is np.less
    with pytest.warns(UserWarning, match="EarlyStopping mode 'bogus' is unknown, fallback to auto mode"):
        C.EarlyStopping(mode="bogus")
    missing = C.EarlyStopping(monitor="val_loss")
    with pytest.warns(UserWarning, match="Early stopping conditioned on metric `val_loss` which is not available. "
                                         "Available metrics are: loss,mae"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[missing])


# ---- ModelCheckpoint -------------------------------------------------------------------------
def test_model_checkpoint_formats_file_names(tmp_path):
    x, y = _data()
    model = _model()
    pattern = str(tmp_path / "ckpt" / "{epoch:02d}-{val_loss:.2f}.weights.safetensors")
    history = model.fit(x, y, epochs=3, batch_size=16, validation_split=0.25, verbose=0,
                        callbacks=[C.ModelCheckpoint(pattern, save_weights_only=True)])
    expected = sorted(f"{e + 1:02d}-{v:.2f}.weights.safetensors" for e, v in enumerate(history.history["val_loss"]))
    assert sorted(os.listdir(tmp_path / "ckpt")) == expected
    # The last file holds the final weights.
    fresh = _model()
    fresh.load_weights(str(tmp_path / "ckpt" / expected[-1]))   # "03-..." sorts last
    assert _same(fresh.get_weights(), model.get_weights())


def test_model_checkpoint_save_best_only(tmp_path, capsys):
    x, y = _data()
    model = _model()
    inject = Inject([3.0, 2.0, 2.5, 1.0, 1.5])
    path = str(tmp_path / "best-{epoch}.weights.safetensors")
    ckpt = C.ModelCheckpoint(path, monitor="score", mode="min", save_best_only=True, save_weights_only=True,
                             verbose=1)
    model.fit(x, y, epochs=5, batch_size=16, shuffle=False, verbose=0, callbacks=[inject, ckpt])
    assert sorted(os.listdir(tmp_path)) == [f"best-{e}.weights.safetensors" for e in (1, 2, 4)]
    for e in (1, 2, 4):   # each file holds the weights of its epoch
        fresh = _model()
        fresh.load_weights(path.format(epoch=e))
        assert _same(fresh.get_weights(), inject.weights[e - 1])
    out = capsys.readouterr().out
    assert f"\nEpoch 1: score improved from inf to 3.00000, saving model to {path.format(epoch=1)}\n" in out
    assert "\nEpoch 3: score did not improve from 2.00000\n" in out
    assert f"\nEpoch 4: score improved from 2.00000 to 1.00000, saving model to {path.format(epoch=4)}\n" in out

    # initial_value_threshold: nothing is saved until the value beats it.
    thr = tmp_path / "thr"
    ckpt = C.ModelCheckpoint(str(thr / "t-{epoch}.weights.safetensors"), monitor="score", mode="min",
                             save_best_only=True, save_weights_only=True, initial_value_threshold=2.2)
    _model().fit(x, y, epochs=5, verbose=0, callbacks=[Inject([3.0, 2.0, 2.5, 1.0, 1.5]), ckpt])
    assert sorted(os.listdir(thr)) == ["t-2.weights.safetensors", "t-4.weights.safetensors"]


def test_model_checkpoint_save_freq_in_batches(tmp_path):
    x, y = _data()   # 48 samples, batch 16: 3 batches an epoch
    ckpt = C.ModelCheckpoint(str(tmp_path / "{epoch}-{batch}.weights.safetensors"), save_weights_only=True,
                             save_freq=2)
    _model().fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=[ckpt])
    assert sorted(os.listdir(tmp_path)) == sorted(f"{n}.weights.safetensors" for n in ("1-2", "2-1", "2-3"))


def test_model_checkpoint_paths_and_whole_model(tmp_path):
    with pytest.raises(ValueError, match=r"must end in `\.weights\.safetensors`"):
        C.ModelCheckpoint(str(tmp_path / "w.ckpt"), save_weights_only=True)
    with pytest.raises(ValueError, match="Unrecognized save_freq"):
        C.ModelCheckpoint(str(tmp_path / "w.weights.safetensors"), save_freq="batch")
    x, y = _data()
    model = _model()
    ckpt = C.ModelCheckpoint(str(tmp_path / "w.weights.safetensors"), monitor="loss", save_weights_only=True)
    model.fit(x, y, epochs=1, verbose=0, callbacks=[ckpt])
    with open(tmp_path / "w.weights.safetensors", "rb") as f:
        header_len = struct.unpack("<Q", f.read(8))[0]
        assert json.loads(f.read(header_len))["__metadata__"]["format"] == "tensorweave.weights"
    fresh = _model()
    fresh.load_weights(str(tmp_path / "w.weights.safetensors"))
    assert _same(fresh.get_weights(), model.get_weights())
    # A missing format field names the fields there are.
    with pytest.raises(KeyError, match="Failed to format this callback filepath"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[C.ModelCheckpoint(
            str(tmp_path / "{val_acc}.weights.safetensors"), save_weights_only=True)])
    # Whole-model saving goes through model.save, or says clearly that it does not exist yet.
    ckpt = C.ModelCheckpoint(str(tmp_path / "m-{epoch}.keras"), monitor="loss")
    if not callable(getattr(type(model), "save", None)):
        with pytest.raises(NotImplementedError, match="arrives with the SavedModel format"):
            model.fit(x, y, epochs=1, verbose=0, callbacks=[ckpt])
    saved = []
    model.save = lambda filepath, overwrite=True: saved.append((filepath, overwrite))
    model.fit(x, y, epochs=2, verbose=0, callbacks=[ckpt])
    assert saved == [(str(tmp_path / "m-1.keras"), True), (str(tmp_path / "m-2.keras"), True)]


# ---- CSVLogger -------------------------------------------------------------------------------
def test_csv_logger_content_and_append(tmp_path):
    x, y = _data()
    model = _model(metrics=["mae"])
    path = tmp_path / "log.csv"
    history = model.fit(x, y, epochs=3, batch_size=16, validation_split=0.25, verbose=0,
                        callbacks=[C.CSVLogger(str(path))])
    h = history.history
    keys = ["loss", "mae", "val_loss", "val_mae"]
    expected = "epoch,loss,mae,val_loss,val_mae\r\n" + "".join(
        f"{e}," + ",".join(repr(h[k][e]) for k in keys) + "\r\n" for e in range(3))
    assert path.read_bytes().decode() == expected
    # append=True continues the file without a second header; the separator is configurable.
    history2 = model.fit(x, y, epochs=2, batch_size=16, validation_split=0.25, verbose=0,
                         callbacks=[C.CSVLogger(str(path), append=True)])
    rows = list(csv.reader(open(path, newline="")))
    assert len(rows) == 1 + 3 + 2 and rows[4] == ["0"] + [repr(history2.history[k][0]) for k in keys]
    semi = tmp_path / "semi.csv"
    model.fit(x, y, epochs=1, verbose=0, callbacks=[C.CSVLogger(str(semi), separator=";")])
    assert semi.read_text().splitlines()[0] == "epoch;loss;mae"


# ---- ReduceLROnPlateau / LearningRateScheduler -------------------------------------------------
class LRLog(C.Callback):
    def __init__(self):
        super().__init__()
        self.begin, self.logged = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.begin.append(float(self.model.optimizer.learning_rate.numpy()))

    def on_epoch_end(self, epoch, logs=None):
        self.logged.append(logs.get("learning_rate"))


def test_reduce_lr_on_plateau(capsys):
    x, y = _data()
    model = _model(lr=0.1)
    rec = LRLog()
    reduce = C.ReduceLROnPlateau(monitor="score", factor=0.5, patience=2, cooldown=2, min_lr=0.02, verbose=1)
    model.fit(x, y, epochs=9, verbose=0, callbacks=[Inject([1.0] + [2.0] * 8), reduce, rec])
    f32 = lambda v: float(np.float32(v))  # noqa: E731  (the rate lives in a float32 variable)
    # Best at epoch 0; epochs 1, 2 don't improve -> halve. As in Keras the cooldown counter
    # drops at the start of each epoch end, so cooldown=2 leaves one epoch uncounted.
    assert rec.begin == [f32(v) for v in (0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025)]
    assert rec.logged == rec.begin   # the rate each epoch was trained with
    assert float(model.optimizer.learning_rate.numpy()) == f32(0.02)   # floored at min_lr
    out = capsys.readouterr().out
    assert out.startswith(f"\nEpoch 3: ReduceLROnPlateau reducing learning rate to {f32(0.1) * 0.5}.\n")
    assert f"\nEpoch 6: ReduceLROnPlateau reducing learning rate to {f32(0.05) * 0.5}.\n" in out
    assert "\nEpoch 9: ReduceLROnPlateau reducing learning rate to 0.02.\n" in out


def test_reduce_lr_on_plateau_validates():
    with pytest.raises(ValueError, match="does not support a factor >= 1.0"):
        C.ReduceLROnPlateau(factor=1.5)
    x, y = _data()
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.9)
    model = _model(optimizer=keras.optimizers.SGD(schedule))
    with pytest.raises(TypeError, match="created with a LearningRateSchedule"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[C.ReduceLROnPlateau(monitor="loss")])
    with pytest.raises(TypeError, match="created with a LearningRateSchedule"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[C.LearningRateScheduler(lambda e, lr: lr)])
    with pytest.warns(UserWarning, match="Learning rate reduction is conditioned on metric `val_loss`"):
        _model().fit(x, y, epochs=1, verbose=0, callbacks=[C.ReduceLROnPlateau()])


def test_learning_rate_scheduler_drives_the_compiled_step(capsys):
    # One weight, loss (w - 1)^2 on x = 1: each epoch (one batch) does w -= lr * 2 (w - 1),
    # so the weights show which rate the compiled step really used.
    model = keras.Sequential([keras.Input(shape=(1,)),
                              keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    rates = [0.125, 0.0, 0.25]
    ws, rec = [], LRLog()
    track = C.LambdaCallback(on_epoch_end=lambda epoch, logs: ws.append(float(model.get_weights()[0][0, 0])))
    model.fit(np.ones((1, 1), np.float32), np.ones((1, 1), np.float32), epochs=3, verbose=0,
              callbacks=[C.LearningRateScheduler(lambda epoch, lr: rates[epoch], verbose=1), rec, track])
    assert rec.begin == rates and rec.logged == rates
    assert ws == [0.25, 0.25, 0.625]
    assert capsys.readouterr().out == "".join(
        f"\nEpoch {e + 1}: LearningRateScheduler setting learning rate to {r}.\n" for e, r in enumerate(rates))
    # The old one-argument form, and a schedule that returns something else.
    model.fit(np.ones((1, 1)), np.ones((1, 1)), epochs=2, verbose=0,
              callbacks=[C.LearningRateScheduler(lambda epoch: 0.5 ** epoch), rec])
    assert rec.begin[-2:] == [1.0, 0.5]
    with pytest.raises(ValueError, match="should be a float. Got: fast"):
        model.fit(np.ones((1, 1)), np.ones((1, 1)), epochs=1, verbose=0,
                  callbacks=[C.LearningRateScheduler(lambda epoch, lr: "fast")])


# ---- TerminateOnNaN / LambdaCallback ------------------------------------------------------------
def test_terminate_on_nan(capsys):
    x, y = _data()
    x[37, 0] = np.nan   # sample 37 is in batch 2 (batches of 16, no shuffling)
    ended = []
    end = C.LambdaCallback(on_train_end=lambda logs: ended.append(True))
    history = _model().fit(x, y, epochs=4, batch_size=16, shuffle=False, verbose=0,
                           callbacks=[C.TerminateOnNaN(), end])
    assert capsys.readouterr().out == "Batch 2: Invalid loss, terminating training\n"
    assert history.epoch == [0] and np.isnan(history.history["loss"][0]) and ended == [True]
    # raise_error: no graceful stop, so on_train_end is skipped (a backup would be kept).
    ended.clear()
    with pytest.raises(RuntimeError, match="NaN or Inf loss encountered at batch 2"):
        _model().fit(x, y, epochs=4, batch_size=16, shuffle=False, verbose=0,
                     callbacks=[C.TerminateOnNaN(raise_error=True), end])
    assert ended == []


def test_lambda_callback_hooks():
    calls = []
    cb = C.LambdaCallback(
        on_train_begin=lambda logs: calls.append("train_begin"),
        on_epoch_begin=lambda epoch, logs: calls.append(f"epoch_begin {epoch}"),
        on_batch_end=lambda batch, logs: calls.append(f"batch_end {batch} {sorted(logs)}"),
        on_epoch_end=lambda epoch, logs: calls.append(f"epoch_end {epoch} {sorted(logs)}"),
        on_test_begin=lambda logs: calls.append("test_begin"),
        on_train_end=lambda logs: calls.append("train_end"))
    x, y = _data(n=32)
    _model().fit(x, y, epochs=2, batch_size=32, validation_data=(x, y), verbose=0, callbacks=[cb])
    assert calls == ["train_begin", "epoch_begin 0", "batch_end 0 ['loss']", "test_begin",
                     "epoch_end 0 ['loss', 'val_loss']", "epoch_begin 1", "batch_end 0 ['loss']", "test_begin",
                     "epoch_end 1 ['loss', 'val_loss']", "train_end"]
    with pytest.raises(TypeError, match="unexpected keyword argument 'on_epoch_ends'"):
        C.LambdaCallback(on_epoch_ends=print)


# ---- BackupAndRestore ----------------------------------------------------------------------------
class Interrupt(C.Callback):
    def __init__(self, epoch, batch):
        super().__init__()
        self.at = (epoch, batch)
        self.epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            raise KeyboardInterrupt("preempted")


def _adam_model():
    return _model(optimizer=keras.optimizers.Adam(0.01))


def test_backup_and_restore_resumes_bit_exact(tmp_path):
    x, y = _data()
    fit = dict(epochs=5, batch_size=16, shuffle=False, verbose=0)
    keras.utils.set_random_seed(7)
    reference = _adam_model()
    ref_history = reference.fit(x, y, **fit)

    backup_dir = tmp_path / "backup"
    keras.utils.set_random_seed(7)
    model = _adam_model()
    # Interrupted in the middle of epoch 3 (0-based): two of its batches already changed
    # the weights and the optimizer's moments, which the resume must undo.
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, callbacks=[C.BackupAndRestore(str(backup_dir)), Interrupt(3, 1)], **fit)
    assert os.listdir(backup_dir) == ["backup.safetensors"]
    history = model.fit(x, y, callbacks=[C.BackupAndRestore(str(backup_dir))], **fit)
    assert history.epoch == [3, 4]
    assert history.history["loss"] == ref_history.history["loss"][3:]
    assert _same(model.get_weights(), reference.get_weights())
    assert _same([v.numpy() for v in model.optimizer.variables], [v.numpy() for v in reference.optimizer.variables])
    assert not backup_dir.exists()   # deleted once training finished

    # In a new process the model and its optimizer are new: the optimizer's slots are made
    # before its first step so the saved moments can be loaded.
    keras.utils.set_random_seed(7)
    model = _adam_model()
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, callbacks=[C.BackupAndRestore(str(backup_dir)), Interrupt(2, 0)], **fit)
    keras.utils.set_random_seed(99)
    fresh = _adam_model()
    assert not fresh.optimizer.built
    history = fresh.fit(x, y, callbacks=[C.BackupAndRestore(str(backup_dir), delete_checkpoint=False)], **fit)
    assert history.epoch == [2, 3, 4]
    assert _same(fresh.get_weights(), reference.get_weights())
    assert os.path.exists(backup_dir / "backup.safetensors")   # kept: delete_checkpoint=False
    # A later fit() without the callback starts from its own initial_epoch again.
    assert fresh.fit(x, y, epochs=1, verbose=0).epoch == [0]


def test_backup_and_restore_file_and_errors(tmp_path):
    from safetensors import safe_open
    x, y = _data()
    backup_dir = tmp_path / "b"
    backup_dir.mkdir()
    (backup_dir / "notes.txt").write_text("mine")
    model = _adam_model()
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, epochs=3, batch_size=16, verbose=0,
                  callbacks=[C.BackupAndRestore(str(backup_dir), save_freq=2), Interrupt(1, 1)])
    # save_freq=2: backups after batches 2 and 4 overall; the last is batch 0 of epoch 1.
    with safe_open(str(backup_dir / "backup.safetensors"), framework="numpy") as f:
        meta = f.metadata()
        keys = set(f.keys())
    assert meta["format"] == "tensorweave.backup"
    assert json.loads(meta["state"]) == {"epoch": 1, "batch": 0, "num_weights": 4, "num_optimizer_variables": 10}
    assert keys == {f"model/{i}" for i in range(4)} | {f"optimizer/{i}" for i in range(10)}
    assert sorted(os.listdir(backup_dir)) == ["backup.safetensors", "notes.txt"]   # no temporary files left
    history = model.fit(x, y, epochs=3, batch_size=16, verbose=0, callbacks=[C.BackupAndRestore(str(backup_dir))])
    assert history.epoch == [1, 2]
    assert os.listdir(backup_dir) == ["notes.txt"]   # only the callback's own file is deleted

    with pytest.raises(ValueError, match="Empty `backup_dir`"):
        C.BackupAndRestore("")
    with pytest.raises(ValueError, match="Invalid value for argument `save_freq`"):
        C.BackupAndRestore(str(tmp_path), save_freq="batch")
    # A backup of another model is refused.
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, epochs=3, verbose=0, callbacks=[C.BackupAndRestore(str(backup_dir)), Interrupt(1, 0)])
    other = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])
    other.compile(optimizer="adam", loss="mse")
    with pytest.raises(ValueError, match="holds 4 weights, model 'sequential_.*' has 2"):
        other.fit(x, y, epochs=3, verbose=0, callbacks=[C.BackupAndRestore(str(backup_dir))])


# ---- TensorBoard ---------------------------------------------------------------------------------
def _read_events(directory):
    """All events of the one event file in ``directory``, with each record's CRCs checked."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
    files = glob.glob(os.path.join(directory, "events.out.tfevents.*.v2"))
    assert len(files) == 1, files
    events = []
    with open(files[0], "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", data[pos + 8:pos + 12])[0] == masked_crc32c(header)
        body = data[pos + 12:pos + 12 + length]
        assert struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])[0] == masked_crc32c(body)
        events.append(event_pb2.Event.FromString(body))
        pos += 16 + length
    return events


def _values(events):
    """{tag: [(step, value array, plugin name)]} of the summaries."""
    from tensorboard.util import tensor_util
    out = {}
    for e in events:
        for v in e.summary.value:
            out.setdefault(v.tag, []).append((e.step, tensor_util.make_ndarray(v.tensor),
                                              v.metadata.plugin_data.plugin_name))
    return out


def test_tensorboard_event_files(tmp_path):
    pytest.importorskip("tensorboard")
    x, y = _data()
    model = _model(metrics=["mae"])
    tb = C.TensorBoard(str(tmp_path / "logs"), histogram_freq=1, update_freq=2)
    history = model.fit(x, y, epochs=3, batch_size=16, validation_split=0.25, verbose=0, callbacks=[tb])
    h = history.history
    assert sorted(os.listdir(tmp_path / "logs")) == ["train", "validation"]
    train = _read_events(str(tmp_path / "logs" / "train"))
    assert train[0].file_version == "brain.Event:2"
    tv = _values(train)
    for name in ("loss", "mae"):
        assert [(s, float(v), p) for s, v, p in tv["epoch_" + name]] == \
            [(e, float(np.float32(h[name][e])), "scalars") for e in range(3)]
    assert [float(v) for _, v, _ in tv["epoch_learning_rate"]] == [float(np.float32(0.05))] * 3
    # 36 training samples, batch 16: 3 batches an epoch, 9 in all; update_freq=2 -> steps 2, 4, 6, 8.
    assert [s for s, _, _ in tv["batch_loss"]] == [2, 4, 6, 8]
    kernel = model.layers[0].weights[0]
    hist = tv[kernel.name.replace(":", "_") + "/histogram"]
    assert [s for s, _, _ in hist] == [0, 1, 2] and hist[0][2] == "histograms"
    table = hist[-1][1]
    assert table.shape == (30, 3) and table[:, 2].sum() == 32
    assert table[0, 0] == kernel.numpy().min() and table[-1, 1] == kernel.numpy().max()
    # The training step's op graph, and the layer graph TensorBoard's Keras view draws.
    from tensorboard.compat.proto import graph_pb2
    graphs = [graph_pb2.GraphDef.FromString(e.graph_def) for e in train if e.graph_def]
    assert len(graphs) == 1 and {"MatMul", "Tanh"} <= {n.op for n in graphs[0].node}
    names = {n.name for n in graphs[0].node}
    assert all(i.lstrip("^").split(":")[0] in names for n in graphs[0].node for i in n.input)
    from tensorboard.plugins.graph import keras_util
    (step, config, plugin), = tv["keras"]
    assert plugin == "graph_keras_model"
    layer_graph = keras_util.keras_model_to_graph_def(json.loads(config.item()))
    assert [n.name for n in layer_graph.node] == [f"{model.name}/{layer.name}" for layer in model.layers]

    vv = _values(_read_events(str(tmp_path / "logs" / "validation")))
    assert [(s, float(v)) for s, v, _ in vv["epoch_loss"]] == [(e, float(np.float32(h["val_loss"][e])))
                                                               for e in range(3)]
    assert [s for s, _, _ in vv["evaluation_loss_vs_iterations"]] == [3, 6, 9]
    assert "epoch_learning_rate" not in vv

    # TensorBoard's own reader sees the same runs (it would import TensorFlow if installed).
    if importlib.util.find_spec("tensorflow") is None:
        from tensorboard.backend.event_processing import event_accumulator as ea
        acc = ea.EventAccumulator(str(tmp_path / "logs" / "train"), size_guidance={ea.TENSORS: 0})
        acc.Reload()
        assert acc.Tags()["graph"] and [e.step for e in acc.Tensors("epoch_loss")] == [0, 1, 2]

    with pytest.raises(ValueError, match="Unrecognized update_freq"):
        C.TensorBoard(str(tmp_path), update_freq="sometimes")
    with pytest.warns(UserWarning, match="profile_batch=2 is not supported"):
        C.TensorBoard(str(tmp_path), profile_batch=2)


_NO_TF_SCRIPT = """
import sys
attempts = []
class NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            attempts.append(name)
            raise ImportError("tensorflow must not be imported")
sys.meta_path.insert(0, NoTensorFlow())
import numpy as np
from tensorweave import keras
model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(np.ones((8, 3)), np.ones((8, 1)), epochs=2, validation_split=0.25, verbose=0,
          callbacks=[keras.callbacks.TensorBoard(sys.argv[1], histogram_freq=1, update_freq="batch")])
print(attempts)
"""


def test_tensorboard_never_imports_tensorflow(tmp_path):
    # In a fresh interpreter, so no earlier import of tensorboard's modules hides an attempt.
    pytest.importorskip("tensorboard")
    out = subprocess.run([sys.executable, "-c", _NO_TF_SCRIPT, str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert sorted(os.listdir(tmp_path)) == ["train", "validation"]


def test_tensorboard_functional_layer_graph_has_edges(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.plugins.graph import keras_util
    a = keras.Input(shape=(4,))
    h = keras.layers.Dense(3, name="hidden")(a)
    out = keras.layers.Dense(1, name="out")(h)
    model = keras.Model(a, out)
    model.compile(optimizer="sgd", loss="mse")
    x, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.fit(x, y, epochs=1, verbose=0, callbacks=[C.TensorBoard(str(tmp_path))])
    (_, config, _), = _values(_read_events(str(tmp_path / "train")))["keras"]
    nodes = {n.name: list(n.input) for n in keras_util.keras_model_to_graph_def(json.loads(config.item())).node}
    assert nodes[f"{model.name}/out"] == [f"{model.name}/hidden"]
