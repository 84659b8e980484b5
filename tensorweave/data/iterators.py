"""Internal iterators of the input pipeline, and the public ``Iterator`` that wraps them.

Every dataset makes one internal iterator per pass (``Dataset._make_iter``). Internal
iterators speak the flat form (a tuple of NumPy arrays per element, see ``structure``):

* ``next()`` returns one element or raises ``StopIteration`` (again on every later call);
* ``next_many(n)`` returns between 1 and ``n`` elements stacked along a new first axis.
  The default stacks single elements; iterators marked ``bulk`` answer it with one slice
  or gather over arrays, which is what makes ``from_tensor_slices(...).shuffle(...).batch(...)``
  cost a few NumPy calls per batch instead of one Python step per example;
* ``close()`` stops background threads early (they also stop when the iterator is garbage).

**Where iterator state lives** (for checkpointing, to be added): each iterator class lists
the plain attributes that define its position in ``_state_fields`` (counters, the current
epoch, the shuffle buffer, the permutation being walked ...). Saving an iterator means saving
those fields (recursively through ``_in``) plus the datasets' seeds; restoring means
rebuilding the iterator and setting them. Iterators whose state cannot be captured (a Python
generator's frame, futures in flight in a parallel map, a prefetch queue) say so next to
``_state_fields``; a checkpoint has to drain or re-create those.
"""
import numpy as np

from tensorweave.core import errors
from tensorweave.core.shape import fmt
from tensorweave.core.tensor import EagerTensor
from tensorweave.data import structure


class _Iter:
    """Base of internal iterators: ``next`` is required; ``next_many`` and ``close`` have defaults."""

    bulk = False           # True: next_many slices/gathers arrays instead of stacking elements
    _state_fields = ()
    _in = None             # the upstream iterator, when there is exactly one

    def next(self):
        raise NotImplementedError

    def next_many(self, n):
        elems = []
        try:
            while len(elems) < n:
                elems.append(self.next())
        except StopIteration:
            if not elems:
                raise
        return stack(elems)

    def close(self):
        if self._in is not None:
            self._in.close()


def stack(elems, what="batch"):
    """Stacks flat elements component-wise; equal shapes are required (TF's message otherwise)."""
    out = []
    for c in range(len(elems[0])):
        parts = [e[c] for e in elems]
        try:
            out.append(np.stack(parts))
        except ValueError:
            first = parts[0].shape
            i = next(i for i, p in enumerate(parts) if p.shape != first)
            raise errors.InvalidArgumentError(
                f"Cannot {what} tensors with different shapes in component {c}. First element had shape "
                f"{fmt(first)} and element {i} had shape {fmt(parts[i].shape)}. Hint: use padded_batch "
                "to pad them to a common shape, or map them to one shape first.") from None
    return tuple(out)


def concat_chunks(chunks):
    """Joins stacked chunks (each a tuple of arrays with a leading batch axis)."""
    if len(chunks) == 1:
        return chunks[0]
    out = []
    for c in range(len(chunks[0])):
        parts = [ch[c] for ch in chunks]
        try:
            out.append(np.concatenate(parts))
        except ValueError:
            shapes = sorted({fmt(p.shape[1:]) for p in parts})
            raise errors.InvalidArgumentError(
                f"Cannot batch tensors with different shapes in component {c}: element shapes "
                f"{', '.join(shapes)}. Hint: use padded_batch.") from None
    return tuple(out)


class IndexIter(_Iter):
    """Walks a random-access dataset in order, or in the order of an index array (a shuffle)."""

    bulk = True
    _state_fields = ("_pos",)     # with _order: derived from the shuffle's seeds and epoch

    def __init__(self, dataset, order=None):
        self._ds = dataset
        self._order = order
        self._n = dataset._length() if order is None else len(order)
        self._pos = 0

    def next(self):
        p = self._pos
        if p >= self._n:
            raise StopIteration
        self._pos = p + 1
        return self._ds._element(p if self._order is None else int(self._order[p]))

    def next_many(self, n):
        p = self._pos
        if p >= self._n:
            raise StopIteration
        e = min(self._n, p + n)
        self._pos = e
        if self._order is None:
            return self._ds._take(slice(p, e, 1))
        return self._ds._take(self._order[p:e])


class ListIter(_Iter):
    """Replays a list of flat elements (a finished in-memory cache)."""

    _state_fields = ("_pos",)

    def __init__(self, elements):
        self._elements = elements
        self._pos = 0

    def next(self):
        p = self._pos
        if p >= len(self._elements):
            raise StopIteration
        self._pos = p + 1
        return self._elements[p]


class Iterator:
    """What ``iter(dataset)`` returns: yields elements as eager tensors in the dataset's structure.

    >>> import tensorweave as tw
    >>> import tensorweave.data
    >>> it = iter(tw.data.Dataset.range(2))
    >>> int(next(it)), int(it.get_next())
    (0, 1)
    """

    def __init__(self, dataset):
        self._dataset = dataset
        self._impl = dataset._make_iter()
        self._spec = None
        self._flat = None

    @property
    def element_spec(self):
        return self._dataset.element_spec

    def __iter__(self):
        return self

    def _specs(self):
        if self._flat is None:
            self._spec = self._dataset.element_spec
            self._flat = structure.flat_specs(self._spec)
        return self._flat

    def _convert(self, a, s):
        return EagerTensor(a, s.dtype)

    def __next__(self):
        flat = self._impl.next()
        specs = self._flat if self._flat is not None else self._specs()
        if len(flat) != len(specs):
            raise errors.InvalidArgumentError(
                f"{type(self._dataset).__name__}: an element has {len(flat)} components but element_spec "
                f"has {len(specs)} ({self._spec}). Hint: a map function must return the same structure "
                "for every element.")
        out = []
        for i, (a, s) in enumerate(zip(flat, specs)):
            if a.dtype != s.dtype.np_dtype:
                raise errors.InvalidArgumentError(
                    f"{type(self._dataset).__name__}: component {i} of an element is {a.dtype} but "
                    f"element_spec says {s.dtype.name}. Hint: a map function must return the same "
                    "dtypes for every element.")
            out.append(self._convert(a, s))
        return structure.pack(self._spec, out)

    def next(self):
        return self.__next__()

    def get_next(self):
        """The next element; raises ``tw.errors.OutOfRangeError`` at the end (TF's ``get_next``)."""
        try:
            return self.__next__()
        except StopIteration:
            raise errors.OutOfRangeError("End of sequence") from None

    def close(self):
        self._impl.close()

    def __repr__(self):
        return f"<tw.data.Iterator of {type(self._dataset).__name__}>"


class NumpyIterator(Iterator):
    """``as_numpy_iterator()``: elements as NumPy arrays (0-d components as NumPy scalars)."""

    def _convert(self, a, s):
        return structure.to_numpy_value(a)
