"""Loading a Keras model limits the weights of that model only: layers that other threads
build meanwhile get their own initializers and no limit (the limit is a per-load context,
not a patched ``Layer.add_weight``)."""
import threading

import numpy as np

import tensorweave as tw
from .adversarial_helpers import keras_file
from tensorweave import keras
from tensorweave.keras.saving import load_model


class Gate(keras.layers.Layer):
    """A layer whose build waits until the other thread has built its layer."""
    entered, release = threading.Event(), threading.Event()
    armed = False        # only the build during load_model waits

    def build(self, input_shape):
        if Gate.armed:
            Gate.entered.set()
            assert Gate.release.wait(60), "the other thread never built its layer"
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="w")

    def call(self, x):
        return x * self.w


def test_layers_built_by_another_thread_during_a_load(tmp_path):
    model = keras.Sequential([keras.Input(shape=(3,)), Gate(), keras.layers.Dense(2)])
    path = str(tmp_path / "gate.keras")
    model.save(path)
    results = {}

    def other_thread():
        assert Gate.entered.wait(60)
        try:
            big = keras.layers.Dense(500, kernel_initializer="ones")   # far over the small file's weights
            big.build((None, 400))
            results["kernel"] = big.kernel.numpy()
        except BaseException as e:  # noqa: BLE001 - reported below
            results["error"] = e
        finally:
            Gate.release.set()
    t = threading.Thread(target=other_thread)
    t.start()
    Gate.armed = True
    try:
        loaded = load_model(path, custom_objects={"Gate": Gate})
    finally:
        Gate.armed = False
        Gate.release.set()
        t.join()
    assert "error" not in results, results.get("error")
    assert results["kernel"].shape == (400, 500) and np.all(results["kernel"] == 1.0)
    np.testing.assert_array_equal(loaded.predict(np.ones((1, 3), np.float32), verbose=0),
                                  model.predict(np.ones((1, 3), np.float32), verbose=0))


def test_the_limit_still_applies_to_the_model_being_loaded(tmp_path):
    import json
    import zipfile
    path = keras_file(tmp_path)
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    doc = json.loads(members["config.json"])
    for layer in doc["config"]["layers"]:
        if layer["class_name"] == "Dense":
            layer["config"]["units"] = 10 ** 6
    members["config.json"] = json.dumps(doc).encode()
    with zipfile.ZipFile(path, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    try:
        load_model(path)
    except ValueError as e:
        assert "asks for a weight of shape [3, 1000000]" in str(e)
    else:
        raise AssertionError("a config asking for huge weights loaded")
    layer = keras.layers.Dense(4)           # no limit is left behind
    layer.build((None, 3))
    assert layer.kernel.shape == (3, 4) and not np.all(layer.kernel.numpy() == 0)
    assert tw.keras.layers.Layer.add_weight.__qualname__ == "Layer.add_weight"
