"""Keras layers: the layer harness over every layer, then layer-specific checks against tw.nn and
NumPy references (convolution layouts, batch-norm statistics, masking, merge errors)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras
from tensorweave.keras.layers import core
from tensorweave.keras.layers import conv as C
from tensorweave.keras.layers import embedding as E
from tensorweave.keras.layers import merge as M
from tensorweave.keras.layers import normalization as N
from tensorweave.keras.layers import pooling as P

from keras_tests.layer_harness import layer_test

CF = {"data_format": "channels_first"}

# (class, kwargs, input shape(s), extra harness arguments)
CASES = [
    # core
    (core.Dense, {"units": 3, "activation": "tanh"}, (2, 4), {"expected_num_trainable_weights": 2,
                                                              "bad_input_shape": (2, 5)}),
    (core.Dense, {"units": 2, "use_bias": False}, (2, 3, 4), {"expected_num_trainable_weights": 1}),
    (core.Activation, {"activation": "tanh"}, (2, 3, 4), {"expected_num_trainable_weights": 0}),
    (core.Dropout, {"rate": 0.5}, (2, 6), {"call_kwargs": {"training": False}}),
    (core.Dropout, {"rate": 0.5}, (2, 6), {"call_kwargs": {"training": True}, "deterministic": False,
                                           "check_gradients": False}),
    (core.Flatten, {}, (2, 3, 4), {"expected_output_shape": (2, 12)}),
    (core.Flatten, CF, (2, 3, 2, 2), {"expected_output_shape": (2, 12)}),
    (core.Reshape, {"target_shape": (6, 2)}, (2, 3, 4), {"expected_output_shape": (2, 6, 2)}),
    (core.Reshape, {"target_shape": (-1, 3)}, (2, 3, 4), {"expected_output_shape": (2, 4, 3)}),
    (core.Permute, {"dims": (2, 1)}, (2, 3, 4), {"expected_output_shape": (2, 4, 3)}),
    # convolutions
    (C.Conv1D, {"filters": 3, "kernel_size": 3}, (2, 7, 4), {"expected_output_shape": (2, 5, 3),
                                                            "expected_num_trainable_weights": 2,
                                                            "bad_input_shape": (2, 7, 4, 1)}),
    (C.Conv1D, {"filters": 2, "kernel_size": 3, "padding": "causal", "dilation_rate": 2}, (2, 7, 3),
     {"expected_output_shape": (2, 7, 2)}),
    (C.Conv1D, {"filters": 2, "kernel_size": 2, "strides": 2, "padding": "same", **CF}, (2, 3, 7),
     {"expected_output_shape": (2, 2, 4)}),
    (C.Conv2D, {"filters": 4, "kernel_size": 3}, (2, 6, 6, 3), {"expected_output_shape": (2, 4, 4, 4),
                                                               "bad_input_shape": (2, 6, 6, 2)}),
    (C.Conv2D, {"filters": 4, "kernel_size": (3, 2), "strides": 2, "padding": "same", "activation": "tanh"},
     (2, 5, 6, 3), {"expected_output_shape": (2, 3, 3, 4)}),
    (C.Conv2D, {"filters": 3, "kernel_size": 2, "dilation_rate": 2, "use_bias": False, **CF}, (1, 2, 6, 5),
     {"expected_output_shape": (1, 3, 4, 3), "expected_num_trainable_weights": 1}),
    (C.Conv2D, {"filters": 4, "kernel_size": 3, "groups": 2, "padding": "same"}, (2, 5, 5, 4),
     {"expected_output_shape": (2, 5, 5, 4)}),
    (C.Conv3D, {"filters": 2, "kernel_size": 2}, (1, 3, 4, 3, 2), {"expected_output_shape": (1, 2, 3, 2, 2)}),
    (C.Conv1DTranspose, {"filters": 2, "kernel_size": 3, "strides": 2}, (2, 4, 3),
     {"expected_output_shape": (2, 9, 2)}),
    (C.Conv2DTranspose, {"filters": 2, "kernel_size": 3, "strides": 2, "padding": "same"}, (2, 3, 3, 3),
     {"expected_output_shape": (2, 6, 6, 2)}),
    (C.Conv2DTranspose, {"filters": 2, "kernel_size": 2, "strides": 3, **CF}, (1, 3, 2, 3),
     {"expected_output_shape": (1, 2, 6, 9)}),
    (C.Conv2DTranspose, {"filters": 2, "kernel_size": 3, "strides": 2, "output_padding": 1}, (1, 3, 3, 2),
     {"expected_output_shape": (1, 8, 8, 2)}),
    (C.Conv3DTranspose, {"filters": 1, "kernel_size": 2, "strides": 2}, (1, 2, 2, 2, 2),
     {"expected_output_shape": (1, 4, 4, 4, 1)}),
    (C.DepthwiseConv2D, {"kernel_size": 3, "depth_multiplier": 2}, (2, 5, 5, 3),
     {"expected_output_shape": (2, 3, 3, 6), "expected_num_trainable_weights": 2}),
    (C.DepthwiseConv2D, {"kernel_size": 2, "strides": 2, "padding": "same", **CF}, (1, 3, 5, 5),
     {"expected_output_shape": (1, 3, 3, 3)}),
    (C.SeparableConv2D, {"filters": 4, "kernel_size": 3, "depth_multiplier": 2, "padding": "same"}, (1, 4, 4, 3),
     {"expected_output_shape": (1, 4, 4, 4), "expected_num_trainable_weights": 3}),
    # pooling
    (P.MaxPooling1D, {}, (2, 7, 3), {"expected_output_shape": (2, 3, 3), "bad_input_shape": (2, 7)}),
    (P.MaxPooling1D, {"pool_size": 3, "strides": 2, "padding": "same", **CF}, (2, 3, 7),
     {"expected_output_shape": (2, 3, 4)}),
    (P.MaxPooling2D, {}, (2, 5, 4, 3), {"expected_output_shape": (2, 2, 2, 3)}),
    (P.MaxPooling2D, {"pool_size": 3, "strides": 2, "padding": "same", **CF}, (2, 3, 5, 5),
     {"expected_output_shape": (2, 3, 3, 3)}),
    (P.MaxPooling3D, {}, (1, 4, 4, 4, 2), {"expected_output_shape": (1, 2, 2, 2, 2)}),
    (P.AveragePooling1D, {"pool_size": 3, "strides": 1}, (2, 5, 2), {"expected_output_shape": (2, 3, 2)}),
    (P.AveragePooling2D, {}, (2, 4, 4, 3), {"expected_output_shape": (2, 2, 2, 3)}),
    (P.AveragePooling2D, {"padding": "same", **CF}, (2, 3, 5, 5), {"expected_output_shape": (2, 3, 3, 3)}),
    (P.AveragePooling3D, {"pool_size": 2}, (1, 2, 4, 4, 2), {"expected_output_shape": (1, 1, 2, 2, 2)}),
    (P.GlobalAveragePooling1D, {}, (2, 5, 3), {"expected_output_shape": (2, 3), "supports_masking": True}),
    (P.GlobalAveragePooling1D, {"keepdims": True, **CF}, (2, 3, 5), {"expected_output_shape": (2, 3, 1)}),
    (P.GlobalAveragePooling2D, {}, (2, 3, 4, 3), {"expected_output_shape": (2, 3)}),
    (P.GlobalAveragePooling2D, {"keepdims": True, **CF}, (2, 3, 4, 4), {"expected_output_shape": (2, 3, 1, 1)}),
    (P.GlobalMaxPooling1D, {}, (2, 5, 3), {"expected_output_shape": (2, 3)}),
    (P.GlobalMaxPooling2D, {}, (2, 3, 4, 3), {"expected_output_shape": (2, 3)}),
    (P.GlobalMaxPooling2D, {"keepdims": True, **CF}, (2, 3, 4, 4), {"expected_output_shape": (2, 3, 1, 1)}),
    (P.GlobalAveragePooling3D, {}, (1, 2, 2, 2, 3), {"expected_output_shape": (1, 3)}),
    (P.GlobalMaxPooling3D, {}, (1, 2, 2, 2, 3), {"expected_output_shape": (1, 3)}),
    # normalization
    (N.BatchNormalization, {}, (4, 3), {"expected_num_trainable_weights": 2,
                                        "expected_num_non_trainable_weights": 2, "supports_masking": True,
                                        "bad_input_shape": (4, 5)}),
    (N.BatchNormalization, {"momentum": 0.5}, (4, 3), {"call_kwargs": {"training": True}}),
    (N.BatchNormalization, {"axis": 1}, (3, 2, 3, 3), {"call_kwargs": {"training": True}}),
    (N.BatchNormalization, {"center": False, "scale": False}, (3, 2, 2), {"expected_num_trainable_weights": 0,
                                                                          "expected_num_non_trainable_weights": 2,
                                                                          "call_kwargs": {"training": True}}),
    (N.BatchNormalization, {"trainable": False}, (3, 4), {"expected_num_trainable_weights": 0,
                                                          "expected_num_non_trainable_weights": 4,
                                                          "call_kwargs": {"training": True},
                                                          "check_gradients": False}),
    (N.LayerNormalization, {}, (2, 3, 4), {"expected_num_trainable_weights": 2, "supports_masking": True}),
    (N.LayerNormalization, {"axis": [1, 2], "epsilon": 1e-5}, (2, 3, 4), {"expected_num_trainable_weights": 2}),
    (N.LayerNormalization, {"axis": 1, "center": False}, (2, 3, 4), {"expected_num_trainable_weights": 1}),
    (N.LayerNormalization, {"rms_scaling": True}, (2, 5), {"expected_num_trainable_weights": 1}),
    # embedding
    (E.Embedding, {"input_dim": 10, "output_dim": 3}, (2, 5), {
        "input_dtype": "int32", "expected_output_shape": (2, 5, 3), "expected_output_dtype": "float32",
        "expected_num_trainable_weights": 1, "expect_sparse_gradients": ("embeddings",), "supports_masking": False}),
    (E.Embedding, {"input_dim": 6, "output_dim": 2, "mask_zero": True, "input_length": 4}, (2, 4), {
        "input_dtype": "int32", "int_range": (0, 6), "expected_output_shape": (2, 4, 2), "supports_masking": True}),
    # merge
    (M.Add, {}, [(2, 3, 4), (2, 3, 4), (2, 3, 4)], {"expected_output_shape": (2, 3, 4)}),
    (M.Add, {}, [(2, 1, 4), (2, 3, 4)], {"expected_output_shape": (2, 3, 4)}),
    (M.Subtract, {}, [(2, 3), (2, 3)], {"expected_output_shape": (2, 3)}),
    (M.Multiply, {}, [(2, 3), (2, 3)], {"expected_output_shape": (2, 3)}),
    (M.Average, {}, [(2, 3), (2, 3), (2, 3)], {"expected_output_shape": (2, 3)}),
    (M.Maximum, {}, [(2, 3), (2, 3)], {"expected_output_shape": (2, 3)}),
    (M.Minimum, {}, [(2, 4), (2, 4)], {"expected_output_shape": (2, 4)}),
    (M.Concatenate, {}, [(2, 3), (2, 4)], {"expected_output_shape": (2, 7)}),
    (M.Concatenate, {"axis": 1}, [(2, 3, 4), (2, 2, 4)], {"expected_output_shape": (2, 5, 4)}),
    (M.Dot, {"axes": 1}, [(2, 3), (2, 3)], {"expected_output_shape": (2, 1)}),
    (M.Dot, {"axes": (2, 2)}, [(2, 3, 4), (2, 5, 4)], {"expected_output_shape": (2, 3, 5)}),
    (M.Dot, {"axes": (1, 2), "normalize": True}, [(2, 4, 3), (2, 5, 4)], {"expected_output_shape": (2, 3, 5)}),
]


def _id(case):
    cls, kwargs = (case.values if hasattr(case, "values") else case)[:2]
    return cls.__name__ + "-" + "-".join(f"{k}={v}" for k, v in kwargs.items())


@pytest.mark.parametrize("cls,kwargs,shape,extra", CASES, ids=[_id(c) for c in CASES])
def test_layer_harness(cls, kwargs, shape, extra):
    layer_test(cls, kwargs, shape, **extra)


# ---- core layers ------------------------------------------------------------------------------------
def test_dropout_training_scales_and_inference_is_identity():
    x = np.ones((200, 50), np.float32)
    layer = core.Dropout(0.25, seed=3)
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x)
    np.testing.assert_array_equal(layer(x).numpy(), x)  # training defaults to inference outside fit
    y = layer(x, training=True).numpy()
    kept = y != 0
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    assert abs(kept.mean() - 0.75) < 0.02


# ---- convolutions -----------------------------------------------------------------------------------
def _pair(cls, kwargs, x_last):
    """The same layer in both data formats, with the same weights, on the same (transposed) data."""
    last = cls(**kwargs)
    first = cls(**kwargs, data_format="channels_first")
    to_first = (0, x_last.ndim - 1) + tuple(range(1, x_last.ndim - 1))
    y_last = last(x_last).numpy()
    first(np.transpose(x_last, to_first))
    first.set_weights(last.get_weights())
    y_first = first(np.transpose(x_last, to_first)).numpy()
    back = (0,) + tuple(range(2, y_first.ndim)) + (1,)
    return y_last, np.transpose(y_first, back)


@pytest.mark.parametrize("cls,kwargs,shape", [
    (C.Conv2D, {"filters": 4, "kernel_size": 3}, (2, 6, 5, 3)),
    (C.Conv2D, {"filters": 4, "kernel_size": (2, 3), "strides": 2, "padding": "same"}, (2, 7, 6, 2)),
    (C.Conv2D, {"filters": 6, "kernel_size": 3, "groups": 3, "dilation_rate": 2, "padding": "same"}, (1, 7, 7, 3)),
    (C.Conv1D, {"filters": 3, "kernel_size": 3, "padding": "causal"}, (2, 6, 2)),
    (C.Conv2DTranspose, {"filters": 3, "kernel_size": 3, "strides": 2, "padding": "same"}, (2, 3, 4, 2)),
    (C.DepthwiseConv2D, {"kernel_size": 3, "depth_multiplier": 2}, (1, 5, 5, 3)),
    (C.SeparableConv2D, {"filters": 2, "kernel_size": 3}, (1, 5, 5, 3)),
    (P.MaxPooling2D, {"pool_size": 3, "strides": 2, "padding": "same"}, (2, 5, 5, 3)),
    (P.AveragePooling2D, {"padding": "same"}, (2, 5, 5, 3)),
    (P.GlobalAveragePooling2D, {"keepdims": True}, (2, 3, 3, 4)),
])
def test_channels_first_equals_channels_last(cls, kwargs, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    y_last, y_first = _pair(cls, kwargs, x)
    np.testing.assert_allclose(y_first, y_last, rtol=1e-5, atol=1e-5)


def _np_conv2d_valid(x, k, stride=1):
    """Direct (loop) NHWC cross-correlation, independent of tw's im2col."""
    n, h, w, c = x.shape
    kh, kw, _, o = k.shape
    oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    out = np.zeros((n, oh, ow, o))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            out[:, i, j, :] = np.tensordot(patch, k, axes=([1, 2, 3], [0, 1, 2]))
    return out


def test_conv2d_matches_tw_nn_and_numpy(rng):
    x = rng.standard_normal((2, 7, 6, 3)).astype(np.float32)
    layer = C.Conv2D(4, 3, strides=2, bias_initializer="ones")
    y = layer(x).numpy()
    k, b = layer.kernel.numpy(), layer.bias.numpy()
    np.testing.assert_allclose(y, tw.nn.conv2d(x, k, strides=2, padding="VALID").numpy() + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, _np_conv2d_valid(x, k, 2) + b, rtol=1e-4, atol=1e-5)
    same = C.Conv2D(4, 3, padding="same", use_bias=False)
    ys = same(x).numpy()
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    np.testing.assert_allclose(ys, _np_conv2d_valid(padded, same.kernel.numpy()), rtol=1e-4, atol=1e-5)


def test_conv1d_causal_matches_left_padded_valid(rng):
    x = rng.standard_normal((2, 8, 3)).astype(np.float32)
    layer = C.Conv1D(2, 3, padding="causal", dilation_rate=2, use_bias=False)
    y = layer(x).numpy()
    ref = tw.nn.conv1d(np.pad(x, ((0, 0), (4, 0), (0, 0))), layer.kernel.numpy(), stride=1, padding="VALID",
                       dilations=2).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    # output step t does not depend on inputs after t
    x2 = x.copy()
    x2[:, 5:] += 1.0
    np.testing.assert_allclose(layer(x2).numpy()[:, :5], y[:, :5], rtol=1e-6)


def test_conv2d_grouped_equals_separate_convolutions(rng):
    x = rng.standard_normal((1, 5, 5, 4)).astype(np.float32)
    layer = C.Conv2D(6, 3, groups=2, use_bias=False)
    y = layer(x).numpy()
    k = layer.kernel.numpy()  # (3, 3, 2, 6): group g reads channels 2g:2g+2, writes filters 3g:3g+3
    for g in range(2):
        ref = _np_conv2d_valid(x[..., 2 * g:2 * g + 2], k[..., 3 * g:3 * g + 3])
        np.testing.assert_allclose(y[..., 3 * g:3 * g + 3], ref, rtol=1e-4, atol=1e-5)


def test_conv2d_transpose_matches_numpy_scatter(rng):
    x = rng.standard_normal((1, 3, 2, 2))
    layer = C.Conv2DTranspose(3, 2, strides=3, use_bias=False, dtype="float64")
    y = layer(x).numpy()
    k = layer.kernel.numpy()  # (kh, kw, filters, in_channels)
    ref = np.zeros((1, 9, 6, 3))  # valid, kernel < stride: input * stride per axis
    for i in range(3):
        for j in range(2):
            ref[0, 3 * i:3 * i + 2, 3 * j:3 * j + 2, :] += np.einsum("c,abfc->abf", x[0, i, j], k)
    np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-12)


def test_conv2d_transpose_is_the_gradient_of_conv2d(rng):
    x = rng.standard_normal((1, 4, 4, 2))
    down = C.Conv2D(3, 3, strides=2, padding="same", use_bias=False, dtype="float64")
    up = C.Conv2DTranspose(2, 3, strides=2, padding="same", use_bias=False, dtype="float64")
    down(x)
    dy = rng.standard_normal((1, 2, 2, 3))
    up(dy)
    up.set_weights(down.get_weights())  # same (h, w, 2, 3) layout: (h, w, out=2, in=3) for the transpose
    xt = tw.constant(x)
    with tw.GradientTape() as tape:
        tape.watch(xt)
        s = tw.reduce_sum(down(xt) * dy)
    np.testing.assert_allclose(up(dy).numpy(), tape.gradient(s, xt).numpy(), rtol=1e-10, atol=1e-12)


def test_fully_convolutional_model_with_unknown_spatial_sizes(rng):
    inp = keras.Input(shape=(None, None, 3))
    down = C.Conv2D(4, 3, strides=2, padding="same")(inp)
    up = C.Conv2DTranspose(2, 3, strides=2, padding="valid", output_padding=1)(down)
    assert down.shape == (None, None, None, 4) and up.shape == (None, None, None, 2)
    model = keras.Model(inp, [up, P.GlobalMaxPooling2D()(down)])
    for shape in [(2, 8, 6, 3), (1, 5, 7, 3)]:
        x = rng.standard_normal(shape).astype(np.float32)
        eager = model(x)
        traced = tw.function(lambda t: model(t))(tw.constant(x))
        h, w = -(-shape[1] // 2), -(-shape[2] // 2)
        assert eager[0].shape.as_list() == [shape[0], 2 * h + 2, 2 * w + 2, 2]
        for a, b in zip(eager, traced):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_depthwise_matches_per_channel_conv(rng):
    x = rng.standard_normal((1, 5, 5, 2)).astype(np.float32)
    layer = C.DepthwiseConv2D(3, depth_multiplier=2, use_bias=False)
    y = layer(x).numpy()
    k = layer.kernel.numpy()  # (3, 3, 2, 2)
    for c in range(2):
        for m in range(2):
            ref = _np_conv2d_valid(x[..., c:c + 1], k[:, :, c:c + 1, m:m + 1])[..., 0]
            np.testing.assert_allclose(y[..., c * 2 + m], ref, rtol=1e-4, atol=1e-5)


def test_conv_argument_errors():
    with pytest.raises(ValueError, match="evenly divisible by the number of groups"):
        C.Conv2D(5, 3, groups=2)
    with pytest.raises(ValueError, match="strides > 1` not supported in conjunction with `dilation_rate > 1"):
        C.Conv2D(2, 3, strides=2, dilation_rate=2)
    with pytest.raises(ValueError, match="padding"):
        C.Conv2D(2, 3, padding="causal")
    with pytest.raises(ValueError, match="data_format"):
        C.Conv2D(2, 3, data_format="NHWC")
    with pytest.raises(ValueError, match="kernel_size"):
        C.Conv2D(2, (3, 3, 3))
    layer = C.Conv2D(2, 3, name="my_conv")
    with pytest.raises(ValueError, match=r"my_conv.*expected (min_)?ndim=4.*\(2, 5, 5\)"):
        layer(np.zeros((2, 5, 5), np.float32))
    grouped = C.Conv2D(4, 3, groups=2, name="grouped_conv")
    with pytest.raises(ValueError, match=r"number of input channels must be evenly divisible.*grouped_conv"):
        grouped(np.zeros((1, 5, 5, 3), np.float32))


def test_reshape_then_conv_in_sequential():
    model = keras.Sequential([keras.Input(shape=(16,)), core.Reshape((4, 4, 1)), C.Conv2D(2, 3)])
    assert model.output_shape == (None, 2, 2, 2)


def test_conv_in_sequential_model_trains_shape_and_summary_counts():
    model = keras.Sequential([keras.Input(shape=(8, 8, 1)), C.Conv2D(4, 3, activation="relu"),
                              P.MaxPooling2D(), core.Flatten(), core.Dense(3)])
    assert model.output_shape == (None, 3)
    assert model.count_params() == (9 * 4 + 4) + (3 * 3 * 4 * 3 + 3)
    assert model(np.zeros((2, 8, 8, 1), np.float32)).shape.as_list() == [2, 3]


# ---- pooling ---------------------------------------------------------------------------------------
def test_pooling_values_against_numpy(rng):
    x = rng.standard_normal((2, 4, 6, 3)).astype(np.float32)
    blocks = x.reshape(2, 2, 2, 3, 2, 3)
    np.testing.assert_allclose(P.MaxPooling2D()(x).numpy(), blocks.max(axis=(2, 4)), rtol=1e-6)
    np.testing.assert_allclose(P.AveragePooling2D()(x).numpy(), blocks.mean(axis=(2, 4)), rtol=1e-5)
    np.testing.assert_allclose(P.GlobalMaxPooling2D()(x).numpy(), x.max(axis=(1, 2)), rtol=1e-6)
    np.testing.assert_allclose(P.GlobalAveragePooling2D()(x).numpy(), x.mean(axis=(1, 2)), rtol=1e-5)
    x1 = rng.standard_normal((2, 5, 3)).astype(np.float32)
    # "same" average counts only the real elements of the last, partial window
    y = P.AveragePooling1D(2, padding="same")(x1).numpy()
    np.testing.assert_allclose(y[:, 2], x1[:, 4], rtol=1e-6)
    np.testing.assert_allclose(P.MaxPooling1D(3, strides=1)(x1).numpy()[:, 0], x1[:, :3].max(axis=1), rtol=1e-6)


def test_pooling_config_defaults():
    cfg = P.MaxPooling2D().get_config()
    assert (cfg["pool_size"], cfg["strides"], cfg["padding"], cfg["data_format"]) == \
        ((2, 2), (2, 2), "valid", "channels_last")
    assert P.MaxPooling1D(pool_size=3).get_config()["strides"] == (3,)
    assert P.GlobalAveragePooling1D().get_config()["keepdims"] is False


def test_global_average_pooling_1d_mask(rng):
    x = rng.standard_normal((3, 4, 2)).astype(np.float32)
    mask = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], bool)
    y = P.GlobalAveragePooling1D()(x, mask=mask).numpy()
    np.testing.assert_allclose(y[0], x[0, :2].mean(0), rtol=1e-6)
    np.testing.assert_allclose(y[1], x[1].mean(0), rtol=1e-6)
    np.testing.assert_array_equal(y[2], 0.0)  # an all-padding row is 0, not NaN
    yk = P.GlobalAveragePooling1D(keepdims=True)(x, mask=mask).numpy()
    np.testing.assert_allclose(yk[:, 0], y, rtol=1e-6)
    yf = P.GlobalAveragePooling1D(data_format="channels_first")(np.transpose(x, (0, 2, 1)), mask=mask).numpy()
    np.testing.assert_allclose(yf, y, rtol=1e-6)
    assert P.GlobalAveragePooling1D().compute_mask(x, mask) is None


# ---- batch normalization -----------------------------------------------------------------------------
def test_batch_norm_moving_statistics_match_numpy(rng):
    bn = N.BatchNormalization(momentum=0.8, epsilon=1e-3)
    batches = [rng.normal(2.0, 3.0, (8, 3)).astype(np.float32) for _ in range(4)]
    mm, mv = np.zeros(3), np.ones(3)
    for b in batches:
        y = bn(b, training=True).numpy()
        mean, var = b.mean(0), b.var(0)  # Keras 3: the biased batch variance
        mm, mv = 0.8 * mm + 0.2 * mean, 0.8 * mv + 0.2 * var
        np.testing.assert_allclose(y, (b - mean) / np.sqrt(var + 1e-3), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bn.moving_mean.numpy(), mm, rtol=1e-5)
    np.testing.assert_allclose(bn.moving_variance.numpy(), mv, rtol=1e-5)
    # inference uses the moving statistics (and does not change them)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    for kwargs in ({"training": False}, {}):
        np.testing.assert_allclose(bn(x, **kwargs).numpy(), (x - mm) / np.sqrt(mv + 1e-3), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.moving_mean.numpy(), mm, rtol=1e-5)


def test_batch_norm_updates_inside_tw_function(rng):
    bn = N.BatchNormalization(axis=1, momentum=0.5)
    x = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    bn(x[:1])  # build
    step = tw.function(lambda t: bn(t, training=True))
    mm = np.zeros(2)
    for i in range(3):
        step(tw.constant(x + i))
        mm = 0.5 * mm + 0.5 * (x + i).mean(axis=(0, 2, 3))
    np.testing.assert_allclose(bn.moving_mean.numpy(), mm, rtol=1e-5)
    infer = tw.function(lambda t: bn(t, training=False))
    before = bn.moving_mean.numpy().copy()
    infer(tw.constant(x))
    np.testing.assert_array_equal(bn.moving_mean.numpy(), before)


def test_batch_norm_trainable_false_runs_in_inference_mode(rng):
    bn = N.BatchNormalization(trainable=False, moving_mean_initializer="ones")
    x = rng.standard_normal((6, 2)).astype(np.float32)
    y = bn(x, training=True).numpy()
    np.testing.assert_allclose(y, (x - 1.0) / np.sqrt(1.0 + 1e-3), rtol=1e-5)
    np.testing.assert_array_equal(bn.moving_mean.numpy(), [1.0, 1.0])
    assert bn.trainable_weights == [] and len(bn.non_trainable_weights) == 4
    # unfreezing restores training behaviour
    bn.trainable = True
    bn(x, training=True)
    assert not np.allclose(bn.moving_mean.numpy(), 1.0)
    assert [w._keras_name for w in bn.weights] == ["gamma", "beta", "moving_mean", "moving_variance"]


def test_batch_norm_mask_excludes_masked_steps(rng):
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], bool)
    bn = N.BatchNormalization(momentum=0.0)
    bn(x, training=True, mask=mask)
    kept = x[mask]
    np.testing.assert_allclose(bn.moving_mean.numpy(), kept.mean(0), rtol=1e-5)
    np.testing.assert_allclose(bn.moving_variance.numpy(), kept.var(0), rtol=1e-5)


def test_batch_norm_in_model_training_mode_follows_fit_flag(rng):
    inp = keras.Input(shape=(3,))
    bn = N.BatchNormalization(momentum=0.0)
    model = keras.Model(inp, bn(inp))
    x = rng.standard_normal((8, 3)).astype(np.float32)
    model(x)  # inference: no update
    np.testing.assert_array_equal(bn.moving_mean.numpy(), 0.0)
    model(x, training=True)
    np.testing.assert_allclose(bn.moving_mean.numpy(), x.mean(0), rtol=1e-5)


def test_layer_normalization_against_numpy(rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    ln = N.LayerNormalization(axis=[1, 2], gamma_initializer="ones", beta_initializer="zeros")
    y = ln(x).numpy()
    mu = x.mean(axis=(1, 2), keepdims=True)
    var = x.var(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(y, (x - mu) / np.sqrt(var + 1e-3), rtol=1e-4, atol=1e-5)
    assert ln.gamma.shape.as_list() == [3, 4]
    rms = N.LayerNormalization(rms_scaling=True, epsilon=1e-6)
    # Keras 3's rms_scaling: the centred variance, an uncentred x (tests/test_ln19_rms_scaling.py)
    np.testing.assert_allclose(rms(x).numpy(), x / np.sqrt(x.var(-1, keepdims=True) + 1e-6), rtol=1e-4)
    assert N.LayerNormalization().get_config()["epsilon"] == 1e-3


# ---- embedding and masking ---------------------------------------------------------------------------
def test_embedding_defaults_and_sparse_gradient():
    emb = E.Embedding(7, 2)
    cfg = emb.get_config()
    assert cfg["embeddings_initializer"]["class_name"] == "RandomUniform" and cfg["mask_zero"] is False
    ids = tw.constant([[1, 2], [1, 6]])
    with tw.GradientTape() as tape:
        loss = tw.reduce_sum(emb(ids))
    g = tape.gradient(loss, emb.trainable_weights)[0]
    assert isinstance(g, tw.IndexedSlices)
    dense = np.zeros((7, 2))
    for i in [1, 2, 1, 6]:
        dense[i] += 1
    np.testing.assert_array_equal(np.asarray(g), dense)
    # float ids (a float keras.Input) are cast to int
    np.testing.assert_array_equal(emb(np.array([[1.0, 2.0]])).numpy(), emb(np.array([[1, 2]])).numpy())


def test_embedding_weights_and_input_length():
    table = np.arange(8, dtype=np.float32).reshape(4, 2)
    emb = E.Embedding(4, 2, weights=[table], input_length=3)
    np.testing.assert_array_equal(emb(np.array([[3, 0, 1]])).numpy()[0], table[[3, 0, 1]])
    model = keras.Sequential([emb])
    assert model.input_shape == (None, 3) and model.output_shape == (None, 3, 2)
    again = E.Embedding.from_config(emb.get_config())
    assert again.input_length == 3 and again.get_config() == emb.get_config()


def _masked_mean(table, ids):
    rows = table[ids]
    keep = (ids != 0)[..., None]
    return (rows * keep).sum(1) / keep.sum(1)


def test_embedding_mask_reaches_global_average_pooling_sequential():
    ids = np.array([[3, 5, 0, 0], [1, 2, 4, 0]], np.int32)
    model = keras.Sequential([keras.Input(shape=(4,), dtype="int32"), E.Embedding(6, 3, mask_zero=True),
                              P.GlobalAveragePooling1D()])
    table = model.layers[0].embeddings.numpy()
    np.testing.assert_allclose(model(ids).numpy(), _masked_mean(table, ids), rtol=1e-6)
    # unmasked pooling would differ (row 0 of the table is not zero)
    assert not np.allclose(model(ids).numpy(), table[ids].mean(1))
    np.testing.assert_allclose(model.predict(ids, verbose=0), _masked_mean(table, ids), rtol=1e-6)


def test_embedding_mask_reaches_global_average_pooling_functional():
    ids = np.array([[3, 5, 0, 0], [1, 0, 0, 0]], np.int32)
    inp = keras.Input(shape=(4,), dtype="int32")
    emb = E.Embedding(6, 3, mask_zero=True)
    h = core.Dropout(0.5)(emb(inp))  # the mask passes through layers that support masking
    out = core.Dense(1, kernel_initializer="ones")(P.GlobalAveragePooling1D()(h))
    model = keras.Model(inp, out)
    table = emb.embeddings.numpy()
    ref = _masked_mean(table, ids).sum(1, keepdims=True)
    np.testing.assert_allclose(model(ids).numpy(), ref, rtol=1e-5)
    np.testing.assert_allclose(tw.function(lambda t: model(t))(tw.constant(ids)).numpy(), ref, rtol=1e-5)


def test_embedding_float_input_in_functional_model():
    inp = keras.Input(shape=(3,))  # float32 ids, as Keras users often write
    emb = E.Embedding(5, 2)
    model = keras.Model(inp, emb(inp))
    ids = np.array([[1, 4, 0]], np.float32)
    np.testing.assert_array_equal(model(ids).numpy()[0], emb.embeddings.numpy()[[1, 4, 0]])


# ---- merge layers ------------------------------------------------------------------------------------
def test_merge_values(rng):
    a, b, c = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3))
    np.testing.assert_allclose(M.add([a, b, c]).numpy(), a + b + c, rtol=1e-6)
    np.testing.assert_allclose(M.subtract([a, b]).numpy(), a - b, rtol=1e-6)
    np.testing.assert_allclose(M.multiply([a, b, c]).numpy(), a * b * c, rtol=1e-6)
    np.testing.assert_allclose(M.average([a, b]).numpy(), (a + b) / 2, rtol=1e-6)
    np.testing.assert_allclose(M.maximum([a, b, c]).numpy(), np.maximum(np.maximum(a, b), c))
    np.testing.assert_allclose(M.minimum([a, b]).numpy(), np.minimum(a, b))
    np.testing.assert_allclose(M.concatenate([a, b], axis=0).numpy(), np.concatenate([a, b], 0))
    x, y = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 5, 4)).astype(np.float32)
    np.testing.assert_allclose(M.dot([x, y], axes=2).numpy(), np.einsum("bij,bkj->bik", x, y), rtol=1e-5)
    xn = x / np.linalg.norm(x, axis=2, keepdims=True)
    yn = y / np.linalg.norm(y, axis=2, keepdims=True)
    np.testing.assert_allclose(M.Dot(axes=-1, normalize=True)([x, y]).numpy(), np.einsum("bij,bkj->bik", xn, yn),
                               rtol=1e-5)
    # lower-rank inputs get trailing size-1 dimensions
    np.testing.assert_allclose(M.Add()([x, x[:, :, 0]]).numpy(), x + x[:, :, :1], rtol=1e-6)


def test_merge_in_functional_model():
    a, b = keras.Input(shape=(4,)), keras.Input(shape=(4,))
    h = M.concatenate([M.add([a, b]), M.multiply([a, b])])
    assert h.shape == (None, 8)
    model = keras.Model([a, b], core.Dense(1)(h))
    assert model([np.ones((3, 4), np.float32), np.ones((3, 4), np.float32)]).shape.as_list() == [3, 1]


@pytest.mark.parametrize("layer,shapes,pattern", [
    (M.Add(name="add_bad"), [(2, 3), (2, 4)], r"Inputs have incompatible shapes.*add_bad.*\(2, 3\), \(2, 4\)"),
    (M.Multiply(name="mul_bad"), [(2, 3, 4), (2, 2, 4)], r"incompatible shapes.*mul_bad.*\(2, 3, 4\), \(2, 2, 4\)"),
    (M.Add(name="batch_bad"), [(2, 3), (4, 3)], r"different batch sizes.*batch_bad.*\(2, 3\), \(4, 3\)"),
    (M.Subtract(name="sub_bad"), [(2, 3)] * 3, r"exactly 2 inputs.*sub_bad"),
    (M.Concatenate(name="cat_bad"), [(2, 3, 4), (2, 5, 5)],
     r"matching shapes except for the concatenation axis.*cat_bad.*\(2, 3, 4\), \(2, 5, 5\)"),
    (M.Concatenate(axis=1, name="cat_rank"), [(2, 3), (2, 3, 1)], r"cat_rank.*different ranks"),
    (M.Dot(axes=1, name="dot_bad"), [(2, 3), (2, 4)],
     r"Incompatible input shapes: axis values 3 \(at axis 1\) != 4 \(at axis 1\).*\(2, 3\), \(2, 4\).*dot_bad"),
    (M.Dot(axes=1, name="dot_three"), [(2, 3)] * 3, r"list of 2 inputs.*dot_three"),
])
def test_merge_shape_errors_name_layer_and_shapes(layer, shapes, pattern):
    with pytest.raises(ValueError, match=pattern):
        layer([np.zeros(s, np.float32) for s in shapes])
    symbolic = [keras.Input(batch_shape=s) for s in shapes]
    with pytest.raises(ValueError, match=pattern):
        type(layer)(**{k: v for k, v in layer.get_config().items() if k in ("axis", "axes")},
                    name=layer.name)(symbolic)


def test_merge_needs_a_list():
    with pytest.raises(ValueError, match=r"list of inputs.*add_single"):
        M.Add(name="add_single")(np.zeros((2, 3), np.float32))


def test_merge_masks():
    a, b = np.ones((2, 3, 2), np.float32), np.ones((2, 3, 2), np.float32)
    ma = tw.constant([[True, True, False], [True, False, False]])
    mb = tw.constant([[True, False, False], [True, True, True]])
    add = M.Add()
    np.testing.assert_array_equal(add.compute_mask([a, b], [ma, mb]).numpy(), [[1, 0, 0], [1, 0, 0]])
    np.testing.assert_array_equal(add.compute_mask([a, b], [ma, None]).numpy(), ma.numpy())
    assert add.compute_mask([a, b], [None, None]) is None
    cat_time = M.Concatenate(axis=1)
    np.testing.assert_array_equal(cat_time.compute_mask([a, b], [ma, mb]).numpy(),
                                  np.concatenate([ma.numpy(), mb.numpy()], 1))
    cat_feat = M.Concatenate()
    np.testing.assert_array_equal(cat_feat.compute_mask([a, b], [ma, None]).numpy(), np.ones((2, 3), bool))


# ---- in compiled training (model.fit runs a traced tw.function step) --------------------------------
def test_cnn_with_batch_norm_fits_and_updates_moving_statistics(rng):
    keras.utils.set_random_seed(1)
    x = rng.standard_normal((32, 6, 6, 1)).astype(np.float32)
    y = (x.mean(axis=(1, 2, 3)) > 0).astype(np.int32)
    bn = N.BatchNormalization()
    model = keras.Sequential([keras.Input(shape=(6, 6, 1)), C.Conv2D(4, 3, padding="same"), bn,
                              core.Activation("relu"), P.MaxPooling2D(), C.DepthwiseConv2D(3, padding="same"),
                              P.GlobalAveragePooling2D(), core.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = bn.moving_mean.numpy().copy()
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert not np.allclose(bn.moving_mean.numpy(), before)  # assign ran inside the traced step
    # inference is deterministic and uses the moving statistics
    np.testing.assert_allclose(model.predict(x, verbose=0), model.predict(x, verbose=0))
    after = bn.moving_mean.numpy().copy()
    model.evaluate(x, y, verbose=0)
    np.testing.assert_array_equal(bn.moving_mean.numpy(), after)


def test_fasttext_style_model_fits_with_masked_embedding(rng):
    keras.utils.set_random_seed(2)
    n, length, vocab = 64, 6, 12
    ids = rng.integers(1, vocab, size=(n, length)).astype(np.int32)
    lengths = rng.integers(1, length + 1, size=n)
    for i, k in enumerate(lengths):
        ids[i, k:] = 0
    labels = ((ids == 3) | (ids == 4)).any(axis=1).astype(np.int32)
    model = keras.Sequential([keras.Input(shape=(length,), dtype="int32"), E.Embedding(vocab, 8, mask_zero=True),
                              P.GlobalAveragePooling1D(), core.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="binary_crossentropy", metrics=["accuracy"])
    table = model.layers[0].embeddings
    unseen = table.numpy()[vocab - 1].copy()
    ids[ids == vocab - 1] = 1  # id vocab-1 never occurs: its row must not move
    history = model.fit(ids, labels, batch_size=16, epochs=15, verbose=0)
    assert history.history["accuracy"][-1] > 0.85
    np.testing.assert_array_equal(table.numpy()[vocab - 1], unseen)


def test_embedding_gradient_stays_sparse_in_a_traced_step():
    emb = E.Embedding(7, 2)
    emb.build(None)
    kinds = []

    @tw.function
    def step(ids):
        with tw.GradientTape() as tape:
            loss = tw.reduce_sum(emb(ids))
        g = tape.gradient(loss, emb.embeddings)
        kinds.append(type(g))
        return g.indices
    np.testing.assert_array_equal(step(tw.constant([[1, 2], [2, 5]])).numpy(), [1, 2, 2, 5])
    assert kinds == [tw.IndexedSlices]


# ---- Keras 3 behaviour of the engine -------------------------------------------------------------------
def test_freezing_a_model_freezes_its_batch_norm():
    inp = keras.Input(shape=(3,))
    bn = N.BatchNormalization(momentum=0.0)
    model = keras.Model(inp, bn(inp))
    model.trainable = False
    model(np.full((4, 3), 5.0, np.float32), training=True)
    np.testing.assert_array_equal(bn.moving_mean.numpy(), 0.0)


def test_eager_mask_propagates_between_layer_calls():
    ids = np.array([[3, 5, 0, 0]], np.int32)
    emb = E.Embedding(6, 3, mask_zero=True)
    y = P.GlobalAveragePooling1D()(emb(ids)).numpy()
    np.testing.assert_allclose(y, _masked_mean(emb.embeddings.numpy(), ids), rtol=1e-6)


def test_default_layer_names_follow_keras():
    keras.backend.clear_session()
    assert [C.Conv2D(1, 1).name, P.MaxPooling2D().name, C.Conv2DTranspose(1, 1).name,
            P.GlobalAveragePooling1D().name, N.BatchNormalization().name] == \
        ["conv2d", "max_pooling2d", "conv2d_transpose", "global_average_pooling1d", "batch_normalization"]


# ---- whole models through get_config / from_config ------------------------------------------------------
_ALL = {cls.__name__: cls for mod in (C, P, N, E, M) for cls in vars(mod).values()
        if isinstance(cls, type) and issubclass(cls, keras.layers.Layer)}


def test_sequential_config_round_trip_with_these_layers(rng):
    import json
    model = keras.Sequential([C.Conv2D(3, 3, input_shape=(8, 8, 2), padding="same"), N.BatchNormalization(),
                              C.SeparableConv2D(4, 3), P.AveragePooling2D(), C.Conv2DTranspose(2, 2, strides=2),
                              P.GlobalMaxPooling2D(), N.LayerNormalization(), core.Dense(2)])
    config = json.loads(json.dumps(model.get_config()))
    clone = keras.Sequential.from_config(config, custom_objects=_ALL)
    clone.set_weights(model.get_weights())
    x = rng.standard_normal((2, 8, 8, 2)).astype(np.float32)
    np.testing.assert_allclose(clone(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_functional_config_round_trip_with_merge_layers(rng):
    import json
    ids = keras.Input(shape=(5,), dtype="int32")
    feats = keras.Input(shape=(5, 4))
    e = E.Embedding(9, 4, mask_zero=True)(ids)
    h = M.Concatenate()([M.Add()([e, feats]), M.Multiply()([e, feats])])
    h = C.Conv1D(3, 2, padding="causal")(h)
    out = M.Dot(axes=1, normalize=True)([P.GlobalAveragePooling1D()(h), P.GlobalMaxPooling1D()(h)])
    model = keras.Model([ids, feats], out)
    config = json.loads(json.dumps(model.get_config()))
    clone = type(model).from_config(config, custom_objects=_ALL)
    clone.set_weights(model.get_weights())
    data = [rng.integers(0, 9, size=(3, 5)).astype(np.int32), rng.standard_normal((3, 5, 4)).astype(np.float32)]
    np.testing.assert_allclose(clone(data).numpy(), model(data).numpy(), rtol=1e-5, atol=1e-6)


def test_model_from_config_builds_a_functional_model():
    inp = keras.Input(shape=(3,))
    model = keras.Model(inp, M.Add()([core.Dense(2)(inp), core.Dense(2)(inp)]))
    clone = keras.Model.from_config(model.get_config(), custom_objects=_ALL)
    assert clone.output_shape == (None, 2)
