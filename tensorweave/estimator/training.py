"""``train_and_evaluate`` on one process: train, evaluating after every checkpoint, until ``max_steps``.

>>> import tempfile
>>> import numpy as np
>>> import tensorweave.compat.v1 as tf
>>> def model_fn(features, labels, mode):
...     b = tf.Variable(0.0, name="b")
...     loss = tf.reduce_mean(tf.square(features - b))
...     train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss, tf.train.get_or_create_global_step())
...     return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
>>> fn = tf.estimator.inputs.numpy_input_fn(np.full(8, 2.0, np.float32), batch_size=4, num_epochs=None, shuffle=False)
>>> est = tf.estimator.Estimator(model_fn, model_dir=tempfile.mkdtemp(),
...                              config=tf.estimator.RunConfig(save_checkpoints_steps=10))
>>> metrics, _ = tf.estimator.train_and_evaluate(est, tf.estimator.TrainSpec(fn, max_steps=30),
...                                              tf.estimator.EvalSpec(fn, steps=2))
>>> int(metrics["global_step"]), round(float(metrics["loss"]), 6)
(30, 0.0)
"""
import logging

from tensorweave.estimator.estimator import Estimator, _steps_done
from tensorweave.estimator.model_fn import EvalSpec, TrainSpec

__all__ = ["train_and_evaluate"]

_log = logging.getLogger("tensorweave.estimator")


class _EvalAfterSave:
    """A saving listener that evaluates after each checkpoint (TF's local ``train_and_evaluate``)."""

    def __init__(self, estimator, eval_spec):
        self._estimator, self._spec = estimator, eval_spec
        self.results = None

    def begin(self):
        pass

    def before_save(self, session, global_step):
        pass

    def after_save(self, session, global_step):
        self.results = _evaluate(self._estimator, self._spec)

    def end(self, session, global_step):
        pass


def _evaluate(estimator, spec):
    return estimator.evaluate(spec.input_fn, steps=spec.steps, hooks=spec.hooks, name=spec.name)


def train_and_evaluate(estimator, train_spec, eval_spec):
    """Trains ``estimator`` to ``train_spec.max_steps``, evaluating after each saved checkpoint and
    exporting with ``eval_spec.exporters``; returns ``(last eval metrics, export results)``."""
    if not isinstance(estimator, Estimator):
        raise TypeError(f"train_and_evaluate: estimator must be a tf.estimator.Estimator, got "
                        f"{type(estimator).__name__}")
    if not isinstance(train_spec, TrainSpec):
        raise TypeError(f"train_and_evaluate: train_spec must be a TrainSpec, got {type(train_spec).__name__}")
    if not isinstance(eval_spec, EvalSpec):
        raise TypeError(f"train_and_evaluate: eval_spec must be an EvalSpec, got {type(eval_spec).__name__}")
    listener = _EvalAfterSave(estimator, eval_spec)
    estimator.train(train_spec.input_fn, hooks=train_spec.hooks, max_steps=train_spec.max_steps,
                    saving_listeners=list(train_spec.saving_listeners) + [listener])
    results = listener.results
    if results is None or int(results["global_step"]) != _steps_done(estimator.model_dir):
        results = _evaluate(estimator, eval_spec)
    exports = []
    for exporter in eval_spec.exporters:
        exports.append(exporter.export(estimator, estimator.model_dir + "/export/" + exporter.name,
                                       estimator.latest_checkpoint(), results, True))
    return results, exports
