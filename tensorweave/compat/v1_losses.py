"""``tf.compat.v1.losses``: TF1's loss functions, weighted and reduced the TF1 way.

Each loss computes per-element losses, multiplies them by ``weights`` (a scalar or a tensor
broadcastable to the losses), reduces them by ``reduction`` (default
``Reduction.SUM_BY_NONZERO_WEIGHTS``: the weighted sum over the number of non-zero weights) and
adds the result to the graph's ``losses`` collection (``loss_collection``), which
:func:`get_total_loss` sums together with the regularization losses.

>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     loss = tf.losses.mean_squared_error([1.0, 2.0, 3.0], [1.5, 2.0, 2.0], weights=[1.0, 0.0, 2.0])
...     total = tf.losses.get_total_loss()
>>> with tf.Session(graph=g) as sess:
...     [round(float(v), 4) for v in sess.run([loss, total])]
[1.125, 1.125]
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import get_default_graph
from tensorweave.ops import math_ops as _m
from tensorweave.ops import nn_ops as _nn
from tensorweave.ops import reduce_ops as _r
from tensorweave.ops.array_ops import ones_like, squeeze, stop_gradient
from tensorweave.core.graph import name_scope

__all__ = ["Reduction", "compute_weighted_loss", "absolute_difference", "cosine_distance", "hinge_loss",
           "huber_loss", "log_loss", "mean_pairwise_squared_error", "mean_squared_error",
           "sigmoid_cross_entropy", "softmax_cross_entropy", "sparse_softmax_cross_entropy", "add_loss",
           "get_losses", "get_regularization_loss", "get_regularization_losses", "get_total_loss"]

LOSSES = "losses"
REGULARIZATION_LOSSES = "regularization_losses"


class Reduction:
    """How a weighted loss tensor becomes the returned loss (``tf.compat.v1.losses.Reduction``)."""

    NONE = "none"
    SUM = "weighted_sum"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
    MEAN = "weighted_mean"
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"
    SUM_OVER_NONZERO_WEIGHTS = SUM_BY_NONZERO_WEIGHTS

    @classmethod
    def all(cls):
        return (cls.NONE, cls.SUM, cls.MEAN, cls.SUM_OVER_BATCH_SIZE, cls.SUM_OVER_NONZERO_WEIGHTS,
                cls.SUM_BY_NONZERO_WEIGHTS)

    @classmethod
    def validate(cls, key):
        if key not in cls.all():
            raise ValueError(f"Invalid Reduction Key {key!r}; expected one of {cls.all()}")


def _float(x):
    x = convert_to_tensor(x)
    return x if x.dtype.is_floating else _m.cast(x, _dt.float32)


def _check_same_shape(a, b, what, op):
    if a.shape.rank is not None and b.shape.rank is not None and not a.shape.is_compatible_with(b.shape):
        raise ValueError(f"{op}: {what[0]} shape {a.shape} and {what[1]} shape {b.shape} are incompatible. "
                         f"Hint: TF1 losses take tensors of one shape (weights may broadcast).")


def compute_weighted_loss(losses, weights=1.0, scope=None, loss_collection=LOSSES,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Weights ``losses`` and reduces them by ``reduction``; adds the result to ``loss_collection``."""
    Reduction.validate(reduction)
    with name_scope(scope or "weighted_loss"):
        losses = _float(losses)
        weights = _m.cast(convert_to_tensor(weights), losses.dtype)
        weighted = _m.multiply(losses, weights)
        if reduction == Reduction.NONE:
            loss = weighted
        else:
            loss = _r.reduce_sum(weighted)
            if reduction == Reduction.MEAN:
                loss = _m.div_no_nan(loss, _r.reduce_sum(_m.multiply(ones_like(losses), weights)))
            elif reduction == Reduction.SUM_OVER_BATCH_SIZE:
                loss = _m.div_no_nan(loss, _m.cast(_r.reduce_sum(ones_like(losses)), losses.dtype))
            elif reduction == Reduction.SUM_BY_NONZERO_WEIGHTS:
                present = _m.multiply(ones_like(losses), weights)
                loss = _m.div_no_nan(loss, _m.cast(_r.count_nonzero(present), losses.dtype))
    if loss_collection:
        get_default_graph().add_to_collection(loss_collection, loss)
    return loss


def _finish(losses, weights, scope, loss_collection, reduction):
    return compute_weighted_loss(losses, weights, scope, loss_collection, reduction)


def absolute_difference(labels, predictions, weights=1.0, scope=None, loss_collection=LOSSES,
                        reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    with name_scope(scope or "absolute_difference"):
        labels, predictions = _float(labels), _float(predictions)
        _check_same_shape(predictions, labels, ("predictions", "labels"), "absolute_difference")
        losses = _m.abs(_m.subtract(predictions, labels))
    return _finish(losses, weights, scope, loss_collection, reduction)


def mean_squared_error(labels, predictions, weights=1.0, scope=None, loss_collection=LOSSES,
                       reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    with name_scope(scope or "mean_squared_error"):
        labels, predictions = _float(labels), _float(predictions)
        _check_same_shape(predictions, labels, ("predictions", "labels"), "mean_squared_error")
        losses = _m.squared_difference(predictions, labels)
    return _finish(losses, weights, scope, loss_collection, reduction)


def huber_loss(labels, predictions, weights=1.0, delta=1.0, scope=None, loss_collection=LOSSES,
               reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    with name_scope(scope or "huber_loss"):
        labels, predictions = _float(labels), _float(predictions)
        _check_same_shape(predictions, labels, ("predictions", "labels"), "huber_loss")
        error = _m.abs(_m.subtract(predictions, labels))
        quadratic = _m.minimum(error, delta)
        linear = _m.subtract(error, quadratic)
        losses = _m.add(_m.multiply(0.5, _m.square(quadratic)), _m.multiply(delta, linear))
    return _finish(losses, weights, scope, loss_collection, reduction)


def log_loss(labels, predictions, weights=1.0, epsilon=1e-7, scope=None, loss_collection=LOSSES,
             reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    with name_scope(scope or "log_loss"):
        labels, predictions = _float(labels), _float(predictions)
        _check_same_shape(predictions, labels, ("predictions", "labels"), "log_loss")
        pos = _m.multiply(labels, _m.log(_m.add(predictions, epsilon)))
        neg = _m.multiply(_m.subtract(1.0, labels), _m.log(_m.add(_m.subtract(1.0, predictions), epsilon)))
        losses = _m.negative(_m.add(pos, neg))
    return _finish(losses, weights, scope, loss_collection, reduction)


def hinge_loss(labels, logits, weights=1.0, scope=None, loss_collection=LOSSES,
               reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Labels are 0/1 and become -1/+1; the loss is ``max(0, 1 - labels * logits)``."""
    with name_scope(scope or "hinge_loss"):
        labels, logits = _float(labels), _float(logits)
        _check_same_shape(logits, labels, ("logits", "labels"), "hinge_loss")
        signs = _m.subtract(_m.multiply(2.0, labels), 1.0)
        losses = _m.maximum(_m.subtract(1.0, _m.multiply(signs, logits)), 0.0)
    return _finish(losses, weights, scope, loss_collection, reduction)


def cosine_distance(labels, predictions, axis=None, weights=1.0, scope=None, loss_collection=LOSSES,
                    reduction=Reduction.SUM_BY_NONZERO_WEIGHTS, dim=None):
    """``1 - sum(labels * predictions, axis)`` for unit-normalized inputs (``dim`` is TF1's old name)."""
    axis = dim if axis is None else axis
    if axis is None:
        raise ValueError("cosine_distance: You must specify 'axis'.")
    with name_scope(scope or "cosine_distance_loss"):
        labels, predictions = _float(labels), _float(predictions)
        _check_same_shape(predictions, labels, ("predictions", "labels"), "cosine_distance")
        losses = _m.subtract(1.0, _r.reduce_sum(_m.multiply(predictions, labels), axis=axis, keepdims=True))
    return _finish(losses, weights, scope, loss_collection, reduction)


def mean_pairwise_squared_error(labels, predictions, weights=1.0, scope=None, loss_collection=LOSSES):
    """Per sample, the mean over pairs (i, j) of ``((p_i - p_j) - (l_i - l_j))**2``, times the weights, summed.

    TF1's formula: with ``d = p - l`` and ``n`` the sample's elements of non-zero weight,
    ``2 * sum(d**2) / (n - 1) - 2 * sum(d)**2 / (n * (n - 1))``; ``weights`` broadcast to the inputs.
    """
    with name_scope(scope or "mean_pairwise_squared_error"):
        labels, predictions = _float(labels), _float(predictions)
        _check_same_shape(predictions, labels, ("predictions", "labels"), "mean_pairwise_squared_error")
        weights = _m.cast(convert_to_tensor(weights), predictions.dtype)
        diffs = _m.subtract(predictions, labels)
        axes = list(range(1, diffs.shape.rank))
        present = _m.cast(_m.not_equal(_m.multiply(ones_like(diffs), weights), 0.0), diffs.dtype)
        n = _r.reduce_sum(present, axis=axes, keepdims=True)
        sum_sq = _r.reduce_sum(_m.square(diffs), axis=axes, keepdims=True)
        term1 = _m.multiply(2.0, _m.div_no_nan(sum_sq, _m.maximum(_m.subtract(n, 1.0), 0.0)))
        sum_d = _r.reduce_sum(diffs, axis=axes, keepdims=True)
        term2 = _m.multiply(2.0, _m.div_no_nan(_m.square(sum_d),
                                                _m.maximum(_m.multiply(n, _m.subtract(n, 1.0)), 0.0)))
        loss = _r.reduce_sum(_m.multiply(_m.subtract(term1, term2), weights))
    if loss_collection:
        get_default_graph().add_to_collection(loss_collection, loss)
    return loss


def _squeeze_last_if(t, rank):
    """Drops a trailing size-1 dimension from ``t`` when its rank is ``rank`` (TF1's squeezable dims)."""
    if t.shape.rank is not None and t.shape.rank == rank and rank > 0 and t.shape[-1] == 1:
        return squeeze(t, [-1])
    return t


def sigmoid_cross_entropy(multi_class_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=LOSSES, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    with name_scope(scope or "sigmoid_cross_entropy_loss"):
        logits = _float(logits)
        labels = _m.cast(convert_to_tensor(multi_class_labels), logits.dtype)
        _check_same_shape(logits, labels, ("logits", "multi_class_labels"), "sigmoid_cross_entropy")
        if label_smoothing:
            labels = _m.add(_m.multiply(labels, 1.0 - label_smoothing), 0.5 * label_smoothing)
        losses = _nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
    return _finish(losses, weights, scope, loss_collection, reduction)


def softmax_cross_entropy(onehot_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=LOSSES, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Cross-entropy of ``softmax(logits)`` against one-hot labels; no gradient flows into the labels."""
    with name_scope(scope or "softmax_cross_entropy_loss"):
        logits = _float(logits)
        labels = _m.cast(convert_to_tensor(onehot_labels), logits.dtype)
        _check_same_shape(logits, labels, ("logits", "onehot_labels"), "softmax_cross_entropy")
        if label_smoothing:
            num_classes = _m.cast(_shape_of(labels)[-1], logits.dtype)
            labels = _m.add(_m.multiply(labels, 1.0 - label_smoothing), _m.divide(label_smoothing, num_classes))
        losses = _nn.softmax_cross_entropy_with_logits(stop_gradient(labels), logits)
        weights = _squeeze_last_if(convert_to_tensor(weights), 2)
    return _finish(losses, weights, scope, loss_collection, reduction)


def _shape_of(t):
    from tensorweave.ops.array_ops import shape
    return shape(t)


def sparse_softmax_cross_entropy(labels, logits, weights=1.0, scope=None, loss_collection=LOSSES,
                                 reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Cross-entropy of ``softmax(logits)`` against integer class ids (``[batch]`` or ``[batch, 1]``)."""
    with name_scope(scope or "sparse_softmax_cross_entropy_loss"):
        logits = _float(logits)
        labels = convert_to_tensor(labels)
        rank = logits.shape.rank
        if rank is not None:
            labels = _squeeze_last_if(labels, rank)
            weights = _squeeze_last_if(convert_to_tensor(weights), rank)
        losses = _nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return _finish(losses, weights, scope, loss_collection, reduction)


def add_loss(loss, loss_collection=LOSSES):
    """Adds an externally computed loss to ``loss_collection`` (so :func:`get_total_loss` sees it)."""
    if loss_collection:
        get_default_graph().add_to_collection(loss_collection, loss)


def get_losses(scope=None, loss_collection=LOSSES):
    return get_default_graph().get_collection(loss_collection, scope)


def get_regularization_losses(scope=None):
    return get_default_graph().get_collection(REGULARIZATION_LOSSES, scope)


def get_regularization_loss(scope=None, name="total_regularization_loss"):
    losses = get_regularization_losses(scope)
    if not losses:
        return _m.multiply(convert_to_tensor(0.0), 1.0, name=name)
    return _m.add_n(losses, name=name)


def get_total_loss(add_regularization_losses=True, name="total_loss", scope=None):
    """The sum of the ``losses`` collection (and the regularization losses); an error if both are empty."""
    losses = get_losses(scope)
    if add_regularization_losses:
        losses += get_regularization_losses(scope)
    if not losses:
        raise ValueError("get_total_loss: no losses were added to the graph's 'losses' (or "
                         "'regularization_losses') collection. Hint: create the loss with a tf.losses "
                         "function or call tf.losses.add_loss(loss) first.")
    return _m.add_n(losses, name=name)
