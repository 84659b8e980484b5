"""``Estimator``: train, evaluate and predict with a ``model_fn`` on graphs, sessions and checkpoints.

Each call builds a fresh graph, calls the ``input_fn`` and the ``model_fn`` in it, restores the
latest checkpoint of ``model_dir`` (or initializes the variables), runs its loop, and (when
training) writes checkpoints, so that calls resume where the last one stopped.

An ``input_fn`` returns a ``tw.data.Dataset`` of ``(features, labels)`` (or of features alone),
or the tensors themselves (``features`` or ``(features, labels)``). A dataset's batches are
fed into placeholders of its element spec, one per step; its end ends the loop.

>>> import tempfile
>>> import numpy as np
>>> import tensorweave.compat.v1 as tf
>>> def model_fn(features, labels, mode):
...     w = tf.Variable(0.0, name="w")
...     pred = features["x"] * w
...     loss = tf.losses.mean_squared_error(labels, pred)
...     train_op = tf.train.GradientDescentOptimizer(0.1).minimize(
...         loss, global_step=tf.train.get_or_create_global_step())
...     return tf.estimator.EstimatorSpec(mode, predictions=pred, loss=loss, train_op=train_op)
>>> x = np.arange(8, dtype=np.float32) / 8
>>> input_fn = tf.estimator.inputs.numpy_input_fn({"x": x}, 3 * x, batch_size=4, num_epochs=None, shuffle=True)
>>> est = tf.estimator.Estimator(model_fn, model_dir=tempfile.mkdtemp())
>>> _ = est.train(input_fn, steps=200)
>>> round(float(est.get_variable_value("w")), 2)
3.0
"""
import inspect
import logging
import os
import tempfile
import time

import numpy as np

from tensorweave.compat import v1_metrics, v1_train
from tensorweave.core import errors, nest
from tensorweave.core.graph import Graph
from tensorweave.estimator import hooks as _hooks
from tensorweave.estimator._checkpoint import VariableSaver, read_checkpoint
from tensorweave.estimator.model_fn import EstimatorSpec, ModeKeys
from tensorweave.estimator.run_config import RunConfig
from tensorweave.ops import random_ops
from tensorweave.ops.array_ops import placeholder
from tensorweave.ops.control_flow_ops import control_dependencies, group
from tensorweave.ops.variables import global_variables, local_variables
from tensorweave.runtime.session import Session
from tensorweave.train.manager import latest_checkpoint

__all__ = ["Estimator", "add_metrics"]

_log = logging.getLogger("tensorweave.estimator")


def _is_dataset(x):
    from tensorweave.data.dataset import Dataset
    return isinstance(x, Dataset)


class _Input:
    """The features and labels of one ``input_fn`` call, and (for a dataset) the feed of each step."""

    def __init__(self, result, mode):
        self._iterator = None
        if _is_dataset(result):
            spec = result.element_spec
            pair = isinstance(spec, tuple) and len(spec) == 2
            placeholders = nest.map_structure(
                lambda s: placeholder(s.dtype, s.shape, name="input"), spec)
            self.features, self.labels = placeholders if pair else (placeholders, None)
            self._placeholders = nest.flatten(placeholders)
            self._iterator = iter(result)
        elif isinstance(result, tuple) and len(result) == 2:
            self.features, self.labels = result
        else:
            self.features, self.labels = result, None
        if self.features is None:
            raise ValueError(f"{mode}: the input_fn returned no features")

    def next_feed(self):
        """The feed dict of the next batch; None at the end of a dataset."""
        if self._iterator is None:
            return {}
        try:
            element = next(self._iterator)
        except StopIteration:
            return None
        return {p: np.asarray(v.numpy() if hasattr(v, "numpy") else v)
                for p, v in zip(self._placeholders, nest.flatten(element))}


def _accepts(fn, name):
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def _steps_done(model_dir):
    prefix = latest_checkpoint(model_dir)
    if prefix is None:
        return 0
    return int(read_checkpoint(prefix).get("global_step", np.array(0)))


class Estimator:
    """Trains and runs the model a ``model_fn(features, labels, mode, params, config)`` builds."""

    def __init__(self, model_fn, model_dir=None, config=None, params=None, warm_start_from=None):
        if not callable(model_fn):
            raise TypeError(f"Estimator: model_fn must be callable, got {type(model_fn).__name__}")
        config = config if config is not None else RunConfig()
        if not isinstance(config, RunConfig):
            raise TypeError(f"Estimator: config must be a tf.estimator.RunConfig, got {type(config).__name__}")
        if model_dir is not None and config.model_dir is not None and \
                os.path.abspath(model_dir) != os.path.abspath(config.model_dir):
            raise ValueError(f"Estimator: model_dir ({model_dir}) and config.model_dir ({config.model_dir}) differ")
        model_dir = model_dir or config.model_dir
        if model_dir is None:
            model_dir = tempfile.mkdtemp()
            _log.warning("Using temporary folder as model directory: %s", model_dir)
        self._config = config.replace(model_dir=os.fspath(model_dir))
        self._model_fn = model_fn
        self._params = dict(params or {})
        self._warm_start_from = warm_start_from

    model_dir = property(lambda self: self._config.model_dir)
    config = property(lambda self: self._config)
    params = property(lambda self: dict(self._params))
    model_fn = property(lambda self: self._model_fn)

    # ---- checkpoint access ----------------------------------------------------------------------
    def latest_checkpoint(self):
        return latest_checkpoint(self.model_dir)

    def _checkpoint(self, what):
        prefix = self.latest_checkpoint()
        if prefix is None:
            raise ValueError(f"Estimator.{what}: no checkpoint in model_dir {self.model_dir}. Hint: train first.")
        return read_checkpoint(prefix)

    def get_variable_names(self):
        return sorted(self._checkpoint("get_variable_names"))

    def get_variable_value(self, name):
        values = self._checkpoint("get_variable_value")
        if name not in values:
            raise ValueError(f"Estimator.get_variable_value: no variable {name!r} in the checkpoint; it has "
                             f"{sorted(values)[:8]}")
        return values[name]

    # ---- building a graph for one mode ----------------------------------------------------------
    def _call_input_fn(self, input_fn, mode):
        if not callable(input_fn):
            raise TypeError(f"Estimator.{mode}: input_fn must be callable, got {type(input_fn).__name__}")
        kwargs = {}
        if _accepts(input_fn, "params"):
            kwargs["params"] = self.params
        if _accepts(input_fn, "config"):
            kwargs["config"] = self.config
        if _accepts(input_fn, "mode"):
            kwargs["mode"] = mode
        return _Input(input_fn(**kwargs), mode)

    def _call_model_fn(self, features, labels, mode):
        kwargs = {"features": features}
        if _accepts(self._model_fn, "labels"):
            kwargs["labels"] = labels
        elif labels is not None:
            raise ValueError("Estimator: the model_fn takes no labels, but the input_fn returned labels")
        for name, value in (("mode", mode), ("params", self.params), ("config", self.config)):
            if _accepts(self._model_fn, name):
                kwargs[name] = value
        spec = self._model_fn(**kwargs)
        if not isinstance(spec, EstimatorSpec):
            raise TypeError(f"Estimator: the model_fn must return a tf.estimator.EstimatorSpec, got "
                            f"{type(spec).__name__}")
        return spec

    def _graph(self, input_fn, mode):
        g = Graph()
        with g.as_default():
            if self._config.tf_random_seed is not None:
                random_ops.set_random_seed(self._config.tf_random_seed)
            step = v1_train.get_or_create_global_step()
            inp = self._call_input_fn(input_fn, mode)
            spec = self._call_model_fn(inp.features, inp.labels, mode)
        return g, step, inp, spec

    def _session(self, g, saver, checkpoint_path):
        sess = Session(graph=g, config=self._config.session_config)
        with g.as_default():
            init_local = group(*[v.initializer for v in local_variables()])
            init_global = group(*[v.initializer for v in global_variables()])
        sess.run(init_local)
        if checkpoint_path is not None:
            saver.restore(sess, checkpoint_path)
        else:
            sess.run(init_global)
            if self._warm_start_from is not None:
                _warm_start(sess, saver, self._warm_start_from)
        return sess

    # ---- the three modes --------------------------------------------------------------------------
    def train(self, input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None):
        """Trains for ``steps`` more steps, or up to global step ``max_steps``, or until the input ends."""
        if steps is not None and max_steps is not None:
            raise ValueError("Estimator.train: can not provide both steps and max_steps")
        for name, v in (("steps", steps), ("max_steps", max_steps)):
            if v is not None and v <= 0:
                raise ValueError(f"Estimator.train: {name} must be positive, got {v}")
        if max_steps is not None and _steps_done(self.model_dir) >= max_steps:
            _log.info("Skipping training since max_steps has already saved.")
            return self
        g, step_var, inp, spec = self._graph(input_fn, ModeKeys.TRAIN)
        hooks = list(hooks or ()) + list(spec.training_hooks) + list(spec.training_chief_hooks)
        hooks.insert(0, _hooks.NanTensorHook(spec.loss))
        with g.as_default():
            # The step after this run's update (a plain read fetched beside train_op may see it or not).
            with control_dependencies([spec.train_op]):
                step_after = step_var.read_value()
            saver = VariableSaver(global_variables(), self.model_dir, self._config.keep_checkpoint_max)
            writer, summary_op = _summary_writer(self.model_dir, spec.loss)
            for h in hooks:
                h.begin()
        with g.as_default():  # hooks look up graph elements (tf.train.get_global_step()) while running
            self._train_loop(g, step_var, step_after, inp, spec, hooks, saver, writer, summary_op, steps,
                             max_steps, saving_listeners)
        return self

    def _train_loop(self, g, step_var, step_after, inp, spec, hooks, saver, writer, summary_op, steps, max_steps,
                    saving_listeners):
        sess = self._session(g, saver, self.latest_checkpoint())
        try:
            for h in hooks:
                h.after_create_session(sess, None)
            step = int(sess.run(step_var))
            target = max_steps if max_steps is not None else (step + steps if steps is not None else None)
            last_save, last_save_time = step, time.time()
            listeners = list(saving_listeners or ())
            for lst in listeners:
                lst.begin()
            loss = None
            t0, step0 = time.time(), step
            while target is None or step < target:
                feed = inp.next_feed()
                if feed is None:
                    break
                context = _hooks.SessionRunContext(None, sess)
                hook_args = [h.before_run(context) for h in hooks]
                fetches = {"loss": spec.loss, "step": step_after,
                           "hooks": [_hooks.fetches_of(a) for a in hook_args]}
                want_summary = summary_op is not None and (step + 1) % max(self._config.save_summary_steps, 1) == 0
                if want_summary:
                    fetches["summary"] = summary_op
                for a in hook_args:
                    if a is not None and a.feed_dict:
                        feed.update(a.feed_dict)
                try:
                    out = sess.run(fetches, feed)
                except errors.OutOfRangeError:
                    break
                loss = out["loss"]
                step = int(out["step"])
                for h, a, r in zip(hooks, hook_args, out["hooks"]):
                    h.after_run(context, _hooks.SessionRunValues(r if a is not None else None, None, None))
                if want_summary:
                    writer.add_summary(out["summary"], step)
                if self._config.log_step_count_steps and step % self._config.log_step_count_steps == 0:
                    rate = (step - step0) / max(time.time() - t0, 1e-9)
                    _log.info("loss = %s, step = %d (%.1f steps/sec)", loss, step, rate)
                    t0, step0 = time.time(), step
                if _due(self._config, step, last_save, last_save_time):
                    _save(saver, sess, step, listeners)
                    last_save, last_save_time = step, time.time()
                if context.stop_requested:
                    break
            if step != last_save or self.latest_checkpoint() is None:
                _save(saver, sess, step, listeners)
            for lst in listeners:
                lst.end(sess, step)
            for h in hooks:
                h.end(sess)
            _log.info("Loss for final step: %s.", loss)
        finally:
            sess.close()
            if writer is not None:
                writer.close()

    def evaluate(self, input_fn, steps=None, hooks=None, checkpoint_path=None, name=None):
        """Runs the metrics' update ops over the input (or ``steps`` batches); returns their values,
        the mean ``loss`` and the checkpoint's ``global_step``."""
        if steps is not None and steps <= 0:
            raise ValueError(f"Estimator.evaluate: steps must be positive, got {steps}")
        g, step_var, inp, spec = self._graph(input_fn, ModeKeys.EVAL)
        hooks = list(hooks or ()) + list(spec.evaluation_hooks)
        with g.as_default():
            metrics = dict(spec.eval_metric_ops)
            if "loss" not in metrics:
                metrics["loss"] = v1_metrics.mean(spec.loss, name="mean_loss")
            saver = VariableSaver(global_variables(), self.model_dir)
            for h in hooks:
                h.begin()
        checkpoint_path = checkpoint_path or self.latest_checkpoint()
        if checkpoint_path is None:
            _log.info("Could not find trained model in model_dir: %s, running initialization to evaluate.",
                      self.model_dir)
        with g.as_default():
            results = self._eval_loop(g, step_var, inp, metrics, hooks, saver, checkpoint_path, steps)
        _write_eval_summaries(self.model_dir, name, results)
        _log.info("Saving dict for global step %d: %s", results["global_step"],
                  ", ".join(f"{k} = {v}" for k, v in sorted(results.items())))
        return results

    def _eval_loop(self, g, step_var, inp, metrics, hooks, saver, checkpoint_path, steps):
        sess = self._session(g, saver, checkpoint_path)
        try:
            for h in hooks:
                h.after_create_session(sess, None)
            updates = {k: v[1] for k, v in metrics.items()}
            done = 0
            while steps is None or done < steps:
                feed = inp.next_feed()
                if feed is None:
                    break
                context = _hooks.SessionRunContext(None, sess)
                hook_args = [h.before_run(context) for h in hooks]
                try:
                    out = sess.run({"updates": updates,
                                    "hooks": [_hooks.fetches_of(a) for a in hook_args]}, feed)
                except errors.OutOfRangeError:
                    break
                for h, a, r in zip(hooks, hook_args, out["hooks"]):
                    h.after_run(context, _hooks.SessionRunValues(r if a is not None else None, None, None))
                done += 1
                if context.stop_requested:
                    break
            results = sess.run({k: v[0] for k, v in metrics.items()})
            results["global_step"] = np.int64(sess.run(step_var))
            for h in hooks:
                h.end(sess)
        finally:
            sess.close()
        return results

    def predict(self, input_fn, predict_keys=None, hooks=None, checkpoint_path=None, yield_single_examples=True):
        """Yields the predictions of each example (or batch), from the latest checkpoint."""
        checkpoint_path = checkpoint_path or self.latest_checkpoint()
        if checkpoint_path is None:
            raise ValueError(f"Estimator.predict: could not find a trained model in model_dir {self.model_dir}. "
                             f"Hint: train first.")
        g, _, inp, spec = self._graph(input_fn, ModeKeys.PREDICT)
        predictions = spec.predictions
        if predict_keys is not None:
            if not isinstance(predictions, dict):
                raise ValueError("Estimator.predict: predict_keys needs the model_fn's predictions to be a dict")
            keys = [predict_keys] if isinstance(predict_keys, str) else list(predict_keys)
            unknown = [k for k in keys if k not in predictions]
            if unknown:
                raise ValueError(f"Estimator.predict: predict_keys {unknown} are not among the predictions "
                                 f"{sorted(predictions)}")
            predictions = {k: predictions[k] for k in keys}
        with g.as_default():
            saver = VariableSaver(global_variables(), self.model_dir)
        sess = self._session(g, saver, checkpoint_path)
        try:
            while True:
                feed = inp.next_feed()
                if feed is None:
                    return
                try:
                    batch = sess.run(predictions, feed)
                except errors.OutOfRangeError:
                    return
                if not yield_single_examples:
                    yield batch
                elif isinstance(batch, dict):
                    n = len(next(iter(batch.values())))
                    for i in range(n):
                        yield {k: v[i] for k, v in batch.items()}
                else:
                    yield from batch
        finally:
            sess.close()

    def export_saved_model(self, export_dir_base, serving_input_receiver_fn, assets_extra=None, as_text=False,
                           checkpoint_path=None, experimental_mode=ModeKeys.PREDICT):
        """Writes the PREDICT graph with the latest checkpoint's values as a SavedModel under
        ``export_dir_base/<timestamp>``; returns that folder (bytes, as TF1)."""
        from tensorweave.estimator.export import export_saved_model
        return export_saved_model(self, export_dir_base, serving_input_receiver_fn, checkpoint_path,
                                  experimental_mode)

    export_savedmodel = export_saved_model


def add_metrics(estimator, metric_fn):
    """A new Estimator whose evaluation also reports ``metric_fn``'s metrics.

    ``metric_fn`` takes any of ``labels``, ``predictions``, ``features`` and ``config`` and returns a
    dict of ``(value, update_op)`` pairs; they are added to (and override) the model's own.
    """
    def new_model_fn(features, labels, mode, config):
        spec = estimator._call_model_fn(features, labels, mode)
        if mode != ModeKeys.EVAL:
            return spec
        available = {"labels": labels, "predictions": spec.predictions, "features": features, "config": config}
        names = inspect.signature(metric_fn).parameters
        extra = metric_fn(**{k: v for k, v in available.items() if k in names})
        metrics = dict(spec.eval_metric_ops)
        metrics.update(extra)
        return spec._replace(eval_metric_ops=metrics)
    return Estimator(new_model_fn, model_dir=estimator.model_dir, config=estimator.config,
                     params=estimator.params)


def _due(config, step, last_save, last_save_time):
    if config.save_checkpoints_steps:
        return step - last_save >= config.save_checkpoints_steps
    if config.save_checkpoints_secs:
        return time.time() - last_save_time >= config.save_checkpoints_secs
    return False


def _save(saver, sess, step, listeners):
    for lst in listeners:
        lst.before_save(sess, step)
    prefix = saver.save(sess, step)
    _log.info("Saving checkpoints for %d into %s.", step, prefix)
    for lst in listeners:
        lst.after_save(sess, step)


def _warm_start(sess, saver, source):
    from tensorweave.estimator.warm_starting import warm_start
    warm_start(sess, source, saver._vars, saver.assign)


def _tensorboard_available():
    try:
        import tensorboard  # noqa: F401
        return True
    except ImportError:
        return False


def _summary_writer(model_dir, loss):
    """The model_dir's event writer and the training summaries (the loss and the model_fn's), or Nones
    without the ``tensorboard`` package."""
    if not _tensorboard_available():
        return None, None
    from tensorweave.compat import v1_summary
    v1_summary.scalar("loss", loss)
    return v1_summary.FileWriter(model_dir), v1_summary.merge_all()


def _write_eval_summaries(model_dir, name, results):
    if not _tensorboard_available():
        return
    from tensorboard.compat.proto import summary_pb2

    from tensorweave.compat import v1_summary
    values = [summary_pb2.Summary.Value(tag=k, simple_value=float(v)) for k, v in results.items()
              if k != "global_step" and np.ndim(v) == 0]
    with v1_summary.FileWriter(os.path.join(model_dir, "eval" if not name else f"eval_{name}")) as w:
        w.add_summary(summary_pb2.Summary(value=values), int(results["global_step"]))
