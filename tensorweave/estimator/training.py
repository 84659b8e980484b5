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

from tensorweave.estimator.estimator import Estimator
from tensorweave.estimator.model_fn import EvalSpec, TrainSpec

__all__ = ["train_and_evaluate"]

_log = logging.getLogger("tensorweave.estimator")


class _EvalAfterSave:
    """A saving listener that evaluates after each checkpoint and hands each evaluation to the
    exporters (TF's local ``train_and_evaluate``)."""

    def __init__(self, estimator, eval_spec, max_steps):
        self._estimator, self._spec, self._max_steps = estimator, eval_spec, max_steps
        self.results = None
        self.exports = []
        self.final_exported = False

    def begin(self):
        pass

    def before_save(self, session, global_step):
        pass

    def after_save(self, session, global_step):
        self.evaluate_and_export(self._max_steps is not None and global_step >= self._max_steps)

    def evaluate_and_export(self, final):
        self.results = _evaluate(self._estimator, self._spec)
        est = self._estimator
        self.exports = [exporter.export(est, est.model_dir + "/export/" + exporter.name, est.latest_checkpoint(),
                                        self.results, final) for exporter in self._spec.exporters]
        self.final_exported = final

    def end(self, session, global_step):
        pass


def _evaluate(estimator, spec):
    return estimator.evaluate(spec.input_fn, steps=spec.steps, hooks=spec.hooks, name=spec.name)


def train_and_evaluate(estimator, train_spec, eval_spec):
    """Trains ``estimator`` to ``train_spec.max_steps``, evaluating after each saved checkpoint and
    exporting each evaluation with ``eval_spec.exporters`` (``is_the_final_export`` for the last);
    returns ``(last eval metrics, the last evaluation's export results)``, as TF."""
    if not isinstance(estimator, Estimator):
        raise TypeError(f"train_and_evaluate: estimator must be a tf.estimator.Estimator, got "
                        f"{type(estimator).__name__}")
    if not isinstance(train_spec, TrainSpec):
        raise TypeError(f"train_and_evaluate: train_spec must be a TrainSpec, got {type(train_spec).__name__}")
    if not isinstance(eval_spec, EvalSpec):
        raise TypeError(f"train_and_evaluate: eval_spec must be an EvalSpec, got {type(eval_spec).__name__}")
    listener = _EvalAfterSave(estimator, eval_spec, train_spec.max_steps)
    estimator.train(train_spec.input_fn, hooks=train_spec.hooks, max_steps=train_spec.max_steps,
                    saving_listeners=list(train_spec.saving_listeners) + [listener])
    if not listener.final_exported:     # the input ended before max_steps, or no checkpoint was due
        listener.evaluate_and_export(True)
    return listener.results, listener.exports
