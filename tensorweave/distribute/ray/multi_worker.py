"""``tw.distribute.MultiWorkerMirroredStrategy``: Keras ``fit`` on the Ray workers, data parallel.

TF2's names: ``MultiWorkerMirroredStrategy(cluster_resolver=None, communication_options=None)``,
``scope()``, ``num_replicas_in_sync``, ``cluster_resolver``; plus ``failure_config`` (Ray
Train's :class:`FailureConfig`: restart from the latest checkpoint, or elastic). A model
compiled inside ``strategy.scope()`` trains on the workers of
:func:`~tensorweave.distribute.ray.connect` (the connected cluster, or one the resolver
starts): ``fit`` sends each worker the model's config, weights, compile config and optimizer
state (the ``.keras`` document, no pickles of model objects) and the data; each worker
rebuilds the model (or keeps the one of an earlier fit of the same model) and runs the
steps the driver asks for (``multi_worker_replica.py``) on its shard of every global batch,
all-reducing ``n_i * gradient_i`` and the row counts ``n_i`` after each backward pass (shared
memory on one node; compressed with ``communication_options.compression``), so every worker
applies the gradient of the whole global batch — the update single-process ``fit`` makes.

The driver runs Keras' loop and the callbacks (``multi_worker_fit.py``): logs are the global
batch's loss and every metric combined over the workers; validation data is sharded over the
workers with the metric states combined the same way. Afterwards the driver's model holds
the workers' weights and optimizer state.

Sharding: arrays, and ``tw.data`` pipelines under ``AutoShardPolicy.DATA`` (or ``AUTO``
without files), follow TF's DATA with rebatching: every worker reads the whole pipeline and
keeps its balanced slice of the rows of each global batch (``layout.balanced_bounds``: with
``B`` rows and ``n`` workers the first ``B % n`` get one more; a worker whose slice is empty
contributes zero). A pipeline under FILE (or ``AUTO`` over files), OFF or HINT
(``dataset.with_options``) is read by each worker on its own — its files ``i::n``, all of it,
or its ``SHARD_HINT`` shard — and cut into pieces of ``batch_sizes_for_worker`` rows, so a
step's pieces add up to one global batch; the workers agree each step whether any has input
left (one small all-reduce), those without step with no rows (``tw.data.sharding``,
:meth:`experimental_distribute_dataset`). Validation data is split by the same policy (TF
evaluates through the same ``experimental_distribute_dataset``). Arrays are batched as ``fit`` does,
with the same shuffling permutation on every worker (seeded per epoch from the driver's
NumPy generator). A worker that raises surfaces in the driver as the original exception type
with ``.rank``. A model class with its own ``train_step`` keeps it on the workers (its
optimizer's ``apply`` all-reduces the gradients, weighted by the rows, first); the classes of the
model and its layers that are not tensorweave's travel with the model.

>>> import tensorweave as tw                                          # doctest: +SKIP
>>> strategy = tw.distribute.MultiWorkerMirroredStrategy(
...     tw.distribute.RayClusterResolver(num_workers=2),
...     failure_config=tw.distribute.FailureConfig(max_failures=2))    # doctest: +SKIP
>>> with strategy.scope():                                            # doctest: +SKIP
...     model = tw.keras.Sequential([tw.keras.layers.Dense(1)])
...     model.compile("sgd", "mse")
>>> model.fit(x, y, batch_size=64, epochs=2,
...           callbacks=[tw.keras.callbacks.BackupAndRestore("/tmp/run")])   # doctest: +SKIP
"""
import contextlib
import threading

import numpy as np

from tensorweave.distribute.ray.multi_worker_fit import FailureConfig

_state = threading.local()


def multi_worker_strategy():
    """The innermost active :class:`MultiWorkerMirroredStrategy` scope on this thread, or None."""
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


class RayClusterResolver:
    """TF's cluster resolver for Ray: the cluster to train on. ``address``/``num_workers`` as
    :func:`~tensorweave.distribute.ray.connect`; when a cluster is already connected it is used."""

    def __init__(self, address=None, num_workers=None, resources_per_worker=None):
        self.address = address
        self.num_workers = num_workers
        self.resources_per_worker = resources_per_worker
        self.task_type, self.task_id = "worker", 0

    def cluster(self):
        from tensorweave.distribute.ray import cluster as rc
        c = rc.current()
        if c is None:
            c = rc.connect(self.address, num_workers=self.num_workers or 1,
                           resources_per_worker=self.resources_per_worker)
        elif self.num_workers is not None and c.num_workers != self.num_workers:
            raise ValueError(f"RayClusterResolver: {self.num_workers} workers asked for, but the connected cluster "
                             f"has {c.num_workers}. Hint: tw.distribute.shutdown() first")
        return c

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        return {}


class MultiWorkerMirroredStrategy:
    """Synchronous data-parallel training of Keras models on Ray workers (see the module)."""

    def __init__(self, cluster_resolver=None, communication_options=None, failure_config=None):
        from tensorweave.distribute.compression import CommunicationOptions
        if cluster_resolver is not None and not hasattr(cluster_resolver, "cluster"):
            raise TypeError(f"MultiWorkerMirroredStrategy: cluster_resolver must be a RayClusterResolver (or have "
                            f"a cluster() method), got {type(cluster_resolver).__name__}")
        if communication_options is not None and not isinstance(communication_options, CommunicationOptions):
            raise TypeError("MultiWorkerMirroredStrategy: communication_options must be a "
                            "tw.distribute.experimental.CommunicationOptions, got "
                            f"{type(communication_options).__name__}")
        if failure_config is not None and not isinstance(failure_config, FailureConfig):
            raise TypeError(f"MultiWorkerMirroredStrategy: failure_config must be a tw.distribute.FailureConfig, got "
                            f"{type(failure_config).__name__}")
        self.cluster_resolver = cluster_resolver or RayClusterResolver()
        self.communication_options = communication_options or CommunicationOptions()
        self.failure_config = failure_config or FailureConfig()
        self.last_fit_traffic = None

    @property
    def cluster(self):
        return self.cluster_resolver.cluster()

    @property
    def num_replicas_in_sync(self):
        return self.cluster.num_workers

    @property
    def extended(self):
        return self

    def experimental_distribute_dataset(self, dataset, options=None):
        """``dataset`` (global batches) split over the workers by its
        ``options().experimental_distribute.auto_shard_policy`` (``tw.data.sharding``): a
        :class:`~tensorweave.distribute.ray.multi_worker_data.DistributedDataset` that ``fit``
        trains on and that iterates as per-replica batches."""
        from tensorweave.distribute.ray.multi_worker_data import DistributedDataset
        return DistributedDataset(dataset, self.num_replicas_in_sync)

    def experimental_local_results(self, value):
        """The per-replica values of ``value`` as a tuple (a plain value: a 1-tuple)."""
        from tensorweave.distribute.ray.multi_worker_data import PerReplica
        return value.values if isinstance(value, PerReplica) else (value,)

    @contextlib.contextmanager
    def scope(self):
        """Models compiled inside train on the workers."""
        stack = _state.__dict__.setdefault("stack", [])
        stack.append(self)
        try:
            yield self
        finally:
            stack.pop()

    # ---- fit ---------------------------------------------------------------------------------
    def fit(self, model, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, class_weight=None, sample_weight=None,
            initial_epoch=0, steps_per_epoch=None, validation_steps=None, validation_batch_size=None,
            validation_freq=1):
        """``model.fit`` on the workers (called by ``Model.fit`` for a model compiled in the scope)."""
        from tensorweave.keras.callbacks import CallbackList
        from tensorweave.keras.engine import data_adapter
        epochs = data_adapter.check_count(epochs, "epochs", minimum=0, allow_none=False)
        initial_epoch = data_adapter.check_count(initial_epoch, "initial_epoch", minimum=0, allow_none=False)
        validation_freq = data_adapter.check_count(validation_freq, "validation_freq", allow_none=False)
        validation_split = data_adapter.check_validation_split(validation_split)
        if validation_split and validation_data is None:
            if not isinstance(x, (np.ndarray, list, tuple, dict)):
                raise ValueError("validation_split is only supported for array inputs; pass validation_data")
            arrays = tuple(data_adapter._as_arrays(a) for a in (x, y, sample_weight))
            (x, y, sample_weight), validation_data = data_adapter.train_validation_split(arrays, validation_split)
        data = _data_spec(x, y, sample_weight, batch_size, shuffle, class_weight, steps_per_epoch)
        validation_data = _validation_spec(validation_data, self.num_replicas_in_sync)
        steps = (data_adapter.DataHandler(data["dataset"], None, None, None, False, None, steps_per_epoch)
                 if "dataset" in data else data_adapter.DataHandler(*data["arrays"], batch_size, False, None,
                                                                     steps_per_epoch)).steps_per_epoch
        if "dataset" in data and not _sliced_by_rows(data["dataset"], self.num_replicas_in_sync):
            steps = steps_per_epoch     # each worker reads its own pipeline: the count is known at its end
        verbose = 1 if verbose == "auto" else int(verbose)
        cbs = callbacks if isinstance(callbacks, CallbackList) else CallbackList(
            callbacks, add_history=True, add_progbar=verbose != 0, model=model, verbose=verbose, epochs=epochs,
            steps=steps)
        args = {"seed": int(np.random.randint(2 ** 31 - 1)), "compression": self.communication_options.compression,
                "validation": {"validation_data": validation_data, "validation_steps": validation_steps,
                               "validation_batch_size": validation_batch_size or batch_size,
                               "validation_freq": validation_freq} if validation_data is not None else {}}
        from tensorweave.distribute.ray.multi_worker_fit import FitRun
        run = FitRun(self, model, data, args, cbs, self.failure_config)
        history = run.fit(initial_epoch, epochs)
        self.last_fit_traffic = _sum_traffic(run.traffic())
        return history


def _sliced_by_rows(dataset, num_workers):
    """Whether the workers slice the global batches (``AutoShardPolicy.DATA``, or ``AUTO``
    without files); raises TF's errors for a FILE sharding that cannot be done."""
    from tensorweave.data import sharding
    return sharding.worker_pipeline(dataset, num_workers, 0)[0] == sharding.P.DATA


def _validation_spec(validation_data, num_workers):
    """``validation_data`` as the workers get it (a ``DistributedDataset``: its pipeline); a
    pipeline's FILE sharding that cannot be done fails here, before any worker is asked."""
    from tensorweave.data import Dataset
    from tensorweave.distribute.ray.multi_worker_data import DistributedDataset
    if isinstance(validation_data, DistributedDataset):
        validation_data = validation_data.dataset
    if isinstance(validation_data, Dataset):
        _sliced_by_rows(validation_data, num_workers)
    return validation_data


def _sum_traffic(per_worker):
    """``{"sent": bytes, "uncompressed": bytes}`` over the workers of the last fit's gradient all-reduces."""
    return {k: int(sum(t[k] for t in per_worker)) for k in ("sent", "uncompressed")}


def package_model(model):
    """The model as plain data: the ``.keras`` document and its arrays."""
    from tensorweave.keras.saving import model_document_and_tensors
    doc, tensors = model_document_and_tensors(model)
    if doc["compile_config"] is None:
        raise ValueError(f"MultiWorkerMirroredStrategy: model '{model.name}' must be compiled (with a loss and "
                         "an optimizer the workers can rebuild from their names or configs)")
    import hashlib
    import json
    import uuid
    # the workers keep the model they built (and its traced step) for the next fit of the
    # same driver model with the same architecture and compile config; only the values travel
    token = model.__dict__.setdefault("_multi_worker_token", uuid.uuid4().hex)
    shape = {k: doc[k] for k in ("class_name", "config", "build_config", "compile_config")}
    doc["token"] = token + "-" + hashlib.sha1(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:12]
    return doc, tensors, _custom_objects(model)


def _custom_objects(model):
    """The classes of the model, its layers and its compiled metrics and losses that are not
    tensorweave's (a subclassed model with its own ``train_step``, custom layers, a metric class
    of the user's): the workers rebuild with them (they travel by Ray's own serialization, as the
    step functions do; the compile config names them by class)."""
    from tensorweave.core import nest
    from tensorweave.keras import losses, metrics
    out = {}

    def keep(obj):
        cls = type(obj)
        if not cls.__module__.startswith("tensorweave."):
            out[cls.__name__] = cls

    def visit(layer):
        keep(layer)
        for sub in getattr(layer, "_layers", ()):
            visit(sub)
    visit(model)
    compiled = getattr(model, "_compile_metrics", None)
    for spec in getattr(compiled, "spec", None) or ():
        for m in nest.flatten(spec) if spec is not None else ():
            if isinstance(m, metrics.Metric):
                keep(m)
    for f in getattr(getattr(model, "_compile_loss", None), "fns", None) or ():
        if isinstance(f, losses.Loss):
            keep(f)
    return out


def package_values(package):
    """``({weight key: array}, [optimizer variable arrays] or None)`` of a package."""
    doc, tensors, _ = package
    weights = {k: tensors[ref] for k, ref in doc["weights"].items()}
    state = doc["optimizer_state"]
    return weights, None if state is None else [tensors[ref] for ref in state["variables"]]


def unpack_into(model, weights, opt_values):
    from tensorweave.keras.engine.weights_io import _keyed_weights
    keyed = _keyed_weights(model)
    for k, v in keyed.items():
        v.assign(weights[k])
    opt = model.optimizer
    if opt_values is not None and opt is not None:
        if not opt.built:
            opt.build(model.trainable_variables)
        for v, value in zip(opt.variables, opt_values):
            v.assign(value)


def _data_spec(x, y, sample_weight, batch_size, shuffle, class_weight, steps_per_epoch):
    from tensorweave.data import Dataset
    from tensorweave.distribute.ray.multi_worker_data import DistributedDataset
    if isinstance(x, DistributedDataset):
        x = x.dataset
    if isinstance(x, Dataset):
        if y is not None or sample_weight is not None:
            raise ValueError("`y` and `sample_weight` must not be given when `x` is a Dataset")
        return {"dataset": x, "steps_per_epoch": steps_per_epoch, "class_weight": class_weight}
    return {"arrays": (x, y, sample_weight), "batch_size": batch_size, "shuffle": shuffle,
            "class_weight": class_weight, "steps_per_epoch": steps_per_epoch}
