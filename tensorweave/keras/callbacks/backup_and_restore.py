"""``BackupAndRestore``: resumes a ``fit()`` that was interrupted, from its last backup.

At the end of each epoch (or every ``save_freq`` batches) the callback writes one file,
``<backup_dir>/backup.safetensors``, holding the model's weights, the optimizer's variables
(step counter, learning rate, slots such as Adam's moments) and the number of epochs done.
It is written to a temporary file and renamed over the old one, so a crash at any moment
leaves either the previous backup or the new one, never a mix. When ``fit()`` starts and a
backup exists, the weights and optimizer state are restored and training continues with the
epoch after the backup. When ``fit()`` finishes, the backup is deleted (``delete_checkpoint``).

>>> import tempfile
>>> import numpy as np
>>> from tensorweave import keras
>>> keras.utils.set_random_seed(0)
>>> model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
>>> model.compile(optimizer="adam", loss="mse")
>>> class Interrupt(keras.callbacks.Callback):
...     def on_epoch_begin(self, epoch, logs=None):
...         if epoch == 2:
...             raise RuntimeError("interrupted")
>>> backup = keras.callbacks.BackupAndRestore(tempfile.mkdtemp())
>>> x, y = np.ones((8, 3)), np.ones((8, 1))
>>> try:
...     model.fit(x, y, epochs=4, callbacks=[backup, Interrupt()], verbose=0)
... except RuntimeError:
...     pass
>>> history = model.fit(x, y, epochs=4, callbacks=[backup], verbose=0)
>>> history.epoch  # epochs 0 and 1 were done before the interruption
[2, 3]
"""
import json
import os

import numpy as np

from tensorweave.keras.callbacks.callback import Callback
from tensorweave.saving.tensor_file import read_metadata, read_tensors, write_tensors
from tensorweave.saving.validation import parse_json

_FORMAT = "tensorweave.backup"


class BackupAndRestore(Callback):
    """Backs up the training state so an interrupted ``fit()`` can resume where it stopped.

    Args (Keras 3):
        backup_dir: the folder for the backup (created when needed). Use one folder per
            training run; only the callback's own file is deleted from it.
        save_freq: "epoch" (back up at each epoch end) or an integer: also back up every
            that many training batches. A mid-epoch backup resumes at the start of its epoch,
            so the batches of that epoch before the backup are trained on twice (as in Keras).
        delete_checkpoint: delete the backup when ``fit()`` finishes (also after an early
            stop, not after an exception). Default True.

    Resuming gives the same weights as an uninterrupted run, bit for bit, when the
    epochs do not depend on random state drawn during training (``shuffle=False``, no
    dropout): the generators' states are not part of the backup.

    ``fit()`` learns where to start from ``model._initial_epoch``, which this callback sets
    in ``on_train_begin`` (as Keras 3 does).
    """

    def __init__(self, backup_dir, save_freq="epoch", delete_checkpoint=True):
        super().__init__()
        if not backup_dir:
            raise ValueError("Empty `backup_dir` argument passed")
        if save_freq != "epoch" and (not isinstance(save_freq, int) or isinstance(save_freq, bool) or save_freq < 1):
            raise ValueError(f"Invalid value for argument `save_freq`. Received: save_freq={save_freq}. Expected "
                             "either 'epoch' or an integer value.")
        self.backup_dir = os.fspath(backup_dir)
        self.save_freq = save_freq
        self.delete_checkpoint = delete_checkpoint
        self._backup_path = os.path.join(self.backup_dir, "backup.safetensors")
        self._current_epoch = 0
        self._batches_seen_since_last_saving = 0

    # ---- restoring --------------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        self._batches_seen_since_last_saving = 0
        if not os.path.exists(self._backup_path):
            return
        if not self.model.built:
            raise ValueError("To use the BackupAndRestore callback, your model must be built before you call "
                             f"`fit()`. Model {self.model.name} is unbuilt. You can build it beforehand by calling "
                             "it on a batch of data.")
        # The validated reader (regular files only, header checked before any tensor is read).
        meta = read_metadata(self._backup_path)
        if meta.get("format") != _FORMAT or "state" not in meta:
            raise ValueError(f"{self._backup_path} is not a BackupAndRestore backup (format "
                             f"{meta.get('format')!r}); point backup_dir at a folder of its own.")
        state = parse_json(meta["state"].encode("utf-8", "surrogatepass"), f"{self._backup_path}: state")
        if not isinstance(state, dict) or not all(
                isinstance(state.get(k), int) and not isinstance(state.get(k), bool) and state[k] >= 0
                for k in ("epoch", "num_weights")):
            raise ValueError(f"{self._backup_path}: the backup's state is malformed: {str(state)[:80]}")
        arrays = read_tensors(self._backup_path)
        self._restore_model(arrays, state)
        self._restore_optimizer(arrays, state)
        self._current_epoch = int(state["epoch"])
        self.model._initial_epoch = int(state["epoch"])

    def _restore_model(self, arrays, state):
        weights = self.model.weights
        if state["num_weights"] != len(weights):
            raise ValueError(f"The backup in {self.backup_dir} holds {state['num_weights']} weights, model "
                             f"'{self.model.name}' has {len(weights)}: it was made by another model. Delete it or "
                             "use another backup_dir.")
        self.model.set_weights([arrays[f"model/{i}"] for i in range(len(weights))])

    def _restore_optimizer(self, arrays, state):
        opt = getattr(self.model, "optimizer", None)
        n = state.get("num_optimizer_variables", 0)
        if opt is None or not n:
            return
        if not getattr(opt, "built", True):
            # The optimizer makes its slots on its first step; make them now, in the same
            # order, so the saved values have somewhere to go.
            opt.build(self.model.trainable_variables)
        opt.load_own_variables({str(i): arrays[f"optimizer/{i}"] for i in range(n)})

    # ---- backing up -----------------------------------------------------------------------
    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.save_freq == "epoch":
            return
        self._batches_seen_since_last_saving += 1
        if self._batches_seen_since_last_saving >= self.save_freq:
            self._batches_seen_since_last_saving = 0
            self._save(epoch=self._current_epoch, batch=batch)

    def on_epoch_end(self, epoch, logs=None):
        self._current_epoch = epoch + 1
        if self.save_freq == "epoch":
            self._save(epoch=epoch + 1, batch=None)

    def _save(self, epoch, batch):
        tensors = {f"model/{i}": np.array(w, order="C") for i, w in enumerate(self.model.get_weights())}
        store = {}
        opt = getattr(self.model, "optimizer", None)
        if opt is not None and getattr(opt, "built", False):
            opt.save_own_variables(store)
        tensors.update({f"optimizer/{k}": np.array(v, order="C") for k, v in store.items()})
        state = {"epoch": epoch, "batch": batch, "num_weights": len(self.model.weights),
                 "num_optimizer_variables": len(store)}
        write_tensors(self._backup_path, tensors,
                      metadata={"format": _FORMAT, "version": "1", "state": json.dumps(state)})

    def on_train_end(self, logs=None):
        if not self.delete_checkpoint:
            return
        if os.path.exists(self._backup_path):
            os.remove(self._backup_path)
        try:
            os.rmdir(self.backup_dir)  # only when empty: the folder may hold the user's files
        except OSError:
            pass
