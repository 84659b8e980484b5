"""Issue 14: under ``MultiWorkerMirroredStrategy`` each worker trains on *its* rows of every global
batch (audit, session 12). The strategy's other tests compare final weights with single-process
``fit``, which workers that each used the whole batch would match too (every worker applies
``sum n_i g_i / sum n_i``); here a layer counts the rows its training calls saw (a non-trainable
weight), and the driver's model gets rank 0's count back: rank 0's balanced share of each
global batch, not the whole batch — for a ``tw.data`` pipeline and for arrays, uneven shards.
And a compiled metric of the user's own class reaches the workers (its class travels with the
model, as custom layers' do) and is combined over them: the rows of the epoch once."""
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tensorweave as tw  # noqa: E402
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
keras = tw.keras
ROWS, BATCH = 30, 9         # global batches of 9, 9, 9, 3 rows: rank 0 keeps 5, 5, 5, 2


class RowCounter(keras.layers.Layer):
    """The identity; counts the rows of its training calls in a non-trainable weight."""

    def build(self, input_shape):
        self.rows = self.add_weight(shape=(), initializer="zeros", trainable=False, name="rows")

    def call(self, x, training=None):
        if training:
            self.rows.assign_add(tw.cast(tw.shape(x)[0], self.rows.dtype))
        return x


class RowsSeen(keras.metrics.Metric):
    """The rows the steps of an epoch saw; its state is summed over the workers."""

    def __init__(self, name="rows", **kwargs):
        super().__init__(name=name, **kwargs)
        self.rows = self.add_variable(shape=(), initializer="zeros", aggregation="sum", name="rows")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.rows.assign_add(tw.cast(tw.shape(y_true)[0], self.rows.dtype))

    def result(self):
        return tw.identity(self.rows)


@pytest.fixture(scope="module")
def strategy():
    ray_cluster.connect(num_workers=2, timeout=120)
    yield tw.distribute.MultiWorkerMirroredStrategy(tw.distribute.RayClusterResolver(num_workers=2))
    ray_cluster.shutdown()


def _model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), RowCounter(), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def _rows(model):
    return float(model.layers[0].rows.numpy())


def test_each_worker_steps_on_its_rows_only(strategy):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, 3)).astype(np.float32)
    y = rng.standard_normal((ROWS, 2)).astype(np.float32)
    ds = tw.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    one = _model()
    one.fit(ds, epochs=1, verbose=0)
    assert _rows(one) == ROWS                                         # one process: every row once
    with strategy.scope():
        model = _model()
    model.fit(ds, epochs=1, verbose=0)
    assert _rows(model) == 5 + 5 + 5 + 2                              # rank 0's share of each batch
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    assert _rows(model) == 2 * (5 + 5 + 5 + 2)


def test_a_metric_of_the_users_class_reaches_the_workers_and_counts_every_row_once(strategy):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((ROWS, 3)).astype(np.float32)
    y = rng.standard_normal((ROWS, 2)).astype(np.float32)
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(optimizer="sgd", loss="mse", metrics=[RowsSeen()])
    history = model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0).history
    assert history["rows"] == [ROWS, ROWS]


def test_shutdown_stops_the_workers_and_the_ray_it_started(strategy):
    # last in this module: the fixture's own shutdown afterwards finds nothing connected
    cluster = tw.distribute.current()
    workers, started = list(cluster.workers), cluster._started_ray
    tw.distribute.shutdown()
    assert tw.distribute.current() is None
    if started:
        assert not ray.is_initialized()
    else:                                   # attached to a Ray someone else started: only our actors go
        for w in workers:
            with pytest.raises(ray.exceptions.RayActorError):
                ray.get(w.ping.remote(), timeout=60)
