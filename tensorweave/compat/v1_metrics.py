"""``tf.compat.v1.metrics``: streaming metrics as (value, update_op) pairs over local variables.

Each metric creates its accumulators as non-trainable *local* variables (collections
``local_variables`` and ``metric_variables``, under the metric's name scope), so
``tf.local_variables_initializer()`` resets them. Running ``update_op`` adds one batch and
returns the metric over everything seen so far; ``value`` reads it without updating.

>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     labels = tf.placeholder(tf.int64, [None])
...     predictions = tf.placeholder(tf.int64, [None])
...     acc, acc_update = tf.metrics.accuracy(labels, predictions)
...     init = tf.local_variables_initializer()
>>> with tf.Session(graph=g) as sess:
...     sess.run(init)
...     _ = sess.run(acc_update, {labels: [1, 2, 3], predictions: [1, 2, 0]})
...     _ = sess.run(acc_update, {labels: [4], predictions: [4]})
...     float(sess.run(acc))
0.75
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.context import executing_eagerly
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import get_default_graph, name_scope
from tensorweave.ops import array_ops as _a
from tensorweave.ops import linalg_ops as _linalg
from tensorweave.ops.indexing_ops import reverse as _reverse
from tensorweave.ops import math_ops as _m
from tensorweave.ops import reduce_ops as _r
from tensorweave.ops.variables import LOCAL_VARIABLES, Variable

__all__ = ["accuracy", "auc", "false_negatives", "false_positives", "mean", "mean_absolute_error",
           "mean_cosine_distance", "mean_iou", "mean_per_class_accuracy", "mean_relative_error",
           "mean_squared_error", "mean_tensor", "percentage_below", "precision", "precision_at_thresholds",
           "recall", "recall_at_thresholds", "root_mean_squared_error", "true_negatives", "true_positives",
           "false_negatives_at_thresholds", "false_positives_at_thresholds", "true_negatives_at_thresholds",
           "true_positives_at_thresholds", "sensitivity_at_specificity", "specificity_at_sensitivity",
           "precision_at_k", "recall_at_k", "precision_at_top_k", "recall_at_top_k", "sparse_precision_at_k",
           "average_precision_at_k", "sparse_average_precision_at_k"]

METRIC_VARIABLES = "metric_variables"
_EPSILON = 1e-7


def _require_graph(name):
    if executing_eagerly():
        raise RuntimeError(f"tf.metrics.{name} is not supported when eager execution is enabled. "
                           f"Hint: use tf.keras.metrics (or build a tf.Graph) instead.")


def _metric_variable(shape, dtype, name):
    """A zero-initialized local accumulator (TF1's ``metric_variable``)."""
    return Variable(lambda: _a.zeros(shape, dtype), trainable=False, name=name, dtype=dtype,
                    collections=[LOCAL_VARIABLES, METRIC_VARIABLES])


def _collect(value, update, metrics_collections, updates_collections):
    g = get_default_graph()
    for c in metrics_collections or ():
        g.add_to_collection(c, value)
    for c in updates_collections or ():
        g.add_to_collection(c, update)
    return value, update


def _float(x):
    x = convert_to_tensor(x)
    return x if x.dtype in (_dt.float32, _dt.float64) else _m.cast(x, _dt.float32)


def _squeeze_to(labels, predictions):
    """Drops a trailing size-1 dimension so that ``labels`` and ``predictions`` have one rank (TF1 does)."""
    lr, pr = labels.shape.rank, predictions.shape.rank
    if lr is not None and pr is not None:
        if pr == lr + 1 and predictions.shape[-1] == 1:
            predictions = _a.squeeze(predictions, [-1])
        elif lr == pr + 1 and labels.shape[-1] == 1:
            labels = _a.squeeze(labels, [-1])
    return labels, predictions


def _check_shapes(labels, predictions, op):
    if labels.shape.rank is not None and predictions.shape.rank is not None \
            and not labels.shape.is_compatible_with(predictions.shape):
        raise ValueError(f"tf.metrics.{op}: labels shape {labels.shape} and predictions shape "
                         f"{predictions.shape} are incompatible. Hint: pass class ids for both "
                         f"(e.g. tf.argmax(logits, 1)), not logits against ids.")


def _weights_like(values, weights):
    ones = _a.ones_like(values)
    return ones if weights is None else _m.multiply(ones, _m.cast(convert_to_tensor(weights), values.dtype))


def _mean_values(values, weights):
    """Inside the metric's name scope: the ``total``/``count`` accumulators, the value and the update."""
    values = _float(values)
    total = _metric_variable([], values.dtype, "total")
    count = _metric_variable([], values.dtype, "count")
    w = _weights_like(values, weights)
    new_total = total.assign_add(_r.reduce_sum(_m.multiply(values, w)))
    new_count = count.assign_add(_r.reduce_sum(w))
    value = _m.div_no_nan(total.read_value(), count.read_value(), name="value")
    update = _m.div_no_nan(new_total, new_count, name="update_op")
    return value, update


def mean(values, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """The (weighted) mean of every value seen: ``total / count``."""
    _require_graph("mean")
    with name_scope(name or "mean"):
        value, update = _mean_values(values, weights)
    return _collect(value, update, metrics_collections, updates_collections)


def mean_tensor(values, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """The element-wise (weighted) mean over batches of tensors of one shape."""
    _require_graph("mean_tensor")
    with name_scope(name or "mean"):
        values = _float(values)
        total = _metric_variable(values.shape.as_list(), values.dtype, "total_tensor")
        count = _metric_variable(values.shape.as_list(), values.dtype, "count_tensor")
        w = _weights_like(values, weights)
        new_total = total.assign_add(_m.multiply(values, w))
        new_count = count.assign_add(w)
        value = _m.div_no_nan(total.read_value(), count.read_value(), name="value")
        update = _m.div_no_nan(new_total, new_count, name="update_op")
    return _collect(value, update, metrics_collections, updates_collections)


def accuracy(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """How often ``predictions`` equals ``labels`` (class ids, not logits)."""
    _require_graph("accuracy")
    labels, predictions = convert_to_tensor(labels), convert_to_tensor(predictions)
    labels, predictions = _squeeze_to(labels, predictions)
    _check_shapes(labels, predictions, "accuracy")
    if predictions.dtype != labels.dtype:
        predictions = _m.cast(predictions, labels.dtype)
    with name_scope(name or "accuracy"):
        value, update = _mean_values(_m.cast(_m.equal(predictions, labels), _dt.float32), weights)
    return _collect(value, update, metrics_collections, updates_collections)


def _error_mean(fn, op, labels, predictions, weights, mc, uc, name):
    _require_graph(op)
    labels, predictions = _squeeze_to(_float(labels), _float(predictions))
    _check_shapes(labels, predictions, op)
    with name_scope(name or op):
        value, update = _mean_values(fn(labels, predictions), weights)
    return _collect(value, update, mc, uc)


def mean_absolute_error(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                        name=None):
    return _error_mean(lambda l, p: _m.abs(_m.subtract(p, l)), "mean_absolute_error", labels, predictions,
                       weights, metrics_collections, updates_collections, name)


def mean_squared_error(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                       name=None):
    return _error_mean(_m.squared_difference, "mean_squared_error", labels, predictions,
                       weights, metrics_collections, updates_collections, name)


def root_mean_squared_error(labels, predictions, weights=None, metrics_collections=None,
                            updates_collections=None, name=None):
    mse, update = mean_squared_error(labels, predictions, weights, None, None, name or "root_mean_squared_error")
    return _collect(_m.sqrt(mse), _m.sqrt(update), metrics_collections, updates_collections)


def mean_relative_error(labels, predictions, normalizer, weights=None, metrics_collections=None,
                        updates_collections=None, name=None):
    """The mean of ``|predictions - labels| / normalizer`` (0 where the normalizer is 0)."""
    normalizer = _float(normalizer)
    return _error_mean(lambda l, p: _m.div_no_nan(_m.abs(_m.subtract(l, p)), normalizer),
                       "mean_relative_error", labels, predictions, weights, metrics_collections,
                       updates_collections, name)


def mean_cosine_distance(labels, predictions, dim, weights=None, metrics_collections=None,
                         updates_collections=None, name=None):
    """The mean of ``1 - sum(labels * predictions, dim)`` (inputs already unit-normalized)."""
    _require_graph("mean_cosine_distance")
    labels, predictions = _float(labels), _float(predictions)
    _check_shapes(labels, predictions, "mean_cosine_distance")
    with name_scope(name or "mean_cosine_distance"):
        distance = _m.subtract(1.0, _r.reduce_sum(_m.multiply(labels, predictions), axis=dim, keepdims=True))
        value, update = _mean_values(distance, weights)
    return _collect(value, update, metrics_collections, updates_collections)


def percentage_below(values, threshold, weights=None, metrics_collections=None, updates_collections=None,
                     name=None):
    with name_scope(name or "percentage_below_threshold"):
        value, update = _mean_values(_m.cast(_m.less(_float(values), threshold), _dt.float32), weights)
    return _collect(value, update, metrics_collections, updates_collections)


# ---- counts of a binary classification ---------------------------------------------------------------
def _bools(labels, predictions):
    labels, predictions = convert_to_tensor(labels), convert_to_tensor(predictions)
    labels, predictions = _squeeze_to(labels, predictions)
    as_bool = lambda t: t if t.dtype == _dt.bool_ else _m.not_equal(t, _m.cast(0, t.dtype))  # noqa: E731
    return as_bool(labels), as_bool(predictions)


def _count(op, default_name, condition, weights, mc, uc, name):
    _require_graph(op)
    with name_scope(name or default_name):
        hits = _m.cast(condition, _dt.float32)
        w = _weights_like(hits, weights)
        var = _metric_variable([], _dt.float32, "count")
        update = var.assign_add(_r.reduce_sum(_m.multiply(hits, w)))
        value = _a.identity(var.read_value(), name="value")
    return _collect(value, update, mc, uc)


def _condition(kind, labels, predictions):
    lab, pred = _bools(labels, predictions)
    _check_shapes(lab, pred, kind)
    nl, np_ = _m.logical_not(lab), _m.logical_not(pred)
    return {"true_positives": _m.logical_and(lab, pred), "false_positives": _m.logical_and(nl, pred),
            "true_negatives": _m.logical_and(nl, np_), "false_negatives": _m.logical_and(lab, np_)}[kind]


def _counter(kind):
    def metric(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None):
        return _count(kind, kind, _condition(kind, labels, predictions), weights, metrics_collections,
                      updates_collections, name)
    metric.__name__ = kind
    metric.__doc__ = f"The weighted number of {kind.replace('_', ' ')} (labels and predictions read as bools)."
    return metric


true_positives = _counter("true_positives")
false_positives = _counter("false_positives")
true_negatives = _counter("true_negatives")
false_negatives = _counter("false_negatives")


def _ratio(op, first, second, labels, predictions, weights, mc, uc, name):
    """``first / (first + second)`` of two counts (precision: tp, fp; recall: tp, fn)."""
    _require_graph(op)
    with name_scope(name or op):
        a, a_up = _counter(first)(labels, predictions, weights)
        b, b_up = _counter(second)(labels, predictions, weights)
        value = _m.div_no_nan(a, _m.add(a, b), name="value")
        update = _m.div_no_nan(a_up, _m.add(a_up, b_up), name="update_op")
    return _collect(value, update, mc, uc)


def precision(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """``tp / (tp + fp)`` over everything seen (predictions read as bools)."""
    return _ratio("precision", "true_positives", "false_positives", labels, predictions, weights,
                  metrics_collections, updates_collections, name)


def recall(labels, predictions, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """``tp / (tp + fn)`` over everything seen (predictions read as bools)."""
    return _ratio("recall", "true_positives", "false_negatives", labels, predictions, weights,
                  metrics_collections, updates_collections, name)


# ---- metrics over thresholds -----------------------------------------------------------------------
def _confusion_at_thresholds(labels, predictions, thresholds, weights, includes):
    """Variables and update ops of tp/fn/tn/fp at each threshold (a prediction above it is positive)."""
    predictions = _float(predictions)
    labels = convert_to_tensor(labels)
    labels, predictions = _squeeze_to(labels, predictions)
    _check_shapes(labels, predictions, "auc")
    lab = _a.reshape(labels if labels.dtype == _dt.bool_ else _m.not_equal(labels, _m.cast(0, labels.dtype)),
                     [1, -1])
    pred = _a.reshape(predictions, [1, -1])
    thr = _a.reshape(convert_to_tensor(np.asarray(thresholds, np.float32)), [-1, 1])
    above = _m.greater(pred, _m.cast(thr, pred.dtype))
    w = _a.ones_like(pred) if weights is None else _a.reshape(
        _weights_like(predictions, weights), [1, -1])
    w = _m.cast(w, _dt.float32)
    conditions = {"tp": _m.logical_and(lab, above), "fp": _m.logical_and(_m.logical_not(lab), above),
                  "tn": _m.logical_and(_m.logical_not(lab), _m.logical_not(above)),
                  "fn": _m.logical_and(lab, _m.logical_not(above))}
    values, updates = {}, {}
    n = len(thresholds)
    for key in includes:
        var = _metric_variable([n], _dt.float32, {"tp": "true_positives", "fp": "false_positives",
                                                  "tn": "true_negatives", "fn": "false_negatives"}[key])
        updates[key] = var.assign_add(_r.reduce_sum(_m.multiply(_m.cast(conditions[key], _dt.float32), w), axis=1))
        values[key] = var.read_value()
    return values, updates


def _auc_thresholds(num_thresholds):
    inner = [(i + 1) * 1.0 / (num_thresholds - 1) for i in range(num_thresholds - 2)]
    return [0.0 - _EPSILON] + inner + [1.0 + _EPSILON]


def _auc_from(c, curve, summation_method):
    eps = _EPSILON
    if curve == "ROC":
        x = _m.divide(c["fp"], _m.add(_m.add(c["fp"], c["tn"]), eps))
        y = _m.divide(c["tp"], _m.add(_m.add(c["tp"], c["fn"]), eps))
    else:
        x = _m.divide(c["tp"], _m.add(_m.add(c["tp"], c["fn"]), eps))
        y = _m.divide(_m.add(c["tp"], eps), _m.add(_m.add(c["tp"], c["fp"]), eps))
    dx = _m.subtract(x[:-1], x[1:])
    if summation_method == "trapezoidal":
        height = _m.divide(_m.add(y[:-1], y[1:]), 2.0)
    elif summation_method == "minoring":
        height = _m.minimum(y[:-1], y[1:])
    else:
        height = _m.maximum(y[:-1], y[1:])
    return _r.reduce_sum(_m.multiply(dx, height))


def auc(labels, predictions, weights=None, num_thresholds=200, metrics_collections=None,
        updates_collections=None, curve="ROC", name=None, summation_method="trapezoidal", thresholds=None):
    """The area under the ROC (or PR) curve, from counts at ``num_thresholds`` thresholds in [0, 1]."""
    _require_graph("auc")
    if curve not in ("ROC", "PR"):
        raise ValueError(f"tf.metrics.auc: curve must be 'ROC' or 'PR', got {curve!r}")
    if summation_method not in ("trapezoidal", "careful_interpolation", "minoring", "majoring"):
        raise ValueError(f"tf.metrics.auc: invalid summation_method {summation_method!r}")
    if summation_method == "careful_interpolation":
        summation_method = "trapezoidal"  # the interpolation only differs on PR curves with few points
    thr = _auc_thresholds(num_thresholds) if thresholds is None else \
        [0.0 - _EPSILON] + list(thresholds) + [1.0 + _EPSILON]
    with name_scope(name or "auc"):
        values, updates = _confusion_at_thresholds(labels, predictions, thr, weights, ("tp", "fn", "tn", "fp"))
        value = _a.identity(_auc_from(values, curve, summation_method), name="value")
        update = _a.identity(_auc_from(updates, curve, summation_method), name="update_op")
    return _collect(value, update, metrics_collections, updates_collections)


def _at_thresholds(key, op):
    def metric(labels, predictions, thresholds, weights=None, metrics_collections=None, updates_collections=None,
               name=None):
        _require_graph(op)
        with name_scope(name or op):
            values, updates = _confusion_at_thresholds(labels, predictions, thresholds, weights, (key,))
        return _collect(values[key], updates[key], metrics_collections, updates_collections)
    metric.__name__ = op
    return metric


true_positives_at_thresholds = _at_thresholds("tp", "true_positives_at_thresholds")
false_positives_at_thresholds = _at_thresholds("fp", "false_positives_at_thresholds")
true_negatives_at_thresholds = _at_thresholds("tn", "true_negatives_at_thresholds")
false_negatives_at_thresholds = _at_thresholds("fn", "false_negatives_at_thresholds")


def _rate_at_thresholds(op, other):
    def metric(labels, predictions, thresholds, weights=None, metrics_collections=None, updates_collections=None,
               name=None):
        _require_graph(op)
        with name_scope(name or op):
            v, u = _confusion_at_thresholds(labels, predictions, thresholds, weights, ("tp", other))
            value = _m.divide(v["tp"], _m.add(_m.add(v["tp"], v[other]), _EPSILON), name="value")
            update = _m.divide(u["tp"], _m.add(_m.add(u["tp"], u[other]), _EPSILON), name="update_op")
        return _collect(value, update, metrics_collections, updates_collections)
    metric.__name__ = op
    return metric


precision_at_thresholds = _rate_at_thresholds("precision_at_thresholds", "fp")
recall_at_thresholds = _rate_at_thresholds("recall_at_thresholds", "fn")


def _rate_at_rate(op, target_key):
    """Sensitivity at a given specificity and the reverse: one rate at the threshold where the other is closest."""
    def metric(labels, predictions, target, weights=None, num_thresholds=200, metrics_collections=None,
               updates_collections=None, name=None):
        _require_graph(op)
        if not 0.0 <= target <= 1.0:
            raise ValueError(f"tf.metrics.{op}: the target rate must be in [0, 1], got {target}")
        kepsilon = _EPSILON
        thr = [(i + 1) * 1.0 / (num_thresholds - 1) for i in range(num_thresholds - 2)]
        thr = [0.0 - kepsilon] + thr + [1.0 + kepsilon]

        def compute(c):
            spec = _m.divide(c["tn"], _m.add(_m.add(c["tn"], c["fp"]), kepsilon))
            sens = _m.divide(c["tp"], _m.add(_m.add(c["tp"], c["fn"]), kepsilon))
            if target_key == "specificity":
                return _a.gather(sens, _r.argmin(_m.abs(_m.subtract(spec, target)), axis=0))
            # TF1 takes the last threshold of the closest sensitivity here (its first for specificity).
            last = _r.argmin(_reverse(_m.abs(_m.subtract(sens, target)), [0]), axis=0)
            return _a.gather(_reverse(spec, [0]), last)
        with name_scope(name or op):
            v, u = _confusion_at_thresholds(labels, predictions, thr, weights, ("tp", "fn", "tn", "fp"))
            value = _a.identity(compute(v), name="value")
            update = _a.identity(compute(u), name="update_op")
        return _collect(value, update, metrics_collections, updates_collections)
    metric.__name__ = op
    return metric


sensitivity_at_specificity = _rate_at_rate("sensitivity_at_specificity", "specificity")
specificity_at_sensitivity = _rate_at_rate("specificity_at_sensitivity", "sensitivity")


# ---- per-class metrics from a streaming confusion matrix -------------------------------------------
def _confusion_matrix(op, labels, predictions, num_classes, weights):
    _require_graph(op)
    labels, predictions = _squeeze_to(convert_to_tensor(labels), convert_to_tensor(predictions))
    _check_shapes(labels, predictions, op)
    lab = _m.cast(_a.reshape(labels, [-1]), _dt.int64)
    pred = _m.cast(_a.reshape(predictions, [-1]), _dt.int64)
    w = _m.cast(_a.reshape(_weights_like(_m.cast(labels, _dt.float64), weights), [-1]), _dt.float64)
    flat = _m.add(_m.multiply(lab, num_classes), pred)
    batch = _a.reshape(_a.unsorted_segment_sum(w, flat, num_classes * num_classes), [num_classes, num_classes])
    total = _metric_variable([num_classes, num_classes], _dt.float64, "total_confusion_matrix")
    return total.read_value(), total.assign_add(batch)


def mean_iou(labels, predictions, num_classes, weights=None, metrics_collections=None, updates_collections=None,
             name=None):
    """The mean over classes of ``tp / (tp + fp + fn)`` (classes never seen nor predicted are left out).

    As in TF1, ``update_op`` returns the updated (float64) confusion matrix, rows = labels.
    """
    with name_scope(name or "mean_iou"):
        cm, cm_update = _confusion_matrix("mean_iou", labels, predictions, num_classes, weights)

        def compute(m):
            row, col, diag = _r.reduce_sum(m, axis=1), _r.reduce_sum(m, axis=0), _linalg.diag_part(m)
            denom = _m.subtract(_m.add(row, col), diag)
            present = _r.reduce_sum(_m.cast(_m.not_equal(denom, 0.0), _dt.float64))
            iou = _m.div_no_nan(diag, denom)
            return _m.cast(_m.div_no_nan(_r.reduce_sum(iou), present), _dt.float32)
        value = _a.identity(compute(cm), name="value")
        update = _a.identity(cm_update, name="update_op")
    return _collect(value, update, metrics_collections, updates_collections)


def mean_per_class_accuracy(labels, predictions, num_classes, weights=None, metrics_collections=None,
                            updates_collections=None, name=None):
    """The mean over classes of each class's accuracy (classes never seen count as 0, as in TF1).

    As in TF1, ``update_op`` returns the per-class accuracies.
    """
    with name_scope(name or "mean_accuracy"):
        cm, cm_update = _confusion_matrix("mean_per_class_accuracy", labels, predictions, num_classes, weights)

        def per_class(m):
            return _m.cast(_m.div_no_nan(_linalg.diag_part(m), _r.reduce_sum(m, axis=1)), _dt.float32)
        value = _r.reduce_mean(per_class(cm), name="value")
        update = _a.identity(per_class(cm_update), name="update_op")
    return _collect(value, update, metrics_collections, updates_collections)


# ---- ranking metrics over the top k predicted classes ------------------------------------------------
def _label_sets(labels):
    """``[batch, n]`` int64 class ids (a ``[batch]`` vector becomes one column), each example's repeats
    replaced by -1: TF1 treats an example's labels as a set."""
    labels = _m.cast(convert_to_tensor(labels), _dt.int64)
    labels = _a.expand_dims(labels, 1) if labels.shape.rank == 1 else labels
    n = labels.shape[1]
    if n is None or n == 1:
        return labels
    earlier = convert_to_tensor(np.tril(np.ones((n, n), bool), -1))        # [j, i]: i < j
    same = _m.equal(_a.expand_dims(labels, 2), _a.expand_dims(labels, 1))  # [b, j, i]
    repeat = _r.reduce_any(_m.logical_and(same, earlier), axis=2)
    return _m.where(repeat, _a.fill(_a.shape(labels), np.int64(-1)), labels)


def _top_k_ids(predictions, k):
    from tensorweave.ops.sort_ops import top_k
    return _m.cast(top_k(_float(predictions), k).indices, _dt.int64)


def _hits(labels, top, class_id):
    """Per example: how many of the top ids are labels, how many are not, how many labels were missed."""
    in_labels = _r.reduce_any(_m.equal(_a.expand_dims(top, 2), _a.expand_dims(labels, 1)), axis=2)  # [b, k]
    valid_labels = _m.greater_equal(labels, 0)
    found = _r.reduce_any(_m.equal(_a.expand_dims(labels, 2), _a.expand_dims(top, 1)), axis=2)  # [b, n]
    if class_id is not None:
        is_class_top = _m.equal(top, class_id)
        is_class_label = _m.equal(labels, class_id)
        in_labels = _m.logical_and(in_labels, is_class_top)
        not_in = _m.logical_and(_m.logical_not(_r.reduce_any(_m.equal(_a.expand_dims(top, 2),
                                                                       _a.expand_dims(labels, 1)), axis=2)),
                                is_class_top)
        valid_labels = _m.logical_and(valid_labels, is_class_label)
    else:
        not_in = _m.logical_not(in_labels)
    f32 = lambda t: _r.reduce_sum(_m.cast(t, _dt.float32), axis=1)  # noqa: E731
    return f32(in_labels), f32(not_in), f32(_m.logical_and(valid_labels, _m.logical_not(found)))


def _at_k(op, default_name, labels, top, class_id, weights, mc, uc, name, which):
    _require_graph(op)
    with name_scope(name or default_name):
        # TF1 counts these in float64 (value and update_op are float64)
        tp, fp, fn = (_m.cast(t, _dt.float64) for t in _hits(_label_sets(labels), top, class_id))
        w = None if weights is None else _a.reshape(_m.cast(convert_to_tensor(weights), _dt.float64), [-1])
        scale = (lambda t: t) if w is None else (lambda t: _m.multiply(t, w))  # noqa: E731
        tp_var = _metric_variable([], _dt.float64, "true_positive_at_k")
        other = fp if which == "precision" else fn
        other_var = _metric_variable([], _dt.float64, ("false_positive" if which == "precision" else
                                                       "false_negative") + "_at_k")
        tp_up = tp_var.assign_add(_r.reduce_sum(scale(tp)))
        other_up = other_var.assign_add(_r.reduce_sum(scale(other)))
        tp_v, other_v = tp_var.read_value(), other_var.read_value()
        value = _m.div_no_nan(tp_v, _m.add(tp_v, other_v), name="value")
        update = _m.div_no_nan(tp_up, _m.add(tp_up, other_up), name="update_op")
    return _collect(value, update, mc, uc)


def precision_at_k(labels, predictions, k, class_id=None, weights=None, metrics_collections=None,
                   updates_collections=None, name=None):
    """Of the ``k`` highest-scoring classes of each example, the fraction that are among its labels."""
    return _at_k("precision_at_k", f"precision_at_{k}", labels, _top_k_ids(predictions, k), class_id, weights,
                 metrics_collections, updates_collections, name, "precision")


def recall_at_k(labels, predictions, k, class_id=None, weights=None, metrics_collections=None,
                updates_collections=None, name=None):
    """Of each example's labels, the fraction among its ``k`` highest-scoring classes."""
    return _at_k("recall_at_k", f"recall_at_{k}", labels, _top_k_ids(predictions, k), class_id, weights,
                 metrics_collections, updates_collections, name, "recall")


def _given_top_ids(predictions_idx, k):
    """The caller's top class ids as int64, cut to the first ``k`` columns when ``k`` is given."""
    top = _m.cast(convert_to_tensor(predictions_idx), _dt.int64)
    return top if k is None else top[:, :k]


def precision_at_top_k(labels, predictions_idx, k=None, class_id=None, weights=None, metrics_collections=None,
                       updates_collections=None, name=None):
    """``precision_at_k`` given the top class ids (``predictions_idx``, ``[batch, k]``) instead of scores."""
    top = _given_top_ids(predictions_idx, k)
    return _at_k("precision_at_top_k", f"precision_at_top_{k}", labels, top, class_id, weights,
                 metrics_collections, updates_collections, name, "precision")


def recall_at_top_k(labels, predictions_idx, k=None, class_id=None, weights=None, metrics_collections=None,
                    updates_collections=None, name=None):
    top = _given_top_ids(predictions_idx, k)
    return _at_k("recall_at_top_k", f"recall_at_top_{k}", labels, top, class_id, weights, metrics_collections,
                 updates_collections, name, "recall")


sparse_precision_at_k = precision_at_k


def _average_precision(labels, top, k):
    """Per example: ``sum_i precision@i * [top_i is a label] / min(k, n)`` where ``n`` is the width of the
    dense label tensor, repeats included (what TF1 divides by for dense labels)."""
    rel = _m.cast(_r.reduce_any(_m.equal(_a.expand_dims(top, 2), _a.expand_dims(labels, 1)), axis=2), _dt.float32)
    from tensorweave.ops.sort_ops import cumsum
    ranks = convert_to_tensor(np.arange(1, k + 1, dtype=np.float32))
    precision_at_i = _m.divide(cumsum(rel, axis=1), ranks)
    n_labels = _m.cast(_a.shape(labels)[1], _dt.float32)
    return _m.div_no_nan(_r.reduce_sum(_m.multiply(precision_at_i, rel), axis=1), _m.minimum(n_labels, float(k)))


def average_precision_at_k(labels, predictions, k, weights=None, metrics_collections=None, updates_collections=None,
                           name=None):
    """The mean over examples of the average precision of their ``k`` highest-scoring classes."""
    _require_graph("average_precision_at_k")
    with name_scope(name or f"average_precision_at_{k}"):
        ap = _m.cast(_average_precision(_label_sets(labels), _top_k_ids(predictions, k), k), _dt.float64)
        w = _a.ones_like(ap) if weights is None else _a.reshape(_m.cast(convert_to_tensor(weights), _dt.float64), [-1])
        total = _metric_variable([], _dt.float64, "total")
        count = _metric_variable([], _dt.float64, "max")
        up_total = total.assign_add(_r.reduce_sum(_m.multiply(ap, w)))
        up_count = count.assign_add(_r.reduce_sum(w))
        value = _m.div_no_nan(total.read_value(), count.read_value(), name="value")
        update = _m.div_no_nan(up_total, up_count, name="update_op")
    return _collect(value, update, metrics_collections, updates_collections)


sparse_average_precision_at_k = average_precision_at_k
