"""``MonitorCallback``: the base of callbacks that watch one logged quantity and decide
whether a new value improves on the best so far (EarlyStopping, ModelCheckpoint,
ReduceLROnPlateau).

In ``mode="auto"`` the direction comes from the quantity's name: ``loss`` and ``val_loss``
(and any ``*_loss`` of a multi-output model) are minimized; a compiled metric is maximized
or minimized as its ``_direction`` ("up"/"down") says, so ``val_accuracy`` is maximized and
``val_mean_squared_error`` minimized.

>>> from tensorweave.keras.callbacks import MonitorCallback
>>> cb = MonitorCallback(monitor="loss")
>>> cb._set_monitor_op()
>>> cb._is_improvement(0.5, cb.best), cb.best
(True, inf)
"""
import warnings

import numpy as np

from tensorweave.keras.callbacks.callback import Callback


def monitor_direction(model, monitor, mode="auto"):
    """Returns "min", "max", or None when ``mode`` is "auto" and the name says nothing."""
    if mode in ("min", "max"):
        return mode
    name = monitor[4:] if monitor.startswith("val_") else monitor
    direction = None
    if name == "loss" or name.endswith("_loss"):
        direction = "min"
    for m in getattr(model, "metrics", None) or []:
        if getattr(m, "name", None) == name and getattr(m, "_direction", None) in ("up", "down"):
            direction = "max" if m._direction == "up" else "min"
    return direction


class MonitorCallback(Callback):
    """Watches ``monitor`` in the epoch logs; ``best`` starts at ``baseline`` (or +/-inf).

    Args (Keras 3): ``monitor`` (default "val_loss"), ``mode`` ("auto", "min" or "max"),
    ``baseline`` (the initial best value, None for none), ``min_delta`` (a change smaller
    than this is no improvement).
    """

    def __init__(self, monitor="val_loss", mode="auto", baseline=None, min_delta=0):
        super().__init__()
        if mode not in ("auto", "min", "max"):
            warnings.warn(f"{type(self).__name__} mode '{mode}' is unknown, fallback to auto mode.", stacklevel=2)
            mode = "auto"
        self.monitor = monitor
        self.mode = mode
        self.best = baseline
        self._initial_best = baseline
        self.min_delta = abs(min_delta)
        self.monitor_op = None

    def _set_monitor_op(self):
        # Resolved at the first epoch end rather than at construction: the compiled metrics
        # (whose direction "auto" needs) only exist once the first batch has been seen.
        direction = monitor_direction(self.model, self.monitor, self.mode)
        if direction is None:
            raise ValueError(
                f"{type(self).__name__} callback received monitor={self.monitor}, but it isn't able to "
                "automatically determine whether that metric should be maximized or minimized. Pass "
                "`mode='max'` in order to monitor based on the highest metric value, or pass `mode='min'` "
                "in order to use the lowest value.")
        self.monitor_op = np.less if direction == "min" else np.greater
        if self.best is None:
            self.best = np.inf if direction == "min" else -np.inf

    def _is_improvement(self, monitor_value, reference_value):
        if reference_value is None:
            return True
        delta = -self.min_delta if self.monitor_op is np.less else self.min_delta
        return bool(self.monitor_op(monitor_value - delta, reference_value))
