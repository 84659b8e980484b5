"""Internal iterators of the input pipeline, and the public ``Iterator`` that wraps them.

Every dataset makes one internal iterator per pass (``Dataset._make_iter``). Internal
iterators speak the flat form (a tuple of NumPy arrays per element, see ``structure``):

* ``next()`` returns one element or raises ``StopIteration`` (again on every later call);
* ``next_many(n)`` returns between 1 and ``n`` elements stacked along a new first axis.
  The default stacks single elements; iterators marked ``bulk`` answer it with one slice
  or gather over arrays, which is what makes ``from_tensor_slices(...).shuffle(...).batch(...)``
  cost a few NumPy calls per batch instead of one Python step per example;
* ``close()`` stops background threads early (they also stop when the iterator is garbage).

**Where iterator state lives** (``tw.train.Checkpoint`` saves it): each iterator class lists
the plain attributes that define its position in ``_state_fields`` (counters, the current
epoch, the shuffle buffer, the permutation being walked ...); ``_EXTRA_FIELDS`` below adds
the few that the classes keep beside them (a shuffle's generator, an index order). Saving an
iterator saves those fields, recursively through ``_in`` and nested iterators, plus the
datasets' shuffle seeds and epochs (``Dataset._checkpoint_state``); restoring rebuilds the
iterator from its dataset and sets them, after checking that the pipeline has the same shape.

What cannot be captured is refused when saving (``tw.errors.UnimplementedError``), never
saved wrongly: a prefetch queue filled by a background thread, a ``flat_map``/``interleave``
in the middle of an element's dataset. A parallel ``map`` waits for its calls in flight and
saves their results; a Python generator is re-run up to the saved count (replay); a text
file is reopened and read up to the saved line.

>>> import tensorweave as tw
>>> import tensorweave.data
>>> it = iter(tw.data.Dataset.range(6).shuffle(6, seed=1).batch(2))
>>> _ = next(it)
>>> state, arrays = it._checkpoint_state()
>>> rest = [b.numpy().tolist() for b in it]
>>> it2 = iter(tw.data.Dataset.range(6).shuffle(6, seed=1).batch(2))
>>> it2._restore_checkpoint_state(state, arrays)
>>> [b.numpy().tolist() for b in it2] == rest
True
"""
import collections
import concurrent.futures as _futures
import math

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
        from tensorweave.core.context import building_graph
        self._dataset = dataset
        self._impl = dataset._make_iter()
        self._spec = None
        self._flat = None
        self._made_in = building_graph()    # None: made eagerly (see __next__)

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
        from tensorweave.core.context import building_graph
        graph = building_graph()
        if graph is not None and graph.is_function_graph and graph is not self._made_in:
            return self._next_op()
        flat = self._take()
        return structure.pack(self._spec, flat)

    def _next_op(self):
        # ``next(it)`` while a tw.function is traced, on an iterator made outside it (TF's
        # ``train_step(iterator)``): an op that takes an element each time the graph runs (an
        # element taken now would be baked into the graph). An iterator made inside the trace
        # (``for x in dataset`` there) is read now: the loop is unrolled.
        from tensorweave.ops.script_ops import numpy_function

        def take():
            try:
                return tuple(t._value for t in self._take())
            except StopIteration:
                raise errors.OutOfRangeError("End of sequence") from None
        specs = self._specs()
        outs = numpy_function(take, [], [s.dtype for s in specs], name="IteratorGetNext")
        for t, s in zip(outs, specs):
            t.set_shape(s.shape)
        return structure.pack(self._spec, list(outs))

    def _take(self):
        flat = self._impl.next()
        specs = self._flat if self._flat is not None else self._specs()
        if len(flat) != len(specs):
            raise errors.InvalidArgumentError(
                f"{type(self._dataset).__name__}: an element has {len(flat)} components but element_spec "
                f"has {len(specs)} ({self._spec}). Hint: a map function must return the same structure "
                "for every element.")
        out = []
        for i, (a, s) in enumerate(zip(flat, specs)):
            if a.dtype != s.dtype.np_dtype and not (s.dtype.name == "string" and a.dtype.kind in "USO"):
                # (a string tensor may hold a NumPy str/bytes array as well as objects)
                raise errors.InvalidArgumentError(
                    f"{type(self._dataset).__name__}: component {i} of an element is {a.dtype} but "
                    f"element_spec says {s.dtype.name}. Hint: a map function must return the same "
                    "dtypes for every element.")
            out.append(self._convert(a, s))
        return out

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

    # ---- checkpointing (tw.train.Checkpoint) ---------------------------------------------
    def _checkpoint_state(self):
        """``(state, arrays)``: the position as JSON-compatible data referring to ``arrays``
        (a list of NumPy arrays, stored as tensors by the checkpoint)."""
        arrays = []
        state = {"dataset": self._dataset._checkpoint_state(), "iterator": _iter_state(self._impl, arrays)}
        return state, arrays

    def _restore_checkpoint_state(self, state, arrays):
        """Moves this iterator to a saved position (``ValueError`` when ``state`` is malformed
        or was saved from a differently shaped pipeline; the iterator is then unchanged)."""
        self._prepare_checkpoint_restore(state, arrays)()

    def _prepare_checkpoint_restore(self, state, arrays):
        """Checks ``state`` and builds the restored position without touching this iterator;
        returns a function that switches to it (so a checkpoint can check everything first)."""
        if not isinstance(state, dict) or set(state) != {"dataset", "iterator"}:
            raise ValueError("iterator state must be an object with 'dataset' and 'iterator'")
        if not isinstance(arrays, list) or not all(isinstance(a, np.ndarray) for a in arrays):
            raise ValueError("iterator state: arrays must be a list of NumPy arrays")
        ds_state = self._dataset._check_checkpoint_state(state["dataset"])
        # A fresh pass of the pipeline gives the objects (map functions, sources) the saved
        # fields are set on; making it moves the shuffle epochs, so they are put back at once.
        before = self._dataset._check_checkpoint_state(self._dataset._checkpoint_state())
        fresh = self._dataset._make_iter()
        try:
            _restore_iter(fresh, state["iterator"], arrays, "iterator")
        except BaseException:
            fresh.close()
            raise
        finally:
            self._dataset._restore_checked_state(before)

        def commit():
            self._impl.close()
            self._impl = fresh
            self._dataset._restore_checked_state(ds_state)
        return commit


# ---- iterator state codec ------------------------------------------------------------------------
# State beyond ``_state_fields`` that the iterator classes of transforms.py / sources.py keep
# (by class name: this module cannot import them). ``_in`` is added for every iterator that has one.
_EXTRA_FIELDS = {
    "IndexIter": ("_order", "_n"),
    "_ShuffleIter": ("_rng",),
    "_RepeatIter": ("_done", "_in"),
    "_UnbatchIter": ("_n",),
    "_ZipIter": ("_done",),
    "_ConcatIter": ("_in",),
    "_ParallelMapIter": ("_input_done",),
    "_GeneratorIter": ("_done",),
}
# Iterators whose position cannot be captured at all.
_UNSAVEABLE = {
    "_PrefetchIter": "a prefetch() buffer is filled by a background thread, so its position cannot be "
                     "captured. Hint: checkpoint an iterator of the pipeline without prefetch(), or use "
                     "prefetch(0)",
}
_MAX_DEPTH = 64
# A Python generator is restored by running it again up to the saved count (its frame cannot
# be saved). The count comes from the file: beyond the dataset's cardinality (when known) or
# this many elements, restoring refuses instead of replaying for hours. Raise it for a longer
# generator you trust.
MAX_GENERATOR_REPLAY = 10_000_000


def _fields(it):
    name = type(it).__name__
    out = list(it._state_fields) + [f for f in _EXTRA_FIELDS.get(name, ()) if f not in it._state_fields]
    if "_in" not in out and isinstance(getattr(it, "_in", None), _Iter):
        out.append("_in")
    return out


def _iter_state(it, arrays, depth=0):
    name = type(it).__name__
    if depth > _MAX_DEPTH:
        raise errors.UnimplementedError("cannot save a tw.data iterator nested more than 64 levels deep")
    if name in _UNSAVEABLE:
        raise errors.UnimplementedError(f"cannot save the position of a tw.data iterator: {_UNSAVEABLE[name]}")
    if name == "_FlatMapIter" and it._cur is not None or \
            name == "_InterleaveIter" and any(s is not None for s in it._slots):
        what = "flat_map" if name == "_FlatMapIter" else "interleave"
        raise errors.UnimplementedError(
            f"cannot save the position of a tw.data iterator inside {what} while an element's dataset is half "
            "read: the element that made it is gone. Hint: save at the boundary of the nested datasets, or "
            "batch/unbatch instead")
    fields = {}
    for f in _fields(it):
        v = getattr(it, f)
        if name == "_ParallelMapIter" and f == "_pending":
            fields[f] = {"l": [_encode(_future_value(fut), arrays, depth) for fut in v]}
        else:
            fields[f] = _encode(v, arrays, depth)
    return {"class": name, "fields": fields}


def _future_value(fut):
    try:
        return fut.result()
    except Exception as e:  # noqa: BLE001 - reported as the reason the save failed
        raise errors.UnimplementedError(f"cannot save a tw.data iterator: a map() call in flight failed ({e!r})") \
            from e


def _encode(v, arrays, depth):
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, float):
        return {"f": repr(v)}   # JSON numbers would lose nan/inf
    if isinstance(v, np.random.Generator):
        from tensorweave.ops.random_ops import _stream_position
        return {"rng": _stream_position(v)}
    if isinstance(v, (np.ndarray, np.generic)):
        a = np.asarray(v)
        if a.dtype == object:
            return {"s": [str(x) for x in a.reshape(-1)], "shape": list(a.shape)}
        arrays.append(a)
        return {"a": len(arrays) - 1}
    if isinstance(v, tuple):
        return {"t": [_encode(x, arrays, depth) for x in v]}
    if isinstance(v, (list, collections.deque)):
        return {"l": [_encode(x, arrays, depth) for x in v]}
    if isinstance(v, _Iter):
        return {"it": _iter_state(v, arrays, depth + 1)}
    raise errors.UnimplementedError(f"cannot save a tw.data iterator field of type {type(v).__name__}")


def _bad(where, what):
    return ValueError(f"iterator state: {where}: {what}")


def _decode(v, arrays, where, target=None, depth=0):
    """The value of a saved field (``target``: the fresh pass's value, for nested iterators)."""
    if depth > _MAX_DEPTH:
        raise _bad(where, "nested too deeply")
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if not isinstance(v, dict) or len(v) not in (1, 2):
        raise _bad(where, f"unexpected value {v!r:.60}")
    if set(v) == {"f"}:
        try:
            return float(v["f"])
        except (TypeError, ValueError):
            raise _bad(where, f"not a float: {v['f']!r:.60}") from None
    if set(v) == {"rng"}:
        from tensorweave.ops.random_ops import _check_position
        checked = _check_position(v["rng"], where)
        gen = np.random.Generator(np.random.Philox())
        gen.bit_generator.state = checked
        return gen
    if set(v) == {"a"}:
        i = v["a"]
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(arrays):
            raise _bad(where, f"array reference {i!r:.60} is out of range")
        return arrays[i].copy()
    if set(v) == {"s", "shape"}:
        items, shape = v["s"], v["shape"]
        if not isinstance(items, list) or not all(isinstance(x, str) for x in items) or \
                not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                       for d in shape) or math.prod(shape) != len(items):
            raise _bad(where, "malformed string array")
        out = np.empty(len(items), dtype=object)
        out[:] = items
        return out.reshape(shape)
    if set(v) in ({"t"}, {"l"}):
        items = v.get("t", v.get("l"))
        if not isinstance(items, list):
            raise _bad(where, "a tuple or list must hold a JSON list")
        targets = target if isinstance(target, (list, tuple)) and len(target) == len(items) else [None] * len(items)
        out = [_decode(x, arrays, f"{where}[{i}]", t, depth + 1) for i, (x, t) in enumerate(zip(items, targets))]
        return tuple(out) if "t" in v else out
    if set(v) == {"it"}:
        st = v["it"]
        cls = st.get("class") if isinstance(st, dict) else None
        if cls == "_Exhausted" and type(target).__name__ != "_Exhausted":
            target = _exhausted()    # a skip() or concatenate() that ran out of input
        if not isinstance(target, _Iter):
            raise _bad(where, f"a saved {cls!r} iterator has no counterpart in this pipeline")
        _restore_iter(target, st, arrays, where, depth + 1)
        return target
    raise _bad(where, f"unexpected value {v!r:.60}")


def _exhausted():
    from tensorweave.data.transforms import _Exhausted
    return _Exhausted()


def _restore_iter(it, state, arrays, where, depth=0):
    if not isinstance(state, dict) or set(state) != {"class", "fields"} or not isinstance(state["fields"], dict):
        raise _bad(where, "must be an object with class and fields")
    name = type(it).__name__
    if state["class"] != name:
        raise ValueError(f"iterator state: {where} was saved from a {state['class']!r:.60} iterator, but this pipeline "
                         f"has a {name!r} there. Hint: restore into an iterator of the same pipeline (the same "
                         "transformations, and cache() filled or not in both)")
    if name == "_ConcatIter" and state["fields"].get("_which") in (1, 2) and it._which == 0:
        it._in.close()
        it._in = it._second._make_iter() if state["fields"]["_which"] == 1 else _exhausted()
    fields = _fields(it)
    saved = state["fields"]
    if set(saved) != set(fields):
        raise _bad(where, f"fields {sorted(saved)} do not match {name}'s {sorted(fields)}")
    values = {}
    for f in fields:
        at = f"{where}.{f}"
        if name == "_ParallelMapIter" and f == "_pending":
            items = _decode(saved[f], arrays, at, None, depth)
            if not isinstance(items, list):
                raise _bad(at, "must be a list")
            pending = collections.deque()
            for x in items:
                fut = _futures.Future()
                fut.set_result(x)
                pending.append(fut)
            values[f] = pending
            continue
        values[f] = _decode(saved[f], arrays, at, getattr(it, f), depth)
    _check_types(it, name, values, where)
    for f, v in values.items():
        setattr(it, f, v)
    if name == "_GeneratorIter":
        _replay_generator(it)
    elif name == "_TextLineIter":
        _reopen_text(it)


_NULLABLE = {("_RepeatIter", "_in"), ("_FlatMapIter", "_cur")}   # iterator fields that may be None


def _check_types(it, name, values, where):
    # Guards for the values the iterators index or loop with, so that a tampered state fails here
    # with a ValueError instead of later inside next().
    for f, v in values.items():
        old = getattr(it, f)
        if isinstance(old, _Iter) and not isinstance(v, _Iter) and not (v is None and (name, f) in _NULLABLE):
            raise _bad(f"{where}.{f}", "must be an iterator")
        if isinstance(old, list) and old and all(isinstance(x, _Iter) for x in old) and \
                (not isinstance(v, list) or len(v) != len(old) or not all(isinstance(x, _Iter) for x in v)):
            raise _bad(f"{where}.{f}", f"must be a list of {len(old)} iterators")
        if isinstance(old, bool) and not isinstance(v, bool):
            raise _bad(f"{where}.{f}", f"must be a bool, got {v!r:.60}")
        if isinstance(old, int) and not isinstance(old, bool) and (not isinstance(v, int) or isinstance(v, bool)):
            raise _bad(f"{where}.{f}", f"must be an int, got {v!r:.60}")
    if name == "IndexIter":
        order = values["_order"]
        if order is not None:
            if not isinstance(order, np.ndarray) or order.ndim != 1 or order.dtype.kind not in "iu":
                raise _bad(f"{where}._order", "must be a 1-D integer array")
            n = it._ds._length()
            if order.size and (order.min() < 0 or order.max() >= n):
                raise _bad(f"{where}._order", f"indices must lie in [0, {n})")
        n = values["_n"]
        if n != (it._ds._length() if order is None else len(order)) or not 0 <= values["_pos"] <= n:
            raise _bad(where, "position does not fit the dataset's length")
    if name == "_ShuffleIter":
        if not isinstance(values["_rng"], np.random.Generator):
            raise _bad(f"{where}._rng", "must be a stream position")
        for f in ("_buf", "_tail"):
            v = values[f]
            if f == "_tail" and v is None:
                continue
            if not isinstance(v, list) or not all(e is None or isinstance(e, tuple) for e in v):
                raise _bad(f"{where}.{f}", "must be a list of elements")
        u = values["_u"]
        if u is not None and (not isinstance(u, np.ndarray) or u.ndim != 1 or u.dtype != np.float64):
            raise _bad(f"{where}._u", "must be a 1-D float64 array")
        if not 0 <= values["_ui"] <= (len(u) if u is not None else values["_ui"]) or \
                (values["_tail"] is not None and not 0 <= values["_tpos"] <= len(values["_tail"])):
            raise _bad(where, "positions out of range")
    if name in ("_UnbatchIter",) and values["_cur"] is not None:
        cur = values["_cur"]
        if not isinstance(cur, tuple) or not all(isinstance(a, np.ndarray) and a.ndim >= 1 for a in cur) or \
                any(len(a) != values["_n"] for a in cur) or not 0 <= values["_pos"] <= values["_n"]:
            raise _bad(where, "the batch being split does not match its position")
    if name in ("ListIter",) and not 0 <= values["_pos"] <= len(it._elements):
        raise _bad(where, "position out of range")
    if name == "_ZipIter" and (not isinstance(values["_its"], list) or len(values["_its"]) != len(it._its)):
        raise _bad(where, "number of zipped iterators differs")
    if name == "_CacheFillIter" and values["_seen"] is not None and not (
            isinstance(values["_seen"], list) and all(isinstance(e, tuple) for e in values["_seen"])):
        raise _bad(f"{where}._seen", "must be a list of elements")
    if name == "_InterleaveIter" and (not isinstance(values["_slots"], list) or
                                      len(values["_slots"]) != len(it._slots) or
                                      any(x is not None for x in values["_slots"]) or
                                      not 0 <= values["_slot"] < len(it._slots)):
        raise _bad(where, "interleave slots do not match")
    if name == "_RepeatIter" and values["_in"] is None and not values["_done"]:
        raise _bad(where, "a repeat that is not done needs its current pass")
    if name == "_ConcatIter" and values["_which"] not in (0, 1, 2):
        raise _bad(where, "_which must be 0, 1 or 2")
    if name == "_GeneratorIter" and values["_count"] < 0 or name == "_TextLineIter" and (
            not 0 <= values["_file"] <= len(it._files) or values["_line"] < 0):
        raise _bad(where, "negative or out-of-range position")
    if name == "_ParallelMapIter" and not all(isinstance(f.result(), tuple) for f in values["_pending"]):
        raise _bad(where, "pending results must be elements")


def _replay_generator(it):
    # A generator's frame cannot be saved: run a new one as far as the saved one had gone.
    count, done = it._count, it._done
    known = _known_cardinality(it._ds)
    if known is not None and count > known:
        raise ValueError(f"iterator state: the saved position {count} is past the end of the generator's "
                         f"{known} elements (corrupt or crafted checkpoint?)")
    if count > MAX_GENERATOR_REPLAY:
        raise ValueError(f"iterator state: restoring would replay the Python generator for {count} elements, more "
                         f"than the limit of {MAX_GENERATOR_REPLAY} (tensorweave.data.iterators.MAX_GENERATOR_REPLAY; "
                         "raise it for a checkpoint you trust)")
    it._it, it._count, it._done = None, 0, False
    while it._count < count:
        try:
            it.next()
        except StopIteration:
            raise ValueError(f"iterator state: the generator ended after {it._count} elements, but the saved "
                             f"position is {count}") from None
    it._done = done


def _known_cardinality(ds):
    try:
        n = int(ds.cardinality().numpy())
    except Exception:  # noqa: BLE001 - a dataset that cannot say: unknown
        return None
    return n if n >= 0 else None


def _reopen_text(it):
    if it._fh is not None:
        it._fh.close()
        it._fh = None
    line = it._line
    if it._file >= len(it._files) or line == 0:
        return
    import gzip
    path = it._files[it._file]
    it._fh = gzip.open(path, "rt", encoding="utf-8", newline="") if it._gzip \
        else open(path, encoding="utf-8", newline="")
    for i in range(line):
        if not it._fh.readline():
            raise ValueError(f"iterator state: {path} has only {i} lines, the saved position is line {line}")


class NumpyIterator(Iterator):
    """``as_numpy_iterator()``: elements as NumPy arrays (0-d components as NumPy scalars)."""

    def _convert(self, a, s):
        return structure.to_numpy_value(a)
