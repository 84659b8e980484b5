"""More of TF1's ``tf.train``: the ``Example`` protocol-buffer classes TF2 kept (the very objects of
``tw.train``), checkpoint readers that also read the name-based ``Saver`` files, the cosine
learning-rate decays, the proximal optimizers, ``init_from_checkpoint``, checkpoint-state helpers,
``LooperThread``, ``SessionCreator``, ``GlobalStepWaiterHook`` and the ``queue_runner`` namespace.

>>> import tensorweave.compat.v1 as tf
>>> ex = tf.train.Example(features=tf.train.Features(feature={
...     "x": tf.train.Feature(float_list=tf.train.FloatList(value=[1.5]))}))
>>> tf.parse_single_example(ex.SerializeToString(), {"x": tf.FixedLenFeature([1], tf.float32)})["x"].numpy().tolist()
[1.5]
"""
import abc
import math
import threading
import time
import types

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.context import executing_eagerly
from tensorweave.core.convert import convert_to_tensor
from tensorweave.keras import optimizers as _keras
from tensorweave.ops import math_ops as _M
from tensorweave.train import (BytesList, CheckpointOptions, ClusterSpec, Example, Feature,  # noqa: F401
                               FeatureList, FeatureLists, Features, FloatList, Int64List, SequenceExample)

__all__ = ["BytesList", "CheckpointOptions", "ClusterSpec", "Example", "Feature", "FeatureList", "FeatureLists",
           "Features", "FloatList", "Int64List", "SequenceExample",
           "cosine_decay_restarts", "linear_cosine_decay", "noisy_linear_cosine_decay",
           "ProximalGradientDescentOptimizer", "ProximalAdagradOptimizer", "assert_global_step",
           "LooperThread", "SessionCreator", "GlobalStepWaiterHook", "queue_runner",
           "SessionManager"]


# ---- checkpoint readers -------------------------------------------------------------------------------
def _decay(fn, global_step, what):
    if global_step is None:
        raise ValueError(f"global_step is required for {what}.")
    return (lambda: fn(global_step)) if executing_eagerly() else fn(global_step)


def _f(x, dtype):
    return _M.cast(convert_to_tensor(x), dtype)


def cosine_decay_restarts(learning_rate, global_step, first_decay_steps, t_mul=2.0, m_mul=1.0, alpha=0.0, name=None):
    """Cosine decay with warm restarts (SGDR): period ``first_decay_steps``, each one ``t_mul``
    times longer and ``m_mul`` times lower."""
    def rate(step):
        lr = convert_to_tensor(learning_rate, dtype=_dt.float32) if not hasattr(learning_rate, "dtype") else \
            convert_to_tensor(learning_rate)
        dt = lr.dtype
        done = _f(step, dt) / _f(first_decay_steps, dt)
        if t_mul == 1.0:
            i_restart = _M.floor(done)
            done = done - i_restart
        else:
            i_restart = _M.floor(_M.log(1.0 - done * (1.0 - t_mul)) / math.log(t_mul))
            sum_r = (1.0 - _M.pow(_f(t_mul, dt), i_restart)) / (1.0 - t_mul)
            done = (done - sum_r) / _M.pow(_f(t_mul, dt), i_restart)
        m_fac = _M.pow(_f(m_mul, dt), i_restart)
        cosine = 0.5 * m_fac * (1.0 + _M.cos(math.pi * done))
        return _M.multiply(lr, (1.0 - alpha) * cosine + alpha, name=name)
    return _decay(rate, global_step, "cosine_decay_restarts")


def _linear_cosine(learning_rate, global_step, decay_steps, num_periods, alpha, beta, noise):
    lr = convert_to_tensor(learning_rate, dtype=_dt.float32) if not hasattr(learning_rate, "dtype") else \
        convert_to_tensor(learning_rate)
    dt = lr.dtype
    steps = _f(decay_steps, dt)
    step = _M.minimum(_f(global_step, dt), steps)
    linear = (steps - step) / steps
    if noise is not None:
        linear = linear + noise(step, linear)
    fraction = 2.0 * num_periods * (step / steps)
    cosine = 0.5 * (1.0 + _M.cos(math.pi * fraction))
    return lr * ((alpha + linear) * cosine + beta)


def linear_cosine_decay(learning_rate, global_step, decay_steps, num_periods=0.5, alpha=0.0, beta=0.001, name=None):
    """``lr * ((alpha + linear) * cosine + beta)``: a linear decay times a cosine of
    ``num_periods`` periods over ``decay_steps``."""
    return _decay(lambda s: _linear_cosine(learning_rate, s, decay_steps, num_periods, alpha, beta, None),
                  global_step, "linear_cosine_decay")


def noisy_linear_cosine_decay(learning_rate, global_step, decay_steps, initial_variance=1.0, variance_decay=0.55,
                              num_periods=0.5, alpha=0.0, beta=0.001, name=None):
    """:func:`linear_cosine_decay` with Gaussian noise of variance
    ``initial_variance / (1 + global_step) ** variance_decay`` on the linear part."""
    from tensorweave.ops import random_ops

    def noise(step, linear):
        std = _M.sqrt(initial_variance / _M.pow(1.0 + step, variance_decay))
        return random_ops.random_normal(linear.shape, stddev=std, dtype=linear.dtype)
    return _decay(lambda s: _linear_cosine(learning_rate, s, decay_steps, num_periods, alpha, beta, noise),
                  global_step, "noisy_linear_cosine_decay")


# ---- proximal optimizers -------------------------------------------------------------------------------
def _prox(prox_v, lr, l1, l2):
    """TF's proximal step: soft-threshold by ``lr * l1``, shrink by ``1 + lr * l2``."""
    if l1 > 0:
        prox_v = _M.sign(prox_v) * _M.maximum(_M.abs(prox_v) - lr * l1, 0.0)
    return prox_v / (1.0 + lr * l2)


class _ProximalSGD(_keras.SGD):
    def update_step(self, gradient, variable, learning_rate):
        from tensorweave.keras.optimizers.optimizer import _cast
        lr = _cast(learning_rate, variable.dtype)
        l1, l2 = self._l1, self._l2
        self._apply_update(lambda g, w: (_prox(w - lr * g, lr, l1, l2),), gradient, variable, [])


class _ProximalAdagrad(_keras.Adagrad):
    def update_step(self, gradient, variable, learning_rate):
        from tensorweave.keras.optimizers.optimizer import _cast
        lr = _cast(learning_rate, variable.dtype)
        l1, l2 = self._l1, self._l2

        def rule(g, w, accum):
            accum = accum + _M.square(g)
            step = lr * _M.rsqrt(accum)
            return _prox(w - step * g, step, l1, l2), accum
        self._apply_update(rule, gradient, variable, [self._accumulators[self._get_variable_index(variable)]])


def _v1_train():
    from tensorweave.compat import v1_train
    return v1_train


class ProximalGradientDescentOptimizer(_v1_train().Optimizer):
    """Gradient descent followed by TF's proximal step for L1/L2 regularization (FOBOS)."""

    def __init__(self, learning_rate, l1_regularization_strength=0.0, l2_regularization_strength=0.0,
                 use_locking=False, name="ProximalGradientDescent"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._l1, self._l2 = float(l1_regularization_strength), float(l2_regularization_strength)

    def _make_keras(self, lr):
        opt = _ProximalSGD(learning_rate=lr, name=self._name)
        opt._l1, opt._l2 = self._l1, self._l2
        return opt


class ProximalAdagradOptimizer(_v1_train().Optimizer):
    """Adagrad's step size (``lr / sqrt(accumulator)``) with TF's proximal L1/L2 step; slot "accumulator"."""

    _slot_names = {"accumulator": "accumulator"}

    def __init__(self, learning_rate, initial_accumulator_value=0.1, l1_regularization_strength=0.0,
                 l2_regularization_strength=0.0, use_locking=False, name="ProximalAdagrad"):
        if initial_accumulator_value <= 0.0:
            raise ValueError(f"initial_accumulator_value must be positive: {initial_accumulator_value}")
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._init = initial_accumulator_value
        self._l1, self._l2 = float(l1_regularization_strength), float(l2_regularization_strength)

    def _make_keras(self, lr):
        opt = _ProximalAdagrad(learning_rate=lr, initial_accumulator_value=self._init, epsilon=0.0, name=self._name)
        opt._l1, opt._l2 = self._l1, self._l2
        return opt


def assert_global_step(global_step_tensor):
    """``TypeError`` unless ``global_step_tensor`` is an integer scalar variable or tensor."""
    t = global_step_tensor
    if not (getattr(t, "_is_variable", False) or hasattr(t, "op")):
        raise TypeError(f"Existing \"global_step\" must be a Variable or Tensor: {t}.")
    if not t.dtype.is_integer:
        raise TypeError(f"Existing \"global_step\" does not have integer type: {t.dtype.name}")
    if t.shape.rank is not None and t.shape.rank != 0:
        raise TypeError(f"Existing \"global_step\" is not scalar: {t.shape}")


# ---- threads, sessions, hooks ------------------------------------------------------------------------
class LooperThread(threading.Thread):
    """A thread calling ``target(*args, **kwargs)`` (or its ``run_loop``) every ``timer_interval_secs``
    (as fast as it can with None) until ``coord`` asks to stop; errors go to ``coord``."""

    def __init__(self, coord, timer_interval_secs, target=None, args=None, kwargs=None):
        if not target and (args or kwargs):
            raise ValueError("'args' and 'kwargs' argument require that you also pass 'target'")
        super().__init__(daemon=True)
        self._coord, self._interval = coord, timer_interval_secs
        self._target_fn, self._args, self._kwargs = target, args or (), kwargs or {}

    @staticmethod
    def loop(coord, timer_interval_secs, target, args=None, kwargs=None):
        looper = LooperThread(coord, timer_interval_secs, target=target, args=args, kwargs=kwargs)
        looper.start()
        return looper

    def run(self):
        with self._coord.stop_on_exception():
            self.start_loop()
            if self._interval is None:
                while not self._coord.should_stop():
                    self.run_loop()
            else:
                next_at = time.time() + self._interval
                while not self._coord.wait_for_stop(max(next_at - time.time(), 0)):
                    next_at += self._interval
                    self.run_loop()
            self.stop_loop()

    def start_loop(self):
        """Called once when the thread starts."""

    def stop_loop(self):
        """Called once when the loop ends."""

    def run_loop(self):
        if self._target_fn:
            self._target_fn(*self._args, **self._kwargs)


class SessionCreator(abc.ABC):
    """What ``MonitoredSession`` asks for a session: ``create_session()``."""

    @abc.abstractmethod
    def create_session(self):
        raise NotImplementedError


def _register_session_creators():
    from tensorweave.compat.v1_monitored import ChiefSessionCreator
    SessionCreator.register(ChiefSessionCreator)


_register_session_creators()


def _hooks():
    from tensorweave.estimator import hooks
    return hooks


class GlobalStepWaiterHook(_hooks().SessionRunHook):
    """Delays a worker's steps until the global step reaches ``wait_until_step`` (0: no wait)."""

    def __init__(self, wait_until_step):
        self._wait_until_step = int(wait_until_step)
        self._step_tensor = None

    def begin(self):
        from tensorweave.compat.v1_train import get_global_step
        self._worker_is_started = False
        self._step_tensor = get_global_step()
        if self._step_tensor is None:
            raise RuntimeError("Global step should be created to use _GlobalStepWaiterHook.")

    def before_run(self, run_context):
        if self._worker_is_started or self._wait_until_step <= 0:
            self._worker_is_started = True
            return None
        while not run_context.session.run(self._step_tensor) >= self._wait_until_step:
            if run_context.stop_requested if hasattr(run_context, "stop_requested") else False:
                return None
            time.sleep(0.5)
        self._worker_is_started = True
        return None


def _queue_runner_namespace():
    from tensorweave.compat import v1_input
    ns = types.ModuleType("tensorweave.compat.v1.train.queue_runner",
                          "TF1's ``tf.train.queue_runner``: ``QueueRunner``, ``add_queue_runner``, "
                          "``start_queue_runners``.")
    ns.QueueRunner = v1_input.QueueRunner
    ns.add_queue_runner = v1_input.add_queue_runner
    ns.start_queue_runners = v1_input.start_queue_runners
    return ns


queue_runner = _queue_runner_namespace()


class SessionManager:
    """Creates sessions that are ready to train: restored from the latest checkpoint of
    ``checkpoint_dir`` when there is one, else initialized by ``init_op``/``init_fn``; then
    ``local_init_op``, and ``ready_op`` (e.g. ``report_uninitialized_variables()``) must report
    nothing uninitialized."""

    def __init__(self, local_init_op=None, ready_op=None, ready_for_local_init_op=None, graph=None,
                 recovery_wait_secs=30, local_init_run_options=None, local_init_feed_dict=None):
        from tensorweave.core.graph import get_default_graph
        self._local_init_op, self._ready_op = local_init_op, ready_op
        self._ready_for_local_init_op = ready_for_local_init_op
        self._graph = graph if graph is not None else get_default_graph()
        self._local_init_feed_dict = local_init_feed_dict
        self._recovery_wait_secs = recovery_wait_secs

    def _session(self, config):
        from tensorweave.runtime.session import Session
        return Session(graph=self._graph, config=config)

    def _restore(self, sess, saver, checkpoint_dir, checkpoint_filename_with_path):
        from tensorweave.train.manager import latest_checkpoint
        if checkpoint_filename_with_path:
            path = checkpoint_filename_with_path
        elif checkpoint_dir:
            path = latest_checkpoint(checkpoint_dir)
        else:
            return False
        if not path or saver is None:
            return False
        saver.restore(sess, path)
        return True

    def _not_ready(self, sess, op):
        """The names the ``op`` reports (empty: ready); None when there is no op."""
        if op is None:
            return None
        names = np.asarray(sess.run(op)).reshape(-1)
        return [n.decode() if isinstance(n, bytes) else str(n) for n in names]

    def _finish(self, sess):
        if self._local_init_op is not None:
            pending = self._not_ready(sess, self._ready_for_local_init_op)
            if pending:
                raise RuntimeError(f"Variables not initialized before the local init op: {pending}")
            sess.run(self._local_init_op, feed_dict=self._local_init_feed_dict)
        pending = self._not_ready(sess, self._ready_op)
        return not pending, pending

    def prepare_session(self, master, init_op=None, saver=None, checkpoint_dir=None,
                        checkpoint_filename_with_path=None, wait_for_checkpoint=False, max_wait_secs=7200,
                        config=None, init_feed_dict=None, init_fn=None):
        sess = self._session(config)
        if not self._restore(sess, saver, checkpoint_dir, checkpoint_filename_with_path):
            if init_op is None and not init_fn and self._local_init_op is None:
                raise RuntimeError("Model is not initialized and no init_op or init_fn or local_init_op was given")
            if init_op is not None:
                sess.run(init_op, feed_dict=init_feed_dict)
            if init_fn:
                init_fn(sess)
        ready, pending = self._finish(sess)
        if not ready:
            raise RuntimeError(f"Init operations did not make model ready. Uninitialized: {pending}")
        return sess

    def recover_session(self, master, saver=None, checkpoint_dir=None, checkpoint_filename_with_path=None,
                        wait_for_checkpoint=False, max_wait_secs=7200, config=None):
        """``(session, initialized)``: restored from a checkpoint (``initialized`` when the model is
        then ready) or, without one, a fresh session and False."""
        sess = self._session(config)
        if not self._restore(sess, saver, checkpoint_dir, checkpoint_filename_with_path):
            return sess, False
        ready, _ = self._finish(sess)
        return sess, ready

    def wait_for_session(self, master, config=None, max_wait_secs=float("inf")):
        """A session once the model is ready (another worker initialized it); in one process the
        model is checked once, and a model that is not ready is an error."""
        sess = self._session(config)
        ready, pending = self._finish(sess)
        if not ready:
            sess.close()
            raise errors.DeadlineExceededError(f"Session was not ready: uninitialized {pending}") \
                if hasattr(errors, "DeadlineExceededError") else RuntimeError(f"Session was not ready: {pending}")
        return sess
