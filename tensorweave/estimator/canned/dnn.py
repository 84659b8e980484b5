"""``DNNClassifier`` and ``DNNRegressor``: feed-forward networks over ``input_layer(feature_columns)``.

>>> import tempfile
>>> import numpy as np
>>> import tensorweave.compat.v1 as tf
>>> x = np.random.RandomState(0).randn(64, 2).astype(np.float32)
>>> y = (x[:, 0] > 0).astype(np.int64)
>>> est = tf.estimator.DNNClassifier([8], [tf.feature_column.numeric_column("x", shape=2)],
...                                  model_dir=tempfile.mkdtemp(), optimizer="Adam")
>>> _ = est.train(tf.estimator.inputs.numpy_input_fn({"x": x}, y, batch_size=16, num_epochs=None, shuffle=True),
...               steps=200)
>>> bool(est.evaluate(tf.estimator.inputs.numpy_input_fn({"x": x}, y, shuffle=False))["accuracy"] > 0.9)
True
"""
from tensorweave.compat import v1_losses
from tensorweave.core.graph import name_scope
from tensorweave.estimator import feature_column as fc
from tensorweave.estimator.canned import head as _head
from tensorweave.estimator.canned.layers import dense
from tensorweave.estimator.canned.optimizers import get_optimizer
from tensorweave.estimator.estimator import Estimator
from tensorweave.estimator.model_fn import ModeKeys
from tensorweave.ops import nn_ops as _nn
from tensorweave.ops.math_ops import relu
from tensorweave.ops.variables import trainable_variables

__all__ = ["DNNClassifier", "DNNRegressor", "DNNEstimator"]


def _relu(x):
    return relu(x)


def dnn_logits(features, mode, hidden_units, feature_columns, logits_dimension, activation_fn, dropout, scope):
    """The network's logits; its variables are under ``<scope>/hiddenlayer_<i>`` and ``<scope>/logits``."""
    with name_scope(scope):
        net = fc.input_layer(features, feature_columns)
        for i, units in enumerate(hidden_units):
            net = dense(net, units, activation_fn, name=f"hiddenlayer_{i}")
            if dropout is not None and mode == ModeKeys.TRAIN:
                net = _nn.dropout(net, rate=dropout)
        return dense(net, logits_dimension, None, name="logits")


def _check_columns(feature_columns, what):
    if not feature_columns:
        raise ValueError(f"{what}: feature_columns must be given")
    return list(feature_columns)


class _DNNBase(Estimator):
    def __init__(self, head, hidden_units, feature_columns, optimizer, activation_fn, dropout, model_dir, config,
                 warm_start_from, what):
        feature_columns = _check_columns(feature_columns, what)
        if not hidden_units:
            raise ValueError(f"{what}: hidden_units must be a non-empty list of layer sizes")
        if dropout is not None and not 0 <= dropout < 1:
            raise ValueError(f"{what}: dropout must be in [0, 1), got {dropout}")
        activation_fn = activation_fn or _relu

        def model_fn(features, labels, mode, config):
            logits = dnn_logits(features, mode, hidden_units, feature_columns, head.logits_dimension,
                                activation_fn, dropout, "dnn")
            opt = get_optimizer(optimizer, 0.05, what) if mode == ModeKeys.TRAIN else None
            return head.create_estimator_spec(features, mode, logits, labels,
                                              _head.minimize_fn([(opt, trainable_variables("dnn"))]))
        super().__init__(model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from)


class DNNClassifier(_DNNBase):
    """A classifier over ``n_classes`` with hidden layers of ``hidden_units`` (default optimizer Adagrad, 0.05)."""

    def __init__(self, hidden_units, feature_columns, model_dir=None, n_classes=2, weight_column=None,
                 label_vocabulary=None, optimizer="Adagrad", activation_fn=None, dropout=None,
                 input_layer_partitioner=None, config=None, warm_start_from=None,
                 loss_reduction=v1_losses.Reduction.SUM, batch_norm=False):
        head = _head.ClassificationHead(n_classes, weight_column, label_vocabulary, loss_reduction)
        super().__init__(head, hidden_units, feature_columns, optimizer, activation_fn, dropout, model_dir, config,
                         warm_start_from, "DNNClassifier")


class DNNRegressor(_DNNBase):
    """A regressor of ``label_dimension`` outputs with hidden layers of ``hidden_units``."""

    def __init__(self, hidden_units, feature_columns, model_dir=None, label_dimension=1, weight_column=None,
                 optimizer="Adagrad", activation_fn=None, dropout=None, input_layer_partitioner=None, config=None,
                 warm_start_from=None, loss_reduction=v1_losses.Reduction.SUM, batch_norm=False):
        head = _head.RegressionHead(label_dimension, weight_column, loss_reduction)
        super().__init__(head, hidden_units, feature_columns, optimizer, activation_fn, dropout, model_dir, config,
                         warm_start_from, "DNNRegressor")


class DNNEstimator(_DNNBase):
    """Hidden layers of ``hidden_units`` with any head (default optimizer Adagrad, 0.05)."""

    def __init__(self, head, hidden_units, feature_columns, model_dir=None, optimizer="Adagrad", activation_fn=None,
                 dropout=None, input_layer_partitioner=None, config=None, warm_start_from=None, batch_norm=False):
        super().__init__(head, hidden_units, feature_columns, optimizer, activation_fn, dropout, model_dir, config,
                         warm_start_from, "DNNEstimator")
