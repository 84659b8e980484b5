"""Accuracy metrics: ``Accuracy``, ``BinaryAccuracy``, ``CategoricalAccuracy``,
``SparseCategoricalAccuracy``, ``TopKCategoricalAccuracy``, ``SparseTopKCategoricalAccuracy``,
and their per-sample functions.

Which one ``compile(metrics=["accuracy"])`` means depends on the loss and the shapes; see
:func:`tensorweave.keras.metrics.resolve_accuracy`.

>>> from tensorweave.keras import metrics
>>> m = metrics.SparseCategoricalAccuracy()
>>> float(m([[2], [1]], [[0.1, 0.6, 0.3], [0.05, 0.95, 0.0]]))
0.5
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core.shape import TensorShape
from tensorweave.keras import backend
from tensorweave.keras import losses as _losses
from tensorweave.keras.metrics.reduction_metrics import _BuiltinMeanWrapper
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as R
from tensorweave.ops.indexing_ops import range as _range

_cast, _convert, _tensor, _rank = _losses._cast, _losses._convert, _losses._tensor, _losses._rank

_shape_str = _losses._shape_str


def _floatx():
    return _dt.as_dtype(backend.floatx())


def _mean_last(x):
    return x if _rank(x) == 0 else R.reduce_mean(x, axis=-1)


def _check_broadcastable(name, y_true, y_pred):
    _losses._check_broadcastable(name, y_true, y_pred)


def accuracy(y_true, y_pred):
    """How often ``y_pred`` equals ``y_true`` exactly, averaged over the last axis.

    >>> accuracy([[1.0, 2.0], [3.0, 4.0]], [[1.0, 0.0], [3.0, 4.0]]).numpy()
    array([0.5, 1. ], dtype=float32)
    """
    y_pred = _tensor(y_pred)
    y_true = _convert(y_true, y_pred.dtype)
    y_true, y_pred = _losses.squeeze_or_expand_to_same_rank(y_true, y_pred)
    _check_broadcastable("accuracy", y_true, y_pred)
    return _mean_last(M.cast(M.equal(y_true, y_pred), _floatx()))


def binary_accuracy(y_true, y_pred, threshold=0.5):
    """How often ``y_pred > threshold`` matches the binary ``y_true``, averaged over the last axis.

    >>> binary_accuracy([[1.0], [1.0], [0.0], [0.0]], [[0.98], [0.3], [0.0], [0.6]]).numpy()
    array([1., 0., 1., 0.], dtype=float32)
    """
    y_pred = _losses._fn_pred(y_pred)
    y_true = _convert(y_true, y_pred.dtype)
    y_true, y_pred = _losses.squeeze_or_expand_to_same_rank(y_true, y_pred)
    _check_broadcastable("binary_accuracy", y_true, y_pred)
    y_pred = M.cast(M.greater(y_pred, A.constant(threshold, dtype=y_pred.dtype)), y_true.dtype)
    return _mean_last(M.cast(M.equal(y_true, y_pred), _floatx()))


def _check_class_axis(name, y_pred):
    if _rank(y_pred) == 0:
        raise ValueError(f"{name}: `y_pred` must have rank >= 1 (the last axis holds the classes), got a scalar")


def categorical_accuracy(y_true, y_pred):
    """Whether the arg-max of one-hot ``y_true`` equals that of ``y_pred`` (per sample).

    >>> categorical_accuracy([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0.0]]).numpy()
    array([0., 1.], dtype=float32)
    """
    y_pred, y_true = _tensor(y_pred), _tensor(y_true)
    _check_class_axis("categorical_accuracy", y_pred)
    if _rank(y_true) is not None and _rank(y_pred) is not None and (
            _rank(y_true) != _rank(y_pred) or not y_true.shape.is_compatible_with(y_pred.shape)):
        raise ValueError("categorical_accuracy: `y_true` must be one-hot with y_pred's shape. Received: "
                         f"y_true.shape={_shape_str(y_true.shape)}, y_pred.shape={_shape_str(y_pred.shape)}. Hint: integer "
                         "class labels go with sparse_categorical_accuracy")
    matches = M.equal(R.argmax(y_true, axis=-1), R.argmax(y_pred, axis=-1))
    return M.cast(matches, _floatx())


def _sparse_labels(name, y_true, y_pred):
    """Labels of shape ``y_pred.shape[:-1]`` (a trailing size-1 axis is squeezed), checked."""
    _check_class_axis(name, y_pred)
    rt, rp = _rank(y_true), _rank(y_pred)
    if rt is not None and rp is not None and rt == rp and y_true.shape[-1] == 1:
        y_true = A.squeeze(y_true, [-1])
        rt -= 1
    if rt is not None and rp is not None and (
            rt != rp - 1 or not y_true.shape.is_compatible_with(TensorShape(y_pred.shape.as_list()[:-1]))):
        raise ValueError(f"{name}: `y_true` must hold one integer class per sample, with shape "
                         f"y_pred.shape[:-1] or y_pred.shape[:-1] + (1,). Received: y_true.shape={_shape_str(y_true.shape)}, "
                         f"y_pred.shape={_shape_str(y_pred.shape)}")
    return y_true


def sparse_categorical_accuracy(y_true, y_pred):
    """Whether integer ``y_true`` equals the arg-max of ``y_pred`` (per sample; labels of shape
    ``(N,)`` or ``(N, 1)``).

    >>> sparse_categorical_accuracy([[2], [1]], [[0.1, 0.6, 0.3], [0.05, 0.95, 0.0]]).numpy()
    array([0., 1.], dtype=float32)
    """
    y_pred, y_true = _tensor(y_pred), _tensor(y_true)
    y_true = _sparse_labels("sparse_categorical_accuracy", y_true, y_pred)
    predicted = R.argmax(y_pred, axis=-1)
    if predicted.dtype is not y_true.dtype:
        predicted = M.cast(predicted, y_true.dtype)
    return M.cast(M.equal(y_true, predicted), _floatx())


def in_top_k(targets, predictions, k):
    """Whether each ``targets[i]`` is among the ``k`` largest ``predictions[i]`` (TF's
    ``in_top_k``: ties with the k-th value count as in; a non-finite row or an out-of-range
    target gives False).

    >>> in_top_k([0, 2], [[0.5, 0.5, 0.0], [0.9, 0.1, 0.0]], 1).numpy()
    array([ True, False])
    """
    predictions = _tensor(predictions)
    targets = _tensor(targets)
    n = predictions.shape[-1]
    classes = _range(n if n is not None else A.shape(predictions)[-1], dtype=targets.dtype)
    is_target = M.equal(A.expand_dims(targets, -1), classes)
    neg_inf = A.fill(A.shape(predictions), A.constant(float("-inf"), dtype=predictions.dtype))
    target_score = R.reduce_max(M.where(is_target, predictions, neg_inf), axis=-1)
    better = R.reduce_sum(M.cast(M.greater(predictions, A.expand_dims(target_score, -1)), _dt.int32), axis=-1)
    finite = M.logical_and(M.is_finite(target_score), R.reduce_all(M.is_finite(predictions), axis=-1))
    return M.logical_and(M.less(better, k), finite)


def _flat_top_k(labels, y_pred, k):
    # in_top_k works on (samples, classes): flatten leading axes, then restore the labels' shape.
    original = A.shape(labels)
    if _rank(y_pred) is not None and _rank(y_pred) > 2:
        y_pred = A.reshape(y_pred, [-1, y_pred.shape[-1] if y_pred.shape[-1] is not None else -1])
    reshape = _rank(labels) is not None and _rank(labels) > 1
    if reshape:
        labels = A.reshape(labels, [-1])
    matches = M.cast(in_top_k(M.cast(labels, _dt.int32), y_pred, k), _floatx())
    return A.reshape(matches, original) if reshape else matches


def top_k_categorical_accuracy(y_true, y_pred, k=5):
    """Whether the class of one-hot ``y_true`` is among the top ``k`` predictions.

    >>> top_k_categorical_accuracy([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0.0]], k=1).numpy()
    array([0., 1.], dtype=float32)
    """
    y_pred, y_true = _tensor(y_pred), _tensor(y_true)
    _check_class_axis("top_k_categorical_accuracy", y_pred)
    if _rank(y_true) is not None and _rank(y_pred) is not None and (
            _rank(y_true) != _rank(y_pred) or not y_true.shape.is_compatible_with(y_pred.shape)):
        raise ValueError("top_k_categorical_accuracy: `y_true` must be one-hot with y_pred's shape. Received: "
                         f"y_true.shape={_shape_str(y_true.shape)}, y_pred.shape={_shape_str(y_pred.shape)}. Hint: integer "
                         "class labels go with sparse_top_k_categorical_accuracy")
    return _flat_top_k(R.argmax(y_true, axis=-1), y_pred, k)


def sparse_top_k_categorical_accuracy(y_true, y_pred, k=5, from_sorted_ids=False):
    """Whether integer ``y_true`` is among the top ``k`` predictions. With
    ``from_sorted_ids=True`` ``y_pred`` holds class ids sorted by score (e.g. from ``tw.math.top_k``).

    >>> sparse_top_k_categorical_accuracy([2, 1], [[0.1, 0.9, 0.8], [0.05, 0.95, 0.0]], k=2).numpy()
    array([1., 1.], dtype=float32)
    """
    y_pred, y_true = _tensor(y_pred), _tensor(y_true)
    if from_sorted_ids:
        _check_class_axis("sparse_top_k_categorical_accuracy", y_pred)
        if _rank(y_true) is not None and _rank(y_true) == _rank(y_pred) and y_true.shape[-1] == 1:
            y_true = A.squeeze(y_true, [-1])
        ids = y_pred[..., :k]
        hit = M.equal(M.cast(ids, _dt.int64), A.expand_dims(M.cast(y_true, _dt.int64), -1))
        return M.cast(R.reduce_any(hit, axis=-1), _floatx())
    y_true = _sparse_labels("sparse_top_k_categorical_accuracy", y_true, y_pred)
    return _flat_top_k(y_true, y_pred, k)


class Accuracy(_BuiltinMeanWrapper):
    """How often predictions equal labels exactly.

    >>> float(Accuracy()([[1], [2], [3], [4]], [[0], [2], [3], [4]]))
    0.75
    """
    _direction = "up"

    def __init__(self, name="accuracy", dtype=None):
        super().__init__(accuracy, name=name, dtype=dtype)


class BinaryAccuracy(_BuiltinMeanWrapper):
    """How often ``y_pred > threshold`` matches binary labels.

    >>> float(BinaryAccuracy()([[1], [1], [0], [0]], [[0.98], [1.0], [0.0], [0.6]]))
    0.75
    """
    _direction = "up"
    _options = ("threshold",)

    def __init__(self, name="binary_accuracy", dtype=None, threshold=0.5):
        if threshold is not None and not 0 <= threshold <= 1:
            raise ValueError(f"Invalid value for argument `threshold`. Expected a value in interval [0, 1]. "
                             f"Received: threshold={threshold}")
        super().__init__(binary_accuracy, name=name, dtype=dtype, threshold=threshold)


class CategoricalAccuracy(_BuiltinMeanWrapper):
    """How often the arg-max of the prediction matches that of the one-hot label.

    >>> float(CategoricalAccuracy()([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0.0]]))
    0.5
    """
    _direction = "up"

    def __init__(self, name="categorical_accuracy", dtype=None):
        super().__init__(categorical_accuracy, name=name, dtype=dtype)


class SparseCategoricalAccuracy(_BuiltinMeanWrapper):
    """How often the arg-max of the prediction matches the integer label.

    >>> float(SparseCategoricalAccuracy()([2, 1], [[0.1, 0.6, 0.3], [0.05, 0.95, 0.0]]))
    0.5
    """
    _direction = "up"

    def __init__(self, name="sparse_categorical_accuracy", dtype=None):
        super().__init__(sparse_categorical_accuracy, name=name, dtype=dtype)


class TopKCategoricalAccuracy(_BuiltinMeanWrapper):
    """How often the one-hot label's class is among the top ``k`` predictions.

    >>> float(TopKCategoricalAccuracy(k=1)([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0.0]]))
    0.5
    """
    _direction = "up"
    _options = ("k",)

    def __init__(self, k=5, name="top_k_categorical_accuracy", dtype=None):
        super().__init__(top_k_categorical_accuracy, name=name, dtype=dtype, k=k)


class SparseTopKCategoricalAccuracy(_BuiltinMeanWrapper):
    """How often the integer label is among the top ``k`` predictions.

    >>> float(SparseTopKCategoricalAccuracy(k=1)([2, 1], [[0.1, 0.9, 0.8], [0.05, 0.95, 0.0]]))
    0.5
    """
    _direction = "up"
    _options = ("k", "from_sorted_ids")

    def __init__(self, k=5, name="sparse_top_k_categorical_accuracy", dtype=None, from_sorted_ids=False):
        super().__init__(sparse_top_k_categorical_accuracy, name=name, dtype=dtype, k=k,
                         from_sorted_ids=from_sorted_ids)
