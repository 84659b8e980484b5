"""The worker side of ``MultiWorkerMirroredStrategy``: one :class:`Replica` per Ray worker.

The driver's fit loop (``multi_worker_fit.py``) calls the functions here on the active
workers (``Cluster.run``), one call per chunk of steps:

- :func:`begin`: the model (rebuilt from the ``.keras`` document, or the one kept from an
  earlier fit of the same model, its values set from the document), the data, the seed, the
  active ranks and the gradient compression;
- :func:`run_steps`: ``n`` steps (or up to the end of the epoch) from a position the driver
  names ``(epoch, step)``: a replica that is elsewhere (a worker that joined, or one whose
  group changed under it) re-makes that epoch's batches (seeded per epoch) and skips to the
  step; returns the logs, the metrics reduced over the active ranks;
- :func:`evaluate`: the validation data sharded over the active ranks, metric states reduced;
- :func:`state`, :func:`progress`: what the driver syncs from, and where a replica stands;
- :func:`rebox`: elastic training: the replicated state (weights, optimizer variables) of
  one holder is boxed onto a new set of active ranks (``B`` on ``[holder]`` -> ``B`` on the
  new placement, :func:`~tensorweave.distribute.boxing.run_boxing_on_rank`: send/recv over
  the cluster's transport, never through the driver).

Every worker reads each *global* batch and keeps its balanced slice of the rows
(``layout.balanced_bounds``), so changing the active ranks re-shards the data at once.
:func:`replica_context` tells code running on a worker (a data pipeline's function, a
test's fault hook) its rank and replica id.
"""
import itertools

import numpy as np

_CONTEXT = {}


class ReplicaContext:
    """Where the code running on a worker is: ``rank`` (the cluster's), ``replica_id_in_sync_group``
    and ``num_replicas_in_sync`` (among the active ranks), ``epoch``, ``step`` (within the epoch)."""

    __slots__ = ("rank", "replica_id_in_sync_group", "num_replicas_in_sync", "epoch", "step")

    def __init__(self, rank, index, size, epoch, step):
        self.rank, self.replica_id_in_sync_group, self.num_replicas_in_sync = rank, index, size
        self.epoch, self.step = epoch, step

    def __repr__(self):
        return (f"ReplicaContext(rank={self.rank}, replica {self.replica_id_in_sync_group} of "
                f"{self.num_replicas_in_sync}, epoch {self.epoch}, step {self.step})")


def replica_context():
    """The :class:`ReplicaContext` of the step running on this worker, or None outside one."""
    return _CONTEXT.get("now")


# ---- the model on the worker -----------------------------------------------------------------
def _restore(package):
    from tensorweave.keras.saving import restore_model
    doc, tensors, custom = package
    sizes = [a.nbytes for a in tensors.values()] or [0]
    return restore_model(doc, lambda r: tensors[r], "the driver's model", custom_objects=custom,
                         budget=(max(sizes), sum(sizes)))


def _set_values(model, package):
    """The package's weights and optimizer state into an existing model."""
    from tensorweave.keras.engine.weights_io import _keyed_weights
    doc, tensors, _ = package
    for key, var in _keyed_weights(model).items():
        var.assign(tensors[doc["weights"][key]])
    state, opt = doc["optimizer_state"], model.optimizer
    if state is not None:
        if not opt.built:
            keyed = _keyed_weights(model)
            opt.build([keyed[k] for k in state["built_for"]])
        for v, ref in zip(opt.variables, state["variables"]):
            v.assign(tensors[ref])


def state_of(model):
    """``({weight key: array}, [optimizer variable arrays] or None)``."""
    from tensorweave.keras.engine.weights_io import _keyed_weights
    weights = {k: v.numpy() for k, v in _keyed_weights(model).items()}
    opt = model.optimizer
    return weights, [v.numpy() for v in opt.variables] if opt is not None and opt.built else None


def _variables(model):
    """Every variable of the replicated training state, in one order on every worker (the
    optimizer built first: a worker that joins before any step has its slots too)."""
    from tensorweave.keras.engine.weights_io import _keyed_weights
    keyed = _keyed_weights(model)
    opt = model.optimizer
    if opt is not None and not opt.built:
        opt.build(model.trainable_variables)
    # the loss tracker is replicated too (fed the global batch's loss): a replica that missed
    # the step another completed takes its value with the weights
    tracker = list(model._loss_tracker.variables) if model._loss_tracker is not None else []
    return list(keyed.values()) + (list(opt.variables) if opt is not None else []) + tracker


# ---- one replica -----------------------------------------------------------------------------
class Replica:
    """A worker's model, data position and communicator for one fit (kept in ``worker.store``)."""

    def __init__(self, worker):
        self.worker = worker
        self.model = None
        self.token = None
        self.comm_box = [None]
        self.codec_box = [None]
        self.rows_box = [0]
        self.custom_step = False
        self.bytes = {"sent": 0, "uncompressed": 0}
        self.active = ()
        self.epoch, self.pos, self._taken, self._it = None, 0, 0, None
        self.split, self._passes = None, {}

    # the active ranks and their communicator (fetched again on every call: after an error
    # the cluster makes fresh groups)
    def set_active(self, active):
        self.active = tuple(active)
        self.comm = self.worker.comm(self.active)
        self.comm_box[0] = self.comm
        self.index, self.size = self.comm.index, self.comm.size

    def begin(self, package, data, args, active, fresh):
        from tensorweave.distribute import compression
        from tensorweave.keras.engine import data_adapter
        doc = package[0]
        if fresh or self.model is None or self.token != doc["token"]:
            from tensorweave.keras.engine.model import Model
            self.model = _restore(package)
            # a model class with its own train_step keeps it: its optimizer's ``apply``
            # all-reduces the gradients first; else the synchronized step replaces Keras' own
            self.custom_step = type(self.model).train_step is not Model.train_step
            if self.custom_step:
                self.model.optimizer.apply = synced_apply(self.model.optimizer, self.comm_box, self.rows_box,
                                                          self.codec_box, self.bytes)
            else:
                self.model.train_step = synced_step(self.model, self.comm_box, self.codec_box, self.bytes)
            self.model.make_train_function(force=True)
            self.token = doc["token"]
        else:
            _set_values(self.model, package)
        self.codec_box[0] = compression.get(args.get("compression"))
        self.bytes.update(sent=0, uncompressed=0)
        self.seed = args["seed"]
        self.data, self.plan, self._template, self._pipelines = data, None, None, {}
        self._val_pipelines = {}
        self.split, self._passes = None, {}
        if "dataset" in data:
            self.handler = data_adapter.DataHandler(data["dataset"], None, None, None, False, data["class_weight"],
                                                    data["steps_per_epoch"])
        else:
            self.handler = data_adapter.DataHandler(*data["arrays"], data["batch_size"], data["shuffle"],
                                                    data["class_weight"], data["steps_per_epoch"])
        self.epoch, self.pos, self._taken, self._it = None, 0, 0, None
        self.active = tuple(active)     # its communicator is made by the next collective call (on every rank)

    def _seek(self, epoch, step):
        """Makes the next batch the ``step``-th of ``epoch`` (re-making the epoch's batches when
        this replica is elsewhere: the shuffling is seeded per epoch, so every worker makes the
        same batches, also one that joined late)."""
        import tensorweave as tw
        if self.epoch == epoch and self.pos == step and self._taken == step:
            return
        np.random.seed((self.seed + epoch) % 2 ** 32)
        tw.random.set_seed((self.seed + epoch) % 2 ** 31)
        if self.epoch != epoch or step == 0:
            self.split = None                  # a new epoch is cut for the active ranks of now
        self._it = self._epoch_batches(epoch)
        for _ in range(step):
            next(self._it, None)
        if self.epoch != epoch or step == 0:
            self.model.reset_metrics()
        self.epoch, self.pos, self._taken = epoch, step, step

    def _pipeline(self, n, i):
        """Worker ``i`` of ``n``'s rebuilt pipeline, kept (a shuffle in it moves on every epoch)."""
        from tensorweave.data import sharding
        if (n, i) not in self._pipelines:
            self._pipelines[(n, i)] = sharding.worker_pipeline(self.data["dataset"], n, i)
        return self._pipelines[(n, i)]

    def _epoch_batches(self, epoch):
        """This worker's batches of one epoch: its slice of each global batch (arrays, and
        datasets under ``AutoShardPolicy.DATA``), or the pieces of its own pipeline (FILE, OFF,
        HINT: ``tw.data.sharding.worker_pipeline``) — of every pipeline of the epoch's split
        it reads (:meth:`carry_over`), a step's pieces concatenated."""
        from tensorweave.data import sharding
        self.plan = None
        if "dataset" in self.data:
            policy, ds, sizes = self._pipeline(self.size, self.index)
            if policy != sharding.P.DATA:
                self.plan = (policy, ds, sizes)
        if self.plan is None:
            return (_local(b, self.index, self.size) for b in self.handler.epoch())
        if self.split is None:                 # (workers, the rank reading each worker's pipeline)
            self.split = (self.size, tuple(self.active))
        n, readers = self.split
        streams = [self._stream(n, i, epoch) for i, r in enumerate(readers) if r == self.worker.rank]
        return (_as_tensors(p) for p in sharding.zip_pieces(streams))

    def _stream(self, n, i, epoch):
        """The pieces of worker ``i`` of ``n``'s pipeline in ``epoch``, from its start. Its
        shuffles' pass counters are put back to where they stood when the epoch began (read from
        the rank's own pipeline for one it takes over), so a re-made stream repeats the pass."""
        from tensorweave.data import sharding
        from tensorweave.keras.engine import data_adapter
        _, ds, sizes = self._pipeline(n, i)
        if self._passes.get("epoch") != epoch:
            self._passes = {"epoch": epoch, "counters": sharding.pass_counters(self.plan[1])}
        sharding.set_pass_counters(ds, self._passes["counters"])
        own = data_adapter.DataHandler(ds, None, None, None, False, self.data["class_weight"], None)
        pieces = sharding.rebatch(own.epoch(), sizes, n)
        # the pass starts now (its shuffles draw their order), not at the first step: two
        # pipelines of one rank may share a node upstream of their shard (a file-name shuffle)
        first = next(pieces, None)
        return iter(()) if first is None else itertools.chain([first], pieces)

    def carry_over(self, active):
        """A change of the active ranks in the middle of an epoch of a pipeline under FILE, OFF or
        HINT: the epoch keeps its split — each lost rank's pipeline is read on by a survivor
        (the ``k``-th such pipeline by the ``k``-th active rank, cycling), its remaining pieces
        joining that survivor's own at every step — so the rest of the epoch trains on the
        global batches of the run without the change; the next epoch is cut for the new ranks.
        Every survivor holds the same split, so all make the same choice."""
        if self.split is None:
            return
        n, readers = self.split
        orphans = [i for i, r in enumerate(readers) if r not in active]
        readers = list(readers)
        for k, i in enumerate(orphans):
            readers[i] = active[k % len(active)]
        self.split = (n, tuple(readers))

    def _next_batch(self):
        """The next batch, or None at the end of the epoch. With a pipeline of its own, the
        workers agree (one all-reduce) and a worker whose input ran out steps with no rows."""
        batch = next(self._it, None)
        if self.plan is None:
            return batch
        if batch is not None and self._template is None:
            from tensorweave.data import sharding
            self._template = _as_tensors(sharding.empty_like(batch))
        more = self.comm.all_reduce(np.array([0.0 if batch is None else 1.0]))
        if float(more[0]) == 0.0:
            return None
        return batch if batch is not None else self._empty()

    def _empty(self):
        if self._template is None:
            self._template = _empty_from_spec(self.plan[1].element_spec)
        return self._template

    def steps(self, epoch, start, n, learning_rate):
        from tensorweave.keras.engine.model import _step_data
        self._seek(epoch, start)
        if learning_rate is not None:
            _set_learning_rate(self.model, learning_rate)
        fn = self.model.make_train_function()
        done, end = 0, False
        total = self.handler.steps_per_epoch if self.plan is None else self.data["steps_per_epoch"]
        while n is None or done < n:
            if total is not None and self.pos >= total:
                end = True
                break
            # the input pipeline's functions and the step see where they run
            _CONTEXT["now"] = ReplicaContext(self.worker.rank, self.index, self.size, epoch, self.pos)
            try:
                local = self._next_batch()
                if local is None:
                    end = True
                    break
                self._taken += 1
                self.model._build_compiled_metrics(local)
                self.rows_box[0] = _first_dim(local)
                fn(_step_data(local))
            finally:
                _CONTEXT.pop("now", None)
            self.pos += 1
            done += 1
        if total is not None and self.pos >= total:
            end = True
        # a custom step feeds the loss tracker its own rows' loss: combined like the other metrics
        return {"pos": self.pos, "end": end,
                "logs": reduced_logs(self.model, self.comm, train=not self.custom_step)}

    def evaluate(self, spec):
        from tensorweave.keras.engine.model import _step_data
        fn = self.model.make_test_function()
        self.model.reset_metrics()
        for local in self._validation_batches(spec):
            self.model._build_compiled_metrics(local)
            if _first_dim(local) == 0:
                continue                  # no rows here (a mean over none would be NaN); no collective inside
            fn(_step_data(local))
        return reduced_logs(self.model, self.comm, train=False)

    def _validation_batches(self, spec):
        """This worker's validation batches, split as the training data is (TF evaluates through
        the same ``experimental_distribute_dataset``): a pipeline under FILE, OFF or HINT is read
        by each worker on its own (its files ``i::n``, all of it, its hinted shard) and cut into
        ``batch_sizes_for_worker`` pieces, at most ``validation_steps`` of them; arrays and DATA
        pipelines give each worker its balanced slice of every global batch."""
        from tensorweave.data import Dataset, sharding
        from tensorweave.keras.engine import data_adapter
        vx, vy, vsw = data_adapter.unpack_x_y_sample_weight(spec["validation_data"])
        if isinstance(vx, Dataset) and vy is None and vsw is None:
            key = (self.size, self.index)
            if key not in self._val_pipelines:       # kept: a shuffle in it moves on every epoch
                self._val_pipelines[key] = sharding.worker_pipeline(vx, self.size, self.index)
            policy, ds, sizes = self._val_pipelines[key]
            if policy != sharding.P.DATA:
                own = data_adapter.DataHandler(ds, None, None, None, False, None, None)
                pieces = sharding.rebatch(own.epoch(), sizes, self.size)
                return (_as_tensors(p) for p in itertools.islice(pieces, spec["validation_steps"]))
        handler = data_adapter.DataHandler(vx, vy, vsw, spec["validation_batch_size"], False, None,
                                           spec["validation_steps"])
        return (_local(batch, self.index, self.size) for batch in handler.epoch())

    def rebox(self, holder, active):
        """The state of rank ``holder`` onto every rank of ``active`` (this one among them)."""
        from tensorweave.core.sbp import B
        from tensorweave.distribute.boxing import plan_boxing, run_boxing_on_rank
        from tensorweave.distribute.layout import Placement
        self.carry_over(tuple(active))
        self.set_active(active)
        variables = _variables(self.model)
        me = self.worker.rank
        # one message of the state's bytes (every dtype, exact bits): two sends to the same
        # rank back to back may arrive in either order over the object store (the rendezvous
        # is an async actor: Ray does not keep the order of its calls), so one plan, one send
        values = [np.asarray(v.numpy()) for v in variables]
        flat = np.concatenate([np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in values]) if values \
            else np.zeros(0, np.uint8)
        plan = plan_boxing(flat.shape, flat.dtype, Placement("cpu", [holder]), (B,), (B,),
                           Placement("cpu", list(active)))
        out = run_boxing_on_rank(plan, me, flat if me == holder else None, self.worker.comm)
        off = 0
        for v, a in zip(variables, values):
            v.assign(out[off:off + a.nbytes].view(a.dtype).reshape(a.shape))
            off += a.nbytes
        if self.codec_box[0] is not None:
            self.codec_box[0].reset()          # residuals belong to the old membership
        self._taken = -1                       # re-make the batches at the position the driver names next


def _set_learning_rate(model, value):
    opt = model.optimizer
    lr = opt._learning_rate
    current = float(lr) if isinstance(lr, (int, float)) else float(np.asarray(lr.numpy())) if hasattr(
        lr, "numpy") else None
    if current != value:
        opt.learning_rate = value


def _first_dim(batch):
    import tensorweave as tw
    for t in tw.nest.flatten(batch[0]):
        if t is not None:
            return int(t.shape[0])
    return 0


def _as_tensors(batch):
    import tensorweave as tw
    return tuple(None if part is None else tw.nest.map_structure(tw.convert_to_tensor, part) for part in batch)


def _empty_from_spec(spec):
    """A batch of no rows of a pipeline's ``(x, y, sample_weight)`` (unknown sizes: 0)."""
    import tensorweave as tw
    from tensorweave.keras.engine import data_adapter

    def zeros(s):
        return np.zeros([0] + [d or 0 for d in s.shape.as_list()[1:]], s.dtype.as_numpy_dtype)
    return _as_tensors(data_adapter.unpack_x_y_sample_weight(tw.nest.map_structure(zeros, spec)))


def _local(batch, index, size):
    """This worker's rows of a global batch ``(x, y, sample_weight)`` (nested arrays/tensors)."""
    import tensorweave as tw
    from tensorweave.distribute.layout import balanced_bounds
    first = tw.nest.flatten(batch[0])[0]
    lo, hi = balanced_bounds(int(first.shape[0]), size)[index]
    return tuple(None if part is None else tw.nest.map_structure(lambda t: t[lo:hi], part) for part in batch)


def reduced_logs(model, comm, train):
    """The model's metric results over the rows of every active rank: each metric's state
    variables are combined by their ``aggregation`` (sum; mean; only_first_replica) over
    ``comm``, the results read, and this rank's own states put back. In training the loss
    tracker is left out: the synchronized step already feeds it the global batch's loss."""
    from tensorweave.keras.engine.model import _to_floats
    metrics = [m for m in model.metrics if not (train and m is model._loss_tracker)]
    variables = [v for m in metrics for v in m.variables]
    if comm.size == 1 or not variables:
        return _to_floats(model.get_metrics_result())
    own = [v.numpy() for v in variables]
    parts = []
    for v, a in zip(variables, own):
        a = np.asarray(a, np.float64).reshape(-1)
        how = getattr(v, "aggregation", "sum")
        parts.append(a / comm.size if how == "mean" else a * (comm.index == 0) if how == "only_first_replica" else a)
    total = comm.all_reduce(np.concatenate(parts))
    off = 0
    for v, a in zip(variables, own):
        v.assign(total[off:off + a.size].reshape(np.shape(a)).astype(np.asarray(a).dtype))
        off += a.size
    try:
        return _to_floats(model.get_metrics_result())
    finally:
        for v, a in zip(variables, own):
            v.assign(a)


def synced_step(model, comm_box, codec_box, counts):
    """A train step that applies the global batch's gradient ``sum_i n_i g_i / sum_i n_i``:
    written with ops, so Keras compiles it into one ``tw.function`` like its own step, the
    all-reduce being a ``numpy_function`` node (one per step, on the concatenation of
    ``n_i * g_i``, ``n_i * loss_i`` and ``n_i`` in the weights' widest float dtype). With a
    compression (``codec_box[0]``) the gradient part travels compressed (error feedback per
    worker), the loss and row counts exactly; ``counts`` adds up the bytes this worker sent
    and what it would have sent uncompressed."""
    import tensorweave as tw
    from tensorweave.keras.engine import data_adapter

    def all_reduce(flat):
        return _all_reduce_gradients(flat, 2, comm_box, codec_box, counts)

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


def _all_reduce_gradients(flat, tail, comm_box, codec_box, counts):
    """The sum over the workers of ``flat`` (gradients, then ``tail`` exact values: losses and
    row counts), the gradients compressed when a compression is set; counts the bytes."""
    codec = codec_box[0]
    counts["uncompressed"] += flat.nbytes
    if codec is None:
        counts["sent"] += flat.nbytes
        return comm_box[0].all_reduce(flat)
    from tensorweave.distribute import compression
    grads, stats = flat[:-tail], flat[-tail:]
    counts["sent"] += codec.wire_bytes(grads.size) + stats.nbytes
    total, exact = compression.all_reduce(comm_box[0], grads, codec, key="gradients", exact=stats)
    return np.concatenate([total, exact]).astype(flat.dtype)


def synced_apply(optimizer, comm_box, rows_box, codec_box, counts):
    """``optimizer.apply`` for a model with its own ``train_step``: the gradients it is given
    (of this worker's rows' loss) become the global batch's, ``sum_i n_i g_i / sum_i n_i``
    (``n_i``: this step's rows here, read from ``rows_box`` when the step runs; a worker
    without rows contributes zeros), then the optimizer's own ``apply`` runs."""
    import tensorweave as tw
    own = optimizer.apply

    def weighted(flat):
        n = float(rows_box[0])
        mine = np.concatenate([flat * flat.dtype.type(n) if n else np.zeros_like(flat),
                               np.asarray([n], flat.dtype)])
        total = _all_reduce_gradients(mine, 1, comm_box, codec_box, counts)
        return (total[:-1] / total[-1]).astype(flat.dtype)

    def apply(grads, trainable_variables=None):
        grads = list(grads)
        variables = list(optimizer._trainable_variables if trainable_variables is None else trainable_variables)
        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        if not pairs:
            return own(grads, trainable_variables)
        acc = max((v.dtype for _, v in pairs if v.dtype.is_floating), key=lambda d: d.size, default=tw.float32)
        flat = tw.concat([tw.reshape(tw.cast(tw.convert_to_tensor(g), acc), [-1]) for g, _ in pairs], 0)
        total = tw.reshape(tw.numpy_function(weighted, [flat], acc), [-1])
        out, off = [], 0
        for g, v in pairs:
            size = int(np.prod(v.shape.as_list(), dtype=np.int64))
            out.append(tw.cast(tw.reshape(total[off:off + size], v.shape.as_list()), v.dtype))
            off += size
        return own(out, [v for _, v in pairs])
    return apply


# ---- what the driver calls (Cluster.run(fn, ...): fn(worker, *args)) -----------------------------
def _replica(worker):
    rep = worker.store.get("multi_worker_replica")
    if rep is None:
        rep = worker.store["multi_worker_replica"] = Replica(worker)
    return rep


def begin(worker, package, data, args, active, fresh=False):
    np.random.seed(args["seed"] % 2 ** 32)
    _replica(worker).begin(package, data, args, active, fresh)


def run_steps(worker, epoch, start, n, learning_rate):
    rep = _replica(worker)
    rep.set_active(rep.active)
    return rep.steps(epoch, start, n, learning_rate)


def evaluate(worker, spec):
    rep = _replica(worker)
    rep.set_active(rep.active)
    return rep.evaluate(spec)


def state(worker):
    return state_of(_replica(worker).model)


def progress(worker):
    """``(epoch, steps done in it, optimizer iterations)`` of this replica."""
    rep = _replica(worker)
    opt = rep.model.optimizer
    its = int(opt.iterations.numpy()) if opt is not None and opt.built else 0
    return rep.epoch, rep.pos, its


def rebox(worker, holder, active):
    _replica(worker).rebox(holder, active)


def traffic(worker):
    """Bytes this worker sent in the gradients' all-reduces of the fit, and uncompressed."""
    return dict(_replica(worker).bytes)


def kept_model_id(worker):
    rep = worker.store.get("multi_worker_replica")
    return None if rep is None or rep.model is None else id(rep.model)
