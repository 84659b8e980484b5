"""DenseNet121 (Huang et al., 2016): dense blocks of 6, 12, 24, 16 layers joined by transitions."""
from tensorweave.keras import layers
from tensorweave.keras.applications import _common

_EPS = 1.001e-5


def _conv_block(x, growth_rate, name):
    x1 = layers.BatchNormalization(axis=3, epsilon=_EPS, name=name + "_0_bn")(x)
    x1 = layers.Activation("relu", name=name + "_0_relu")(x1)
    x1 = layers.Conv2D(4 * growth_rate, 1, use_bias=False, name=name + "_1_conv")(x1)
    x1 = layers.BatchNormalization(axis=3, epsilon=_EPS, name=name + "_1_bn")(x1)
    x1 = layers.Activation("relu", name=name + "_1_relu")(x1)
    x1 = layers.Conv2D(growth_rate, 3, padding="same", use_bias=False, name=name + "_2_conv")(x1)
    return layers.Concatenate(axis=3, name=name + "_concat")([x, x1])


def _transition_block(x, reduction, name):
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name=name + "_bn")(x)
    x = layers.Activation("relu", name=name + "_relu")(x)
    x = layers.Conv2D(int(x.shape[3] * reduction), 1, use_bias=False, name=name + "_conv")(x)
    return layers.AveragePooling2D(2, strides=2, name=name + "_pool")(x)


def DenseNet121(include_top=True, weights="imagenet", input_tensor=None, input_shape=None, pooling=None,
                classes=1000, classifier_activation="softmax", name="densenet121"):
    """DenseNet121; ``weights=None`` (random initialisation) or a weights file path.

    >>> from tensorweave import keras
    >>> keras.applications.DenseNet121(weights=None, include_top=False, input_shape=(32, 32, 3)).output_shape
    (None, 1, 1, 1024)
    """
    _common.check_weights(weights, "DenseNet121")
    inputs = _common.image_input(input_tensor, input_shape, 224, 32, include_top, "DenseNet121")
    x = layers.ZeroPadding2D(((3, 3), (3, 3)))(inputs)
    x = layers.Conv2D(64, 7, strides=2, use_bias=False, name="conv1_conv")(x)
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name="conv1_bn")(x)
    x = layers.Activation("relu", name="conv1_relu")(x)
    x = layers.ZeroPadding2D(((1, 1), (1, 1)))(x)
    x = layers.MaxPooling2D(3, strides=2, name="pool1")(x)
    for i, blocks in enumerate((6, 12, 24, 16), start=2):
        for b in range(1, blocks + 1):
            x = _conv_block(x, 32, name=f"conv{i}_block{b}")
        if i < 5:
            x = _transition_block(x, 0.5, name=f"pool{i}")
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name="bn")(x)
    x = layers.Activation("relu", name="relu")(x)
    x = _common.head(x, include_top, pooling, classes, classifier_activation)
    return _common.finish(inputs, x, name, weights)
