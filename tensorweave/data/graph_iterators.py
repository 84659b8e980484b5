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
"""
import threading

from tensorweave.core import errors, nest
from tensorweave.core.context import executing_eagerly
from tensorweave.data import structure


class GraphIterator:
    """An iterator over ``dataset`` read through graph ops (see the module doc)."""

    def __init__(self, dataset, initializable, shared_name=None):
        if executing_eagerly():
            raise RuntimeError("dataset.make_one_shot_iterator() and make_initializable_iterator() build graph "
                               "ops; eagerly, iterate the dataset itself (`for x in dataset` or iter(dataset))")
        self._dataset = dataset
        self._initializable = initializable
        self._pass = None
        self._lock = threading.Lock()
        self._initializer = None
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
            from tensorweave.ops.control_flow_ops import group
            from tensorweave.ops.script_ops import numpy_function
            self._initializer = group(numpy_function(self._restart, [], "int32", name="MakeIterator"),
                                      name="MakeIterator_group")
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
        from tensorweave.ops.control_flow_ops import group
        from tensorweave.ops.script_ops import numpy_function
        if structure.flat_specs(dataset.element_spec) != self._flat:
            raise TypeError(f"make_initializer: the dataset's element_spec {dataset.element_spec} does not match "
                            f"the iterator's {self._spec}")

        def restart():
            self._dataset = dataset
            return self._restart()
        return group(numpy_function(restart, [], "int32", name=name or "MakeIterator"))

    @staticmethod
    def from_structure(output_types, output_shapes=None, shared_name=None, output_classes=None):
        """A reinitializable iterator with no dataset yet: use ``make_initializer(dataset)``."""
        from tensorweave.core import dtypes as _dt
        from tensorweave.core.shape import TensorShape
        from tensorweave.core.tensor_spec import TensorSpec
        if output_shapes is None:
            output_shapes = nest.map_structure(lambda _: None, output_types)
        spec = nest.map_structure(lambda d, s: TensorSpec(TensorShape(s), _dt.as_dtype(d)), output_types,
                                  output_shapes)
        it = GraphIterator.__new__(GraphIterator)
        it._dataset, it._initializable, it._pass = None, True, None
        it._lock, it._initializer, it._spec = threading.Lock(), None, spec
        it._flat = structure.flat_specs(spec)
        return it


def make_one_shot_iterator(dataset):
    """``tf.compat.v1.data.make_one_shot_iterator``."""
    return GraphIterator(dataset, initializable=False)


def make_initializable_iterator(dataset, shared_name=None):
    """``tf.compat.v1.data.make_initializable_iterator``."""
    return GraphIterator(dataset, initializable=True, shared_name=shared_name)
