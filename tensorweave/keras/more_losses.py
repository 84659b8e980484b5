"""The other Keras losses: percentage and logarithmic errors, log-cosh, Poisson, cosine
similarity and the hinge family (functions per sample and ``Loss`` classes), and
``losses.Reduction``. ``keras.losses`` exports them; ``keras.metrics`` builds its metrics of
the same names on the functions.

>>> from tensorweave.keras import losses
>>> losses.mean_absolute_percentage_error([[2.0, 4.0]], [[1.0, 5.0]]).numpy()
array([37.5], dtype=float32)
>>> round(float(losses.MeanSquaredLogarithmicError()([[0.0]], [[1.0]])), 4)   # log(2) ** 2
0.4805
"""
from tensorweave.keras import backend
from tensorweave.keras.losses import _BuiltinWrapper, _mean_last, _regression_inputs
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave import nn as N
from tensorweave.ops import reduce_ops as R


class Reduction:
    """TF2's ``tf.keras.losses.Reduction`` names (the strings every loss's ``reduction`` takes)."""
    AUTO = "sum_over_batch_size"
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"

    @classmethod
    def all(cls):
        return (cls.AUTO, cls.NONE, cls.SUM, cls.SUM_OVER_BATCH_SIZE)

    @classmethod
    def validate(cls, key):
        if key not in cls.all():
            raise ValueError(f"Invalid Reduction Key: {key}. Expected keys are {cls.all()}")


def _eps(like):
    return A.constant(backend.epsilon(), dtype=like.dtype)


def mean_absolute_percentage_error(y_true, y_pred):
    """``100 * mean(|y_true - y_pred| / max(|y_true|, epsilon), axis=-1)``."""
    y_true, y_pred = _regression_inputs("mean_absolute_percentage_error", y_true, y_pred)
    diff = M.abs(y_true - y_pred) / M.maximum(M.abs(y_true), _eps(y_pred))
    return A.constant(100.0, dtype=y_pred.dtype) * _mean_last(diff)


def mean_squared_logarithmic_error(y_true, y_pred):
    """``mean(square(log(max(y_pred, eps) + 1) - log(max(y_true, eps) + 1)), axis=-1)``."""
    y_true, y_pred = _regression_inputs("mean_squared_logarithmic_error", y_true, y_pred)
    one = A.constant(1.0, dtype=y_pred.dtype)
    first = M.log(M.maximum(y_pred, _eps(y_pred)) + one)
    second = M.log(M.maximum(y_true, _eps(y_pred)) + one)
    return _mean_last(M.square(first - second))


def log_cosh(y_true, y_pred):
    """``mean(log(cosh(y_pred - y_true)), axis=-1)``, computed as ``x + softplus(-2x) - log 2``
    (no overflow for large errors)."""
    y_true, y_pred = _regression_inputs("log_cosh", y_true, y_pred)
    x = y_pred - y_true
    two = A.constant(2.0, dtype=y_pred.dtype)
    log2 = A.constant(0.6931471805599453, dtype=y_pred.dtype)
    return _mean_last(x + N.softplus(-two * x) - log2)


def poisson(y_true, y_pred):
    """``mean(y_pred - y_true * log(y_pred + epsilon), axis=-1)``."""
    y_true, y_pred = _regression_inputs("poisson", y_true, y_pred)
    return _mean_last(y_pred - y_true * M.log(y_pred + _eps(y_pred)))


def _l2_normalize(x, axis):
    square_sum = R.reduce_sum(M.square(x), axis=axis, keepdims=True)
    return x * M.rsqrt(M.maximum(square_sum, A.constant(1e-12, dtype=x.dtype)))


def cosine_similarity(y_true, y_pred, axis=-1):
    """``-sum(l2_normalize(y_true) * l2_normalize(y_pred), axis)`` (Keras' loss: -1 is best)."""
    y_true, y_pred = _regression_inputs("cosine_similarity", y_true, y_pred)
    return -R.reduce_sum(_l2_normalize(y_true, axis) * _l2_normalize(y_pred, axis), axis=axis)


def _hinge_labels(y_true):
    """Labels in {0, 1} become {-1, 1} (Keras' hinge convention)."""
    one = A.constant(1.0, dtype=y_true.dtype)
    is_binary = R.reduce_all(M.logical_or(M.equal(y_true, one), M.equal(y_true, A.zeros_like(y_true))))
    return M.where(is_binary, two_times_minus_one(y_true), y_true)


def two_times_minus_one(y):
    return A.constant(2.0, dtype=y.dtype) * y - A.constant(1.0, dtype=y.dtype)


def hinge(y_true, y_pred):
    """``mean(max(1 - y_true * y_pred, 0), axis=-1)`` with labels in {-1, 1} (0/1 converted)."""
    y_true, y_pred = _regression_inputs("hinge", y_true, y_pred)
    y_true = _hinge_labels(y_true)
    return _mean_last(M.maximum(A.constant(1.0, dtype=y_pred.dtype) - y_true * y_pred, A.zeros_like(y_pred)))


def squared_hinge(y_true, y_pred):
    """``mean(square(max(1 - y_true * y_pred, 0)), axis=-1)`` with labels in {-1, 1}."""
    y_true, y_pred = _regression_inputs("squared_hinge", y_true, y_pred)
    y_true = _hinge_labels(y_true)
    margin = M.maximum(A.constant(1.0, dtype=y_pred.dtype) - y_true * y_pred, A.zeros_like(y_pred))
    return _mean_last(M.square(margin))


def categorical_hinge(y_true, y_pred):
    """``max(0, 1 + max((1 - y_true) * y_pred) - sum(y_true * y_pred))`` (one-hot labels)."""
    y_true, y_pred = _regression_inputs("categorical_hinge", y_true, y_pred)
    one = A.constant(1.0, dtype=y_pred.dtype)
    pos = R.reduce_sum(y_true * y_pred, axis=-1)
    neg = R.reduce_max((one - y_true) * y_pred, axis=-1)
    return M.maximum(neg - pos + one, A.zeros_like(pos))


class MeanAbsolutePercentageError(_BuiltinWrapper):
    """The mean absolute percentage error (100 * |error| / |y_true|).

    >>> float(MeanAbsolutePercentageError()([[2.0, 4.0]], [[1.0, 5.0]]))
    37.5
    """

    def __init__(self, reduction="sum_over_batch_size", name="mean_absolute_percentage_error", dtype=None):
        super().__init__(mean_absolute_percentage_error, reduction=reduction, name=name, dtype=dtype)


class MeanSquaredLogarithmicError(_BuiltinWrapper):
    def __init__(self, reduction="sum_over_batch_size", name="mean_squared_logarithmic_error", dtype=None):
        super().__init__(mean_squared_logarithmic_error, reduction=reduction, name=name, dtype=dtype)


class LogCosh(_BuiltinWrapper):
    def __init__(self, reduction="sum_over_batch_size", name="log_cosh", dtype=None):
        super().__init__(log_cosh, reduction=reduction, name=name, dtype=dtype)


class Poisson(_BuiltinWrapper):
    def __init__(self, reduction="sum_over_batch_size", name="poisson", dtype=None):
        super().__init__(poisson, reduction=reduction, name=name, dtype=dtype)


class CosineSimilarity(_BuiltinWrapper):
    _options = ("axis",)

    def __init__(self, axis=-1, reduction="sum_over_batch_size", name="cosine_similarity", dtype=None):
        super().__init__(cosine_similarity, reduction=reduction, name=name, dtype=dtype, axis=axis)


class Hinge(_BuiltinWrapper):
    def __init__(self, reduction="sum_over_batch_size", name="hinge", dtype=None):
        super().__init__(hinge, reduction=reduction, name=name, dtype=dtype)


class SquaredHinge(_BuiltinWrapper):
    def __init__(self, reduction="sum_over_batch_size", name="squared_hinge", dtype=None):
        super().__init__(squared_hinge, reduction=reduction, name=name, dtype=dtype)


class CategoricalHinge(_BuiltinWrapper):
    def __init__(self, reduction="sum_over_batch_size", name="categorical_hinge", dtype=None):
        super().__init__(categorical_hinge, reduction=reduction, name=name, dtype=dtype)


CLASSES = (MeanAbsolutePercentageError, MeanSquaredLogarithmicError, LogCosh, Poisson, CosineSimilarity, Hinge,
           SquaredHinge, CategoricalHinge)
FUNCTIONS = (mean_absolute_percentage_error, mean_squared_logarithmic_error, log_cosh, poisson, cosine_similarity,
             hinge, squared_hinge, categorical_hinge)
ALIASES = {"mape": mean_absolute_percentage_error, "MAPE": mean_absolute_percentage_error,
           "msle": mean_squared_logarithmic_error, "MSLE": mean_squared_logarithmic_error, "logcosh": log_cosh}
