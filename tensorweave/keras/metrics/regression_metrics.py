"""Regression metrics: weighted means of the per-sample loss functions of the same names
(``MeanSquaredError``, ``MeanAbsolutePercentageError``, ``LogCoshError``, the hinges, ...),
``RootMeanSquaredError`` and ``CosineSimilarity`` (positive: 1 is best, unlike the loss).

>>> from tensorweave.keras import metrics
>>> m = metrics.MeanSquaredError()
>>> m.update_state([[0.0, 1.0], [0.0, 0.0]], [[1.0, 1.0], [1.0, 0.0]])
>>> float(m.result())
0.5
"""
from tensorweave.keras import more_losses as _L
from tensorweave.keras.losses import mean_absolute_error, mean_squared_error
from tensorweave.keras.metrics.reduction_metrics import _BuiltinMeanWrapper
from tensorweave.ops import math_ops as M


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


def _mean_of(fn, default_name, direction="down"):
    """A metric class: the weighted mean of the per-sample ``fn`` over all samples seen."""
    class MeanOf(_BuiltinMeanWrapper):
        _direction = direction

        def __init__(self, name=default_name, dtype=None):
            super().__init__(fn, name=name, dtype=dtype)
    return MeanOf


def _named(cls, name, doc):
    cls.__name__ = cls.__qualname__ = name
    cls.__doc__ = doc
    return cls


MeanAbsolutePercentageError = _named(_mean_of(_L.mean_absolute_percentage_error, "mean_absolute_percentage_error"),
                                     "MeanAbsolutePercentageError", "Mean of ``mean_absolute_percentage_error``.")
MeanSquaredLogarithmicError = _named(_mean_of(_L.mean_squared_logarithmic_error, "mean_squared_logarithmic_error"),
                                     "MeanSquaredLogarithmicError", "Mean of ``mean_squared_logarithmic_error``.")
LogCoshError = _named(_mean_of(_L.log_cosh, "logcosh"), "LogCoshError", "Mean of ``log_cosh``.")
Poisson = _named(_mean_of(_L.poisson, "poisson"), "Poisson", "Mean of ``poisson``.")
Hinge = _named(_mean_of(_L.hinge, "hinge"), "Hinge", "Mean of ``hinge``.")
SquaredHinge = _named(_mean_of(_L.squared_hinge, "squared_hinge"), "SquaredHinge", "Mean of ``squared_hinge``.")
CategoricalHinge = _named(_mean_of(_L.categorical_hinge, "categorical_hinge"), "CategoricalHinge",
                          "Mean of ``categorical_hinge``.")


def _cosine(y_true, y_pred, axis=-1):
    return -_L.cosine_similarity(y_true, y_pred, axis=axis)


class CosineSimilarity(_BuiltinMeanWrapper):
    """The mean cosine similarity of ``y_true`` and ``y_pred`` along ``axis`` (1 is best).

    >>> round(float(CosineSimilarity()([[0.0, 1.0], [1.0, 1.0]], [[1.0, 0.0], [1.0, 1.0]])), 4)
    0.5
    """
    _direction = "up"
    _options = ("axis",)

    def __init__(self, name="cosine_similarity", dtype=None, axis=-1):
        super().__init__(_cosine, name=name, dtype=dtype, axis=axis)


class RootMeanSquaredError(_BuiltinMeanWrapper):
    """``sqrt`` of the weighted mean of squared errors over all samples seen.

    >>> round(float(RootMeanSquaredError()([[0.0], [0.0]], [[3.0], [4.0]])), 4)
    3.5355
    """
    _direction = "down"

    def __init__(self, name="root_mean_squared_error", dtype=None):
        super().__init__(_squared_error, name=name, dtype=dtype)

    def result(self):
        return M.sqrt(super().result())


def _squared_error(y_true, y_pred):
    y_true, y_pred = _L._regression_inputs("root_mean_squared_error", y_true, y_pred)
    return M.square(y_true - y_pred)
