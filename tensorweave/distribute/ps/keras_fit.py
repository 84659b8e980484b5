"""Keras ``fit``/``evaluate`` of a model compiled inside a ``ParameterServerStrategy`` scope.

As TF's "Parameter server training with Model.fit": build and compile the model in
``strategy.scope()`` (its weights are :class:`ShardedVariable`\\ s on the servers), pass a
``tw.keras.utils.experimental.DatasetCreator(dataset_fn)`` (or a ``Dataset``, read whole by
every worker) and ``steps_per_epoch``. ``Model.fit`` comes here (``model.py`` hands over):

- Each scheduled step is one worker's step on its own batch (``dataset_fn(input_context)`` is
  called once per worker per ``fit``; its iterator continues over the epochs). The model travels
  to the workers as its document (config, compile config; no weights: the rebuilt model's
  weights *are* the coordinator's sharded variables, matched by name), rebuilt once per worker
  and ``fit``; its ``train_step`` (the model's own, when it overrides it) runs there, pulling
  the rows it reads and pushing its gradients to the servers.
- Metrics: a step starts from reset metrics and returns its metrics' state variables; the
  coordinator adds the states up in the order the steps were scheduled (every Keras metric's
  state is summed over replicas: ``aggregation="sum"``), so the logs are those of one metric
  that saw every step's batch. TF keeps metric variables on the servers and updates them from
  the workers; the totals are the same, but here they do not depend on arrival order.
- Callbacks run on the coordinator: ``on_train_batch_begin(k)`` when step ``k`` is scheduled,
  ``on_train_batch_end(k, logs)`` when it and every step before it finished (up to
  ``2 * num_workers`` steps run ahead, as TF's scheduling without waiting); the epoch ends after
  every step of it finished. ``stop_training`` stops the scheduling (steps in flight finish; in
  synchronous mode the round is completed).
- ``compile(steps_per_execution=k)``: each scheduled call runs ``k`` steps on its worker (one
  round trip per ``k`` batches; ``train_step`` per batch, each pushing its own gradients: in a
  synchronous strategy the calls of one group take ``k`` rounds); callbacks get the call's first and
  last step index, as TF's; ``steps_per_epoch`` must be a multiple of ``k`` (``evaluate`` and
  validation: ``k`` read-only steps per call, the last call the steps left).
- ``synchronous=True``: ``steps_per_epoch`` must be a multiple of the workers (a round is one
  step per worker); with worker ``i`` reading rows ``i::n`` of the global batches
  (``dataset.shard(n, i)``) and equal per-worker batches, fit equals single-process ``fit`` on
  the global batches.
- ``evaluate`` (and validation) schedules read-only steps (no push; outside synchronous
  rounds) on a fresh per-worker dataset each time.

>>> import numpy as np
>>> import tensorweave as tw
>>> resolver = tw.distribute.cluster_resolver.SimpleClusterResolver(
...     tw.train.ClusterSpec({"worker": ["w0", "w1"], "ps": ["ps0"]}))
>>> strategy = tw.distribute.experimental.ParameterServerStrategy(resolver)      # doctest: +SKIP
>>> def dataset_fn(context):
...     x = np.random.default_rng(0).random((64, 4)).astype(np.float32)
...     return tw.data.Dataset.from_tensor_slices((x, x.sum(1))).shard(
...         context.num_input_pipelines, context.input_pipeline_id).batch(8).repeat()
>>> with strategy.scope():                                                        # doctest: +SKIP
...     model = tw.keras.Sequential([tw.keras.Input(shape=(4,)), tw.keras.layers.Dense(1)])
...     model.compile("sgd", "mse")
>>> model.fit(tw.keras.utils.experimental.DatasetCreator(dataset_fn), epochs=2,
...           steps_per_epoch=4)                                                  # doctest: +SKIP
"""
import collections
import functools

import numpy as np


from tensorweave.distribute.ps import variable as _variable


def _call_creator(creator, input_context):
    return creator(input_context)


def _creator(x, y, method):
    """The per-worker dataset function of ``x`` (a DatasetCreator, or a Dataset every worker reads)."""
    from tensorweave.data import Dataset
    from tensorweave.keras.utils.dataset_creator import DatasetCreator
    if isinstance(x, Dataset):
        x = DatasetCreator(functools.partial(_same_dataset, x))
    if not isinstance(x, DatasetCreator):
        raise TypeError(f"Model.{method} under ParameterServerStrategy takes a "
                        f"tw.keras.utils.experimental.DatasetCreator (or a tw.data.Dataset), got {type(x).__name__}. "
                        "Hint: DatasetCreator(lambda input_context: dataset), each worker calls it for its own data")
    if y is not None:
        raise ValueError(f"Model.{method} under ParameterServerStrategy: `y` must not be given (the dataset yields "
                         "(x, y) pairs)")
    return functools.partial(_call_creator, x)


def _same_dataset(dataset, input_context):
    return dataset


class _Kept:
    """For ``restore_model``: the rebuilt model's weights are already the right (sharded) variables."""

    def __init__(self, by_key):
        self._by_key = by_key

    def check(self, var, ref, what):
        if var is not self._by_key.get(ref):
            raise RuntimeError(f"ParameterServerStrategy: the model rebuilt on a worker did not take {what} "
                               f"{var.name} from the servers")

    def prepare(self, var, ref):
        return lambda: None


class _KerasStep:
    """The function ``fit``/``evaluate`` schedules: the model (rebuilt on first use on a worker)
    runs ``train_step``/``test_step`` on the iterator's next batch and returns its metric states."""

    def __init__(self, model, train, steps=1):
        from tensorweave.keras.saving import model_document
        doc, keyed = model_document(model)
        doc["optimizer_state"] = None                 # the optimizer's state lives on the servers
        doc["weights"] = {k: k for k in keyed}
        self.document = doc
        self.variables = keyed
        self.custom_objects = _custom_objects(model)
        self.optimizer_token = model.optimizer.__dict__.setdefault("_tw_ps_token", _token()) \
            if model.optimizer is not None else None
        self.train = train
        self.steps_per_call = steps             # steps_per_execution: the worker runs this many per call
        self.inner = (0, 1)                     # (step j of the call, of k): set by the worker per step
        self._model = None
        self._optimizer = model.optimizer       # the coordinator's: its rate goes with each step

    @property
    def tw_ps_optimizers(self):
        """The coordinator's optimizer (``stamp_optimizers``; the coordinator reads its rate)."""
        return [] if self._optimizer is None else [self._optimizer]

    def __getstate__(self):
        return {**self.__dict__, "_model": None, "_optimizer": None}

    def _build(self):
        from tensorweave.keras.engine.layer import weight_creator
        from tensorweave.keras.saving import restore_model
        by_name = {v._name: v for v in self.variables.values()}

        def take(layer, name, shape, dtype, initializer, trainable, constraint):
            v = by_name.get(name)
            if v is None or v.shape.as_list() != [int(d) for d in shape]:
                raise RuntimeError(f"ParameterServerStrategy: the model rebuilt on a worker made the weight '{name}' "
                                   f"{list(shape)}, which is not one of the model's weights on the servers "
                                   f"({sorted(by_name)[:4]}...). Hint: give the model's layers fixed names")
            return v
        sizes = [int(np.prod(v.shape.as_list())) * v.dtype.size for v in self.variables.values()] or [0]
        token = weight_creator.set(take)
        try:
            with _variable.step_scope(None):          # building reads outside this step's pulls
                model = restore_model(self.document, None, "the coordinator's model",
                                      custom_objects=self.custom_objects, budget=(max(sizes), sum(sizes)), assigner=_Kept(self.variables))
        finally:
            weight_creator.reset(token)
        if model.optimizer is not None:
            model.optimizer.__dict__["_tw_ps_token"] = self.optimizer_token
        return model

    def __call__(self, iterator):
        from tensorweave.keras.engine import data_adapter
        from tensorweave.keras.engine.model import _step_data
        if self._model is None:
            self._model = self._build()
        model = self._model
        batch = data_adapter.unpack_x_y_sample_weight(next(iterator))
        model._build_compiled_metrics(batch)
        if self.inner[0] == 0:                  # a call's metrics cover all its steps
            model.reset_metrics()
        (model.train_step if self.train else model.test_step)(_step_data(batch))
        return [(m.name, [v.numpy() for v in m.variables]) for m in model.metrics]


def _token():
    import uuid
    return uuid.uuid4().hex


def _custom_objects(model):
    from tensorweave.distribute.ray.multi_worker import _custom_objects
    return _custom_objects(model)


class _Totals:
    """The coordinator's metrics, fed the steps' states in schedule order."""

    def __init__(self, model, dataset_fn, strategy):
        self.model = model
        if model._compile_metrics is not None and model._compile_metrics.metrics is None:
            # built as Keras builds them, from the first batch (the first worker's)
            from tensorweave.distribute.ps.strategy import InputContext
            from tensorweave.keras.engine import data_adapter
            first = next(iter(dataset_fn(InputContext(strategy._num_workers, 0, strategy._num_workers))))
            model._build_compiled_metrics(data_adapter.unpack_x_y_sample_weight(first))
        self.metrics = model.metrics
        for m in self.metrics:
            for v in m.variables:
                if getattr(v, "aggregation", "sum") != "sum":
                    raise NotImplementedError(f"ParameterServerStrategy: metric '{m.name}' has a state variable "
                                              f"aggregated by '{v.aggregation}'; only summed states are combined "
                                              "over the workers' steps")

    def reset(self):
        for m in self.metrics:
            m.reset_state()

    def add(self, states):
        if [name for name, _ in states] != [m.name for m in self.metrics]:
            raise RuntimeError(f"ParameterServerStrategy: the workers' metrics {[n for n, _ in states]} differ from "
                               f"the coordinator's {[m.name for m in self.metrics]}")
        for m, (_, values) in zip(self.metrics, states):
            for v, a in zip(m.variables, values):
                v.assign(v.numpy() + a)

    def logs(self):
        from tensorweave.keras.engine.model import _to_floats
        return _to_floats(self.model.get_metrics_result())


def coordinator_of(strategy):
    """The strategy's coordinator (TF keeps one per strategy), made when there is none running."""
    from tensorweave.distribute.ps.coordinator import ClusterCoordinator
    c = getattr(strategy, "_coordinator", None)
    if c is None or c._closed:
        c = ClusterCoordinator(strategy)
    return c


def _run_steps(coordinator, fn, iterator, steps, totals, begin, end, read_only, stop=lambda: False, multiple=1):
    """Schedules ``steps`` calls of ``fn(iterator)`` (``fn[k]`` for call ``k`` when a list; fewer
    when ``stop()`` turns true: then up to
    the next multiple of ``multiple``), ``begin(k)``/``end(k, logs)`` around each, ends in order."""
    window = 2 * coordinator._n
    pending = collections.deque()
    error = None

    def finish():
        nonlocal error
        k, value = pending.popleft()
        try:
            states = value.fetch()
        except Exception as e:  # noqa: BLE001 - the first error is raised after the steps in flight
            error = error or e
            return
        if error is None:
            totals.add(states)
            end(k, totals.logs())
    k = 0
    while k < steps:
        begin(k)
        call = fn[k] if isinstance(fn, list) else fn
        pending.append((k, coordinator._schedule(call, args=(iterator,), read_only=read_only)))
        k += 1
        while pending and (len(pending) > window or pending[0][1].done()):
            finish()
        if error is not None or (stop() and k % multiple == 0):
            break
    while pending:
        finish()
    if error is not None:
        with coordinator._cond:          # raised here; join() need not raise it again
            coordinator._errors = [e for e in coordinator._errors if e is not error]
        raise error
    return totals.logs()


def fit(strategy, model, x, y, epochs, verbose, callbacks, validation_data, initial_epoch, steps_per_epoch,
        validation_steps, validation_freq):
    """``model.fit`` on the strategy's workers (see the module)."""
    from tensorweave.keras.callbacks import CallbackList
    from tensorweave.keras.engine import data_adapter
    from tensorweave.keras.utils.dataset_creator import require_steps
    dataset_fn = _creator(x, y, "fit")
    require_steps(steps_per_epoch, "steps_per_epoch", "fit")
    steps_per_epoch = data_adapter.check_count(steps_per_epoch, "steps_per_epoch")
    epochs = data_adapter.check_count(epochs, "epochs", minimum=0, allow_none=False)
    initial_epoch = data_adapter.check_count(initial_epoch, "initial_epoch", minimum=0, allow_none=False)
    validation_freq = data_adapter.check_count(validation_freq, "validation_freq", allow_none=False)
    n = strategy._num_workers
    k = _steps_per_execution(model)
    if steps_per_epoch % k:
        raise ValueError(f"Model.fit under ParameterServerStrategy: steps_per_epoch ({steps_per_epoch}) must be a "
                         f"multiple of steps_per_execution ({k}): each scheduled call runs {k} steps on a worker")
    if strategy.synchronous and (steps_per_epoch // k) % n:
        raise ValueError(f"Model.fit under a synchronous ParameterServerStrategy: steps_per_epoch "
                         f"({steps_per_epoch}) must be a multiple of the {n} workers x steps_per_execution ({k}) "
                         "(a round is one step per worker)")
    val_fn = None
    if validation_data is not None:
        val_fn = _creator(validation_data, None, "fit (validation_data)")
        require_steps(validation_steps, "validation_steps", "fit")
    verbose = 1 if verbose == "auto" else int(verbose)
    cbs = callbacks if isinstance(callbacks, CallbackList) else CallbackList(
        callbacks, add_history=True, add_progbar=verbose != 0, model=model, verbose=verbose, epochs=epochs,
        steps=steps_per_epoch)
    coordinator = coordinator_of(strategy)
    totals = _Totals(model, dataset_fn, strategy)
    step = _KerasStep(model, train=True, steps=k)
    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    model.stop_training = False
    cbs.on_train_begin()
    if getattr(model, "_initial_epoch", None) is not None:       # BackupAndRestore resumes a run
        initial_epoch, model._initial_epoch = model._initial_epoch, None
    logs = {}
    for epoch in range(initial_epoch, epochs):
        totals.reset()
        cbs.on_epoch_begin(epoch)
        # one scheduled call per k steps; callbacks see its first and last step's index, as TF's
        logs = _run_steps(coordinator, step, iterator, steps_per_epoch // k, totals,
                          lambda i: cbs.on_train_batch_begin(i * k),
                          lambda i, logs: cbs.on_train_batch_end(i * k + k - 1, logs), False,
                          lambda: model.stop_training, n if strategy.synchronous else 1)
        epoch_logs = dict(logs)
        if val_fn is not None and (epoch + 1) % validation_freq == 0:
            val_logs = _evaluate_loop(coordinator, model, val_fn, validation_steps, cbs, strategy)
            epoch_logs.update({"val_" + k: v for k, v in val_logs.items()})
        cbs.on_epoch_end(epoch, epoch_logs)
        logs = epoch_logs
        if model.stop_training:
            break
    cbs.on_train_end(logs)
    return model.history


def _steps_per_execution(model):
    k = getattr(model, "_steps_per_execution", 1)
    if k == "auto" or k is None:
        return 1
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"Model.fit under ParameterServerStrategy: steps_per_execution must be a positive int, got "
                         f"{k!r}")
    return int(k)


def _evaluate_loop(coordinator, model, dataset_fn, steps, cbs, strategy):
    """``steps`` read-only steps, ``steps_per_execution`` of them per scheduled call (the last
    call runs what is left, as Keras' last execution); callbacks get each call's first and last
    step index."""
    totals = _Totals(model, dataset_fn, strategy)
    totals.reset()
    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    k = min(_steps_per_execution(model), steps)
    full, rest = divmod(steps, k)
    calls = [_KerasStep(model, train=False, steps=k)] * full
    if rest:
        calls.append(_KerasStep(model, train=False, steps=rest))
    cbs.on_test_begin()
    logs = _run_steps(coordinator, calls, iterator, len(calls), totals, lambda i: cbs.on_test_batch_begin(i * k),
                      lambda i, logs: cbs.on_test_batch_end(min(i * k + k, steps) - 1, logs), True)
    cbs.on_test_end(logs)
    return logs


def evaluate(strategy, model, x, y, verbose, steps, callbacks, return_dict):
    """``model.evaluate`` on the strategy's workers: read-only steps (see the module)."""
    from tensorweave.keras.callbacks import CallbackList
    from tensorweave.keras.engine import data_adapter
    from tensorweave.keras.utils.dataset_creator import require_steps
    dataset_fn = _creator(x, y, "evaluate")
    require_steps(steps, "steps", "evaluate")
    steps = data_adapter.check_count(steps, "steps")
    verbose = 1 if verbose == "auto" else int(verbose)
    cbs = CallbackList(callbacks, add_progbar=verbose != 0, model=model, verbose=verbose, epochs=1, steps=steps)
    logs = _evaluate_loop(coordinator_of(strategy), model, dataset_fn, steps, cbs, strategy)
    if return_dict:
        return logs
    values = [logs[name] for name in model.metrics_names if name in logs]
    return values[0] if len(values) == 1 else values


__all__ = ["fit", "evaluate", "coordinator_of"]
