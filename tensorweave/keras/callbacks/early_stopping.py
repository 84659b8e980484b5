"""``EarlyStopping``: stops training when a monitored quantity has stopped improving.

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.utils.set_random_seed(0)
>>> model = keras.Sequential([keras.Input(shape=(20,)), keras.layers.Dense(10)])
>>> model.compile(keras.optimizers.SGD(), loss="mse")
>>> # No epoch after the first improves the loss by 1000: three more epochs, then a stop.
>>> stop = keras.callbacks.EarlyStopping(monitor="loss", min_delta=1000, patience=3)
>>> history = model.fit(np.ones((5, 20)), np.zeros(5), epochs=10, batch_size=1, callbacks=[stop], verbose=0)
>>> len(history.history["loss"])
4
"""
import warnings

from tensorweave.keras.callbacks._utils import print_msg
from tensorweave.keras.callbacks.monitor_callback import MonitorCallback


class EarlyStopping(MonitorCallback):
    """Sets ``model.stop_training`` once ``monitor`` has not improved for ``patience`` epochs.

    Args (Keras 3):
        monitor: the quantity in the epoch logs to watch. Default "val_loss".
        min_delta: a change smaller than this (in absolute value) is no improvement. Default 0.
        patience: epochs without improvement after which training stops. Default 0.
        verbose: 1 prints "Epoch N: early stopping" (and the restore message). Default 0.
        mode: "auto", "min" or "max" (see :class:`MonitorCallback`). Default "auto".
        baseline: training stops unless the quantity gets better than this within
            ``patience`` epochs. Default None.
        restore_best_weights: at the end of training (early stop or not) set the weights of
            the epoch with the best value. Default False.
        start_from_epoch: epochs of warm-up before monitoring starts. Default 0.

    Attributes: ``stopped_epoch`` (0-based; 0 when training was not stopped), ``best``,
    ``best_epoch``, ``wait``.
    """

    def __init__(self, monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto", baseline=None,
                 restore_best_weights=False, start_from_epoch=0):
        super().__init__(monitor=monitor, mode=mode, baseline=None, min_delta=min_delta)
        self.patience = patience
        self.verbose = verbose
        self.baseline = baseline
        self.restore_best_weights = restore_best_weights
        self.start_from_epoch = start_from_epoch
        self.wait = 0
        self.stopped_epoch = 0
        self.best_weights = None
        self.best_epoch = 0

    def on_train_begin(self, logs=None):
        # Reset everything, so one instance can serve several fit() calls.
        self.wait = 0
        self.stopped_epoch = 0
        self.best_weights = None
        self.best_epoch = 0
        self.best = None
        self.monitor_op = None

    def on_epoch_end(self, epoch, logs=None):
        if self.monitor_op is None:
            self._set_monitor_op()
        current = self.get_monitor_value(logs)
        if current is None or epoch < self.start_from_epoch:
            return
        if self.restore_best_weights and self.best_weights is None:
            # Until something improves, the first monitored epoch is the best one.
            self.best_weights = self.model.get_weights()
            self.best_epoch = epoch
        self.wait += 1
        if self._is_improvement(current, self.best):
            self.best = current
            self.best_epoch = epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            # The patience count restarts only when the value also beats the baseline.
            if self.baseline is None or self._is_improvement(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0 and self.verbose > 0:
            print_msg(f"Epoch {self.stopped_epoch + 1}: early stopping")
        if self.restore_best_weights and self.best_weights is not None:
            if self.verbose > 0:
                print_msg(f"Restoring model weights from the end of the best epoch: {self.best_epoch + 1}.")
            self.model.set_weights(self.best_weights)

    def get_monitor_value(self, logs):
        logs = logs or {}
        value = logs.get(self.monitor)
        if value is None:
            warnings.warn(f"Early stopping conditioned on metric `{self.monitor}` which is not available. "
                          f"Available metrics are: {','.join(logs)}", stacklevel=2)
        return value
