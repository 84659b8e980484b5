"""The Keras engine: models, the training loop, progress output, summary, config, weights."""
import io
import re

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras


@pytest.fixture(autouse=True)
def _fresh_names():
    keras.backend.clear_session()
    keras.utils.set_random_seed(1)


def _data(n=64, d=8, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    w = rng.normal(size=(d, classes))
    y = (x @ w).argmax(1)
    return x, y


def _mlp(d=8, classes=3):
    return keras.Sequential([keras.Input(shape=(d,)), keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(classes, activation="softmax")])


def test_sequential_fit_evaluate_predict():
    x, y = _data()
    model = _mlp()
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    history = model.fit(x, y, epochs=15, batch_size=16, verbose=0)
    assert set(history.history) == {"loss", "accuracy"} and len(history.history["loss"]) == 15
    assert history.history["loss"][-1] < history.history["loss"][0]
    loss, acc = model.evaluate(x, y, verbose=0)
    assert acc > 0.9 and model.metrics_names == ["loss", "accuracy"]
    probs = model.predict(x, batch_size=10, verbose=0)
    assert probs.shape == (64, 3)
    np.testing.assert_allclose(probs.sum(1), 1, rtol=1e-5)
    np.testing.assert_allclose(acc, (probs.argmax(1) == y).mean(), rtol=1e-6)


def test_functional_multi_input_multi_output():
    a = keras.Input(shape=(4,), name="a")
    b = keras.Input(shape=(3,), name="b")
    h = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([a, b])) \
        if hasattr(keras.layers, "Concatenate") else keras.layers.Dense(8)(a) + keras.layers.Dense(8)(b)
    out1 = keras.layers.Dense(1, name="reg")(h)
    out2 = keras.layers.Dense(2, activation="softmax", name="cls")(h)
    model = keras.Model([a, b], [out1, out2])
    model.compile(optimizer="adam", loss=["mse", "sparse_categorical_crossentropy"], loss_weights=[1.0, 0.5],
                  metrics=[[], ["accuracy"]])
    rng = np.random.default_rng(0)
    xa, xb = rng.normal(size=(32, 4)), rng.normal(size=(32, 3))
    ya, yb = rng.normal(size=(32, 1)), rng.integers(0, 2, 32)
    h = model.fit([xa, xb], [ya, yb], epochs=2, verbose=0)
    assert {"loss", "reg_loss", "cls_loss", "cls_accuracy"} <= set(h.history)
    np.testing.assert_allclose(h.history["loss"][-1],
                               h.history["reg_loss"][-1] + 0.5 * h.history["cls_loss"][-1], rtol=1e-4)
    p1, p2 = model.predict({"a": xa, "b": xb}, verbose=0)
    assert p1.shape == (32, 1) and p2.shape == (32, 2)


def test_subclassed_model_and_train_on_batch():
    class MLP(keras.Model):
        def __init__(self):
            super().__init__()
            self.d1 = keras.layers.Dense(8, activation="tanh")
            self.d2 = keras.layers.Dense(1)

        def call(self, x, training=None):
            return self.d2(self.d1(x))

    model = MLP()
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((4, 3), np.float32)
    first = model.train_on_batch(x, np.zeros((4, 1)))
    assert len(model.trainable_weights) == 4
    for _ in range(20):
        last = model.train_on_batch(x, np.zeros((4, 1)))
    assert last < first
    assert np.isfinite(model.test_on_batch(x, np.zeros((4, 1))))


def test_progress_output_verbose_1_plain_and_verbose_2(capsys):
    x, y = _data(n=40)
    model = _mlp()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, epochs=2, batch_size=16, verbose=1)
    out = capsys.readouterr().out
    lines = out.strip().split("\n")
    assert lines[0] == "Epoch 1/2" and lines[2] == "Epoch 2/2"
    assert re.fullmatch(r"3/3 \u2501{20} \d+s \d+(ms|us|s)/step - accuracy: \d\.\d{4} - loss: \d\.\d{4}", lines[1]), lines[1]
    model.fit(x, y, epochs=1, batch_size=16, verbose=2)
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(r"3/3 - \d+s - \d+(ms|us|s)/step - accuracy: \d\.\d{4} - loss: \d\.\d{4}", line), line


def test_progbar_terminal_redraws_in_place():
    class Tty(io.StringIO):
        def isatty(self):
            return True
    out = Tty()
    bar = keras.utils.Progbar(4, stream=out, interval=0)
    for i in range(1, 5):
        bar.update(i, [("loss", 1.0 / i)])
    text = out.getvalue()
    assert text.count("\r") == 4 and text.endswith("\n")
    assert "\x1b[32m" in text  # the done part in green
    assert "4/4" in text and "loss: 0.6111" in text  # averaged over the steps so far, then the final value
    assert text.rstrip().endswith("loss: 0.2500")


def test_summary_table():
    model = _mlp()
    lines = []
    model.summary(print_fn=lines.append)
    text = lines[0]
    assert 'Model: "sequential"' in text
    assert "dense (Dense)" in text and "(None, 16)" in text and "144" in text
    assert "dense_1 (Dense)" in text and "(None, 3)" in text and "51" in text
    assert " Total params: 195 (780.00 B)" in text
    assert " Trainable params: 195 (780.00 B)" in text
    assert " Non-trainable params: 0 (0.00 B)" in text


def test_wrong_input_shape_names_layer_and_shapes():
    model = _mlp()
    with pytest.raises(ValueError, match=r'layer "dense".*expected axis -1 of input shape to have value 8, '
                                         r'but received input with shape \(2, 5\)|layer .sequential. is incompatible.*expected '
                                         r'shape=\(None, 8\), found shape=\(2, 5\)'):
        model.predict(np.ones((2, 5)), verbose=0)
    layer = keras.layers.Dense(3)
    layer(np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match=r'Input 0 of layer "dense_2" is incompatible.*value 4.*\(2, 5\)'):
        layer(np.ones((2, 5), np.float32))


def test_get_set_weights_and_config_round_trip():
    model = _mlp()
    clone = keras.Sequential.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    x = np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32)
    np.testing.assert_array_equal(model.predict(x, verbose=0), clone.predict(x, verbose=0))
    inp = keras.Input(shape=(8,))
    out = keras.layers.Dense(2)(keras.layers.Dense(4, activation="relu")(inp))
    fmodel = keras.Model(inp, out)
    fclone = keras.Model.from_config(fmodel.get_config())
    fclone.set_weights(fmodel.get_weights())
    np.testing.assert_array_equal(fmodel.predict(x, verbose=0), fclone.predict(x, verbose=0))
    with pytest.raises(ValueError, match="expects 4 weights"):
        fmodel.set_weights([np.zeros(1)])


def test_save_and_load_weights(tmp_path):
    x, y = _data()
    model = _mlp()
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=2, verbose=0)
    path = tmp_path / "m.weights.safetensors"
    model.save_weights(path)
    other = _mlp()
    other.load_weights(path)
    np.testing.assert_array_equal(model.predict(x, verbose=0), other.predict(x, verbose=0))


def test_set_random_seed_makes_training_bit_exact():
    x, y = _data()

    def run():
        keras.utils.set_random_seed(42)
        m = keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dropout(0.3), keras.layers.Dense(3, activation="softmax")])
        m.compile("adam", "sparse_categorical_crossentropy")
        m.fit(x, y, epochs=2, batch_size=8, verbose=0)
        return m.get_weights()
    for a, b in zip(run(), run()):
        np.testing.assert_array_equal(a, b)


def test_validation_data_class_weight_and_initial_epoch():
    x, y = _data(n=60)
    model = _mlp()
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    h = model.fit(x, y, validation_data=(x[:10], y[:10]), epochs=3, initial_epoch=1, verbose=0,
                  class_weight={0: 1.0, 1: 2.0, 2: 0.5})
    assert h.epoch == [1, 2] and "val_loss" in h.history and "val_accuracy" in h.history
    h = model.fit(x, y, validation_split=0.25, epochs=1, verbose=0)
    assert "val_loss" in h.history


def test_training_flag_reaches_dropout_and_run_eagerly():
    model = keras.Sequential([keras.Input(shape=(100,)), keras.layers.Dropout(0.5)])
    x = np.ones((2, 100), np.float32)
    np.testing.assert_array_equal(model(x).numpy(), x)
    y = model(x, training=True).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0} and (y == 0).any()
    m = _mlp()
    m.compile("sgd", "sparse_categorical_crossentropy", run_eagerly=True)
    xx, yy = _data(n=8)
    m.fit(xx, yy, verbose=0)
    assert m._train_fn == m.train_step


def test_fit_on_dataset():
    pytest.importorskip("tensorweave.data")
    x, y = _data()
    ds = tw.data.Dataset.from_tensor_slices((x, y)).batch(16)
    model = _mlp()
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    h = model.fit(ds, epochs=2, verbose=0)
    assert len(h.history["loss"]) == 2
    assert len(model.evaluate(ds, verbose=0)) == 2


def test_train_and_test_on_batch_report_this_batch_not_a_running_mean():
    # Keras 3 resets the metrics first (checked against Keras 3.15): the logs are the batch's own
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, kernel_initializer="ones")])
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse", metrics=["mae"])
    x = np.ones((4, 3), np.float32)
    assert model.train_on_batch(x, np.zeros((4, 1))) == pytest.approx([9.0, 3.0])
    assert model.train_on_batch(x, np.full((4, 1), 3.0)) == pytest.approx([0.0, 0.0])
    assert model.test_on_batch(x, np.full((4, 1), 1.0), return_dict=True) == pytest.approx({"loss": 4.0, "mae": 2.0})
    assert model.test_on_batch(x, np.full((4, 1), 3.0)) == pytest.approx([0.0, 0.0])
