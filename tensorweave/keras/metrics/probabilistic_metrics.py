"""Probabilistic metrics: the cross-entropies and KL divergence as running weighted means
(the loss functions of ``keras.losses``, per sample).

>>> from tensorweave.keras import metrics
>>> m = metrics.SparseCategoricalCrossentropy(from_logits=True)
>>> round(float(m([1], [[0.0, 0.0]])), 4)
0.6931
"""
from tensorweave.keras.losses import (binary_crossentropy, categorical_crossentropy, kl_divergence,
                                      sparse_categorical_crossentropy)
from tensorweave.keras.metrics.reduction_metrics import _BuiltinMeanWrapper


class BinaryCrossentropy(_BuiltinMeanWrapper):
    """The mean binary cross-entropy (``from_logits``, ``label_smoothing``).

    >>> round(float(BinaryCrossentropy()([[1.0], [0.0]], [[0.5], [0.5]])), 4)
    0.6931
    """
    _direction = "down"
    _options = ("from_logits", "label_smoothing")

    def __init__(self, name="binary_crossentropy", dtype=None, from_logits=False, label_smoothing=0):
        super().__init__(binary_crossentropy, name=name, dtype=dtype, from_logits=from_logits,
                         label_smoothing=label_smoothing)


class CategoricalCrossentropy(_BuiltinMeanWrapper):
    """The mean categorical cross-entropy (``from_logits``, ``label_smoothing``, ``axis``).

    >>> round(float(CategoricalCrossentropy()([[0.0, 1.0]], [[0.5, 0.5]])), 4)
    0.6931
    """
    _direction = "down"
    _options = ("from_logits", "label_smoothing", "axis")

    def __init__(self, name="categorical_crossentropy", dtype=None, from_logits=False, label_smoothing=0, axis=-1):
        super().__init__(categorical_crossentropy, name=name, dtype=dtype, from_logits=from_logits,
                         label_smoothing=label_smoothing, axis=axis)


class SparseCategoricalCrossentropy(_BuiltinMeanWrapper):
    """The mean sparse categorical cross-entropy (``from_logits``, ``axis``).

    >>> round(float(SparseCategoricalCrossentropy()([1], [[0.5, 0.5]])), 4)
    0.6931
    """
    _direction = "down"
    _options = ("from_logits", "axis")

    def __init__(self, name="sparse_categorical_crossentropy", dtype=None, from_logits=False, axis=-1):
        super().__init__(sparse_categorical_crossentropy, name=name, dtype=dtype, from_logits=from_logits, axis=axis)


class KLDivergence(_BuiltinMeanWrapper):
    """The mean Kullback-Leibler divergence between ``y_true`` and ``y_pred``.

    >>> round(float(KLDivergence()([[0.5, 0.5]], [[0.25, 0.75]])), 4)
    0.1438
    """
    _direction = "down"

    def __init__(self, name="kl_divergence", dtype=None):
        super().__init__(kl_divergence, name=name, dtype=dtype)
