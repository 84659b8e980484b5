"""``tw.distribute.experimental.ParameterServerStrategy`` (TF2's API) on Ray actors.

``ParameterServerStrategy(cluster_resolver, variable_partitioner=None, synchronous=False)``:
the resolver's cluster spec names how many ``worker`` and ``ps`` tasks to run (addresses
are not used: on Ray the tasks are actors — workers are the ranks of
``tw.distribute.connect``, servers are :class:`~tensorweave.distribute.ps.server.ParameterServer`
actors). Keras weights created inside ``strategy.scope()`` become
:class:`~tensorweave.distribute.ps.variable.ShardedVariable`\\ s: cut into row shards by
``variable_partitioner`` (TF's ``FixedShardsPartitioner``/``MinSizePartitioner``/
``MaxSizePartitioner``; None: one shard) and placed round-robin on the servers. Each shard
is initialized on the coordinator one at a time and sent to its server, so a table never
sits whole in one process (random initializers draw each shard independently; a variance
scaling initializer uses the whole variable's fans).

Training is scheduled with :class:`~tensorweave.distribute.ps.coordinator.ClusterCoordinator`.
``synchronous=False`` (TF2's behaviour): each worker's gradients are applied by the
servers as they arrive. ``synchronous=True`` (a tensorweave addition, TF1's
``SyncReplicasOptimizer`` semantics): scheduled steps form rounds of one step per worker,
every worker of a round reads the same parameters, and the servers apply the average of the
round's gradients once — with equal per-worker batches this is the single-process step on
the concatenated batch (tested to rtol 2e-5).

``checkpoint_dir`` (a tensorweave addition; shared storage on a multi-node cluster): each
server journals every change and ``save()`` writes its state and empties the journal; a
server process that dies is restarted by Ray, loads its last save, replays its journal and
answers the calls that were in flight, so training (synchronous too) continues where it was:
the final weights equal a failure-free run's.

>>> import tensorweave as tw
>>> resolver = tw.distribute.cluster_resolver.SimpleClusterResolver(
...     tw.train.ClusterSpec({"worker": ["w0", "w1"], "ps": ["ps0", "ps1"]}))
>>> strategy = tw.distribute.experimental.ParameterServerStrategy(
...     resolver, variable_partitioner=tw.distribute.experimental.partitioners.FixedShardsPartitioner(2))
>>> with strategy.scope():                                  # doctest: +SKIP
...     table = tw.keras.layers.Embedding(1_000_000, 32)
...     table.build(None)
>>> table.embeddings.shard_shapes                           # doctest: +SKIP
[(500000, 32), (500000, 32)]
>>> strategy.shutdown()
"""
import contextlib
import contextvars
import inspect
import uuid

import numpy as np

from tensorweave.distribute.ps.variable import ShardedVariable

_current = contextvars.ContextVar("tensorweave_ps_strategy", default=None)


def ps_strategy():
    """The ``ParameterServerStrategy`` whose ``scope()`` is active here, or None (a model compiled
    inside trains with it: ``keras_fit.py``)."""
    return _current.get()


class SimpleClusterResolver:
    """TF's ``tf.distribute.cluster_resolver.SimpleClusterResolver``: a fixed cluster spec."""

    def __init__(self, cluster_spec, master="", task_type=None, task_id=None, environment="", num_accelerators=None,
                 rpc_layer=None):
        from tensorweave.train.coordination import ClusterSpec
        self._cluster_spec = ClusterSpec(cluster_spec)
        self.task_type, self.task_id, self.rpc_layer = task_type, task_id, rpc_layer
        self._master, self.environment = master, environment

    def cluster_spec(self):
        return self._cluster_spec

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        return self._master

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        return {}


class InputContext:
    """TF's ``tf.distribute.InputContext``: which input pipeline a worker's dataset is."""

    def __init__(self, num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1):
        self.num_input_pipelines = num_input_pipelines
        self.input_pipeline_id = input_pipeline_id
        self.num_replicas_in_sync = num_replicas_in_sync

    def get_per_replica_batch_size(self, global_batch_size):
        if global_batch_size % self.num_replicas_in_sync:
            raise ValueError(f"The `global_batch_size` {global_batch_size} is not divisible by "
                             f"`num_replicas_in_sync` {self.num_replicas_in_sync}")
        return global_batch_size // self.num_replicas_in_sync

    def __repr__(self):
        return (f"tw.distribute.InputContext(input pipeline id {self.input_pipeline_id}, "
                f"total: {self.num_input_pipelines})")


def _counts(cluster_resolver):
    spec = cluster_resolver.cluster_spec() if hasattr(cluster_resolver, "cluster_spec") else None
    if spec is None:
        raise TypeError(f"ParameterServerStrategy: cluster_resolver must have a cluster_spec() with 'worker' and "
                        f"'ps' jobs, got {type(cluster_resolver).__name__}")
    jobs = spec.jobs
    if "worker" not in jobs or "ps" not in jobs:
        raise ValueError(f"ParameterServerStrategy: the cluster spec needs 'worker' and 'ps' jobs, got {jobs}. "
                         "Hint: ClusterSpec({'worker': ['w0', 'w1'], 'ps': ['ps0']})")
    return spec.num_tasks("worker"), spec.num_tasks("ps")


def _shard_initializer(initializer, shape, rows, shard):
    """The initializer of rows ``rows`` of a variable of ``shape`` (shard number ``shard``):
    seeded initializers get a seed per shard (else all shards would be equal); variance
    scaling keeps the whole variable's variance."""
    from tensorweave.keras import initializers as K
    if not isinstance(initializer, K.Initializer) or rows == shape[0]:
        if rows != shape[0]:
            raise ValueError(f"ParameterServerStrategy: the initializer {initializer!r} cannot initialize one shard "
                             "of a partitioned variable. Hint: use a keras.initializers class, or no partitioner")
        return initializer
    config = initializer.get_config()
    shard_shape = [rows] + list(shape[1:])
    if isinstance(initializer, K.VarianceScaling):
        fans = [K._fans(s, initializer.input_axes, initializer.output_axes) for s in (shape, shard_shape)]
        n = [{"fan_in": i, "fan_out": o, "fan_avg": (i + o) / 2.0}[initializer.mode] for i, o in fans]
        config = {"scale": initializer.scale * max(1.0, n[1]) / max(1.0, n[0]), "mode": initializer.mode,
                  "distribution": initializer.distribution, "seed": initializer.seed,
                  "input_axes": initializer.input_axes, "output_axes": initializer.output_axes}
        cls = K.VarianceScaling
    elif isinstance(initializer, (K.Zeros, K.Ones, K.RandomUniform, K.RandomNormal)) or (
            isinstance(initializer, K.Constant) and np.ndim(initializer.value) == 0):
        cls = type(initializer)
    else:
        raise ValueError(f"ParameterServerStrategy: {type(initializer).__name__} cannot initialize one shard of a "
                         "partitioned variable. Hint: a random, constant or variance-scaling initializer, or no "
                         "partitioner")
    if isinstance(config.get("seed"), int) and shard:
        config["seed"] = (config["seed"] * 1000003 + shard) % (2 ** 31 - 1)
    return cls(**config)


class ParameterServerStrategy:
    """Parameter-server training on Ray actors (see the module)."""

    def __init__(self, cluster_resolver, variable_partitioner=None, synchronous=False, checkpoint_dir=None):
        self.cluster_resolver = cluster_resolver
        self._num_workers, self._num_ps = _counts(cluster_resolver)
        if variable_partitioner is not None and not callable(variable_partitioner):
            raise TypeError(f"ParameterServerStrategy: variable_partitioner must be a partitioner (callable), got "
                            f"{type(variable_partitioner).__name__}")
        self._partitioner = variable_partitioner
        self.synchronous = bool(synchronous)
        self._id = uuid.uuid4().hex[:8]
        self._checkpoint_dir = checkpoint_dir
        self._cluster = None
        self._own_cluster = False
        self._servers = None
        self._next_server = 0
        self._variables = []
        self._seed = None

    # ---- the cluster ----------------------------------------------------------------------------
    def _ensure_cluster(self):
        if self._servers is not None:
            return
        import ray
        from tensorweave.distribute.ray import cluster as rc
        c = rc.current()
        if c is None:
            c = rc.connect(num_workers=self._num_workers)
            self._own_cluster = True
        elif c.num_workers != self._num_workers:
            raise ValueError(f"ParameterServerStrategy: {self._num_workers} workers asked for, but the connected "
                             f"cluster has {c.num_workers}. Hint: tw.distribute.shutdown() first")
        self._cluster = c
        from tensorweave.distribute.ps.server import ParameterServer
        # with a checkpoint directory a server killed is restarted by Ray (its last save and
        # journal replayed in __init__) and the calls in flight to it are sent again to the new one
        restart = {"max_restarts": -1, "max_task_retries": -1} if self._checkpoint_dir else {"max_restarts": 0}
        actor = ray.remote(num_cpus=0, max_concurrency=64, **restart)(ParameterServer)
        paths = [None] * self._num_ps
        if self._checkpoint_dir:
            import os
            os.makedirs(self._checkpoint_dir, exist_ok=True)
            paths = [os.path.join(self._checkpoint_dir, f"ps-{i}.safetensors") for i in range(self._num_ps)]
        self._servers = [actor.options(name=f"tw-ps-{self._id}-{i}").remote(i, paths[i]) for i in range(self._num_ps)]
        ray.get([s.ping.remote() for s in self._servers])

    @property
    def num_replicas_in_sync(self):
        return self._num_workers

    @property
    def extended(self):
        return self

    @property
    def parameter_servers(self):
        """The server actors (index = ``ps`` task)."""
        self._ensure_cluster()
        return list(self._servers)

    def shutdown(self):
        """Stops the servers (and the Ray cluster, when this strategy started it)."""
        import ray
        for s in self._servers or []:
            ray.kill(s)
        self._servers = None
        if self._own_cluster:
            from tensorweave.distribute.ray import cluster as rc
            rc.shutdown()
            self._own_cluster = False

    # ---- variables ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self):
        """Keras weights created inside live on the parameter servers."""
        from tensorweave.keras.engine.layer import weight_creator
        from tensorweave.ops.variables import variable_creator_scope
        self._ensure_cluster()
        token = weight_creator.set(self._create_weight)
        current = _current.set(self)
        try:
            with variable_creator_scope(self._create_raw):
                yield self
        finally:
            _current.reset(current)
            weight_creator.reset(token)

    def _create_weight(self, layer, name, shape, dtype, initializer, trainable, constraint):
        if constraint is not None:
            raise NotImplementedError(f"ParameterServerStrategy: weight '{name}' has a constraint; constraints are "
                                      "not applied on parameter servers yet")

        def shard_value(i, lo, hi, shape=[int(d) for d in shape]):
            init = _shard_initializer(initializer, shape, hi - lo, i) if shape else initializer
            return init([hi - lo] + shape[1:] if shape else [], dtype=dtype).numpy()
        return self._place(name, shape, dtype, trainable, shard_value)

    def _create_raw(self, next_creator, initial_value=None, trainable=True, name=None, dtype=None, shape=None,
                    **kwargs):
        """``tw.Variable(...)`` in the scope: a trainable variable goes to the servers (cut by the
        partitioner like a Keras weight); a non-trainable one (a metric's state, a counter) stays
        an ordinary variable where it is made (TF puts those on the servers too)."""
        from tensorweave.distribute.ps.variable import current_step
        if (not trainable or kwargs.get("synchronization") is not None or current_step() is not None
                or "placement" in kwargs):
            return next_creator(initial_value=initial_value, trainable=trainable, name=name, dtype=dtype,
                                shape=shape, **kwargs)
        if initial_value is None:
            raise ValueError("Variable: initial_value must be given")
        if kwargs.get("constraint") is not None:
            raise NotImplementedError(f"ParameterServerStrategy: variable '{name or 'Variable'}' has a constraint; "
                                      "constraints are not applied on parameter servers yet")
        from tensorweave.core.convert import convert_to_tensor
        value = initial_value() if callable(initial_value) else initial_value
        value = np.asarray(convert_to_tensor(value, dtype=dtype).numpy())
        if shape is not None and list(value.shape) != [int(d) for d in shape]:
            raise ValueError(f"Variable '{name or 'Variable'}' under ParameterServerStrategy: the initial value's "
                             f"shape {list(value.shape)} is not shape={list(shape)}")
        base = (name or "Variable").rstrip("/").split(":")[0]
        return self._place(base, list(value.shape), value.dtype, True,
                           lambda i, lo, hi: value[lo:hi] if value.ndim else value)

    def _place(self, name, shape, dtype, trainable, shard_value):
        """A :class:`ShardedVariable` whose shard ``i`` (rows ``lo:hi``) starts as
        ``shard_value(i, lo, hi)``, each shard made and sent to its server one at a time."""
        import ray
        shape = [int(d) for d in shape]
        parts = [1] * max(len(shape), 1)
        if self._partitioner is not None and shape:
            parts = list(self._partitioner(shape, dtype))
            if any(p != 1 for p in parts[1:]):
                raise ValueError(f"ParameterServerStrategy: the partitioner cut '{name}' {parts} along an axis other "
                                 "than 0; only rows are sharded")
        from tensorweave.distribute.layout import balanced_bounds
        rows = shape[0] if shape else 1
        bounds = balanced_bounds(rows, max(1, parts[0])) if shape else [(0, 1)]
        key = f"{len(self._variables)}"
        shards = []
        for i, (lo, hi) in enumerate(bounds):
            ps = self._next_server % self._num_ps
            self._next_server += 1
            value = np.asarray(shard_value(i, lo, hi))
            ray.get(self._servers[ps].create.remote(key, i, value, name))     # one shard in memory at a time
            del value
            shards.append((ps, lo, hi - lo))
        var = ShardedVariable(key, name, shape, dtype, trainable, shards, self._servers)
        self._variables.append(var)
        return var

    @property
    def variables(self):
        """Every variable created in this strategy's scope."""
        return list(self._variables)

    def server_shapes(self):
        """``[{shard name: shape}, ...]`` per server: what each server holds."""
        import ray
        self._ensure_cluster()
        return ray.get([s.shapes.remote() for s in self._servers])

    def save(self):
        """Every server writes its shards and optimizer state (``checkpoint_dir``); a server
        that dies is restarted by Ray from its last save."""
        import ray
        if not self._checkpoint_dir:
            raise ValueError("ParameterServerStrategy.save: give checkpoint_dir= to the strategy")
        return ray.get([s.save.remote() for s in self._servers])

    # ---- worker side ------------------------------------------------------------------------------
    def run(self, fn, args=(), kwargs=None):
        """Runs ``fn`` (one replica per worker: a plain call)."""
        return fn(*args, **(kwargs or {}))

    def reduce(self, reduce_op, value, axis=None):
        return value

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """``dataset_fn(input_context)`` for this worker (in a scheduled function or a
        ``create_per_worker_dataset`` function)."""
        from tensorweave.distribute.ps.variable import current_step
        step = current_step()
        worker = 0 if step is None else step.worker
        return dataset_fn(InputContext(self._num_workers, worker, self._num_workers))

    def experimental_distribute_dataset(self, dataset, options=None):
        return dataset

    def __reduce__(self):
        return (_WorkerStrategy, (self._num_workers, self._num_ps, self.synchronous))


class _WorkerStrategy(ParameterServerStrategy):
    """The strategy as a scheduled function sees it on a worker: ``run``, ``reduce``,
    ``distribute_datasets_from_function``; no cluster of its own."""

    def __init__(self, num_workers, num_ps, synchronous):
        self._num_workers, self._num_ps, self.synchronous = num_workers, num_ps, synchronous

    @contextlib.contextmanager
    def scope(self):
        yield self


def call_dataset_fn(dataset_fn, context):
    """``dataset_fn(input_context)`` or ``dataset_fn()``, as it takes."""
    try:
        params = [p for p in inspect.signature(dataset_fn).parameters.values()
                  if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return dataset_fn(context) if params else dataset_fn()
