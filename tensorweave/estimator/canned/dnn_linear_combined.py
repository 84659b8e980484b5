"""Wide and deep: the sum of a linear model's and a DNN's logits, each part with its own optimizer."""
from tensorweave.compat import v1_losses
from tensorweave.estimator.canned import head as _head
from tensorweave.estimator.canned.dnn import _relu, dnn_logits
from tensorweave.estimator.canned.linear import linear_logits
from tensorweave.estimator.canned.optimizers import get_optimizer, linear_learning_rate
from tensorweave.estimator.estimator import Estimator
from tensorweave.estimator.model_fn import ModeKeys
from tensorweave.ops import math_ops as _m
from tensorweave.ops.variables import trainable_variables

__all__ = ["DNNLinearCombinedClassifier", "DNNLinearCombinedRegressor", "DNNLinearCombinedEstimator"]


class _CombinedBase(Estimator):
    def __init__(self, head, linear_feature_columns, linear_optimizer, dnn_feature_columns, dnn_optimizer,
                 dnn_hidden_units, dnn_activation_fn, dnn_dropout, linear_sparse_combiner, model_dir, config,
                 warm_start_from, what):
        linear_feature_columns = list(linear_feature_columns or [])
        dnn_feature_columns = list(dnn_feature_columns or [])
        if not linear_feature_columns and not dnn_feature_columns:
            raise ValueError(f"{what}: either linear_feature_columns or dnn_feature_columns must be defined")
        if dnn_feature_columns and not dnn_hidden_units:
            raise ValueError(f"{what}: dnn_hidden_units must be defined when dnn_feature_columns are given")
        activation = dnn_activation_fn or _relu

        def model_fn(features, labels, mode, config):
            parts, logits = [], []
            train = mode == ModeKeys.TRAIN
            if dnn_feature_columns:
                logits.append(dnn_logits(features, mode, dnn_hidden_units, dnn_feature_columns,
                                         head.logits_dimension, activation, dnn_dropout, "dnn"))
                parts.append((get_optimizer(dnn_optimizer, 0.05, what) if train else None,
                              trainable_variables("dnn")))
            if linear_feature_columns:
                logits.append(linear_logits(features, linear_feature_columns, head.logits_dimension,
                                            linear_sparse_combiner, "linear"))
                lr = linear_learning_rate(len(linear_feature_columns))
                parts.append((get_optimizer(linear_optimizer, lr, what) if train else None,
                              trainable_variables("linear")))
            total = logits[0] if len(logits) == 1 else _m.add(logits[0], logits[1])
            return head.create_estimator_spec(features, mode, total, labels, _head.minimize_fn(parts))
        super().__init__(model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from)


class DNNLinearCombinedClassifier(_CombinedBase):
    """Wide-and-deep classifier (linear part: Ftrl; DNN part: Adagrad, by default)."""

    def __init__(self, model_dir=None, linear_feature_columns=None, linear_optimizer="Ftrl",
                 dnn_feature_columns=None, dnn_optimizer="Adagrad", dnn_hidden_units=None, dnn_activation_fn=None,
                 dnn_dropout=None, n_classes=2, weight_column=None, label_vocabulary=None,
                 input_layer_partitioner=None, config=None, warm_start_from=None,
                 loss_reduction=v1_losses.Reduction.SUM, batch_norm=False, linear_sparse_combiner="sum"):
        head = _head.ClassificationHead(n_classes, weight_column, label_vocabulary, loss_reduction)
        super().__init__(head, linear_feature_columns, linear_optimizer, dnn_feature_columns, dnn_optimizer,
                         dnn_hidden_units, dnn_activation_fn, dnn_dropout, linear_sparse_combiner, model_dir, config,
                         warm_start_from, "DNNLinearCombinedClassifier")


class DNNLinearCombinedRegressor(_CombinedBase):
    """Wide-and-deep regressor."""

    def __init__(self, model_dir=None, linear_feature_columns=None, linear_optimizer="Ftrl",
                 dnn_feature_columns=None, dnn_optimizer="Adagrad", dnn_hidden_units=None, dnn_activation_fn=None,
                 dnn_dropout=None, label_dimension=1, weight_column=None, input_layer_partitioner=None, config=None,
                 warm_start_from=None, loss_reduction=v1_losses.Reduction.SUM, batch_norm=False,
                 linear_sparse_combiner="sum"):
        head = _head.RegressionHead(label_dimension, weight_column, loss_reduction)
        super().__init__(head, linear_feature_columns, linear_optimizer, dnn_feature_columns, dnn_optimizer,
                         dnn_hidden_units, dnn_activation_fn, dnn_dropout, linear_sparse_combiner, model_dir, config,
                         warm_start_from, "DNNLinearCombinedRegressor")


class DNNLinearCombinedEstimator(_CombinedBase):
    """Wide and deep with any head."""

    def __init__(self, head, model_dir=None, linear_feature_columns=None, linear_optimizer="Ftrl",
                 dnn_feature_columns=None, dnn_optimizer="Adagrad", dnn_hidden_units=None, dnn_activation_fn=None,
                 dnn_dropout=None, input_layer_partitioner=None, config=None, batch_norm=False,
                 linear_sparse_combiner="sum", warm_start_from=None):
        super().__init__(head, linear_feature_columns, linear_optimizer, dnn_feature_columns, dnn_optimizer,
                         dnn_hidden_units, dnn_activation_fn, dnn_dropout, linear_sparse_combiner, model_dir, config,
                         warm_start_from, "DNNLinearCombinedEstimator")
