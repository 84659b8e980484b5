"""Dataset transformations (``map``, ``batch``, ``shuffle`` ...), one class per transformation,
each with the internal iterator that runs it (see ``iterators`` for the protocol and for
where iterator state lives).
"""
import collections
import concurrent.futures as _futures
import os
import queue
import secrets
import threading
import weakref

import numpy as np

from tensorweave.core import errors, nest
from tensorweave.core.context import eager_mode
from tensorweave.core.convert import to_numpy
from tensorweave.core.shape import TensorShape, as_shape, fmt
from tensorweave.core.tensor import Tensor
from tensorweave.core.tensor_spec import TensorSpec
from tensorweave.data import structure
from tensorweave.data.dataset import (AUTOTUNE, INFINITE, UNKNOWN, Dataset, _int_arg, _peeking, apply_fn,
                                      tensors_of)
from tensorweave.data.iterators import IndexIter, ListIter, _Iter, concat_chunks


def _known(n):
    return n >= 0


# ---- element_spec of user functions -------------------------------------------------------------
def _first_element(ds):
    """One element of a fresh pass over ``ds`` (None when it is empty). The pass is marked as a
    peek so that it does not count as an epoch of a reshuffling ``shuffle``."""
    prev = getattr(_peeking, "on", False)
    _peeking.on = True
    try:
        it = ds._make_iter()
        try:
            return it.next()
        except StopIteration:
            return None
        finally:
            it.close()
    finally:
        _peeking.on = prev


def _traced_spec(fn, in_spec):
    """The spec of ``fn``'s result, found by tracing it on placeholders (as tf.data traces)."""
    from tensorweave.core.convert import convert_to_tensor
    from tensorweave.core.graph import FuncGraph
    from tensorweave.ops.array_ops import placeholder
    g = FuncGraph("tw_data_function")
    with eager_mode(), g.as_default():
        args = nest.map_structure(lambda s: placeholder(s.dtype, s.shape), in_spec)
        out = structure.lists_to_tuples(fn(*args) if type(args) is tuple else fn(args))

        def spec(o):
            if o is None:
                raise TypeError("a dataset function returned None")
            t = o if isinstance(o, Tensor) else convert_to_tensor(o)
            return TensorSpec(t.shape, t.dtype)
        return structure.map_leaves(spec, out)


def _spec_from_first_call(fn, ds, what):
    first = _first_element(ds)
    if first is None:
        raise errors.InvalidArgumentError(
            f"{what}: cannot determine element_spec: the function could not be traced and the input is empty")
    out = apply_fn(fn, tensors_of(ds.element_spec, first))
    spec, _ = structure.normalize(structure.lists_to_tuples(out))
    return structure.rank_only(spec)


# ---- map ------------------------------------------------------------------------------------------
def _parallelism(num_parallel_calls):
    if num_parallel_calls is None:
        return None
    n = _int_arg(num_parallel_calls, "num_parallel_calls")
    if n == AUTOTUNE:
        return os.cpu_count() or 1
    if n < 1:
        raise errors.InvalidArgumentError(
            f"num_parallel_calls must be a positive int or tw.data.AUTOTUNE, got {n}")
    return n


class MapDataset(Dataset):
    def __init__(self, input, fn, num_parallel_calls, deterministic):
        super().__init__([input])
        if not callable(fn):
            raise TypeError(f"map: map_func must be callable, got {fn!r}")
        self._input, self._fn = input, fn
        self._workers = _parallelism(num_parallel_calls)
        self._deterministic = deterministic is not False

    def _cardinality(self):
        return self._input._cardinality()

    def _compute_spec(self):
        try:
            return _traced_spec(self._fn, self._input.element_spec)
        except Exception:  # noqa: BLE001 - not traceable (uses .numpy(), Python control flow ...)
            return _spec_from_first_call(self._fn, self._input, "map")

    def _make_iter(self):
        fn, spec = self._fn, self._input.element_spec

        def call(flat):
            return structure.flatten_output(apply_fn(fn, tensors_of(spec, flat)))[0]
        inner = self._input._make_iter()
        if self._workers is None or self._workers == 1:
            return _MapIter(inner, call)
        return _ParallelMapIter(inner, call, self._workers, self._deterministic)


class _MapIter(_Iter):
    _state_fields = ()            # all state is upstream

    def __init__(self, inner, call):
        self._in, self._call = inner, call

    def next(self):
        return self._call(self._in.next())


class _ParallelMapIter(_Iter):
    # Futures in flight cannot be saved; a checkpoint would drain `_pending` first (or
    # rewind the input by len(_pending) elements).
    _state_fields = ("_pending",)

    def __init__(self, inner, call, workers, deterministic):
        self._in, self._call, self._deterministic = inner, call, deterministic
        self._pool = _futures.ThreadPoolExecutor(workers, thread_name_prefix="tw-data-map")
        # The finalizer holds the pool, not the iterator, so an abandoned iterator still frees its threads.
        self._finalizer = weakref.finalize(self, self._pool.shutdown, wait=False, cancel_futures=True)
        self._pending = collections.deque()
        self._window = 2 * workers       # calls in flight: enough to keep every worker busy
        self._input_done = False

    def _fill(self):
        while not self._input_done and len(self._pending) < self._window:
            try:
                element = self._in.next()
            except StopIteration:
                self._input_done = True
                break
            self._pending.append(self._pool.submit(self._call, element))

    def next(self):
        self._fill()
        if not self._pending:
            self.close()
            raise StopIteration
        if self._deterministic:
            fut = self._pending.popleft()
        else:
            done, _ = _futures.wait(self._pending, return_when=_futures.FIRST_COMPLETED)
            fut = next(f for f in self._pending if f in done)
            self._pending.remove(fut)
        return fut.result()

    def close(self):
        self._finalizer()
        self._in.close()


# ---- filter -------------------------------------------------------------------------------------
class FilterDataset(Dataset):
    def __init__(self, input, predicate):
        super().__init__([input])
        if not callable(predicate):
            raise TypeError(f"filter: predicate must be callable, got {predicate!r}")
        self._input, self._pred = input, predicate

    def _compute_spec(self):
        return self._input.element_spec

    def _cardinality(self):
        return 0 if self._input._cardinality() == 0 else UNKNOWN

    def _make_iter(self):
        pred, spec = self._pred, self._input.element_spec

        def keep(flat):
            out = apply_fn(pred, tensors_of(spec, flat))
            a = structure.as_array(out)
            if a.shape != () or a.dtype != np.bool_:
                raise errors.InvalidArgumentError(
                    "`predicate` return type must be convertible to a scalar boolean tensor. Was "
                    f"TensorSpec(shape={fmt(a.shape)}, dtype={structure.dtype_of(a).name}).")
            return bool(a)
        return _FilterIter(self._input._make_iter(), keep)


class _FilterIter(_Iter):
    _state_fields = ()

    def __init__(self, inner, keep):
        self._in, self._keep = inner, keep

    def next(self):
        while True:
            e = self._in.next()
            if self._keep(e):
                return e


# ---- batch, padded_batch, unbatch -----------------------------------------------------------------
def _check_batch_size(b):
    if b <= 0:
        raise errors.InvalidArgumentError(f"batch_size must be greater than zero, got {b}.")


def _batched_cardinality(n, b, drop):
    if not _known(n):
        return n
    return n // b if drop else -(-n // b)


def _batched_spec(spec, b, drop):
    lead = TensorShape([b if drop else None])
    return nest.map_structure(lambda s: TensorSpec(lead.concatenate(s.shape), s.dtype), spec)


class BatchDataset(Dataset):
    def __init__(self, input, batch_size, drop_remainder):
        super().__init__([input])
        _check_batch_size(batch_size)
        self._input, self._b, self._drop = input, batch_size, drop_remainder

    def _compute_spec(self):
        return _batched_spec(self._input.element_spec, self._b, self._drop)

    def _cardinality(self):
        return _batched_cardinality(self._input._cardinality(), self._b, self._drop)

    def _make_iter(self):
        return _BatchIter(self._input._make_iter(), self._b, self._drop)


class _BatchIter(_Iter):
    _state_fields = ("_done",)

    def __init__(self, inner, b, drop):
        self._in, self._b, self._drop = inner, b, drop
        self._done = False

    def next(self):
        if self._done:
            raise StopIteration
        chunks, have = [], 0
        while have < self._b:
            try:
                chunk = self._in.next_many(self._b - have)
            except StopIteration:
                break
            chunks.append(chunk)
            have += len(chunk[0]) if chunk else 1
        if have == 0 or (self._drop and have < self._b):
            self._done = True
            self._in.close()
            raise StopIteration
        return concat_chunks(chunks)


def _default_padding(dtype):
    return np.asarray("", dtype=object) if dtype.np_dtype == np.dtype(object) else np.zeros((), dtype.np_dtype)


class PaddedBatchDataset(Dataset):
    def __init__(self, input, batch_size, padded_shapes, padding_values, drop_remainder):
        super().__init__([input])
        _check_batch_size(batch_size)
        self._input, self._b, self._drop = input, batch_size, drop_remainder
        self._padded_shapes, self._padding_values = padded_shapes, padding_values
        self._plan = None

    def _prepare(self):
        """Per component: the padded shape (None dims: longest in the batch) and the pad value."""
        if self._plan is not None:
            return self._plan
        spec = self._input.element_spec
        specs = structure.flat_specs(spec)
        if self._padded_shapes is None:
            shapes = [TensorShape(None) for _ in specs]
        else:
            raw = nest.flatten_up_to(spec, self._padded_shapes) if structure.is_structure(spec) \
                else [self._padded_shapes]
            shapes = []
            for i, (s, p) in enumerate(zip(specs, raw)):
                p = as_shape(p.numpy().tolist() if hasattr(p, "numpy") else p)
                if s.shape.rank is not None and p.rank != s.shape.rank:
                    raise errors.InvalidArgumentError(
                        f"padded_batch: the padded shape {fmt(p)} is not compatible with the shape "
                        f"{fmt(s.shape)} of input component {i} (different ranks).")
                if s.shape.rank is not None:
                    for d, (want, have) in enumerate(zip(p.as_list(), s.shape.as_list())):
                        if want is not None and have is not None and have > want:
                            raise errors.InvalidArgumentError(
                                f"padded_batch: the padded shape {fmt(p)} is smaller than the shape "
                                f"{fmt(s.shape)} of input component {i} in dimension {d}.")
                shapes.append(p)
        pv = self._padding_values
        if pv is None:
            values = [_default_padding(s.dtype) for s in specs]
        else:
            if structure.is_structure(spec) and not structure.is_structure(pv):
                raw = [pv] * len(specs)          # one value pads every component (TF's rule)
            else:
                raw = nest.flatten_up_to(spec, pv) if structure.is_structure(spec) else [pv]
            values = []
            for i, (s, v) in enumerate(zip(specs, raw)):
                if isinstance(v, Tensor):
                    a = structure.as_array(v)
                    if a.dtype != s.dtype.np_dtype:
                        raise errors.InvalidArgumentError(
                            f"padded_batch: padding value for component {i} has dtype "
                            f"{structure.dtype_of(a).name}, but the component is {s.dtype.name}.")
                else:
                    a = np.asarray(to_numpy(v, s.dtype))
                if a.shape != ():
                    raise errors.InvalidArgumentError(
                        f"padded_batch: padding values must be scalars, got shape {fmt(a.shape)} for component {i}.")
                values.append(a)
        self._plan = (shapes, values)
        return self._plan

    def _compute_spec(self):
        shapes, _ = self._prepare()
        lead = TensorShape([self._b if self._drop else None])
        specs = [TensorSpec(lead.concatenate(s.shape if p.rank is None else p), s.dtype)
                 for s, p in zip(structure.flat_specs(self._input.element_spec), shapes)]
        return structure.pack(self._input.element_spec, specs)

    def _cardinality(self):
        return _batched_cardinality(self._input._cardinality(), self._b, self._drop)

    def _make_iter(self):
        shapes, values = self._prepare()
        return _PaddedBatchIter(self._input._make_iter(), self._b, self._drop, shapes, values)


class _PaddedBatchIter(_Iter):
    _state_fields = ("_done",)

    def __init__(self, inner, b, drop, shapes, values):
        self._in, self._b, self._drop = inner, b, drop
        self._shapes, self._values = shapes, values
        self._done = False

    def next(self):
        if self._done:
            raise StopIteration
        elems = []
        try:
            while len(elems) < self._b:
                elems.append(self._in.next())
        except StopIteration:
            if not elems or self._drop:
                self._done = True
                raise
        return tuple(self._pad(c, [e[c] for e in elems]) for c in range(len(elems[0])))

    def _pad(self, c, parts):
        rank = parts[0].ndim
        want = self._shapes[c]
        for i, p in enumerate(parts):
            if p.ndim != rank or (want.rank is not None and want.rank != p.ndim):
                raise errors.InvalidArgumentError(
                    f"padded_batch: element {i} of component {c} has shape {fmt(p.shape)}, whose rank differs "
                    f"from {fmt(parts[0].shape) if p.ndim != rank else fmt(want)}.")
        dims = [max(p.shape[d] for p in parts) for d in range(rank)]
        if want.rank is not None:
            for d, w in enumerate(want.as_list()):
                if w is not None:
                    if dims[d] > w:
                        i = next(i for i, p in enumerate(parts) if p.shape[d] > w)
                        raise errors.InvalidArgumentError(
                            "Attempted to pad to a smaller size than the input element: element "
                            f"{i} of component {c} has shape {fmt(parts[i].shape)}, the padded shape is "
                            f"{fmt(want)}.")
                    dims[d] = w
        out = np.full([len(parts)] + dims, self._values[c], dtype=parts[0].dtype)
        for i, p in enumerate(parts):
            out[(i,) + tuple(slice(0, n) for n in p.shape)] = p
        return out


class UnbatchDataset(Dataset):
    def __init__(self, input):
        super().__init__([input])
        self._input = input

    def _compute_spec(self):
        specs = structure.flat_specs(self._input.element_spec)
        for i, s in enumerate(specs):
            if s.shape.rank == 0:
                raise errors.InvalidArgumentError(
                    f"unbatch: component {i} is a scalar; unbatching needs rank >= 1 components.")
        return nest.map_structure(lambda s: TensorSpec(s.shape[1:], s.dtype), self._input.element_spec)

    def _cardinality(self):
        n = self._input._cardinality()
        if n == UNKNOWN:
            return UNKNOWN
        leads = {s.shape[0] for s in structure.flat_specs(self._input.element_spec) if s.shape.rank}
        if len(leads) != 1 or None in leads:
            return UNKNOWN
        d = leads.pop()
        if d == 0:
            return 0
        return INFINITE if n == INFINITE else n * d

    def _make_iter(self):
        self.element_spec   # noqa: B018 - validates the ranks before the first element
        return _UnbatchIter(self._input._make_iter())


class _UnbatchIter(_Iter):
    bulk = True
    _state_fields = ("_cur", "_pos")     # the batch being split and the position in it

    def __init__(self, inner):
        self._in = inner
        self._cur, self._pos, self._n = None, 0, 0

    def _ensure(self):
        while self._cur is None or self._pos >= self._n:
            cur = self._in.next()
            leads = {a.shape[0] if a.ndim else None for a in cur}
            if len(leads) != 1 or None in leads:
                raise errors.InvalidArgumentError(
                    "unbatch: the components of an element must share their first dimension, got shapes "
                    + ", ".join(fmt(a.shape) for a in cur))
            self._cur, self._pos, self._n = cur, 0, leads.pop()

    def next(self):
        self._ensure()
        p = self._pos
        self._pos = p + 1
        return tuple(a[p, ...] for a in self._cur)

    def next_many(self, n):
        self._ensure()
        p = self._pos
        e = min(self._n, p + n)
        self._pos = e
        return tuple(a[p:e] for a in self._cur)


# ---- shuffle ----------------------------------------------------------------------------------------
_SHUFFLE_TAG = 0x5B0FF1E      # first word of a shuffle's seed key: its streams differ from random ops'
_CHUNK = 256                  # uniforms drawn at a time for buffer picks
_INDEX_SHUFFLE_MAX = 1 << 24  # above this many elements a shuffle keeps a buffer instead of an index order


def reservoir_order(n, size, rng):
    """The order in which a shuffle buffer of ``size`` emits elements ``0..n-1``, computed with
    array operations; it matches ``_ShuffleIter`` draw for draw (tests check both agree).

    The buffer fills with ``size`` elements; while input remains, each output is the element
    in slot ``j = floor(u * size)`` (``u`` uniform) and the next input takes that slot; when
    the input ends, the buffer comes out in a random permutation. So output ``t < n - size`` is
    whatever last entered slot ``j_t``: element ``size + t'`` for the latest earlier step ``t'``
    with ``j_t' == j_t``, else the element ``j_t`` placed there by the fill.
    """
    if n <= size:
        return rng.permutation(n)
    m = n - size
    u = np.concatenate([rng.random(_CHUNK) for _ in range(-(-m // _CHUNK))])[:m]
    j = (u * size).astype(np.int64)
    steps = np.argsort(j, kind="stable")      # steps grouped by slot, in time order within a slot
    sj = j[steps]
    same = np.zeros(m, bool)
    same[1:] = sj[1:] == sj[:-1]              # the slot was picked before: it holds that step's input
    prev = np.zeros(m, np.int64)
    prev[1:] = steps[:-1]
    head = np.empty(m, np.int64)
    head[steps] = np.where(same, size + prev, sj)
    last = np.ones(m, bool)
    last[:-1] = sj[1:] != sj[:-1]
    final = np.arange(size, dtype=np.int64)
    final[sj[last]] = size + steps[last]
    return np.concatenate([head, final[rng.permutation(size)]])


class ShuffleDataset(Dataset):
    def __init__(self, input, buffer_size, seed, reshuffle):
        super().__init__([input])
        if buffer_size < 1:
            raise errors.InvalidArgumentError(f"shuffle: buffer_size must be greater than zero, got {buffer_size}.")
        from tensorweave.ops.random_ops import get_seed
        s1, s2 = get_seed(seed)
        if s1 is None:   # no seeds at all: fixed now, so a non-reshuffling dataset repeats its order
            s1, s2 = secrets.randbits(63), secrets.randbits(63)
        self._input, self._size, self._reshuffle = input, buffer_size, reshuffle
        self._seeds = (s1 % 2**64, s2 % 2**64)
        self._epoch = 0          # passes made so far (the seed of the next one)
        self._lock = threading.Lock()

    def _compute_spec(self):
        return self._input.element_spec

    def _cardinality(self):
        return self._input._cardinality()

    def _rng(self):
        epoch = 0
        if self._reshuffle:
            with self._lock:
                epoch = self._epoch
                if not getattr(_peeking, "on", False):
                    self._epoch += 1
        key = [_SHUFFLE_TAG, self._seeds[0], self._seeds[1], epoch]
        return np.random.Generator(np.random.Philox(np.random.SeedSequence(key)))

    def _make_iter(self):
        rng = self._rng()
        inp = self._input
        if inp._indexable() and inp._length() <= _INDEX_SHUFFLE_MAX:
            return IndexIter(inp, reservoir_order(inp._length(), self._size, rng))
        return _ShuffleIter(inp._make_iter(), self._size, rng)


class _ShuffleIter(_Iter):
    # With rng.bit_generator.state these fields are the whole position of the shuffle.
    _state_fields = ("_buf", "_filled", "_exhausted", "_u", "_ui", "_tail", "_tpos")

    def __init__(self, inner, size, rng):
        self._in, self._size, self._rng = inner, size, rng
        self._buf, self._filled, self._exhausted = [], False, False
        self._u, self._ui = None, _CHUNK
        self._tail, self._tpos = None, 0

    def _pick(self, n):
        if self._ui >= _CHUNK:
            self._u, self._ui = self._rng.random(_CHUNK), 0
        u = self._u[self._ui]
        self._ui += 1
        return int(u * n)

    def next(self):
        if self._tail is None:
            if not self._filled:
                try:
                    while len(self._buf) < self._size:
                        self._buf.append(self._in.next())
                except StopIteration:
                    self._exhausted = True
                self._filled = True
            if not self._exhausted:
                try:
                    incoming = self._in.next()
                except StopIteration:
                    self._exhausted = True
                else:
                    j = self._pick(len(self._buf))
                    out = self._buf[j]
                    self._buf[j] = incoming
                    return out
            perm = self._rng.permutation(len(self._buf))
            self._tail, self._buf = [self._buf[i] for i in perm], []
        if self._tpos >= len(self._tail):
            raise StopIteration
        out = self._tail[self._tpos]
        self._tail[self._tpos] = None      # let the element go once handed out
        self._tpos += 1
        return out


# ---- repeat, take, skip, shard ------------------------------------------------------------------
class RepeatDataset(Dataset):
    def __init__(self, input, count):
        super().__init__([input])
        self._input, self._count = input, count

    def _compute_spec(self):
        return self._input.element_spec

    def _cardinality(self):
        n, c = self._input._cardinality(), self._count
        if c == 0 or n == 0:
            return 0
        if c < 0:
            return INFINITE
        if not _known(n):
            return n
        return n * c

    def _make_iter(self):
        return _RepeatIter(self._input, self._count)


class _RepeatIter(_Iter):
    _state_fields = ("_epoch", "_produced")     # plus the current pass's iterator, `_in`

    def __init__(self, ds, count):
        self._ds, self._count = ds, count
        self._epoch, self._produced = 0, 0
        self._done = count == 0
        self._in = None if self._done else ds._make_iter()

    @property
    def bulk(self):
        return self._in is not None and self._in.bulk

    def _end_of_pass(self):
        self._in.close()
        # A pass without elements ends the repetition (else repeat() of an empty dataset never returns).
        if self._produced == 0 or (self._count > 0 and self._epoch + 1 >= self._count):
            self._done, self._in = True, None
            return
        self._epoch += 1
        self._produced = 0
        self._in = self._ds._make_iter()

    def next(self):
        while not self._done:
            try:
                e = self._in.next()
            except StopIteration:
                self._end_of_pass()
                continue
            self._produced += 1
            return e
        raise StopIteration

    def next_many(self, n):
        while not self._done:
            try:
                c = self._in.next_many(n)
            except StopIteration:
                self._end_of_pass()
                continue
            self._produced += len(c[0]) if c else 1
            return c
        raise StopIteration

    def close(self):
        if self._in is not None:
            self._in.close()


class _IndexView(Dataset):
    """A transformation that is random access when its input is: it maps indices to input indices."""

    def _compute_spec(self):
        return self._input.element_spec

    def _indexable(self):
        return self._input._indexable()

    def _length(self):
        return self._cardinality()

    def _make_iter(self):
        if self._indexable():
            return IndexIter(self)
        return self._generic_iter()


class TakeDataset(_IndexView):
    def __init__(self, input, count):
        super().__init__([input])
        self._input, self._count = input, count

    def _cardinality(self):
        n, k = self._input._cardinality(), self._count
        if k < 0:
            return n
        if n == INFINITE:
            return k
        return n if n == UNKNOWN else min(n, k)

    def _element(self, i):
        return self._input._element(i)

    def _take(self, idx):
        return self._input._take(idx)

    def _generic_iter(self):
        return _TakeIter(self._input._make_iter(), self._count)


class _TakeIter(_Iter):
    _state_fields = ("_left",)

    def __init__(self, inner, count):
        self._in, self._left = inner, count

    @property
    def bulk(self):
        return self._in.bulk

    def next(self):
        if self._left == 0:
            raise StopIteration
        e = self._in.next()
        self._used(1)
        return e

    def next_many(self, n):
        if self._left == 0:
            raise StopIteration
        c = self._in.next_many(n if self._left < 0 else min(n, self._left))
        self._used(len(c[0]) if c else 1)
        return c

    def _used(self, k):
        if self._left > 0:
            self._left -= k
            if self._left == 0:
                self._in.close()     # stops upstream prefetch threads early


class SkipDataset(_IndexView):
    def __init__(self, input, count):
        super().__init__([input])
        self._input, self._count = input, count

    def _cardinality(self):
        n, k = self._input._cardinality(), self._count
        if not _known(n):
            return n
        return 0 if k < 0 else max(0, n - k)

    def _element(self, i):
        return self._input._element(i + self._count)

    def _take(self, idx):
        k = self._count
        if isinstance(idx, slice):
            return self._input._take(slice(idx.start + k, idx.stop + k, idx.step))
        return self._input._take(idx + k)

    def _generic_iter(self):
        return _SkipIter(self._input._make_iter(), self._count)


class _SkipIter(_Iter):
    _state_fields = ("_to_skip",)

    def __init__(self, inner, count):
        self._in, self._to_skip = inner, count

    @property
    def bulk(self):
        return self._in.bulk

    def _skip(self):
        try:
            while self._to_skip != 0:
                if self._in.bulk:
                    c = self._in.next_many(self._to_skip if self._to_skip > 0 else 1 << 16)
                    k = len(c[0]) if c else 1
                else:
                    self._in.next()
                    k = 1
                if self._to_skip > 0:
                    self._to_skip -= k
        except StopIteration:
            self._to_skip = 0
            self._in.close()
            self._in = _Exhausted()

    def next(self):
        if self._to_skip:
            self._skip()
        return self._in.next()

    def next_many(self, n):
        if self._to_skip:
            self._skip()
        return self._in.next_many(n)


class _Exhausted(_Iter):
    bulk = True

    def next(self):
        raise StopIteration

    def next_many(self, n):
        raise StopIteration


class ShardDataset(_IndexView):
    def __init__(self, input, num_shards, index):
        super().__init__([input])
        if num_shards < 1:
            raise errors.InvalidArgumentError(f"shard: num_shards must be greater than zero, got {num_shards}.")
        if not 0 <= index < num_shards:
            raise errors.InvalidArgumentError(
                f"shard: index must be between 0 and {num_shards - 1} (num_shards - 1), got {index}.")
        self._input, self._num, self._index = input, num_shards, index

    def _cardinality(self):
        n = self._input._cardinality()
        if not _known(n):
            return n
        return n // self._num + (1 if self._index < n % self._num else 0)

    def _element(self, i):
        return self._input._element(i * self._num + self._index)

    def _take(self, idx):
        num, k = self._num, self._index
        if isinstance(idx, slice):
            if idx.stop <= idx.start:
                return self._input._take(slice(0, 0, 1))
            return self._input._take(slice(idx.start * num + k, (idx.stop - 1) * num + k + 1, idx.step * num))
        return self._input._take(idx * num + k)

    def _generic_iter(self):
        return _ShardIter(self._input._make_iter(), self._num, self._index)


class _ShardIter(_Iter):
    _state_fields = ("_pos",)     # input elements consumed so far

    def __init__(self, inner, num, index):
        self._in, self._num, self._index = inner, num, index
        self._pos = 0

    def next(self):
        while True:
            e = self._in.next()
            p = self._pos
            self._pos = p + 1
            if p % self._num == self._index:
                return e


# ---- zip, concatenate ---------------------------------------------------------------------------
class ZipDataset(Dataset):
    def __init__(self, datasets):
        datasets = structure.lists_to_tuples(datasets)
        leaves = nest.flatten(datasets)
        if not leaves:
            raise errors.InvalidArgumentError("zip: needs at least one dataset")
        for d in leaves:
            if not isinstance(d, Dataset):
                raise TypeError(f"zip: expected a (nested) structure of datasets, got {type(d).__name__}: {d!r}")
        super().__init__(leaves)
        self._structure, self._leaves = datasets, leaves

    def _compute_spec(self):
        return nest.pack_sequence_as(self._structure, [d.element_spec for d in self._leaves])

    def _cardinality(self):
        result = INFINITE
        for d in self._leaves:
            n = d._cardinality()
            if n == UNKNOWN:
                return UNKNOWN
            if n != INFINITE:
                result = n if result == INFINITE else min(result, n)
        return result

    def _indexable(self):
        return all(d._indexable() for d in self._leaves)

    def _length(self):
        return min(d._length() for d in self._leaves)

    def _element(self, i):
        return tuple(a for d in self._leaves for a in d._element(i))

    def _take(self, idx):
        return tuple(a for d in self._leaves for a in d._take(idx))

    def _make_iter(self):
        if self._indexable():
            return IndexIter(self)
        return _ZipIter([d._make_iter() for d in self._leaves])


class _ZipIter(_Iter):
    _state_fields = ("_its",)

    def __init__(self, its):
        self._its = its
        self._done = False

    def next(self):
        if self._done:
            raise StopIteration
        out = ()
        try:
            for it in self._its:
                out += it.next()
        except StopIteration:
            self.close()
            raise
        return out

    def close(self):
        self._done = True
        for it in self._its:
            it.close()


class ConcatenateDataset(Dataset):
    def __init__(self, first, second):
        if not isinstance(second, Dataset):
            raise TypeError(f"concatenate: expected a Dataset, got {type(second).__name__}")
        super().__init__([first, second])
        self._first, self._second = first, second
        self._spec = structure.relax_spec(first.element_spec, second.element_spec, "concatenate")

    def _cardinality(self):
        a, b = self._first._cardinality(), self._second._cardinality()
        if INFINITE in (a, b):
            return INFINITE
        if UNKNOWN in (a, b):
            return UNKNOWN
        return a + b

    def _make_iter(self):
        return _ConcatIter(self._first, self._second)


class _ConcatIter(_Iter):
    _state_fields = ("_which",)     # 0: in the first dataset, 1: in the second, 2: done

    def __init__(self, first, second):
        self._second = second
        self._which = 0
        self._in = first._make_iter()

    @property
    def bulk(self):
        return self._which < 2 and self._in.bulk

    def _advance(self):
        self._in.close()
        self._which += 1
        self._in = self._second._make_iter() if self._which == 1 else _Exhausted()

    def next(self):
        while True:
            try:
                return self._in.next()
            except StopIteration:
                if self._which >= 2:
                    raise
                self._advance()

    def next_many(self, n):
        while True:
            try:
                return self._in.next_many(n)
            except StopIteration:
                if self._which >= 2:
                    raise
                self._advance()


# ---- cache ----------------------------------------------------------------------------------------
class CacheDataset(Dataset):
    def __init__(self, input, filename):
        super().__init__([input])
        self._input, self._filename = input, filename
        self._elements = None      # list of flat elements once a pass completed ...
        self._stacked = None       # ... or, when every component has one shape, stacked arrays
        self._lock = threading.Lock()

    def _compute_spec(self):
        return self._input.element_spec

    def _cardinality(self):
        if self._stacked is not None:
            return len(self._stacked[0]) if self._stacked else self._input._cardinality()
        if self._elements is not None:
            return len(self._elements)
        return self._input._cardinality()

    def _indexable(self):
        return bool(self._stacked)

    def _length(self):
        return len(self._stacked[0])

    def _element(self, i):
        return tuple(a[i, ...] for a in self._stacked)

    def _take(self, idx):
        return tuple(a[idx] for a in self._stacked)

    @property
    def _path(self):
        return self._filename + ".npz"

    def _make_iter(self):
        if self._stacked is None and self._elements is None and self._filename and os.path.exists(self._path):
            self._store(_read_cache_file(self._path), write=False)
        if self._stacked:
            return IndexIter(self)
        if self._elements is not None:
            return ListIter(self._elements)
        return _CacheFillIter(self, self._input._make_iter())

    def _store(self, elements, write=True):
        with self._lock:
            if self._stacked is not None or self._elements is not None:
                return
            stacked = None
            if elements and elements[0]:
                try:
                    stacked = tuple(np.stack([e[c] for e in elements]) for c in range(len(elements[0])))
                except ValueError:      # shapes differ between elements: keep the list
                    stacked = None
            if stacked is not None:
                self._stacked = stacked
            else:
                self._elements = elements
            if write and self._filename:
                _write_cache_file(self._path, structure.flat_specs(self.element_spec), elements)


class _CacheFillIter(_Iter):
    _state_fields = ("_seen",)      # elements read so far in the filling pass

    def __init__(self, ds, inner):
        self._ds, self._in = ds, inner
        self._seen = []

    def next(self):
        try:
            e = self._in.next()
        except StopIteration:
            if self._seen is not None:
                self._ds._store(self._seen)
                self._seen = None
            raise
        self._seen.append(e)
        return e


def _write_cache_file(path, specs, elements):
    """Elements as raw bytes per component, with their ranks and dims: no pickles, any dtype."""
    arrays = {"count": np.asarray(len(elements), np.int64)}
    for c, s in enumerate(specs):
        parts = [e[c] for e in elements]
        arrays[f"dtype{c}"] = np.asarray(s.dtype.name)
        arrays[f"rank{c}"] = np.asarray([p.ndim for p in parts], np.int64)
        arrays[f"dims{c}"] = np.asarray([d for p in parts for d in p.shape], np.int64)
        if s.dtype.np_dtype == np.dtype(object):
            texts = [str(x).encode("utf-8") for p in parts for x in p.reshape(-1)]
            arrays[f"len{c}"] = np.asarray([len(t) for t in texts], np.int64)
            arrays[f"data{c}"] = np.frombuffer(b"".join(texts), np.uint8)
        else:
            arrays[f"data{c}"] = np.concatenate(
                [np.ascontiguousarray(p).reshape(-1).view(np.uint8) for p in parts]) if parts \
                else np.zeros(0, np.uint8)
    import io
    from tensorweave.saving.tensor_file import write_bytes_atomic
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    # (a unique temporary name, fsync, rename, directory fsync: concurrent writers and kills
    # never leave a torn cache file, and no fixed ".tmp" name that two writers would share)
    write_bytes_atomic(path, buf.getvalue())


def _read_cache_file(path):
    """The elements of a cache file; a file that is not one (truncated, tampered, not a
    regular file) raises ``ValueError`` naming it."""
    import zipfile
    from tensorweave.saving.validation import open_regular
    with open_regular(path, path, ValueError) as f:
        try:
            return _decode_cache(f)
        except (KeyError, IndexError, TypeError, OverflowError, MemoryError, EOFError, OSError,
                zipfile.BadZipFile) as e:
            raise ValueError(f"{path}: not a valid cache file ({type(e).__name__}: {e})") from None


def _decode_cache(f):
    from tensorweave.core import dtypes as _dt
    with np.load(f, allow_pickle=False) as z:
        n = int(z["count"])
        columns = []
        c = 0
        while f"dtype{c}" in z:
            dtype = _dt.as_dtype(str(z[f"dtype{c}"]))
            ranks, dims, data = z[f"rank{c}"], z[f"dims{c}"], z[f"data{c}"]
            lens = z[f"len{c}"] if f"len{c}" in z else None
            col, dpos, bpos, spos = [], 0, 0, 0
            for i in range(n):
                shape = tuple(int(d) for d in dims[dpos:dpos + ranks[i]])
                dpos += ranks[i]
                size = int(np.prod(shape)) if shape else 1
                if lens is not None:
                    items = []
                    for k in range(size):
                        ln = int(lens[spos + k])
                        items.append(data[bpos:bpos + ln].tobytes().decode("utf-8"))
                        bpos += ln
                    spos += size
                    arr = np.empty(size, dtype=object)
                    arr[:] = items
                    col.append(arr.reshape(shape))
                else:
                    nbytes = size * dtype.np_dtype.itemsize
                    col.append(data[bpos:bpos + nbytes].view(dtype.np_dtype).reshape(shape).copy())
                    bpos += nbytes
            columns.append(col)
            c += 1
    return [tuple(col[i] for col in columns) for i in range(n)]


# ---- prefetch -----------------------------------------------------------------------------------
_AUTOTUNE_PREFETCH = 2


class PrefetchDataset(Dataset):
    def __init__(self, input, buffer_size):
        super().__init__([input])
        if buffer_size < AUTOTUNE:
            raise errors.InvalidArgumentError(
                f"prefetch: buffer_size must be >= 0 or tw.data.AUTOTUNE, got {buffer_size}.")
        self._input = input
        self._size = _AUTOTUNE_PREFETCH if buffer_size == AUTOTUNE else buffer_size

    def _compute_spec(self):
        return self._input.element_spec

    def _cardinality(self):
        return self._input._cardinality()

    def _make_iter(self):
        inner = self._input._make_iter()
        if self._size == 0:
            return inner
        return _PrefetchIter(inner, self._size)


def _prefetch_worker(inner, q, stop):
    """Runs on the background thread: fills ``q`` until the input ends, fails or ``stop`` is set.
    It holds the input iterator, never the consumer's, so dropping the consumer stops it."""
    try:
        while not stop.is_set():
            try:
                item = ("element", inner.next())
            except StopIteration:
                item = ("end", None)
            except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
                item = ("error", e)
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.05)
                    break
                except queue.Full:
                    continue
            if item[0] != "element":
                return
    finally:
        inner.close()


class _PrefetchIter(_Iter):
    # Elements already in the queue are produced but not yet consumed: a checkpoint would save
    # them (or rewind the input by the queue's length).
    _state_fields = ("_q",)

    def __init__(self, inner, size):
        self._q = queue.Queue(size)
        self._stop = threading.Event()
        self._done = False
        threading.Thread(target=_prefetch_worker, args=(inner, self._q, self._stop), daemon=True,
                         name="tw-data-prefetch").start()
        self._finalizer = weakref.finalize(self, self._stop.set)

    def next(self):
        if self._done:
            raise StopIteration
        kind, value = self._q.get()
        if kind == "element":
            return value
        self._done = True
        self._stop.set()
        if kind == "end":
            raise StopIteration
        raise value

    def close(self):
        self._done = True
        self._stop.set()


# ---- flat_map, interleave --------------------------------------------------------------------------
def _dataset_fn(fn, spec, what):
    def make(flat):
        ds = apply_fn(fn, tensors_of(spec, flat))
        if not isinstance(ds, Dataset):
            raise TypeError(f"{what}: map_func must return a Dataset, got {type(ds).__name__}")
        return ds
    return make


def _nested_spec(ds, fn, what):
    first = _first_element(ds)
    if first is None:
        raise errors.InvalidArgumentError(f"{what}: cannot determine element_spec of an empty input")
    return structure.rank_only(_dataset_fn(fn, ds.element_spec, what)(first).element_spec)


class FlatMapDataset(Dataset):
    def __init__(self, input, fn):
        super().__init__([input])
        if not callable(fn):
            raise TypeError(f"flat_map: map_func must be callable, got {fn!r}")
        self._input, self._fn = input, fn

    def _compute_spec(self):
        return _nested_spec(self._input, self._fn, "flat_map")

    def _cardinality(self):
        return 0 if self._input._cardinality() == 0 else UNKNOWN

    def _make_iter(self):
        return _FlatMapIter(self._input._make_iter(), _dataset_fn(self._fn, self._input.element_spec, "flat_map"))


class _FlatMapIter(_Iter):
    _state_fields = ("_cur",)      # the iterator of the current element's dataset

    def __init__(self, inner, make):
        self._in, self._make = inner, make
        self._cur = None

    def next(self):
        while True:
            if self._cur is None:
                self._cur = self._make(self._in.next())._make_iter()
            try:
                return self._cur.next()
            except StopIteration:
                self._cur.close()
                self._cur = None

    def close(self):
        if self._cur is not None:
            self._cur.close()
        self._in.close()


class InterleaveDataset(Dataset):
    def __init__(self, input, fn, cycle_length, block_length):
        super().__init__([input])
        if not callable(fn):
            raise TypeError(f"interleave: map_func must be callable, got {fn!r}")
        if cycle_length < 1 or block_length < 1:
            raise errors.InvalidArgumentError(
                f"interleave: cycle_length and block_length must be positive, got {cycle_length}, {block_length}")
        self._input, self._fn, self._cycle, self._block = input, fn, cycle_length, block_length

    def _compute_spec(self):
        return _nested_spec(self._input, self._fn, "interleave")

    def _cardinality(self):
        return 0 if self._input._cardinality() == 0 else UNKNOWN

    def _make_iter(self):
        make = _dataset_fn(self._fn, self._input.element_spec, "interleave")
        return _InterleaveIter(self._input._make_iter(), make, self._cycle, self._block)


class _InterleaveIter(_Iter):
    """TF's order: a cycle of ``cycle_length`` slots, each holding one element's dataset;
    ``block_length`` elements come from a slot before moving to the next; an exhausted
    slot is refilled from the input when the cycle comes back to it."""

    _state_fields = ("_slots", "_slot", "_in_block", "_input_done", "_open")

    def __init__(self, inner, make, cycle, block):
        self._in, self._make, self._block = inner, make, block
        self._slots = [None] * cycle
        self._slot, self._in_block, self._input_done, self._open = 0, 0, False, 0

    def _next_slot(self):
        self._in_block = 0
        self._slot = (self._slot + 1) % len(self._slots)

    def next(self):
        while not self._input_done or self._open > 0:
            cur = self._slots[self._slot]
            if cur is not None:
                try:
                    e = cur.next()
                except StopIteration:
                    cur.close()
                    self._slots[self._slot] = None
                    self._open -= 1
                    self._next_slot()
                    continue
                self._in_block += 1
                if self._in_block == self._block:
                    self._next_slot()
                return e
            if not self._input_done:
                try:
                    x = self._in.next()
                except StopIteration:
                    self._input_done = True
                    continue
                self._slots[self._slot] = self._make(x)._make_iter()
                self._open += 1
            else:
                self._next_slot()
        raise StopIteration

    def close(self):
        for s in self._slots:
            if s is not None:
                s.close()
        self._in.close()
