"""``tw.data.Dataset``: TensorFlow's input-pipeline API over NumPy.

A dataset is a recipe: each ``iter(dataset)`` runs it afresh and yields its elements as eager
``tw.Tensor``s in the dataset's nested structure (tuples, namedtuples and dicts; a list is a
value). Transformations return new datasets and leave their input untouched.

>>> import numpy as np
>>> import tensorweave as tw
>>> import tensorweave.data
>>> x = np.arange(10, dtype=np.float32).reshape(5, 2)
>>> y = np.array([0, 1, 0, 1, 1])
>>> ds = tw.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2, b)).batch(2)
>>> [b.numpy().tolist() for _, b in ds]
[[0, 1], [0, 1], [1]]
>>> ds.element_spec[0]
TensorSpec(shape=(None, 2), dtype=tw.float32, name=None)
>>> int(ds.cardinality())
3

Seeds follow ``tw.random``'s rules: ``shuffle(seed=None)`` after ``tw.random.set_seed(s)``
shuffles the same way every time the program runs.
"""
import os
import threading

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.context import eager_mode
from tensorweave.core.tensor import EagerTensor, Tensor
from tensorweave.data import structure
from tensorweave.data.iterators import Iterator, NumpyIterator

AUTOTUNE = -1
INFINITE = -1
UNKNOWN = -2
INFINITE_CARDINALITY = INFINITE
UNKNOWN_CARDINALITY = UNKNOWN
SHARD_HINT = -1   # shard(SHARD_HINT, SHARD_HINT): a placeholder for AutoShardPolicy.HINT

# Set while a dataset is being iterated only to learn its element_spec, so that the pass
# does not count as an epoch (a reshuffling shuffle would otherwise move on).
_peeking = threading.local()


def _int_arg(value, name):
    if isinstance(value, EagerTensor):
        value = value.numpy()
    if isinstance(value, Tensor):
        raise TypeError(f"{name} must be a Python int or an eager tensor, got a symbolic tensor")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    return int(value)


def apply_fn(fn, element):
    """Calls a user function on one element as tf.data does: a plain tuple is unpacked into
    positional arguments; anything else (a dict, a namedtuple, a tensor) is passed whole.
    The call runs eagerly and unrecorded by gradient tapes, whatever the caller's mode."""
    with eager_mode():
        return fn(*element) if type(element) is tuple else fn(element)


def tensors_of(spec, flat):
    return structure.pack(spec, [structure.to_tensor(a) for a in flat])


class Dataset:
    """A sequence of elements, each a nested structure of tensors (``tf.data.Dataset``).

    Build one with a source (``from_tensor_slices``, ``from_tensors``, ``from_generator``,
    ``range``, ``zip``) and transform it; iterate with ``for``.
    """

    def __init__(self, inputs=()):
        self._inputs = tuple(inputs)
        self._spec = None

    # ---- subclass interface ----------------------------------------------------------------
    def _compute_spec(self):
        raise NotImplementedError

    def _cardinality(self):
        return UNKNOWN

    def _make_iter(self):
        raise NotImplementedError

    def _indexable(self):
        """True when elements can be read by index (``_length``, ``_element``, ``_take``)."""
        return False

    # ---- the public surface ------------------------------------------------------------------
    @property
    def element_spec(self):
        """The structure of an element, with a ``tw.TensorSpec`` (shape, dtype) per component."""
        if self._spec is None:
            self._spec = self._compute_spec()
        return self._spec

    def __iter__(self):
        return Iterator(self)

    def make_one_shot_iterator(self):
        """TF1: an iterator read by graph ops (``tw.data.graph_iterators``)."""
        from tensorweave.data.graph_iterators import make_one_shot_iterator
        return make_one_shot_iterator(self)

    def make_initializable_iterator(self, shared_name=None):
        """TF1: an iterator read by graph ops, restarted by running its ``initializer``."""
        from tensorweave.data.graph_iterators import make_initializable_iterator
        return make_initializable_iterator(self, shared_name)

    @property
    def output_types(self):
        """TF1: the dtypes of an element's components (in its structure)."""
        from tensorweave.core import nest
        return nest.map_structure(lambda s: s.dtype, self.element_spec)

    @property
    def output_shapes(self):
        """TF1: the shapes of an element's components (in its structure)."""
        from tensorweave.core import nest
        return nest.map_structure(lambda s: s.shape, self.element_spec)

    def as_numpy_iterator(self):
        """Iterates the elements as NumPy values.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> list(tw.data.Dataset.from_tensor_slices({"a": [1, 2]}).as_numpy_iterator())
        [{'a': np.int32(1)}, {'a': np.int32(2)}]
        """
        return NumpyIterator(self)

    def cardinality(self):
        """The number of elements as an int64 scalar tensor: ``INFINITE`` (-1) or ``UNKNOWN`` (-2)
        when it cannot be derived without iterating (after ``filter``, ``from_generator`` ...).

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> int(tw.data.Dataset.range(10).batch(3).cardinality())
        4
        >>> int(tw.data.Dataset.range(10).repeat().cardinality()) == tw.data.INFINITE_CARDINALITY
        True
        """
        return EagerTensor(np.asarray(self._cardinality(), np.int64), _dt.int64)

    def __len__(self):
        n = self._cardinality()
        if n == INFINITE:
            raise TypeError("The dataset is infinite.")
        if n == UNKNOWN:
            raise TypeError("The dataset length is unknown.")
        return n

    def __bool__(self):
        return True   # without this, `if ds:` would call __len__ and fail for infinite datasets

    # ---- checkpointing (tw.train.Checkpoint) ---------------------------------------------
    def _shuffles(self):
        """The shuffle datasets of this pipeline, depth first through ``_inputs`` (a fixed order)."""
        out, seen, stack = [], set(), [self]
        while stack:
            ds = stack.pop()
            if id(ds) in seen:
                continue
            seen.add(id(ds))
            if hasattr(ds, "_seeds") and hasattr(ds, "_epoch"):
                out.append(ds)
            stack.extend(reversed(ds._inputs))
        return out

    def _checkpoint_state(self):
        """The pipeline's own state: each shuffle's seeds (drawn from OS entropy when none was set,
        so they must be kept) and the number of passes it has made (the seed of the next one).

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> ds = tw.data.Dataset.range(4).shuffle(4, seed=2)
        >>> first = [int(x) for x in ds]
        >>> state = ds._checkpoint_state()
        >>> second = [int(x) for x in ds]
        >>> ds._restore_checkpoint_state(state)
        >>> [int(x) for x in ds] == second
        True
        """
        return {"shuffles": [{"seeds": list(d._seeds), "epoch": d._epoch} for d in self._shuffles()]}

    def _check_checkpoint_state(self, state):
        shuffles = self._shuffles()
        if not isinstance(state, dict) or set(state) != {"shuffles"} or not isinstance(state["shuffles"], list):
            raise ValueError("dataset state must be an object with a 'shuffles' list")
        if len(state["shuffles"]) != len(shuffles):
            raise ValueError(f"dataset state was saved from a pipeline with {len(state['shuffles'])} shuffle(s); "
                             f"this one has {len(shuffles)}")
        out = []
        for i, s in enumerate(state["shuffles"]):
            ok = isinstance(s, dict) and set(s) == {"seeds", "epoch"} and isinstance(s["seeds"], list) and \
                len(s["seeds"]) == 2 and all(isinstance(w, int) and not isinstance(w, bool) and 0 <= w < 2**64
                                             for w in s["seeds"]) and \
                isinstance(s["epoch"], int) and not isinstance(s["epoch"], bool) and s["epoch"] >= 0
            if not ok:
                raise ValueError(f"dataset state: shuffle {i} must have two unsigned 64-bit seeds and an epoch >= 0")
            out.append((tuple(s["seeds"]), s["epoch"]))
        return out

    def _restore_checked_state(self, checked):
        for ds, (seeds, epoch) in zip(self._shuffles(), checked):
            with ds._lock:
                ds._seeds, ds._epoch = seeds, epoch

    def _restore_checkpoint_state(self, state):
        """Puts back :meth:`_checkpoint_state` (``ValueError`` when malformed or for another pipeline)."""
        self._restore_checked_state(self._check_checkpoint_state(state))

    def __repr__(self):
        try:
            spec = self.element_spec
        except Exception:  # noqa: BLE001 - repr must not fail
            spec = "<unknown>"
        return f"<{type(self).__name__} element_spec={spec}>"

    # ---- sources -----------------------------------------------------------------------------
    @staticmethod
    def from_tensor_slices(tensors, name=None):
        """One element per slice along the first axis of every component.

        Arrays are shared with the caller, not copied (as ``tw.convert_to_tensor`` does).

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> [(int(a), b.numpy().tolist()) for a, b in
        ...  tw.data.Dataset.from_tensor_slices(([1, 2], [[1.0, 2.0], [3.0, 4.0]]))]
        [(1, [1.0, 2.0]), (2, [3.0, 4.0])]
        """
        from tensorweave.data.graph_iterators import FedSource, has_graph_tensors
        from tensorweave.data.sources import TensorSliceDataset
        if has_graph_tensors(tensors):
            return FedSource(tensors, slices=True)    # TF1: values fed to the iterator's initializer
        return TensorSliceDataset(tensors)

    @staticmethod
    def from_tensors(tensors, name=None):
        """A dataset of exactly one element, ``tensors``.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> [t.numpy().tolist() for t in tw.data.Dataset.from_tensors([1, 2])]
        [[1, 2]]
        """
        from tensorweave.data.graph_iterators import FedSource, has_graph_tensors
        from tensorweave.data.sources import TensorDataset
        if has_graph_tensors(tensors):
            return FedSource(tensors, slices=False)
        return TensorDataset(tensors)

    @staticmethod
    def range(*args, output_type=_dt.int64, name=None):
        """``range(stop)``, ``range(start, stop[, step])`` as int64 scalars.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> list(tw.data.Dataset.range(1, 8, 3).as_numpy_iterator())
        [np.int64(1), np.int64(4), np.int64(7)]
        """
        from tensorweave.data.sources import RangeDataset
        if not 1 <= len(args) <= 3:
            raise TypeError(f"range() takes 1 to 3 positional arguments, got {len(args)}")
        args = [_int_arg(a, "range argument") for a in args]
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (args + [1])[:3]
        return RangeDataset(start, stop, step, _dt.as_dtype(output_type))

    @staticmethod
    def from_generator(generator, output_types=None, output_shapes=None, args=None,
                       output_signature=None, name=None):
        """Elements produced by ``generator()`` (a callable returning an iterable), checked
        against ``output_signature`` (a structure of ``tw.TensorSpec``). The legacy
        ``output_types``/``output_shapes`` pair works too. ``args`` are passed to the callable
        as NumPy values.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> def gen():
        ...     yield 1, [1.0]
        ...     yield 2, [2.0, 3.0]
        >>> ds = tw.data.Dataset.from_generator(gen, output_signature=(
        ...     tw.TensorSpec([], tw.int32), tw.TensorSpec([None], tw.float32)))
        >>> [b.numpy().tolist() for _, b in ds]
        [[1.0], [2.0, 3.0]]
        """
        from tensorweave.data.sources import GeneratorDataset
        return GeneratorDataset(generator, output_types, output_shapes, args, output_signature)

    @staticmethod
    def list_files(file_pattern, shuffle=None, seed=None, name=None):
        """The file names matching ``file_pattern`` (a glob or a list of them), sorted, then
        shuffled unless ``shuffle=False`` (TF's default shuffles). FILE auto-sharding splits
        this list over the workers (``tw.data.sharding``).

        >>> import os, tempfile
        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> d = tempfile.mkdtemp()
        >>> for n in ("b.txt", "a.txt"): _ = open(os.path.join(d, n), "w").write("x")
        >>> [os.path.basename(f.numpy()) for f in tw.data.Dataset.list_files(d + "/*.txt", shuffle=False)]
        ['a.txt', 'b.txt']
        """
        import glob
        from tensorweave.data.sources import TensorSliceDataset
        patterns = [str(p) for p in structure.as_array(file_pattern).reshape(-1)]
        names = sorted({f for p in patterns for f in glob.glob(p)})
        if not names:
            raise errors.InvalidArgumentError(f"list_files: no files match the pattern(s) {patterns}")
        ds = TensorSliceDataset(np.array(names))
        ds._file_names = True
        if shuffle is None or shuffle:
            ds = ds.shuffle(len(names), seed=seed)
        return ds

    @staticmethod
    def zip(*datasets, name=None):
        """Elements of several datasets side by side, in the structure they are given in
        (``zip(a, b)`` or ``zip((a, b))`` or ``zip({"x": a, "y": b})``); stops with the shortest.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> ds = tw.data.Dataset.zip(tw.data.Dataset.range(3), tw.data.Dataset.range(10, 12))
        >>> [(int(a), int(b)) for a, b in ds]
        [(0, 10), (1, 11)]
        """
        from tensorweave.data.transforms import ZipDataset
        if len(datasets) == 1 and not isinstance(datasets[0], Dataset):
            datasets = datasets[0]
        return ZipDataset(datasets)

    # ---- transformations ---------------------------------------------------------------------
    def map(self, map_func, num_parallel_calls=None, deterministic=None, name=None):
        """Applies ``map_func`` to every element (a plain tuple is unpacked into arguments).

        ``num_parallel_calls`` (an int, or ``tw.data.AUTOTUNE`` for one per CPU) runs calls on a
        thread pool; results keep the input order unless ``deterministic=False``, which hands
        out whichever finishes first. The function runs eagerly on tensors; to learn
        ``element_spec`` it is also traced once into a graph (Python side effects run once more
        then), and when that fails (say it calls ``.numpy()``) the spec comes from running it
        on the first element, with the dimensions left unknown.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> ds = tw.data.Dataset.range(4).map(lambda x: x * x, num_parallel_calls=tw.data.AUTOTUNE)
        >>> [int(v) for v in ds]
        [0, 1, 4, 9]
        """
        from tensorweave.data.transforms import MapDataset
        return MapDataset(self, map_func, num_parallel_calls, deterministic)

    def filter(self, predicate, name=None):
        """Keeps the elements for which ``predicate`` returns a scalar ``True``.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> [int(v) for v in tw.data.Dataset.range(6).filter(lambda x: x % 2 == 0)]
        [0, 2, 4]
        """
        from tensorweave.data.transforms import FilterDataset
        return FilterDataset(self, predicate)

    def batch(self, batch_size, drop_remainder=False, num_parallel_calls=None, deterministic=None, name=None):
        """Stacks ``batch_size`` consecutive elements; the last batch may be smaller unless
        ``drop_remainder``. The batch dimension of ``element_spec`` is ``None`` unless
        ``drop_remainder=True``.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> [b.numpy().tolist() for b in tw.data.Dataset.range(5).batch(2)]
        [[0, 1], [2, 3], [4]]
        """
        from tensorweave.data.transforms import BatchDataset
        return BatchDataset(self, _int_arg(batch_size, "batch_size"), bool(drop_remainder))

    def padded_batch(self, batch_size, padded_shapes=None, padding_values=None, drop_remainder=False, name=None):
        """Batches elements of different shapes by padding each component to ``padded_shapes``
        (``None``/-1 dimensions: the longest in the batch; ``padded_shapes=None``: every
        dimension to the longest). ``padding_values`` defaults to 0 (``""`` for strings); one
        scalar pads every component.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> ds = tw.data.Dataset.range(1, 4).map(lambda n: tw.fill([n], n))
        >>> [b.numpy().tolist() for b in ds.padded_batch(2, padded_shapes=[None])]
        [[[1, 0], [2, 2]], [[3, 3, 3]]]
        """
        from tensorweave.data.transforms import PaddedBatchDataset
        return PaddedBatchDataset(self, _int_arg(batch_size, "batch_size"), padded_shapes, padding_values,
                                  bool(drop_remainder))

    def unbatch(self, name=None):
        """Splits every element along its first axis (the inverse of ``batch``).

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> [int(v) for v in tw.data.Dataset.range(5).batch(2).unbatch()]
        [0, 1, 2, 3, 4]
        """
        from tensorweave.data.transforms import UnbatchDataset
        return UnbatchDataset(self)

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True, name=None):
        """Shuffles with a buffer of ``buffer_size`` elements, as ``tf.data`` does: the buffer
        is filled, then each output is a random buffer element whose slot takes the next input.
        A buffer at least as large as the dataset gives a uniform permutation.

        ``seed`` is the op seed; with the global seed (``tw.random.set_seed``) it fixes the
        order, as for random ops. ``reshuffle_each_iteration`` gives each pass (each
        ``iter()``, each epoch of ``repeat``) a new order; with ``False`` every pass repeats
        the first one's.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> ds = tw.data.Dataset.range(5).shuffle(5, seed=42)
        >>> sorted(int(v) for v in ds)
        [0, 1, 2, 3, 4]
        """
        from tensorweave.data.transforms import ShuffleDataset
        return ShuffleDataset(self, _int_arg(buffer_size, "buffer_size"), seed, bool(reshuffle_each_iteration))

    def repeat(self, count=None, name=None):
        """Repeats the dataset ``count`` times (``None`` or -1: forever).

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> [int(v) for v in tw.data.Dataset.range(2).repeat(3)]
        [0, 1, 0, 1, 0, 1]
        """
        from tensorweave.data.transforms import RepeatDataset
        return RepeatDataset(self, -1 if count is None else _int_arg(count, "count"))

    def take(self, count, name=None):
        """The first ``count`` elements (-1: all).

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> [int(v) for v in tw.data.Dataset.range(10).take(3)]
        [0, 1, 2]
        """
        from tensorweave.data.transforms import TakeDataset
        return TakeDataset(self, _int_arg(count, "count"))

    def skip(self, count, name=None):
        """All but the first ``count`` elements (-1: skips everything).

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> [int(v) for v in tw.data.Dataset.range(5).skip(3)]
        [3, 4]
        """
        from tensorweave.data.transforms import SkipDataset
        return SkipDataset(self, _int_arg(count, "count"))

    def shard(self, num_shards, index, name=None):
        """Every ``num_shards``-th element starting at ``index`` (one worker's share).

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> [int(v) for v in tw.data.Dataset.range(10).shard(3, 1)]
        [1, 4, 7]
        """
        from tensorweave.data.transforms import ShardDataset
        num_shards, index = _int_arg(num_shards, "num_shards"), _int_arg(index, "index")
        if num_shards == index == SHARD_HINT:
            from tensorweave.data.sharding import HintShardDataset
            return HintShardDataset(self)     # filled in by AutoShardPolicy.HINT (data/sharding.py)
        return ShardDataset(self, num_shards, index)

    def cache(self, filename="", name=None):
        """Keeps the elements of the first complete pass and replays them afterwards.

        With ``filename`` the elements are also written to ``filename + ".npz"`` (NumPy arrays,
        no pickles) after the first complete pass, and later datasets with the same filename
        read that file instead of their input. A pass that stops early caches nothing.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> calls = []
        >>> ds = tw.data.Dataset.range(3).map(lambda x: tw.py_function(
        ...     lambda v: calls.append(1) or v, [x], tw.int64)).cache()
        >>> _ = list(ds); _ = list(ds); len(calls)
        3
        """
        from tensorweave.data.transforms import CacheDataset
        return CacheDataset(self, os.fspath(filename) if filename else "")

    def prefetch(self, buffer_size, name=None):
        """Produces up to ``buffer_size`` elements ahead on a background thread
        (``tw.data.AUTOTUNE``: a small buffer), so input work overlaps the training step.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> [int(v) for v in tw.data.Dataset.range(3).prefetch(tw.data.AUTOTUNE)]
        [0, 1, 2]
        """
        from tensorweave.data.transforms import PrefetchDataset
        return PrefetchDataset(self, _int_arg(buffer_size, "buffer_size"))

    def enumerate(self, start=0, name=None):
        """Pairs each element with its int64 position: ``(i, element)``.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> [(int(i), int(v)) for i, v in tw.data.Dataset.range(5, 7).enumerate()]
        [(0, 5), (1, 6)]
        """
        from tensorweave.data.sources import RangeDataset
        from tensorweave.data.transforms import ZipDataset
        start = _int_arg(start, "start")
        return ZipDataset((RangeDataset(start, np.iinfo(np.int64).max, 1, _dt.int64), self))

    def concatenate(self, dataset, name=None):
        """This dataset's elements followed by ``dataset``'s (same structure and dtypes).

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> [int(v) for v in tw.data.Dataset.range(2).concatenate(tw.data.Dataset.range(5, 6))]
        [0, 1, 5]
        """
        from tensorweave.data.transforms import ConcatenateDataset
        return ConcatenateDataset(self, dataset)

    def flat_map(self, map_func, name=None):
        """Maps each element to a dataset and chains those datasets.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> ds = tw.data.Dataset.range(1, 4).flat_map(lambda n: tw.data.Dataset.range(n))
        >>> [int(v) for v in ds]
        [0, 0, 1, 0, 1, 2]
        """
        from tensorweave.data.transforms import FlatMapDataset
        return FlatMapDataset(self, map_func)

    def interleave(self, map_func, cycle_length=None, block_length=None, num_parallel_calls=None,
                   deterministic=None, name=None):
        """Maps each element to a dataset and interleaves ``cycle_length`` of them at a time,
        ``block_length`` consecutive elements from each in turn (TF's order; runs sequentially).

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> ds = tw.data.Dataset.range(1, 4).interleave(
        ...     lambda n: tw.data.Dataset.from_tensors(n).repeat(2), cycle_length=2)
        >>> [int(v) for v in ds]
        [1, 2, 1, 2, 3, 3]
        """
        from tensorweave.data.transforms import InterleaveDataset
        if cycle_length is None or cycle_length == AUTOTUNE:
            cycle_length = os.cpu_count() or 1
        block_length = 1 if block_length is None else _int_arg(block_length, "block_length")
        return InterleaveDataset(self, map_func, _int_arg(cycle_length, "cycle_length"), block_length)

    def reduce(self, initial_state, reduce_func, name=None):
        """Folds the elements into a state: ``state = reduce_func(state, element)``.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> int(tw.data.Dataset.range(5).reduce(tw.constant(0, tw.int64), lambda s, x: s + x))
        10
        """
        state_spec, flat = structure.normalize(initial_state)
        state = tensors_of(state_spec, flat)
        spec = self.element_spec
        it = self._make_iter()
        try:
            while True:
                try:
                    element = it.next()
                except StopIteration:
                    break
                with eager_mode():
                    new = reduce_func(state, tensors_of(spec, element))
                new_spec, new_flat = structure.normalize(structure.lists_to_tuples(new))
                state = tensors_of(new_spec, new_flat)
        finally:
            it.close()
        return state

    def with_options(self, options, name=None):
        """The same elements with ``options`` (a ``tw.data.Options``) set; options set later
        along the pipeline win (``tw.data.options``).

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> o = tw.data.Options()
        >>> o.deterministic = False
        >>> tw.data.Dataset.range(3).with_options(o).options().deterministic
        False
        """
        from tensorweave.data.options import with_options
        return with_options(self, options)

    def options(self):
        """The ``tw.data.Options`` of this dataset and its inputs, merged."""
        from tensorweave.data.options import options_of
        return options_of(self)

    def apply(self, transformation_func):
        """``transformation_func(self)``, for chaining reusable pipeline pieces.

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> evens = lambda ds: ds.filter(lambda x: x % 2 == 0)
        >>> [int(v) for v in tw.data.Dataset.range(5).apply(evens)]
        [0, 2, 4]
        """
        out = transformation_func(self)
        if not isinstance(out, Dataset):
            raise TypeError(f"apply: the transformation must return a Dataset, got {type(out).__name__}")
        return out

    def get_single_element(self, name=None):
        """The only element of a one-element dataset (an error for zero or several).

        >>> import tensorweave as tw
        >>> import tensorweave.data
        >>> int(tw.data.Dataset.range(4).batch(4).map(tw.reduce_sum).get_single_element())
        6
        """
        it = Iterator(self)
        try:
            try:
                first = next(it)
            except StopIteration:
                raise errors.InvalidArgumentError("Dataset was empty.") from None
            try:
                next(it)
            except StopIteration:
                return first
            raise errors.InvalidArgumentError("Dataset had more than one element.")
        finally:
            it.close()

