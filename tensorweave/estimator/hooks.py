"""The ``SessionRunHook`` protocol of ``Estimator.train/evaluate/predict`` and a few stock hooks.

A hook's ``begin()`` runs after the graph is built, ``after_create_session(session, coord)`` once
the variables are initialized or restored, ``before_run(run_context)`` may return
``SessionRunArgs(fetches)`` to add fetches to the step, ``after_run(run_context, run_values)``
sees their results, and ``end(session)`` runs last. ``run_context.request_stop()`` ends the loop.
"""
import collections
import logging
import os
import time

import numpy as np

__all__ = ["SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues", "StopAtStepHook",
           "LoggingTensorHook", "NanLossDuringTrainingError", "NanTensorHook", "FeedFnHook", "FinalOpsHook",
           "StepCounterHook", "SecondOrStepTimer", "CheckpointSaverListener", "ProfilerHook"]

_log = logging.getLogger("tensorweave.estimator")
_now = time.monotonic   # elapsed seconds for the timers (a module attribute: tests replace it)


class SessionRunHook:
    def begin(self):
        pass

    def after_create_session(self, session, coord):
        pass

    def before_run(self, run_context):
        return None

    def after_run(self, run_context, run_values):
        pass

    def end(self, session):
        pass


class SessionRunArgs(collections.namedtuple("SessionRunArgs", ["fetches", "feed_dict", "options"])):
    def __new__(cls, fetches, feed_dict=None, options=None):
        return super().__new__(cls, fetches, feed_dict, options)


def fetches_of(args):
    """What to fetch for a hook's ``before_run`` result (None, or SessionRunArgs with no fetches: nothing)."""
    return args.fetches if args is not None and args.fetches is not None else []


class SessionRunValues(collections.namedtuple("SessionRunValues", ["results", "options", "run_metadata"])):
    pass


class SessionRunContext:
    def __init__(self, original_args, session):
        self.original_args = original_args
        self.session = session
        self._stop = False

    def request_stop(self):
        self._stop = True

    @property
    def stop_requested(self):
        return self._stop


class NanLossDuringTrainingError(RuntimeError):
    pass


class NanTensorHook(SessionRunHook):
    """Raises ``NanLossDuringTrainingError`` (or stops) when the loss becomes NaN."""

    def __init__(self, loss_tensor, fail_on_nan_loss=True):
        self._loss = loss_tensor
        self._fail = fail_on_nan_loss

    def before_run(self, run_context):
        return SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        if np.isnan(run_values.results):
            if self._fail:
                raise NanLossDuringTrainingError("NaN loss during training. Hint: lower the learning rate, or look "
                                                 "for a log/division of zero in the model_fn.")
            _log.warning("NaN loss during training; stopping")
            run_context.request_stop()


class StopAtStepHook(SessionRunHook):
    """Stops after ``num_steps`` more steps or at global step ``last_step``."""

    def __init__(self, num_steps=None, last_step=None):
        if (num_steps is None) == (last_step is None):
            raise ValueError("StopAtStepHook: exactly one of num_steps and last_step must be given")
        self._num_steps, self._last_step = num_steps, last_step

    def begin(self):
        from tensorweave.compat.v1_train import get_global_step
        self._step = get_global_step()
        if self._step is None:
            raise RuntimeError("StopAtStepHook needs a global step (tf.train.get_or_create_global_step())")

    def after_create_session(self, session, coord):
        if self._last_step is None:
            self._last_step = int(session.run(self._step)) + self._num_steps

    def before_run(self, run_context):
        return SessionRunArgs(self._step)

    def after_run(self, run_context, run_values):
        if int(run_values.results) + 1 >= self._last_step:
            run_context.request_stop()


class LoggingTensorHook(SessionRunHook):
    """Logs the values of ``tensors`` (a dict or list) every ``every_n_iter`` steps."""

    def __init__(self, tensors, every_n_iter=None, every_n_secs=None, at_end=False, formatter=None):
        self._tensors = tensors if isinstance(tensors, dict) else {getattr(t, "name", str(t)): t for t in tensors}
        self._every = every_n_iter or 1
        self._formatter = formatter
        self._iter = 0

    def before_run(self, run_context):
        return SessionRunArgs(self._tensors) if self._iter % self._every == 0 else None

    def after_run(self, run_context, run_values):
        if self._iter % self._every == 0 and run_values.results is not None:
            values = run_values.results
            _log.info(self._formatter(values) if self._formatter else
                      ", ".join(f"{k} = {v}" for k, v in values.items()))
        self._iter += 1


class FeedFnHook(SessionRunHook):
    """Adds ``feed_fn()`` (a feed dict) to every run."""

    def __init__(self, feed_fn):
        self.feed_fn = feed_fn

    def before_run(self, run_context):
        return SessionRunArgs(fetches=None, feed_dict=self.feed_fn())


class FinalOpsHook(SessionRunHook):
    """Runs ``final_ops`` when the session ends; their values are in ``final_ops_values``."""

    def __init__(self, final_ops, final_ops_feed_dict=None):
        self._ops, self._feed = final_ops, final_ops_feed_dict
        self.final_ops_values = None

    def end(self, session):
        if self._ops is not None:
            self.final_ops_values = session.run(self._ops, feed_dict=self._feed)


class SecondOrStepTimer:
    """Says when ``every_secs`` seconds or ``every_steps`` steps have passed since the last trigger."""

    def __init__(self, every_secs=None, every_steps=None):
        if (every_secs is None) == (every_steps is None):
            raise ValueError("SecondOrStepTimer: exactly one of every_secs and every_steps must be given")
        self._secs, self._steps = every_secs, every_steps
        self._last_time = self._last_step = None

    def should_trigger_for_step(self, step):
        if self._last_step is None:
            return True
        if step == self._last_step:
            return False
        if self._steps is not None:
            return step >= self._last_step + self._steps
        return _now() >= self._last_time + self._secs

    def update_last_triggered_step(self, step):
        now = _now()
        elapsed = None if self._last_time is None else (now - self._last_time, step - self._last_step)
        self._last_time, self._last_step = now, step
        return elapsed if elapsed is not None else (None, None)

    def last_triggered_step(self):
        return self._last_step

    def reset(self):
        self._last_time = self._last_step = None


class StepCounterHook(SessionRunHook):
    """Logs (and, with a writer, writes ``global_step/sec``) the training speed every N steps or seconds."""

    def __init__(self, every_n_steps=100, every_n_secs=None, output_dir=None, summary_writer=None):
        self._timer = SecondOrStepTimer(every_secs=every_n_secs, every_steps=None if every_n_secs else every_n_steps)
        self._writer, self._dir = summary_writer, output_dir
        self.steps_per_sec = []

    def begin(self):
        from tensorweave.compat.v1_train import get_global_step
        self._step = get_global_step()
        if self._step is None:
            raise RuntimeError("StepCounterHook needs a global step (tf.train.get_or_create_global_step())")

    def before_run(self, run_context):
        return SessionRunArgs(self._step)

    def after_run(self, run_context, run_values):
        step = int(run_values.results)
        if self._timer.should_trigger_for_step(step):
            secs, steps = self._timer.update_last_triggered_step(step)
            if secs:
                rate = steps / secs
                self.steps_per_sec.append(rate)
                _log.info("global_step/sec: %g", rate)
                if self._writer is not None:
                    from tensorboard.compat.proto import summary_pb2
                    self._writer.add_summary(summary_pb2.Summary(value=[summary_pb2.Summary.Value(
                        tag="global_step/sec", simple_value=rate)]), step)


class CheckpointSaverListener:
    """Called around each checkpoint an Estimator or a ``CheckpointSaverHook`` writes."""

    def begin(self):
        pass

    def before_save(self, session, global_step_value):
        pass

    def after_save(self, session, global_step_value):
        pass

    def end(self, session, global_step_value):
        pass


class ProfilerHook(SessionRunHook):
    """Profiles one step every ``save_steps`` steps (or ``save_secs`` seconds) with ``tw.profiler``
    and writes its Chrome trace to ``output_dir/timeline-<global step>.json`` (TF's file names;
    open them in chrome://tracing or Perfetto). As TF, the first step is never traced."""

    def __init__(self, save_steps=None, save_secs=None, output_dir="", show_dataflow=True, show_memory=False):
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)
        self._output_file = os.path.join(output_dir, "timeline-{}.json")
        self._profile = None

    def begin(self):
        from tensorweave.compat.v1_train import get_global_step
        self._next_step = None
        self._step = get_global_step()
        if self._step is None:
            raise RuntimeError("ProfilerHook needs a global step (tf.train.get_or_create_global_step())")

    def before_run(self, run_context):
        from tensorweave.profiler import Profile
        if self._next_step is not None and self._timer.should_trigger_for_step(self._next_step):
            self._profile = Profile(eager=False)
            self._profile.start()
        return SessionRunArgs(self._step)

    def after_run(self, run_context, run_values):
        stale = int(run_values.results)
        if self._next_step is None:
            self._timer.update_last_triggered_step(stale)
        step = stale + 1
        if self._profile is not None:
            self._profile.stop()
            step = int(run_context.session.run(self._step))
            self._timer.update_last_triggered_step(step)
            os.makedirs(os.path.dirname(self._output_file) or ".", exist_ok=True)
            self._profile.export_chrome_trace(self._output_file.format(step))
            self._profile = None
        self._next_step = step + 1

    def end(self, session):
        if self._profile is not None:
            self._profile.stop()
            self._profile = None
