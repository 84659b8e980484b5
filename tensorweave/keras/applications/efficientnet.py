"""EfficientNetB0 (Tan & Le, 2019): MBConv blocks with squeeze-and-excitation, swish, stochastic depth."""
import math

from tensorweave.keras import initializers, layers
from tensorweave.keras.applications import _common

# kernel, repeats, filters in, filters out, expansion, strides (all with id_skip and se_ratio 0.25)
_B0 = [(3, 1, 32, 16, 1, 1), (3, 2, 16, 24, 6, 2), (5, 2, 24, 40, 6, 2), (3, 3, 40, 80, 6, 2), (5, 3, 80, 112, 6, 1),
       (5, 4, 112, 192, 6, 2), (3, 1, 192, 320, 6, 1)]


def _conv_init():
    return initializers.VarianceScaling(scale=2.0, mode="fan_out", distribution="truncated_normal")


def _dense_init():
    return initializers.VarianceScaling(scale=1.0 / 3.0, mode="fan_out", distribution="uniform")


def _block(inputs, drop_rate, name, filters_in, filters_out, kernel_size, strides, expand_ratio, se_ratio=0.25):
    filters = filters_in * expand_ratio
    x = inputs
    if expand_ratio != 1:
        x = layers.Conv2D(filters, 1, padding="same", use_bias=False, kernel_initializer=_conv_init(),
                          name=name + "expand_conv")(x)
        x = layers.BatchNormalization(axis=3, name=name + "expand_bn")(x)
        x = layers.Activation("swish", name=name + "expand_activation")(x)
    if strides == 2:
        x = layers.ZeroPadding2D(_common.correct_pad(x, kernel_size), name=name + "dwconv_pad")(x)
    x = layers.DepthwiseConv2D(kernel_size, strides=strides, padding="valid" if strides == 2 else "same",
                               use_bias=False, depthwise_initializer=_conv_init(), name=name + "dwconv")(x)
    x = layers.BatchNormalization(axis=3, name=name + "bn")(x)
    x = layers.Activation("swish", name=name + "activation")(x)
    filters_se = max(1, int(filters_in * se_ratio))
    se = layers.GlobalAveragePooling2D(name=name + "se_squeeze")(x)
    se = layers.Reshape((1, 1, filters), name=name + "se_reshape")(se)
    se = layers.Conv2D(filters_se, 1, padding="same", activation="swish", kernel_initializer=_conv_init(),
                       name=name + "se_reduce")(se)
    se = layers.Conv2D(filters, 1, padding="same", activation="sigmoid", kernel_initializer=_conv_init(),
                       name=name + "se_expand")(se)
    x = layers.Multiply(name=name + "se_excite")([x, se])
    x = layers.Conv2D(filters_out, 1, padding="same", use_bias=False, kernel_initializer=_conv_init(),
                      name=name + "project_conv")(x)
    x = layers.BatchNormalization(axis=3, name=name + "project_bn")(x)
    if strides == 1 and filters_in == filters_out:
        if drop_rate > 0:
            x = layers.Dropout(drop_rate, noise_shape=(None, 1, 1, 1), name=name + "drop")(x)
        x = layers.Add(name=name + "add")([x, inputs])
    return x


def EfficientNetB0(include_top=True, weights="imagenet", input_tensor=None, input_shape=None, pooling=None,
                   classes=1000, classifier_activation="softmax", name="efficientnetb0"):
    """EfficientNetB0 (its own input scaling included: feed pixels in [0, 255]).

    >>> from tensorweave import keras
    >>> keras.applications.EfficientNetB0(weights=None, include_top=False, input_shape=(32, 32, 3)).output_shape
    (None, 1, 1, 1280)
    """
    _common.check_weights(weights, "EfficientNetB0")
    inputs = _common.image_input(input_tensor, input_shape, 224, 32, include_top, "EfficientNetB0")
    drop_connect_rate = 0.2
    x = layers.Rescaling(1.0 / 255.0)(inputs)
    x = layers.Normalization(axis=3)(x)
    x = layers.ZeroPadding2D(_common.correct_pad(x, 3), name="stem_conv_pad")(x)
    x = layers.Conv2D(_common.make_divisible(32), 3, strides=2, padding="valid", use_bias=False,
                      kernel_initializer=_conv_init(), name="stem_conv")(x)
    x = layers.BatchNormalization(axis=3, name="stem_bn")(x)
    x = layers.Activation("swish", name="stem_activation")(x)
    total = float(sum(math.ceil(r) for _, r, *_ in _B0))
    b = 0
    for i, (kernel, repeats, f_in, f_out, expand, strides) in enumerate(_B0):
        f_in, f_out = _common.make_divisible(f_in), _common.make_divisible(f_out)
        for j in range(math.ceil(repeats)):
            x = _block(x, drop_connect_rate * b / total, f"block{i + 1}{chr(j + 97)}_", f_in if j == 0 else f_out,
                       f_out, kernel, strides if j == 0 else 1, expand)
            b += 1
    x = layers.Conv2D(_common.make_divisible(1280), 1, padding="same", use_bias=False, kernel_initializer=_conv_init(),
                      name="top_conv")(x)
    x = layers.BatchNormalization(axis=3, name="top_bn")(x)
    x = layers.Activation("swish", name="top_activation")(x)
    if include_top:
        x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
        x = layers.Dropout(0.2, name="top_dropout")(x)
        x = layers.Dense(classes, activation=classifier_activation, kernel_initializer=_dense_init(),
                         name="predictions")(x)
    else:
        x = _common.head(x, False, pooling, classes, classifier_activation)
    return _common.finish(inputs, x, name, weights)
