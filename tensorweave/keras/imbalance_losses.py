"""Keras 3's losses for imbalanced and structured targets: the focal cross-entropies (which
down-weight easy examples by ``(1 - p_t) ** gamma``), Dice and Tversky (overlap losses of
segmentation, reduced over ``axis``, the whole batch by default) and CTC (sequence labelling
without alignment, ``keras.ops.ctc_loss`` with class 0 as the blank). Each is a function per
sample and a ``Loss`` class; numbers equal Keras' (tests/keras_tests/test_losses_metrics_keras.py).

>>> from tensorweave.keras import losses
>>> round(float(losses.Dice()([[1.0, 0.0]], [[1.0, 0.0]])), 4)
0.0
>>> round(float(losses.binary_focal_crossentropy([[1.0]], [[0.5]], gamma=0.0)[0]), 4)   # gamma 0: plain BCE
0.6931
"""
import warnings

from tensorweave import nn as N
from tensorweave.keras import backend
from tensorweave.keras.losses import _BuiltinWrapper, _check_axis, _check_smoothing, _convert, _fn_pred, _rank
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as R


def _clipped_bce(y_true, p):
    eps = backend.epsilon()
    q = M.clip_by_value(p, eps, 1.0 - eps)
    return -(y_true * M.log(q) + (1.0 - y_true) * M.log(1.0 - q))


def binary_focal_crossentropy(y_true, y_pred, apply_class_balancing=False, alpha=0.25, gamma=2.0, from_logits=False,
                              label_smoothing=0.0, axis=-1):
    """``mean((1 - p_t) ** gamma * bce, axis)`` with ``p_t`` the probability of the true class;
    ``apply_class_balancing`` weighs positives by ``alpha`` and negatives by ``1 - alpha``."""
    _check_axis("binary_focal_crossentropy", axis)
    y_pred = _fn_pred(y_pred)
    y_true = _convert(y_true, y_pred.dtype)
    if label_smoothing:
        y_true = y_true * (1.0 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        y_pred = M.sigmoid(y_pred)
    bce = _clipped_bce(y_true, y_pred)
    p_t = y_true * y_pred + (1.0 - y_true) * (1.0 - y_pred)
    focal = M.pow(1.0 - p_t, A.constant(gamma, dtype=y_pred.dtype)) * bce
    if apply_class_balancing:
        focal = (y_true * alpha + (1.0 - y_true) * (1.0 - alpha)) * focal
    return focal if _rank(focal) == 0 else R.reduce_mean(focal, axis=axis)


def categorical_focal_crossentropy(y_true, y_pred, alpha=0.25, gamma=2.0, from_logits=False, label_smoothing=0.0,
                                   axis=-1):
    """``sum(alpha * (1 - p) ** gamma * -y_true * log(p), axis)`` over the class axis, with
    ``p`` the predicted probabilities renormalised and clipped as in categorical cross-entropy."""
    _check_axis("categorical_focal_crossentropy", axis)
    y_pred = _fn_pred(y_pred)
    y_true = _convert(y_true, y_pred.dtype)
    if y_pred.shape.rank and y_pred.shape[-1] == 1:
        warnings.warn("In loss categorical_focal_crossentropy, expected y_pred.shape to be (batch_size, num_classes) "
                      f"with num_classes > 1. Received: y_pred.shape={tuple(y_pred.shape.as_list())}. Consider using "
                      "'binary_crossentropy' if you only have 2 classes.", SyntaxWarning, stacklevel=2)
    if label_smoothing:
        n = y_true.shape[-1]
        num_classes = (A.constant(float(n), dtype=y_pred.dtype) if n is not None
                       else M.cast(A.shape(y_true)[-1], y_pred.dtype))
        y_true = y_true * (1.0 - label_smoothing) + label_smoothing / num_classes
    if from_logits:
        y_pred = N.softmax(y_pred, axis=axis)
    eps = backend.epsilon()
    p = M.clip_by_value(y_pred / R.reduce_sum(y_pred, axis=axis, keepdims=True), eps, 1.0 - eps)
    weight = M.pow(1.0 - p, A.constant(gamma, dtype=y_pred.dtype)) * alpha
    return R.reduce_sum(weight * (-y_true * M.log(p)), axis=axis)


def dice(y_true, y_pred, axis=None):
    """``1 - 2 |y_true ∩ y_pred| / (|y_true| + |y_pred|)``, sums over ``axis`` (all by default)."""
    y_pred = _fn_pred(y_pred)
    y_true = _convert(y_true, y_pred.dtype)
    intersection = R.reduce_sum(y_true * y_pred, axis=axis)
    union = R.reduce_sum(y_true, axis=axis) + R.reduce_sum(y_pred, axis=axis) + backend.epsilon()
    return 1.0 - 2.0 * intersection / union


def tversky(y_true, y_pred, alpha=0.5, beta=0.5, axis=None):
    """``1 - TP / (TP + alpha * FN + beta * FP)`` over ``axis`` (Keras' weighting: ``alpha``
    multiplies ``sum(y_true * (1 - y_pred))``); alpha = beta = 0.5 is Dice."""
    y_pred = _fn_pred(y_pred)
    y_true = _convert(y_true, y_pred.dtype)
    tp = R.reduce_sum(y_true * y_pred, axis=axis)
    missed = R.reduce_sum((1.0 - y_pred) * y_true, axis=axis)
    extra = R.reduce_sum(y_pred * (1.0 - y_true), axis=axis)
    return 1.0 - tp / (tp + missed * alpha + extra * beta + backend.epsilon())


def ctc(y_true, y_pred):
    """CTC loss per sample: ``y_true`` ``[batch, max_label_length]`` class ids padded with 0 (the
    blank, which labels therefore never use), ``y_pred`` ``[batch, time, classes]`` logits."""
    from tensorweave.keras.ops.nn import ctc_loss
    y_pred = _fn_pred(y_pred)
    y_true = _convert(y_true, "int32")
    if _rank(y_true) != 2:
        raise ValueError("Targets `y_true` are expected to be a tensor of shape `(batch_size, max_length)` in integer "
                         f"format. Received: y_true.shape={tuple(y_true.shape.as_list())}")
    if _rank(y_pred) != 3:
        raise ValueError("Logits `y_pred` are expected to be a tensor of shape `(batch_size, max_length, "
                         f"num_classes)`. Received: y_pred.shape={tuple(y_pred.shape.as_list())}")
    batch = A.shape(y_pred)[0]
    input_length = A.fill(A.reshape(batch, [1]), A.shape(y_pred)[1])
    label_length = R.reduce_sum(M.cast(M.not_equal(y_true, 0), "int32"), axis=-1)
    return ctc_loss(y_true, y_pred, label_length, input_length, mask_index=0)


class BinaryFocalCrossentropy(_BuiltinWrapper):
    """Binary focal cross-entropy (Lin et al., 2017) of :func:`binary_focal_crossentropy`.

    >>> round(float(BinaryFocalCrossentropy(gamma=2.0)([[1.0], [0.0]], [[0.9], [0.2]])), 5)
    0.00499
    """
    _options = ("apply_class_balancing", "alpha", "gamma", "from_logits", "label_smoothing", "axis")

    def __init__(self, apply_class_balancing=False, alpha=0.25, gamma=2.0, from_logits=False, label_smoothing=0.0,
                 axis=-1, reduction="sum_over_batch_size", name="binary_focal_crossentropy", dtype=None):
        _check_smoothing(label_smoothing)
        super().__init__(binary_focal_crossentropy, reduction=reduction, name=name, dtype=dtype,
                         apply_class_balancing=apply_class_balancing, alpha=alpha, gamma=gamma,
                         from_logits=from_logits, label_smoothing=label_smoothing, axis=axis)


class CategoricalFocalCrossentropy(_BuiltinWrapper):
    """Categorical focal cross-entropy of :func:`categorical_focal_crossentropy` (one-hot labels)."""
    _options = ("alpha", "gamma", "from_logits", "label_smoothing", "axis")

    def __init__(self, alpha=0.25, gamma=2.0, from_logits=False, label_smoothing=0.0, axis=-1,
                 reduction="sum_over_batch_size", name="categorical_focal_crossentropy", dtype=None):
        _check_smoothing(label_smoothing)
        super().__init__(categorical_focal_crossentropy, reduction=reduction, name=name, dtype=dtype, alpha=alpha,
                         gamma=gamma, from_logits=from_logits, label_smoothing=label_smoothing, axis=axis)


class Dice(_BuiltinWrapper):
    """The Dice loss of :func:`dice`."""
    _options = ("axis",)

    def __init__(self, reduction="sum_over_batch_size", name="dice", axis=None, dtype=None):
        super().__init__(dice, reduction=reduction, name=name, dtype=dtype, axis=axis)


class Tversky(_BuiltinWrapper):
    """The Tversky loss of :func:`tversky`."""
    _options = ("alpha", "beta", "axis")

    def __init__(self, alpha=0.5, beta=0.5, reduction="sum_over_batch_size", name="tversky", axis=None, dtype=None):
        super().__init__(tversky, reduction=reduction, name=name, dtype=dtype, alpha=alpha, beta=beta, axis=axis)


class CTC(_BuiltinWrapper):
    """The CTC loss of :func:`ctc`."""

    def __init__(self, reduction="sum_over_batch_size", name="ctc", dtype=None):
        super().__init__(ctc, reduction=reduction, name=name, dtype=dtype)


CLASSES = (BinaryFocalCrossentropy, CategoricalFocalCrossentropy, Dice, Tversky, CTC)
FUNCTIONS = (binary_focal_crossentropy, categorical_focal_crossentropy, dice, tversky, ctc)
