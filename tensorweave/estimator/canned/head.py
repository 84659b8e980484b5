"""The heads of the canned estimators: from logits and labels to the loss, predictions, metrics and
the ``EstimatorSpec`` (TF1's binary-logistic, multi-class-softmax and regression heads).

The training loss is ``Reduction.SUM`` over the batch by default, as TF1's canned estimators;
``average_loss`` (the weighted mean per example) is reported by ``evaluate`` beside ``loss``
(the mean over batches of the training loss).
"""
import numpy as np

from tensorweave.compat import v1_losses, v1_metrics, v1_train
from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import name_scope
from tensorweave.estimator.model_fn import EstimatorSpec, ModeKeys
from tensorweave.ops import array_ops as _a
from tensorweave.ops import math_ops as _m
from tensorweave.ops import nn_ops as _nn
from tensorweave.ops import reduce_ops as _r
from tensorweave.ops.control_flow_ops import control_dependencies, group
from tensorweave.ops.script_ops import numpy_function


def _column(t, what):
    t = convert_to_tensor(t)
    if t.shape.rank == 1:
        t = _a.expand_dims(t, 1)
    if t.shape.rank is not None and t.shape.rank != 2:
        raise ValueError(f"{what} must be [batch] or [batch, n], got shape {t.shape}")
    return t


def _weights(features, weight_column):
    if weight_column is None:
        return None
    key = weight_column if isinstance(weight_column, str) else weight_column.key
    if key not in features:
        raise ValueError(f"weight_column {key!r} is not among the features {sorted(features)}")
    return _column(_m.cast(convert_to_tensor(features[key]), _dt.float32), "weight_column")


class _Head:
    def __init__(self, weight_column=None, loss_reduction=v1_losses.Reduction.SUM, name=None, loss_fn=None):
        v1_losses.Reduction.validate(loss_reduction)
        if loss_reduction == v1_losses.Reduction.NONE:
            raise ValueError("a canned estimator's loss_reduction can not be NONE")
        if loss_fn is not None and not callable(loss_fn):
            raise ValueError(f"loss_fn must be callable (labels, logits) -> per-example losses, got {loss_fn!r}")
        self._weight_column = weight_column
        self._reduction = loss_reduction
        self._name = name
        self._loss_fn = loss_fn

    name = property(lambda self: self._name)

    def _per_example(self, labels, logits):
        if self._loss_fn is None:
            return self._unreduced_loss(labels, logits)
        return _column(self._loss_fn(labels=labels, logits=logits), "loss_fn's result")

    def loss(self, labels, logits, features=None, mode=None, regularization_losses=None):
        """The training loss of ``logits`` against ``labels`` (TF2 heads' ``Head.loss``)."""
        w = _weights(features or {}, self._weight_column) if self._weight_column is not None else None
        loss = v1_losses.compute_weighted_loss(self._per_example(self._labels(labels), logits),
                                               1.0 if w is None else w, reduction=self._reduction,
                                               loss_collection=None)
        if regularization_losses:
            loss = _m.add(loss, _m.add_n(list(regularization_losses)))
        return loss

    def predictions(self, logits, keys=None):
        """The prediction dict of ``logits`` (only ``keys``, when given)."""
        out = self._predictions(logits)
        return out if keys is None else {k: out[k] for k in keys}

    def create_estimator_spec(self, features, mode, logits, labels=None, train_op_fn=None, optimizer=None,
                              trainable_variables=None, update_ops=None, regularization_losses=None):
        """The ``EstimatorSpec`` of ``mode``; training minimizes the loss with ``train_op_fn(loss)`` or
        with ``optimizer`` over ``trainable_variables`` (then steps the global step)."""
        if mode == ModeKeys.TRAIN and train_op_fn is None:
            if optimizer is None:
                raise ValueError("create_estimator_spec: TRAIN needs train_op_fn or optimizer")
            from tensorweave.ops.variables import trainable_variables as _all_trainable
            train_op_fn = minimize_fn([(optimizer, list(trainable_variables) if trainable_variables is not None
                                        else _all_trainable())])
        w = _weights(features, self._weight_column) if mode != ModeKeys.PREDICT else None
        with name_scope("head"):
            predictions = self._predictions(logits)
            if mode == ModeKeys.PREDICT:
                return EstimatorSpec(mode, predictions=predictions)
            if labels is None:
                raise ValueError("the canned estimator needs labels to train or evaluate; the input_fn gave none")
            labels = self._labels(labels)
            unreduced = self._per_example(labels, logits)
            loss = v1_losses.compute_weighted_loss(unreduced, 1.0 if w is None else w, reduction=self._reduction,
                                                   loss_collection=None)
            if regularization_losses:
                loss = _m.add(loss, _m.add_n(list(regularization_losses)))
            if mode == ModeKeys.EVAL:
                with name_scope("metrics"):
                    metrics = self._metrics(labels, predictions, unreduced, w)
                return EstimatorSpec(mode, predictions=predictions, loss=loss, eval_metric_ops=metrics)
            train_op = train_op_fn(loss)
            if update_ops:
                train_op = group(train_op, *update_ops)
            return EstimatorSpec(mode, predictions=predictions, loss=loss, train_op=train_op)


class ClassificationHead(_Head):
    """Binary (one logit, sigmoid) when ``n_classes == 2``, else softmax over ``n_classes`` logits."""

    def __init__(self, n_classes, weight_column=None, label_vocabulary=None,
                 loss_reduction=v1_losses.Reduction.SUM, name=None, loss_fn=None):
        super().__init__(weight_column, loss_reduction, name, loss_fn)
        if n_classes is None or n_classes < 2:
            raise ValueError(f"n_classes must be > 1, got {n_classes}")
        if label_vocabulary is not None:
            label_vocabulary = [v.encode() if isinstance(v, str) else v for v in label_vocabulary]
            if len(label_vocabulary) != n_classes:
                raise ValueError(f"label_vocabulary has {len(label_vocabulary)} entries for n_classes={n_classes}")
        self.n_classes = n_classes
        self._vocab = label_vocabulary

    logits_dimension = property(lambda self: 1 if self.n_classes == 2 else self.n_classes)

    def _labels(self, labels):
        labels = _column(labels, "labels")
        if self._vocab is not None:
            table = {v: i for i, v in enumerate(self._vocab)}

            def lookup(values):
                out = np.array([table.get(v if isinstance(v, bytes) else str(v).encode(), -1)
                                for v in values.ravel()], np.int64)
                if (out < 0).any():
                    raise ValueError(f"a label is not in label_vocabulary {self._vocab}")
                return out.reshape(values.shape)
            labels = _a.reshape(numpy_function(lookup, [labels], _dt.int64), [-1, 1])
        elif not labels.dtype.is_integer:
            if labels.dtype == _dt.string:
                raise ValueError("string labels need label_vocabulary")
            labels = _m.cast(labels, _dt.int64)
        return labels

    def _predictions(self, logits):
        if self.n_classes == 2:
            logistic = _m.sigmoid(logits)
            probabilities = _a.concat([_m.subtract(1.0, logistic), logistic], axis=1)
            out = {"logits": logits, "logistic": logistic}
        else:
            probabilities = _nn.softmax(logits)
            out = {"logits": logits}
        class_ids = _a.expand_dims(_r.argmax(probabilities, axis=1), 1)
        names = np.array(self._vocab if self._vocab is not None else
                         [str(i).encode() for i in range(self.n_classes)], dtype=object)
        classes = _a.gather(convert_to_tensor(names), class_ids, name="classes")  # an op, so it can be exported
        out.update(probabilities=probabilities, class_ids=class_ids, classes=classes)
        return out

    def _unreduced_loss(self, labels, logits):
        if self.n_classes == 2:
            return _nn.sigmoid_cross_entropy_with_logits(labels=_m.cast(labels, logits.dtype), logits=logits)
        per_example = _nn.sparse_softmax_cross_entropy_with_logits(labels=_a.reshape(labels, [-1]), logits=logits)
        return _a.expand_dims(per_example, 1)

    def _metrics(self, labels, predictions, unreduced, w):
        m = {"average_loss": v1_metrics.mean(unreduced, w, name="average_loss"),
             "accuracy": v1_metrics.accuracy(labels, predictions["class_ids"], w, name="accuracy")}
        if self.n_classes == 2:
            flabels = _m.cast(labels, _dt.float32)
            logistic = predictions["logistic"]
            m["precision"] = v1_metrics.precision(labels, predictions["class_ids"], w, name="precision")
            m["recall"] = v1_metrics.recall(labels, predictions["class_ids"], w, name="recall")
            m["prediction/mean"] = v1_metrics.mean(logistic, w, name="prediction/mean")
            label_mean = v1_metrics.mean(flabels, w, name="label/mean")
            m["label/mean"] = label_mean
            m["accuracy_baseline"] = tuple(_m.maximum(t, _m.subtract(1.0, t)) for t in label_mean)
            m["auc"] = v1_metrics.auc(labels, logistic, w, name="auc")
            m["auc_precision_recall"] = v1_metrics.auc(labels, logistic, w, curve="PR",
                                                       summation_method="careful_interpolation",
                                                       name="auc_precision_recall")
        return m


class RegressionHead(_Head):
    """Squared error on ``label_dimension`` outputs (``loss_fn`` and ``inverse_link_fn``: a
    generalized linear model's loss on the logits and the mean it predicts)."""

    def __init__(self, label_dimension=1, weight_column=None, loss_reduction=v1_losses.Reduction.SUM,
                 loss_fn=None, inverse_link_fn=None, name=None):
        if isinstance(loss_fn, str) and name is None:     # (label_dimension, weight_column, reduction, name)
            loss_fn, name = None, loss_fn
        super().__init__(weight_column, loss_reduction, name, loss_fn)
        if label_dimension < 1:
            raise ValueError(f"label_dimension must be at least 1, got {label_dimension}")
        self.logits_dimension = label_dimension
        self._inverse_link = inverse_link_fn

    def _labels(self, labels):
        labels = _column(_m.cast(convert_to_tensor(labels), _dt.float32), "labels")
        if labels.shape[1] is not None and labels.shape[1] != self.logits_dimension:
            raise ValueError(f"labels have {labels.shape[1]} columns, label_dimension is {self.logits_dimension}")
        return labels

    def _predictions(self, logits):
        if self._inverse_link is None:
            return {"predictions": logits}
        return {"predictions": self._inverse_link(logits), "logits": logits}

    def _unreduced_loss(self, labels, logits):
        return _m.squared_difference(logits, labels)

    def _metrics(self, labels, predictions, unreduced, w):
        return {"average_loss": v1_metrics.mean(unreduced, w, name="average_loss"),
                "prediction/mean": v1_metrics.mean(predictions["predictions"], w, name="prediction/mean"),
                "label/mean": v1_metrics.mean(labels, w, name="label/mean")}


# ---- TF2's public heads (tf.estimator.*Head): TF1's losses, SUM_OVER_BATCH_SIZE by default ------------
_MEAN = v1_losses.Reduction.SUM_OVER_BATCH_SIZE
Head = _Head


class BinaryClassHead(ClassificationHead):
    """Two classes: one logit, sigmoid cross-entropy."""

    def __init__(self, weight_column=None, thresholds=None, label_vocabulary=None, loss_reduction=_MEAN,
                 loss_fn=None, name=None):
        super().__init__(2, weight_column, label_vocabulary, loss_reduction, name, loss_fn)


class MultiClassHead(ClassificationHead):
    """``n_classes`` logits, softmax cross-entropy."""

    def __init__(self, n_classes, weight_column=None, label_vocabulary=None, loss_reduction=_MEAN, loss_fn=None,
                 name=None):
        if n_classes is None or n_classes < 3:
            raise ValueError(f"MultiClassHead: n_classes must be > 2 (use BinaryClassHead for 2), got {n_classes}")
        super().__init__(n_classes, weight_column, label_vocabulary, loss_reduction, name, loss_fn)


class LogisticRegressionHead(RegressionHead):
    """Labels in [0, 1]; sigmoid cross-entropy on the logits, ``sigmoid(logits)`` predicted."""

    def __init__(self, weight_column=None, loss_reduction=_MEAN, name=None):
        def loss_fn(labels, logits):
            return _nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        super().__init__(1, weight_column, loss_reduction, loss_fn, _m.sigmoid, name)


class PoissonRegressionHead(RegressionHead):
    """Counts: ``log_poisson_loss`` on the log-rate logits, ``exp(logits)`` predicted."""

    def __init__(self, label_dimension=1, weight_column=None, loss_reduction=_MEAN, compute_full_loss=True,
                 name=None):
        def loss_fn(labels, logits):
            return _nn.log_poisson_loss(targets=labels, log_input=logits, compute_full_loss=compute_full_loss)
        super().__init__(label_dimension, weight_column, loss_reduction, loss_fn, _m.exp, name)


def minimize_fn(parts):
    """A ``train_op_fn`` that minimizes ``loss`` with one optimizer per ``(optimizer, var_list)`` part and
    then increments the global step once."""
    def train_op_fn(loss):
        step = v1_train.get_or_create_global_step()
        ops = [opt.minimize(loss, var_list=var_list) for opt, var_list in parts if var_list]
        with control_dependencies([group(*ops)]):
            return step.assign_add(1, read_value=False)
    return train_op_fn
