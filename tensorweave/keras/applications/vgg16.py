"""VGG16 (Simonyan & Zisserman, 2014): 13 3x3 convolutions in 5 blocks, then 3 dense layers."""
from tensorweave.keras import layers
from tensorweave.keras.applications import _common


def VGG16(include_top=True, weights="imagenet", input_tensor=None, input_shape=None, pooling=None, classes=1000,
          classifier_activation="softmax", name="vgg16"):
    """VGG16; ``weights=None`` (random initialisation) or a weights file path.

    >>> from tensorweave import keras
    >>> keras.applications.VGG16(weights=None, include_top=False, input_shape=(32, 32, 3)).count_params()
    14714688
    """
    _common.check_weights(weights, "VGG16")
    inputs = _common.image_input(input_tensor, input_shape, 224, 32, include_top, "VGG16")
    x = inputs
    for block, (filters, convs) in enumerate(((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)), start=1):
        for i in range(1, convs + 1):
            x = layers.Conv2D(filters, 3, activation="relu", padding="same", name=f"block{block}_conv{i}")(x)
        x = layers.MaxPooling2D(2, strides=2, name=f"block{block}_pool")(x)
    if include_top:
        x = layers.Flatten(name="flatten")(x)
        x = layers.Dense(4096, activation="relu", name="fc1")(x)
        x = layers.Dense(4096, activation="relu", name="fc2")(x)
        x = layers.Dense(classes, activation=classifier_activation, name="predictions")(x)
    else:
        x = _common.head(x, False, pooling, classes, classifier_activation, pool_name="global_average_pooling2d")
    return _common.finish(inputs, x, name, weights)
