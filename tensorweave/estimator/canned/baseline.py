"""``BaselineClassifier`` and ``BaselineRegressor``: ignore the features and learn the label
distribution's prior (the logits are one bias vector), to compare other models against.

>>> import tempfile
>>> import numpy as np
>>> import tensorweave.compat.v1 as tf
>>> y = np.array([0, 1, 1, 1] * 10)
>>> est = tf.estimator.BaselineClassifier(model_dir=tempfile.mkdtemp())
>>> fn = tf.estimator.inputs.numpy_input_fn({"x": np.zeros(40, np.float32)}, y, batch_size=40, num_epochs=None,
...                                         shuffle=False)
>>> _ = est.train(fn, steps=200)
>>> p = next(est.predict(tf.estimator.inputs.numpy_input_fn({"x": np.zeros(1, np.float32)}, shuffle=False)))
>>> round(float(p["probabilities"][1]), 2)
0.75
"""
from tensorweave.compat import v1_losses
from tensorweave.core.graph import name_scope
from tensorweave.estimator.canned import head as _head
from tensorweave.estimator.canned.optimizers import get_optimizer
from tensorweave.estimator.estimator import Estimator
from tensorweave.estimator.model_fn import ModeKeys
from tensorweave.ops import array_ops as _a
from tensorweave.ops import math_ops as _m
from tensorweave.ops.variables import Variable, trainable_variables

__all__ = ["BaselineClassifier", "BaselineRegressor", "BaselineEstimator"]


def _batch_size(features):
    first = features[sorted(features)[0]] if isinstance(features, dict) else features
    return _a.shape(first)[0]


class _BaselineBase(Estimator):
    def __init__(self, head, optimizer, model_dir, config, what):
        def model_fn(features, labels, mode, config):
            with name_scope("baseline"):
                bias = Variable(lambda: _a.zeros([head.logits_dimension]), name="bias")
                logits = _m.add(_a.zeros(_a.stack([_batch_size(features), head.logits_dimension])), bias)
            opt = get_optimizer(optimizer, 0.3, what) if mode == ModeKeys.TRAIN else None
            return head.create_estimator_spec(features, mode, logits, labels,
                                              _head.minimize_fn([(opt, trainable_variables("baseline"))]))
        super().__init__(model_fn, model_dir=model_dir, config=config)


class BaselineClassifier(_BaselineBase):
    """Predicts the classes' prior probabilities (default optimizer Ftrl, 0.3)."""

    def __init__(self, model_dir=None, n_classes=2, weight_column=None, label_vocabulary=None, optimizer="Ftrl",
                 config=None, loss_reduction=v1_losses.Reduction.SUM):
        head = _head.ClassificationHead(n_classes, weight_column, label_vocabulary, loss_reduction)
        super().__init__(head, optimizer, model_dir, config, "BaselineClassifier")


class BaselineRegressor(_BaselineBase):
    """Predicts the labels' mean."""

    def __init__(self, model_dir=None, label_dimension=1, weight_column=None, optimizer="Ftrl", config=None,
                 loss_reduction=v1_losses.Reduction.SUM):
        head = _head.RegressionHead(label_dimension, weight_column, loss_reduction)
        super().__init__(head, optimizer, model_dir, config, "BaselineRegressor")


class BaselineEstimator(_BaselineBase):
    """The baseline with any head (``tf.estimator.BinaryClassHead()``, ``RegressionHead()`` ...)."""

    def __init__(self, head, model_dir=None, optimizer="Ftrl", config=None):
        super().__init__(head, optimizer, model_dir, config, "BaselineEstimator")
