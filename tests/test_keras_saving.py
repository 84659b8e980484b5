"""model.save / load_model: architecture, weights, compile config and optimizer state, so that
training continues bit-exactly after a save and load."""
import json
import zipfile

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.saved_model as sm
from tensorweave import keras
from tensorweave.keras.saving import KerasLoadError, load_model, save_model

RNG = np.random.default_rng(0)
X = RNG.normal(size=(16, 5)).astype(np.float32)
Y = RNG.normal(size=(16, 3)).astype(np.float32)


def _weights_equal(a, b):
    wa, wb = a.get_weights(), b.get_weights()
    return len(wa) == len(wb) and all(u.dtype == v.dtype and np.array_equal(u, v) for u, v in zip(wa, wb))


def _continue_bit_exact(make, x, y, path, compile_kwargs, fit_kwargs=None):
    """Train, save, load; then train both the original and the loaded model further."""
    fit_kwargs = dict(epochs=2, batch_size=4, shuffle=False, verbose=0, **(fit_kwargs or {}))
    keras.utils.set_random_seed(1)
    model = make()
    model.compile(**compile_kwargs)
    model.fit(x, y, **fit_kwargs)
    model.save(path)
    loaded = load_model(path)
    assert type(loaded) is type(model)
    assert np.array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert int(loaded.optimizer.iterations.numpy()) == int(model.optimizer.iterations.numpy()) > 0
    h1 = model.fit(x, y, **fit_kwargs).history
    h2 = loaded.fit(x, y, **fit_kwargs).history
    assert h1 == h2
    assert _weights_equal(model, loaded)
    return model, loaded


def _mlp():
    return keras.Sequential([keras.Input(shape=(5,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.BatchNormalization(), keras.layers.Dense(3)])


@pytest.mark.parametrize("suffix", [".keras", ""])
def test_sequential_adam_continues_bit_exact(tmp_path, suffix):
    _continue_bit_exact(_mlp, X, Y, str(tmp_path / f"mlp{suffix}"),
                        dict(optimizer="adam", loss="mse", metrics=["mae"]))


def test_functional_sgd_momentum_object_loss_and_lr_change(tmp_path):
    def make():
        a = keras.Input(shape=(5,), name="a")
        h = keras.layers.Add()([keras.layers.Dense(4)(a), keras.layers.Dense(4)(a)])
        return keras.Model(a, keras.layers.Dense(3)(h))
    model, loaded = _continue_bit_exact(make, X, Y, str(tmp_path / "f.keras"),
                                        dict(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                                             loss=keras.losses.Huber(delta=0.5)))
    assert type(loaded.optimizer).__name__ == "SGD" and loaded.optimizer.momentum == 0.9
    model.optimizer.learning_rate = 0.01
    model.save(str(tmp_path / "f2.keras"))
    assert float(load_model(str(tmp_path / "f2.keras")).optimizer.learning_rate.numpy()) == pytest.approx(0.01)


def test_embedding_lstm_classifier(tmp_path):
    xs = RNG.integers(0, 20, size=(16, 7)).astype(np.int32)
    ys = RNG.integers(0, 2, size=(16,))

    def make():
        return keras.Sequential([keras.Input(shape=(7,), dtype="int32"), keras.layers.Embedding(20, 4, mask_zero=True),
                                 keras.layers.LSTM(5), keras.layers.Dense(2, activation="softmax")])
    _continue_bit_exact(make, xs, ys, str(tmp_path / "rnn"),
                        dict(optimizer="rmsprop", loss="sparse_categorical_crossentropy", metrics=["accuracy"]))


@keras.layers.register_layer
class TwoLayer(keras.Model):
    """A registered subclassed model (built by its first call)."""

    def __init__(self, units=3, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.hidden = keras.layers.Dense(6, activation="tanh")
        self.out = keras.layers.Dense(units)

    def call(self, x):
        return self.out(self.hidden(x))

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def test_subclassed_registered_model(tmp_path):
    _continue_bit_exact(lambda: TwoLayer(), X, Y, str(tmp_path / "sub.keras"), dict(optimizer="adam", loss="mse"))


def test_keras_file_layout_and_compile_false(tmp_path):
    model = _mlp()
    model.compile(optimizer="adam", loss="mse")
    model.fit(X, Y, epochs=1, verbose=0)
    path = str(tmp_path / "m.keras")
    save_model(model, path)
    with zipfile.ZipFile(path) as z:
        assert sorted(z.namelist()) == ["config.json", "metadata.json", "model.weights.safetensors"]
        config = json.loads(z.read("config.json"))
    assert config["class_name"] == "Sequential" and config["compile_config"]["loss"] == "mse"
    assert set(config["optimizer_state"]["built_for"]) < set(config["weights"])   # BN moving stats are not trained
    plain = load_model(path, compile=False)
    assert not plain.compiled and plain.optimizer is None
    np.testing.assert_array_equal(plain.predict(X, verbose=0), model.predict(X, verbose=0))
    with pytest.raises(FileExistsError):
        save_model(model, path, overwrite=False)


def test_custom_objects_for_losses_and_layers(tmp_path):
    def my_loss(y_true, y_pred):
        return tw.reduce_mean(tw.abs(y_true - y_pred) ** 3, axis=-1)

    class Scale(keras.layers.Layer):
        def __init__(self, factor=2.0, **kwargs):
            super().__init__(**kwargs)
            self.factor = factor

        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="w")

        def call(self, x):
            return x * self.w * self.factor

        def get_config(self):
            return {**super().get_config(), "factor": self.factor}

    model = keras.Sequential([keras.Input(shape=(5,)), Scale(3.0), keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss=my_loss)
    model.fit(X, Y, epochs=1, verbose=0)
    path = str(tmp_path / "c.keras")
    model.save(path)
    with pytest.raises(KerasLoadError, match="Unknown layer class 'Scale'.*custom_objects"):
        load_model(path)
    with pytest.raises(KerasLoadError, match="my_loss"):
        load_model(path, custom_objects={"Scale": Scale})
    loaded = load_model(path, custom_objects={"Scale": Scale, "my_loss": my_loss})
    assert loaded.layers[0].factor == 3.0
    np.testing.assert_array_equal(loaded.predict(X, verbose=0), model.predict(X, verbose=0))
    assert _weights_equal(loaded, model)


def test_saved_model_directory_serves_and_reloads_as_keras(tmp_path):
    model = _mlp()
    model.compile(optimizer="adam", loss="mse")
    model.fit(X, Y, epochs=1, verbose=0)
    path = str(tmp_path / "dir")
    model.save(path)
    served = sm.load(path).signatures["serving_default"]
    (name,) = served.output_names
    np.testing.assert_array_equal(served(X)[name].numpy(), model.predict(X, verbose=0))
    reloaded = load_model(path)
    assert _weights_equal(reloaded, model)
    f = tw.function(lambda x: x * 2.0, input_signature=[tw.TensorSpec([None], tw.float32)])
    sm.save(f, str(tmp_path / "plain"))
    with pytest.raises(KerasLoadError, match="not saved from a Keras model"):
        load_model(str(tmp_path / "plain"))
