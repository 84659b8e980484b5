"""What the application builders share: the input, the classifier head, pretrained-weight handling."""
import os

from tensorweave.keras import layers
from tensorweave.keras.engine.input_layer import Input


def check_weights(weights, name):
    if weights is None or (isinstance(weights, str) and os.path.exists(weights)):
        return
    if weights == "imagenet":
        raise ValueError(f"{name}: pretrained ImageNet weights are not shipped with tensorweave (and nothing is "
                         "downloaded). Hint: pass weights=None to train from scratch, or the path of a weights file "
                         "saved with model.save_weights")
    raise ValueError(f"{name}: weights must be None or the path of an existing weights file, got {weights!r}")


def image_input(input_tensor, input_shape, default_size, min_size, include_top, name):
    if input_shape is None:
        input_shape = (default_size, default_size, 3)
    input_shape = tuple(input_shape)
    if len(input_shape) != 3:
        raise ValueError(f"{name}: input_shape must be (height, width, channels), got {input_shape}")
    h, w = input_shape[:2]
    if (h is not None and h < min_size) or (w is not None and w < min_size):
        raise ValueError(f"{name}: input size must be at least {min_size}x{min_size}, got input_shape={input_shape}")
    if input_tensor is not None:
        return input_tensor
    return Input(shape=input_shape)


def head(x, include_top, pooling, classes, classifier_activation, pool_name="avg_pool"):
    if include_top:
        x = layers.GlobalAveragePooling2D(name=pool_name)(x)
        return layers.Dense(classes, activation=classifier_activation, name="predictions")(x)
    if pooling == "avg":
        return layers.GlobalAveragePooling2D(name=pool_name)(x)
    if pooling == "max":
        return layers.GlobalMaxPooling2D(name="max_pool")(x)
    if pooling is not None:
        raise ValueError(f"pooling must be None, 'avg' or 'max', got {pooling!r}")
    return x


def finish(inputs, outputs, name, weights):
    from tensorweave.keras.engine.functional import Functional
    model = Functional(inputs, outputs, name=name)
    if weights is not None:
        model.load_weights(weights)
    return model


def correct_pad(x, kernel_size):
    """Zero padding that makes a stride-2 'valid' convolution centre like TensorFlow's 'same'."""
    size = x.shape[1:3]
    adjust = (1, 1) if size[0] is None else (1 - size[0] % 2, 1 - size[1] % 2)
    k = kernel_size // 2
    return ((k - adjust[0], k), (k - adjust[1], k))


def make_divisible(v, divisor=8, min_value=None):
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:  # never round down by more than 10%
        new_v += divisor
    return new_v
