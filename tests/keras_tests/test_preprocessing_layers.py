"""Preprocessing layers: the layer harness, ``adapt``, and values recorded from Keras 3.15.1 (TF
backend) for the rules that are Keras' own (Discretization's quantiles, CategoryEncoding's
shapes, CenterCrop's upscaling, RandomZoom/RandomRotation's transforms with a fixed factor)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras
from tensorweave.keras.saving import load_model

from keras_tests.layer_harness import layer_test

L = keras.layers
TRAIN = {"call_kwargs": {"training": True}, "deterministic": False, "check_gradients": False,
         "check_function": False}
IMG = (2, 6, 5, 3)

CASES = [
    (L.Rescaling, {"scale": 1 / 255.0, "offset": -0.5}, (2, 4, 4, 3), {}),
    (L.Normalization, {"mean": [1.0, 2.0, 3.0], "variance": [4.0, 1.0, 0.25]}, (2, 5, 3), {}),
    (L.Normalization, {"axis": None, "mean": 2.0, "variance": 9.0, "invert": True}, (2, 4), {}),
    (L.Discretization, {"bin_boundaries": [-0.5, 0.0, 0.5]}, (3, 4),
     {"expected_output_dtype": "int64", "check_gradients": False}),
    (L.Discretization, {"bin_boundaries": [0.0], "output_mode": "one_hot"}, (5,),
     {"expected_output_dtype": "float32", "check_gradients": False, "check_functional": False}),
    (L.CategoryEncoding, {"num_tokens": 5, "output_mode": "multi_hot"}, (3, 2),
     {"input_dtype": "int32", "int_range": (0, 5), "check_gradients": False, "expected_output_shape": (3, 5)}),
    (L.CategoryEncoding, {"num_tokens": 5, "output_mode": "count"}, (3, 4),
     {"input_dtype": "int32", "int_range": (0, 5), "check_gradients": False}),
    (L.CategoryEncoding, {"num_tokens": 4, "output_mode": "one_hot"}, (3, 1),
     {"input_dtype": "int32", "int_range": (0, 4), "check_gradients": False, "expected_output_shape": (3, 4)}),
    (L.Resizing, {"height": 3, "width": 4}, IMG, {"expected_output_shape": (2, 3, 4, 3)}),
    (L.Resizing, {"height": 3, "width": 3, "interpolation": "nearest", "crop_to_aspect_ratio": True}, IMG, {}),
    (L.Resizing, {"height": 4, "width": 2, "pad_to_aspect_ratio": True}, IMG, {}),
    (L.CenterCrop, {"height": 3, "width": 2}, IMG, {"expected_output_shape": (2, 3, 2, 3)}),
    (L.RandomFlip, {}, IMG, {"call_kwargs": {"training": False}}),
    (L.RandomFlip, {"mode": "horizontal", "seed": 1}, IMG, TRAIN),
    (L.RandomRotation, {"factor": 0.2, "seed": 1}, IMG, TRAIN),
    (L.RandomRotation, {"factor": (0.25, 0.25)}, (2, 5, 5, 1), {"call_kwargs": {"training": True},
                                                                "check_gradients": False}),
    (L.RandomZoom, {"height_factor": 0.3, "width_factor": (-0.2, 0.1), "seed": 1}, IMG, TRAIN),
    (L.RandomTranslation, {"height_factor": 0.2, "width_factor": 0.1, "seed": 1}, IMG, TRAIN),
    (L.RandomContrast, {"factor": 0.5, "seed": 1}, IMG, TRAIN),
    (L.RandomContrast, {"factor": 0.5}, IMG, {"call_kwargs": {"training": False}}),
]


@pytest.mark.parametrize("cls,kwargs,shape,extra", CASES,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)])
def test_layer_harness(cls, kwargs, shape, extra):
    layer_test(cls, kwargs, shape, **extra)


def test_normalization_adapt_from_arrays_and_datasets():
    data = np.array([[1.0, 2.0], [3.0, 6.0], [5.0, 7.0]], "float32")
    norm = L.Normalization()
    norm.adapt(data)
    # Keras 3: [[-1.2247448, -1.3887302]] and weights mean, variance, count
    np.testing.assert_allclose(norm(np.array([[1.0, 2.0]], "float32")).numpy(), [[-1.2247448, -1.3887302]], rtol=1e-6)
    assert [w._keras_name for w in norm.weights] == ["mean", "variance", "count"]
    assert int(norm.count.numpy()) == 3
    from_ds = L.Normalization()
    from_ds.adapt(tw.data.Dataset.from_tensor_slices(data).batch(2))
    np.testing.assert_allclose(from_ds.adapt_mean.numpy(), data.mean(0), rtol=1e-6)
    per_row = L.Normalization(axis=(1, 2))
    per_row.adapt(np.arange(24.0).reshape(2, 3, 4))
    assert per_row.adapt_mean.shape == (3, 4)
    inv = L.Normalization(mean=[3.0, 5.0], variance=[4.0, 4.0], invert=True)
    np.testing.assert_allclose(inv(np.array([[1.0, -1.0]], "float32")).numpy(), [[5.0, 3.0]])


def test_adapted_normalization_saves_and_loads(tmp_path):
    data = np.random.default_rng(0).standard_normal((20, 3)).astype("float32") * 4 + 2
    norm = L.Normalization()
    norm.adapt(data)
    model = keras.Sequential([keras.Input((3,)), norm, L.Dense(2)])
    path = str(tmp_path / "norm.keras")
    model.save(path)
    loaded = load_model(path)
    np.testing.assert_allclose(loaded.predict(data, verbose=0), model.predict(data, verbose=0), rtol=1e-6)


def test_discretization_matches_keras():
    d = L.Discretization(num_bins=4)
    d.adapt(np.arange(20.0))
    assert d.bin_boundaries == [4.0, 9.0, 14.0]   # Keras 3
    assert d(np.array([[-1.0, 4.9, 5.0, 19.0]])).numpy().tolist() == [[0, 1, 1, 3]]
    d = L.Discretization(bin_boundaries=[0.0, 1.0, 2.0])
    assert d(np.array([[-1.0, 0.0, 0.5, 2.0, 3.0]])).numpy().tolist() == [[0, 1, 1, 3, 3]]
    one_hot = L.Discretization(bin_boundaries=[0.0, 1.0, 2.0], output_mode="one_hot")(np.array([-1.0, 0.5, 3.0]))
    np.testing.assert_array_equal(one_hot.numpy(), np.eye(4)[[0, 1, 3]])
    with pytest.raises(ValueError, match="call adapt"):
        L.Discretization()


def test_category_encoding_matches_keras():
    enc = L.CategoryEncoding(4, output_mode="one_hot")
    np.testing.assert_array_equal(enc(np.array([1, 3])).numpy(), [[0, 1, 0, 0], [0, 0, 0, 1]])
    np.testing.assert_array_equal(enc(np.array([[1], [3]])).numpy(), [[0, 1, 0, 0], [0, 0, 0, 1]])
    multi = L.CategoryEncoding(4, output_mode="multi_hot")
    np.testing.assert_array_equal(multi(np.array([1, 3])).numpy(), [0, 1, 0, 1])
    np.testing.assert_array_equal(multi(np.array([[1, 2], [3, 3]])).numpy(), [[0, 1, 1, 0], [0, 0, 0, 1]])
    count = L.CategoryEncoding(4, output_mode="count")
    np.testing.assert_array_equal(count(np.array([[1, 2], [3, 3]]), count_weights=np.array([[0.5, 1.0], [2.0, 1.0]]))
                                  .numpy(), [[0, 0.5, 1, 0], [0, 0, 0, 3]])
    with pytest.raises(ValueError, match="0 <= values < num_tokens"):
        count(np.array([[4]]))


def test_image_layers_match_keras():
    small = np.arange(12, dtype="float32").reshape(1, 2, 2, 3)
    np.testing.assert_allclose(L.CenterCrop(4, 4)(small).numpy()[0, :, :, 0],
                               [[0, 0.75, 2.25, 3], [1.5, 2.25, 3.75, 4.5], [4.5, 5.25, 6.75, 7.5], [6, 6.75, 8.25, 9]])
    x = np.arange(25, dtype="float32").reshape(1, 5, 5, 1)
    zoom_in = L.RandomZoom((-0.5, -0.5), fill_mode="constant")(x, training=True).numpy()[0, :, :, 0]
    np.testing.assert_allclose(zoom_in, 6 + np.arange(5)[:, None] * 2.5 + np.arange(5)[None, :] * 0.5, rtol=1e-6)
    zoom_out = L.RandomZoom((0.4, 0.4), (0.2, 0.2))(x, training=True).numpy()[0, :, :, 0]
    keras_zoom = [[0.0, 0.8, 2.0, 3.2, 4.0], [3.0, 3.8, 5.0, 6.2, 7.0], [10.0, 10.8, 12.0, 13.2, 14.0],
                  [17.0, 17.8, 19.0, 20.2, 21.0], [20.0, 20.8, 22.0, 23.2, 24.0]]
    np.testing.assert_allclose(zoom_out, keras_zoom, rtol=1e-5, atol=1e-5)
    quarter = L.RandomRotation((0.25, 0.25))(x, training=True).numpy()[0, :, :, 0]
    np.testing.assert_allclose(quarter, np.rot90(x[0, :, :, 0]), atol=2e-5)   # Keras: a quarter turn
    tilted = L.RandomRotation((0.1, 0.1), fill_mode="constant")(x, training=True).numpy()[0, :, :, 0]
    keras_tilted = [[0.32146853, 1.8794713, 5.0854006, 8.833344, 2.4329262],
                    [1.0468138, 4.794757, 8.5427, 12.290644, 12.5740795],
                    [4.504113, 8.252056, 11.999999, 15.747944, 19.495886],
                    [6.486259, 11.709356, 15.4573, 19.205244, 22.953186],
                    [2.5205674, 15.166656, 18.914598, 17.180859, 4.632026]]
    np.testing.assert_allclose(tilted, keras_tilted, rtol=1e-5, atol=1e-5)


def test_random_layers_are_identity_at_inference_and_random_in_training():
    x = np.random.default_rng(0).uniform(0, 255, (8, 6, 6, 3)).astype("float32")
    for layer in (L.RandomFlip(seed=1), L.RandomRotation(0.3, seed=1), L.RandomZoom(0.3, seed=1),
                  L.RandomContrast(0.5, seed=1), L.RandomTranslation(0.2, 0.2, seed=1)):
        np.testing.assert_array_equal(layer(x, training=False).numpy(), x)
        assert not np.allclose(layer(x, training=True).numpy(), x), type(layer).__name__
    flipped = L.RandomFlip("horizontal", seed=3)(x, training=True).numpy()
    for i in range(8):
        assert np.array_equal(flipped[i], x[i]) or np.array_equal(flipped[i], x[i, :, ::-1])
    contrast = L.RandomContrast(0.5, seed=3)(x, training=True).numpy()
    assert contrast.min() >= 0 and contrast.max() <= 255
    np.testing.assert_allclose(contrast.mean(axis=(1, 2)), x.mean(axis=(1, 2)), atol=8.0)
    # in a model: training through fit, identity through predict
    model = keras.Sequential([keras.Input((6, 6, 3)), L.Rescaling(1 / 255.0), L.RandomFlip(), L.RandomRotation(0.1),
                              L.Flatten(), L.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, np.zeros((8, 2)), epochs=1, verbose=0)
    np.testing.assert_allclose(model.predict(x, verbose=0), model.predict(x, verbose=0))


def test_uint8_images_are_converted():
    img = np.full((1, 4, 4, 3), 255, "uint8")
    out = L.Rescaling(1 / 255.0)(img)
    assert out.dtype == tw.float32 and np.allclose(out.numpy(), 1.0)
    assert L.Resizing(2, 2)(img).dtype == tw.float32


def test_preprocessing_and_augmentation_layers_save_and_load(tmp_path):
    norm = L.Normalization(axis=-1)
    x = np.random.default_rng(2).uniform(0, 255, (4, 8, 8, 3)).astype("float32")
    norm.adapt(x)
    inp = keras.Input((8, 8, 3))
    h = L.Rescaling(1.0, offset=0.0)(inp)
    h = norm(h)
    for aug in (L.RandomFlip(seed=1), L.RandomRotation(0.1, seed=1), L.RandomZoom(0.1, seed=1),
                L.RandomTranslation(0.1, 0.1, seed=1), L.RandomContrast(0.2, seed=1), L.RandomBrightness(0.1, seed=1),
                L.RandomShear(0.1, seed=1), L.RandomGrayscale(0.2, seed=1)):
        h = aug(h)
    h = L.CenterCrop(6, 6)(h)
    h = L.Resizing(4, 4)(h)
    h = L.GroupNormalization(groups=3)(h)
    h = L.Reshape((16, 3))(h)
    h = L.EinsumDense("abc,cd->abd", output_shape=(None, 2), bias_axes="d")(h)
    h = L.Flatten()(h)
    out = L.Discretization(bin_boundaries=[-1.0, 0.0, 1.0], output_mode="count")(L.Dense(4)(h))
    model = keras.Model(inp, out)
    path = str(tmp_path / "pre.keras")
    model.save(path)
    loaded = load_model(path)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert [type(la).__name__ for la in loaded.layers] == [type(la).__name__ for la in model.layers]
