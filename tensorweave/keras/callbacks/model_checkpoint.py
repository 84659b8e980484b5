"""``ModelCheckpoint``: saves the model's weights (or the whole model) during training.

Weights are written by ``model.save_weights``: a weights path ends in ``.weights.safetensors``
(tensorweave's format) or Keras' ``.weights.h5`` (HDF5 in Keras 3's layout, through the
optional h5py, checked when the callback is made). Saving the whole model
(``save_weights_only=False``) calls ``model.save`` (``.keras``, ``.h5`` or a SavedModel
directory); a model without ``save`` stops training at once with a ``NotImplementedError``.

>>> import os, tempfile
>>> import numpy as np
>>> from tensorweave import keras
>>> keras.utils.set_random_seed(0)
>>> model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
>>> model.compile(optimizer="sgd", loss="mse")
>>> tmp = tempfile.mkdtemp()
>>> ckpt = keras.callbacks.ModelCheckpoint(os.path.join(tmp, "{epoch:02d}-{loss:.2f}.weights.safetensors"),
...                                        monitor="loss", save_weights_only=True)
>>> _ = model.fit(np.ones((8, 3)), np.ones((8, 1)), epochs=2, callbacks=[ckpt], verbose=0)
>>> sorted(name[:3] for name in os.listdir(tmp))
['01-', '02-']
"""
import os
import warnings

import numpy as np

from tensorweave.keras.callbacks._utils import print_msg
from tensorweave.keras.callbacks.monitor_callback import MonitorCallback

WEIGHTS_SUFFIXES = (".weights.safetensors", ".weights.h5")


class ModelCheckpoint(MonitorCallback):
    """Saves at the end of every epoch (or every ``save_freq`` batches).

    Args (Keras 3):
        filepath: where to save; may hold ``str.format`` fields filled from ``epoch``
            (1-based), ``batch`` (1-based, with an integer ``save_freq``) and the logs,
            e.g. ``"ckpt/{epoch:02d}-{val_loss:.2f}.weights.safetensors"``.
        monitor: the quantity for ``save_best_only``. Default "val_loss".
        verbose: 1 prints a line for each save or skipped save. Default 0.
        save_best_only: save only when ``monitor`` improves on the best so far. Default False.
        save_weights_only: True saves ``model.save_weights(filepath)``, False ``model.save(filepath)``.
        mode: "auto", "min" or "max" (see :class:`MonitorCallback`).
        save_freq: "epoch", or an integer: save after that many training batches.
        initial_value_threshold: the best value to beat before the first save (with ``save_best_only``).
    """

    def __init__(self, filepath, monitor="val_loss", verbose=0, save_best_only=False, save_weights_only=False,
                 mode="auto", save_freq="epoch", initial_value_threshold=None):
        super().__init__(monitor=monitor, mode=mode, baseline=initial_value_threshold, min_delta=0)
        self.filepath = os.fspath(filepath)
        self.verbose = verbose
        self.save_best_only = save_best_only
        self.save_weights_only = save_weights_only
        self.save_freq = save_freq
        self._batches_seen_since_last_saving = 0
        self._current_epoch = 0
        if save_freq != "epoch" and (not isinstance(save_freq, int) or isinstance(save_freq, bool) or save_freq < 1):
            raise ValueError(f"Unrecognized save_freq: {save_freq}. Expected save_freq are 'epoch' or integer "
                             "values")
        if save_weights_only:
            if not self.filepath.endswith(WEIGHTS_SUFFIXES):
                raise ValueError("When using `save_weights_only=True` in `ModelCheckpoint`, the filepath provided "
                                 "must end in `.weights.safetensors` (tensorweave's weights format) or "
                                 f"`.weights.h5` (Keras' HDF5, needs h5py). Received: filepath={self.filepath}")
        if self.filepath.endswith((".h5", ".hdf5")):
            from tensorweave.keras.h5.h5_reader import h5py_module
            h5py_module()       # fail now, not after the first epoch

    def on_train_begin(self, logs=None):
        # Fail before the first epoch rather than after it.
        if not self.save_weights_only and not callable(getattr(self.model, "save", None)):
            raise NotImplementedError(
                "ModelCheckpoint(save_weights_only=False) saves the whole model with model.save(), which "
                f"model '{self.model.name}' does not have yet: whole-model saving arrives with the SavedModel "
                "format. Hint: pass save_weights_only=True and a filepath ending in '.weights.safetensors'.")
        self._batches_seen_since_last_saving = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.save_freq == "epoch":
            return
        self._batches_seen_since_last_saving += 1
        if self._batches_seen_since_last_saving >= self.save_freq:
            self._batches_seen_since_last_saving = 0
            self._save_model(self._current_epoch, batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.monitor_op is None:
            self._set_monitor_op_or_defer()
        if self.save_freq == "epoch":
            self._save_model(epoch, None, logs)

    def _set_monitor_op_or_defer(self):
        # Without save_best_only the monitored quantity is never compared, so an unknown
        # direction must not stop training.
        try:
            self._set_monitor_op()
        except ValueError:
            if self.save_best_only:
                raise

    def _should_save(self, epoch, logs, filepath):
        if not self.save_best_only:
            if self.verbose > 0:
                print_msg(f"\nEpoch {epoch + 1}: saving model to {filepath}")
            return True
        if self.monitor_op is None:
            self._set_monitor_op()
        current = (logs or {}).get(self.monitor)
        if current is None:
            warnings.warn(f"Can save best model only with {self.monitor} available.", stacklevel=3)
            return True
        if np.ndim(current) > 0:
            warnings.warn(f"Can save best model only when `monitor` is a scalar value. Received: {current}. "
                          "Falling back to `save_best_only=False`.", stacklevel=3)
            return True
        best = "None" if self.best is None else f"{self.best:.5f}"
        if self._is_improvement(current, self.best):
            if self.verbose > 0:
                print_msg(f"\nEpoch {epoch + 1}: {self.monitor} improved from {best} to {current:.5f}, "
                          f"saving model to {filepath}")
            self.best = current
            return True
        if self.verbose > 0:
            print_msg(f"\nEpoch {epoch + 1}: {self.monitor} did not improve from {best}")
        return False

    def _save_model(self, epoch, batch, logs):
        filepath = self._get_file_path(epoch, batch, logs or {})
        if not self._should_save(epoch, logs, filepath):
            return
        if os.path.isdir(filepath):
            raise IOError("Please specify a non-directory filepath for ModelCheckpoint. Filepath used is an "
                          f"existing directory: {filepath}")
        dirname = os.path.dirname(filepath)
        if dirname:
            os.makedirs(dirname, exist_ok=True)
        if self.save_weights_only:
            self.model.save_weights(filepath, overwrite=True)
        else:
            self.model.save(filepath, overwrite=True)

    def _get_file_path(self, epoch, batch, logs):
        try:
            if batch is None or "batch" in logs:
                return self.filepath.format(epoch=epoch + 1, **logs)
            return self.filepath.format(epoch=epoch + 1, batch=batch + 1, **logs)
        except KeyError as e:
            raise KeyError(f'Failed to format this callback filepath: "{self.filepath}". Reason: {e}. Hint: the '
                           f"fields available are epoch, batch and the logged values {sorted(logs)}.") from None
