"""TF1's dataset iterators as graph ops: ``make_one_shot_iterator`` / ``make_initializable_iterator``.

``get_next()`` is a node whose kernel pulls the next element from a pass over the dataset
(the pipeline itself stays the eager one of ``tw.data``); at the end it raises
``tw.errors.OutOfRangeError``, as TF1's ``IteratorGetNext`` does. An initializable iterator
starts a new pass each time its ``initializer`` runs; a one-shot iterator starts its pass on
the first ``get_next``. Like TF's iterator resource, the position lives with the iterator
object (one position shared by every session of the graph).

>>> import tensorweave as tw
>>> import tensorweave.data
>>> g = tw.Graph()
>>> with g.as_default():
...     it = tw.data.Dataset.range(3).make_initializable_iterator()
...     nxt = it.get_next()
>>> with tw.Session(graph=g) as sess:
...     _ = sess.run(it.initializer)
...     [int(sess.run(nxt)) for _ in range(3)]
[0, 1, 2]

Datasets over graph tensors (``from_tensor_slices(placeholder)``, :class:`FedSource`) get their
values when an initializer runs: the initializer node takes those tensors as inputs, so
``sess.run(it.initializer, feed_dict={x: ...})`` starts a pass over the fed arrays. A
``string_handle()`` names an iterator to ``Iterator.from_string_handle`` (feedable iterators):
the handle is a string constant, looked up in a process-wide table of live iterators.

>>> import numpy as np
>>> g = tw.Graph()
>>> with g.as_default():
...     x = tw.compat.v1.placeholder(tw.float32, [None])
...     it = tw.data.Dataset.from_tensor_slices(x).batch(2).make_initializable_iterator()
...     nxt = it.get_next()
>>> with tw.Session(graph=g) as sess:
...     _ = sess.run(it.initializer, {x: np.arange(3.0)})
...     [sess.run(nxt).tolist() for _ in range(2)]
[[0.0, 1.0], [2.0]]
"""
import itertools
import threading
import weakref

from tensorweave.core import errors, nest
from tensorweave.core.context import executing_eagerly
from tensorweave.core.graph import SymbolicTensor
from tensorweave.core.tensor_spec import TensorSpec
from tensorweave.data import structure
from tensorweave.data.dataset import UNKNOWN, Dataset

_HANDLES = weakref.WeakValueDictionary()     # string handle -> live iterator
_handle_ids = itertools.count(1)


def has_graph_tensors(value):
    """True when a dataset source's structure holds graph tensors (placeholders ...)."""
    return any(isinstance(v, SymbolicTensor) for v in structure.flatten(value))


class FedSource(Dataset):
    """``from_tensor_slices``/``from_tensors`` over graph tensors: the arrays arrive when an
    iterator's initializer runs (``bind``); until then iterating it is an error."""

    def __init__(self, tensors, slices):
        super().__init__()
        self._template, self._slices, self._bound = tensors, slices, None
        self._tensors = [v for v in structure.flatten(tensors) if isinstance(v, SymbolicTensor)]

        def spec(v):
            if isinstance(v, SymbolicTensor):
                s = v.shape
                if slices and s.rank == 0:
                    raise errors.InvalidArgumentError(
                        f"from_tensor_slices: {v.name} is a scalar (shape []); every component needs a first "
                        "dimension to slice. Hint: use from_tensors for a single element.")
                return TensorSpec(s[1:] if slices and s.rank is not None else s, v.dtype)
            a = structure.as_array(v)
            return structure.spec_of(a[0] if slices else a)
        self._spec = structure.map_leaves(spec, tensors)

    @property
    def graph_tensors(self):
        return self._tensors

    def bind(self, arrays):
        """Sets the fed values (in ``graph_tensors`` order) for the passes started next."""
        from tensorweave.data.sources import TensorDataset, TensorSliceDataset
        values = iter(arrays)
        concrete = structure.map_leaves(lambda v: next(values) if isinstance(v, SymbolicTensor) else v,
                                        self._template)
        self._bound = (TensorSliceDataset if self._slices else TensorDataset)(concrete)

    def _cardinality(self):
        return UNKNOWN if self._bound is None else self._bound._cardinality()

    def _make_iter(self):
        if self._bound is None:
            raise errors.FailedPreconditionError(
                f"This dataset reads graph tensors ({', '.join(t.name for t in self._tensors[:3])}): run its "
                "iterator's initializer with them fed first (sess.run(iterator.initializer, feed_dict=...))")
        return self._bound._make_iter()


def _fed_sources(dataset):
    """The :class:`FedSource` datasets ``dataset`` reads, each once, in a fixed order."""
    seen, out, stack = set(), [], [dataset]
    while stack:
        d = stack.pop()
        if id(d) in seen:
            continue
        seen.add(id(d))
        if isinstance(d, FedSource):
            out.append(d)
        stack.extend(reversed(getattr(d, "_inputs", ())))
    return out


def _starter(dataset, start, name):
    """An op that binds the fed values of ``dataset``'s sources, then calls ``start()``."""
    from tensorweave.ops.control_flow_ops import group
    from tensorweave.ops.script_ops import numpy_function
    sources = _fed_sources(dataset)
    inputs = [t for src in sources for t in src.graph_tensors]

    def run(*arrays):
        k = 0
        for src in sources:
            n = len(src.graph_tensors)
            src.bind(arrays[k:k + n])
            k += n
        return start()
    return group(numpy_function(run, inputs, "int32", name=name), name=name + "_group")


class GraphIterator:
    """An iterator over ``dataset`` read through graph ops (see the module doc)."""

    def __init__(self, dataset, initializable, shared_name=None):
        if executing_eagerly():
            raise RuntimeError("dataset.make_one_shot_iterator() and make_initializable_iterator() build graph "
                               "ops; eagerly, iterate the dataset itself (`for x in dataset` or iter(dataset))")
        if not initializable and _fed_sources(dataset):
            raise ValueError(
                f"Cannot capture a placeholder ({_fed_sources(dataset)[0].graph_tensors[0].name}) by value: a "
                "one-shot iterator has no initializer to feed it. Hint: use make_initializable_iterator() and "
                "run its initializer with a feed_dict")
        self._dataset = dataset
        self._initializable = initializable
        self._pass = None
        self._lock = threading.Lock()
        self._initializer = None
        self._handle = None
        self._spec = dataset.element_spec
        self._flat = structure.flat_specs(self._spec)

    @property
    def element_spec(self):
        return self._spec

    @property
    def output_types(self):
        return nest.map_structure(lambda s: s.dtype, self._spec)

    @property
    def output_shapes(self):
        return nest.map_structure(lambda s: s.shape, self._spec)

    # ---- the kernels' side ---------------------------------------------------------------------
    def _restart(self):
        with self._lock:
            if self._pass is not None:
                self._pass.close()
            self._pass = self._dataset._make_iter()
        return 0

    def _next(self):
        with self._lock:
            if self._pass is None:
                if self._initializable:
                    raise errors.FailedPreconditionError(
                        "GetNext() failed because the iterator has not been initialized. Ensure that you have "
                        "run the initializer operation for this iterator before getting the next element.")
                self._pass = self._dataset._make_iter()
            try:
                flat = self._pass.next()
            except StopIteration:
                raise errors.OutOfRangeError("End of sequence") from None
        return tuple(flat)

    # ---- the graph's side -----------------------------------------------------------------------
    @property
    def initializer(self):
        """The op that starts a new pass (initializable iterators only)."""
        if not self._initializable:
            raise ValueError("Iterator does not have an initializer: use make_initializable_iterator()")
        if self._initializer is None:
            self._initializer = _starter(self._dataset, self._restart, "MakeIterator")
        return self._initializer

    def get_next(self, name=None):
        """The next element as graph tensors in the dataset's structure."""
        from tensorweave.ops.script_ops import numpy_function
        outs = numpy_function(self._next, [], [s.dtype for s in self._flat], name=name or "IteratorGetNext")
        for t, s in zip(outs, self._flat):
            t.set_shape(s.shape)
        return structure.pack(self._spec, list(outs))

    def make_initializer(self, dataset, name=None):
        """An op that starts a pass over ``dataset`` (same structure) with this iterator."""
        theirs = structure.flat_specs(dataset.element_spec)
        try:
            nest.assert_same_structure(dataset.element_spec, self._spec)
            same = all(a.dtype is b.dtype and b.shape.is_compatible_with(a.shape) for a, b in zip(theirs, self._flat))
        except (ValueError, TypeError):
            same = False
        if not same:
            raise TypeError(f"make_initializer: the dataset's element_spec {dataset.element_spec} does not match "
                            f"the iterator's {self._spec}")

        def restart():
            self._dataset = dataset
            return self._restart()
        return _starter(dataset, restart, name or "MakeIterator")

    def string_handle(self, name=None):
        """A string tensor naming this iterator, for ``Iterator.from_string_handle`` (feedable iterators)."""
        from tensorweave.ops.array_ops import constant
        if self._handle is None:
            self._handle = f"tensorweave-iterator-{next(_handle_ids)}"
            _HANDLES[self._handle] = self
        return constant(self._handle.encode(), name=name or "IteratorToStringHandle")   # (TF gives bytes)

    @staticmethod
    def from_string_handle(string_handle, output_types, output_shapes=None, output_classes=None):
        """An iterator whose ``get_next`` reads the iterator named by the fed ``string_handle``."""
        return _HandleIterator(string_handle, GraphIterator._spec_of(output_types, output_shapes))

    @staticmethod
    def from_structure(output_types, output_shapes=None, shared_name=None, output_classes=None):
        """A reinitializable iterator with no dataset yet: use ``make_initializer(dataset)``."""
        spec = GraphIterator._spec_of(output_types, output_shapes)
        it = GraphIterator.__new__(GraphIterator)
        it._dataset, it._initializable, it._pass, it._handle = None, True, None, None
        it._lock, it._initializer, it._spec = threading.Lock(), None, spec
        it._flat = structure.flat_specs(spec)
        return it

    @staticmethod
    def _spec_of(output_types, output_shapes):
        from tensorweave.core import dtypes as _dt
        from tensorweave.core.shape import TensorShape
        if output_shapes is None:
            output_shapes = nest.map_structure(lambda _: None, output_types)
        return nest.map_structure(lambda d, s: TensorSpec(TensorShape(s), _dt.as_dtype(d)), output_types,
                                  output_shapes)


class _HandleIterator(GraphIterator):
    """``Iterator.from_string_handle``: ``get_next`` reads whichever iterator the handle names."""

    def __init__(self, handle, spec):
        from tensorweave.core.convert import convert_to_tensor
        self._handle_tensor = convert_to_tensor(handle)
        self._spec, self._flat = spec, structure.flat_specs(spec)
        self._initializable, self._handle = False, None

    @property
    def initializer(self):
        raise ValueError("An iterator made by from_string_handle has no initializer: initialize the iterators "
                         "whose handles are fed to it")

    def make_initializer(self, dataset, name=None):
        raise ValueError("An iterator made by from_string_handle cannot be initialized with a dataset")

    def get_next(self, name=None):
        from tensorweave.ops.script_ops import numpy_function
        flat = self._flat

        def next_of(handle):
            key = handle.item() if hasattr(handle, "item") else handle
            key = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
            it = _HANDLES.get(key)
            if it is None:
                raise errors.InvalidArgumentError(f"{key!r:.80} is not the string_handle of a live iterator")
            if len(it._flat) != len(flat) or not all(
                    a.dtype is b.dtype and b.shape.is_compatible_with(a.shape) for a, b in zip(it._flat, flat)):
                raise errors.InvalidArgumentError(
                    f"The iterator named by the handle yields {it._spec}, but this one was made for {self._spec}")
            return it._next()
        outs = numpy_function(next_of, [self._handle_tensor], [s.dtype for s in flat],
                              name=name or "IteratorGetNext")
        for t, s in zip(outs, flat):
            t.set_shape(s.shape)
        return structure.pack(self._spec, list(outs))


def make_one_shot_iterator(dataset):
    """``tf.compat.v1.data.make_one_shot_iterator``."""
    return GraphIterator(dataset, initializable=False)


def make_initializable_iterator(dataset, shared_name=None):
    """``tf.compat.v1.data.make_initializable_iterator``."""
    return GraphIterator(dataset, initializable=True, shared_name=shared_name)
