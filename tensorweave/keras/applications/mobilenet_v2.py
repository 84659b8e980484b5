"""MobileNetV2 (Sandler et al., 2018): inverted residual blocks with linear bottlenecks."""
from tensorweave.keras import layers
from tensorweave.keras.applications import _common

# (filters, stride, expansion) of blocks 1..16; block 0 is (16, 1, 1)
_BLOCKS = [(24, 2, 6), (24, 1, 6), (32, 2, 6), (32, 1, 6), (32, 1, 6), (64, 2, 6), (64, 1, 6), (64, 1, 6), (64, 1, 6),
           (96, 1, 6), (96, 1, 6), (96, 1, 6), (160, 2, 6), (160, 1, 6), (160, 1, 6), (320, 1, 6)]


def _bn(name):
    return layers.BatchNormalization(epsilon=1e-3, momentum=0.999, name=name)


def _inverted_res_block(inputs, expansion, stride, alpha, filters, block_id):
    in_channels = inputs.shape[-1]
    pointwise = _common.make_divisible(int(filters * alpha), 8)
    x = inputs
    prefix = f"block_{block_id}_"
    if block_id:
        x = layers.Conv2D(expansion * in_channels, 1, padding="same", use_bias=False, name=prefix + "expand")(x)
        x = _bn(prefix + "expand_BN")(x)
        x = layers.ReLU(6.0, name=prefix + "expand_relu")(x)
    else:
        prefix = "expanded_conv_"
    if stride == 2:
        x = layers.ZeroPadding2D(_common.correct_pad(x, 3), name=prefix + "pad")(x)
    x = layers.DepthwiseConv2D(3, strides=stride, use_bias=False, padding="same" if stride == 1 else "valid",
                               name=prefix + "depthwise")(x)
    x = _bn(prefix + "depthwise_BN")(x)
    x = layers.ReLU(6.0, name=prefix + "depthwise_relu")(x)
    x = layers.Conv2D(pointwise, 1, padding="same", use_bias=False, name=prefix + "project")(x)
    x = _bn(prefix + "project_BN")(x)
    if in_channels == pointwise and stride == 1:
        return layers.Add(name=prefix + "add")([inputs, x])
    return x


def MobileNetV2(input_shape=None, alpha=1.0, include_top=True, weights="imagenet", input_tensor=None, pooling=None,
                classes=1000, classifier_activation="softmax", name=None):
    """MobileNetV2 with width multiplier ``alpha``; ``weights=None`` or a weights file path.

    >>> from tensorweave import keras
    >>> keras.applications.MobileNetV2(weights=None, include_top=False, input_shape=(32, 32, 3)).output_shape
    (None, 1, 1, 1280)
    """
    _common.check_weights(weights, "MobileNetV2")
    inputs = _common.image_input(input_tensor, input_shape, 224, 32, include_top, "MobileNetV2")
    x = layers.Conv2D(_common.make_divisible(32 * alpha, 8), 3, strides=2, padding="same", use_bias=False,
                      name="Conv1")(inputs)
    x = _bn("bn_Conv1")(x)
    x = layers.ReLU(6.0, name="Conv1_relu")(x)
    x = _inverted_res_block(x, filters=16, alpha=alpha, stride=1, expansion=1, block_id=0)
    for block_id, (filters, stride, expansion) in enumerate(_BLOCKS, start=1):
        x = _inverted_res_block(x, filters=filters, alpha=alpha, stride=stride, expansion=expansion, block_id=block_id)
    last = _common.make_divisible(1280 * alpha, 8) if alpha > 1.0 else 1280
    x = layers.Conv2D(last, 1, use_bias=False, name="Conv_1")(x)
    x = _bn("Conv_1_bn")(x)
    x = layers.ReLU(6.0, name="out_relu")(x)
    x = _common.head(x, include_top, pooling, classes, classifier_activation,
                     pool_name="global_average_pooling2d")
    return _common.finish(inputs, x, name or f"mobilenetv2_{alpha:0.2f}_{inputs.shape[1] or 224}", weights)
