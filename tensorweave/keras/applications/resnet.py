"""ResNet50 (He et al., 2015: bottleneck blocks, projection shortcuts), Keras' layer names."""
from tensorweave.keras import layers
from tensorweave.keras.applications import _common

_EPS = 1.001e-5


def _block(x, filters, stride=1, conv_shortcut=True, name=None):
    if conv_shortcut:
        shortcut = layers.Conv2D(4 * filters, 1, strides=stride, name=name + "_0_conv")(x)
        shortcut = layers.BatchNormalization(axis=3, epsilon=_EPS, name=name + "_0_bn")(shortcut)
    else:
        shortcut = x
    x = layers.Conv2D(filters, 1, strides=stride, name=name + "_1_conv")(x)
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name=name + "_1_bn")(x)
    x = layers.Activation("relu", name=name + "_1_relu")(x)
    x = layers.Conv2D(filters, 3, padding="same", name=name + "_2_conv")(x)
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name=name + "_2_bn")(x)
    x = layers.Activation("relu", name=name + "_2_relu")(x)
    x = layers.Conv2D(4 * filters, 1, name=name + "_3_conv")(x)
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name=name + "_3_bn")(x)
    x = layers.Add(name=name + "_add")([shortcut, x])
    return layers.Activation("relu", name=name + "_out")(x)


def _stack(x, filters, blocks, stride=2, name=None):
    x = _block(x, filters, stride=stride, name=name + "_block1")
    for i in range(2, blocks + 1):
        x = _block(x, filters, conv_shortcut=False, name=f"{name}_block{i}")
    return x


def ResNet50(include_top=True, weights="imagenet", input_tensor=None, input_shape=None, pooling=None, classes=1000,
             classifier_activation="softmax", name="resnet50"):
    """ResNet50; ``weights=None`` (random initialisation) or a weights file path.

    >>> from tensorweave import keras
    >>> keras.applications.ResNet50(weights=None, include_top=False, input_shape=(32, 32, 3)).output_shape
    (None, 1, 1, 2048)
    """
    _common.check_weights(weights, "ResNet50")
    inputs = _common.image_input(input_tensor, input_shape, 224, 32, include_top, "ResNet50")
    x = layers.ZeroPadding2D(3, name="conv1_pad")(inputs)
    x = layers.Conv2D(64, 7, strides=2, name="conv1_conv")(x)
    x = layers.BatchNormalization(axis=3, epsilon=_EPS, name="conv1_bn")(x)
    x = layers.Activation("relu", name="conv1_relu")(x)
    x = layers.ZeroPadding2D(1, name="pool1_pad")(x)
    x = layers.MaxPooling2D(3, strides=2, name="pool1_pool")(x)
    x = _stack(x, 64, 3, stride=1, name="conv2")
    x = _stack(x, 128, 4, name="conv3")
    x = _stack(x, 256, 6, name="conv4")
    x = _stack(x, 512, 3, name="conv5")
    x = _common.head(x, include_top, pooling, classes, classifier_activation)
    return _common.finish(inputs, x, name, weights)
