"""Global tensors whose pieces live on Ray workers: after ``tw.distribute.connect(num_workers=N)``
a placement's rank ``r`` is worker ``r``.

A global tensor on such a placement holds a :class:`RemotePiece` per rank instead of an array:
a key into that worker's ``store`` plus the piece's shape and dtype. Its value is made on the
worker (``to_global`` ships each rank only its own piece), ops run there (one call per worker
per op: each worker boxes its inputs through the worker collectives and runs the kernel, the
outputs stay in its store) and only ``numpy()`` / ``to_local()`` bring pieces to the driver.
A piece the driver holds as an array (a local value broadcast into an op, a shape computed
from logical shapes) travels with the call. When the last driver-side handle of a piece
goes, its key is freed on the worker with the next call to that worker (no extra message).

:func:`cluster_for` says which backend a placement means: the connected cluster (ranks must
be below its number of workers), or the in-process ranks when none is connected or inside
:func:`in_process`. Importing this module does not import Ray.

>>> import tensorweave as tw                                              # doctest: +SKIP
>>> tw.distribute.connect(num_workers=2)                                  # doctest: +SKIP
>>> x = tw.ones((4, 3)).to_global(placement=tw.placement("cpu", ranks=[0, 1]), sbp=tw.sbp.split(0))  # doctest: +SKIP
>>> x.to_local()[1].numpy().shape, float(tw.reduce_sum(x))               # doctest: +SKIP
((2, 3), 12.0)
"""
import collections
import contextlib
import itertools

import numpy as np

from tensorweave.core import errors
# (a `from package import module` in the function ran importlib's Python `_handle_fromlist` on every
# planned step's controller: ~10 µs cold, session 22; the package's __init__ imports cluster first)
from tensorweave.distribute.ray import cluster as _cluster

_in_process = [0]


@contextlib.contextmanager
def in_process():
    """Inside this block placements mean the in-process ranks even while a Ray cluster is
    connected (to compare both backends in one program, or to debug on threads)."""
    _in_process[0] += 1
    try:
        yield
    finally:
        _in_process[0] -= 1


def cluster_for(placement):
    """The connected Ray :class:`~tensorweave.distribute.ray.cluster.Cluster` whose workers are
    ``placement``'s ranks, or None (in-process ranks)."""
    c = _cluster._current
    if c is None or _in_process[0] or placement.type != "cpu":
        return None
    top = max(placement.ranks)
    if top >= c.num_workers:
        raise errors.InvalidArgumentError(
            f"{placement!r} names rank {top} but the connected Ray cluster has {c.num_workers} workers (ranks 0.."
            f"{c.num_workers - 1}). Hint: tw.distribute.connect(num_workers={top + 1}), or run on in-process ranks "
            "inside tw.distribute.in_process()")
    return c


class Heap:
    """The keys of one cluster's worker-side values: fresh keys, and the keys whose driver-side
    handles are gone (freed with the next call to their worker)."""

    def __init__(self):
        self.alive = True
        self._keys = itertools.count(1)
        self._freed = collections.defaultdict(collections.deque)

    def key(self):
        return next(self._keys)

    def release(self, rank, key):
        if self.alive:
            self._freed[rank].append(key)         # deque.append: safe from __del__ on any thread

    def take_freed(self, rank):
        q = self._freed.get(rank)
        out = []
        while q:
            out.append(q.popleft())
        return out


def heap_of(cluster):
    if cluster.heap is None:
        cluster.heap = Heap()
    return cluster.heap


class RemotePiece:
    """One rank's piece of a global tensor, kept in worker ``rank``'s store under ``key``."""

    __slots__ = ("heap", "rank", "key", "shape", "dtype", "__weakref__")

    def __init__(self, heap, rank, key, shape, dtype):
        self.heap, self.rank, self.key = heap, rank, key
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def nbytes(self):
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def __del__(self):
        heap = self.heap
        if heap is not None:
            heap.release(self.rank, self.key)

    def __reduce__(self):
        raise TypeError("a RemotePiece is the driver's handle of a value on a Ray worker; send its key")

    def __repr__(self):
        return f"<piece {list(self.shape)} {self.dtype} on worker {self.rank} #{self.key}>"


class RemoteVariable(RemotePiece):
    """One rank's shard of a global variable, a variable in worker ``rank``'s store: what an
    in-process rank's shard (a local ``Variable``) offers the code that reads and writes shards
    (``_read``, ``_write``, ``assign``, ``_shape``)."""

    __slots__ = ("name", "_shape")

    def __init__(self, heap, rank, key, shape, dtype, name):
        from tensorweave.core.shape import TensorShape
        super().__init__(heap, rank, key, shape, dtype)
        self.name, self._shape = name, TensorShape(list(shape))

    def _read(self):
        return _cluster_of(self).run_each(_w_var_read, [(self.key,)], [self.rank])[0]

    def _write(self, value):
        value = np.asarray(value, dtype=self.dtype).reshape(self.shape)
        _call(_cluster_of(self), _w_var_write, [(self.key, value)], [self.rank])

    def assign(self, value):
        self._write(getattr(value, "numpy", lambda: value)())

    def __repr__(self):
        return f"<shard of '{self.name}' {list(self.shape)} {self.dtype} on worker {self.rank}>"


def _cluster_of(piece):
    c = _cluster._current
    if c is None or c.heap is not piece.heap or not piece.heap.alive:
        raise errors.FailedPreconditionError(
            f"{piece!r} lived on a Ray cluster that is shut down (or was replaced): its value is gone. Hint: keep "
            "the cluster connected while its global tensors are in use, or bring them home with .numpy() first")
    return c


def is_remote(pieces):
    return any(isinstance(p, RemotePiece) for p in pieces)


# ---- the driver's side ------------------------------------------------------------------------------
def _call(cluster, fn, per_rank, ranks, steady=False):
    """``fn(worker, *per_rank[i])`` on each of ``ranks`` (one call per worker), after freeing the
    keys whose handles the driver dropped (``steady``: see ``Cluster.run_each``)."""
    heap = heap_of(cluster)
    return cluster.run_each(_w_apply, [(heap.take_freed(r), fn, args) for r, args in zip(ranks, per_rank)], ranks,
                            steady=steady)


def _ref(piece, rank, cluster, what):
    """What a call sends for a piece: ``(key, None)`` for one in rank's store, ``(None, value)``
    for a value the driver holds."""
    if isinstance(piece, RemotePiece):
        if piece.heap is not cluster.heap or not piece.heap.alive:
            _cluster_of(piece)
        if piece.rank != rank:
            raise errors.InternalError(f"{what}: {piece!r} is not on worker {rank}")
        return piece.key, None
    if piece is not None and not isinstance(piece, (np.ndarray, np.generic, int, float, bool, complex, bytes, str)):
        raise errors.FailedPreconditionError(
            f"{what}: a piece held by an in-process rank ({type(piece).__name__}) met the Ray workers (a global "
            "variable made before tw.distribute.connect?). Hint: make global tensors and variables after connect, "
            "or inside tw.distribute.in_process()")
    return None, piece


def place(placement, arrays):
    """The pieces of a new global tensor from the driver's arrays (mesh order): on Ray each
    worker gets its own piece (kept there); in-process, the arrays themselves."""
    cluster = cluster_for(placement)
    if cluster is None:
        return list(arrays)
    heap, ranks = heap_of(cluster), placement.ranks
    arrays = [np.asarray(a) for a in arrays]
    keys = [heap.key() for _ in ranks]
    _call(cluster, _w_put, list(zip(keys, arrays)), ranks)
    return [RemotePiece(heap, r, k, a.shape, a.dtype) for r, k, a in zip(ranks, keys, arrays)]


def local_pieces(pieces):
    """The pieces as arrays: remote ones fetched from their workers (one call per worker)."""
    where = [i for i, p in enumerate(pieces) if isinstance(p, RemotePiece)]
    if not where:
        return list(pieces)
    cluster = _cluster_of(pieces[where[0]])
    by_rank = {}
    for i in where:
        by_rank.setdefault(pieces[i].rank, []).append(i)
    ranks = list(by_rank)
    got = _call(cluster, _w_get, [([pieces[i].key for i in by_rank[r]],) for r in ranks], ranks)
    out = list(pieces)
    for r, values in zip(ranks, got):
        for i, v in zip(by_rank[r], values):
            out[i] = v
    return out


def run_op(cluster, placement, plans, local_ops, inputs, once, n_out, keep_boxed, opdef):
    """The eager interpreter's step on the workers: rank ``i`` boxes its pieces of ``inputs``
    with ``plans`` and runs ``local_ops[i]`` (``interpreter.run_op_on_rank``); returns what the
    in-process ranks return, per rank ``(boxed pieces, output)``, as :class:`RemotePiece` s
    (boxed pieces only where ``keep_boxed``: a tape records them)."""
    heap, ranks = heap_of(cluster), placement.ranks
    what = f"'{opdef.name}' (global)"
    per_rank, keys = [], []
    for i, r in enumerate(ranks):
        out_keys = [heap.key() for _ in range(n_out)]
        box_keys = [heap.key() if keep_boxed and plan is not None else None for plan in plans]
        keys.append((out_keys, box_keys))
        per_rank.append((plans, local_ops[i], [_ref(t._pieces[i], r, cluster, what) for t in inputs],
                         ranks if once else None, out_keys, box_keys))
    metas = _call(cluster, _w_run_op, per_rank, ranks)
    results = []
    for r, (out_keys, box_keys), (out_meta, box_meta) in zip(ranks, keys, metas):
        outs = [RemotePiece(heap, r, k, *m) for k, m in zip(out_keys, out_meta)]
        boxed = [None if k is None else RemotePiece(heap, r, k, *m) for k, m in zip(box_keys, box_meta)]
        results.append((boxed, outs[0] if n_out == 1 else tuple(outs)))
    return results


def box(cluster, pieces, plan):
    """``boxing.box`` on the workers: source pieces (mesh order) in, destination pieces out."""
    from tensorweave.distribute.boxing import participants
    heap = heap_of(cluster)
    ranks = participants(plan)
    src = dict(zip(plan.src_placement.ranks, pieces))
    keys = {r: heap.key() for r in plan.dst_placement.ranks}
    per_rank = [(plan, _ref(src.get(r), r, cluster, "boxing"), keys.get(r)) for r in ranks]
    metas = dict(zip(ranks, _call(cluster, _w_box, per_rank, ranks)))
    return [RemotePiece(heap, r, keys[r], *metas[r]) for r in plan.dst_placement.ranks]


def make_variables(cluster, placement, pieces, base, dtype):
    """A global variable's shards as variables on the workers (from the driver's arrays, from
    pieces already there, or made there by an initializer: ``distribute.variables.InitialPieces``),
    as :class:`RemoteVariable` s."""
    from tensorweave.distribute.variables import InitialPieces
    heap, ranks = heap_of(cluster), placement.ranks
    keys = [heap.key() for _ in ranks]
    # an initializer's pieces are made by the workers themselves (``(spec, index)`` travels)
    per_rank = [(k, (p, i) if isinstance(p, InitialPieces) else _ref(p, r, cluster, f"Variable '{base}'"),
                 f"{base}/rank{r}", dtype.name) for i, (k, p, r) in enumerate(zip(keys, pieces, ranks))]
    metas = _call(cluster, _w_make_variable, per_rank, ranks)
    return [RemoteVariable(heap, r, k, shape, dt, f"{base}/rank{r}") for r, k, (shape, dt) in zip(ranks, keys, metas)]


# ---- the workers' side (module functions: they travel by reference) ----------------------------------
class WorkerComms:
    """A worker's ``comm_for(rank_ids)``: the ``("communicator", "world")`` resource of its runtime."""

    __slots__ = ("worker",)

    def __init__(self, worker):
        self.worker = worker

    def __call__(self, ranks):
        return self.worker.comm(tuple(ranks))


def worker_runtime(worker):
    """The worker's :class:`~tensorweave.runtime.runtime.Runtime` (made once)."""
    if worker.runtime is None:
        from tensorweave.runtime.runtime import Runtime
        worker.runtime = Runtime(f"rank{worker.rank}", rank=worker.rank, cpu_count=1)
        worker.runtime.add_resource("communicator", "world", WorkerComms(worker))
    return worker.runtime


def _w_apply(worker, freed, fn, args):
    store = worker.store
    for k in freed:
        store.pop(k, None)
    return fn(worker, *args)


def resolve(worker, ref):
    key, value = ref
    if key is None:
        return value
    try:
        return worker.store[key]
    except KeyError:
        raise errors.FailedPreconditionError(
            f"worker {worker.rank} no longer holds piece #{key} (the worker was restarted?)") from None


def _meta(v):
    v = np.asarray(v)
    return v.shape, v.dtype.str


def _w_put(worker, key, value):
    worker.store[key] = value


def _w_get(worker, keys):
    return [np.asarray(worker.store[k]) for k in keys]


def _w_run_op(worker, plans, local_op, refs, once, out_keys, box_keys):
    from tensorweave.distribute.interpreter import run_op_on_rank
    store = worker.store
    vals, out = run_op_on_rank(plans, local_op, worker.rank, [resolve(worker, r) for r in refs], worker.comm, once)
    outs = [out] if len(out_keys) == 1 else list(out) if out_keys else []
    out_meta = []
    for k, o in zip(out_keys, outs):
        store[k] = o = np.asarray(o)
        out_meta.append(_meta(o))
    box_meta = []
    for k, v in zip(box_keys, vals):
        if k is not None:
            store[k] = v
            box_meta.append(_meta(v))
        else:
            box_meta.append(None)
    return out_meta, box_meta


def _w_box(worker, plan, ref, out_key):
    from tensorweave.distribute.boxing import run_boxing_on_rank
    out = run_boxing_on_rank(plan, worker.rank, resolve(worker, ref), worker.comm)
    if out_key is None:
        return None
    worker.store[out_key] = out = np.asarray(out)
    return _meta(out)


def _w_make_variable(worker, key, ref, name, dtype):
    from tensorweave.core import dtypes as _dt
    from tensorweave.core.context import init_scope
    from tensorweave.distribute.variables import InitialPieces
    from tensorweave.ops.variables import Variable
    value = ref[0].piece(ref[1]) if isinstance(ref[0], InitialPieces) else np.array(resolve(worker, ref))
    with init_scope():
        worker.store[key] = Variable(value, trainable=False, name=name, dtype=_dt.as_dtype(dtype))
    return value.shape, value.dtype.str


def _w_var_read(worker, key):
    return np.array(worker.store[key]._read())


def _w_var_write(worker, key, value):
    worker.store[key]._write(np.array(value))


__all__ = ["RemotePiece", "RemoteVariable", "cluster_for", "in_process", "place", "local_pieces", "run_op", "box",
           "make_variables"]
