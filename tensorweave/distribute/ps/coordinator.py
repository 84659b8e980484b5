"""``tw.distribute.experimental.coordinator.ClusterCoordinator`` (TF2's API) on Ray workers.

``coordinator = ClusterCoordinator(strategy)``; ``coordinator.schedule(fn, args, kwargs)``
queues ``fn`` to run on a worker and returns a :class:`RemoteValue` at once;
``join()`` waits until every scheduled function finished (and raises the first error of
one); ``fetch(values)`` waits for and returns the values of a structure of RemoteValues;
``create_per_worker_dataset(dataset_fn)`` makes a dataset on each worker (``iter`` of it gives a
per-worker iterator to pass to scheduled functions: each worker gets its own).

One coordinator thread per worker takes the functions off a queue: any worker's (the shared
queue) when the strategy is asynchronous; when it is synchronous the ``i``-th scheduled
function is step ``i % num_workers`` of round ``i // num_workers`` and runs on that worker (a
function running ``k`` steps per call, Keras ``steps_per_execution``: rounds ``k (i // num_workers)``
to ``k (i // num_workers) + k - 1``, one per step).
A function travels once (``ray.put``), kept by the worker; each call sends only its
arguments and the learning rates its optimizers have on the coordinator when it is scheduled
(``optimizer.learning_rate = x``, a Keras callback's change: the servers apply the step's
gradients with that rate; a schedule is evaluated by the servers at the step's global
step, numbered by server 0, as Adam's bias correction is).
Results come back as NumPy values. A ``tw.function`` is traced once on each worker
and run as a graph (``traced.py``); Keras ``fit``/``evaluate`` schedule through here too
(``keras_fit.py``: their evaluation steps are read-only, outside the synchronous rounds).

**Failures.** When a worker process dies (``kill -9``) the call fails with Ray's actor
error: its thread restarts the worker in its placement bundle (``Cluster.restart_worker``)
and runs the same function again there. The worker's datasets are rebuilt and advanced past
the elements that completed steps consumed, so the re-run reads the batch the lost run read;
a synchronous round applied before the loss ignores the re-run's push. Asynchronous updates
are at-least-once, as in TF. An error raised by the function itself is not retried: it
surfaces from ``join``/``fetch`` as its own type with the worker's rank.
"""
import collections
import itertools
import threading
import uuid

from tensorweave.distribute.ps import strategy as _strategy
from tensorweave.distribute.ps import variable as _variable

MAX_RESTARTS = 5


class RemoteValue:
    """The future result of a scheduled function (TF's ``tf.distribute.experimental.coordinator.RemoteValue``)."""

    def __init__(self):
        self._event = threading.Event()
        self._value = None
        self._error = None

    def _set(self, value=None, error=None):
        self._value, self._error = value, error
        self._event.set()

    def fetch(self):
        """Waits for the function and returns its result (NumPy values); raises its error."""
        self._event.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def get(self):
        return self.fetch()

    def done(self):
        return self._event.is_set()


class PerWorkerValues:
    """One value per worker (TF's ``PerWorkerValues``); ``_values[i]`` is worker ``i``'s."""

    def __init__(self, values):
        self._values = tuple(values)


class PerWorkerIterator:
    """A per-worker iterator: a placeholder that each worker replaces by its own iterator."""

    _ids = itertools.count()

    def __init__(self, dataset_ref, num_workers):
        self._id = next(self._ids)
        self._dataset_ref = dataset_ref          # [ObjectRef of dataset_fn]: stays unresolved in calls
        self._consumed = [0] * num_workers       # elements taken by completed steps, per worker

    def __iter__(self):
        return self

    def __next__(self):
        raise TypeError("a per-worker iterator is read inside a function scheduled with ClusterCoordinator.schedule")


class PerWorkerDataset:
    """What ``create_per_worker_dataset`` returns: ``iter()`` gives a :class:`PerWorkerIterator`."""

    def __init__(self, dataset_ref, num_workers):
        self._dataset_ref, self._num_workers = dataset_ref, num_workers

    def __iter__(self):
        return PerWorkerIterator(self._dataset_ref, self._num_workers)


class _Closure:
    """A scheduled call: ``seq`` its place among the training functions (None for a read-only
    one: it takes no part in synchronous rounds)."""

    def __init__(self, fn_token, fn_ref, args, kwargs, seq, number, rates):
        self.fn_token, self.fn_ref, self.args, self.kwargs, self.seq = fn_token, fn_ref, args, kwargs, seq
        self.number = number
        self.rates = rates            # the optimizers' learning rates when it was scheduled
        self.value = RemoteValue()


class ClusterCoordinator:
    """Schedules functions on the workers of a ``ParameterServerStrategy`` (see the module)."""

    def __init__(self, strategy):
        if not isinstance(strategy, _strategy.ParameterServerStrategy):
            raise ValueError(f"ClusterCoordinator: only ParameterServerStrategy is supported, got "
                             f"{type(strategy).__name__}")
        import ray
        strategy._ensure_cluster()
        self.strategy = strategy
        strategy._coordinator = self          # Keras fit uses this one (coordinator_of)
        self._cluster = strategy._cluster
        self._n = strategy._num_workers
        self._sync = strategy.synchronous
        self._round0 = max(ray.get([s.get_version.remote() for s in strategy._servers])) if self._sync else 0
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queues = [collections.deque() for _ in range(self._n if self._sync else 1)]
        self._unfinished = 0
        self._errors = []
        self._seq = 0                # training functions scheduled (synchronous rounds count these)
        self._group = (self._round0, 1)    # the current group of n calls: (its first round, steps per call)
        self._number = 0             # every function scheduled
        self._fns = {}               # id(fn) -> (token, ref, fn)
        self._closed = False
        self.restarts = [0] * self._n
        self._threads = [threading.Thread(target=self._serve, args=(i,), daemon=True, name=f"tw-ps-worker-{i}")
                         for i in range(self._n)]
        for t in self._threads:
            t.start()

    # ---- API ----------------------------------------------------------------------------------
    def schedule(self, fn, args=None, kwargs=None):
        """Queues ``fn(*args, **kwargs)`` for a worker; returns its :class:`RemoteValue`."""
        return self._schedule(fn, args, kwargs)

    def _schedule(self, fn, args=None, kwargs=None, read_only=False):
        """``schedule``; a ``read_only`` function (an evaluation step: it pushes nothing) is
        outside the synchronous rounds: it reads the parameters as they are. A function with
        ``steps_per_call = k`` (Keras ``steps_per_execution``) runs ``k`` steps per call: in a
        synchronous strategy the ``n`` calls of a group (one per worker) take ``k`` rounds."""
        import ray
        from tensorweave.distribute.ps.traced import TracedFunction
        with self._lock:
            entry = self._fns.get(id(fn))
        if entry is None:
            python_function = getattr(fn, "python_function", None)    # a tw.function: traced on each worker
            optimizers = _variable.stamp_optimizers(python_function or fn)
            shipped = fn if python_function is None else TracedFunction(python_function)
            entry = (uuid.uuid4().hex, ray.put(shipped), fn, optimizers)    # the workers keep it under this token
            with self._lock:
                self._fns[id(fn)] = entry
        with self._cond:
            if self._closed:
                raise RuntimeError("ClusterCoordinator: schedule after the coordinator was shut down")
            seq = None if read_only else self._seq
            closure = _Closure(entry[0], entry[1], tuple(args or ()), dict(kwargs or {}), seq, self._number,
                               _variable.learning_rates(entry[3]))
            closure.round = None if read_only or not self._sync else self._round_of(getattr(fn, "steps_per_call", 1))
            self._queues[(self._number if read_only else self._seq) % self._n if self._sync else 0].append(closure)
            self._number += 1
            self._seq += 0 if read_only else 1
            self._unfinished += 1
            self._cond.notify_all()
        return closure.value

    def _round_of(self, steps):
        """The first round of the next synchronous training call (with the lock held)."""
        first, k = self._group
        if self._seq % self._n == 0:
            if self._seq:
                first += k
            self._group = (first, steps)
        elif steps != k:
            raise ValueError(f"ClusterCoordinator: a synchronous round group mixes functions of {k} and {steps} steps "
                             f"per call; schedule {self._n} calls (one per worker) of one kind at a time")
        return first

    def join(self):
        """Waits for every scheduled function; raises the first error one raised (once)."""
        with self._cond:
            self._cond.wait_for(lambda: self._unfinished == 0)
            if self._errors:
                error, self._errors = self._errors[0], []
                raise error

    def done(self):
        with self._lock:
            return self._unfinished == 0

    def fetch(self, val):
        """The values of a structure of RemoteValues (other leaves returned as they are)."""
        if isinstance(val, RemoteValue):
            return val.fetch()
        if isinstance(val, (list, tuple)):
            return type(val)(self.fetch(v) for v in val)
        if isinstance(val, dict):
            return {k: self.fetch(v) for k, v in val.items()}
        return val

    def create_per_worker_dataset(self, dataset_fn):
        """``dataset_fn()`` (or ``dataset_fn(input_context)``) called on each worker."""
        import ray
        dataset_fn = getattr(dataset_fn, "python_function", dataset_fn)
        return PerWorkerDataset([ray.put(dataset_fn)], self._n)

    def shutdown(self):
        """Stops the coordinator's threads (after the scheduled functions)."""
        self.join()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join()

    # ---- the worker threads ---------------------------------------------------------------------
    def _next(self, index):
        queue = self._queues[index if self._sync else 0]
        with self._cond:
            self._cond.wait_for(lambda: queue or self._closed)
            return queue.popleft() if queue else None

    def _serve(self, index):
        while True:
            closure = self._next(index)
            if closure is None:
                return
            try:
                value, error = self._run(index, closure), None
            except Exception as e:  # noqa: BLE001 - handed to the RemoteValue and join()
                value, error = None, e
            closure.value._set(value, error)
            with self._cond:
                if error is not None:
                    self._errors.append(error)
                self._unfinished -= 1
                self._cond.notify_all()

    def _run(self, index, closure):
        import ray
        from tensorweave.distribute.ray.cluster import _original
        iterators = _iterators_in((closure.args, closure.kwargs))
        info = {"worker": index, "num_workers": self._n, "servers": self.strategy._servers,
                "round": closure.round,
                "slot": (closure.seq or 0) % self._n, "number": closure.number, "rates": closure.rates,
                "consumed": {it._id: it._consumed[index] for it in iterators},
                "datasets": {it._id: it._dataset_ref for it in iterators}}
        for attempt in range(MAX_RESTARTS + 1):
            actor, generation = self._cluster.workers[index], self._cluster._generation
            ref = actor.call.remote(_worker_step, ([closure.fn_ref], closure.fn_token, closure.args, closure.kwargs,
                                                   info), generation)
            try:
                result, consumed = ray.get(ref)
            except ray.exceptions.RayActorError:
                if attempt == MAX_RESTARTS:
                    raise
                with self._lock:
                    if self._cluster.workers[index] is actor:     # not restarted by another thread meanwhile
                        self._cluster.restart_worker(index)
                        self.restarts[index] += 1
                continue
            except ray.exceptions.RayTaskError as e:
                raise _original(index, e) from None
            for it in iterators:
                it._consumed[index] = consumed[it._id]
            return result
        raise AssertionError("unreachable")


def _iterators_in(structure):
    out = []

    def walk(x):
        if isinstance(x, PerWorkerIterator):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            for y in x:
                walk(y)
        elif isinstance(x, dict):
            for y in x.values():
                walk(y)
    walk(structure)
    return out


class _CountingIterator:
    """A worker's iterator over its dataset, counting the elements taken."""

    def __init__(self, iterator, start):
        self._it = iterator
        self.count = 0
        self._back = []
        for _ in range(start):                 # a rebuilt dataset skips what completed steps read
            next(self._it)
            self.count += 1

    def __iter__(self):
        return self

    def __next__(self):
        value = self._back.pop() if self._back else next(self._it)
        self.count += 1
        return value

    def unread(self, value):
        """Puts ``value`` back: the next ``next`` gives it again."""
        self._back.append(value)
        self.count -= 1

    def get_next(self):
        return next(self)


def _substitute(x, iterators):
    if isinstance(x, PerWorkerIterator):
        return iterators[x._id]
    if isinstance(x, PerWorkerValues):
        raise TypeError("PerWorkerValues are resolved on workers only for per-worker iterators")
    if isinstance(x, tuple):
        return tuple(_substitute(y, iterators) for y in x)
    if isinstance(x, list):
        return [_substitute(y, iterators) for y in x]
    if isinstance(x, dict):
        return {k: _substitute(v, iterators) for k, v in x.items()}
    return x


def _to_numpy(x):
    if hasattr(x, "numpy") and not isinstance(x, type):
        return x.numpy()
    if isinstance(x, (list, tuple)):
        return type(x)(_to_numpy(y) for y in x)
    if isinstance(x, dict):
        return {k: _to_numpy(v) for k, v in x.items()}
    return x


def _worker_step(worker, fn_box, token, args, kwargs, info):
    """On a worker: the scheduled function with its iterators, inside a :class:`Step`."""
    import ray
    fns = worker.store.setdefault("ps_functions", {})
    fn = fns.get(token)
    if fn is None:
        fn = fns[token] = ray.get(fn_box[0])
    from tensorweave.keras.engine.layer import weight_creator
    iterators = worker.store.setdefault("ps_iterators", {})
    guard = weight_creator.set(_no_new_weights)
    try:
        dense = worker.store.setdefault("ps_dense_reads", {})
        k = getattr(fn, "steps_per_call", 1)
        for j in range(k):              # (steps_per_execution: step j of the call is round + j)
            step = _variable.Step(None if info["round"] is None else info["round"] + j, info["slot"],
                                  info["num_workers"], info["worker"], info["number"])
            step.rates = info["rates"]
            if k > 1:
                fn.inner = (j, k)
            out = _run_step(fn, args, kwargs, info, step, iterators, dense.get(token, []))
            dense[token] = step.dense_reads
        return out
    finally:
        weight_creator.reset(guard)


def _no_new_weights(layer, name, shape, **_):
    raise RuntimeError(f"layer '{layer.name}' created the weight '{name}' {list(shape)} on a worker. Hint: build the "
                       "model inside strategy.scope() on the coordinator (call it once on a sample batch) before "
                       "scheduling steps, so its weights live on the parameter servers")


def _run_step(fn, args, kwargs, info, step, iterators, dense_reads):
    import ray
    from tensorweave.distribute.ps.traced import TracedFunction
    traced = isinstance(fn, TracedFunction)
    with _variable.step_scope(step):
        if not traced:
            _variable.prefetch(step, dense_reads)
        for it_id, ref_box in info["datasets"].items():
            if it_id not in iterators:
                dataset_fn = ray.get(ref_box[0])
                ctx = _strategy.InputContext(info["num_workers"], info["worker"], info["num_workers"])
                dataset = _strategy.call_dataset_fn(dataset_fn, ctx)
                iterators[it_id] = _CountingIterator(iter(dataset), info["consumed"][it_id])
        try:
            result = (fn.run(args, kwargs, step, iterators) if traced
                      else fn(*_substitute(args, iterators), **_substitute(kwargs, iterators)))
        finally:
            # a synchronous round completes even when this step raised (the error surfaces)
            _variable.finish_round(step, info["servers"])
        result = _to_numpy(result)
    return result, {it_id: iterators[it_id].count for it_id in info["datasets"]}
