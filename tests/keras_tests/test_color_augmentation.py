"""Colour augmentation layers and SpectralNormalization against Keras 3.15's outputs with fixed
factors (keras_color_reference.py, recorded by keras_color_cases.py), plus their random draws,
inference behaviour, configs and argument errors."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras

from keras_tests.keras_color_cases import CASES, IMAGES, run, spectral
from keras_tests.keras_color_reference import REFERENCE


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_equals_keras_with_fixed_factors(case):
    np.testing.assert_allclose(run(keras, case), REFERENCE[case[0]], rtol=1e-4, atol=1e-3 * case[3])


@pytest.mark.parametrize("power_iterations", [1, 5])
def test_spectral_normalization_equals_keras(power_iterations):
    kernel, out, inference = spectral(keras, power_iterations)
    want_kernel, want_out, want_inference = REFERENCE[f"spectral_{power_iterations}"]
    np.testing.assert_allclose(kernel, want_kernel, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out, want_out, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(inference, want_inference, rtol=1e-4, atol=1e-4)


def test_spectral_normalization_trains_a_gan_style_discriminator():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)),
                              keras.layers.SpectralNormalization(keras.layers.Dense(8, activation="relu")),
                              keras.layers.SpectralNormalization(keras.layers.Dense(1))])
    model.compile(keras.optimizers.SGD(1e-3), "mse")
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    history = model.fit(x, x[:, :1], epochs=3, batch_size=8, verbose=0).history
    assert np.isfinite(history["loss"]).all()
    for layer in model.layers:      # (the last SGD step moves the kernel a little after its normalisation)
        top = np.linalg.svd(layer.layer.kernel.numpy(), compute_uv=False)[0]
        assert top == pytest.approx(1.0, abs=0.05)
    config = keras.layers.serialize(model.layers[0])
    again = keras.layers.deserialize(config)
    assert type(again.layer).__name__ == "Dense" and again.power_iterations == 1
    with pytest.raises(ValueError, match="`power_iterations` should be greater than zero"):
        keras.layers.SpectralNormalization(keras.layers.Dense(2), power_iterations=0)
    with pytest.raises(ValueError, match="has no attribute 'kernel' nor 'embeddings'"):
        keras.layers.SpectralNormalization(keras.layers.Flatten())(np.ones((2, 3), "float32"))


@pytest.mark.parametrize("cls, kwargs", [("RandomInvert", {"factor": 0.5}), ("RandomColorDegeneration", {"factor": 0.9}),
                                         ("RandomSaturation", {"factor": (0.1, 0.5)}),
                                         ("RandomPosterization", {"factor": (2, 6)}),
                                         ("RandomSharpness", {"factor": (0.0, 1.0)}),
                                         ("RandomHue", {"factor": (0.2, 0.8)}),
                                         ("Solarization", {"addition_factor": 0.2, "threshold_factor": 0.5})])
def test_random_draws_inference_and_config(cls, kwargs):
    layer = getattr(keras.layers, cls)(seed=1, **kwargs)
    x = tw.constant(np.concatenate([IMAGES] * 8))
    out = layer(x, training=True).numpy()
    assert out.shape == x.shape and np.all(out >= -1e-3) and np.all(out <= 255.001)
    per_image = np.abs(out - x.numpy()).reshape(16, -1).mean(axis=1)
    assert len(np.unique(per_image.round(3))) > 1            # images drew different factors
    np.testing.assert_array_equal(layer(x).numpy(), x.numpy())   # inference: unchanged
    again = type(layer).from_config(layer.get_config())
    assert again.get_config() == layer.get_config()
    single = layer(x[0], training=True)                       # one image
    assert single.shape.as_list() == [4, 4, 3]


def test_bad_factors_name_the_layer():
    with pytest.raises(ValueError, match=r"RandomSaturation: the `factor` argument should be a number .* \[0.0, 1.0\]"):
        keras.layers.RandomSaturation(1.5)
    with pytest.raises(ValueError, match=r"RandomPosterization: .* \[1, 8\]"):
        keras.layers.RandomPosterization(9)
    with pytest.raises(ValueError, match="value_range must be"):
        keras.layers.RandomInvert(value_range=(1, 0))
