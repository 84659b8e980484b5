"""What a ``model_fn`` returns (``EstimatorSpec``), its modes (``ModeKeys``) and the specs of
``train_and_evaluate`` (``TrainSpec``, ``EvalSpec``).

>>> import tensorweave.compat.v1 as tf
>>> spec = tf.estimator.EstimatorSpec(tf.estimator.ModeKeys.PREDICT, predictions={"y": tf.constant([1.0])})
>>> spec.mode, sorted(spec.predictions)
('infer', ['y'])
"""
import collections

__all__ = ["ModeKeys", "EstimatorSpec", "TrainSpec", "EvalSpec"]


class ModeKeys:
    """The three modes a ``model_fn`` is called in."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


class EstimatorSpec(collections.namedtuple("EstimatorSpec", [
        "mode", "predictions", "loss", "train_op", "eval_metric_ops", "export_outputs", "training_chief_hooks",
        "training_hooks", "scaffold", "evaluation_hooks", "prediction_hooks"])):
    """The ops a ``model_fn`` built for one mode.

    TRAIN needs ``loss`` and ``train_op``; EVAL needs ``loss`` (``eval_metric_ops`` maps names to
    ``(value, update_op)`` pairs, as ``tf.metrics`` return); PREDICT needs ``predictions`` (a tensor
    or a dict of tensors whose first dimension is the batch).
    """

    def __new__(cls, mode, predictions=None, loss=None, train_op=None, eval_metric_ops=None, export_outputs=None,
                training_chief_hooks=None, training_hooks=None, scaffold=None, evaluation_hooks=None,
                prediction_hooks=None):
        if mode not in (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT):
            raise ValueError(f"EstimatorSpec: mode must be one of tf.estimator.ModeKeys, got {mode!r}")
        if mode == ModeKeys.TRAIN and (loss is None or train_op is None):
            raise ValueError("EstimatorSpec: mode TRAIN needs both loss and train_op; got "
                             f"loss={loss!r}, train_op={train_op!r}")
        if mode == ModeKeys.EVAL and loss is None:
            raise ValueError("EstimatorSpec: mode EVAL needs a loss")
        if mode == ModeKeys.PREDICT and predictions is None:
            raise ValueError("EstimatorSpec: mode PREDICT needs predictions")
        if loss is not None and loss.shape.rank not in (None, 0):
            raise ValueError(f"EstimatorSpec: loss must be a scalar, got shape {loss.shape}. "
                             f"Hint: reduce it (tf.reduce_mean or a tf.losses function).")
        eval_metric_ops = dict(eval_metric_ops or {})
        for name, pair in eval_metric_ops.items():
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise TypeError(f"EstimatorSpec: eval_metric_ops[{name!r}] must be a (value, update_op) pair "
                                f"as tf.metrics return, got {type(pair).__name__}")
        return super().__new__(cls, mode, predictions, loss, train_op, eval_metric_ops, export_outputs,
                               tuple(training_chief_hooks or ()), tuple(training_hooks or ()), scaffold,
                               tuple(evaluation_hooks or ()), tuple(prediction_hooks or ()))


class TrainSpec(collections.namedtuple("TrainSpec", ["input_fn", "max_steps", "hooks", "saving_listeners"])):
    """``train_and_evaluate``'s training half: the input function and the step to stop at."""

    def __new__(cls, input_fn, max_steps=None, hooks=None, saving_listeners=None):
        if not callable(input_fn):
            raise TypeError(f"TrainSpec: input_fn must be callable, got {type(input_fn).__name__}")
        if max_steps is not None and max_steps <= 0:
            raise ValueError(f"TrainSpec: max_steps must be positive, got {max_steps}")
        return super().__new__(cls, input_fn, max_steps, tuple(hooks or ()), tuple(saving_listeners or ()))


class EvalSpec(collections.namedtuple("EvalSpec", [
        "input_fn", "steps", "name", "hooks", "exporters", "start_delay_secs", "throttle_secs"])):
    """``train_and_evaluate``'s evaluation half: evaluated after each checkpoint (``steps`` batches each)."""

    def __new__(cls, input_fn, steps=100, name=None, hooks=None, exporters=None, start_delay_secs=120,
                throttle_secs=600):
        if not callable(input_fn):
            raise TypeError(f"EvalSpec: input_fn must be callable, got {type(input_fn).__name__}")
        if steps is not None and steps <= 0:
            raise ValueError(f"EvalSpec: steps must be positive or None, got {steps}")
        exporters = () if exporters is None else (tuple(exporters) if isinstance(exporters, (list, tuple))
                                                  else (exporters,))
        return super().__new__(cls, input_fn, steps, name, tuple(hooks or ()), exporters, start_delay_secs,
                               throttle_secs)
