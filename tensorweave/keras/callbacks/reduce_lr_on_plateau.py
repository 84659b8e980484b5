"""``ReduceLROnPlateau``: lowers the learning rate when a monitored quantity stops improving.

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.utils.set_random_seed(0)
>>> model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
>>> model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
>>> reduce = keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1, min_delta=10.0)
>>> _ = model.fit(np.ones((8, 3)), np.ones((8, 1)), epochs=3, callbacks=[reduce], verbose=0)
>>> round(float(model.optimizer.learning_rate.numpy()), 4)  # epochs 2 and 3 don't improve by 10: halved twice
0.025
"""
import warnings

import numpy as np

from tensorweave.keras.callbacks._utils import check_settable, get_learning_rate, print_msg, set_learning_rate
from tensorweave.keras.callbacks.callback import Callback
from tensorweave.keras.callbacks.monitor_callback import monitor_direction


class ReduceLROnPlateau(Callback):
    """Multiplies the learning rate by ``factor`` after ``patience`` epochs without improvement.

    Args (Keras 3):
        monitor: the quantity to watch. Default "val_loss".
        factor: new_lr = lr * factor (must be < 1). Default 0.1.
        patience: epochs without improvement before the rate is lowered. Default 10.
        verbose: 1 prints "Epoch N: ReduceLROnPlateau reducing learning rate to X.". Default 0.
        mode: "auto", "min" or "max". In "auto" the direction comes from the name (losses
            are minimized, metrics follow their direction; otherwise, as in Keras, names
            containing "acc" are maximized and the rest minimized).
        min_delta: an improvement must exceed this. Default 1e-4.
        cooldown: epochs to wait after a reduction before counting again. Default 0.
        min_lr: the rate is never lowered below this. Default 0.

    At each epoch end the current rate is added to the logs as ``learning_rate``. The
    optimizer's rate must be a number or a variable; a ``LearningRateSchedule`` sets the rate
    itself, and using both is an error.
    """

    def __init__(self, monitor="val_loss", factor=0.1, patience=10, verbose=0, mode="auto", min_delta=1e-4,
                 cooldown=0, min_lr=0.0, **kwargs):
        super().__init__()
        if "epsilon" in kwargs:  # the Keras 2 name of min_delta
            min_delta = kwargs.pop("epsilon")
            warnings.warn("`epsilon` argument is deprecated and will be removed, use `min_delta` instead.",
                          stacklevel=2)
        if kwargs:
            raise TypeError(f"ReduceLROnPlateau got unexpected keyword argument(s): {sorted(kwargs)}")
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau does not support a factor >= 1.0. Received factor={factor}")
        if mode not in ("auto", "min", "max"):
            warnings.warn(f"Learning rate reduction mode {mode} is unknown, fallback to auto mode.", stacklevel=2)
            mode = "auto"
        self.monitor = monitor
        self.factor = factor
        self.patience = patience
        self.verbose = verbose
        self.mode = mode
        self.min_delta = min_delta
        self.cooldown = cooldown
        self.min_lr = min_lr
        self.monitor_op = None
        self.best = None
        self.wait = 0
        self.cooldown_counter = 0

    def _reset(self):
        self.monitor_op = None
        self.best = None
        self.wait = 0
        self.cooldown_counter = 0

    def _set_monitor_op(self):
        direction = monitor_direction(self.model, self.monitor, self.mode)
        if direction is None:
            direction = "max" if "acc" in self.monitor else "min"
        if direction == "min":
            self.monitor_op = lambda a, b: np.less(a, b - self.min_delta)
            self.best = np.inf
        else:
            self.monitor_op = lambda a, b: np.greater(a, b + self.min_delta)
            self.best = -np.inf

    def on_train_begin(self, logs=None):
        check_settable(self.model, "ReduceLROnPlateau")
        self._reset()

    def in_cooldown(self):
        return self.cooldown_counter > 0

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        if self.monitor_op is None:
            self._set_monitor_op()
        # Logged before any reduction: the rate this epoch was trained with (as Keras 3).
        logs["learning_rate"] = get_learning_rate(self.model, "ReduceLROnPlateau")
        current = logs.get(self.monitor)
        if current is None:
            warnings.warn(f"Learning rate reduction is conditioned on metric `{self.monitor}` which is not "
                          f"available. Available metrics are: {','.join(logs)}.", stacklevel=2)
            return
        if self.in_cooldown():
            self.cooldown_counter -= 1
            self.wait = 0
        if self.monitor_op(current, self.best):
            self.best = current
            self.wait = 0
        elif not self.in_cooldown():
            self.wait += 1
            if self.wait >= self.patience:
                old_lr = get_learning_rate(self.model, "ReduceLROnPlateau")
                if old_lr > np.float32(self.min_lr):
                    new_lr = max(old_lr * self.factor, self.min_lr)
                    set_learning_rate(self.model, new_lr, "ReduceLROnPlateau")
                    if self.verbose > 0:
                        print_msg(f"\nEpoch {epoch + 1}: ReduceLROnPlateau reducing learning rate to {new_lr}.")
                    self.cooldown_counter = self.cooldown
                    self.wait = 0
