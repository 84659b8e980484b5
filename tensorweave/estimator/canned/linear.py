"""``LinearClassifier`` and ``LinearRegressor``: ``linear_model(feature_columns)`` trained with FTRL.

>>> import tempfile
>>> import numpy as np
>>> import tensorweave.compat.v1 as tf
>>> color = tf.feature_column.categorical_column_with_vocabulary_list("color", ["red", "green", "blue"])
>>> x = np.array([b"red", b"green", b"blue"] * 20, dtype=object)
>>> y = (x == b"green").astype(np.float32) * 2.0
>>> est = tf.estimator.LinearRegressor([color], model_dir=tempfile.mkdtemp())
>>> _ = est.train(tf.estimator.inputs.numpy_input_fn({"color": x}, y, batch_size=10, num_epochs=None,
...                                                   shuffle=True), steps=100)
>>> [round(float(p["predictions"][0]), 2) + 0.0 for p in est.predict(  # + 0.0: -0.0 prints as 0.0
...     tf.estimator.inputs.numpy_input_fn({"color": x[:3]}, shuffle=False))]
[0.0, 2.0, 0.0]
"""
from tensorweave.compat import v1_losses
from tensorweave.core.graph import name_scope
from tensorweave.estimator import feature_column as fc
from tensorweave.estimator.canned import head as _head
from tensorweave.estimator.canned.optimizers import get_optimizer, linear_learning_rate
from tensorweave.estimator.estimator import Estimator
from tensorweave.estimator.model_fn import ModeKeys
from tensorweave.ops.variables import trainable_variables

__all__ = ["LinearClassifier", "LinearRegressor", "LinearEstimator"]


def linear_logits(features, feature_columns, units, sparse_combiner, scope):
    with name_scope(scope):
        return fc.linear_model(features, feature_columns, units=units, sparse_combiner=sparse_combiner)


class _LinearBase(Estimator):
    def __init__(self, head, feature_columns, optimizer, sparse_combiner, model_dir, config, warm_start_from, what):
        if not feature_columns:
            raise ValueError(f"{what}: feature_columns must be given")
        feature_columns = list(feature_columns)

        def model_fn(features, labels, mode, config):
            logits = linear_logits(features, feature_columns, head.logits_dimension, sparse_combiner, "linear")
            opt = get_optimizer(optimizer, linear_learning_rate(len(feature_columns)), what) \
                if mode == ModeKeys.TRAIN else None
            return head.create_estimator_spec(features, mode, logits, labels,
                                              _head.minimize_fn([(opt, trainable_variables("linear"))]))
        super().__init__(model_fn, model_dir=model_dir, config=config, warm_start_from=warm_start_from)


class LinearClassifier(_LinearBase):
    """Logistic (2 classes) or softmax regression over the feature columns (default optimizer Ftrl)."""

    def __init__(self, feature_columns, model_dir=None, n_classes=2, weight_column=None, label_vocabulary=None,
                 optimizer="Ftrl", config=None, partitioner=None, warm_start_from=None,
                 loss_reduction=v1_losses.Reduction.SUM, sparse_combiner="sum"):
        head = _head.ClassificationHead(n_classes, weight_column, label_vocabulary, loss_reduction)
        super().__init__(head, feature_columns, optimizer, sparse_combiner, model_dir, config, warm_start_from,
                         "LinearClassifier")


class LinearRegressor(_LinearBase):
    """Least-squares linear regression over the feature columns (default optimizer Ftrl)."""

    def __init__(self, feature_columns, model_dir=None, label_dimension=1, weight_column=None, optimizer="Ftrl",
                 config=None, partitioner=None, warm_start_from=None, loss_reduction=v1_losses.Reduction.SUM,
                 sparse_combiner="sum"):
        head = _head.RegressionHead(label_dimension, weight_column, loss_reduction)
        super().__init__(head, feature_columns, optimizer, sparse_combiner, model_dir, config, warm_start_from,
                         "LinearRegressor")


class LinearEstimator(_LinearBase):
    """A linear model over the feature columns with any head (default optimizer Ftrl)."""

    def __init__(self, head, feature_columns, model_dir=None, optimizer="Ftrl", config=None, partitioner=None,
                 sparse_combiner="sum", warm_start_from=None):
        super().__init__(head, feature_columns, optimizer, sparse_combiner, model_dir, config, warm_start_from,
                         "LinearEstimator")
