"""The ``SessionRunHook`` protocol of ``Estimator.train/evaluate/predict`` and a few stock hooks.

A hook's ``begin()`` runs after the graph is built, ``after_create_session(session, coord)`` once
the variables are initialized or restored, ``before_run(run_context)`` may return
``SessionRunArgs(fetches)`` to add fetches to the step, ``after_run(run_context, run_values)``
sees their results, and ``end(session)`` runs last. ``run_context.request_stop()`` ends the loop.
"""
import collections
import logging

import numpy as np

__all__ = ["SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues", "StopAtStepHook",
           "LoggingTensorHook", "NanLossDuringTrainingError", "NanTensorHook"]

_log = logging.getLogger("tensorweave.estimator")


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
