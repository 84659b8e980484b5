"""ParameterServerStrategy on Ray, one cluster and one synchronous strategy (2 workers, 2 servers,
journaled) for the module: Keras ``model.fit`` with a ``DatasetCreator`` (TF's "Parameter server
training with Model.fit") equals single-process fit on the global batches (rtol 2e-5), callbacks
get the logs, evaluate works; raw trainable ``tw.Variable``s made in the scope live on the servers,
trained by a Python function or a ``tw.function`` traced once per worker; ``kill -9`` of a server
mid-round leaves the final weights equal to a failure-free run. Without a strategy a
DatasetCreator feeds fit in this process; the errors TF gives are given."""
import os
import signal
import sys

import numpy as np
import pytest

import tensorweave as tw

ROWS, FIELDS, BATCH, STEPS = 40, 3, 8, 4        # per-worker batch; steps per epoch (2 rounds of 2 workers)


def _data():
    rng = np.random.default_rng(4)
    ids = rng.integers(0, ROWS, size=(4 * BATCH * STEPS, FIELDS)).astype(np.int64)
    labels = (ids.sum(axis=1) % 3 == 0).astype(np.float32).reshape(-1, 1)
    return ids, labels


def _dataset_fn(input_context):
    """Worker i reads rows i::n of the data, so round r's batches are global batch r's rows."""
    ids, labels = _data()
    return tw.data.Dataset.from_tensor_slices((ids, labels)).shard(
        input_context.num_input_pipelines, input_context.input_pipeline_id).batch(BATCH).repeat()


def _model(compile=True):
    tw.keras.utils.set_random_seed(11)
    model = tw.keras.Sequential([tw.keras.Input(shape=(FIELDS,), dtype="int64"),
                                 tw.keras.layers.Embedding(ROWS, 4, name="table"),
                                 tw.keras.layers.Flatten(name="flat"),
                                 tw.keras.layers.Dense(6, activation="relu", name="hidden"),
                                 tw.keras.layers.Dense(1, name="logit")], name="ctr")
    if not compile:           # (a compiled model does not pickle: a scheduled function's closure holds it)
        return model
    model.compile(tw.keras.optimizers.Adam(0.05), tw.keras.losses.BinaryCrossentropy(from_logits=True),
                  metrics=[tw.keras.metrics.BinaryAccuracy(threshold=0.0)])
    return model


class _Logs(tw.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches, self.epochs = [], []

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append((batch, dict(logs)))

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append((epoch, dict(logs)))


def test_a_dataset_creator_feeds_single_process_fit_and_needs_steps():
    model = _model()
    creator = tw.keras.utils.experimental.DatasetCreator(
        lambda ctx: tw.data.Dataset.from_tensor_slices(_data()).batch(2 * BATCH).repeat())
    history = model.fit(creator, epochs=2, steps_per_epoch=STEPS // 2, verbose=0)
    assert len(history.history["loss"]) == 2
    with pytest.raises(ValueError, match=r"Model.fit: when `x` is a tw.keras.utils.experimental.DatasetCreator, the "
                       r"`steps_per_epoch` argument must be given"):
        model.fit(creator, epochs=1, verbose=0)
    with pytest.raises(TypeError, match="DatasetCreator: `dataset_fn` must be a callable"):
        tw.keras.utils.experimental.DatasetCreator(3)


ray = pytest.importorskip("ray")
from tensorweave.distribute.ps import variable as ps_variable  # noqa: E402
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def strategy(tmp_path_factory):
    ray_cluster.connect(num_workers=2, timeout=120)
    resolver = tw.distribute.cluster_resolver.SimpleClusterResolver(
        tw.train.ClusterSpec({"worker": ["w0", "w1"], "ps": ["ps0", "ps1"]}))
    s = tw.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=tw.distribute.experimental.partitioners.FixedShardsPartitioner(2),
        synchronous=True, checkpoint_dir=str(tmp_path_factory.mktemp("ps14")))
    try:
        yield s
    finally:
        try:
            s.shutdown()
        finally:
            ray_cluster.shutdown()


def test_synchronous_fit_with_a_dataset_creator_equals_single_process_fit(strategy):
    with strategy.scope():
        model = _model()
    assert isinstance(model.layers[0].embeddings, tw.distribute.ShardedVariable)
    assert model.distribute_strategy is strategy
    initial = [v.numpy() for v in model.weights]
    logs = _Logs()
    history = model.fit(tw.keras.utils.experimental.DatasetCreator(_dataset_fn), epochs=2, steps_per_epoch=STEPS,
                        callbacks=[logs], verbose=0)
    final = [v.numpy() for v in model.weights]

    reference = _model()
    reference.set_weights(initial)
    ids, labels = _data()
    want_logs = _Logs()
    creator = tw.keras.utils.experimental.DatasetCreator(
        lambda ctx: tw.data.Dataset.from_tensor_slices((ids, labels)).batch(2 * BATCH).repeat())
    want = reference.fit(creator, epochs=2, steps_per_epoch=STEPS // 2, callbacks=[want_logs], verbose=0)
    for a, b in zip(final, reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)
    assert not np.allclose(final[0], initial[0])
    for key in ("loss", "binary_accuracy"):
        np.testing.assert_allclose(history.history[key], want.history[key], rtol=2e-5)
    # every worker step's logs reach the callbacks in order; a round's end equals the global step's
    assert [b for b, _ in logs.batches] == list(range(STEPS)) * 2
    for (_, got), (_, wanted) in zip(logs.batches[1::2], want_logs.batches):
        np.testing.assert_allclose(got["loss"], wanted["loss"], rtol=2e-5)
    assert [e for e, _ in logs.epochs] == [0, 1]

    # evaluate: read-only steps on the workers == single-process evaluate of the same batches
    got = model.evaluate(tw.keras.utils.experimental.DatasetCreator(_dataset_fn), steps=STEPS, return_dict=True,
                         verbose=0)
    wanted = reference.evaluate(creator, steps=STEPS // 2, return_dict=True, verbose=0)
    for key in ("loss", "binary_accuracy"):
        np.testing.assert_allclose(got[key], wanted[key], rtol=2e-5)
    np.testing.assert_array_equal(model.layers[0].embeddings.numpy(), final[0])     # evaluate trained nothing


def test_fit_errors_under_the_strategy(strategy):
    with strategy.scope():
        model = _model()
    with pytest.raises(ValueError, match=r"steps_per_epoch \(3\) must be a multiple of the 2 workers"):
        model.fit(tw.keras.utils.experimental.DatasetCreator(_dataset_fn), steps_per_epoch=3, verbose=0)
    with pytest.raises(TypeError, match=r"takes a tw.keras.utils.experimental.DatasetCreator \(or a "
                       r"tw.data.Dataset\), got ndarray"):
        model.fit(np.zeros((4, FIELDS), np.int64), np.zeros((4, 1), np.float32), steps_per_epoch=2, verbose=0)


@pytest.mark.parametrize("traced", [False, True], ids=["python", "tw_function"])
def test_raw_trainable_variables_made_in_the_scope_live_on_the_servers(strategy, traced):
    """... trained by a scheduled Python function, or a tw.function traced once per worker."""
    rng = np.random.default_rng(1)
    x = rng.random((32, 3)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3
    with strategy.scope():
        w = tw.Variable(np.zeros((3, 1), np.float32), name="w")
        b = tw.Variable(0.0, name="b")
        counter = tw.Variable(0, trainable=False)
        optimizer = tw.keras.optimizers.SGD(0.2)
    assert isinstance(w, tw.distribute.ShardedVariable) and w.shard_shapes == [(2, 1), (1, 1)]
    assert isinstance(b, tw.distribute.ShardedVariable) and type(counter) is tw.Variable
    held = {k: v for shapes in strategy.server_shapes() for k, v in shapes.items()}
    assert held["w/part_0"] == (2, 1) and held["w/part_1"] == (1, 1) and held["b/part_0"] == ()

    traces = []

    def step(iterator):
        traces.append(1)              # Python: runs when traced (once), or every call when eager
        xb, yb = next(iterator)
        with tw.GradientTape() as tape:
            loss = tw.reduce_mean((tw.matmul(xb, w) + b - yb) ** 2)
        grads = tape.gradient(loss, [w, b])
        optimizer.apply_gradients(zip(grads, [w, b]))
        return loss, tw.constant(len(traces))

    coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    iterator = iter(coordinator.create_per_worker_dataset(
        lambda ctx: tw.data.Dataset.from_tensor_slices((x, y)).shard(2, ctx.input_pipeline_id).batch(4)))
    fn = tw.function(step) if traced else step
    results = coordinator.fetch([coordinator.schedule(fn, args=(iterator,)) for _ in range(8)])      # 4 rounds
    coordinator.shutdown()
    calls = sorted(int(n) for _, n in results)
    assert calls == ([1] * 8 if traced else [1, 1, 2, 2, 3, 3, 4, 4])    # traced once on each worker
    rw, rb = tw.Variable(np.zeros((3, 1), np.float32)), tw.Variable(0.0)
    reference = tw.keras.optimizers.SGD(0.2)
    for r in range(4):
        with tw.GradientTape() as tape:
            loss = tw.reduce_mean((tw.matmul(x[8 * r:8 * r + 8], rw) + rb - y[8 * r:8 * r + 8]) ** 2)
        reference.apply_gradients(zip(tape.gradient(loss, [rw, rb]), [rw, rb]))
    np.testing.assert_allclose(w.numpy(), rw.numpy(), rtol=2e-5)
    np.testing.assert_allclose(b.numpy(), rb.numpy(), rtol=2e-5)
    assert abs(float(rb.numpy())) > 0


def _restart_data():
    rng = np.random.default_rng(8)
    ids = rng.integers(0, ROWS, size=(2 * 6 * 3, FIELDS)).astype(np.int64)
    return ids, (ids.sum(axis=1) % 2).astype(np.float32)


def _restart_model():
    tw.keras.utils.set_random_seed(5)
    return tw.keras.Sequential([tw.keras.Input(shape=(FIELDS,), dtype="int64"),
                                tw.keras.layers.Embedding(ROWS, 4, name="table"), tw.keras.layers.Flatten(),
                                tw.keras.layers.Dense(1, name="logit")], name="restart")


def _train_step(model, optimizer, x, y):
    with tw.GradientTape() as tape:
        loss = tw.reduce_mean(tw.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=tw.reshape(model(x), [-1])))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def test_kill_9_of_a_server_mid_round_leaves_synchronous_training_equal_to_a_failure_free_run(strategy):
    with strategy.scope():
        model = _restart_model()
        optimizer = tw.keras.optimizers.Adam(0.05)
    initial = [v.numpy() for v in model.weights]
    strategy.save()
    coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    ids, labels = _restart_data()
    iterator = iter(coordinator.create_per_worker_dataset(lambda ctx: tw.data.Dataset.from_tensor_slices(
        (ids, labels)).shard(2, ctx.input_pipeline_id).batch(6)))
    server = strategy.parameter_servers[0]
    _, pid, _ = ray.get(server.ping.remote())

    def step(iterator):
        if ps_variable.current_step().number == 3:      # round 1, worker 1: before it pulls anything
            os.kill(pid, signal.SIGKILL)
        x, y = next(iterator)
        return _train_step(model, optimizer, x, y)

    # a Python function (its kill decided per call; a traced one would decide once, while tracing)
    coordinator.fetch([coordinator.schedule(step, args=(iterator,)) for _ in range(6)])     # 3 rounds
    coordinator.shutdown()
    _, new_pid, restored = ray.get(server.ping.remote())
    assert new_pid != pid and restored
    final = [v.numpy() for v in model.weights]
    reference = _restart_model()
    reference.set_weights(initial)
    opt = tw.keras.optimizers.Adam(0.05)
    for r in range(3):
        _train_step(reference, opt, ids[r * 12:(r + 1) * 12], labels[r * 12:(r + 1) * 12])
    for a, b in zip(final, reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)
    assert not np.allclose(final[0], initial[0])


# ---- learning-rate changes on the coordinator reach the servers (pps14) -----------------------------------
@pytest.mark.parametrize("traced", [False, True], ids=["python", "tw_function"])
def test_a_learning_rate_set_on_the_coordinator_reaches_the_servers(strategy, traced):
    rng = np.random.default_rng(2)
    x = rng.random((32, 3)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3
    with strategy.scope():
        w = tw.Variable(np.zeros((3, 1), np.float32), name="w_rate")
        optimizer = tw.keras.optimizers.SGD(0.2, momentum=0.5)

    def step(iterator):
        xb, yb = next(iterator)
        with tw.GradientTape() as tape:
            loss = tw.reduce_mean((tw.matmul(xb, w) - yb) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        return loss

    coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    iterator = iter(coordinator.create_per_worker_dataset(
        lambda ctx: tw.data.Dataset.from_tensor_slices((x, y)).shard(2, ctx.input_pipeline_id).batch(4)))
    fn = tw.function(step) if traced else step
    for rate in (0.2, 0.05):                      # 2 rounds at each rate: steps take the rate they were scheduled at
        optimizer.learning_rate = rate
        for _ in range(4):
            coordinator.schedule(fn, args=(iterator,))
    coordinator.shutdown()
    rw, reference = tw.Variable(np.zeros((3, 1), np.float32)), tw.keras.optimizers.SGD(0.2, momentum=0.5)
    for r in range(4):
        reference.learning_rate = 0.2 if r < 2 else 0.05
        with tw.GradientTape() as tape:
            loss = tw.reduce_mean((tw.matmul(x[8 * r:8 * r + 8], rw) - y[8 * r:8 * r + 8]) ** 2)
        reference.apply_gradients(zip(tape.gradient(loss, [rw]), [rw]))
    np.testing.assert_allclose(w.numpy(), rw.numpy(), rtol=2e-5)


def test_a_learning_rate_scheduler_callback_in_synchronous_fit_equals_single_process_fit(strategy):
    def halve(epoch, lr):
        return 0.05 * 0.5 ** epoch

    with strategy.scope():
        model = _model()
    initial = [v.numpy() for v in model.weights]
    history = model.fit(tw.keras.utils.experimental.DatasetCreator(_dataset_fn), epochs=2, steps_per_epoch=STEPS,
                        callbacks=[tw.keras.callbacks.LearningRateScheduler(halve)], verbose=0)
    reference = _model()
    reference.set_weights(initial)
    ids, labels = _data()
    creator = tw.keras.utils.experimental.DatasetCreator(
        lambda ctx: tw.data.Dataset.from_tensor_slices((ids, labels)).batch(2 * BATCH).repeat())
    want = reference.fit(creator, epochs=2, steps_per_epoch=STEPS // 2,
                         callbacks=[tw.keras.callbacks.LearningRateScheduler(halve)], verbose=0)
    for a, b in zip([v.numpy() for v in model.weights], reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(history.history["loss"], want.history["loss"], rtol=2e-5)


# ---- table lookups inside traced scheduled functions (pps14) ---------------------------------------------
def test_a_traced_function_looking_up_a_sharded_table_pulls_and_pushes_rows_and_equals_single_process(strategy):
    with strategy.scope():
        model = _model(compile=False)
        optimizer = tw.keras.optimizers.Adam(0.05)
    initial = [v.numpy() for v in model.weights]
    loss_obj = tw.keras.losses.BinaryCrossentropy(from_logits=True)
    traces = []

    @tw.function
    def step(iterator):
        traces.append(1)              # Python: runs when traced (once per worker), never again
        x, y = next(iterator)
        with tw.GradientTape() as tape:
            loss = loss_obj(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, tw.constant(len(traces))

    coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    iterator = iter(coordinator.create_per_worker_dataset(_dataset_fn))
    results = coordinator.fetch([coordinator.schedule(step, args=(iterator,)) for _ in range(STEPS)])   # 2 rounds
    coordinator.shutdown()
    assert [int(n) for _, n in results] == [1] * STEPS          # traced once per worker: the lookup is a graph node

    reference = _model(compile=False)
    reference.set_weights(initial)
    ids, labels = _data()
    ref_opt = tw.keras.optimizers.Adam(0.05)
    want_losses = []
    for r in range(STEPS // 2):
        x, y = ids[2 * BATCH * r:2 * BATCH * (r + 1)], labels[2 * BATCH * r:2 * BATCH * (r + 1)]
        with tw.GradientTape() as tape:
            loss = loss_obj(y, reference(x, training=True))
        ref_opt.apply_gradients(zip(tape.gradient(loss, reference.trainable_variables), reference.trainable_variables))
        want_losses.append(float(loss))
    for a, b in zip([v.numpy() for v in model.weights], reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(np.mean(np.reshape([float(l) for l, _ in results], (-1, 2)), axis=1), want_losses,
                               rtol=2e-5)
    touched = np.unique(ids[:2 * BATCH * (STEPS // 2)])
    untouched = np.setdiff1d(np.arange(ROWS), touched)
    np.testing.assert_array_equal(model.layers[0].embeddings.numpy()[untouched], initial[0][untouched])


# ---- Keras fit(steps_per_execution=k) under the strategy (pps14) -----------------------------------------
def test_synchronous_fit_with_steps_per_execution_equals_single_process_fit(strategy):
    with strategy.scope():
        model = _model()
        model.compile(tw.keras.optimizers.Adam(0.05), tw.keras.losses.BinaryCrossentropy(from_logits=True),
                      metrics=[tw.keras.metrics.BinaryAccuracy(threshold=0.0)], steps_per_execution=2)
    initial = [v.numpy() for v in model.weights]
    logs = _Logs()
    coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    calls = []
    real = coordinator._schedule
    coordinator._schedule = lambda *a, **kw: calls.append(1) or real(*a, **kw)
    history = model.fit(tw.keras.utils.experimental.DatasetCreator(_dataset_fn), epochs=2, steps_per_epoch=STEPS,
                        callbacks=[logs], verbose=0)
    assert len(calls) == 2 * STEPS // 2                  # one scheduled call per 2 steps
    assert [b for b, _ in logs.batches] == [1, 3] * 2     # the last step index of each call, as TF's
    reference = _model()
    reference.set_weights(initial)
    ids, labels = _data()
    want = reference.fit(tw.keras.utils.experimental.DatasetCreator(
        lambda ctx: tw.data.Dataset.from_tensor_slices((ids, labels)).batch(2 * BATCH).repeat()),
        epochs=2, steps_per_epoch=STEPS // 2, verbose=0)
    for a, b in zip([v.numpy() for v in model.weights], reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)
    for key in ("loss", "binary_accuracy"):
        np.testing.assert_allclose(history.history[key], want.history[key], rtol=2e-5)
    with pytest.raises(ValueError, match=r"steps_per_epoch \(3\) must be a multiple of steps_per_execution \(2\)"):
        model.fit(tw.keras.utils.experimental.DatasetCreator(_dataset_fn), epochs=1, steps_per_epoch=3, verbose=0)


class _TestLogs(tw.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches = []

    def on_test_batch_end(self, batch, logs=None):
        self.batches.append(batch)


def test_evaluate_with_steps_per_execution_runs_k_steps_per_call_and_equals_single_process_evaluate(strategy):
    with strategy.scope():
        model = _model()
        model.compile(tw.keras.optimizers.Adam(0.05), tw.keras.losses.BinaryCrossentropy(from_logits=True),
                      metrics=[tw.keras.metrics.BinaryAccuracy(threshold=0.0)], steps_per_execution=2)
    weights = [v.numpy() for v in model.weights]
    coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    calls = []
    real = coordinator._schedule
    coordinator._schedule = lambda fn, *a, **kw: calls.append(fn.steps_per_call) or real(fn, *a, **kw)
    first = coordinator._number                  # read-only call c runs on worker (first + c) % 2
    logs = _TestLogs()
    got = model.evaluate(tw.keras.utils.experimental.DatasetCreator(_dataset_fn), steps=5, return_dict=True,
                         callbacks=[logs], verbose=0)
    assert calls == [2, 2, 1] and logs.batches == [1, 3, 4]       # Keras' last execution runs what is left
    ids, labels = _data()
    read = {0: 0, 1: 0}                         # batches each worker read of its shard (rows w::2), in order
    for c, k in enumerate(calls):
        read[(first + c) % 2] += k
    rows = [np.arange(w, len(ids), 2)[:BATCH * read[w]] for w in (0, 1)]
    reference = _model()
    reference.set_weights(weights)
    x, y = np.concatenate([ids[r] for r in rows]), np.concatenate([labels[r] for r in rows])
    wanted = reference.evaluate(x, y, batch_size=BATCH, return_dict=True, verbose=0)     # 5 batches of 8 rows
    for key in ("loss", "binary_accuracy"):
        np.testing.assert_allclose(got[key], wanted[key], rtol=2e-5)


# ---- asynchronous training with a learning-rate schedule (pps14), with Adam (ray14) ---------------------------
def _decayed_sgd():
    return tw.keras.optimizers.SGD(tw.keras.optimizers.schedules.ExponentialDecay(0.5, decay_steps=1, decay_rate=0.5))


def _adam():
    return tw.keras.optimizers.Adam(0.1)


@pytest.mark.parametrize("traced", [False, True], ids=["python", "tw_function"])
def test_asynchronous_steps_use_the_global_step_even_on_a_server_a_step_skips(strategy, traced):
    # table rows 0-2 on server 0, rows 3-5 on server 1: step 1 touches only server 0, so server 1's
    # own count of pushes lags the global step; the schedule and Adam's bias correction (no
    # schedule: lazy Adam's touched rows) must read the global one. Both optimizers train a table
    # of their own on one strategy (the global step is counted per optimizer: ps/server.py), so
    # the test starts its servers and workers once for the two
    ids = np.array([[4, 0], [1, 2], [5, 3], [0, 4]], np.int64)
    target = np.array([[1.0], [-1.0], [0.5], [2.0]], np.float32)
    table0 = np.arange(12, dtype=np.float32).reshape(6, 2) / 10
    makers = {"schedule": _decayed_sgd, "adam": _adam}
    resolver = tw.distribute.cluster_resolver.SimpleClusterResolver(
        tw.train.ClusterSpec({"worker": ["w0", "w1"], "ps": ["ps0", "ps1"]}))
    asynchronous = tw.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=tw.distribute.experimental.partitioners.FixedShardsPartitioner(2))
    got = {}
    try:
        with asynchronous.scope():
            trained = {name: (tw.Variable(table0, name=f"table_async_{name}"), make())
                       for name, make in makers.items()}

        def step_of(table, optimizer):
            def step(i):
                with tw.GradientTape() as tape:
                    rows = tw.nn.embedding_lookup(table, tw.gather(tw.constant(ids), i))
                    loss = tw.reduce_sum((tw.reduce_sum(rows, axis=1) - tw.gather(tw.constant(target), i)) ** 2)
                optimizer.apply_gradients(zip(tape.gradient(loss, [table]), [table]))
                return loss
            return tw.function(step) if traced else step

        coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(asynchronous)
        for name, (table, optimizer) in trained.items():
            fn = step_of(table, optimizer)
            for i in range(len(ids)):           # one at a time: the steps' order is the one-process order
                coordinator.schedule(fn, args=(tw.constant(i),)).fetch()
            got[name] = table.numpy()
        coordinator.shutdown()
    finally:
        asynchronous.shutdown()
    for name, make in makers.items():
        ref, ref_opt = tw.Variable(table0), make()
        for i in range(len(ids)):
            with tw.GradientTape() as tape:
                rows = tw.nn.embedding_lookup(ref, ids[i])
                loss = tw.reduce_sum((tw.reduce_sum(rows, axis=1) - target[i]) ** 2)
            ref_opt.apply_gradients(zip(tape.gradient(loss, [ref]), [ref]))
        np.testing.assert_allclose(got[name], ref.numpy(), rtol=2e-5, err_msg=name)


def test_a_traced_function_looking_a_table_up_twice_runs_eagerly_and_still_equals_single_process(strategy):
    rng = np.random.default_rng(6)
    ids = rng.integers(0, 12, size=(16, 2)).astype(np.int64)
    y = rng.random((16, 1)).astype(np.float32)
    start = rng.standard_normal((12, 3)).astype(np.float32)
    with strategy.scope():
        table = tw.Variable(start, name="twice_table")
        optimizer = tw.keras.optimizers.SGD(0.5)
    traces = []

    def loss_of(t, x, yb):
        a = tw.reduce_sum(tw.nn.embedding_lookup(t, x), axis=[1, 2])          # two lookups of one table:
        b = tw.reduce_sum(tw.nn.embedding_lookup(t, x[:, :1]), axis=[1, 2])   # the trace falls back to eager
        return tw.reduce_mean((tw.reshape(a - b, [-1, 1]) - yb) ** 2)

    @tw.function
    def step(iterator):
        traces.append(1)
        x, yb = next(iterator)
        with tw.GradientTape() as tape:
            loss = loss_of(table, x, yb)
        optimizer.apply_gradients(zip(tape.gradient(loss, [table]), [table]))
        return loss, tw.constant(len(traces))

    coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    iterator = iter(coordinator.create_per_worker_dataset(
        lambda ctx: tw.data.Dataset.from_tensor_slices((ids, y)).shard(2, ctx.input_pipeline_id).batch(4)))
    results = coordinator.fetch([coordinator.schedule(step, args=(iterator,)) for _ in range(4)])
    coordinator.shutdown()
    assert sorted(int(n) for _, n in results) == [2, 2, 3, 3]       # the trace, then every call in Python
    ref, ref_opt = tw.Variable(start), tw.keras.optimizers.SGD(0.5)
    for r in range(2):
        rows = np.concatenate([ids[0::2][4 * r:4 * r + 4], ids[1::2][4 * r:4 * r + 4]])
        yr = np.concatenate([y[0::2][4 * r:4 * r + 4], y[1::2][4 * r:4 * r + 4]])    # round r: both workers' rows
        with tw.GradientTape() as tape:
            loss = loss_of(ref, rows, yr)
        ref_opt.apply_gradients(zip(tape.gradient(loss, [ref]), [ref]))
    np.testing.assert_allclose(table.numpy(), ref.numpy(), rtol=2e-5, atol=1e-6)
