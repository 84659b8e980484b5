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
- A lookup of rows of a sharded table (an embedding) decides by its ids what to pull, so a
  function that does one runs eagerly (its Python function, every step), as before.
"""
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
        step.mirrors = self._mirrors
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
            return self.python_function(*_substitute(args, iterators), **_substitute(kwargs, iterators))
        finally:
            step.mirrors, step.collected = None, None
        for optimizer, variables, positions in self._pushes:
            _variable.push_gradients(optimizer, [None if i is None else grads[i] for i in positions], variables)
        return result

    def _body(self, batches, args, kwargs):
        step = _variable.current_step()
        self.traces += 1
        ones = {k: _OneBatch(v) for k, v in batches.items()}
        step.collected, step.dense_reads = [], []
        result = self.python_function(*_fill(args, ones), **_fill(kwargs, ones))
        for k, one in ones.items():
            if one.count != 1:
                raise NotImplementedError(
                    f"a scheduled tw.function read its per-worker iterator {one.count} times in one call; a traced "
                    "function reads it once per call. Hint: schedule its python_function to run it eagerly")
        self._reads = list(step.dense_reads)
        flat, self._pushes = [], []
        for optimizer, grads, variables in step.collected:
            positions = []
            for g in grads:
                positions.append(None if g is None else len(flat))
                if g is not None:
                    flat.append(g)
            self._pushes.append((optimizer, variables, positions))
        step.collected = None
        return result, flat


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
