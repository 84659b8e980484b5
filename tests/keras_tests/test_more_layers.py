"""Activation, reshaping, noise/dropout, masking and wrapper layers: the layer harness over each,
then NumPy references, Keras 3 values where the rule is Keras' own, mask propagation into RNNs and
a save/load round trip through the ``.keras`` format."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras
from tensorweave.keras.saving import load_model

from keras_tests.layer_harness import layer_test

L = keras.layers
CF = {"data_format": "channels_first"}
TRAIN = {"call_kwargs": {"training": True}, "deterministic": False, "check_gradients": False,
         "check_function": False}

CASES = [
    (L.LeakyReLU, {"negative_slope": 0.2}, (2, 3, 4), {"expected_num_trainable_weights": 0}),
    (L.PReLU, {"alpha_initializer": "random_uniform"}, (2, 3, 4), {"expected_num_trainable_weights": 1}),
    (L.PReLU, {"shared_axes": [1], "alpha_initializer": "random_uniform"}, (2, 3, 4), {}),
    (L.ReLU, {"max_value": 1.0, "negative_slope": 0.1, "threshold": 0.2}, (2, 5), {}),
    (L.ReLU, {}, (2, 5), {}),
    (L.ELU, {"alpha": 0.7}, (2, 5), {}),
    (L.Softmax, {}, (2, 5), {}),
    (L.Softmax, {"axis": [1, 2]}, (2, 3, 4), {}),
    (L.UpSampling1D, {"size": 3}, (2, 4, 3), {"expected_output_shape": (2, 12, 3)}),
    (L.UpSampling2D, {"size": (2, 3)}, (2, 3, 4, 2), {"expected_output_shape": (2, 6, 12, 2)}),
    (L.UpSampling2D, {"size": 2, **CF}, (2, 2, 3, 4), {"expected_output_shape": (2, 2, 6, 8)}),
    (L.UpSampling2D, {"size": 2, "interpolation": "bilinear"}, (1, 3, 4, 2), {"expected_output_shape": (1, 6, 8, 2)}),
    (L.UpSampling3D, {"size": (1, 2, 2)}, (1, 2, 3, 2, 2), {"expected_output_shape": (1, 2, 6, 4, 2)}),
    (L.ZeroPadding1D, {"padding": (1, 2)}, (2, 4, 3), {"expected_output_shape": (2, 7, 3)}),
    (L.ZeroPadding2D, {"padding": ((1, 0), (2, 1))}, (2, 3, 4, 2), {"expected_output_shape": (2, 4, 7, 2)}),
    (L.ZeroPadding2D, {"padding": 1, **CF}, (2, 2, 3, 4), {"expected_output_shape": (2, 2, 5, 6)}),
    (L.ZeroPadding3D, {"padding": (1, 0, 2)}, (1, 2, 2, 2, 1), {"expected_output_shape": (1, 4, 2, 6, 1)}),
    (L.Cropping1D, {"cropping": (1, 2)}, (2, 6, 3), {"expected_output_shape": (2, 3, 3)}),
    (L.Cropping2D, {"cropping": ((1, 0), (1, 2))}, (2, 4, 5, 2), {"expected_output_shape": (2, 3, 2, 2)}),
    (L.Cropping2D, {"cropping": 1, **CF}, (2, 2, 4, 5), {"expected_output_shape": (2, 2, 2, 3)}),
    (L.Cropping3D, {"cropping": 1}, (1, 3, 4, 5, 2), {"expected_output_shape": (1, 1, 2, 3, 2)}),
    (L.RepeatVector, {"n": 3}, (2, 4), {"expected_output_shape": (2, 3, 4)}),
    (L.Masking, {"mask_value": 0.0}, (2, 3, 4), {"supports_masking": True}),
    (L.GaussianNoise, {"stddev": 0.5}, (2, 5), {"call_kwargs": {"training": False}}),
    (L.GaussianNoise, {"stddev": 0.5, "seed": 1}, (2, 5), TRAIN),
    (L.GaussianDropout, {"rate": 0.3}, (2, 5), {"call_kwargs": {"training": False}}),
    (L.GaussianDropout, {"rate": 0.3, "seed": 1}, (2, 5), TRAIN),
    (L.AlphaDropout, {"rate": 0.3}, (2, 5), {"call_kwargs": {"training": False}}),
    (L.AlphaDropout, {"rate": 0.3, "seed": 1}, (2, 5), TRAIN),
    (L.SpatialDropout1D, {"rate": 0.5}, (2, 4, 3), {"call_kwargs": {"training": False}}),
    (L.SpatialDropout1D, {"rate": 0.5, "seed": 2}, (2, 4, 3), TRAIN),
    (L.SpatialDropout2D, {"rate": 0.5, "seed": 2}, (2, 4, 3, 5), TRAIN),
    (L.SpatialDropout3D, {"rate": 0.5, "seed": 2, **CF}, (2, 3, 2, 2, 2), TRAIN),
]


@pytest.mark.parametrize("cls,kwargs,shape,extra", CASES,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)])
def test_layer_harness(cls, kwargs, shape, extra):
    layer_test(cls, kwargs, shape, **extra)


def test_time_distributed_harness_and_values():
    # the wrapped Dense keeps its own dtype, so the float64 gradient pass of the harness does not apply
    layer, out = layer_test(L.TimeDistributed, {"layer": L.Dense(3)}, (2, 4, 5), check_config=False,
                            check_gradients=False,
                            expected_output_shape=(2, 4, 3), expected_num_trainable_weights=2)
    x = np.random.default_rng(0).standard_normal((2, 4, 5)).astype("float32")
    w, b = layer.layer.get_weights()
    np.testing.assert_allclose(layer(x).numpy(), x @ w + b, rtol=1e-5, atol=1e-6)
    config = layer.get_config()
    again = L.TimeDistributed.from_config(config)
    again(x)
    again.set_weights(layer.get_weights())
    np.testing.assert_allclose(again(x).numpy(), layer(x).numpy())
    conv = L.TimeDistributed(L.Conv2D(2, 3))
    assert conv(np.zeros((2, 3, 6, 6, 1), "float32")).shape == (2, 3, 4, 4, 2)


# ---- values -------------------------------------------------------------------------------------------
X = np.random.default_rng(1).standard_normal((2, 3, 4)).astype("float32")


def test_activation_layer_values():
    np.testing.assert_allclose(L.LeakyReLU()(X).numpy(), np.where(X > 0, X, 0.3 * X), rtol=1e-6)
    relu = L.ReLU(max_value=1.0, negative_slope=0.1, threshold=0.2)(X).numpy()
    np.testing.assert_allclose(relu, np.where(X >= 1, 1.0, np.where(X > 0.2, X, 0.1 * (X - 0.2))), rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_allclose(L.ELU(0.5)(X).numpy(), np.where(X > 0, X, 0.5 * np.expm1(X)), rtol=1e-6, atol=1e-7)
    p = L.PReLU(alpha_initializer=keras.initializers.Constant(0.25), shared_axes=[1, 2])
    np.testing.assert_allclose(p(X).numpy(), np.where(X > 0, X, 0.25 * X), rtol=1e-6)
    assert p.alpha.shape == (1, 1)
    with pytest.warns(UserWarning, match="negative_slope"):
        assert L.LeakyReLU(alpha=0.1).negative_slope == pytest.approx(0.1)


def test_softmax_with_mask():
    x = np.array([[1.0, 2.0, 3.0]], "float32")
    mask = np.array([[True, False, True]])
    out = L.Softmax()(x, mask=tw.constant(mask)).numpy()
    e = np.exp([1.0, 3.0])
    np.testing.assert_allclose(out, [[e[0] / e.sum(), 0.0, e[1] / e.sum()]], rtol=1e-6)


def test_upsampling_and_padding_values():
    x = np.arange(6, dtype="float32").reshape(1, 2, 3, 1)
    np.testing.assert_array_equal(L.UpSampling2D((2, 1))(x).numpy()[0, :, :, 0],
                                  np.repeat(x[0, :, :, 0], 2, axis=0))
    np.testing.assert_array_equal(L.ZeroPadding2D(((1, 0), (0, 2)))(x).numpy()[0, :, :, 0],
                                  np.pad(x[0, :, :, 0], ((1, 0), (0, 2))))
    np.testing.assert_array_equal(L.Cropping2D(((1, 0), (1, 1)))(x).numpy()[0, :, :, 0], x[0, 1:, 1:2, 0])
    np.testing.assert_array_equal(L.RepeatVector(2)(np.array([[1.0, 2.0]], "float32")).numpy(), [[[1, 2], [1, 2]]])
    # recorded from Keras 3 (UpSampling2D(2, interpolation="bilinear") on this x)
    keras_bilinear = [[0.0, 0.25, 0.75, 1.25, 1.75, 2.0], [0.75, 1.0, 1.5, 2.0, 2.5, 2.75],
                      [2.25, 2.5, 3.0, 3.5, 4.0, 4.25], [3.0, 3.25, 3.75, 4.25, 4.75, 5.0]]
    np.testing.assert_allclose(L.UpSampling2D(2, interpolation="bilinear")(x).numpy()[0, :, :, 0], keras_bilinear,
                               rtol=1e-6)
    with pytest.raises(ValueError, match="leaves nothing"):
        L.Cropping1D((2, 2))(np.zeros((1, 4, 1), "float32"))


def test_noise_layers_statistics():
    x = np.ones((200, 50), "float32")
    noisy = L.GaussianNoise(0.5, seed=3)(x, training=True).numpy()
    assert abs(noisy.mean() - 1) < 0.02 and abs(noisy.std() - 0.5) < 0.02
    gd = L.GaussianDropout(0.2, seed=3)(x, training=True).numpy()
    assert abs(gd.mean() - 1) < 0.02 and abs(gd.std() - 0.5) < 0.02   # sqrt(0.2 / 0.8)
    z = np.random.default_rng(0).standard_normal((400, 50)).astype("float32")
    ad = L.AlphaDropout(0.2, seed=3)(z, training=True).numpy()
    assert abs(ad.mean()) < 0.03 and abs(ad.std() - 1) < 0.03   # keeps mean 0 and variance 1
    sd = L.SpatialDropout1D(0.5, seed=3)(np.ones((8, 5, 6), "float32"), training=True).numpy()
    assert (sd == sd[:, :1, :]).all() and set(np.unique(sd)) <= {0.0, 2.0}   # whole channels


def test_masking_propagates_into_rnns():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 5, 3)).astype("float32")
    x[0, 3:] = 0.0   # padding at the end of sample 0
    inp = keras.Input((5, 3))
    out = L.LSTM(4)(L.Masking()(inp))
    model = keras.Model(inp, out)
    full = model.predict(x, verbose=0)
    lstm = model.layers[-1]
    short = L.LSTM(4)
    short(x[:1, :3])
    short.set_weights(lstm.get_weights())
    np.testing.assert_allclose(full[0], short(x[:1, :3]).numpy()[0], rtol=1e-5, atol=1e-6)
    seq = keras.Sequential([keras.Input((5, 3)), L.Masking(), L.GRU(2, return_sequences=True)])
    out = seq.predict(x, verbose=0)
    np.testing.assert_allclose(out[0, 3], out[0, 2], rtol=1e-6)   # masked steps repeat the last output


def test_new_layers_save_and_load(tmp_path):
    inp = keras.Input((6, 6, 2))
    h = L.ZeroPadding2D(1)(inp)
    h = L.Conv2D(3, 3)(h)
    h = L.PReLU(shared_axes=[1, 2])(h)
    h = L.UpSampling2D(2)(h)
    h = L.Cropping2D(((1, 1), (2, 0)))(h)
    h = L.SpatialDropout2D(0.1)(h)
    h = L.GaussianNoise(0.1)(h)
    h = L.LeakyReLU(0.1)(h)
    h = L.Reshape((10 * 10, 3))(h)
    h = L.TimeDistributed(L.Dense(2))(h)
    h = L.ELU()(h)
    h = L.Flatten()(h)
    h = L.RepeatVector(2)(h)
    h = L.Masking()(h)
    h = L.SimpleRNN(3)(h)
    out = L.Softmax()(L.ReLU(max_value=6.0)(h))
    model = keras.Model(inp, out)
    model.compile(optimizer="adam", loss="categorical_crossentropy")
    x = np.random.default_rng(0).standard_normal((4, 6, 6, 2)).astype("float32")
    model.fit(x, np.eye(3)[[0, 1, 2, 0]], epochs=1, verbose=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = load_model(path)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6, atol=1e-7)
    assert [type(la).__name__ for la in loaded.layers] == [type(la).__name__ for la in model.layers]


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="negative_slope"):
        L.LeakyReLU(-1.0)
    with pytest.raises(ValueError, match="interpolation must be 'nearest' or 'bilinear'"):
        L.UpSampling2D(interpolation="bicubic")
    with pytest.raises(ValueError, match="Expected a float value between 0 and 1"):
        L.GaussianDropout(1.5)
    with pytest.raises(ValueError, match="tuple of 2 ints or of 2 pairs"):
        L.ZeroPadding2D((1, 2, 3))


# ---- normalization extras, EinsumDense, adaptive pooling, ActivityRegularization, RandomCrop/Brightness ----
MORE = [
    (L.GroupNormalization, {"groups": 2}, (2, 3, 4), {"expected_num_trainable_weights": 2}),
    (L.GroupNormalization, {"groups": 3, "axis": 1}, (2, 6, 5), {}),
    (L.UnitNormalization, {}, (2, 3, 4), {}),
    (L.RMSNormalization, {"axis": [1, 2]}, (2, 3, 4), {"expected_num_trainable_weights": 1}),
    (L.EinsumDense, {"equation": "abc,cd->abd", "output_shape": [None, 5], "bias_axes": "d"}, (2, 3, 4),
     {"expected_output_shape": (2, 3, 5), "expected_num_trainable_weights": 2}),
    (L.EinsumDense, {"equation": "ab,bcd->acd", "output_shape": [2, 3], "bias_axes": "c"}, (2, 4),
     {"expected_output_shape": (2, 2, 3)}),
    (L.AdaptiveAveragePooling2D, {"output_size": (2, 3)}, (2, 5, 7, 2), {"expected_output_shape": (2, 2, 3, 2)}),
    (L.AdaptiveMaxPooling1D, {"output_size": 3}, (2, 7, 2), {"expected_output_shape": (2, 3, 2)}),
    (L.AdaptiveAveragePooling3D, {"output_size": 2, "data_format": "channels_first"}, (1, 2, 4, 5, 3), {}),
    (L.ActivityRegularization, {"l1": 0.1, "l2": 0.01}, (2, 5), {}),
    (L.RandomCrop, {"height": 3, "width": 2}, (2, 5, 4, 3), {"call_kwargs": {"training": False}}),
    (L.RandomCrop, {"height": 3, "width": 2, "seed": 1}, (2, 5, 4, 3), TRAIN),
    (L.RandomBrightness, {"factor": 0.2, "seed": 1}, (2, 4, 4, 3), TRAIN),
]


@pytest.mark.parametrize("cls,kwargs,shape,extra", MORE, ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(MORE)])
def test_more_layers_harness(cls, kwargs, shape, extra):
    layer_test(cls, kwargs, shape, **extra)


def test_more_layers_match_keras():
    x = np.arange(24, dtype="float32").reshape(2, 3, 4) / 10
    # recorded from Keras 3.15.1
    np.testing.assert_allclose(L.GroupNormalization(groups=2)(x).numpy()[0],
                               [[-1.35577, -1.05449, -1.35577, -1.05449], [-0.15064, 0.15064, -0.15064, 0.15064],
                                [1.05449, 1.35577, 1.05449, 1.35577]], atol=1e-5)
    np.testing.assert_allclose(L.RMSNormalization()(x).numpy()[0, 0], [0.0, 0.53451, 1.06903, 1.60354], atol=1e-5)
    np.testing.assert_allclose(L.UnitNormalization()(x).numpy()[0, 0], [0.0, 0.26726, 0.53452, 0.80178], atol=1e-5)
    e = L.EinsumDense("abc,cd->abd", output_shape=(None, 5), bias_axes="d")
    assert e(x).shape == (2, 3, 5) and [w.shape.as_list() for w in e.weights] == [[4, 5], [5]]
    w, b = e.get_weights()
    np.testing.assert_allclose(e(x).numpy(), x @ w + b, rtol=1e-5, atol=1e-6)
    reg = L.ActivityRegularization(l1=0.5)
    reg(np.array([[1.0, -2.0]], "float32"))
    assert float(reg.losses[0]) == pytest.approx(1.5)
    img = np.random.default_rng(0).uniform(0, 255, (2, 4, 4, 3)).astype("float32")
    bright = L.RandomBrightness((0.1, 0.1), seed=0)(img, training=True).numpy()
    np.testing.assert_allclose(bright, np.clip(img + 25.5, 0, 255), rtol=1e-6)
    crop = L.RandomCrop(2, 2, seed=0)(img, training=True).numpy()
    assert crop.shape == (2, 2, 2, 3) and any(np.array_equal(crop, img[:, i:i + 2, j:j + 2])
                                              for i in range(3) for j in range(3))
    pipe = L.Pipeline([L.Rescaling(1 / 255.0), L.RandomFlip(seed=0)])
    np.testing.assert_allclose(pipe(img, training=False).numpy(), img / 255.0, rtol=1e-6)
    again = L.Pipeline.from_config(pipe.get_config())
    np.testing.assert_allclose(again(img, training=False).numpy(), img / 255.0, rtol=1e-6)


AUG = [
    (L.RandomShear, {"x_factor": 0.3, "y_factor": 0.2, "seed": 1}, (2, 5, 4, 3), TRAIN),
    (L.RandomGrayscale, {"factor": 0.5, "seed": 1}, (2, 4, 4, 3), TRAIN),
    (L.AutoContrast, {}, (2, 4, 4, 3), {}),
    (L.DepthwiseConv1D, {"kernel_size": 3, "depth_multiplier": 2}, (2, 6, 3), {"expected_num_trainable_weights": 2}),
    (L.SeparableConv1D, {"filters": 4, "kernel_size": 3, "padding": "same", "strides": 2}, (2, 6, 3),
     {"expected_num_trainable_weights": 3}),
    (L.SeparableConv1D, {"filters": 2, "kernel_size": 2, "data_format": "channels_first"}, (2, 3, 5), {}),
]


@pytest.mark.parametrize("cls,kwargs,shape,extra", AUG, ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(AUG)])
def test_augmentation_and_conv1d_harness(cls, kwargs, shape, extra):
    layer_test(cls, kwargs, shape, **extra)


def test_augmentation_and_conv1d_match_keras():
    x = np.arange(24, dtype="float32").reshape(2, 2, 2, 3) * 10
    # recorded from Keras 3.15.1
    np.testing.assert_allclose(L.RandomGrayscale(factor=1.0)(x, training=True).numpy()[0, 0],
                               [[8.15, 8.15, 8.15], [38.147, 38.147, 38.147]], rtol=1e-5)
    np.testing.assert_allclose(L.AutoContrast()(x).numpy()[0, 0], [[0, 0, 0], [85, 85, 85]], atol=1e-4)
    sheared = L.RandomShear(x_factor=(0.5, 0.5), fill_mode="constant")(np.arange(25, dtype="float32")
                                                                       .reshape(1, 5, 5, 1), training=True)
    np.testing.assert_allclose(sheared.numpy()[0, :, :, 0], [[0, 1, 2, 3, 4], [2.5, 5.5, 6.5, 7.5, 8.5],
                                                             [0, 10, 11, 12, 13], [0, 7.5, 15.5, 16.5, 17.5],
                                                             [0, 0, 20, 21, 22]], atol=1e-5)
    sep = L.SeparableConv1D(4, 3)
    seq = np.random.default_rng(0).standard_normal((1, 5, 2)).astype("float32")
    out = sep(seq).numpy()
    assert [w.shape.as_list() for w in sep.weights] == [[3, 2, 1], [1, 2, 4], [4]]
    dw, pw, b = sep.get_weights()
    depth = np.stack([sum(seq[0, i + k] * dw[k, :, 0] for k in range(3)) for i in range(3)])
    np.testing.assert_allclose(out[0], depth @ pw[0] + b, rtol=1e-5, atol=1e-6)


def test_additive_attention_matches_keras():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 3, 4)).astype("float32")
    v = rng.standard_normal((2, 5, 4)).astype("float32")
    layer = L.AdditiveAttention()
    layer([q, v])
    layer.set_weights([rng.standard_normal((4,)).astype("float32")])
    out, scores = layer([q, v], return_attention_scores=True,
                        mask=[None, np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)])
    # recorded from Keras 3.15.1
    np.testing.assert_allclose(out.numpy()[0, 0], [-0.09658207, 0.47977057, 0.04191019, 0.20821092], rtol=1e-5)
    np.testing.assert_allclose(scores.numpy()[0, 0], [0.08081565, 0.07785389, 0.84133047, 0.0, 0.0], atol=1e-6)
    layer_test(L.AdditiveAttention, {}, [(2, 3, 4), (2, 5, 4)], expected_num_trainable_weights=1)


def test_reversible_embedding_and_wrapper():
    layer_test(L.ReversibleEmbedding, {"input_dim": 6, "output_dim": 3, "tie_weights": False}, (2, 4),
               input_dtype="int32", int_range=(0, 6), check_gradients=False, expected_num_trainable_weights=2)
    r = L.ReversibleEmbedding(5, 3, tie_weights=False, logit_soft_cap=2.0)
    r(np.array([[1, 2]]))
    r.set_weights([np.arange(15, dtype="float32").reshape(5, 3) / 10, np.arange(15, dtype="float32").reshape(3, 5) / 7])
    # recorded from Keras 3.15.1
    np.testing.assert_allclose(r(np.array([[0.1, 0.2, 0.3]], "float32"), reverse=True).numpy(),
                               [[0.55637097, 0.63447315, 0.71048129, 0.78421116, 0.85550547]], rtol=1e-5)
    tied = L.ReversibleEmbedding(5, 3)
    tied(np.array([[0]]))
    table = tied.get_weights()[0]
    np.testing.assert_allclose(tied(np.ones((1, 3), "float32"), reverse=True).numpy(), np.ones((1, 3)) @ table.T,
                               rtol=1e-5)
    wrapped = L.Wrapper(L.Dense(2))
    x = np.ones((1, 3), "float32")
    w, b = (wrapped(x), wrapped.layer.get_weights())[1]
    np.testing.assert_allclose(wrapped(x).numpy(), x @ w + b, rtol=1e-6)
    again = L.Wrapper.from_config(wrapped.get_config())
    assert isinstance(again.layer, L.Dense) and again.layer.units == 2
