"""``tw.distribute.MultiWorkerMirroredStrategy``: Keras ``fit`` on the Ray workers, data parallel.

TF2's names: ``MultiWorkerMirroredStrategy(cluster_resolver=None, communication_options=None)``,
``scope()``, ``num_replicas_in_sync``, ``cluster_resolver``. A model compiled inside
``strategy.scope()`` trains on the workers of :func:`~tensorweave.distribute.ray.connect`
(the connected cluster, or one the resolver starts): ``fit`` sends each worker the model's
config, weights, compile config and optimizer state once (the ``.keras`` document, no
pickles of model objects), and the data; each worker rebuilds the model and runs Keras'
own ``fit`` loop (a compiled step, as Keras') on its shard of every global batch, and after
each step's backward pass
all-reduces ``n_i * gradient_i`` and the row counts ``n_i`` over the cluster's
communicator (shared memory on one node), so every worker applies the gradient of the
whole global batch — the update single-process ``fit`` makes. Afterwards the driver's model
takes rank 0's weights and optimizer state, and ``fit`` returns rank 0's ``History`` (the
loss is the global batch's, all-reduced; other metrics are rank 0's shard's).

Sharding follows TF's ``AutoShardPolicy.DATA`` with rebatching: every worker reads the
whole pipeline and keeps its balanced slice of the rows of each global batch
(``layout.balanced_bounds``: with ``B`` rows and ``n`` workers the first ``B % n`` get one
more; a worker whose slice is empty contributes zero). Arrays are batched as ``fit`` does,
with the same shuffling permutation on every worker (seeded from the driver's NumPy
generator); a ``tw.data`` pipeline is sharded with a ``map`` on each worker.

``validation_data``/``validation_split`` are evaluated by every worker on all of the validation
data (redundant but needs no extra collective; the numbers are the single-process ones).
A worker that raises surfaces in the driver as the original exception type with ``.rank``.
Callbacks are not run yet (a clear error).
Custom train steps are not used on the workers (the synchronized step replaces
``train_step``); custom layers must be importable by the workers (``custom_objects``).

>>> import tensorweave as tw                                          # doctest: +SKIP
>>> strategy = tw.distribute.MultiWorkerMirroredStrategy(
...     tw.distribute.RayClusterResolver(num_workers=2))               # doctest: +SKIP
>>> with strategy.scope():                                            # doctest: +SKIP
...     model = tw.keras.Sequential([tw.keras.layers.Dense(1)])
...     model.compile("sgd", "mse")
>>> model.fit(x, y, batch_size=64, epochs=2)                          # doctest: +SKIP
"""
import contextlib
import threading

import numpy as np

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

    def __init__(self, cluster_resolver=None, communication_options=None):
        if cluster_resolver is not None and not hasattr(cluster_resolver, "cluster"):
            raise TypeError(f"MultiWorkerMirroredStrategy: cluster_resolver must be a RayClusterResolver (or have "
                            f"a cluster() method), got {type(cluster_resolver).__name__}")
        self.cluster_resolver = cluster_resolver or RayClusterResolver()
        self.communication_options = communication_options

    @property
    def cluster(self):
        return self.cluster_resolver.cluster()

    @property
    def num_replicas_in_sync(self):
        return self.cluster.num_workers

    @property
    def extended(self):
        return self

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
        from tensorweave.keras.callbacks import History
        from tensorweave.keras.engine import data_adapter
        if callbacks:
            raise NotImplementedError("MultiWorkerMirroredStrategy.fit: callbacks are not supported on Ray workers yet")
        validation_split = data_adapter.check_validation_split(validation_split)
        if validation_split and validation_data is None:
            if not isinstance(x, (np.ndarray, list, tuple, dict)):
                raise ValueError("validation_split is only supported for array inputs; pass validation_data")
            arrays = tuple(data_adapter._as_arrays(a) for a in (x, y, sample_weight))
            (x, y, sample_weight), validation_data = data_adapter.train_validation_split(arrays, validation_split)
        package = _package(model)
        data = _data_spec(x, y, sample_weight, batch_size, shuffle, class_weight, steps_per_epoch)
        args = {"epochs": epochs, "initial_epoch": initial_epoch, "verbose": 0,
                "seed": int(np.random.randint(2 ** 31 - 1)),
                "validation": {"validation_data": validation_data, "validation_steps": validation_steps,
                               "validation_batch_size": validation_batch_size or batch_size,
                               "validation_freq": validation_freq} if validation_data is not None else {}}
        results = self.cluster.run(_worker_fit, package, data, args)
        history_dict, weights, opt_values = results[0]
        _unpack_into(model, weights, opt_values)
        history = History()
        history.set_model(model)
        history.history = history_dict
        history.epoch = list(range(initial_epoch, initial_epoch + len(next(iter(history_dict.values()), []))))
        model.history = history
        return history


def _package(model):
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
    return doc, tensors


def _model_on_worker(worker, package, comm):
    """The worker's model for ``package``: the one kept from an earlier fit of the same model
    (its weights and optimizer state set from the package), else rebuilt from the document."""
    from tensorweave.keras.engine.weights_io import _keyed_weights
    doc, tensors = package
    kept = worker.store.setdefault("multi_worker_models", {})
    model, comm_box = kept.get(doc["token"], (None, [comm]))
    comm_box[0] = comm          # after an error the cluster's groups are new ones
    if model is None:
        kept.clear()                                   # one model at a time
        model = _restore(package)
        model.train_step = _synced_step(model, comm_box)
        model.make_train_function(force=True)
        kept[doc["token"]] = (model, comm_box)
        return model
    for key, var in _keyed_weights(model).items():
        var.assign(tensors[doc["weights"][key]])
    state, opt = doc["optimizer_state"], model.optimizer
    if state is not None:
        if not opt.built:
            keyed = _keyed_weights(model)
            opt.build([keyed[k] for k in state["built_for"]])
        for v, ref in zip(opt.variables, state["variables"]):
            v.assign(tensors[ref])
    return model


def _restore(package):
    from tensorweave.keras.saving import restore_model
    doc, tensors = package
    sizes = [a.nbytes for a in tensors.values()] or [0]
    return restore_model(doc, lambda r: tensors[r], "the driver's model", budget=(max(sizes), sum(sizes)))


def _state_of(model):
    """``({weight key: array}, [optimizer variable arrays])``."""
    from tensorweave.keras.engine.weights_io import _keyed_weights
    weights = {k: v.numpy() for k, v in _keyed_weights(model).items()}
    opt = model.optimizer
    return weights, [v.numpy() for v in opt.variables] if opt is not None and opt.built else None


def _unpack_into(model, weights, opt_values):
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
    if isinstance(x, Dataset):
        if y is not None or sample_weight is not None:
            raise ValueError("`y` and `sample_weight` must not be given when `x` is a Dataset")
        return {"dataset": x, "steps_per_epoch": steps_per_epoch, "class_weight": class_weight}
    return {"arrays": (x, y, sample_weight), "batch_size": batch_size, "shuffle": shuffle,
            "class_weight": class_weight, "steps_per_epoch": steps_per_epoch}


def _rows(n, index, size):
    from tensorweave.distribute.layout import balanced_bounds
    return balanced_bounds(n, size)[index]


def _local(batch, index, size):
    """This worker's rows of a global batch ``(x, y, sample_weight)`` (nested arrays/tensors)."""
    import tensorweave as tw
    first = tw.nest.flatten(batch[0])[0]
    lo, hi = _rows(int(first.shape[0]), index, size)
    return tuple(None if part is None else tw.nest.map_structure(lambda t: t[lo:hi], part) for part in batch)


def _shard_dataset(dataset, index, size):
    """The dataset whose elements are this worker's rows of each element (a global batch)."""
    import tensorweave as tw

    def rows(*element):
        element = element[0] if len(element) == 1 else element
        b = tw.shape(tw.nest.flatten(element)[0])[0]
        q, r = b // size, b % size
        lo = index * q + tw.minimum(index, r)
        hi = lo + q + tw.cast(index < r, b.dtype)
        return tw.nest.map_structure(lambda t: t[lo:hi], element)
    return dataset.map(rows)


def _worker_fit(worker, package, data, args):
    """On each worker: rebuild the model, train on this worker's rows, return rank 0's state."""
    import tensorweave as tw
    from tensorweave.keras.engine import data_adapter
    np.random.seed(args["seed"])                       # the same shuffling on every worker
    tw.random.set_seed(args["seed"])
    comm = worker.comm()
    index, size = comm.index, comm.size
    model = _model_on_worker(worker, package, comm)
    if "dataset" in data:
        x = _shard_dataset(data["dataset"], index, size)
        fit_args = {"steps_per_epoch": data["steps_per_epoch"], "class_weight": data["class_weight"]}
    else:
        handler = data_adapter.DataHandler(*data["arrays"], data["batch_size"], data["shuffle"], data["class_weight"],
                                           data["steps_per_epoch"])
        epochs = args["epochs"] - args["initial_epoch"]

        def batches():
            for _ in range(epochs):
                for batch in handler.epoch():
                    yield _local(batch, index, size)
        x = batches()
        fit_args = {"steps_per_epoch": handler.steps_per_epoch}
    # validation: every worker evaluates all of the validation data (the same numbers on each)
    history = model.fit(x, epochs=args["epochs"], initial_epoch=args["initial_epoch"], verbose=0, shuffle=False,
                        **fit_args, **args["validation"])
    if index != 0:
        return None
    weights, opt_values = _state_of(model)
    return {k: [float(v) for v in vs] for k, vs in history.history.items()}, weights, opt_values


def _synced_step(model, comm_box):
    """A train step that applies the global batch's gradient ``sum_i n_i g_i / sum_i n_i``:
    written with ops, so Keras compiles it into one ``tw.function`` like its own step, the
    all-reduce being a ``numpy_function`` node (one per step, on the concatenation of
    ``n_i * g_i``, ``n_i * loss_i`` and ``n_i`` in the weights' widest float dtype)."""
    import tensorweave as tw
    from tensorweave.keras.engine import data_adapter

    def all_reduce(flat):
        return comm_box[0].all_reduce(flat)

    def train_step(data):
        x, y, sample_weight = data_adapter.unpack_x_y_sample_weight(data)
        variables = model.trainable_variables
        acc = max((v.dtype for v in variables if v.dtype.is_floating), key=lambda d: d.size, default=tw.float32)
        rows_here = tw.shape(tw.nest.flatten(x)[0])[0]
        n = tw.cast(rows_here, acc)
        some = rows_here > 0
        model._clear_losses()
        with tw.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x, y, y_pred, sample_weight, training=True)
        grads = tape.gradient(loss, variables)
        zero = tw.constant(0.0, acc)
        parts = [tw.zeros([int(np.prod(v.shape.as_list(), dtype=np.int64))], acc) if g is None else
                 tw.where(some, tw.reshape(tw.cast(tw.convert_to_tensor(g), acc), [-1]) * n, zero)
                 for g, v in zip(grads, variables)]
        parts.append(tw.stack([tw.where(some, tw.cast(loss, acc) * n, zero), n]))
        flat = tw.concat(parts, 0)
        total = tw.reshape(tw.numpy_function(all_reduce, [flat], acc), [-1])
        rows = total[-1]
        updates, off = [], 0
        for v in variables:
            size = int(np.prod(v.shape.as_list(), dtype=np.int64))
            updates.append((tw.cast(tw.reshape(total[off:off + size] / rows, v.shape.as_list()), v.dtype), v))
            off += size
        if updates:
            model.optimizer.apply_gradients(updates)
        model._loss_tracker.update_state(total[-2] / rows, sample_weight=rows)
        if model._compile_metrics is not None and y is not None:
            model._compile_metrics.update_state(y, y_pred, sample_weight)
        return model.get_metrics_result()
    return train_step
