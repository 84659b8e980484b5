"""Keras' HDF5 files (tensorweave.keras.h5): files written by TensorFlow 2.21's Keras 3 and tf-keras
(tests/keras_tests/h5_fixtures/, made by make_h5_fixtures.py there) load with the same predictions;
ours round-trip and have Keras' layout (that Keras loads them is checked by that script's ``check``);
a hostile file is refused with a clear error and runs no code."""
import json
import os
import sys

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from tensorweave import keras  # noqa: E402
from tensorweave.keras.saving import KerasLoadError  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "h5_fixtures")
sys.path.insert(0, FIXTURES)
from h5_fixture_models import build, inputs, targets  # noqa: E402

with open(os.path.join(FIXTURES, "expected.json")) as _f:
    EXPECTED = json.load(_f)


def _kind(name):
    return name.split("_", 1)[1].rsplit(".", 1)[0].replace("_legacy", "").replace(".weights", "")


@pytest.mark.parametrize("name", ["k3_func_text.h5", "tk_seq_cnn.h5"])
def test_load_model_written_by_keras(name):
    kind = _kind(name)
    model = keras.models.load_model(os.path.join(FIXTURES, name))
    np.testing.assert_allclose(model.predict(inputs(kind), verbose=0), EXPECTED[name], rtol=1e-5, atol=1e-6)
    # compiled from the training_config: the same loss and metric, a fresh Adam
    assert type(model.optimizer).__name__ == "Adam"
    loss, mae = model.evaluate(inputs(kind), targets(kind), verbose=0)
    error = np.asarray(EXPECTED[name]) - targets(kind)
    np.testing.assert_allclose([loss, mae], [np.mean(error ** 2), np.mean(np.abs(error))], rtol=1e-5)


@pytest.mark.parametrize("name", ["k3_seq_cnn.weights.h5", "tk_func_text_legacy.h5"])
def test_load_weights_written_by_keras(name):
    kind = _kind(name)
    model = build(keras, kind)
    model.load_weights(os.path.join(FIXTURES, name)).assert_consumed()
    np.testing.assert_allclose(model.predict(inputs(kind), verbose=0), EXPECTED[name], rtol=1e-5, atol=1e-6)


def _trained(kind):
    keras.utils.set_random_seed(5)
    model = build(keras, kind)
    model.compile("adam", "mse", metrics=["mae"])
    if kind == "seq_cnn":       # BatchNormalization's moving statistics move (the RNN's first fit compiles for ~15 s)
        model.fit(inputs(kind), targets(kind), epochs=1, verbose=0)
    return model


@pytest.mark.parametrize("kind", ["seq_cnn", "func_text"])
def test_round_trip_and_keras_layout(kind, tmp_path):
    model = _trained(kind)
    want = model.predict(inputs(kind), verbose=0)
    model.save(tmp_path / "m.h5")
    restored = keras.models.load_model(tmp_path / "m.h5")
    np.testing.assert_array_equal(restored.predict(inputs(kind), verbose=0), want)
    assert restored._compile_config["loss"] == "mse" and type(restored.optimizer).__name__ == "Adam"
    with h5py.File(tmp_path / "m.h5") as f:
        config = json.loads(f.attrs["model_config"])
        assert config["class_name"] == ("Sequential" if kind == "seq_cnn" else "Functional")
        assert json.loads(f.attrs["training_config"])["optimizer_config"]["class_name"] == "Adam"
        names = [n.decode() for n in f["model_weights"].attrs["layer_names"]]
        assert names == [layer.name for layer in model.layers]
        dense = model.layers[-1]
        group = f["model_weights"][dense.name]
        assert [n.decode() for n in group.attrs["weight_names"]] == [f"{dense.name}/kernel:0", f"{dense.name}/bias:0"]
    for name in ("w.weights.h5", "w.h5"):
        model.save_weights(tmp_path / name)
        fresh = build(keras, kind)
        fresh.load_weights(tmp_path / name).assert_consumed()
        np.testing.assert_array_equal(fresh.predict(inputs(kind), verbose=0), want)
    with h5py.File(tmp_path / "w.weights.h5") as f:       # Keras 3's tree, keyed by class name
        if kind == "seq_cnn":
            assert f["layers/conv2d/vars/0"].shape == (3, 3, 1, 4)
            assert len(f["layers/batch_normalization/vars"]) == 4
        else:
            assert f["layers/lstm/cell/vars/1"].shape == (5, 20)
            assert f["layers/bidirectional/backward_layer/cell/vars/0"].shape == (4, 6)
    with h5py.File(tmp_path / "w.h5") as f:               # the legacy layout
        assert "layer_names" in f.attrs


def test_weights_h5_of_subclassed_model_wait_for_first_call(tmp_path):
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.d1, self.d2 = keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)

        def call(self, x):
            return self.d2(self.d1(x))
    x = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    net = Net()
    want = net(x).numpy()
    net.save_weights(tmp_path / "n.weights.h5")
    with h5py.File(tmp_path / "n.weights.h5") as f:
        assert f["d1/vars/0"].shape == (5, 4) and f["d2/vars/1"].shape == (1,)
    fresh = Net()
    fresh.load_weights(tmp_path / "n.weights.h5")
    np.testing.assert_allclose(fresh(x).numpy(), want, rtol=1e-6)
    with pytest.raises(NotImplementedError, match="subclassed model"):
        net.save(tmp_path / "n.h5")


def test_mismatches_are_reported(tmp_path):
    model = _trained("seq_cnn")
    model.save_weights(tmp_path / "w.weights.h5")
    model.save_weights(tmp_path / "w.h5")
    other = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(5, 3), keras.layers.MaxPooling2D(),
                              keras.layers.BatchNormalization(), keras.layers.Flatten(), keras.layers.Dropout(0.1),
                              keras.layers.Dense(3)])
    with pytest.raises(ValueError, match=r"layers/conv2d/vars/0.*shape \(3, 3, 1, 4\).*\(3, 3, 1, 5\)"):
        other.load_weights(tmp_path / "w.weights.h5")
    with pytest.raises(ValueError, match=r"layer 'conv2d\w*' weight 0"):
        other.load_weights(tmp_path / "w.h5")
    small = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3)])
    with pytest.raises(ValueError, match="weights for 3 layers"):
        small.load_weights(tmp_path / "w.h5")
    status = small.load_weights(tmp_path / "w.weights.h5")
    with pytest.raises(AssertionError, match="unused file entries"):
        status.assert_consumed()
    with pytest.raises(KerasLoadError, match="holds weights only"):
        keras.models.load_model(tmp_path / "w.h5")


def test_model_checkpoint_writes_keras_hdf5(tmp_path):
    model = _trained("seq_cnn")
    ckpt = keras.callbacks.ModelCheckpoint(str(tmp_path / "c.weights.h5"), monitor="loss", save_weights_only=True)
    model.fit(inputs("seq_cnn"), targets("seq_cnn"), epochs=1, verbose=0, callbacks=[ckpt])
    with h5py.File(tmp_path / "c.weights.h5") as f:
        assert "layers" in f
    full = keras.callbacks.ModelCheckpoint(str(tmp_path / "c.h5"), monitor="loss")
    model.fit(inputs("seq_cnn"), targets("seq_cnn"), epochs=1, verbose=0, callbacks=[full])
    np.testing.assert_array_equal(keras.models.load_model(tmp_path / "c.h5").predict(inputs("seq_cnn"), verbose=0),
                                  model.predict(inputs("seq_cnn"), verbose=0))


# ---- hostile and broken files ----------------------------------------------------------------------------
def _model_file(path, config, weights=None):
    with h5py.File(path, "w") as f:
        f.attrs["model_config"] = json.dumps(config).encode()
        g = f.create_group("model_weights")
        g.attrs["layer_names"] = np.array([n.encode() for n in (weights or {})], dtype="S")
        for name, arrays in (weights or {}).items():
            lg = g.create_group(name)
            lg.attrs["weight_names"] = np.array([f"{name}/w{i}".encode() for i in range(len(arrays))], dtype="S")
            for i, a in enumerate(arrays):
                lg.create_dataset(f"{name}/w{i}", data=a)


def _functional(*layers):
    entries = [{"class_name": "InputLayer", "name": "x", "config": {"batch_input_shape": [None, 2], "name": "x"},
                "inbound_nodes": []}]
    prev = "x"
    for cls, cfg in layers:
        entries.append({"class_name": cls, "name": cfg["name"], "config": cfg, "inbound_nodes": [[[prev, 0, 0, {}]]]})
        prev = cfg["name"]
    return {"class_name": "Functional", "config": {"name": "m", "layers": entries, "input_layers": [["x", 0, 0]],
                                                   "output_layers": [[prev, 0, 0]]}}


def test_lambda_bytecode_is_never_loaded(tmp_path):
    # tf-keras stores a Lambda's function as base64 marshalled bytecode: refused even with safe_mode=False
    config = _functional(("Lambda", {"name": "lam", "function": ["4wEAAAAAAAAA", None, None],
                                     "function_type": "lambda", "module": "__main__", "arguments": {}}))
    _model_file(tmp_path / "l.h5", config)
    with pytest.raises(KerasLoadError, match="bytecode; tensorweave never runs code from a file"):
        keras.models.load_model(tmp_path / "l.h5")
    with pytest.raises(KerasLoadError, match="bytecode"):
        keras.models.load_model(tmp_path / "l.h5", safe_mode=False)
    # the function may come from custom_objects, by layer name, when the user opts in
    model = keras.models.load_model(tmp_path / "l.h5", safe_mode=False, custom_objects={"lam": lambda t: t * 3.0})
    np.testing.assert_allclose(model.predict(np.ones((1, 2), np.float32), verbose=0), [[3.0, 3.0]])


def test_unknown_keras_settings_are_refused_not_dropped(tmp_path):
    config = _functional(("Dense", {"name": "d", "units": 1, "lora_rank": 4}))
    _model_file(tmp_path / "d.h5", config, {"d": [np.ones((2, 1), np.float32), np.zeros(1, np.float32)]})
    with pytest.raises(KerasLoadError, match=r"'d' \(Dense\) has the setting lora_rank=4"):
        keras.models.load_model(tmp_path / "d.h5")
    config = _functional(("Dense", {"name": "d", "units": 1, "lora_rank": None, "quantization_config": None}))
    _model_file(tmp_path / "ok.h5", config, {"d": [np.full((2, 1), 2, np.float32), np.ones(1, np.float32)]})
    model = keras.models.load_model(tmp_path / "ok.h5")
    np.testing.assert_allclose(model.predict(np.ones((1, 2), np.float32), verbose=0), [[5.0]])


def test_links_foreign_dtypes_and_bombs_are_refused(tmp_path):
    dense = _functional(("Dense", {"name": "d", "units": 1}))
    # an external link would read another file
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("k", data=np.ones((2, 1), np.float32))
    _model_file(tmp_path / "ext.h5", dense, {"d": [np.ones((2, 1), np.float32), np.zeros(1, np.float32)]})
    with h5py.File(tmp_path / "ext.h5", "a") as f:
        del f["model_weights/d/d/w0"]
        f["model_weights/d/d/w0"] = h5py.ExternalLink(str(other), "k")
    with pytest.raises(KerasLoadError, match="ExternalLink; only plain groups and datasets"):
        keras.models.load_model(tmp_path / "ext.h5")
    # strings or objects where numbers belong
    _model_file(tmp_path / "str.h5", dense, {"d": [np.array([b"ab", b"cd"]).reshape(2, 1), np.zeros(1, np.float32)]})
    with pytest.raises(KerasLoadError, match="only numbers are read"):
        keras.models.load_model(tmp_path / "str.h5")
    # a compressed dataset far larger than the file (never decompressed)
    _model_file(tmp_path / "bomb.h5", dense)
    with h5py.File(tmp_path / "bomb.h5", "a") as f:
        g = f["model_weights"].create_group("d")
        g.attrs["weight_names"] = np.array([b"d/w0", b"d/w1"], dtype="S")
        f["model_weights"].attrs["layer_names"] = np.array([b"d"], dtype="S")
        g.create_dataset("d/w0", shape=(2, 1), dtype="f4")
        g.create_dataset("d/w1", shape=(1 << 31,), dtype="f4", chunks=(1 << 20,), compression="gzip")
    with pytest.raises(KerasLoadError, match="more data .* than a \\d+-byte file"):
        keras.models.load_model(tmp_path / "bomb.h5")
    # not HDF5 / missing
    (tmp_path / "junk.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    with pytest.raises(KerasLoadError, match="not an HDF5 file"):
        keras.models.load_model(tmp_path / "junk.h5")


def test_a_huge_layer_in_the_config_is_refused_before_allocating(tmp_path):
    config = _functional(("Dense", {"name": "d", "units": 1 << 30}))
    _model_file(tmp_path / "big.h5", config, {"d": [np.ones((2, 1), np.float32), np.zeros(1, np.float32)]})
    with pytest.raises(KerasLoadError, match="more than the saved weights hold"):
        keras.models.load_model(tmp_path / "big.h5")


def test_without_h5py_the_error_says_how_to_get_it(tmp_path, monkeypatch):
    model = _trained("seq_cnn")
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(ImportError, match=r"pip install 'tensorweave\[h5\]'"):
        model.save_weights(tmp_path / "w.weights.h5")
    with pytest.raises(ImportError, match="needs h5py"):
        keras.callbacks.ModelCheckpoint(str(tmp_path / "c.weights.h5"), save_weights_only=True)
    model.save_weights(tmp_path / "w.weights.safetensors")          # our own format needs nothing


def test_loading_runs_no_pickle_marshal_or_eval(monkeypatch):
    import builtins
    import marshal
    import pickle

    def forbidden(*args, **kwargs):
        raise AssertionError("FORBIDDEN call while loading an HDF5 file")
    # imports (which exec modules) first
    keras.models.load_model(os.path.join(FIXTURES, "tk_seq_cnn.h5")).load_weights(
        os.path.join(FIXTURES, "k3_seq_cnn.weights.h5"))
    for mod, name in ((pickle, "loads"), (pickle, "load"), (marshal, "loads"), (builtins, "eval"), (builtins, "exec")):
        monkeypatch.setattr(mod, name, forbidden)
    model = keras.models.load_model(os.path.join(FIXTURES, "tk_seq_cnn.h5"))
    model.load_weights(os.path.join(FIXTURES, "k3_seq_cnn.weights.h5"))
    import tensorweave.keras.h5 as h5
    for path in [h5.__file__] + [os.path.join(os.path.dirname(h5.__file__), f) for f in
                                 ("h5_reader.py", "keras_config.py", "layouts.py")]:
        src = open(path).read()
        for word in ("import pickle", "import marshal", "eval(", "exec(", "allow_pickle=True"):
            assert word not in src, (path, word)
