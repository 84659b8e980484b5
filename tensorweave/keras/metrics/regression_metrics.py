"""Regression metrics: ``MeanSquaredError`` and ``MeanAbsoluteError`` (weighted means of the
per-sample loss functions of the same names).

>>> from tensorweave.keras import metrics
>>> m = metrics.MeanSquaredError()
>>> m.update_state([[0.0, 1.0], [0.0, 0.0]], [[1.0, 1.0], [1.0, 0.0]])
>>> float(m.result())
0.5
"""
from tensorweave.keras.losses import mean_absolute_error, mean_squared_error
from tensorweave.keras.metrics.reduction_metrics import _BuiltinMeanWrapper


class MeanSquaredError(_BuiltinMeanWrapper):
    """The mean of ``mean_squared_error(y_true, y_pred)`` over all samples seen.

    >>> m = MeanSquaredError()
    >>> float(m([[1.0], [3.0]], [[0.0], [0.0]]))
    5.0
    """
    _direction = "down"

    def __init__(self, name="mean_squared_error", dtype=None):
        super().__init__(mean_squared_error, name=name, dtype=dtype)


class MeanAbsoluteError(_BuiltinMeanWrapper):
    """The mean of ``mean_absolute_error(y_true, y_pred)`` over all samples seen.

    >>> m = MeanAbsoluteError()
    >>> float(m([[1.0], [3.0]], [[0.0], [0.0]], sample_weight=[1.0, 3.0]))
    2.5
    """
    _direction = "down"

    def __init__(self, name="mean_absolute_error", dtype=None):
        super().__init__(mean_absolute_error, name=name, dtype=dtype)
