"""TF1's threaded input pipeline: ``Coordinator``, ``QueueRunner``, the input producers and ``batch``.

A ``QueueRunner`` runs enqueue ops in threads until their input is exhausted (``OutOfRangeError``),
then closes the queue, so the consumer's dequeue raises ``OutOfRangeError`` after the last batch.
The producers (``string_input_producer``, ``slice_input_producer``, ...) fill a queue with
(optionally shuffled) items for ``num_epochs`` epochs; with ``num_epochs`` set they count epochs in
a local variable, so ``tf.local_variables_initializer()`` must run first, as in TF1.

>>> import numpy as np
>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     x, y = tf.train.slice_input_producer([np.arange(6), np.arange(6) * 10], num_epochs=1, shuffle=False)
...     bx, by = tf.train.batch([x, y], batch_size=4, allow_smaller_final_batch=True)
...     init = tf.local_variables_initializer()
>>> with tf.Session(graph=g) as sess:
...     sess.run(init)
...     coord = tf.train.Coordinator()
...     threads = tf.train.start_queue_runners(sess, coord)
...     batches = []
...     try:
...         while not coord.should_stop():
...             batches.append(sess.run(by).tolist())
...     except tf.errors.OutOfRangeError:
...         pass
...     coord.request_stop()
...     coord.join(threads)
>>> batches
[[0, 10, 20, 30], [40, 50]]
"""
import threading

import numpy as np

from tensorweave.compat.v1_queues import CancelledError, FIFOQueue, PaddingFIFOQueue, RandomShuffleQueue
from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import get_default_graph, name_scope
from tensorweave.ops import array_ops as _a
from tensorweave.ops import random_ops as _rand
from tensorweave.ops.control_flow_ops import control_dependencies
from tensorweave.ops.script_ops import numpy_function
from tensorweave.ops.variables import LOCAL_VARIABLES, Variable
from tensorweave.train.coordination import Coordinator

__all__ = ["Coordinator", "QueueRunner", "add_queue_runner", "start_queue_runners", "limit_epochs",
           "input_producer", "string_input_producer", "range_input_producer", "slice_input_producer", "batch",
           "shuffle_batch", "batch_join", "shuffle_batch_join", "maybe_batch", "maybe_shuffle_batch",
           "maybe_batch_join", "maybe_shuffle_batch_join", "match_filenames_once"]

QUEUE_RUNNERS = "queue_runners"


class QueueRunner:
    """Runs ``enqueue_ops`` (one thread each) on a session; closes ``queue`` when all have finished."""

    def __init__(self, queue=None, enqueue_ops=None, close_op=None, cancel_op=None,
                 queue_closed_exception_types=None, queue_runner_def=None, import_scope=None):
        if queue is None or not enqueue_ops:
            raise ValueError("QueueRunner: queue and enqueue_ops must be given")
        self._queue = queue
        self._enqueue_ops = list(enqueue_ops)
        self._close_op = close_op if close_op is not None else queue.close()
        self._cancel_op = cancel_op if cancel_op is not None else queue.close(cancel_pending_enqueues=True)
        self._closed_types = tuple(queue_closed_exception_types or (errors.OutOfRangeError, CancelledError))
        self._lock = threading.Lock()
        self._running = 0
        self.exceptions_raised = []

    queue = property(lambda self: self._queue)
    enqueue_ops = property(lambda self: list(self._enqueue_ops))
    close_op = property(lambda self: self._close_op)
    cancel_op = property(lambda self: self._cancel_op)
    name = property(lambda self: self._queue.name)

    def _run(self, sess, enqueue_op, coord):
        try:
            while coord is None or not coord.should_stop():
                try:
                    sess.run(enqueue_op)
                except self._closed_types:
                    break
        except Exception as e:  # noqa: BLE001 - reported to the coordinator, as TF1 does
            self.exceptions_raised.append(e)
            if coord is not None:
                coord.request_stop(e)
            else:
                raise
        finally:
            with self._lock:
                self._running -= 1
                last = self._running == 0
            if last:
                try:
                    sess.run(self._close_op)
                except Exception:  # noqa: BLE001 - the session may be closed already
                    pass

    def _cancel_on_stop(self, sess, coord):
        coord.wait_for_stop()
        try:
            sess.run(self._cancel_op)
        except Exception:  # noqa: BLE001
            pass

    def create_threads(self, sess, coord=None, daemon=False, start=False):
        with self._lock:
            self._running = len(self._enqueue_ops)
        threads = [threading.Thread(target=self._run, args=(sess, op, coord), daemon=daemon,
                                    name=f"QueueRunnerThread-{self.name}-{i}")
                   for i, op in enumerate(self._enqueue_ops)]
        if coord is not None:
            threads.append(threading.Thread(target=self._cancel_on_stop, args=(sess, coord), daemon=True,
                                            name=f"QueueRunnerCancel-{self.name}"))
            for t in threads:
                coord.register_thread(t)
        if start:
            for t in threads:
                t.start()
        return threads


def add_queue_runner(qr, collection=QUEUE_RUNNERS):
    get_default_graph().add_to_collection(collection, qr)


def start_queue_runners(sess=None, coord=None, daemon=True, start=True, collection=QUEUE_RUNNERS):
    """Starts the threads of every queue runner of ``sess``'s graph; returns them."""
    if sess is None:
        from tensorweave.runtime.session import get_default_session
        sess = get_default_session()
        if sess is None:
            raise ValueError("start_queue_runners: no session given and no default session")
    threads = []
    for qr in sess.graph.get_collection(collection):
        threads.extend(qr.create_threads(sess, coord=coord, daemon=daemon, start=start))
    return threads


# ---- producers ----------------------------------------------------------------------------------------
def limit_epochs(tensor, num_epochs=None, name=None):
    """``tensor``, raising ``OutOfRangeError`` after it has been evaluated ``num_epochs`` times."""
    if num_epochs is None:
        return tensor
    if num_epochs <= 0:
        raise ValueError(f"limit_epochs: num_epochs must be > 0, got {num_epochs}")
    with name_scope(name or "limit_epochs"):
        epochs = Variable(lambda: _a.zeros([], _dt.int64), trainable=False, name="epochs",
                          collections=[LOCAL_VARIABLES])
        count = epochs.assign_add(1)

        def check(c):
            if c > num_epochs:
                raise errors.OutOfRangeError(f"Reached limit of {num_epochs} epochs")
            return np.int64(c)
        ok = numpy_function(check, [count], _dt.int64, name="check")
        with control_dependencies([ok]):
            return _a.identity(tensor)


def input_producer(input_tensor, element_shape=None, num_epochs=None, shuffle=True, seed=None, capacity=32,
                   shared_name=None, summary_name=None, name=None, cancel_op=None):
    """A FIFO queue filled with the rows of ``input_tensor`` (shuffled per epoch), by a queue runner."""
    with name_scope(name or "input_producer"):
        input_tensor = convert_to_tensor(input_tensor)
        shape = element_shape if element_shape is not None else input_tensor.shape[1:]
        if shuffle:
            input_tensor = _rand.shuffle(input_tensor, seed=seed)
        input_tensor = limit_epochs(input_tensor, num_epochs)
        q = FIFOQueue(capacity, [input_tensor.dtype], shapes=[shape], name="fifo_queue")
        add_queue_runner(QueueRunner(q, [q.enqueue_many([input_tensor])]))
        return q


def string_input_producer(string_tensor, num_epochs=None, shuffle=True, seed=None, capacity=32, shared_name=None,
                          name=None, cancel_op=None):
    """A queue of the strings (file names) for a reader; ``dequeue()`` gives the next one."""
    t = convert_to_tensor(string_tensor, dtype=_dt.string)
    if t.shape.rank is not None and t.shape.rank != 1:
        raise ValueError(f"string_input_producer: string_tensor must be a vector, got shape {t.shape}")
    return input_producer(t, [], num_epochs, shuffle, seed, capacity, shared_name, None, name or "input_producer")


def range_input_producer(limit, num_epochs=None, shuffle=True, seed=None, capacity=32, shared_name=None, name=None):
    """A queue of the integers ``0 .. limit - 1``."""
    from tensorweave.ops.indexing_ops import range as _range
    return input_producer(_range(limit), [], num_epochs, shuffle, seed, capacity, shared_name, None,
                          name or "input_producer")


def slice_input_producer(tensor_list, num_epochs=None, shuffle=True, seed=None, capacity=32, shared_name=None,
                         name=None):
    """One slice (row) of every tensor of ``tensor_list`` at a time, the same row of each."""
    with name_scope(name or "input_producer"):
        tensors = [convert_to_tensor(t) for t in tensor_list]
        if not tensors:
            raise ValueError("slice_input_producer: expected at least one tensor")
        n = tensors[0].shape[0]
        if n is None:
            raise ValueError("slice_input_producer: the first dimension of the tensors must be known")
        for t in tensors[1:]:
            if t.shape[0] is not None and t.shape[0] != n:
                raise ValueError(f"slice_input_producer: the tensors have different first dimensions "
                                 f"({n} and {t.shape[0]})")
        index = range_input_producer(n, num_epochs, shuffle, seed, capacity, shared_name).dequeue()
        return [_a.gather(t, index) for t in tensors]


# ---- batching -----------------------------------------------------------------------------------------
def _flatten_tensors(tensors):
    if isinstance(tensors, dict):
        keys = sorted(tensors)
        return [tensors[k] for k in keys], lambda out: dict(zip(keys, out))
    if isinstance(tensors, (list, tuple)):
        return list(tensors), lambda out: list(out)
    return [tensors], lambda out: out[0]


def _batch(kind, tensors, batch_size, num_threads, capacity, enqueue_many, shapes, dynamic_pad,
           allow_smaller_final_batch, min_after_dequeue, seed, name, keep_input=None, joined=False):
    """The queue, its runner and the dequeue of ``batch``/``shuffle_batch`` (``joined``: ``tensors`` is a list
    of tensor lists, one enqueue op each, as the ``*_join`` functions)."""
    lists = list(tensors) if joined else [tensors]
    if not lists:
        raise ValueError(f"{kind}: expected at least one list of tensors")
    flat, rebuild = _flatten_tensors(lists[0])
    flat = [convert_to_tensor(t) for t in flat]
    if shapes is None:
        shapes = [t.shape[1:] if enqueue_many else t.shape for t in flat]
        if not dynamic_pad and not all(s.is_fully_defined() for s in shapes):
            raise ValueError(f"{kind}: all shapes must be fully defined ({[str(s) for s in shapes]}); pass shapes= "
                             f"or dynamic_pad=True")
    dtypes = [t.dtype for t in flat]
    if dynamic_pad:
        q = PaddingFIFOQueue(capacity, dtypes, shapes, name="padding_fifo_queue")
    elif kind == "shuffle_batch":
        q = RandomShuffleQueue(capacity, min_after_dequeue, dtypes, shapes, seed=seed, name="random_shuffle_queue")
    else:
        q = FIFOQueue(capacity, dtypes, shapes, name="fifo_queue")
    keep = None if keep_input is None or keep_input is True else keep_input
    enqueues = [q._enqueue(_flatten_tensors(t)[0], enqueue_many, keep, "enqueue") for t in lists]
    add_queue_runner(QueueRunner(q, enqueues if joined else enqueues * num_threads))
    out = q.dequeue_up_to(batch_size) if allow_smaller_final_batch else q.dequeue_many(batch_size)
    return rebuild(_as_list(out))


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def batch(tensors, batch_size, num_threads=1, capacity=32, enqueue_many=False, shapes=None, dynamic_pad=False,
          allow_smaller_final_batch=False, shared_name=None, name=None):
    """Batches of ``tensors`` (a list or dict) from a FIFO queue that ``num_threads`` runners fill."""
    with name_scope(name or "batch"):
        return _batch("batch", tensors, batch_size, num_threads, capacity, enqueue_many, shapes, dynamic_pad,
                      allow_smaller_final_batch, 0, None, name)


def shuffle_batch(tensors, batch_size, capacity, min_after_dequeue, num_threads=1, seed=None, enqueue_many=False,
                  shapes=None, allow_smaller_final_batch=False, shared_name=None, name=None):
    """Batches of ``tensors`` in random order, from a queue that keeps ``min_after_dequeue`` to mix."""
    with name_scope(name or "shuffle_batch"):
        return _batch("shuffle_batch", tensors, batch_size, num_threads, capacity, enqueue_many, shapes, False,
                      allow_smaller_final_batch, min_after_dequeue, seed, name)


def batch_join(tensors_list, batch_size, capacity=32, enqueue_many=False, shapes=None, dynamic_pad=False,
               allow_smaller_final_batch=False, shared_name=None, name=None):
    """Like ``batch``, with one enqueue thread per tensor list of ``tensors_list`` (e.g. one per reader)."""
    with name_scope(name or "batch_join"):
        return _batch("batch_join", tensors_list, batch_size, 1, capacity, enqueue_many, shapes, dynamic_pad,
                      allow_smaller_final_batch, 0, None, name, joined=True)


def shuffle_batch_join(tensors_list, batch_size, capacity, min_after_dequeue, seed=None, enqueue_many=False,
                       shapes=None, allow_smaller_final_batch=False, shared_name=None, name=None):
    with name_scope(name or "shuffle_batch_join"):
        return _batch("shuffle_batch", tensors_list, batch_size, 1, capacity, enqueue_many, shapes, False,
                      allow_smaller_final_batch, min_after_dequeue, seed, name, joined=True)


def maybe_batch(tensors, keep_input, batch_size, num_threads=1, capacity=32, enqueue_many=False, shapes=None,
                dynamic_pad=False, allow_smaller_final_batch=False, shared_name=None, name=None):
    """``batch`` of the elements for which ``keep_input`` (a bool scalar, or vector with ``enqueue_many``) holds."""
    with name_scope(name or "batch"):
        return _batch("batch", tensors, batch_size, num_threads, capacity, enqueue_many, shapes, dynamic_pad,
                      allow_smaller_final_batch, 0, None, name, keep_input=keep_input)


def maybe_shuffle_batch(tensors, batch_size, capacity, min_after_dequeue, keep_input, num_threads=1, seed=None,
                        enqueue_many=False, shapes=None, allow_smaller_final_batch=False, shared_name=None, name=None):
    with name_scope(name or "shuffle_batch"):
        return _batch("shuffle_batch", tensors, batch_size, num_threads, capacity, enqueue_many, shapes, False,
                      allow_smaller_final_batch, min_after_dequeue, seed, name, keep_input=keep_input)


def maybe_batch_join(tensors_list, keep_input, batch_size, capacity=32, enqueue_many=False, shapes=None,
                     dynamic_pad=False, allow_smaller_final_batch=False, shared_name=None, name=None):
    with name_scope(name or "batch_join"):
        return _batch("batch_join", tensors_list, batch_size, 1, capacity, enqueue_many, shapes, dynamic_pad,
                      allow_smaller_final_batch, 0, None, name, keep_input=keep_input, joined=True)


def maybe_shuffle_batch_join(tensors_list, batch_size, capacity, min_after_dequeue, keep_input, seed=None,
                             enqueue_many=False, shapes=None, allow_smaller_final_batch=False, shared_name=None,
                             name=None):
    with name_scope(name or "shuffle_batch_join"):
        return _batch("shuffle_batch", tensors_list, batch_size, 1, capacity, enqueue_many, shapes, False,
                      allow_smaller_final_batch, min_after_dequeue, seed, name, keep_input=keep_input, joined=True)


def match_filenames_once(pattern, name=None):
    """A local variable holding the file names matching ``pattern`` (a glob, or a list of them), sorted,
    fixed when the local variables are initialized."""
    import glob

    def matches():
        patterns = [pattern] if isinstance(pattern, (str, bytes)) else list(pattern)
        found = sorted({f for p in patterns for f in glob.glob(p.decode() if isinstance(p, bytes) else p)})
        return np.array([f.encode() for f in found], dtype=object)
    with name_scope(name or "matching_filenames"):
        initial = lambda: _a.reshape(numpy_function(matches, [], _dt.string, name="glob"), [-1])  # noqa: E731
        return Variable(initial, trainable=False, name="matching_filenames", collections=[LOCAL_VARIABLES],
                        validate_shape=False, dtype=_dt.string)

