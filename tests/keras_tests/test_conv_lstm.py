"""ConvLSTM1D/2D/3D: outputs and parameter counts equal Keras 3's (recorded) for set weights, the
layer harness (config, tw.function, float64 gradients), masks, states and channels-first."""
import numpy as np
import pytest

from tensorweave import keras
from tests.keras_tests.conv_lstm_reference import REFERENCE

from keras_tests.layer_harness import layer_test

L = keras.layers


def _keras_cases():
    return [("c2", L.ConvLSTM2D, (2, 3, 5, 5, 2), dict(filters=3, kernel_size=3, padding="same",
                                                         return_sequences=True)),
            ("c2v", L.ConvLSTM2D, (2, 3, 6, 5, 2), dict(filters=2, kernel_size=(3, 2), strides=2, padding="valid")),
            ("c1", L.ConvLSTM1D, (2, 4, 7, 3), dict(filters=2, kernel_size=3, dilation_rate=2, go_backwards=True)),
            ("c3", L.ConvLSTM3D, (1, 2, 3, 3, 3, 1), dict(filters=2, kernel_size=2, padding="same"))]


def test_outputs_match_keras():
    rng = np.random.default_rng(0)   # drawn in the same order as when the reference was recorded
    for name, cls, shape, kwargs in _keras_cases():
        x = rng.standard_normal(shape).astype("float32")
        layer = cls(**kwargs)
        layer(x)
        layer.set_weights([rng.standard_normal(w.shape).astype("float32") * 0.3 for w in layer.get_weights()])
        np.testing.assert_allclose(layer(x).numpy(), REFERENCE[name], rtol=1e-5, atol=1e-6, err_msg=name)
        assert layer.count_params() == int(REFERENCE[name + "_params"])


@pytest.mark.parametrize("cls,kwargs,shape", [
    (L.ConvLSTM1D, {"filters": 2, "kernel_size": 2, "return_sequences": True}, (2, 3, 5, 2)),
    (L.ConvLSTM2D, {"filters": 2, "kernel_size": 2, "padding": "same"}, (2, 2, 4, 3, 1)),
    (L.ConvLSTM2D, {"filters": 2, "kernel_size": 2, "data_format": "channels_first", "return_sequences": True},
     (1, 2, 1, 4, 3)),
    (L.ConvLSTM3D, {"filters": 1, "kernel_size": 2}, (1, 2, 3, 3, 3, 1)),
])
def test_harness(cls, kwargs, shape):
    layer_test(cls, kwargs, shape, expected_num_trainable_weights=3, grad_points=3, rtol=1e-5, atol=1e-5)


def test_masks_states_and_dropout():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 5, 5, 1)).astype("float32")
    layer = L.ConvLSTM2D(2, 3, padding="same", return_state=True)
    out, h, c = layer(x)
    np.testing.assert_allclose(out.numpy(), h.numpy())
    assert c.shape == (2, 5, 5, 2)
    mask = np.array([[True, True, False, False], [True, True, True, True]])
    masked, _, _ = layer(x, mask=mask)
    short, _, _ = layer(x[:, :2])
    np.testing.assert_allclose(masked.numpy()[0], short.numpy()[0], rtol=1e-5, atol=1e-6)
    drop = L.ConvLSTM2D(2, 3, padding="same", dropout=0.5, recurrent_dropout=0.5, seed=1)
    a = drop(x, training=False).numpy()
    drop.set_weights(drop.get_weights())
    assert not np.allclose(drop(x, training=True).numpy(), a)
    model = keras.Sequential([keras.Input((4, 5, 5, 1)), L.ConvLSTM2D(2, 3, padding="same", return_sequences=True),
                              L.BatchNormalization(), L.ConvLSTM2D(1, 3, padding="same"), L.Flatten(), L.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    hist = model.fit(x, np.ones((2, 1)), epochs=3, verbose=0)
    assert hist.history["loss"][-1] < hist.history["loss"][0]
