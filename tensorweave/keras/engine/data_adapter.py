"""Turns what ``fit``/``evaluate``/``predict`` receive (arrays, dicts, Datasets, generators) into
batches, epoch after epoch.

>>> import numpy as np
>>> from tensorweave.keras.engine.data_adapter import DataHandler
>>> h = DataHandler(np.arange(10.0), np.arange(10), batch_size=4, shuffle=False)
>>> h.steps_per_epoch, [len(b[0]) for b in h.epoch()]
(3, [4, 4, 2])
"""
import math

import numpy as np

import tensorweave as tw
from tensorweave.core import nest


def unpack_x_y_sample_weight(data):
    """``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)`` -> the three (missing ones None)."""
    if isinstance(data, list):
        data = tuple(data)
    if not isinstance(data, tuple):
        return data, None, None
    if len(data) == 1:
        return data[0], None, None
    if len(data) == 2:
        return data[0], data[1], None
    if len(data) == 3:
        return data
    raise ValueError(f"Data is expected to be (x,), (x, y) or (x, y, sample_weight); got a tuple of {len(data)}")


def pack_x_y_sample_weight(x, y=None, sample_weight=None):
    """The inverse of :func:`unpack_x_y_sample_weight`: ``x`` alone (a tuple or list of inputs
    wrapped once, so it is not mistaken for ``(x, y)``), ``(x, y)`` or ``(x, y, sample_weight)``."""
    if y is None and sample_weight is None:
        return (x,) if isinstance(x, (tuple, list)) else x
    if sample_weight is None:
        return (x, y)
    return (x, y, sample_weight)


def _to_numpy(x):
    if x is None:
        return None
    if isinstance(x, tw.Tensor) or getattr(x, "_is_variable", False):
        return np.asarray(x)
    if isinstance(x, (list, tuple)) and x and not nest.is_nested(x[0]) and not isinstance(x[0], (np.ndarray, tw.Tensor)):
        return np.asarray(x)
    return x


def _as_arrays(x):
    if x is None:
        return None
    if isinstance(x, dict):
        return {k: _as_arrays(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], (np.ndarray, tw.Tensor, list)) and \
            not np.isscalar(x[0]):
        return type(x)(_as_arrays(v) for v in x)
    return np.asarray(_to_numpy(x))


def _num_samples(structure):
    sizes = {len(a) for a in nest.flatten(structure) if a is not None}
    if len(sizes) > 1:
        raise ValueError(f"Data cardinality is ambiguous: arrays have different first dimensions {sorted(sizes)}. "
                         "Hint: make sure all inputs and targets have the same number of samples")
    return sizes.pop() if sizes else 0


def _take(structure, idx):
    return nest.map_structure(lambda a: None if a is None else a[idx], structure)


def class_weights_to_sample_weights(y, class_weight):
    y = np.asarray(y)
    labels = y.argmax(-1) if y.ndim > 1 and y.shape[-1] > 1 else y.reshape(len(y), -1)[:, 0]
    table = np.ones(int(max(max(class_weight) + 1, labels.max() + 1 if labels.size else 1)), np.float32)
    for k, w in class_weight.items():
        table[int(k)] = w
    return table[labels.astype(np.int64)]


def check_count(value, name, minimum=1, allow_none=True):
    """An integer argument of fit/evaluate/predict (``batch_size``, ``epochs``, ``steps``), else a
    clear error naming it (Python's own message would come from deep inside the loop)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"Received an invalid value for `{name}`, expected {kind}. Received: {name}={value!r}"
                         f" (of type {type(value).__name__})")
    return int(value)


def check_validation_split(value):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or \
            not 0.0 <= float(value) < 1.0:
        raise ValueError(f"`validation_split` must be a float in [0, 1): the fraction of the data held out for "
                         f"validation. Received: validation_split={value!r}")
    return float(value)


def check_class_weight(class_weight, num_classes=None):
    """``class_weight``: ``{class index: weight}`` with integer classes of the model's output."""
    if class_weight is None:
        return None
    if not isinstance(class_weight, dict):
        raise ValueError(f"`class_weight` must be a dict {{class index: weight}}. Received: {class_weight!r}")
    bad = [k for k in class_weight if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0]
    if bad:
        raise ValueError(f"`class_weight` keys must be class indices (integers >= 0). Received keys {bad}")
    if num_classes is not None and num_classes > 1:
        unknown = sorted(int(k) for k in class_weight if k >= num_classes)
        if unknown:
            raise ValueError(f"`class_weight` has key(s) {unknown} that are not classes of the model's output, "
                             f"which has {num_classes} classes (0 to {num_classes - 1})")
    for k, w in class_weight.items():
        if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating)) or not np.isfinite(w) \
                or w < 0:
            raise ValueError(f"`class_weight[{k}]` must be a finite number >= 0. Received: {w!r}")
    return class_weight


class DataHandler:
    """Yields the batches of one epoch at a time (arrays, Datasets, generators)."""

    def __init__(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False, class_weight=None,
                 steps_per_epoch=None):
        self.class_weight = check_class_weight(class_weight)
        batch_size = check_count(batch_size, "batch_size")
        steps_per_epoch = check_count(steps_per_epoch, "steps_per_epoch")
        self._dataset = None
        self._iterator_source = None
        try:
            from tensorweave.data import Dataset
        except ImportError:  # the data package is optional for array inputs
            Dataset = ()
        from tensorweave.keras.utils.py_dataset import PyDataset
        if isinstance(x, PyDataset):
            if y is not None or sample_weight is not None:
                raise ValueError("When `x` is a PyDataset, `y` and `sample_weight` must not be given (its batches are "
                                 "(x, y) or (x, y, sample_weight) tuples)")
            self._py_dataset, self._shuffle_batches = x, shuffle
            self.steps_per_epoch = steps_per_epoch if steps_per_epoch is not None else x.num_batches
            return
        self._py_dataset = None
        if isinstance(x, Dataset):
            if y is not None:
                raise ValueError("`y` must not be given when `x` is a Dataset (it yields (x, y) pairs)")
            self._dataset = x
            n = steps_per_epoch
            if n is None:
                card = x.cardinality()
                n = None if card < 0 else int(card)
            self.steps_per_epoch = n
            return
        if hasattr(x, "__next__") or (hasattr(x, "__iter__") and not isinstance(x, (np.ndarray, list, tuple, dict))
                                      and not isinstance(x, tw.Tensor)):
            self._iterator_source = iter(x)
            self.steps_per_epoch = steps_per_epoch
            return
        self.x, self.y, self.sw = _as_arrays(x), _as_arrays(y), _as_arrays(sample_weight)
        self.n = _num_samples((self.x, self.y, self.sw))
        self.batch_size = batch_size or 32
        self.shuffle = shuffle
        self.steps_per_epoch = steps_per_epoch or max(math.ceil(self.n / self.batch_size), 1 if self.n else 0)

    def epoch(self):
        """The batches of the next epoch, as (x, y, sample_weight) tuples of arrays or tensors."""
        if self._py_dataset is not None:
            from tensorweave.keras.utils.py_dataset import iterate_epoch
            for batch in iterate_epoch(self._py_dataset, self._shuffle_batches, self.steps_per_epoch):
                yield self._with_class_weight(unpack_x_y_sample_weight(batch))
            return
        if self._dataset is not None:
            it = iter(self._dataset)
            for i, batch in enumerate(it):
                if self.steps_per_epoch is not None and i >= self.steps_per_epoch:
                    break
                yield self._with_class_weight(unpack_x_y_sample_weight(batch))
            return
        if self._iterator_source is not None:
            for i in range(self.steps_per_epoch or 1 << 62):
                try:
                    batch = next(self._iterator_source)
                except StopIteration:
                    return
                yield self._with_class_weight(unpack_x_y_sample_weight(batch))
            return
        order = np.random.permutation(self.n) if self.shuffle else None
        for step in range(self.steps_per_epoch):
            lo = (step * self.batch_size) % max(self.n, 1)
            idx = slice(lo, lo + self.batch_size) if order is None else order[lo:lo + self.batch_size]
            yield self._with_class_weight((_take(self.x, idx), _take(self.y, idx), _take(self.sw, idx)))

    def _with_class_weight(self, batch):
        x, y, sw = batch
        if self.class_weight is not None and y is not None:
            cw = class_weights_to_sample_weights(np.asarray(y), self.class_weight)
            sw = cw if sw is None else np.asarray(sw) * cw
        return x, y, sw


def train_validation_split(arrays, validation_split):
    """Keras' split: the last ``validation_split`` fraction (before shuffling) is validation data."""
    n = _num_samples(arrays)
    split_at = int(math.floor(n * (1.0 - validation_split)))
    if split_at == 0 or split_at == n:
        raise ValueError(f"`validation_split`={validation_split} leaves no training or no validation samples "
                         f"(there are {n} samples)")
    return _take(arrays, slice(0, split_at)), _take(arrays, slice(split_at, None))
