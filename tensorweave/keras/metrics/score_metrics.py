"""Keras 3's ``FBetaScore``/``F1Score`` (per class, or micro/macro/weighted averages) and
``R2Score`` (the coefficient of determination, optionally adjusted for ``num_regressors``).

Their state is shaped by the number of classes, so it is made on the first ``update_state``
(as in Keras); inputs are ``(batch, classes)``.

>>> m = F1Score(average="micro", threshold=0.5)
>>> m.update_state([[1, 0], [0, 1]], [[0.8, 0.1], [0.6, 0.7]])
>>> round(float(m.result()), 4)      # precision 2/3, recall 1
0.8
>>> r2 = R2Score()
>>> r2.update_state([[1.0], [2.0], [3.0]], [[1.0], [2.0], [4.0]])
>>> round(float(r2.result()), 4)     # 1 - 1 / 2
0.5
"""
import tensorweave as tw
from tensorweave.keras import backend
from tensorweave.keras.losses import squeeze_or_expand_to_same_rank
from tensorweave.keras.metrics.metric import Metric, updates


def _check_2d(metric, y_true, y_pred):
    ts, ps = y_true.shape, y_pred.shape
    if ps.rank != 2 or ts.rank != 2:
        raise ValueError(f"{metric} expects 2D inputs with shape (batch_size, output_dim). Received input shapes: "
                         f"y_pred.shape={tuple(ps.as_list()) if ps.rank is not None else None} and "
                         f"y_true.shape={tuple(ts.as_list()) if ts.rank is not None else None}.")
    if ps[-1] is None or ts[-1] is None:
        raise ValueError(f"{metric} expects 2D inputs with shape (batch_size, output_dim), with output_dim fully "
                         f"defined (not None). Received input shapes: y_pred.shape={tuple(ps.as_list())} and "
                         f"y_true.shape={tuple(ts.as_list())}.")
    return ps[-1]


class FBetaScore(Metric):
    """F-beta: ``(1 + beta²) P R / (beta² P + R)``; predictions above ``threshold`` (by default
    the row's maximum) count as positive. ``average``: None (per class), "micro", "macro",
    "weighted" (by each class's support)."""
    _direction = "up"

    def __init__(self, average=None, beta=1.0, threshold=None, name="fbeta_score", dtype=None):
        super().__init__(name=name, dtype=dtype)
        if average not in (None, "micro", "macro", "weighted"):
            raise ValueError("Invalid `average` argument value. Expected one of: {None, 'micro', 'macro', "
                             f"'weighted'}}. Received: average={average}")
        if not isinstance(beta, float):
            raise ValueError(f"Invalid `beta` argument value. It should be a Python float. Received: beta={beta} of "
                             f"type '{type(beta)}'")
        if beta <= 0.0:
            raise ValueError(f"Invalid `beta` argument value. It should be > 0. Received: beta={beta}")
        if threshold is not None:
            if not isinstance(threshold, float):
                raise ValueError("Invalid `threshold` argument value. It should be a Python float. Received: "
                                 f"threshold={threshold} of type '{type(threshold)}'")
            if threshold > 1.0 or threshold <= 0.0:
                raise ValueError("Invalid `threshold` argument value. It should verify 0 < threshold <= 1. "
                                 f"Received: threshold={threshold}")
        self.average, self.beta, self.threshold = average, beta, threshold
        self.axis = None if average == "micro" else 0
        self._built = False

    def _build(self, num_classes):
        shape = () if self.average == "micro" else (num_classes,)
        self.true_positives = self.add_variable(shape, name="true_positives")
        self.false_positives = self.add_variable(shape, name="false_positives")
        self.false_negatives = self.add_variable(shape, name="false_negatives")
        self.intermediate_weights = self.add_variable(shape, name="intermediate_weights")
        self._built = True

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = tw.cast(tw.convert_to_tensor(y_true), self.dtype)
        y_pred = tw.cast(tw.convert_to_tensor(y_pred), self.dtype)
        num_classes = _check_2d(type(self).__name__, y_true, y_pred)
        if not self._built:
            self._build(num_classes)
        if self.threshold is None:
            top = tw.reduce_max(y_pred, axis=-1, keepdims=True)
            # an all-zero row has no positive (abs > eps, not != 0, as Keras)
            positive = tw.logical_and(y_pred >= top, tw.abs(y_pred) > 1e-9)
        else:
            positive = y_pred > self.threshold
        y_pred = tw.cast(positive, self.dtype)
        weight = None if sample_weight is None else tw.cast(tw.convert_to_tensor(sample_weight), self.dtype)

        def total(v):
            if weight is not None:
                v = v * tw.expand_dims(weight, 1)
            return tw.reduce_sum(v, axis=self.axis)
        return updates(self.true_positives.assign_add(total(y_pred * y_true), read_value=False),
                       self.false_positives.assign_add(total(y_pred * (1 - y_true)), read_value=False),
                       self.false_negatives.assign_add(total((1 - y_pred) * y_true), read_value=False),
                       self.intermediate_weights.assign_add(total(y_true), read_value=False))

    def result(self):
        if not self._built:
            return tw.constant(0.0, dtype=self.dtype)
        eps = backend.epsilon()
        tp = tw.identity(self.true_positives)
        precision = tp / (tp + self.false_positives + eps)
        recall = tp / (tp + self.false_negatives + eps)
        b2 = self.beta ** 2
        score = precision * recall / (b2 * precision + recall + eps) * (1 + b2)
        if self.average == "weighted":
            w = self.intermediate_weights / (tw.reduce_sum(self.intermediate_weights) + eps)
            return tw.reduce_sum(score * w)
        if self.average is not None:
            return tw.reduce_mean(score)
        return score

    def reset_state(self):
        return super().reset_state() if self._built else None

    def get_config(self):
        return {**super().get_config(), "average": self.average, "beta": self.beta, "threshold": self.threshold}


class F1Score(FBetaScore):
    """:class:`FBetaScore` with ``beta=1``: the harmonic mean of precision and recall."""

    def __init__(self, average=None, threshold=None, name="f1_score", dtype=None):
        super().__init__(average=average, beta=1.0, threshold=threshold, name=name, dtype=dtype)

    def get_config(self):
        config = super().get_config()
        config.pop("beta")
        return config


class R2Score(Metric):
    """``1 - SS_res / SS_tot`` per output column, then ``class_aggregation``: "uniform_average",
    "variance_weighted_average" or None (per column); ``num_regressors`` > 0 gives the adjusted
    R² ``1 - (1 - R²)(n - 1)/(n - p - 1)`` when there are enough samples."""
    _direction = "up"

    def __init__(self, class_aggregation="uniform_average", num_regressors=0, name="r2_score", dtype=None):
        super().__init__(name=name, dtype=dtype)
        valid = (None, "uniform_average", "variance_weighted_average")
        if class_aggregation not in valid:
            raise ValueError(f"Invalid value for argument `class_aggregation`. Expected one of {valid}. Received: "
                             f"class_aggregation={class_aggregation}")
        if num_regressors < 0:
            raise ValueError(f"Invalid value for argument `num_regressors`. Expected a value >= 0. Received: "
                             f"num_regressors={num_regressors}")
        self.class_aggregation, self.num_regressors = class_aggregation, num_regressors
        self.num_samples = self.add_variable((), name="num_samples")
        self._built = False

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = tw.cast(tw.convert_to_tensor(y_true), self.dtype)
        y_pred = tw.cast(tw.convert_to_tensor(y_pred), self.dtype)
        y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)
        num_classes = _check_2d("R2Score", y_true, y_pred)
        if not self._built:
            self.squared_sum = self.add_variable((num_classes,), name="squared_sum")
            self.sum = self.add_variable((num_classes,), name="sum")
            self.total_mse = self.add_variable((num_classes,), name="residual")
            self.count = self.add_variable((num_classes,), name="count")
            self._built = True
        weight = tw.cast(tw.convert_to_tensor(1.0 if sample_weight is None else sample_weight), self.dtype)
        if weight.shape.rank == 1:
            weight = tw.expand_dims(weight, 1)
        weight = tw.broadcast_to(weight, tw.shape(y_true))
        weighted = y_true * weight
        return updates(self.sum.assign_add(tw.reduce_sum(weighted, axis=0), read_value=False),
                       self.squared_sum.assign_add(tw.reduce_sum(y_true * weighted, axis=0), read_value=False),
                       self.total_mse.assign_add(tw.reduce_sum(tw.square(y_true - y_pred) * weight, axis=0),
                                                 read_value=False),
                       self.count.assign_add(tw.reduce_sum(weight, axis=0), read_value=False),
                       self.num_samples.assign_add(tw.cast(tw.size(y_true), self.dtype), read_value=False))

    def result(self):
        if not self._built:
            return tw.constant(0.0, dtype=self.dtype)
        mean = self.sum / self.count
        total = self.squared_sum - self.sum * mean
        raw = 1 - self.total_mse / total
        raw = tw.where(tw.math.is_inf(raw), tw.zeros_like(raw), raw)
        if self.class_aggregation == "uniform_average":
            score = tw.reduce_mean(raw)
        elif self.class_aggregation == "variance_weighted_average":
            score = tw.reduce_sum(total * raw) / tw.reduce_sum(total)
        else:
            score = raw
        if self.num_regressors:
            # Keras falls back to plain R² (with a warning) when n - 1 <= p; the same, as tensor ops
            n = tw.cast(self.num_samples, "float32")
            p = float(self.num_regressors)
            adjusted = 1.0 - (1.0 - tw.cast(score, "float32")) * (n - 1.0) / (n - p - 1.0)
            score = tw.where(p < n - 1.0, tw.cast(adjusted, self.dtype), score)
        return score

    def get_config(self):
        return {**super().get_config(), "class_aggregation": self.class_aggregation,
                "num_regressors": self.num_regressors}
