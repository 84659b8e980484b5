"""MultiWorkerMirroredStrategy: Keras fit on 2 Ray workers equals single-process fit with the
same global batch (uneven shards, arrays and tw.data pipelines, optimizer state carried over);
a worker's error surfaces as its own type with the rank."""
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tensorweave as tw  # noqa: E402
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402
from tensorweave.distribute.ray import multi_worker_replica  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
keras = tw.keras


@pytest.fixture(scope="module")
def strategy():
    ray_cluster.connect(num_workers=2, timeout=120)
    yield tw.distribute.MultiWorkerMirroredStrategy(tw.distribute.RayClusterResolver(num_workers=2))
    ray_cluster.shutdown()


def _data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((30, 3)).astype(np.float32)
    y = (x @ rng.standard_normal((3, 2)) + 0.1).astype(np.float32)
    return x, y


def _model(optimizer):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(2)])
    model.compile(optimizer=optimizer, loss="mse")
    return model


def _assert_same_weights(a, b):
    for u, v in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(u, v, rtol=2e-5, atol=1e-7)


def test_fit_on_two_workers_equals_single_process_fit(strategy):
    # 24 training rows in global batches of 7: shards of 4 and 3 rows, the last batch 2 and 1
    x, y = _data()
    ref = _model(keras.optimizers.Adam(0.05))
    with strategy.scope():
        model = _model(keras.optimizers.Adam(0.05))
    _assert_same_weights(model, ref)
    want = ref.fit(x, y, batch_size=7, epochs=2, shuffle=False, verbose=0, validation_split=0.2)
    got = model.fit(x, y, batch_size=7, epochs=2, shuffle=False, verbose=0, validation_split=0.2)
    assert model.distribute_strategy is strategy and strategy.num_replicas_in_sync == 2
    _assert_same_weights(model, ref)
    assert got.history.keys() == want.history.keys() == {"loss", "val_loss"}
    for k in want.history:
        np.testing.assert_allclose(got.history[k], want.history[k], rtol=2e-5, err_msg=k)
    assert got.epoch == [0, 1]
    # the optimizer's state came back: a second fit continues where the first stopped, on the
    # model the workers kept (not rebuilt, its step not traced again)
    before = strategy.cluster.run(multi_worker_replica.kept_model_id)
    ref.fit(x, y, batch_size=7, epochs=1, shuffle=False, verbose=0)
    model.fit(x, y, batch_size=7, epochs=1, shuffle=False, verbose=0)
    assert strategy.cluster.run(multi_worker_replica.kept_model_id) == before and None not in before
    _assert_same_weights(model, ref)
    assert int(model.optimizer.iterations.numpy()) == int(ref.optimizer.iterations.numpy()) == 4 * 2 + 5


def test_a_tw_data_pipeline_is_sharded_per_worker(strategy):
    x, y = _data()
    ds = tw.data.Dataset.from_tensor_slices((x, y)).batch(9)        # 9 rows: 5 and 4; last batch 3: 2 and 1
    ref = _model("sgd")
    with strategy.scope():
        model = _model("sgd")
    want = ref.fit(ds, epochs=2, verbose=0)
    got = model.fit(ds, epochs=2, verbose=0)
    _assert_same_weights(model, ref)
    np.testing.assert_allclose(got.history["loss"], want.history["loss"], rtol=2e-5)


def test_a_worker_error_surfaces_as_its_own_type_with_the_rank(strategy):
    x, y = _data()
    bad = y[:, :1].repeat(3, axis=1)                                 # 3 targets for 2 outputs
    with pytest.raises(Exception) as want:
        _model("sgd").fit(x, bad, batch_size=7, verbose=0)
    with strategy.scope():
        model = _model("sgd")
    with pytest.raises(type(want.value)) as info:
        model.fit(x, bad, batch_size=7, verbose=0)
    assert info.value.rank in (0, 1)
    # and the cluster and the model are usable afterwards (fresh groups, the same kept model)
    ref = _model("sgd")
    ref.fit(x, y, batch_size=10, epochs=1, shuffle=False, verbose=0)
    model.fit(x, y, batch_size=10, epochs=1, shuffle=False, verbose=0)
    _assert_same_weights(model, ref)


def test_the_strategy_checks_its_arguments(strategy):
    with pytest.raises(TypeError, match="cluster_resolver must be a RayClusterResolver"):
        tw.distribute.MultiWorkerMirroredStrategy(cluster_resolver="grpc://x")
    with pytest.raises(ValueError, match="3 workers asked for, but the connected cluster has 2"):
        tw.distribute.MultiWorkerMirroredStrategy(tw.distribute.RayClusterResolver(num_workers=3)).cluster
    with pytest.raises(TypeError, match="communication_options must be a tw.distribute.experimental"):
        tw.distribute.MultiWorkerMirroredStrategy(communication_options="int8")
    with pytest.raises(TypeError, match="failure_config must be a tw.distribute.FailureConfig"):
        tw.distribute.MultiWorkerMirroredStrategy(failure_config=3)
    with pytest.raises(ValueError, match="max_failures must be an int >= -1"):
        tw.distribute.FailureConfig(max_failures=-2)
    with pytest.raises(ValueError, match="compression must be None, 'none', one of"):
        tw.distribute.experimental.CommunicationOptions(compression="int4")
