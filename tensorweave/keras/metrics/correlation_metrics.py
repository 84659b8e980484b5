"""Keras 3's correlation metrics: ``PearsonCorrelation`` and ``ConcordanceCorrelation``, weighted
means over samples of the per-sample functions ``pearson_correlation`` and
``concordance_correlation`` (computed along ``axis``, as Keras does, including its concordance
covariance term ``(y_true - mean(y_pred)) * (y_pred - mean(y_pred))``).

>>> round(float(pearson_correlation([[1.0, 2.0, 3.0]], [[2.0, 4.0, 7.0]])[0]), 4)
0.9934
"""
from tensorweave.keras import backend
from tensorweave.keras.losses import _regression_inputs
from tensorweave.keras.metrics.reduction_metrics import _BuiltinMeanWrapper
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as R


def _mean(x, axis):
    return R.reduce_mean(x, axis=axis, keepdims=True)


def _var(x, axis):
    return _mean(M.square(x - _mean(x, axis)), axis)


def pearson_correlation(y_true, y_pred, axis=-1):
    """Pearson's r between ``y_true`` and ``y_pred`` along ``axis``."""
    y_true, y_pred = _regression_inputs("pearson_correlation", y_true, y_pred)
    t = y_true - _mean(y_true, axis)
    p = y_pred - _mean(y_pred, axis)
    t = t / M.sqrt(_var(t, axis))
    p = p / M.sqrt(_var(p, axis))
    return R.reduce_mean(t * p, axis=axis)


def concordance_correlation(y_true, y_pred, axis=-1):
    """Lin's concordance correlation coefficient along ``axis`` (Keras' formula)."""
    y_true, y_pred = _regression_inputs("concordance_correlation", y_true, y_pred)
    true_mean, pred_mean = _mean(y_true, axis), _mean(y_pred, axis)
    norm = _var(y_true - true_mean, axis) + _var(y_pred - pred_mean, axis) + M.square(true_mean - pred_mean)
    covar = (y_true - pred_mean) * (y_pred - pred_mean)
    return R.reduce_mean(2.0 * covar / (norm + backend.epsilon()), axis=axis)


class PearsonCorrelation(_BuiltinMeanWrapper):
    """The mean of :func:`pearson_correlation` over the samples seen."""
    _direction = "up"
    _options = ("axis",)

    def __init__(self, name="pearson_correlation", dtype=None, axis=-1):
        super().__init__(pearson_correlation, name=name, dtype=dtype, axis=axis)


class ConcordanceCorrelation(_BuiltinMeanWrapper):
    """The mean of :func:`concordance_correlation` over the samples seen."""
    _direction = "up"
    _options = ("axis",)

    def __init__(self, name="concordance_correlation", dtype=None, axis=-1):
        super().__init__(concordance_correlation, name=name, dtype=dtype, axis=axis)
