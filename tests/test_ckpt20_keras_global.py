"""Keras models with global weights (MirroredStrategy, keras.distribution.ModelParallel):
model.save / load_model and save_weights / load_weights write per-rank shards and load into
another layout or one process bit for bit (optimizer state included); a SavedModel export is
gathered and serves in a plain process; a 4-rank run resumes on 2 ranks and its loss goes on."""
import contextlib
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras
from tensorweave.saving import sharded
from tensorweave.train import Checkpoint, CheckpointManager

RNG = np.random.default_rng(0)
X = RNG.standard_normal((16, 6)).astype(np.float32)
Y = (X[:, 0] + X[:, 1] > 0).astype(np.int64)
DEVICES = [f"cpu:{i}" for i in range(4)]


def _model_parallel(shape, kernel_axes, devices):
    mesh = keras.distribution.DeviceMesh(shape, ["batch", "model"], devices)
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map["d1/kernel"], layout_map["d2/kernel"] = kernel_axes
    return keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch").scope()


INIT = [RNG.standard_normal(s).astype(np.float32) * 0.3 for s in ((6, 8), (8,), (8, 2), (2,))]


def _build(scope=None, init=INIT):
    with scope or contextlib.nullcontext():
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu", name="d1"),
                                  keras.layers.Dense(2, name="d2")])
        model.set_weights(init)
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy")
    return model


def _fit(model, epochs=1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(X, Y, batch_size=8, epochs=epochs, shuffle=False, verbose=0).history["loss"]


def _same_state(a, b):
    for x, y in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(x, y)
    assert len(a.optimizer.variables) == len(b.optimizer.variables)
    for x, y in zip(a.optimizer.variables, b.optimizer.variables):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


@pytest.fixture(scope="module")
def trained():
    model = _build(_model_parallel((2, 2), [(None, "model"), ("model", None)], DEVICES))
    _fit(model)
    return model


def test_model_save_is_sharded_and_loads_into_other_layouts(trained, tmp_path):
    path = str(tmp_path / "m.keras")
    trained.save(path)
    index = sharded.read_index(path)
    assert index["variables"]["weights/layers/1/vars/0"]["sbp"] == ["B", "S(1)"]
    # the mesh's batch axis holds copies: only the ranks at its coordinate 0 write
    assert sorted(f for f in os.listdir(path) if f.startswith("shards")) == [
        "shards-rank0.safetensors", "shards-rank1.safetensors"]
    local = keras.models.load_model(path)
    assert not any(getattr(w, "is_global", False) for w in local.weights)
    _same_state(trained, local)
    with _model_parallel((1, 3), [("model", None), (None, "model")], DEVICES[:3]):
        other = keras.models.load_model(path)
    assert [w.sbp for w in other.weights] == [(tw.sbp.broadcast, tw.sbp.split(0)), (tw.sbp.broadcast,) * 2,
                                              (tw.sbp.broadcast, tw.sbp.split(1)), (tw.sbp.broadcast,) * 2]
    _same_state(trained, other)
    np.testing.assert_allclose(other(X[:5]).numpy(), trained(X[:5]).numpy(), rtol=1e-5, atol=1e-6)
    # training goes on from the same state in either layout
    np.testing.assert_allclose(_fit(other), _fit(local), rtol=1e-5)


def test_a_gathered_zip_on_request_and_replacing_saves(trained, tmp_path):
    path = str(tmp_path / "m.keras")
    trained.save(path, sharded=False)
    assert os.path.isfile(path)
    _same_state(trained, keras.models.load_model(path))
    trained.save(path)                                   # the zip is replaced by a sharded directory
    assert sharded.is_committed(path)
    local = keras.models.load_model(path)
    local.save(path)                                     # ... and back
    assert os.path.isfile(path)
    _same_state(trained, keras.models.load_model(path))


def test_save_weights_of_a_mirrored_model_loads_into_two_ranks_and_one_process(tmp_path):
    model = _build(tw.distribute.MirroredStrategy(DEVICES).scope())
    _fit(model)
    path = str(tmp_path / "w.weights")
    model.save_weights(path)
    index = sharded.read_index(path)
    assert {len(v["shards"]) for v in index["variables"].values()} == {1}     # replicated: rank 0 writes
    for scope in (tw.distribute.MirroredStrategy(DEVICES[:2]).scope(), None):
        other = _build(scope, init=[np.zeros_like(w) for w in INIT])
        other.load_weights(path).assert_consumed()
        for x, y in zip(model.get_weights(), other.get_weights()):
            np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="not of model.save_weights"):
        _build().load_weights(_saved_model_dir(model, tmp_path))


def _saved_model_dir(model, tmp_path):
    path = str(tmp_path / "as.keras")
    model.save(path)
    return path


_SERVE = r"""
import sys, numpy as np, tensorweave as tw
loaded = tw.saved_model.load(sys.argv[1])
out = loaded.signatures["serving_default"](tw.constant(np.load(sys.argv[2])))
np.save(sys.argv[3], next(iter(out.values())).numpy())
"""


def test_a_saved_model_of_a_global_model_is_gathered_for_serving(trained, tmp_path):
    export = str(tmp_path / "serving")
    trained.save(export)
    np.save(tmp_path / "x.npy", X[:5])
    subprocess.run([sys.executable, "-c", _SERVE, export, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                   check=True, timeout=300)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), trained(X[:5]).numpy(), rtol=1e-5, atol=1e-6)
    restored = keras.models.load_model(export)
    _same_state(trained, restored)


@pytest.mark.parametrize("how", ["model.save", "tw.saved_model.save"])
def test_a_sharded_saved_model_of_a_global_model_serves_in_a_plain_process(trained, tmp_path, monkeypatch, how):
    from tensorweave.distribute import layout
    export, gathered, assemble = str(tmp_path / "serving"), [], layout.assemble
    monkeypatch.setattr(layout, "assemble", lambda *a: gathered.append(a) or assemble(*a))
    if how == "model.save":
        trained.save(export, sharded=True)
    else:
        tw.saved_model.save(trained, export, options=tw.saved_model.SaveOptions(experimental_sharded=True))
    monkeypatch.undo()
    assert gathered == []                                   # each rank's pieces written as they are
    shards = os.path.join(export, "variables", "sharded")
    index = sharded.read_index(shards)
    assert sorted(os.listdir(shards)) == ["commit_success", "index.json", "shards-rank0.safetensors",
                                          "shards-rank1.safetensors"]            # (B, S(1)): ranks 0 and 1 write
    assert ["B", "S(1)"] in [v["sbp"] for v in index["variables"].values()]
    np.save(tmp_path / "x.npy", X[:5])
    subprocess.run([sys.executable, "-c", _SERVE, export, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                   check=True, timeout=300)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), trained(X[:5]).numpy(), rtol=1e-5, atol=1e-6)
    assert tw.saved_model.load(export, verify_fingerprint=True) is not None
    if how == "model.save":
        _same_state(trained, keras.models.load_model(export))
    os.remove(os.path.join(shards, sorted(f for f in os.listdir(shards) if f.startswith("shards-"))[0]))
    with pytest.raises(ValueError, match="variables/sharded/shards-rank0.safetensors is missing"):
        tw.saved_model.load(export)


def test_a_four_rank_run_resumes_on_two_ranks(tmp_path):
    straight = _build(tw.distribute.MirroredStrategy(DEVICES).scope())
    want = _fit(straight, epochs=3)
    first = _build(tw.distribute.MirroredStrategy(DEVICES).scope())
    losses = _fit(first, epochs=2)
    manager = CheckpointManager(Checkpoint(model=first), str(tmp_path), async_save=True)
    manager.save()
    manager.wait_until_finished()
    second = _build(tw.distribute.MirroredStrategy(DEVICES[:2]).scope(), init=[np.zeros_like(w) for w in INIT])
    status = Checkpoint(model=second).restore(tw.train.latest_checkpoint(str(tmp_path)))
    losses += _fit(second)
    status.assert_consumed()
    assert [w.placement.size for w in second.weights] == [2] * 4
    np.testing.assert_allclose(losses, want, rtol=1e-5)


def test_model_checkpoint_callbacks_save_a_global_model_sharded(tmp_path):
    model = _build(tw.distribute.MirroredStrategy(DEVICES[:2]).scope())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, Y, batch_size=8, epochs=1, verbose=0, callbacks=[
            keras.callbacks.ModelCheckpoint(str(tmp_path / "m{epoch}.keras")),
            keras.callbacks.ModelCheckpoint(str(tmp_path / "w{epoch}.weights.safetensors"), save_weights_only=True)])
    assert sharded.is_committed(str(tmp_path / "m1.keras"))
    assert sharded.is_committed(str(tmp_path / "w1.weights.safetensors"))
    _same_state(model, keras.models.load_model(str(tmp_path / "m1.keras")))
