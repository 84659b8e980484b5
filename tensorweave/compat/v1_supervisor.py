"""TF1's ``tf.train.Supervisor`` for one process (the chief): it initializes the variables or
restores the latest checkpoint of ``logdir``, finalizes the graph, and runs the standard services
on threads while the training loop runs — a checkpoint every ``save_model_secs``, the summaries
every ``save_summaries_secs`` and the global step rate — until ``should_stop()``.

As in TF the service threads run once when they start and then every interval; an exception in
``managed_session`` stops them and is re-raised, except ``OutOfRangeError`` (the input's end).
Multi-worker supervision (non-chief workers waiting for a chief, ``SyncReplicasOptimizer``,
``tf.train.Server``) has no meaning in one process and is not offered.

>>> import tempfile
>>> import tensorweave.compat.v1 as tf
>>> logdir = tempfile.mkdtemp()
>>> with tf.Graph().as_default():
...     step = tf.train.get_or_create_global_step()
...     train = tf.assign_add(step, 1)
...     sv = tf.train.Supervisor(logdir=logdir, save_model_secs=0, save_summaries_secs=0)
...     with sv.managed_session() as sess:
...         while not sv.should_stop() and sess.run(train) < 3:
...             pass
...         _ = sv.saver.save(sess, sv.save_path, global_step=sv.global_step)
>>> with tf.Graph().as_default():
...     step = tf.train.get_or_create_global_step()
...     sv = tf.train.Supervisor(logdir=logdir, save_model_secs=0, save_summaries_secs=0)
...     with sv.managed_session() as sess:
...         int(sess.run(step))         # restored from the checkpoint
3
"""
import contextlib
import logging
import os
import threading
import time

from tensorweave.compat import v1_train
from tensorweave.compat.v1_input import Coordinator, start_queue_runners
from tensorweave.core.graph import get_default_graph
from tensorweave.ops.control_flow_ops import group
from tensorweave.ops.variables import global_variables, global_variables_initializer, local_variables_initializer
from tensorweave.runtime.session import Session

__all__ = ["Supervisor", "basic_train_loop"]

_log = logging.getLogger("tensorweave.compat.v1")


class _Looper(threading.Thread):
    """Runs ``fn`` at once and then every ``interval`` seconds until the coordinator stops (TF's
    ``LooperThread`` with a timer); an exception stops the coordinator and is re-raised by ``join``."""

    def __init__(self, coord, interval, fn, name):
        super().__init__(name=name, daemon=True)
        self._coord, self._interval, self._fn = coord, interval, fn
        coord.register_thread(self)

    def run(self):
        with self._coord.stop_on_exception():
            next_time = time.monotonic()
            while not self._coord.wait_for_stop(max(next_time - time.monotonic(), 0)):
                next_time += self._interval
                self._fn()


class Supervisor:
    """See the module docstring. ``USE_DEFAULT`` builds the usual op (``None``: none at all)."""

    USE_DEFAULT = 0

    def __init__(self, graph=None, ready_op=USE_DEFAULT, ready_for_local_init_op=USE_DEFAULT, is_chief=True,
                 init_op=USE_DEFAULT, init_feed_dict=None, local_init_op=USE_DEFAULT, logdir=None,
                 summary_op=USE_DEFAULT, saver=USE_DEFAULT, global_step=USE_DEFAULT, save_summaries_secs=120,
                 save_model_secs=600, recovery_wait_secs=30, stop_grace_secs=120, checkpoint_basename="model.ckpt",
                 session_manager=None, summary_writer=USE_DEFAULT, init_fn=None, local_init_run_options=None):
        if not is_chief:
            raise ValueError("Supervisor: is_chief=False (a worker waiting for its chief) needs several processes; "
                             "tensorweave's Supervisor is the single-process chief. Hint: drop is_chief")
        self._graph = graph or get_default_graph()
        use = self.USE_DEFAULT
        with self._graph.as_default():
            self._global_step = v1_train.get_global_step() if global_step is use else global_step
            self._init_op = global_variables_initializer() if init_op is use else init_op
            if local_init_op is use:
                from tensorweave.compat.v1_framework import tables_initializer
                local_init_op = group(local_variables_initializer(), tables_initializer())
            self._local_init_op = local_init_op
            if saver is use:
                saved = self._graph.get_collection("savers")
                saver = saved[0] if saved else (v1_train.Saver() if global_variables() else None)
            self._saver = saver
            if summary_op is use:
                from tensorweave.compat.v1_summary import merge_all
                summary_op = merge_all()
            self._summary_op = summary_op
        self._init_feed_dict, self._init_fn = init_feed_dict, init_fn
        self._ready_op = None if ready_op is use else ready_op
        self._logdir = os.fspath(logdir) if logdir else None
        self._save_path = os.path.join(self._logdir, checkpoint_basename) if self._logdir else None
        self._summary_secs, self._model_secs = save_summaries_secs, save_model_secs
        self._stop_grace_secs = stop_grace_secs
        if summary_writer is use:
            summary_writer = self._default_writer()
        self._summary_writer = summary_writer
        self._coord = Coordinator()
        self._threads = []
        self._graph.finalize()

    def _default_writer(self):
        if not self._logdir:
            return None
        from tensorweave.compat.v1_monitored import _tensorboard_available
        if not _tensorboard_available():
            _log.warning("Supervisor: tensorboard is not installed; no summaries are written")
            return None
        from tensorweave.compat.v1_summary import FileWriter
        return FileWriter(self._logdir)

    # ---- properties TF1 programs read ----------------------------------------------------------
    graph = property(lambda self: self._graph)
    coord = property(lambda self: self._coord)
    saver = property(lambda self: self._saver)
    save_path = property(lambda self: self._save_path)
    global_step = property(lambda self: self._global_step)
    init_op = property(lambda self: self._init_op)
    init_feed_dict = property(lambda self: self._init_feed_dict)
    ready_op = property(lambda self: self._ready_op)
    summary_op = property(lambda self: self._summary_op)
    summary_writer = property(lambda self: self._summary_writer)
    is_chief = property(lambda self: True)
    save_model_secs = property(lambda self: self._model_secs)
    save_summaries_secs = property(lambda self: self._summary_secs)

    # ---- the session -------------------------------------------------------------------------------
    def prepare_or_wait_for_session(self, master="", config=None, wait_for_checkpoint=False, max_wait_secs=7200,
                                    start_standard_services=True):
        """A session with the variables restored from ``logdir``'s latest checkpoint, or initialized."""
        sess = Session(graph=self._graph, config=config)
        path = v1_train.latest_checkpoint(self._logdir) if self._logdir and self._saver is not None else None
        if path is not None:
            self._saver.restore(sess, path)
        else:
            if self._init_op is not None:
                sess.run(self._init_op, feed_dict=self._init_feed_dict)
            if self._init_fn is not None:
                self._init_fn(sess)
        if self._local_init_op is not None:
            sess.run(self._local_init_op)
        if self._logdir:
            v1_train.write_graph(self._graph, self._logdir, "graph.pbtxt")
            if self._summary_writer is not None:
                self._summary_writer.reopen()       # (closed by the stop of an earlier managed session)
                self._summary_writer.add_graph(self._graph)
        if start_standard_services:
            self.start_standard_services(sess)
            self.start_queue_runners(sess)
        return sess

    @contextlib.contextmanager
    def managed_session(self, master="", config=None, start_standard_services=True, close_summary_writer=True):
        """The session of :meth:`prepare_or_wait_for_session`; on exit the services stop, an exception
        in the body is re-raised (``OutOfRangeError`` ends the loop quietly) and the session closes."""
        sess = None
        try:
            sess = self.prepare_or_wait_for_session(master, config, start_standard_services=start_standard_services)
            yield sess
        except Exception as e:  # noqa: BLE001 - handed to the coordinator, re-raised by stop() (as TF)
            self.request_stop(e)
        finally:
            try:
                self.stop(close_summary_writer=close_summary_writer)
            finally:
                if sess is not None:
                    sess.close()

    # ---- services ----------------------------------------------------------------------------------
    def _step(self, sess):
        return int(sess.run(self._global_step)) if self._global_step is not None else 0

    def start_standard_services(self, sess):
        """Starts the checkpoint, summary and step-rate threads that ``logdir`` and the intervals ask for."""
        if not self._logdir:
            _log.warning("Supervisor: the standard services need a logdir")
            return []
        threads = []
        if self._summary_secs and self._summary_writer is not None:
            if self._summary_op is not None:
                threads.append(_Looper(self._coord, self._summary_secs, lambda: self.summary_computed(
                    sess, sess.run(self._summary_op)), "SVSummaryThread"))
            if self._global_step is not None:
                threads.append(_Looper(self._coord, self._summary_secs, self._step_counter(sess),
                                       "SVStepCounterThread"))
        if self._saver is not None and self._model_secs:
            threads.append(_Looper(self._coord, self._model_secs, lambda: self._saver.save(
                sess, self._save_path, global_step=self._global_step), "SVTimerCheckpointThread"))
        for t in threads:
            t.start()
        self._threads.extend(threads)
        return threads

    def _step_counter(self, sess):
        last = [None, None]

        def tick():
            step, now = self._step(sess), time.monotonic()
            if last[0] is not None and now > last[1]:
                from tensorboard.compat.proto import summary_pb2
                rate = (step - last[0]) / (now - last[1])
                self._summary_writer.add_summary(summary_pb2.Summary(value=[summary_pb2.Summary.Value(
                    tag="global_step/sec", simple_value=rate)]), step)
            last[:] = [step, now]
        return tick

    def start_queue_runners(self, sess, queue_runners=None):
        """Starts the graph's queue runners under this supervisor's coordinator."""
        threads = start_queue_runners(sess, coord=self._coord) if queue_runners is None else [
            t for qr in queue_runners for t in qr.create_threads(sess, coord=self._coord, daemon=True, start=True)]
        self._threads.extend(threads)
        return threads

    def loop(self, timer_interval_secs, target, args=None, kwargs=None):
        """Calls ``target(*args, **kwargs)`` now and every ``timer_interval_secs`` on a thread."""
        t = _Looper(self._coord, timer_interval_secs, lambda: target(*(args or ()), **(kwargs or {})),
                    getattr(target, "__name__", "looper"))
        t.start()
        self._threads.append(t)
        return t

    def summary_computed(self, sess, summary, global_step=None):
        """Writes ``summary`` (a summary op's value) at ``global_step`` (default: the current step)."""
        if self._summary_writer is None:
            raise RuntimeError("Supervisor.summary_computed: there is no summary writer (give a logdir)")
        step = global_step if global_step is not None else self._step(sess)
        self._summary_writer.add_summary(summary, step)

    # ---- stopping ----------------------------------------------------------------------------------
    def should_stop(self):
        return self._coord.should_stop()

    def request_stop(self, ex=None):
        self._coord.request_stop(ex)

    def stop_on_exception(self):
        return self._coord.stop_on_exception()

    def wait_for_stop(self):
        self._coord.wait_for_stop()

    def stop(self, threads=None, close_summary_writer=True, ignore_live_threads=False):
        """Stops the services (and ``threads``), re-raising an exception one of them reported."""
        self._coord.request_stop()
        try:
            self._coord.join(list(threads or ()) + self._threads, stop_grace_period_secs=self._stop_grace_secs,
                             ignore_live_threads=ignore_live_threads)
        finally:
            self._threads = []
            if close_summary_writer and self._summary_writer is not None:
                self._summary_writer.close()


def basic_train_loop(supervisor, train_step_fn, args=None, kwargs=None, master=""):
    """Calls ``train_step_fn(sess, *args, **kwargs)`` in ``supervisor``'s managed session until it
    should stop; an ``AbortedError`` starts a new session (TF1's recovery loop)."""
    from tensorweave.core import errors
    retry = True
    while retry:
        retry = False
        try:
            with supervisor.managed_session(master) as sess:
                while not supervisor.should_stop():
                    train_step_fn(sess, *(args or ()), **(kwargs or {}))
        except errors.AbortedError:
            supervisor.coord.clear_stop()
            retry = True
