"""Auto-sharding: one pipeline split over ``num_workers`` workers (TF's ``AutoShardPolicy``).

:func:`auto_shard_dataset` is TF's ``input_ops.auto_shard_dataset`` (elements; ``policy``
defaults to the pipeline's ``options().experimental_distribute.auto_shard_policy``):

- ``FILE``: the pipeline is rebuilt so worker ``i`` reads files ``i::n`` — the file list of a
  ``TextLineDataset``/``TFRecordDataset``/``FixedLengthRecordDataset``, or the dataset of file
  names (``list_files``, or string slices) that an ``interleave``/``flat_map`` opens files
  from (sharded where it enters that ``interleave``, after its shuffle, as TF does). A pipeline
  with another kind of source is ``NotFoundError`` ("unshardable source"); fewer files than
  workers is ``InvalidArgumentError``.
- ``DATA``: every worker runs the whole pipeline and keeps elements ``i::n``.
- ``AUTO`` (the default): ``FILE`` when every source reads files, else ``DATA`` (so too few
  files is an error here too, as in TF: set ``DATA`` then).
- ``OFF``: every worker sees everything. ``HINT``: ``shard(SHARD_HINT, SHARD_HINT)`` in the
  pipeline becomes ``shard(n, i)`` (none: as ``OFF``).

:func:`worker_batches` is what ``MultiWorkerMirroredStrategy`` feeds worker ``i`` (one replica
per worker) from a pipeline of *global* batches, TF's rebatch + auto-shard: with ``DATA``
each global batch is split into ``n`` balanced pieces and worker ``i`` keeps piece ``i``
(``None`` below: the caller slices); otherwise the worker's own pipeline (file-sharded,
hinted, or whole) is cut into pieces of ``batch_sizes_for_worker`` rows, cycling, across its
batch boundaries, so each step's pieces over all workers add up to one global batch.

>>> import tensorweave as tw
>>> import tensorweave.data
>>> from tensorweave.data import sharding
>>> [b.tolist() for b in tw.data.Dataset.range(10).apply(
...     lambda d: sharding.auto_shard_dataset(d, 3, 1)).as_numpy_iterator()]
[1, 4, 7]
>>> sharding.batch_sizes_for_worker(7, 2, 1)
[3, 4]
"""
import copy
import threading

import numpy as np

from tensorweave.core import errors, nest
from tensorweave.data.dataset import SHARD_HINT, Dataset  # noqa: F401 - SHARD_HINT: tw.data.experimental's
from tensorweave.data.options import AutoShardPolicy, options_of

P = AutoShardPolicy


def policy_of(dataset):
    """The pipeline's auto-shard policy (``AUTO`` when unset)."""
    p = options_of(dataset).experimental_distribute.auto_shard_policy
    return P.AUTO if p is None else P(p)


def batch_sizes_for_worker(global_batch_size, num_workers, worker_index):
    """TF's ``batch_sizes_for_worker`` with one replica per worker: ``n`` sizes adding up to
    the global batch, ``ceil`` ones first for worker 0, rotated by the worker's index."""
    floor, ceil_count = divmod(int(global_batch_size), num_workers)
    worker_0 = [floor + 1] * ceil_count + [floor] * (num_workers - ceil_count)
    return worker_0[worker_index:] + worker_0[:worker_index]


# ---- finding sources ----------------------------------------------------------------------------
def _readers():
    from tensorweave.data.sources import TextLineDataset
    from tensorweave.io.tfrecord import FixedLengthRecordDataset, TFRecordDataset
    return (TextLineDataset, TFRecordDataset, FixedLengthRecordDataset)


def _opens_files(node):
    """An ``interleave``/``flat_map`` whose input is a dataset of file names."""
    from tensorweave.data.transforms import FlatMapDataset, InterleaveDataset
    return isinstance(node, (FlatMapDataset, InterleaveDataset)) and _names_source(node._input)


def _names_source(ds):
    """Whether ``ds`` is file names: ``list_files``, or string slices through one-input steps."""
    from tensorweave.data.sources import TensorSliceDataset
    while True:
        if getattr(ds, "_file_names", False):
            return True
        if isinstance(ds, TensorSliceDataset):
            return len(ds._arrays) == 1 and ds._arrays[0].dtype.kind in "USO"
        if len(ds._inputs) != 1:
            return False
        ds = ds._inputs[0]


def file_sources(dataset):
    """``(file_sources, other_sources)``: the nodes FILE sharding splits (readers, and
    interleaves that open files) and the sources it cannot."""
    readers = _readers()
    files, others, seen = [], [], set()

    def visit(ds):
        if id(ds) in seen:
            return
        seen.add(id(ds))
        if isinstance(ds, readers) or _opens_files(ds):
            files.append(ds)
        elif not ds._inputs:
            others.append(ds)
        else:
            for d in ds._inputs:
                visit(d)
    visit(dataset)
    return files, others


def _num_files(node):
    if hasattr(node, "_files"):
        return len(node._files)
    n = node._input._cardinality()
    return None if n < 0 else int(n)


def _check_files(files, num_workers):
    for node in files:
        n = _num_files(node)
        if n is not None and n < num_workers:
            raise errors.InvalidArgumentError(
                f"Could not apply FILE based sharding: the dataset only has {n} file(s), which is not enough "
                f"for {num_workers} workers. Hint: set options.experimental_distribute.auto_shard_policy = "
                "tw.data.experimental.AutoShardPolicy.DATA, or split the input into more files")


def resolve_policy(dataset, num_workers, policy=None):
    """The policy that applies: ``FILE``, ``DATA``, ``OFF`` or ``HINT`` (``AUTO`` decided);
    raises TF's errors for a FILE sharding that cannot be done."""
    policy = policy_of(dataset) if policy is None else P(policy)
    if policy in (P.OFF, P.HINT, P.DATA):
        return policy
    files, others = file_sources(dataset)
    if policy == P.FILE and (others or not files):
        bad = others[0] if others else dataset
        raise errors.NotFoundError(
            f"Found an unshardable source dataset: {type(bad).__name__} (FILE sharding needs every source to read "
            "files: TextLineDataset, TFRecordDataset, FixedLengthRecordDataset, or an interleave/flat_map over "
            "list_files). Hint: set options.experimental_distribute.auto_shard_policy = "
            "tw.data.experimental.AutoShardPolicy.DATA")
    if not files or others:
        return P.DATA
    _check_files(files, num_workers)
    return P.FILE


class HintShardDataset(Dataset):
    """``shard(SHARD_HINT, SHARD_HINT)``: a placeholder that ``HINT`` auto-sharding replaces
    with ``shard(num_workers, worker_index)``; iterating it otherwise is an error."""
    _hint = True

    def __init__(self, input):
        super().__init__([input])
        self._input = input

    def _compute_spec(self):
        return self._input.element_spec

    def _make_iter(self):
        raise errors.InvalidArgumentError(
            "shard(SHARD_HINT, SHARD_HINT) is a placeholder for a distributed pipeline with "
            "AutoShardPolicy.HINT (it becomes shard(num_workers, worker_index)); it cannot be iterated on its own")


# ---- rebuilding a pipeline ---------------------------------------------------------------------
def _swap(value, mapping):
    if isinstance(value, list):
        return [_swap(v, mapping) for v in value]
    if isinstance(value, tuple):
        items = [_swap(v, mapping) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        return type(value)((k, _swap(v, mapping)) for k, v in value.items())
    return mapping.get(id(value), value)


def _clone(node, mapping):
    """A copy of ``node`` reading the datasets of ``mapping`` (id(old) -> new) instead; state
    that belongs to one pass (a cache's elements, locks) starts fresh."""
    out = copy.copy(node)
    for k, v in vars(node).items():
        if isinstance(v, (list, tuple, dict)) or id(v) in mapping:
            setattr(out, k, _swap(v, mapping))
        if type(v) is type(threading.Lock()):
            setattr(out, k, threading.Lock())
    for k in ("_elements", "_stacked"):          # CacheDataset: the copy caches its own elements
        if k in vars(node):
            setattr(out, k, None)
    return out


def _rewrite(dataset, visit):
    """The pipeline with ``visit(node)`` (given the node over rebuilt inputs) for every node."""
    memo = {}

    def walk(ds):
        if id(ds) in memo:
            return memo[id(ds)]
        inputs = [walk(d) for d in ds._inputs]
        node = ds
        if any(a is not b for a, b in zip(inputs, ds._inputs)):
            node = _clone(ds, {id(a): b for a, b in zip(ds._inputs, inputs)})
        memo[id(ds)] = out = visit(node)
        return out
    return walk(dataset)


def _shard_files(dataset, num_workers, index):
    readers = _readers()

    def visit(node):
        if isinstance(node, readers):
            out = copy.copy(node)
            out._files = list(node._files[index::num_workers])
            return out
        if _opens_files(node):
            return _clone(node, {id(node._input): node._input.shard(num_workers, index)})
        return node
    return _rewrite(dataset, visit)


def _fill_hints(dataset, num_workers, index):
    from tensorweave.data.transforms import ShardDataset

    def visit(node):
        if getattr(node, "_hint", False):
            return ShardDataset(node._input, num_workers, index)
        return node
    return _rewrite(dataset, visit)


def auto_shard_dataset(dataset, num_workers, index, policy=None):
    """Worker ``index``'s share of ``dataset``'s elements under ``policy`` (see the module)."""
    if not 0 <= index < num_workers:
        raise errors.InvalidArgumentError(f"auto_shard_dataset: index must be in [0, {num_workers}), got {index}")
    policy = resolve_policy(dataset, num_workers, policy)
    return _shard_as(dataset, num_workers, index, policy, elements=True)


def _shard_as(dataset, num_workers, index, policy, elements):
    if policy == P.FILE:
        return _shard_files(dataset, num_workers, index)
    if policy == P.HINT:
        return _fill_hints(dataset, num_workers, index)
    if policy == P.DATA and elements:
        return dataset.shard(num_workers, index)
    return dataset


# ---- rebatching for one replica per worker ------------------------------------------------------
_PASS = ("OptionsDataset", "PrefetchDataset", "MapDataset", "CacheDataset", "RepeatDataset", "TakeDataset",
         "SkipDataset", "ShuffleDataset", "FilterDataset", "ShardDataset")


def global_batch_size(dataset):
    """The batch size of the pipeline's last ``batch``/``padded_batch`` (through element-wise
    steps), or None (TF's ``compute_batch_size``)."""
    ds = dataset
    while True:
        name = type(ds).__name__
        if name in ("BatchDataset", "PaddedBatchDataset"):
            return int(ds._b)
        if name not in _PASS or len(ds._inputs) != 1:
            return None
        ds = ds._inputs[0]


def worker_pipeline(dataset, num_workers, index):
    """``(policy, worker_dataset, sizes)`` for worker ``index`` of a pipeline of global
    batches: with ``DATA`` sizes is None (split each global batch, keep piece ``index``); else
    cut ``worker_dataset``'s rows into ``sizes`` (cycling); ``sizes == ()`` when the global
    batch size is unknown (each batch is split into ``num_workers`` balanced pieces, all kept)."""
    policy = resolve_policy(dataset, num_workers)
    if policy == P.DATA:
        return policy, dataset, None
    g = global_batch_size(dataset)
    sizes = () if g is None else tuple(batch_sizes_for_worker(g, num_workers, index))
    return policy, _shard_as(dataset, num_workers, index, policy, elements=False), sizes


def balanced_bounds(rows, num_workers):
    """``[(lo, hi)]`` per worker: ``rows`` split into ``num_workers`` runs, the first
    ``rows % num_workers`` one longer (TF's legacy rebatch; ``layout.balanced_bounds``)."""
    q, r = divmod(rows, num_workers)
    starts = [i * q + min(i, r) for i in range(num_workers + 1)]
    return list(zip(starts[:-1], starts[1:]))


def _leaves(batch):
    flat = nest.flatten(batch)
    return [None if a is None else np.asarray(a.numpy() if hasattr(a, "numpy") else a) for a in flat]


def _rows(leaves):
    return next((len(a) for a in leaves if a is not None), 0)


def _cut(parts):
    if len(parts) == 1:
        return parts[0]
    return [None if parts[0][j] is None else np.concatenate([p[j] for p in parts]) for j in range(len(parts[0]))]


def rebatch(batches, sizes, num_workers=1):
    """Pieces of the rows of ``batches`` (nested structures whose leaves share a first
    dimension) of sizes cycling through ``sizes``, across batch boundaries (TF's
    ``rebatch(batch_sizes)``); the last piece may be short. ``sizes == ()``: each batch split
    into ``num_workers`` balanced pieces. Yields the structure of the batches, NumPy leaves.

    >>> [p.tolist() for p in rebatch([np.arange(3), np.arange(3, 6)], [4, 1])]
    [[0, 1, 2, 3], [4], [5]]
    """
    it = iter(batches)
    structure = None
    if not sizes:
        for b in it:
            leaves = _leaves(b)
            for lo, hi in balanced_bounds(_rows(leaves), num_workers):
                yield nest.pack_sequence_as(b, [None if a is None else a[lo:hi] for a in leaves])
        return
    cur, off, k = None, 0, 0
    while True:
        need, parts = sizes[k % len(sizes)], []
        while True:
            if cur is None or off >= _rows(cur):
                nxt = next(it, None)
                if nxt is None:
                    cur = None
                    break
                structure, cur, off = nxt, _leaves(nxt), 0
                continue
            take = min(need, _rows(cur) - off)
            parts.append([None if a is None else a[off:off + take] for a in cur])
            off += take
            need -= take
            if need == 0:
                break
        if not parts:
            return
        yield nest.pack_sequence_as(structure, _cut(parts))
        k += 1


def worker_stream(dataset, num_workers, index):
    """What worker ``index`` of ``num_workers`` (one replica each) gets from a pipeline of
    global batches, in order: its balanced slice of each global batch (``DATA``), or the
    pieces of :func:`rebatch` over its own pipeline. NumPy leaves in the element structure.

    >>> import tensorweave as tw
    >>> import tensorweave.data
    >>> [b.tolist() for b in worker_stream(tw.data.Dataset.range(10).batch(4), 2, 1)]
    [[2, 3], [6, 7], [9]]
    """
    return stream_of(worker_pipeline(dataset, num_workers, index), num_workers, index)


def stream_of(pipeline, num_workers, index):
    """:func:`worker_stream` of a :func:`worker_pipeline` result (kept across epochs, so a
    shuffle in a rebuilt pipeline moves on as the original's does)."""
    policy, ds, sizes = pipeline
    batches = ds.as_numpy_iterator()
    if sizes is not None:
        yield from rebatch(batches, sizes, num_workers)
        return
    for b in batches:
        yield slice_rows(b, num_workers, index)


def zip_pieces(streams):
    """Each step's pieces of several streams (:func:`rebatch` outputs) concatenated, rows of
    the first stream first; a stream that ran out drops out, the end is when all have. One
    stream is passed through as it is (what a worker reading only its own pipeline gets).

    >>> [p.tolist() for p in zip_pieces([iter([np.arange(2), np.arange(2, 3)]), iter([np.arange(5, 7)])])]
    [[0, 1, 5, 6], [2]]
    """
    streams = list(streams)
    if len(streams) == 1:
        yield from streams[0]
        return
    while True:
        parts = [p for p in (next(s, None) for s in streams) if p is not None]
        if not parts:
            return
        yield nest.pack_sequence_as(parts[0], _cut([_leaves(p) for p in parts]))


def _shuffles(dataset):
    """The reshuffling ``shuffle`` nodes of a pipeline, in one order for copies of one pipeline."""
    out, seen = [], set()

    def visit(ds):
        if id(ds) in seen:
            return
        seen.add(id(ds))
        if getattr(ds, "_reshuffle", False) and hasattr(ds, "_epoch"):
            out.append(ds)
        for d in ds._inputs:
            visit(d)
    visit(dataset)
    return out


def pass_counters(dataset):
    """How many passes each reshuffling ``shuffle`` of the pipeline has made (the seed of its
    next pass's order)."""
    return [node._epoch for node in _shuffles(dataset)]


def set_pass_counters(dataset, counters):
    """Puts the pipeline's reshuffling ``shuffle`` nodes at the passes ``counters``
    (:func:`pass_counters` of it or of a copy of the same pipeline): its next pass repeats one."""
    for node, c in zip(_shuffles(dataset), counters):
        with node._lock:
            node._epoch = c


def slice_rows(batch, num_workers, index):
    """Worker ``index``'s balanced slice of the rows of ``batch`` (DATA), NumPy leaves."""
    leaves = _leaves(batch)
    lo, hi = balanced_bounds(_rows(leaves), num_workers)[index]
    return nest.pack_sequence_as(batch, [None if a is None else a[lo:hi] for a in leaves])


def empty_like(piece):
    """``piece`` with no rows (what a worker whose input has run out steps with)."""
    leaves = _leaves(piece)
    return nest.pack_sequence_as(piece, [None if a is None else a[:0] for a in leaves])
