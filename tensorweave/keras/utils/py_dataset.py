"""``keras.utils.PyDataset`` (and its old name ``Sequence``): a dataset written as a Python class
that returns batch ``i`` from ``__getitem__(i)`` and the number of batches from ``__len__``.

``fit``/``evaluate``/``predict`` take one directly (no ``y``: each batch is ``x``, ``(x, y)``
or ``(x, y, sample_weight)``). Every epoch calls ``on_epoch_begin()``, goes through the batches
(in a shuffled order when ``fit(shuffle=True)``), then ``on_epoch_end()``, as Keras does.
``workers > 1`` loads batches ahead in that many threads (at most ``max_queue_size`` waiting);
``use_multiprocessing`` is accepted, but batches still come from threads (tensorweave never
pickles a dataset into other processes) and a warning says so.

>>> import numpy as np
>>> class Squares(PyDataset):
...     def __len__(self):
...         return 3
...     def __getitem__(self, i):
...         x = np.full((2, 1), float(i), np.float32)
...         return x, x ** 2
>>> ds = Squares()
>>> [b[1].ravel().tolist() for b in iterate_epoch(ds)]
[[0.0, 0.0], [1.0, 1.0], [4.0, 4.0]]
"""
import collections
import concurrent.futures
import warnings

import numpy as np


class PyDataset:
    """Base class of Python datasets (override ``__getitem__`` and ``__len__``, and optionally
    ``on_epoch_begin``/``on_epoch_end``); call ``super().__init__(**kwargs)`` in yours."""

    def __init__(self, workers=1, use_multiprocessing=False, max_queue_size=10):
        self._workers = workers
        self._use_multiprocessing = use_multiprocessing
        self._max_queue_size = max_queue_size

    # Subclasses that never call super().__init__() still work: the defaults come from here.
    @property
    def workers(self):
        return self.__dict__.get("_workers", 1)

    @workers.setter
    def workers(self, value):
        self._workers = value

    @property
    def use_multiprocessing(self):
        return self.__dict__.get("_use_multiprocessing", False)

    @use_multiprocessing.setter
    def use_multiprocessing(self, value):
        self._use_multiprocessing = value

    @property
    def max_queue_size(self):
        return self.__dict__.get("_max_queue_size", 10)

    @max_queue_size.setter
    def max_queue_size(self, value):
        self._max_queue_size = value

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__(index) returning batch `index`")

    @property
    def num_batches(self):
        """``len(self)``, or None when the class defines no ``__len__`` (an endless dataset)."""
        if type(self).__len__ is PyDataset.__len__:
            return None
        return len(self)

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __len__ (or pass steps_per_epoch)")

    def on_epoch_begin(self):
        """Called before each epoch."""

    def on_epoch_end(self):
        """Called after each epoch (shuffle your data here)."""


Sequence = PyDataset


def iterate_epoch(dataset, shuffle=False, steps=None):
    """The batches of one epoch of ``dataset``, with its epoch hooks around them."""
    n = dataset.num_batches
    if n is None and steps is None:
        raise ValueError(f"{type(dataset).__name__} has no __len__: pass steps_per_epoch (or steps) to say how many "
                         "batches an epoch has")
    count = n if steps is None else (steps if n is None else min(steps, n))
    order = np.random.permutation(n)[:count] if shuffle and n is not None else range(count)
    dataset.on_epoch_begin()
    try:
        workers = int(dataset.workers or 1)
        if dataset.use_multiprocessing:
            warnings.warn(f"{type(dataset).__name__}: use_multiprocessing=True is not supported; loading batches "
                          f"in {workers} thread(s) instead", stacklevel=3)
        if workers <= 1:
            for i in order:
                yield dataset[int(i)]
            return
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            pending = collections.deque()
            indices = iter(order)
            ahead = max(int(dataset.max_queue_size or 1), workers)
            for i in indices:
                pending.append(pool.submit(dataset.__getitem__, int(i)))
                if len(pending) >= ahead:
                    break
            while pending:
                batch = pending.popleft().result()
                nxt = next(indices, None)
                if nxt is not None:
                    pending.append(pool.submit(dataset.__getitem__, int(nxt)))
                yield batch
    finally:
        dataset.on_epoch_end()
