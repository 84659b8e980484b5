"""``Cluster.add_worker`` / ``Cluster.remove_worker``: a rank added beyond the placement group
gets a group of its own that the cluster removes (with the rank, or at ``shutdown``: no
placement group is left behind), a removed rank's bundle is reused by the next one added, the
ranks above a removed one move down, and an elastic fit that grew (``Cluster.add_worker``)
then shrank trains to the weights of single-process ``fit``."""
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tensorweave as tw  # noqa: E402
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402
from tensorweave.distribute.ray import multi_worker_grow  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
keras = tw.keras


@pytest.fixture(scope="module", autouse=True)
def _ray_for_the_module():
    shared = ray.is_initialized()       # the process's instance (tests/ray_shared.py): it stays up
    yield
    ray_cluster.shutdown()
    if ray.is_initialized() and not shared:     # the test keeps Ray up past the cluster's shutdown
        ray.shutdown()


@pytest.fixture
def cluster():
    # Ray gets max(1, cores) = 2 CPUs: room for one rank beyond the 1-bundle group
    return ray_cluster.connect(num_workers=1, timeout=120)


def _states(groups):
    table = ray.util.placement_group_table()
    return [table[pg.id.hex()]["state"] for pg in groups]


def _world(worker):
    return worker.rank, worker.ranks, worker.comm().all_gather(np.array([worker.rank])).tolist()


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


def test_grow_shrink_renumber_reuse_and_shutdown_leaves_no_group(cluster, monkeypatch):
    # an elastic fit grows the 1-rank cluster at epoch 1 (Cluster.add_worker: a group of its own,
    # the cluster's 1-bundle group being full); the grown rank then carries on alone as rank 0
    # (remove_worker(0)), and the fits together end with single-process fit's weights
    x, y = _data()
    ref = _model()
    ref.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    ref.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    rooms = iter([False, True])           # epoch 0: no room; epoch 1: a node joined
    monkeypatch.setattr(multi_worker_grow, "room_for_worker", lambda resources: next(rooms, False))
    strategy = tw.distribute.MultiWorkerMirroredStrategy(
        tw.distribute.RayClusterResolver(), failure_config=tw.distribute.FailureConfig(elastic=True, max_workers=2))
    with strategy.scope():
        model = _model()
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    base, (own,) = cluster._pg, cluster._own_groups
    assert cluster.num_workers == 2 and own is not base and _states([base, own]) == ["CREATED", "CREATED"]
    pid_of_1 = cluster.run(lambda w: w.ping()[1], ranks=[1])[0]
    cluster.remove_worker(0)              # rank 1 becomes rank 0, in its own group; bundle 0 is free
    assert cluster.run(lambda w: (w.rank, w.ranks, w.ping()[1])) == [(0, (0,), pid_of_1)]
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for u, v in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(u, v, rtol=2e-5, atol=1e-7)
    with pytest.raises(tw.errors.FailedPreconditionError, match="last rank cannot be removed"):
        cluster.remove_worker()
    with pytest.raises(ValueError, match=r"rank must be an int in \[0, 1\), got 1"):
        cluster.remove_worker(1)
    assert cluster.add_worker() == 1      # into the free bundle of the cluster's group: no new group
    assert cluster._own_groups == [own] and cluster._slots[1][:2] == (base, 0)
    assert cluster.run(_world) == [(0, (0, 1), [0, 1]), (1, (0, 1), [0, 1])]
    cluster.remove_worker(0)              # the rank in its own group: the group goes with it
    assert cluster._own_groups == [] and _states([own]) == ["REMOVED"]
    cluster.add_worker()                  # a group of its own again (bundle 0 is used)
    again = cluster._own_groups[0]
    cluster._started_ray = False          # keep Ray up to read its table after the shutdown
    ray_cluster.shutdown()
    assert _states([base, own, again]) == ["REMOVED"] * 3
