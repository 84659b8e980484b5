"""Sharded checkpoints written by Ray workers: each worker writes the shards it owns (to the
shared path, or its local disk + an upload hook), the driver commits; a worker killed
(SIGKILL) at any point of the save leaves the previous checkpoint current; a model trained
with MultiWorkerMirroredStrategy on 4 workers is saved split across them (1/4 of the rows
each) and its training continues on 2 workers on the same loss curve."""
import os
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tensorweave as tw  # noqa: E402
from tensorweave.core.sbp import B, S  # noqa: E402
from tensorweave.distribute.layout import Placement, shard_slices  # noqa: E402
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402
from tensorweave.saving import atomic, sharded  # noqa: E402
from tensorweave.saving import sharded_workers as sw  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
keras = tw.keras
N = 4


@pytest.fixture(scope="module")
def cluster():
    # small CPU shares: other Ray instances run on this machine too
    ray_cluster.connect(num_workers=N, timeout=120, transport="object_store", resources_per_worker={"CPU": 0.5})
    yield ray_cluster.current()
    ray_cluster.shutdown()


def _full():
    w = np.random.default_rng(0).standard_normal((9, 6)).astype(np.float32)   # 9 rows over 4 ranks: uneven
    return {"w": w, "b": np.arange(5, dtype=np.int64), "step": np.array(7, np.int64)}


LAYOUTS = {"w": (Placement("cpu", [0, 1, 2, 3]), (S(0),)),
           "b": (Placement("cpu", [[0, 1], [2, 3]]), (B, S(0))),     # written by ranks 0 and 1 only
           "step": (Placement("cpu", [0, 1, 2, 3]), (B,))}


def _my_pieces(worker, stage=None):
    """A worker's own pieces (as if the tensors lived on the workers), optionally dying at ``stage``."""
    if stage is not None:
        os.environ[atomic.CRASH_ENV] = stage
        os.environ[atomic.CRASH_KILL_ENV] = "1"
    values = {}
    for name, a in _full().items():
        placement, sbp = LAYOUTS[name]
        i = placement.ranks.index(worker.rank)
        values[name] = sharded.ShardedValue(a.shape, a.dtype, placement, sbp,
                                            {i: a[shard_slices(a.shape, placement, sbp)[i]]})
    return values


def _dying(worker, victim, stage):
    return _my_pieces(worker, stage if worker.rank == victim else None)


def _read_my_piece(worker, path):
    placement, sbp = Placement("cpu", [0, 1, 2, 3]), (S(1),)
    return sharded.restore(path, "w", placement, sbp, ranks=[worker.rank])[0]


def test_each_worker_writes_its_own_shards_and_any_layout_restores(cluster, tmp_path):
    path = sw.save_on_workers(cluster, tmp_path / "ckpt-1", _my_pieces, metadata={"step": "7"})
    assert sorted(os.listdir(path)) == ["commit_success", "index.json"] + [
        f"shards-rank{r}.safetensors" for r in range(N)]
    index = sharded.read_index(path)
    assert index["metadata"] == {"step": "7"}
    assert sorted(s["file"] for s in index["variables"]["b"]["shards"]) == [
        "shards-rank0.safetensors", "shards-rank1.safetensors"]
    assert [s["file"] for s in index["variables"]["step"]["shards"]] == ["shards-rank0.safetensors"]
    full = _full()
    for placement, sbp in ((Placement("cpu", [0, 1]), (S(0),)), (Placement("cpu", [0, 1, 2]), (S(1),)),
                           (Placement("cpu", [0]), (B,))):
        got = sharded.restore(path, "w", placement, sbp)
        want = [full["w"][r] for r in shard_slices((9, 6), placement, sbp)]
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
    # the workers read their own pieces of another layout (only their columns) from the shared path
    got = cluster.run(_read_my_piece, path)
    want = [full["w"][r] for r in shard_slices((9, 6), Placement("cpu", [0, 1, 2, 3]), (S(1),))]
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    assert np.array_equal(sharded.restore(path, "b", Placement("cpu", [0]), (B,))[0], full["b"])
    assert sharded.restore(path, "step", Placement("cpu", [0]), (B,))[0] == 7


def _upload(local_path, target):
    """An upload hook (as to another store), leaving a trace of what it moved."""
    from tensorweave.saving import tensor_file
    assert os.path.dirname(local_path) != os.path.dirname(target)
    tensor_file.copy_atomic(local_path, target)
    with open(target + ".uploaded", "w") as f:
        f.write(local_path)


def test_workers_write_on_their_local_disk_and_upload(cluster, tmp_path):
    local = tmp_path / "local"
    path = sw.save_on_workers(cluster, tmp_path / "shared" / "ckpt-1", _my_pieces, local_dir=str(local),
                              upload=_upload)
    traces = sorted(f for f in os.listdir(path) if f.endswith(".uploaded"))
    assert traces == [f"shards-rank{r}.safetensors.uploaded" for r in range(N)]
    assert not any(files for _, _, files in os.walk(local))        # the local copies are removed
    assert np.array_equal(sharded.read_region(path, "w", (slice(0, 9), slice(0, 6))), _full()["w"])
    # the default upload: a durable copy
    path = sw.save_on_workers(cluster, tmp_path / "shared" / "ckpt-2", _my_pieces, local_dir=str(local))
    assert np.array_equal(sharded.read_region(path, "w", (slice(0, 9), slice(0, 6))), _full()["w"])


def _lose_upload(local_path, target):
    pass


def test_an_upload_that_loses_the_file_fails_the_save(cluster, tmp_path):
    with pytest.raises(FileNotFoundError, match="shards-rank0.safetensors was reported written"):
        sw.save_on_workers(cluster, tmp_path / "ckpt-1", _my_pieces, local_dir=str(tmp_path / "l"),
                           upload=_lose_upload)
    assert os.listdir(tmp_path) == ["l"]          # no staging directory, nothing committed


def _disagree(worker):
    values = _my_pieces(worker)
    if worker.rank == 3:
        values["step"] = sharded.ShardedValue((), np.int32, LAYOUTS["step"][0], (B,), {3: np.int32(0)})
    return values


def test_workers_that_describe_a_value_differently_fail_the_save(cluster, tmp_path):
    with pytest.raises(ValueError, match="workers 0 and 3 describe 'step' differently"):
        sw.save_on_workers(cluster, tmp_path / "ckpt-1", _disagree)
    assert sharded.list_checkpoints(tmp_path) == [] and os.listdir(tmp_path) == []


@pytest.mark.parametrize("stage", ["sharded_file_partial_write", "sharded_file_written", "sharded_file_renamed",
                                   "sharded_rank_written", "sharded_uploaded"])
def test_a_worker_killed_during_the_save_leaves_the_previous_checkpoint_current(cluster, tmp_path, stage):
    first = sw.save_on_workers(cluster, tmp_path / "ckpt-1", _my_pieces)
    local = str(tmp_path / "local") if stage == "sharded_uploaded" else None
    with pytest.raises(ray.exceptions.RayActorError):
        sw.save_on_workers(cluster, tmp_path / "ckpt-2", _dying, 2, stage, local_dir=local)
    cluster.restart_worker(2)
    assert sharded.list_checkpoints(tmp_path) == [first]
    assert sorted(os.listdir(tmp_path)) == ["ckpt-1"] + (["local"] if local else [])   # no staging left
    assert np.array_equal(sharded.read_region(first, "w", (slice(0, 9), slice(0, 6))), _full()["w"])
    # the next save works (the restarted worker writes again)
    assert sharded.list_checkpoints(tmp_path)[-1] == first
    second = sw.save_on_workers(cluster, tmp_path / "ckpt-2", _my_pieces)
    assert sharded.list_checkpoints(tmp_path) == [first, second]


# ---- MultiWorkerMirroredStrategy ----------------------------------------------------------------------------
def _data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((48, 5)).astype(np.float32)
    y = (x @ rng.standard_normal((5, 2)) + 0.1).astype(np.float32)
    return x, y


def _model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(6, activation="tanh"), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    return model


def _strategy(n):
    return tw.distribute.MultiWorkerMirroredStrategy(tw.distribute.RayClusterResolver(num_workers=n))


def _spy_driver_writes(monkeypatch):
    from tensorweave.keras import sharded_saving
    calls, real = [], sharded_saving._save
    monkeypatch.setattr(sharded_saving, "_save", lambda *a: (calls.append(a[0]), real(*a)))
    return calls


def test_a_model_changed_on_the_driver_after_fit_is_saved_by_the_driver(cluster, tmp_path, monkeypatch):
    driver_writes = _spy_driver_writes(monkeypatch)
    x, y = _data()
    with _strategy(N).scope():
        model = _model()
    model.fit(x, y, batch_size=12, epochs=1, shuffle=False, verbose=0)
    kernel = model.layers[0].kernel
    kernel.assign(kernel.numpy() + 1.0)                  # the workers still hold the old values
    model.save(tmp_path / "m.keras")
    assert driver_writes == [str(tmp_path / "m.keras")]    # the workers' shards failed the driver's CRCs
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert np.array_equal(loaded.layers[0].kernel.numpy(), kernel.numpy())


def test_save_on_4_workers_then_resume_on_2_continues_the_loss_curve(cluster, tmp_path, monkeypatch):
    # (last in this file: it replaces the module's 4-worker cluster by a 2-worker one)
    driver_writes = _spy_driver_writes(monkeypatch)
    x, y = _data()
    ref = _model()
    want = ref.fit(x, y, batch_size=12, epochs=4, shuffle=False, verbose=0).history["loss"]
    with _strategy(N).scope():
        model = _model()
    first = model.fit(x, y, batch_size=12, epochs=2, shuffle=False, verbose=0).history["loss"]
    path = tmp_path / "m.keras"
    model.save(path)
    assert driver_writes == []                              # the workers wrote every shard
    index = sharded.read_index(path)
    kernel = index["variables"]["weights/layers/1/vars/0"]      # 5 rows: 2, 1, 1, 1
    assert kernel["sbp"] == ["S(0)"] and sorted(s["file"] for s in kernel["shards"]) == [
        f"shards-rank{r}.safetensors" for r in range(N)]
    assert [s["stop"][0] - s["start"][0] for s in sorted(kernel["shards"], key=lambda s: s["file"])] == [2, 1, 1, 1]
    ray_cluster.shutdown()
    ray_cluster.connect(num_workers=2, timeout=120, transport="object_store", resources_per_worker={"CPU": 0.5})
    with _strategy(2).scope():
        resumed = keras.models.load_model(path)
    assert int(resumed.optimizer.iterations.numpy()) == 2 * 4
    then = resumed.fit(x, y, batch_size=12, epochs=4, initial_epoch=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(first + then, want, rtol=1e-5)
    for a, b in zip(resumed.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
