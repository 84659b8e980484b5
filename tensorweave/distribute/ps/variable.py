"""``ShardedVariable``: a variable whose rows live on parameter-server actors.

A ``ParameterServerStrategy`` makes one for each Keras weight created in its scope: the
rows are cut into shards (by the strategy's partitioner) and each shard is a ``tw.Variable``
in one :class:`~tensorweave.distribute.ps.server.ParameterServer` actor. The object itself
holds only the layout (name, shape, dtype, which rows are on which server) and travels to the
workers by value with the scheduled functions.

Reads pull what is needed, within a *step* (a scheduled function running on a worker):

- ``value()``/``read_value()`` (a dense use: ``matmul``, ``+``) pulls every shard once per
  step into a step-local ``tw.Variable``;
- ``sparse_read(ids)`` (``tw.nn.embedding_lookup``, Keras ``Embedding``) pulls only the
  unique rows ``ids`` touches into a step-local ``(unique_rows, ...)`` variable and gathers
  from it.

``tw.GradientTape`` sees the step-local variable (``handle`` is its handle), so a table's
gradient is an ``IndexedSlices`` over the pulled rows only. ``optimizer.apply_gradients``
with sharded variables (a hook in ``Optimizer.apply``) pushes the gradients instead of
applying them: rows are summed per unique id on the worker, split by shard, and each
server applies the optimizer's own rule (dense or row-wise sparse) to its shards. Outside a
step (on the coordinator) reads pull fresh values and carry no gradient.
"""
import contextlib
import json
import threading

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.shape import TensorShape

_local = threading.local()


def _ray():
    import ray
    return ray


class Step:
    """What one scheduled function on a worker has pulled and pushed.

    ``round``: the synchronous round (None when asynchronous); ``slot``/``num_slots``: this
    worker's place in the round; ``worker``: the worker's index; ``number``: the function's
    place in the order its coordinator scheduled functions."""

    def __init__(self, round=None, slot=0, num_slots=1, worker=0, number=0):
        self.round, self.slot, self.num_slots, self.worker, self.number = round, slot, num_slots, worker, number
        self.locals = {}          # variable key -> (local tw.Variable, unique global rows or None)
        self.dense_reads = []     # the variables read whole (prefetched by the next step)
        self.pushed = False
        self.rates = {}           # optimizer token -> its learning rate when the coordinator scheduled this step
        # while a traced function (``traced.py``) is traced: the worker's lasting local copies
        # (the graph captures them; each run refills them first) and the pushes, kept for after the run
        self.mirrors = None
        self.collected = None
        self.traced = None        # the TracedFunction being traced or run (its lookups' pulls report there)

    @property
    def min_version(self):
        return 0 if self.round is None else self.round


def current_step():
    """The :class:`Step` running on this thread, or None (on the coordinator)."""
    return getattr(_local, "step", None)


@contextlib.contextmanager
def step_scope(step):
    prev = current_step()
    _local.step = step
    try:
        yield step
    finally:
        _local.step = prev


class ShardedVariable:
    """A variable cut by rows over parameter servers (see the module).

    ``shards``: ``[(server index, first row, rows), ...]`` in row order; ``servers``: the
    actors. ``shard_shapes`` gives each shard's shape."""

    _is_variable = True

    def __init__(self, key, name, shape, dtype, trainable, shards, servers):
        self._key = key
        self._name = name
        self._shape = TensorShape(shape)
        self._dtype = _dt.as_dtype(dtype)
        self.trainable = bool(trainable)
        self.constraint = None
        self._shards = tuple(tuple(int(x) for x in s) for s in shards)
        self._servers = list(servers)
        self._ends = np.array([off + rows for _, off, rows in self._shards], np.int64)

    def __reduce__(self):
        return (ShardedVariable, (self._key, self._name, self._shape.as_list(), self._dtype.name, self.trainable,
                                  self._shards, self._servers))

    # ---- layout ----------------------------------------------------------------------------------
    @property
    def name(self):
        return self._name + ":0"

    @property
    def dtype(self):
        return self._dtype

    @property
    def shape(self):
        return self._shape

    def get_shape(self):
        return self._shape

    @property
    def shard_shapes(self):
        rest = self._shape.as_list()[1:]
        return [tuple([rows] + rest) for _, _, rows in self._shards]

    @property
    def num_shards(self):
        return len(self._shards)

    def __repr__(self):
        return (f"<tw.distribute.ShardedVariable '{self.name}' shape={tuple(self._shape.as_list())} "
                f"dtype={self._dtype.name} shards={self.shard_shapes}>")

    # ---- pulling ----------------------------------------------------------------------------------
    def _pull_dense(self, min_version=0):
        ray = _ray()
        parts = ray.get([self._servers[ps].pull.remote(self._key, i, None, min_version)
                         for i, (ps, _, _) in enumerate(self._shards)])
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def _check_ids(self, ids):
        n = self._shape.as_list()[0]
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            bad = ids[(ids < 0) | (ids >= n)][0]
            raise errors.InvalidArgumentError(
                f"embedding_lookup: id {int(bad)} is out of range for the sharded table '{self._name}' of shape "
                f"{self._shape.as_list()} (ids must lie in [0, {n})). Hint: hash or clip the ids first")

    def _pull_rows(self, uids, min_version=0):
        """Rows ``uids`` (sorted, unique, int64) from the shards that hold them."""
        ray = _ray()
        out = np.empty([len(uids)] + self._shape.as_list()[1:], self._dtype.np_dtype)
        cuts = np.searchsorted(uids, self._ends)
        refs, spans, lo = [], [], 0
        for i, ((ps, off, _), hi) in enumerate(zip(self._shards, cuts)):
            if hi > lo:
                refs.append(self._servers[ps].pull.remote(self._key, i, uids[lo:hi] - off, min_version))
                spans.append((lo, hi))
            lo = hi
        for (a, b), rows in zip(spans, ray.get(refs)):
            out[a:b] = rows
        return out

    def _mirror(self, step):
        """The worker's lasting copy of this variable (a traced function's graph captures it)."""
        from tensorweave.core.context import init_scope
        from tensorweave.ops.variables import Variable
        m = step.mirrors.get(self._key)
        with init_scope():                       # (while tracing: now, not in the graph)
            if m is None:
                m = step.mirrors[self._key] = Variable(self._pull_dense(step.min_version), trainable=self.trainable,
                                                       name=self._name.split("/")[-1])
            elif self not in step.dense_reads:   # a new trace of the function: fresh values
                m.assign(self._pull_dense(step.min_version))
        if self not in step.dense_reads:
            step.dense_reads.append(self)
        return m

    def _local(self, step):
        """This step's dense local copy (pulled on first use)."""
        from tensorweave.ops.variables import Variable
        if step.mirrors is not None:
            return self._mirror(step)
        entry = step.locals.get(self._key)
        if entry is None:
            entry = (Variable(self._pull_dense(step.min_version), trainable=self.trainable,
                              name=self._name.split("/")[-1]), None)
            step.locals[self._key] = entry
            step.dense_reads.append(self)
        elif entry[1] is not None:
            raise errors.FailedPreconditionError(
                f"ShardedVariable '{self._name}': read whole after a sparse lookup in the same step. Hint: use "
                "either embedding lookups or dense reads of a sharded table within one step")
        return entry[0]

    # ---- reading ----------------------------------------------------------------------------------
    def read_value(self):
        if _shape_only():
            # a trace for output shapes only (Keras' functional API): a stand-in, nothing pulled
            from tensorweave.ops.array_ops import placeholder
            return placeholder(self._dtype, self._shape)
        step = current_step()
        if step is None:
            from tensorweave.ops.array_ops import constant
            return constant(self._pull_dense(), dtype=self._dtype)
        return self._local(step).read_value()

    def value(self):
        return self.read_value()

    def _tw_tensor_(self, dtype=None):
        t = self.value()
        if dtype is not None and _dt.as_dtype(dtype) is not self._dtype:
            raise TypeError(f"Variable '{self.name}' of dtype {self._dtype.name} used where "
                            f"{_dt.as_dtype(dtype).name} is required. Hint: tw.cast(v, ...)")
        return t

    def numpy(self):
        return self._pull_dense()

    def __array__(self, dtype=None, copy=None):
        v = self._pull_dense()
        return v.astype(dtype) if dtype is not None else v

    def sparse_read(self, indices, name=None):
        """Rows ``indices`` (any shape of int ids); only the unique rows travel."""
        from tensorweave.ops.array_ops import constant, gather, reshape
        from tensorweave.ops.variables import Variable
        if _shape_only():
            return gather(self.read_value(), indices)
        step = current_step()
        if step is not None and step.mirrors is not None:
            from tensorweave.distribute.ps.traced import sparse_lookup
            return sparse_lookup(self, step, indices)
        ids = np.asarray(indices.numpy() if hasattr(indices, "numpy") else indices)
        if not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"embedding_lookup: ids for '{self._name}' must be integers, got {ids.dtype}")
        flat = ids.reshape(-1).astype(np.int64)
        self._check_ids(flat)
        uids, inverse = np.unique(flat, return_inverse=True)
        step = current_step()
        if step is None:
            rows = constant(self._pull_rows(uids), dtype=self._dtype)
            return reshape(gather(rows, inverse.reshape(ids.shape)), list(ids.shape) + self._shape.as_list()[1:])
        entry = step.locals.get(self._key)
        if entry is None:
            local = Variable(self._pull_rows(uids, step.min_version), trainable=self.trainable,
                             name=self._name.split("/")[-1])
            step.locals[self._key] = entry = (local, uids)
            return local.sparse_read(inverse.reshape(ids.shape).astype(np.int64))
        local, have = entry
        if have is None:                       # already pulled whole this step
            return local.sparse_read(ids.astype(np.int64))
        pos = np.searchsorted(have, uids)
        if np.any(pos >= len(have)) or np.any(have[np.minimum(pos, len(have) - 1)] != uids):
            raise errors.FailedPreconditionError(
                f"ShardedVariable '{self._name}': looked up again in the same step with ids not pulled by its first "
                "lookup. Hint: look a table up once per step (concatenate the ids of its uses)")
        return local.sparse_read(pos[inverse].reshape(ids.shape).astype(np.int64))

    @property
    def handle(self):
        """The step-local variable's handle (what ``tw.GradientTape`` differentiates)."""
        step = current_step()
        if step is None:
            raise errors.FailedPreconditionError(
                f"ShardedVariable '{self._name}' is differentiated inside a step scheduled with "
                "ClusterCoordinator.schedule (on a worker), not on the coordinator")
        if step.mirrors is not None:
            rows = step.mirrors.get(("rows", self._key))
            if rows is not None and self._key in step.locals:     # looked up in this trace: the pulled rows
                return rows.handle
            return self._mirror(step).handle
        entry = step.locals.get(self._key)
        if entry is None:      # not read in this step: a handle no op uses (its gradient is None)
            from tensorweave.ops.variables import Variable
            entry = step.locals[self._key] = (Variable(np.zeros((), self._dtype.np_dtype)), None)
        return entry[0].handle

    # ---- writing ------------------------------------------------------------------------------------
    def assign(self, value, use_locking=False, name=None, read_value=True):
        """Sets every shard (from the coordinator; one shard's rows travel at a time)."""
        ray = _ray()
        value = np.asarray(value, self._dtype.np_dtype)
        if list(value.shape) != self._shape.as_list():
            raise ValueError(f"ShardedVariable '{self._name}' has shape {self._shape.as_list()}, got a value of "
                             f"shape {list(value.shape)}")
        ray.get([self._servers[ps].assign.remote(self._key, i, value[off:off + rows])
                 for i, (ps, off, rows) in enumerate(self._shards)])
        return self if read_value else None

    def _apply_remotely(self, optimizer, grads, variables):
        push_gradients(optimizer, grads, variables)


def _shape_only():
    from tensorweave.core.context import building_graph
    return getattr(building_graph(), "shape_only", False)


def prefetch(step, variables):
    """Pulls ``variables`` whole into ``step`` with one call per server (a step reads the
    variables its previous run read whole: the dense layers)."""
    from tensorweave.ops.variables import Variable
    if not variables:
        return
    values = pull_whole(variables, step.min_version)
    for v, value in zip(variables, values):
        if step.mirrors is not None:
            step.mirrors[v._key].assign(value)
        else:
            step.locals[v._key] = (Variable(value, trainable=v.trainable, name=v._name.split("/")[-1]), None)
        step.dense_reads.append(v)


def pull_whole(variables, min_version=0):
    """The values of ``variables`` (whole), one call per server."""
    return _resolve(variables, _pull_refs(variables, min_version))


def _pull_refs(variables, min_version):
    servers = variables[0]._servers
    requests = {}
    for v in variables:
        for i, (ps, _, _) in enumerate(v._shards):
            requests.setdefault(ps, []).append((v._key, i, None))
    order = sorted(requests)
    return order, requests, [servers[ps].pull_many.remote(requests[ps], min_version) for ps in order]


def _resolve(variables, pending):
    order, requests, refs = pending
    results = _ray().get(refs)
    got = {(key, i): value for ps, values in zip(order, results) for (key, i, _), value in zip(requests[ps], values)}
    out = []
    for v in variables:
        parts = [got[(v._key, i)] for i in range(len(v._shards))]
        out.append(parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0))
    return out


def _install_operators():
    from tensorweave.ops import overloads
    overloads.install(ShardedVariable)


_install_operators()


def _rows_of(variable, step, gradient):
    """``(global row ids or None, values)`` of a gradient of ``variable`` in ``step``: an
    IndexedSlices over the step-local rows becomes unique global rows with summed values."""
    from tensorweave.ops.indexed_slices import IndexedSlices
    if not isinstance(gradient, IndexedSlices):
        return None, np.asarray(gradient.numpy() if hasattr(gradient, "numpy") else gradient)
    idx = np.asarray(gradient.indices.numpy() if hasattr(gradient.indices, "numpy") else gradient.indices)
    idx = idx.reshape(-1).astype(np.int64)
    vals = np.asarray(gradient.values.numpy() if hasattr(gradient.values, "numpy") else gradient.values)
    vals = vals.reshape([len(idx)] + variable.shape.as_list()[1:])
    entry = step.locals.get(variable._key) if step is not None else None
    uniq, inverse = np.unique(idx, return_inverse=True)
    summed = np.zeros((len(uniq),) + vals.shape[1:], vals.dtype)
    np.add.at(summed, inverse, vals)
    if entry is not None and entry[1] is not None:
        uniq = entry[1][uniq]                  # step-local positions -> global rows (still sorted)
    return uniq, summed


def optimizer_key(optimizer):
    """The optimizer's identity on the servers: its class and config (JSON) and the token the
    coordinator stamped on it (:func:`stamp_optimizers`), so two optimizers with one config
    keep separate state (a server tells optimizers apart without their rate if it is a number:
    a push carries the rate, :func:`push_rate`)."""
    from tensorweave.keras import optimizers
    config = optimizers.serialize(optimizer)
    config["tw_ps_token"] = optimizer.__dict__.get("_tw_ps_token")
    return json.dumps(config, sort_keys=True, default=str)


def learning_rates(optimizers):
    """``{token: rate}`` of the stamped ``optimizers`` whose rate is a number (a variable, a
    value set with ``optimizer.learning_rate = x``, a callable's value): what a step scheduled
    now pushes with, so a change on the coordinator reaches the servers from the next step."""
    from tensorweave.keras.optimizers.schedules import LearningRateSchedule
    return {opt.__dict__["_tw_ps_token"]: _rate_of(opt) for opt in optimizers
            if not isinstance(opt._learning_rate, LearningRateSchedule)}


def _rate_of(optimizer):
    """The optimizer's rate as a number, without making its state (an optimizer that has made
    its step counter and rate variables no longer pickles: it travels to the workers)."""
    lr = optimizer._learning_rate
    if callable(lr) and not hasattr(lr, "numpy"):
        lr = lr()
    return np.float32(lr.numpy() if hasattr(lr, "numpy") else lr)


def push_rate(optimizer, step):
    """The learning rate a push of ``optimizer`` applies with: None for a schedule; the rate the
    coordinator had when it scheduled ``step``; else the optimizer's own."""
    from tensorweave.keras.optimizers.schedules import LearningRateSchedule
    if isinstance(optimizer._learning_rate, LearningRateSchedule):
        return None
    rate = (step.rates if step is not None else {}).get(optimizer.__dict__.get("_tw_ps_token"))
    return float(_rate_of(optimizer) if rate is None else rate)


def stamp_optimizers(fn, _seen=None, _found=None):
    """Gives every Keras optimizer reachable from ``fn``'s closure (through nested functions,
    bound methods, lists, tuples and dicts; an object's ``tw_ps_optimizers``) a token, before
    ``fn`` travels to the workers: the copies the workers unpickle then name the same optimizer
    state on the servers. Returns the optimizers found (the coordinator's objects)."""
    import types
    import uuid
    from tensorweave.keras.optimizers.optimizer import Optimizer
    seen = set() if _seen is None else _seen
    found = [] if _found is None else _found
    if id(fn) in seen:
        return found
    seen.add(id(fn))
    if isinstance(fn, Optimizer):
        fn.__dict__.setdefault("_tw_ps_token", uuid.uuid4().hex)
        found.append(fn)
    elif getattr(type(fn), "tw_ps_optimizers", None) is not None:
        stamp_optimizers(list(fn.tw_ps_optimizers), seen, found)
    elif isinstance(fn, types.MethodType):
        stamp_optimizers(fn.__self__, seen, found)
        stamp_optimizers(fn.__func__, seen, found)
    elif isinstance(fn, types.FunctionType):
        for cell in fn.__closure__ or ():
            try:
                stamp_optimizers(cell.cell_contents, seen, found)
            except ValueError:          # an empty cell
                pass
        for name in fn.__code__.co_names:
            if name in fn.__globals__:
                value = fn.__globals__[name]
                if isinstance(value, (Optimizer, types.FunctionType)) and not isinstance(value, type):
                    stamp_optimizers(value, seen, found)
    elif isinstance(fn, (list, tuple)):
        for x in fn:
            stamp_optimizers(x, seen, found)
    elif isinstance(fn, dict):
        for x in fn.values():
            stamp_optimizers(x, seen, found)
    return found


def push_gradients(optimizer, grads, variables):
    """Sends ``grads`` of sharded ``variables`` to their servers (one call per server). In a
    synchronous round every server hears from every worker once per step (maybe nothing), so
    it knows when the round is complete."""
    ray = _ray()
    step = current_step()
    if step is not None and step.collected is not None:
        # being traced: the gradients become outputs of the function, pushed after each run
        step.collected.append((optimizer, list(grads), list(variables)))
        return None
    if any(not isinstance(v, ShardedVariable) for v in variables):
        local = [v.name for v in variables if not isinstance(v, ShardedVariable)]
        raise TypeError(f"apply_gradients under ParameterServerStrategy: {local} are not parameter-server variables. "
                        "Hint: create every trained variable inside strategy.scope()")
    if step is not None and step.round is not None and step.pushed:
        raise errors.FailedPreconditionError("synchronous ParameterServerStrategy: apply_gradients was called twice "
                                             "in one step. Hint: apply all gradients in one call per step")
    per_server = {}
    servers = variables[0]._servers
    for g, v in zip(grads, variables):
        if g is None:
            continue
        rows, values = _rows_of(v, step, g)
        for i, (ps, off, n) in enumerate(v._shards):
            if rows is None:
                part = values if values.ndim == 0 else values[off:off + n]       # a scalar is one shard
                per_server.setdefault(ps, []).append((v._key, i, None, part))
                continue
            lo, hi = np.searchsorted(rows, [off, off + n])
            if hi > lo:
                per_server.setdefault(ps, []).append((v._key, i, rows[lo:hi] - off, values[lo:hi]))
    key, rate = optimizer_key(optimizer), push_rate(optimizer, step)
    if step is None or step.round is None:
        # asynchronous: the optimizer's step (a schedule's, Adam's bias correction) is the global
        # one, numbered by server 0, not each server's count of the pushes it got (a server a step
        # skips lags behind). The number goes to the pushes as Ray's reference: each server waits
        # for it itself, no round trip through this worker.
        number = servers[0].take_step.remote(key)
        ray.get([servers[ps].push.remote(key, None, 0, 1, True, parts, rate, number)
                 for ps, parts in per_server.items()])
    else:
        ray.get([s.push.remote(key, step.round, step.slot, step.num_slots, True, per_server.get(ps, []), rate)
                 for ps, s in enumerate(servers)])
    if step is not None:
        step.pushed = True


def finish_round(step, servers):
    """A synchronous step that pushed nothing still reports to every server (round complete)."""
    if step.round is not None and not step.pushed:
        _ray().get([s.push.remote(None, step.round, step.slot, step.num_slots, False, []) for s in servers])
        step.pushed = True
