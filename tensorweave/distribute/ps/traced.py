"""Scheduled ``tw.function``\\ s: traced once per worker, run as a graph every step.

``coordinator.schedule(f)`` with ``f`` a ``tw.function`` ships its Python function; each worker
traces it once (per input signature, as ``tw.function`` does) and then only runs the graph:

- A per-worker iterator argument is read in Python before the run (one element per call, the
  TF pattern ``x, y = next(iterator)`` in the function): inside the graph ``next`` gives that
  element, an input of the graph (so every run gets its own batch, not the one of the trace).
  A function that reads an iterator more than once per call is refused.
- The sharded variables it reads are the worker's lasting local copies (the graph captures
  them); before each run they are refilled from the servers with one call per server.
- ``optimizer.apply_gradients`` on sharded variables inside the function makes the gradients
  outputs of the graph; they are pushed after the run (a synchronous round as usual).
- A lookup of rows of a sharded table (an embedding, ``tw.nn.embedding_lookup``) is a node of
  the graph (:func:`sparse_lookup`): when it runs, it pulls only the unique rows its ids touch
  into the worker's lasting row buffer (one row per id of the traced shape: the most a batch can
  touch) and gives each id its row's position; the lookup gathers from the buffer, so the
  table's gradient is an ``IndexedSlices`` over those positions, an output of the graph, pushed
  after the run as the global rows (a sparse push). A function that looks a table up twice, reads
  it whole too, or has ids of unknown size runs eagerly (its Python function, every step).
"""
import numpy as np

from tensorweave.distribute.ps import variable as _variable


class NeedsEager(Exception):
    """Raised while tracing: the function does what only an eager run can."""


class TracedFunction:
    """A scheduled ``tw.function`` as it travels (its Python function; the graph is the worker's)."""

    def __init__(self, python_function):
        self.python_function = python_function
        self._graph = None
        self._eager = False
        self._reads = []          # the sharded variables the graph reads: refilled before each run
        self._pushes = []         # [(optimizer, variables, positions of their gradients in the outputs)]
        self._mirrors = {}
        self._sparse = []         # the tables the graph looks up (their row buffers are in _mirrors)
        self._pulled = {}         # table key -> the global rows its lookup pulled in this run
        self._run_step = None     # the Step running the graph (its lookups pull for its round)
        self.traces = 0

    def __getstate__(self):
        return {"python_function": self.python_function}

    def __setstate__(self, state):
        self.__init__(state["python_function"])

    def run(self, args, kwargs, step, iterators):
        """One call on this worker: ``iterators`` maps per-worker iterator ids to this worker's."""
        from tensorweave.distribute.ps.coordinator import _iterators_in, _substitute
        if self._eager:
            return self.python_function(*_substitute(args, iterators), **_substitute(kwargs, iterators))
        placeholders = _iterators_in((args, kwargs))
        batches = {p._id: next(iterators[p._id]) for p in placeholders}
        if self._graph is None:
            import tensorweave as tw
            self._graph = tw.function(self._body)
        step.mirrors, step.traced, self._run_step = self._mirrors, self, step
        self._pulled = {}
        try:
            for v, value in zip(self._reads, _variable.pull_whole(self._reads, step.min_version)
                                if self._reads else []):
                self._mirrors[v._key].assign(value)
            result, grads = self._graph(batches, _slots(args), _slots(kwargs))
        except NeedsEager:
            for p in placeholders:
                iterators[p._id].unread(batches[p._id])
            self._eager, self._graph = True, None
            step.mirrors, step.collected, step.dense_reads = None, None, []
            step.locals.clear()                   # (the trace's lookups: the eager run pulls its own)
            return self.python_function(*_substitute(args, iterators), **_substitute(kwargs, iterators))
        finally:
            step.mirrors, step.collected, step.traced, self._run_step = None, None, None, None
        for table in self._sparse:             # the gradients' positions -> the rows pulled (_rows_of)
            step.locals[table._key] = (self._mirrors[("rows", table._key)], self._pulled.get(table._key))
        for optimizer, variables, positions in self._pushes:
            _variable.push_gradients(optimizer, [_output(grads, i) for i in positions], variables)
        return result

    def _body(self, batches, args, kwargs):
        step = _variable.current_step()
        self.traces += 1
        ones = {k: _OneBatch(v) for k, v in batches.items()}
        step.collected, step.dense_reads, self._sparse = [], [], []
        result = self.python_function(*_fill(args, ones), **_fill(kwargs, ones))
        for k, one in ones.items():
            if one.count != 1:
                raise NotImplementedError(
                    f"a scheduled tw.function read its per-worker iterator {one.count} times in one call; a traced "
                    "function reads it once per call. Hint: schedule its python_function to run it eagerly")
        self._reads = list(step.dense_reads)
        flat, self._pushes = [], []
        from tensorweave.ops.indexed_slices import IndexedSlices
        for optimizer, grads, variables in step.collected:
            positions = []
            for g in grads:
                if isinstance(g, IndexedSlices):      # a lookup's gradient: its values and positions
                    positions.append((len(flat), len(flat) + 1, g.dense_shape))
                    flat += [g.values, g.indices]
                    continue
                positions.append(None if g is None else len(flat))
                if g is not None:
                    flat.append(g)
            self._pushes.append((optimizer, variables, positions))
        step.collected = None
        return result, flat


def _output(grads, position):
    """A gradient from the graph's outputs (an ``IndexedSlices`` travels as values and indices)."""
    if position is None or isinstance(position, int):
        return None if position is None else grads[position]
    from tensorweave.ops.indexed_slices import IndexedSlices
    values, indices, dense_shape = position
    return IndexedSlices(grads[values], grads[indices], dense_shape)


def sparse_lookup(table, step, ids):
    """Rows ``ids`` of the sharded ``table`` inside a traced function (see the module): a
    ``numpy_function`` node pulls the unique rows into the row buffer and gives each id its
    row's position; the buffer's ``sparse_read`` of the positions is the lookup."""
    from tensorweave.core.context import init_scope
    from tensorweave.core.convert import convert_to_tensor
    from tensorweave.ops.array_ops import reshape
    from tensorweave.ops.script_ops import numpy_function
    from tensorweave.ops.variables import Variable
    fn = step.traced
    ids = convert_to_tensor(ids)
    n = ids.shape.num_elements() if ids.shape.is_fully_defined() else None
    if n is None or table._key in step.locals or table in step.dense_reads:
        why = ("ids of unknown size" if n is None else "a second lookup in one function" if table._key in step.locals
               else "a lookup after a whole read")
        raise NeedsEager(f"{why} of the sharded table '{table._name}'")
    if not ids.dtype.is_integer:
        raise TypeError(f"embedding_lookup: ids for '{table._name}' must be integers, got {ids.dtype.name}")
    rest = table.shape.as_list()[1:]
    key = ("rows", table._key)
    with init_scope():                       # (now, not in the graph)
        rows = fn._mirrors.get(key)
        if rows is None or rows.shape.as_list()[0] != max(n, 1):
            rows = fn._mirrors[key] = Variable(np.zeros([max(n, 1)] + rest, table.dtype.np_dtype),
                                               trainable=table.trainable, name=table._name.split("/")[-1] + "_rows")
    step.locals[table._key] = (rows, None)       # this trace looks it up (ShardedVariable.handle: the buffer)
    fn._sparse.append(table)

    def pull(values):
        flat = np.asarray(values).reshape(-1).astype(np.int64)
        table._check_ids(flat)
        uids, inverse = np.unique(flat, return_inverse=True)
        buffer = np.zeros([max(n, 1)] + rest, table.dtype.np_dtype)
        buffer[:len(uids)] = table._pull_rows(uids, fn._run_step.min_version)
        rows.assign(buffer)
        fn._pulled[table._key] = uids
        return inverse.astype(np.int64)
    positions = reshape(numpy_function(pull, [ids], "int64", name="pull_rows"), ids.shape.as_list())
    return rows.sparse_read(positions)


class _Slot:
    """Where a per-worker iterator was in the arguments (stable across calls: no retracing)."""

    def __init__(self, key):
        self.key = key

    def __eq__(self, other):
        return isinstance(other, _Slot) and other.key == self.key

    def __hash__(self):
        return hash(("tw-ps-iterator", self.key))

    def __repr__(self):
        return f"<per-worker iterator {self.key}>"


class _OneBatch:
    """Inside the graph: ``next`` gives the element read for this call."""

    def __init__(self, element):
        self.element, self.count = element, 0

    def __iter__(self):
        return self

    def __next__(self):
        self.count += 1
        return self.element

    def get_next(self):
        return next(self)


def _slots(x):
    from tensorweave.distribute.ps.coordinator import PerWorkerIterator
    if isinstance(x, PerWorkerIterator):
        return _Slot(x._id)
    if isinstance(x, (list, tuple)):
        return type(x)(_slots(y) for y in x)
    if isinstance(x, dict):
        return {k: _slots(v) for k, v in x.items()}
    return x


def _fill(x, ones):
    if isinstance(x, _Slot):
        return ones[x.key]
    if isinstance(x, (list, tuple)):
        return type(x)(_fill(y, ones) for y in x)
    if isinstance(x, dict):
        return {k: _fill(v, ones) for k, v in x.items()}
    return x
