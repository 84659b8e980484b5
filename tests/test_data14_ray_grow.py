"""Elastic growth beyond the placement group: a fit on a 1-rank cluster (its placement group
full) with ``FailureConfig(elastic=True, max_workers=2)`` adds a rank in a group of its own
when Ray has room (here scripted to appear at epoch 1, as when a node joins), boxes the state
onto it and ends with the weights of single-process ``fit``."""
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tensorweave as tw  # noqa: E402
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402
from tensorweave.distribute.ray import multi_worker_grow, multi_worker_replica  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
keras = tw.keras


@pytest.fixture(scope="module")
def cluster():
    c = ray_cluster.connect(num_workers=1, timeout=120)     # Ray gets max(1, cores) = 2 CPUs: room for one more
    yield c
    ray_cluster.shutdown()


def _data(n=40):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 3)).astype(np.float32)
    y = (x @ rng.standard_normal((3, 2)) + 0.1).astype(np.float32)
    return x, y


def _model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    return model


class _Ranks(keras.callbacks.Callback):
    """The number of ranks at each epoch's start (read on the driver)."""

    def __init__(self, cluster):
        super().__init__()
        self.cluster, self.seen = cluster, []

    def on_epoch_begin(self, epoch, logs=None):
        self.seen.append(self.cluster.num_workers)


def test_room_is_read_from_ray(cluster):
    assert multi_worker_grow.room_for_worker({"CPU": 1})
    assert not multi_worker_grow.room_for_worker({"CPU": 64})


def test_a_fit_grows_beyond_its_placement_group(cluster, monkeypatch):
    x, y = _data()
    ref = _model()
    want = ref.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
    rooms = iter([False, True])           # epoch 0: no room; epoch 1: a node joined
    asked = []

    def room(resources):
        asked.append(dict(resources))
        return next(rooms, False)
    monkeypatch.setattr(multi_worker_grow, "room_for_worker", room)
    strategy = tw.distribute.MultiWorkerMirroredStrategy(
        tw.distribute.RayClusterResolver(), failure_config=tw.distribute.FailureConfig(elastic=True, max_workers=2))
    with strategy.scope():
        model = _model()
    ranks = _Ranks(cluster)
    got = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0, callbacks=[ranks])
    assert ranks.seen == [1, 2, 2] and asked == [{"CPU": 1}, {"CPU": 1}]
    _same(model, ref)             # the same global batches, split over 2 ranks from epoch 1
    np.testing.assert_allclose(got.history["loss"], want.history["loss"], rtol=2e-5)
    assert cluster.run(multi_worker_replica.progress) == [(2, 5, 15)] * 2
    # the rank stays: a later fit runs on both from its start
    ref.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    _same(model, ref)


def test_growth_needs_elastic_and_a_sane_bound():
    with pytest.raises(ValueError, match="needs elastic=True"):
        tw.distribute.FailureConfig(max_workers=3)
    with pytest.raises(ValueError, match="max_workers must be None or an int >= min_workers"):
        tw.distribute.FailureConfig(elastic=True, min_workers=2, max_workers=1)
    assert repr(tw.distribute.FailureConfig(elastic=True, max_workers=4)).endswith("min_workers=1, max_workers=4)")


def _same(a, b, rtol=2e-5):
    for u, v in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(u, v, rtol=rtol, atol=1e-7)
