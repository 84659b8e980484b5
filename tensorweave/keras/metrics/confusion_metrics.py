"""Confusion-matrix metrics: ``TruePositives``, ``FalsePositives``, ``TrueNegatives``,
``FalseNegatives``, ``Precision``, ``Recall`` and ``AUC``.

Predictions are compared with thresholds (``y_pred > threshold`` is a positive prediction;
a non-zero label is a positive label) and the weighted counts of the four cells are kept per
threshold in state variables. ``AUC`` keeps ``num_thresholds`` (200) evenly spaced
thresholds and integrates the ROC or PR curve with a Riemann sum (``summation_method``:
"interpolation" (trapezoids; PR uses Davis & Goadrich's interpolation), "minoring",
"majoring"), as Keras; with 200 thresholds it agrees with the exact AUC to about 1e-2.

>>> from tensorweave.keras import metrics
>>> m = metrics.Precision()
>>> round(float(m([0, 1, 1, 1], [1, 0, 1, 1])), 4)
0.6667
>>> m = metrics.AUC(num_thresholds=3)
>>> float(m([0, 0, 1, 1], [0.0, 0.5, 0.3, 0.9]))
0.75
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.keras import backend
from tensorweave.keras import losses as _losses
from tensorweave.keras.metrics.metric import Metric, updates
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as R
from tensorweave.ops.indexing_ops import one_hot
from tensorweave.ops.indexing_ops import range as _range
from tensorweave.ops.sort_ops import cumsum, top_k as _top_k

# Keras' stand-in for -inf: below every threshold, so top_k's kept entries are positive.
NEG_INF = -1e10
TP, FP, TN, FN = "tp", "fp", "tn", "fn"

_cast, _convert, _tensor, _rank = _losses._cast, _losses._convert, _losses._tensor, _losses._rank

_shape_str = _losses._shape_str


def _to_list(x):
    if isinstance(x, (list, tuple)):
        return list(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return [x]


def parse_init_thresholds(thresholds, default_threshold=0.5):
    """``thresholds`` as a list of floats in [0, 1] (``default_threshold`` when None)."""
    if thresholds is not None:
        values = _to_list(thresholds)
        bad = [t for t in values if t is None or not 0 <= t <= 1]
        if bad:
            raise ValueError(f"Threshold values must be in [0, 1]. Received: {bad}")
        return [float(t) for t in values]
    return [float(t) for t in _to_list(default_threshold)]


def is_evenly_distributed_thresholds(thresholds):
    """Whether ``thresholds`` are ``i / (n - 1)`` for ``i = 0..n-1`` (to within epsilon), which
    allows the bucketed O(N + T) update instead of comparing every prediction with every threshold."""
    thresholds = np.asarray(thresholds, np.float64)
    n = len(thresholds)
    if n < 3:
        return False
    even = np.arange(n, dtype=np.float32) / (n - 1)
    return bool(np.allclose(thresholds, even, atol=backend.epsilon()))


def _filter_top_k(x, k):
    """``x`` with all but the ``k`` largest entries of the last axis set to NEG_INF."""
    n = x.shape[-1]
    if n is None:
        raise ValueError("top_k needs the number of classes (the last axis of y_pred) to be known")
    _, idx = _top_k(x, k)
    mask = R.reduce_sum(one_hot(idx, n, dtype=x.dtype), axis=-2)
    return x * mask + NEG_INF * (1.0 - mask)


def _trailing_expand(w, rank):
    while _rank(w) is not None and 0 < _rank(w) < rank:
        w = A.expand_dims(w, -1)
    return w


def update_confusion_matrix_variables(variables_to_update, y_true, y_pred, thresholds, top_k=None, class_id=None,
                                      sample_weight=None, multi_label=False, label_weights=None,
                                      thresholds_distributed_evenly=False, name="confusion_matrix"):
    """Adds a batch's weighted true/false positive/negative counts (one per threshold, and
    per label when ``multi_label``) to the variables in ``variables_to_update`` (keys "tp",
    "fp", "tn", "fn"). Returns the assignment ops (None eagerly)."""
    if not variables_to_update or any(k not in (TP, FP, TN, FN) for k in variables_to_update):
        raise ValueError(f"variables_to_update must map some of {[TP, FP, TN, FN]} to variables, "
                         f"got {list(variables_to_update)}")
    dtype = next(iter(variables_to_update.values())).dtype
    y_true = _convert(y_true, dtype)
    y_pred = _convert(y_pred, dtype)
    y_pred, y_true = _losses.squeeze_or_expand_to_same_rank(y_pred, y_true)
    if _rank(y_true) is not None and _rank(y_pred) is not None and (
            _rank(y_true) != _rank(y_pred) or not y_true.shape.is_compatible_with(y_pred.shape)):
        raise ValueError(f"{name}: `y_true` and `y_pred` must have the same shape. Received: "
                         f"y_true.shape={_shape_str(y_true.shape)}, y_pred.shape={_shape_str(y_pred.shape)}")
    if sample_weight is not None:
        sample_weight = _convert(sample_weight, dtype)
        y_pred, sample_weight = _losses.squeeze_or_expand_to_same_rank(y_pred, sample_weight)
    if top_k is not None:
        y_pred = _filter_top_k(y_pred, top_k)
    if class_id is not None:
        n = y_pred.shape[-1]
        if n is not None and not 0 <= class_id < n:
            raise ValueError(f"{name}: class_id={class_id} is out of range for y_pred of shape {_shape_str(y_pred.shape)}")
        # Keeps a size-1 last axis, so per-sample weights still line up.
        y_true = y_true[..., class_id:class_id + 1]
        y_pred = y_pred[..., class_id:class_id + 1]
    if sample_weight is not None:
        sample_weight = _trailing_expand(sample_weight, _rank(y_pred))
        sample_weight = A.broadcast_to(sample_weight, A.shape(y_pred))
    if label_weights is not None and not multi_label:
        lw = A.broadcast_to(_convert(label_weights, dtype), A.shape(y_pred))
        sample_weight = lw if sample_weight is None else sample_weight * lw
    if thresholds_distributed_evenly:
        counts = _bucketed_counts(variables_to_update, y_true, y_pred, len(thresholds), sample_weight, multi_label)
    else:
        counts = _compared_counts(variables_to_update, y_true, y_pred, thresholds, sample_weight, multi_label)
    return [variables_to_update[k].assign_add(counts[k], read_value=False) for k in variables_to_update]


def _compared_counts(wanted, y_true, y_pred, thresholds, sample_weight, multi_label):
    """Counts by comparing every prediction with every threshold: (T, N*labels) booleans."""
    dtype = y_pred.dtype
    num = len(thresholds)
    if multi_label:
        if _rank(y_pred) != 2:
            raise ValueError(f"multi_label expects y_pred of shape (batch, labels), got {_shape_str(y_pred.shape)}")
        pred = A.expand_dims(y_pred, 0)
        label = A.expand_dims(M.not_equal(y_true, 0.0), 0)
        weights = None if sample_weight is None else A.expand_dims(sample_weight, 0)
        thr = A.reshape(A.constant(np.asarray(thresholds), dtype=dtype), [num, 1, 1])
    else:
        pred = A.reshape(y_pred, [1, -1])
        label = A.reshape(M.not_equal(y_true, 0.0), [1, -1])
        weights = None if sample_weight is None else A.reshape(sample_weight, [1, -1])
        thr = A.reshape(A.constant(np.asarray(thresholds), dtype=dtype), [num, 1])
    pred_pos = M.greater(pred, thr)
    pred_neg = M.logical_not(pred_pos)
    label_neg = M.logical_not(label)
    cells = {TP: (label, pred_pos), FP: (label_neg, pred_pos), TN: (label_neg, pred_neg), FN: (label, pred_neg)}
    out = {}
    for key in wanted:
        lab, prd = cells[key]
        hits = M.cast(M.logical_and(lab, prd), dtype)
        if weights is not None:
            hits = hits * weights
        out[key] = R.reduce_sum(hits, axis=1)
    return out


def _bucketed_counts(wanted, y_true, y_pred, num, sample_weight, multi_label):
    """Counts for thresholds ``[-eps, 1/(T-1), ..., (T-2)/(T-1), 1+eps]`` in O(N + T): each
    prediction falls in the bucket of the largest threshold below it (``ceil(p*(T-1)) - 1``);
    the count at threshold j is the sum over buckets >= j (a reversed cumulative sum)."""
    dtype = y_pred.dtype
    buckets = M.ceil(y_pred * float(num - 1)) - 1.0
    buckets = M.cast(M.clip_by_value(buckets, 0.0, float(num - 1)), _dt.int32)
    pos = M.cast(M.not_equal(y_true, 0.0), dtype)
    neg = 1.0 - pos
    if sample_weight is not None:
        pos, neg = pos * sample_weight, neg * sample_weight
    if multi_label:
        if _rank(y_pred) != 2 or y_pred.shape[-1] is None:
            raise ValueError(f"multi_label expects y_pred of shape (batch, labels), got {_shape_str(y_pred.shape)}")
        labels = y_pred.shape[-1]
        ids = A.reshape(buckets * labels + _range(labels), [-1])
        segments, shape = num * labels, [num, labels]
        total_pos, total_neg = R.reduce_sum(pos, axis=0), R.reduce_sum(neg, axis=0)
    else:
        ids = A.reshape(buckets, [-1])
        segments, shape = num, [num]
        total_pos, total_neg = R.reduce_sum(pos), R.reduce_sum(neg)

    def above(weights):
        per_bucket = A.reshape(A.unsorted_segment_sum(A.reshape(weights, [-1]), ids, segments), shape)
        return cumsum(per_bucket, axis=0, reverse=True)

    out = {}
    if TP in wanted or FN in wanted:
        tp = above(pos)
        out[TP], out[FN] = tp, total_pos - tp
    if FP in wanted or TN in wanted:
        fp = above(neg)
        out[FP], out[TN] = fp, total_neg - fp
    return {k: out[k] for k in wanted}


class _ConfusionMatrixConditionCount(Metric):
    _condition = None

    def __init__(self, thresholds=None, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.init_thresholds = thresholds
        self.thresholds = parse_init_thresholds(thresholds, default_threshold=0.5)
        self.accumulator = self.add_variable(shape=(len(self.thresholds),), initializer="zeros", name="accumulator")

    def update_state(self, y_true, y_pred, sample_weight=None):
        return updates(*update_confusion_matrix_variables({self._condition: self.accumulator}, y_true, y_pred,
                                                          self.thresholds, sample_weight=sample_weight,
                                                          name=self.name))

    def result(self):
        value = self.accumulator.value()
        return value[0] if len(self.thresholds) == 1 else A.identity(value)

    def get_config(self):
        return {**super().get_config(), "thresholds": self.init_thresholds}


class TruePositives(_ConfusionMatrixConditionCount):
    """The weighted number of true positives (per threshold when several are given).

    >>> float(TruePositives()([0, 1, 1, 1], [1, 0, 1, 1]))
    2.0
    """
    _condition = TP


class FalsePositives(_ConfusionMatrixConditionCount):
    """The weighted number of false positives.

    >>> float(FalsePositives()([0, 1, 0, 0], [0, 0, 1, 1]))
    2.0
    """
    _condition = FP


class TrueNegatives(_ConfusionMatrixConditionCount):
    """The weighted number of true negatives.

    >>> float(TrueNegatives()([0, 1, 0, 0], [1, 1, 0, 0]))
    2.0
    """
    _condition = TN


class FalseNegatives(_ConfusionMatrixConditionCount):
    """The weighted number of false negatives.

    >>> float(FalseNegatives()([0, 1, 1, 1], [0, 1, 0, 0]))
    2.0
    """
    _condition = FN


class _PrecisionRecall(Metric):
    _direction = "up"
    _cells = ()

    def __init__(self, thresholds=None, top_k=None, class_id=None, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.init_thresholds = thresholds
        self.top_k = top_k
        self.class_id = class_id
        # With top_k and no thresholds every kept prediction counts as positive.
        default = 0.5 if top_k is None else NEG_INF
        self.thresholds = parse_init_thresholds(thresholds, default_threshold=default)
        n = len(self.thresholds)
        self.true_positives = self.add_variable(shape=(n,), initializer="zeros", name="true_positives")
        other = self._cells[1]
        setattr(self, other, self.add_variable(shape=(n,), initializer="zeros", name=other))

    def update_state(self, y_true, y_pred, sample_weight=None):
        cells = {TP: self.true_positives, self._cells[0]: getattr(self, self._cells[1])}
        return updates(*update_confusion_matrix_variables(cells, y_true, y_pred, self.thresholds, top_k=self.top_k,
                                                          class_id=self.class_id, sample_weight=sample_weight,
                                                          name=self.name))

    def result(self):
        tp = self.true_positives.value()
        value = M.div_no_nan(tp, tp + getattr(self, self._cells[1]).value())
        return value[0] if len(self.thresholds) == 1 else value

    def get_config(self):
        return {**super().get_config(), "thresholds": self.init_thresholds, "top_k": self.top_k,
                "class_id": self.class_id}


class Precision(_PrecisionRecall):
    """``true_positives / (true_positives + false_positives)``.

    ``thresholds`` (float or list in [0, 1], default 0.5; a list gives one value per
    threshold), ``top_k`` (only the k largest predictions of a sample count as positive),
    ``class_id`` (only that class's column counts).

    >>> round(float(Precision()([0, 1, 1, 1], [1, 0, 1, 1])), 4)
    0.6667
    >>> float(Precision(top_k=1)([[0, 0, 1, 1]], [[1, 1, 1, 0]]))
    0.0
    """
    _cells = (FP, "false_positives")


class Recall(_PrecisionRecall):
    """``true_positives / (true_positives + false_negatives)`` (arguments as :class:`Precision`).

    >>> round(float(Recall()([0, 1, 1, 1], [1, 0, 1, 1])), 4)
    0.6667
    """
    _cells = (FN, "false_negatives")


_CURVES = ("ROC", "PR")
_SUMMATIONS = ("interpolation", "minoring", "majoring")


class AUC(Metric):
    """Area under the ROC or PR curve, from confusion counts at ``num_thresholds`` thresholds.

    Args (Keras 3): ``num_thresholds`` (200; more is closer to the exact AUC), ``curve``
    ("ROC" or "PR"), ``summation_method`` ("interpolation", "minoring", "majoring"),
    ``thresholds`` (explicit thresholds in [0, 1] instead of evenly spaced ones),
    ``multi_label`` (one curve per label, averaged, weighted by ``label_weights``),
    ``num_labels``, ``label_weights``, ``from_logits`` (apply a sigmoid to ``y_pred`` first).

    >>> m = AUC()
    >>> round(float(m([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])), 3)
    0.75
    """
    _direction = "up"

    def __init__(self, num_thresholds=200, curve="ROC", summation_method="interpolation", name=None, dtype=None,
                 thresholds=None, multi_label=False, num_labels=None, label_weights=None, from_logits=False):
        super().__init__(name=name, dtype=dtype)
        if str(curve).upper() not in _CURVES:
            raise ValueError(f'Invalid AUC curve value: "{curve}". Expected values are ["ROC", "PR"]')
        if str(summation_method).lower() not in _SUMMATIONS:
            raise ValueError(f'Invalid AUC summation method value: "{summation_method}". Expected values are '
                             '["interpolation", "majoring", "minoring"]')
        self.curve = str(curve).upper()
        self.summation_method = str(summation_method).lower()
        if thresholds is not None:
            inner = sorted(parse_init_thresholds(thresholds))
            self.num_thresholds = len(inner) + 2
            self._thresholds_distributed_evenly = is_evenly_distributed_thresholds([0.0] + inner + [1.0])
        else:
            if int(num_thresholds) <= 1:
                raise ValueError(f"Argument `num_thresholds` must be an integer > 1. Received: "
                                 f"num_thresholds={num_thresholds}")
            self.num_thresholds = int(num_thresholds)
            inner = [(i + 1) * 1.0 / (self.num_thresholds - 1) for i in range(self.num_thresholds - 2)]
            self._thresholds_distributed_evenly = True
        # End points just outside [0, 1], so predictions of exactly 0 or 1 are classified
        # the same way at every threshold despite rounding.
        eps = backend.epsilon()
        self._thresholds = [0.0 - eps] + inner + [1.0 + eps]
        self.multi_label = bool(multi_label)
        self.num_labels = num_labels
        if label_weights is not None:
            lw = np.asarray(label_weights, dtype=np.float64)
            if np.any(lw < 0):
                raise ValueError(f"All values of `label_weights` must be non-negative. Received: {label_weights}")
            self.label_weights = lw
        else:
            self.label_weights = None
        self._from_logits = bool(from_logits)
        self._built = False
        if self.multi_label and num_labels:
            self._build(int(num_labels))
        elif not self.multi_label:
            self._build(None)

    @property
    def thresholds(self):
        return list(self._thresholds)

    def _build(self, num_labels):
        shape = (self.num_thresholds,) if num_labels is None else (self.num_thresholds, num_labels)
        if num_labels is not None:
            self.num_labels = num_labels
        self.true_positives = self.add_variable(shape=shape, initializer="zeros", name="true_positives")
        self.false_positives = self.add_variable(shape=shape, initializer="zeros", name="false_positives")
        self.true_negatives = self.add_variable(shape=shape, initializer="zeros", name="true_negatives")
        self.false_negatives = self.add_variable(shape=shape, initializer="zeros", name="false_negatives")
        self._built = True

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = _tensor(y_pred)
        if not self._built:
            if _rank(y_pred) != 2 or y_pred.shape[-1] is None:
                raise ValueError(f"AUC(multi_label=True) expects y_pred of shape (batch, labels) with a known number "
                                 f"of labels, got {_shape_str(y_pred.shape)}")
            self._build(int(y_pred.shape[-1]))
        if self._from_logits:
            y_pred = M.sigmoid(_cast(y_pred, self._dtype))
        label_weights = None if self.multi_label else self.label_weights
        cells = {TP: self.true_positives, FP: self.false_positives, TN: self.true_negatives,
                 FN: self.false_negatives}
        return updates(*update_confusion_matrix_variables(
            cells, y_true, y_pred, self._thresholds, sample_weight=sample_weight, multi_label=self.multi_label,
            label_weights=label_weights, thresholds_distributed_evenly=self._thresholds_distributed_evenly,
            name=self.name))

    def reset_state(self):
        if not self._built:
            return None
        return super().reset_state()

    def _by_label(self, per_label):
        if not self.multi_label:
            return R.reduce_sum(per_label)
        by_label = R.reduce_sum(per_label, axis=0)
        if self.label_weights is None:
            return R.reduce_mean(by_label)
        lw = A.constant(self.label_weights, dtype=by_label.dtype)
        return M.div_no_nan(R.reduce_sum(by_label * lw), R.reduce_sum(lw))

    def interpolate_pr_auc(self):
        """PR-AUC by Davis & Goadrich's interpolation: precision varies along each threshold
        interval as ``tp / p`` with ``tp`` linear in the number ``p`` of positive
        predictions, which integrates to the log term below."""
        n = self.num_thresholds
        tp = self.true_positives.value()
        fp = self.false_positives.value()
        fn = self.false_negatives.value()
        dtp = tp[:n - 1] - tp[1:]
        p = tp + fp
        dp = p[:n - 1] - p[1:]
        prec_slope = M.div_no_nan(dtp, M.maximum(dp, 0.0))
        intercept = tp[1:] - prec_slope * p[1:]
        both_pos = M.logical_and(M.greater(p[:n - 1], 0.0), M.greater(p[1:], 0.0))
        safe_p_ratio = M.where(both_pos, M.div_no_nan(p[:n - 1], M.maximum(p[1:], 0.0)), A.ones_like(p[1:]))
        increment = M.div_no_nan(prec_slope * (dtp + intercept * M.log(safe_p_ratio)),
                                 M.maximum(tp[1:] + fn[1:], 0.0))
        return self._by_label(increment)

    def result(self):
        if not self._built:
            return A.constant(0.0, dtype=self._dtype)
        if self.curve == "PR" and self.summation_method == "interpolation":
            return self.interpolate_pr_auc()
        n = self.num_thresholds
        tp, fp = self.true_positives.value(), self.false_positives.value()
        tn, fn = self.true_negatives.value(), self.false_negatives.value()
        recall = M.div_no_nan(tp, tp + fn)
        if self.curve == "ROC":
            x, y = M.div_no_nan(fp, fp + tn), recall
        else:
            x, y = recall, M.div_no_nan(tp, tp + fp)
        if self.summation_method == "interpolation":
            heights = (y[:n - 1] + y[1:]) / 2.0
        elif self.summation_method == "minoring":
            heights = M.minimum(y[:n - 1], y[1:])
        else:
            heights = M.maximum(y[:n - 1], y[1:])
        # Thresholds rise, so x falls: x[i] - x[i + 1] >= 0 is each rectangle's width.
        return self._by_label((x[:n - 1] - x[1:]) * heights)

    def get_config(self):
        config = {**super().get_config(), "num_thresholds": self.num_thresholds, "curve": self.curve,
                  "summation_method": self.summation_method, "multi_label": self.multi_label,
                  "num_labels": self.num_labels,
                  "label_weights": None if self.label_weights is None else self.label_weights.tolist(),
                  "from_logits": self._from_logits}
        if not self._thresholds_distributed_evenly:
            config["thresholds"] = self._thresholds[1:-1]
        return config
