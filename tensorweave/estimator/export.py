"""``Estimator.export_saved_model`` and ``tf.estimator.export``: the PREDICT graph as a SavedModel.

The serving function is the ``model_fn`` in PREDICT mode traced as a ``tw.function`` whose inputs
are the receiver's tensors; its variables take the checkpoint's values (matched to the PREDICT
graph's variables in creation order, shapes checked) and ``tw.saved_model.save`` writes it with
the ``serving_default`` signature (and one signature per ``export_outputs`` entry when given).
Receivers whose features are the receiver tensors themselves are supported (raw receivers, the
common case); parsing ``tf.Example`` protos is not. Models whose feature columns look values up
in Python (vocabulary, hash and cross columns) cannot be exported: a SavedModel never runs
Python code on load.
"""
import collections
import os
import time

from tensorweave.core import dtypes as _dt
from tensorweave.core.graph import Graph
from tensorweave.core.tensor_spec import TensorSpec
from tensorweave.ops.array_ops import placeholder

__all__ = ["ServingInputReceiver", "build_raw_serving_input_receiver_fn", "PredictOutput", "export_saved_model"]


class ServingInputReceiver(collections.namedtuple("ServingInputReceiver",
                                                  ["features", "receiver_tensors", "receiver_tensors_alternatives"])):
    """What a ``serving_input_receiver_fn`` returns: the model's features and the tensors fed at serving."""

    def __new__(cls, features, receiver_tensors, receiver_tensors_alternatives=None):
        if not isinstance(features, dict):
            features = {"feature": features}
        if not isinstance(receiver_tensors, dict):
            receiver_tensors = {"input": receiver_tensors}
        return super().__new__(cls, features, receiver_tensors, receiver_tensors_alternatives)


class PredictOutput:
    """An ``export_outputs`` entry: a dict of output tensors (or one tensor)."""

    def __init__(self, outputs):
        self.outputs = outputs if isinstance(outputs, dict) else {"output": outputs}


def build_raw_serving_input_receiver_fn(features, default_batch_size=None):
    """A receiver fn with one placeholder per feature (``features`` maps names to tensors or TensorSpecs)."""
    def receiver_fn():
        receivers = {}
        for name, t in features.items():
            shape = [default_batch_size] + list(t.shape.as_list()[1:]) if t.shape.rank else [default_batch_size]
            receivers[name] = placeholder(t.dtype, shape, name=name)
        return ServingInputReceiver(dict(receivers), receivers)
    return receiver_fn


def _receiver_specs(receiver_fn):
    g = Graph()
    with g.as_default():
        receiver = receiver_fn()
    if not isinstance(receiver, ServingInputReceiver):
        raise TypeError(f"export_saved_model: serving_input_receiver_fn must return a ServingInputReceiver, got "
                        f"{type(receiver).__name__}")
    by_id = {id(t): k for k, t in receiver.receiver_tensors.items()}
    mapping = {}
    for fkey, t in receiver.features.items():
        if id(t) not in by_id:
            raise NotImplementedError(
                f"export_saved_model: feature {fkey!r} is computed from the receiver tensors; only receivers whose "
                f"features are the receiver tensors themselves are supported "
                f"(tf.estimator.export.build_raw_serving_input_receiver_fn).")
        mapping[fkey] = by_id[id(t)]
    specs = {k: TensorSpec(t.shape, t.dtype, name=k) for k, t in receiver.receiver_tensors.items()}
    return specs, mapping


def _graph_variable_shapes(estimator, features_specs):
    """Names and shapes, in creation order, of the PREDICT graph's variables (without the global step)."""
    from tensorweave.estimator.model_fn import ModeKeys
    from tensorweave.ops.variables import global_variables
    g = Graph()
    with g.as_default():
        feats = {k: placeholder(s.dtype, s.shape) for k, s in features_specs.items()}
        estimator._call_model_fn(feats, None, ModeKeys.PREDICT)
        return [(v.name[:-2], v.shape) for v in global_variables() if v.name != "global_step:0"]


class _Exported:
    pass


def export_saved_model(estimator, export_dir_base, serving_input_receiver_fn, checkpoint_path=None,
                       mode="infer"):
    from tensorweave.core.context import eager_mode
    # The export traces its own function and variables: whatever graph the caller is building
    # (train_and_evaluate's exporters run inside the training loop) must not receive them.
    with eager_mode():
        return _export(estimator, export_dir_base, serving_input_receiver_fn, checkpoint_path, mode)


def _export(estimator, export_dir_base, serving_input_receiver_fn, checkpoint_path, mode):
    import tensorweave as tw
    from tensorweave.estimator._checkpoint import read_checkpoint
    from tensorweave.estimator.model_fn import ModeKeys
    if mode != ModeKeys.PREDICT:
        raise ValueError(f"export_saved_model: only the PREDICT mode is exported, got {mode!r}")
    checkpoint_path = checkpoint_path or estimator.latest_checkpoint()
    if checkpoint_path is None:
        raise ValueError(f"export_saved_model: couldn't find a trained model at {estimator.model_dir}. "
                         f"Hint: train first.")
    values = read_checkpoint(checkpoint_path)
    specs, mapping = _receiver_specs(serving_input_receiver_fn)
    names = _graph_variable_shapes(estimator, {f: specs[r] for f, r in mapping.items()})
    keys = sorted(specs)

    def serve(*args):
        inputs = dict(zip(keys, args))
        spec = estimator._call_model_fn({f: inputs[r] for f, r in mapping.items()}, None, ModeKeys.PREDICT)
        preds = dict(spec.predictions) if isinstance(spec.predictions, dict) else {"output": spec.predictions}
        # The canned heads' "classes" are byte strings made from a constant table; the SavedModel format
        # stores str constants only, so string outputs stay out of the signature ("class_ids" has them).
        return {k: v for k, v in preds.items() if v.dtype != _dt.string}
    fn = tw.function(serve, input_signature=[specs[k] for k in keys])
    concrete = fn.get_concrete_function()
    variables = [v for v in concrete.variables if v.name != "global_step:0"]
    if len(variables) != len(names):
        raise RuntimeError(f"export_saved_model: the serving function made {len(variables)} variables, the PREDICT "
                           f"graph {len(names)}")
    for v, (name, shape) in zip(variables, names):
        if name not in values or list(values[name].shape) != list(v.shape.as_list()):
            raise ValueError(f"export_saved_model: no checkpoint value of shape {v.shape} for variable {name!r}")
        v.assign(values[name].astype(v.dtype.np_dtype if v.dtype != _dt.string else object))
    obj = _Exported()
    obj.serve = fn
    obj.model_variables = variables
    export_dir = os.path.join(os.fspath(export_dir_base), str(int(time.time())))
    while os.path.exists(export_dir):
        export_dir = os.path.join(os.fspath(export_dir_base), str(int(export_dir.rsplit(os.sep, 1)[-1]) + 1))
    tw.saved_model.save(obj, export_dir, signatures={"serving_default": fn})
    return export_dir.encode()
