"""``tf.train.MonitoredTrainingSession`` and its parts: a session that initializes or restores the
variables, starts the queue runners, runs hooks around every ``run`` and saves checkpoints and
summaries on its own.

The training loop of many TF1 programs::

    with tf.train.MonitoredTrainingSession(checkpoint_dir=d, hooks=[tf.train.StopAtStepHook(last_step=N)]) as s:
        while not s.should_stop():
            s.run(train_op)

ends when a hook asks to stop, or when the input raises ``OutOfRangeError`` (which ``__exit__``
swallows, as TF1 does). Checkpoints are ``tf.train.Saver``'s (``model.ckpt-<step>`` in ``checkpoint_dir``,
with its ``.meta``; restored by the next session in that directory).

>>> import tempfile
>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     step = tf.train.get_or_create_global_step()
...     w = tf.Variable(5.0)
...     train = tf.train.GradientDescentOptimizer(0.25).minimize(tf.square(w), global_step=step)
...     d = tempfile.mkdtemp()
...     with tf.train.MonitoredTrainingSession(checkpoint_dir=d, hooks=[tf.train.StopAtStepHook(last_step=4)]) as s:
...         while not s.should_stop():
...             _ = s.run(train)
>>> from tensorweave.compat.v1_monitored import load_variable
>>> round(float(load_variable(d, "Variable")), 4)
0.3125
"""
import os

from tensorweave.compat.v1_input import Coordinator, start_queue_runners
from tensorweave.core import errors
from tensorweave.core.graph import get_default_graph
from tensorweave.estimator import hooks as _hooks
from tensorweave.estimator._checkpoint import VariableSaver, read_checkpoint
from tensorweave.ops.control_flow_ops import group
from tensorweave.ops.variables import global_variables, local_variables
from tensorweave.runtime.session import Session
from tensorweave.train.manager import latest_checkpoint

__all__ = ["Scaffold", "CheckpointSaverHook", "SummarySaverHook", "MonitoredSession", "SingularMonitoredSession",
           "MonitoredTrainingSession", "ChiefSessionCreator", "load_variable"]

_DEFAULT = object()


class Scaffold:
    """What a monitored session runs to prepare its session (TF1's ``tf.train.Scaffold``)."""

    def __init__(self, init_op=None, init_feed_dict=None, init_fn=None, ready_op=None,
                 ready_for_local_init_op=None, local_init_op=None, summary_op=None, saver=None,
                 copy_from_scaffold=None):
        self.init_op, self.init_feed_dict, self.init_fn = init_op, init_feed_dict, init_fn
        self.local_init_op, self.summary_op, self.saver = local_init_op, summary_op, saver
        self.ready_op = ready_op

    def finalize(self):
        if self.init_op is None:
            self.init_op = group(*[v.initializer for v in global_variables()])
        if self.local_init_op is None:
            self.local_init_op = group(*[v.initializer for v in local_variables()])
        return self


class ChiefSessionCreator:
    """Creates the session: restores the latest checkpoint of ``checkpoint_dir`` or runs the init ops."""

    def __init__(self, scaffold=None, master="", config=None, checkpoint_dir=None, checkpoint_filename_with_path=None):
        self._scaffold = scaffold or Scaffold()
        self._config = config
        self._dir = checkpoint_dir
        self._path = checkpoint_filename_with_path
        self._saver = None

    def create_session(self):
        graph = get_default_graph()
        self._scaffold.finalize()
        path = self._path or (latest_checkpoint(self._dir) if self._dir else None)
        if path is not None and self._saver is None:
            self._saver = VariableSaver(global_variables(), os.path.dirname(path), saver=self._scaffold.saver)
        sess = Session(graph=graph, config=self._config)
        if path is not None:
            self._saver.restore(sess, path)
        else:
            sess.run(self._scaffold.init_op, self._scaffold.init_feed_dict)
            if self._scaffold.init_fn is not None:
                self._scaffold.init_fn(self._scaffold, sess)
        sess.run(self._scaffold.local_init_op)
        return sess


class CheckpointSaverHook(_hooks.SessionRunHook):
    """Saves the global variables every ``save_steps`` steps or ``save_secs`` seconds, and at the end."""

    def __init__(self, checkpoint_dir, save_secs=None, save_steps=None, saver=None, checkpoint_basename="model.ckpt",
                 scaffold=None, listeners=None, save_graph_def=True):
        if (save_secs is None) == (save_steps is None):
            raise ValueError("CheckpointSaverHook: exactly one of save_secs and save_steps must be given")
        self._dir, self._timer = checkpoint_dir, _hooks.SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)
        self._listeners = list(listeners or ())
        self._given_saver = saver if saver is not None else getattr(scaffold, "saver", None)

    def begin(self):
        from tensorweave.compat.v1_train import get_global_step
        self._step = get_global_step()
        if self._step is None:
            raise RuntimeError("CheckpointSaverHook needs a global step (tf.train.get_or_create_global_step())")
        self._saver = VariableSaver(global_variables(), self._dir, saver=self._given_saver)
        for lst in self._listeners:
            lst.begin()

    def after_create_session(self, session, coord):
        step = int(session.run(self._step))
        self._timer.update_last_triggered_step(step)
        if latest_checkpoint(self._dir) is None:
            self._save(session, step)

    def before_run(self, run_context):
        return _hooks.SessionRunArgs(self._step)

    def after_run(self, run_context, run_values):
        step = int(run_context.session.run(self._step))
        if self._timer.should_trigger_for_step(step):
            self._save(run_context.session, step)

    def end(self, session):
        step = int(session.run(self._step))
        if step != self._timer.last_triggered_step():
            self._save(session, step)
        for lst in self._listeners:
            lst.end(session, step)

    def _save(self, session, step):
        for lst in self._listeners:
            lst.before_save(session, step)
        self._saver.save(session, step)
        self._timer.update_last_triggered_step(step)
        for lst in self._listeners:
            lst.after_save(session, step)


class SummarySaverHook(_hooks.SessionRunHook):
    """Runs ``summary_op`` (default: ``merge_all()``) every ``save_steps`` steps and writes it to ``output_dir``."""

    def __init__(self, save_steps=None, save_secs=None, output_dir=None, summary_writer=None, scaffold=None,
                 summary_op=None):
        if (save_secs is None) == (save_steps is None):
            raise ValueError("SummarySaverHook: exactly one of save_secs and save_steps must be given")
        self._secs, self._timer = save_secs, _hooks.SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)
        self._dir, self._writer, self._op = output_dir, summary_writer, summary_op
        self._scaffold = scaffold

    def begin(self):
        from tensorweave.compat import v1_summary
        from tensorweave.compat.v1_train import get_global_step
        if self._op is None and self._scaffold is not None:
            self._op = self._scaffold.summary_op
        if self._op is None:
            self._op = v1_summary.merge_all()
        if self._writer is None and self._op is not None:
            self._writer = v1_summary.FileWriterCache.get(self._dir)
        self._step = get_global_step()
        self._runs = 0   # the timer counts this hook's runs, not the global step
        self._timer.reset()
        if self._secs is not None:   # by seconds, the first summary waits save_secs (the timer alone fires at once)
            self._timer.update_last_triggered_step(-1)

    def before_run(self, run_context):
        self._due = self._op is not None and self._timer.should_trigger_for_step(self._runs)
        return _hooks.SessionRunArgs({"summary": self._op, "step": self._step}) if self._due else None

    def after_run(self, run_context, run_values):
        if self._due:
            self._writer.add_summary(run_values.results["summary"], int(run_values.results["step"]))
            self._timer.update_last_triggered_step(self._runs)
        self._runs += 1

    def end(self, session):
        if self._writer is not None:
            self._writer.flush()


class MonitoredSession:
    """A session run with hooks; see the module docstring."""

    def __init__(self, session_creator=None, hooks=None, stop_grace_period_secs=120):
        self._hooks = list(hooks or ())
        for h in self._hooks:
            h.begin()
        self._sess = (session_creator or ChiefSessionCreator()).create_session()
        self._coord = Coordinator()
        self._threads = start_queue_runners(self._sess, self._coord)
        self._grace = stop_grace_period_secs
        self._stop = False
        self._closed = False
        for h in self._hooks:
            h.after_create_session(self._sess, self._coord)

    graph = property(lambda self: self._sess.graph)

    def should_stop(self):
        return self._stop or self._coord.should_stop()

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if self._closed:
            raise RuntimeError("Run called on a closed MonitoredSession.")
        context = _hooks.SessionRunContext(_hooks.SessionRunArgs(fetches, feed_dict), self._sess)
        args = [h.before_run(context) for h in self._hooks]
        feed = dict(feed_dict or {})
        for a in args:
            if a is not None and a.feed_dict:
                feed.update(a.feed_dict)
        try:
            out = self._sess.run({"user": fetches, "hooks": [_hooks.fetches_of(a) for a in args]}, feed)
        except errors.OutOfRangeError:
            self._stop = True
            raise
        for h, a, r in zip(self._hooks, args, out["hooks"]):
            h.after_run(context, _hooks.SessionRunValues(r if a is not None else None, options, run_metadata))
        if context.stop_requested:
            self._stop = True
        return out["user"]

    def run_step_fn(self, step_fn):
        class _StepContext:
            def __init__(ctx):
                ctx.session = self._sess

            def run_with_hooks(ctx, *args, **kwargs):
                return self.run(*args, **kwargs)

            def request_stop(ctx):
                self._stop = True
        return step_fn(_StepContext())

    def close(self):
        self._close(ok=True)

    def _close(self, ok):
        if self._closed:
            return
        self._closed = True
        try:
            if ok:
                for h in self._hooks:
                    h.end(self._sess)
        finally:
            self._coord.request_stop()
            try:
                self._coord.join(self._threads, stop_grace_period_secs=self._grace, ignore_live_threads=True)
            finally:
                self._sess.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        clean = exc_type is None or issubclass(exc_type, (errors.OutOfRangeError, StopIteration))
        self._close(ok=clean)
        return exc_type is not None and clean


class SingularMonitoredSession(MonitoredSession):
    """A monitored session on this process alone; ``raw_session()`` is the underlying ``Session``."""

    def __init__(self, hooks=None, scaffold=None, master="", config=None, checkpoint_dir=None,
                 stop_grace_period_secs=120, checkpoint_filename_with_path=None):
        super().__init__(ChiefSessionCreator(scaffold, master, config, checkpoint_dir, checkpoint_filename_with_path),
                         hooks, stop_grace_period_secs)

    def raw_session(self):
        return self._sess


def MonitoredTrainingSession(master="", is_chief=True, checkpoint_dir=None, scaffold=None, hooks=None,  # noqa: N802
                             chief_only_hooks=None, save_checkpoint_secs=_DEFAULT, save_summaries_steps=_DEFAULT,
                             save_summaries_secs=_DEFAULT, config=None, stop_grace_period_secs=120,
                             log_step_count_steps=100, max_wait_secs=7200, save_checkpoint_steps=_DEFAULT,
                             summary_dir=None, save_graph_def=True):
    """A ``MonitoredSession`` that saves checkpoints (every 600 s, or ``save_checkpoint_steps``) and summaries
    (every 100 steps) under ``checkpoint_dir`` and resumes from its latest checkpoint."""
    all_hooks = list(hooks or ()) + list(chief_only_hooks or ())
    if checkpoint_dir:
        steps = None if save_checkpoint_steps is _DEFAULT else save_checkpoint_steps
        secs = None if save_checkpoint_secs is _DEFAULT else save_checkpoint_secs
        if steps is None and secs is None and save_checkpoint_secs is _DEFAULT:
            secs = 600
        if steps or secs:
            all_hooks.append(CheckpointSaverHook(checkpoint_dir, save_secs=secs if not steps else None,
                                                 save_steps=steps, scaffold=scaffold))
    summary_dir = summary_dir or checkpoint_dir
    sum_steps = 100 if save_summaries_steps is _DEFAULT else save_summaries_steps
    if summary_dir and sum_steps and _tensorboard_available() and get_default_graph().get_collection("summaries"):
        all_hooks.append(SummarySaverHook(save_steps=sum_steps, output_dir=summary_dir, scaffold=scaffold))
    return MonitoredSession(ChiefSessionCreator(scaffold, master, config, checkpoint_dir), all_hooks,
                            stop_grace_period_secs)


def _tensorboard_available():
    try:
        import tensorboard  # noqa: F401
        return True
    except ImportError:
        return False


def load_variable(ckpt_dir_or_file, name):
    """A variable's value from a checkpoint (a directory: its latest) written by an Estimator or a
    monitored session."""
    path = latest_checkpoint(ckpt_dir_or_file) if os.path.isdir(ckpt_dir_or_file) else ckpt_dir_or_file
    if path is None:
        raise errors.NotFoundError(f"load_variable: no checkpoint in {ckpt_dir_or_file}")
    values = read_checkpoint(path)
    if name not in values:
        raise errors.NotFoundError(f"Key {name} not found in checkpoint {path}")
    return values[name]
