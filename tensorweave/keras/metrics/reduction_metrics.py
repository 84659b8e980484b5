"""Reducing metrics: ``Sum``, ``Mean`` and ``MeanMetricWrapper`` (the weighted mean of a
per-sample function, the base of most built-in metrics).

>>> from tensorweave.keras import metrics
>>> m = metrics.Mean()
>>> m.update_state([1.0, 3.0, 5.0, 7.0])
>>> float(m.result())
4.0
>>> m.update_state([1.0, 3.0], sample_weight=[1.0, 0.0])
>>> round(float(m.result()), 4)
3.4
"""
from tensorweave.core.shape import broadcast_static
from tensorweave.keras import losses as _losses
from tensorweave.keras.metrics.metric import Metric, updates
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as R

_shape_str = _losses._shape_str


def _rank(x):
    return x.shape.rank


def reduce_to_samplewise_values(values, sample_weight, reduce_fn, dtype):
    """``values`` weighted and reduced to one value per sample, and the matching per-sample
    weights (Keras' rule): weights are squeezed/expanded to the values' rank, values are
    reduced with ``reduce_fn`` over the axes the weights lack, weights are broadcast to the
    values, and both are reduced over every axis after the first."""
    values = _losses._convert(values, dtype)
    if sample_weight is not None:
        sample_weight = _losses._convert(sample_weight, dtype)
        values, sample_weight = _losses.squeeze_or_expand_to_same_rank(values, sample_weight)
        rw, rv = _rank(sample_weight), _rank(values)
        if rw is None or rv is None:
            raise ValueError("Metric update: the ranks of the values and of sample_weight must be known")
        if rv > rw:
            values = reduce_fn(values, axis=list(range(rw, rv)))
        elif rw > rv:
            # A per-batch value (e.g. accuracy of rank-1 inputs) counts once per weighted sample.
            values = A.broadcast_to(values, A.shape(sample_weight))
        try:
            broadcast_static(sample_weight.shape, values.shape)
        except ValueError:
            raise ValueError(f"sample_weight of shape {_shape_str(sample_weight.shape)} cannot be applied to metric "
                             f"values of shape {_shape_str(values.shape)}. Hint: pass one weight per sample, "
                             "shape (batch_size,)") from None
        values = values * sample_weight
        # Weights take the weighted values' shape: it doesn't change the product, but it does
        # change the per-sample weight sums below.
        sample_weight = A.broadcast_to(sample_weight, A.shape(values))
        rw = _rank(sample_weight)
        if rw > 1:
            sample_weight = reduce_fn(sample_weight, axis=list(range(1, rw)))
    if _rank(values) is not None and _rank(values) > 1:
        values = reduce_fn(values, axis=list(range(1, _rank(values))))
    return values, sample_weight


class Sum(Metric):
    """The (weighted) sum of the given values.

    >>> m = Sum()
    >>> m.update_state([1.0, 3.0, 5.0, 7.0])
    >>> float(m.result())
    16.0
    """
    _direction = None

    def __init__(self, name="sum", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, values, sample_weight=None):
        values, _ = reduce_to_samplewise_values(values, sample_weight, R.reduce_sum, self._dtype)
        return updates(self.total.assign_add(R.reduce_sum(values), read_value=False))

    def result(self):
        return A.identity(self.total.value())


class Mean(Metric):
    """The (weighted) mean of the given values: ``sum(values * w) / sum(w)``.

    Values of rank > 1 are first averaged per sample; with no weights each sample counts 1.

    >>> m = Mean()
    >>> m.update_state([[1.0, 3.0], [5.0, 7.0]])
    >>> float(m.result())
    4.0
    """

    def __init__(self, name="mean", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, values, sample_weight=None):
        values, sample_weight = reduce_to_samplewise_values(values, sample_weight, R.reduce_mean, self._dtype)
        if sample_weight is not None:
            num_samples = R.reduce_sum(sample_weight)
        elif _rank(values) is not None and _rank(values) >= 1:
            n = values.shape[0]
            num_samples = A.constant(float(n), dtype=self._dtype) if n is not None \
                else M.cast(A.shape(values)[0], self._dtype)
        else:
            num_samples = A.constant(1.0, dtype=self._dtype)
        return updates(self.total.assign_add(R.reduce_sum(values), read_value=False),
                       self.count.assign_add(M.cast(num_samples, self._dtype), read_value=False))

    def result(self):
        return M.div_no_nan(self.total.value(), self.count.value())


class MeanMetricWrapper(Mean):
    """The weighted mean of ``fn(y_true, y_pred, **kwargs)`` over all samples seen.

    ``fn`` returns one value per sample (any callable; the built-in metric and loss
    functions qualify). ``update_state(y_true, y_pred, sample_weight=None)``.

    >>> from tensorweave.keras import losses
    >>> m = MeanMetricWrapper(losses.mean_absolute_error, name="mae")
    >>> m.update_state([[0.0], [2.0]], [[1.0], [1.0]])
    >>> float(m.result())
    1.0
    """

    def __init__(self, fn, name=None, dtype=None, **kwargs):
        super().__init__(name=name or getattr(fn, "__name__", None) or "mean_metric_wrapper", dtype=dtype)
        self._fn = fn
        self._fn_kwargs = kwargs
        if fn in _losses._FUNCTIONS.values() or isinstance(fn, _losses.Loss):
            self._direction = "down"

    def update_state(self, y_true, y_pred, sample_weight=None):
        values = self._fn(y_true, y_pred, **self._fn_kwargs)
        return super().update_state(values, sample_weight=sample_weight)

    def get_config(self):
        from tensorweave.keras.metrics import _function_name
        config = super().get_config()
        config["fn"] = _function_name(self._fn)
        config.update(self._fn_kwargs)
        return config

    @classmethod
    def from_config(cls, config):
        from tensorweave.keras.metrics import _resolve_function
        config = dict(config)
        if isinstance(config.get("fn"), str):
            config["fn"] = _resolve_function(config["fn"])
        return cls(**config)


class _BuiltinMeanWrapper(_losses._BuiltinOptions, MeanMetricWrapper):
    _config_base = Metric
