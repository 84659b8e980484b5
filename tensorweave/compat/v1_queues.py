"""TF1's queues: ``FIFOQueue``, ``RandomShuffleQueue`` and ``PaddingFIFOQueue``, with graph ops.

A queue is a bounded, thread-safe buffer of elements (tuples of arrays, one per component);
``enqueue``/``enqueue_many``/``dequeue``/``dequeue_many``/``dequeue_up_to``/``close``/``size`` make
graph nodes that act on it when a session runs them. Enqueues block while the queue is full and
dequeues while it holds too few elements, so producers run in other threads (``QueueRunner``).
After ``close()``, enqueues fail (``CancelledError``) and a dequeue that cannot be served raises
``OutOfRangeError``, which ends a TF1 input loop. A ``RandomShuffleQueue`` hands out a random
element and keeps at least ``min_after_dequeue`` until it is closed; a ``PaddingFIFOQueue``
pads each component of a ``dequeue_many`` batch to its longest element (zeros, empty strings).

Unlike TensorFlow, where queues are resources of a session, a queue's buffer belongs to the
queue object, shared by every session of its graph.

>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     q = tf.FIFOQueue(3, [tf.int32, tf.string], shapes=[[], []])
...     fill = q.enqueue_many([[1, 2, 3], [b"a", b"b", b"c"]])
...     pair = q.dequeue_many(2)
...     size = q.size()
>>> with tf.Session(graph=g) as sess:
...     sess.run(fill)
...     n, s = sess.run(pair)
...     n.tolist(), s.tolist(), int(sess.run(size))
([1, 2], [b'a', b'b'], 1)
"""
import threading

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import name_scope
from tensorweave.core.shape import TensorShape, as_shape
from tensorweave.core.tensor import Tensor
from tensorweave.ops import array_ops as _a
from tensorweave.ops.script_ops import numpy_function

__all__ = ["QueueBase", "FIFOQueue", "RandomShuffleQueue", "PaddingFIFOQueue", "PriorityQueue", "CancelledError"]


CancelledError = errors.CancelledError   # an enqueue into a closed queue, as in TensorFlow


class _Buffer:
    """The elements of one queue, with the blocking rules (one condition variable guards everything)."""

    def __init__(self, name, capacity, min_after_dequeue=0, seed=None):
        self.name = name
        self.capacity = capacity
        self.min_after_dequeue = min_after_dequeue
        self.rng = np.random.default_rng(seed)
        self.items = []
        self.closed = False
        self.cond = threading.Condition()

    def put(self, elements):
        with self.cond:
            for e in elements:
                while len(self.items) >= self.capacity and not self.closed:
                    self.cond.wait()
                if self.closed:
                    raise CancelledError(f"Queue '{self.name}' is closed.")
                self.items.append(e)
                self.cond.notify_all()

    def take(self, n, up_to, shuffle):
        with self.cond:
            while True:
                keep = 0 if self.closed or not shuffle else self.min_after_dequeue
                if len(self.items) >= n + keep:
                    break
                if self.closed:
                    if up_to and self.items:
                        n = len(self.items)
                        break
                    raise errors.OutOfRangeError(
                        f"Queue '{self.name}' is closed and has insufficient elements (requested {n}, current size "
                        f"{len(self.items)})")
                self.cond.wait()
            if shuffle:
                picked = [self.items.pop(int(self.rng.integers(len(self.items)))) for _ in range(n)]
            else:
                picked, self.items = self.items[:n], self.items[n:]
            self.cond.notify_all()
            return picked

    def close(self):
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


class QueueBase:
    """The queue interface; see the module docstring."""

    _shuffle = False
    _pad = False

    def __init__(self, capacity, dtypes, shapes=None, names=None, shared_name=None, name="fifo_queue",
                 min_after_dequeue=0, seed=None):
        single = not isinstance(dtypes, (list, tuple))
        self._dtypes = [_dt.as_dtype(d) for d in _as_list(dtypes)]
        if shapes is None:
            self._shapes = [TensorShape(None)] * len(self._dtypes)
        else:
            shapes = [shapes] if single else list(shapes)
            if len(shapes) != len(self._dtypes):
                raise ValueError(f"{type(self).__name__}: {len(shapes)} shapes for {len(self._dtypes)} dtypes")
            self._shapes = [as_shape(s) for s in shapes]
        if names is not None:
            names = _as_list(names)
            if len(names) != len(self._dtypes):
                raise ValueError(f"{type(self).__name__}: {len(names)} names for {len(self._dtypes)} dtypes")
        self._names = names
        self._name = name
        self._buffer = _Buffer(name, capacity, min_after_dequeue, seed)

    dtypes = property(lambda self: list(self._dtypes))
    shapes = property(lambda self: list(self._shapes))
    names = property(lambda self: self._names)
    name = property(lambda self: self._name)

    # ---- enqueue -----------------------------------------------------------------------------------
    def _components(self, vals, what):
        if isinstance(vals, dict):
            if self._names is None:
                raise ValueError(f"{what}: a dict of values needs a queue made with names=")
            if set(vals) != set(self._names):
                raise ValueError(f"{what}: keys {sorted(vals)} do not match the queue's names {self._names}")
            vals = [vals[k] for k in self._names]
        vals = _as_list(vals)
        if len(vals) != len(self._dtypes):
            raise ValueError(f"{what}: expected {len(self._dtypes)} components, got {len(vals)}")
        tensors = []
        for i, (v, d) in enumerate(zip(vals, self._dtypes)):
            t = v if isinstance(v, Tensor) else convert_to_tensor(v, dtype=d)
            if t.dtype != d:
                raise TypeError(f"{what}: component {i} has dtype {t.dtype.name}, the queue holds {d.name}")
            tensors.append(t)
        return tensors

    def _check_shapes(self, tensors, many, what):
        for i, (t, s) in enumerate(zip(tensors, self._shapes)):
            shape = t.shape[1:] if many and t.shape.rank is not None else t.shape
            if not s.is_compatible_with(shape):
                raise ValueError(f"{what}: component {i} has shape {shape}, the queue's shape is {s}")

    def enqueue(self, vals, name=None):
        """An op that adds one element (blocks while the queue is full)."""
        return self._enqueue(vals, False, None, name or f"{self._name}_enqueue")

    def enqueue_many(self, vals, name=None):
        """An op that adds the slices along dimension 0 of each component."""
        return self._enqueue(vals, True, None, name or f"{self._name}_EnqueueMany")

    def _enqueue(self, vals, many, keep, name):
        """The enqueue op; ``keep`` (a bool scalar, or a vector with ``many``) drops the elements it is False for."""
        what = "enqueue_many" if many else "enqueue"
        with name_scope(name):
            tensors = self._components(vals, what)
            self._check_shapes(tensors, many, what)
            buf = self._buffer
            extra = [] if keep is None else [convert_to_tensor(keep, dtype=_dt.bool_)]

            def put(*arrays):
                if keep is not None:
                    *arrays, mask = arrays
                if not many:
                    if keep is None or bool(mask):
                        buf.put([tuple(np.array(a, copy=True) for a in arrays)])
                    return np.int32(0)
                n = {len(a) for a in arrays}
                if len(n) != 1:
                    raise errors.InvalidArgumentError(f"enqueue_many: the components have different first "
                                                      f"dimensions {sorted(n)}")
                rows = range(n.pop())
                if keep is not None:
                    rows = [i for i in rows if np.broadcast_to(mask, (len(rows),))[i]]
                buf.put([tuple(np.array(a[i], copy=True) for a in arrays) for i in rows])
                return np.int32(0)
            return numpy_function(put, tensors + extra, _dt.int32,
                                  name="QueueEnqueueManyV2" if many else "QueueEnqueueV2").op

    # ---- dequeue -----------------------------------------------------------------------------------
    def _stack(self, elements):
        out = []
        for i, d in enumerate(self._dtypes):
            parts = [e[i] for e in elements]
            if self._pad:
                parts = _pad_to_longest(parts, d)
            out.append(np.stack(parts) if parts else np.zeros((0,), d.np_dtype))
        return out

    def _outputs(self, arrays_fn, batch_dim, name):
        outs = numpy_function(arrays_fn, [], list(self._dtypes), name=name)
        outs = _as_list(outs)
        shaped = []
        for t, s in zip(outs, self._shapes):
            dims = ([batch_dim] if batch_dim != "none" else []) + (s.as_list() if s.rank is not None else [])
            if s.is_fully_defined():
                t = _a.reshape(t, [-1 if d is None else d for d in dims])
            shaped.append(t)
        if self._names is not None:
            return dict(zip(self._names, shaped))
        return shaped[0] if len(shaped) == 1 else shaped

    def dequeue(self, name=None):
        """One element (blocks until there is one; ``OutOfRangeError`` once closed and empty)."""
        buf, shuffle = self._buffer, self._shuffle
        with name_scope(name or f"{self._name}_Dequeue"):
            return self._outputs(lambda: list(buf.take(1, False, shuffle)[0]), "none", "QueueDequeueV2")

    def dequeue_many(self, n, name=None):
        """``n`` elements stacked along a new dimension 0."""
        n = int(n)
        buf, shuffle = self._buffer, self._shuffle
        with name_scope(name or f"{self._name}_DequeueMany"):
            return self._outputs(lambda: self._stack(buf.take(n, False, shuffle)), n, "QueueDequeueManyV2")

    def dequeue_up_to(self, n, name=None):
        """Like ``dequeue_many``, but a closed queue hands out its last, smaller batch."""
        n = int(n)
        buf, shuffle = self._buffer, self._shuffle
        with name_scope(name or f"{self._name}_DequeueUpTo"):
            return self._outputs(lambda: self._stack(buf.take(n, True, shuffle)), None, "QueueDequeueUpToV2")

    # ---- state -------------------------------------------------------------------------------------
    def close(self, cancel_pending_enqueues=False, name=None):
        buf = self._buffer

        def close():
            buf.close()
            return np.int32(0)
        return numpy_function(close, [], _dt.int32, name=name or f"{self._name}_Close").op

    def size(self, name=None):
        buf = self._buffer
        t = numpy_function(lambda: np.int32(len(buf.items)), [], _dt.int32, name=name or f"{self._name}_Size")
        return _a.reshape(t, [])

    def is_closed(self, name=None):
        buf = self._buffer
        t = numpy_function(lambda: np.bool_(buf.closed), [], _dt.bool_, name=name or f"{self._name}_IsClosed")
        return _a.reshape(t, [])


def _pad_to_longest(parts, dtype):
    if not parts:
        return parts
    rank = parts[0].ndim
    longest = [max(p.shape[k] for p in parts) for k in range(rank)]
    fill = b"" if dtype == _dt.string else 0
    out = []
    for p in parts:
        padded = np.full(longest, fill, dtype=p.dtype)
        padded[tuple(slice(0, s) for s in p.shape)] = p
        out.append(padded)
    return out


class FIFOQueue(QueueBase):
    """First in, first out."""

    def __init__(self, capacity, dtypes, shapes=None, names=None, shared_name=None, name="fifo_queue"):
        super().__init__(capacity, dtypes, shapes, names, shared_name, name)


class PaddingFIFOQueue(QueueBase):
    """A FIFO queue whose ``dequeue_many`` pads variable-size components (shapes may contain None)."""

    _pad = True

    def __init__(self, capacity, dtypes, shapes, names=None, shared_name=None, name="padding_fifo_queue"):
        if shapes is None:
            raise ValueError("PaddingFIFOQueue: shapes must be given (use None for the variable dimensions)")
        super().__init__(capacity, dtypes, shapes, names, shared_name, name)


class RandomShuffleQueue(QueueBase):
    """Hands out elements in random order, keeping ``min_after_dequeue`` until it is closed."""

    _shuffle = True

    def __init__(self, capacity, min_after_dequeue, dtypes, shapes=None, names=None, seed=None, shared_name=None,
                 name="random_shuffle_queue"):
        if min_after_dequeue >= capacity:
            raise ValueError(f"RandomShuffleQueue: min_after_dequeue ({min_after_dequeue}) must be smaller than "
                             f"capacity ({capacity})")
        super().__init__(capacity, dtypes, shapes, names, shared_name, name, min_after_dequeue, seed)


class _PriorityBuffer(_Buffer):
    """Keeps the elements ordered by their first component (an int64 priority), smallest first."""

    def put(self, elements):
        with self.cond:
            for e in elements:
                while len(self.items) >= self.capacity and not self.closed:
                    self.cond.wait()
                if self.closed:
                    raise CancelledError(f"Queue '{self.name}' is closed.")
                key = int(np.asarray(e[0]))
                at = len(self.items)
                while at > 0 and int(np.asarray(self.items[at - 1][0])) > key:
                    at -= 1
                self.items.insert(at, e)
                self.cond.notify_all()


class PriorityQueue(QueueBase):
    """Hands out elements by priority, smallest first: each element's first component is an int64
    priority, followed by components of ``types``."""

    def __init__(self, capacity, types, shapes=None, names=None, shared_name=None, name="priority_queue"):
        types = _as_list(types)
        if shapes is not None:
            shapes = [[]] + list(shapes if isinstance(shapes, (list, tuple)) and
                                 (not shapes or isinstance(shapes[0], (list, tuple, TensorShape)))
                                 else [shapes])
        if names is not None:
            names = ["priority"] + _as_list(names) if "priority" not in _as_list(names) else _as_list(names)
        super().__init__(capacity, [_dt.int64] + types, shapes, names, shared_name, name)
        self._buffer = _PriorityBuffer(name, capacity)
