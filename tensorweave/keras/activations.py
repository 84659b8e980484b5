"""Activation functions by name (``"relu"``, ``"softmax"`` ...), as in ``keras.activations``.

>>> import tensorweave as tw
>>> from tensorweave.keras import activations
>>> activations.get("relu")(tw.constant([-1.0, 2.0])).numpy()
array([0., 2.], dtype=float32)
"""
from tensorweave import nn as _nn
from tensorweave.core.convert import convert_to_tensor
from tensorweave.keras.ops import nn as _kops
from tensorweave.ops import math_ops as _m


def linear(x):
    return x


def relu(x, negative_slope=0.0, max_value=None, threshold=0.0):
    """Keras' rule: ``x`` above ``threshold`` (clipped to ``[0, max_value]`` when given), and
    ``negative_slope * (x - threshold)`` below it."""
    if negative_slope == 0.0 and max_value is None and threshold == 0.0:
        return _nn.relu(x)
    x = convert_to_tensor(x)
    if negative_slope != 0.0 and max_value is None and threshold == 0.0:
        return _nn.leaky_relu(x, alpha=negative_slope)
    below = _nn.relu(threshold - x) if negative_slope != 0.0 else None
    y = x * _m.cast(x > threshold, x.dtype) if threshold != 0.0 else _nn.relu(x)
    if max_value is not None:
        y = _m.clip_by_value(y, _m.cast(0, x.dtype), _m.cast(max_value, x.dtype))
    return y - negative_slope * below if below is not None else y


def softmax(x, axis=-1):
    return _nn.softmax(x, axis=axis)


def log_softmax(x, axis=-1):
    return _nn.log_softmax(x, axis=axis)


def sigmoid(x):
    return _m.sigmoid(x)


def hard_sigmoid(x):
    return _m.clip_by_value(x * (1.0 / 6.0) + 0.5, 0.0, 1.0)


def tanh(x):
    return _m.tanh(x)


def elu(x, alpha=1.0):
    return _nn.elu(x) if alpha == 1.0 else _m.where(x > 0, x, alpha * _m.expm1(x))


def selu(x):
    return _nn.selu(x)


def gelu(x, approximate=False):
    return _nn.gelu(x, approximate=approximate)


def softplus(x):
    return _nn.softplus(x)


def softsign(x):
    return _nn.softsign(x)


def swish(x):
    return _nn.silu(x)


silu = swish


def relu6(x):
    return _nn.relu6(x)


def leaky_relu(x, negative_slope=0.2):
    return _nn.leaky_relu(x, alpha=negative_slope)


def exponential(x):
    return _m.exp(x)


def mish(x):
    """``x * tanh(softplus(x))`` (Misra, 2019)."""
    return x * _m.tanh(_nn.softplus(x))


celu = _kops.celu
glu = _kops.glu
hard_shrink = _kops.hard_shrink
hard_silu = _kops.hard_silu
hard_swish = hard_silu
hard_tanh = _kops.hard_tanh
log_sigmoid = _kops.log_sigmoid
soft_shrink = _kops.soft_shrink
sparse_plus = _kops.sparse_plus
sparse_sigmoid = _kops.sparse_sigmoid
sparsemax = _kops.sparsemax
squareplus = _kops.squareplus
tanh_shrink = _kops.tanh_shrink
threshold = _kops.threshold

_BY_NAME = {f.__name__: f for f in (linear, relu, softmax, log_softmax, sigmoid, hard_sigmoid, tanh, elu, selu,
                                    gelu, softplus, softsign, swish, relu6, leaky_relu, exponential, mish, celu,
                                    glu, hard_shrink, hard_silu, hard_tanh, log_sigmoid, soft_shrink, sparse_plus,
                                    sparse_sigmoid, sparsemax, squareplus, tanh_shrink, threshold)}
_BY_NAME["silu"] = swish
_BY_NAME["hard_swish"] = hard_silu


def get(identifier):
    """An activation function from a name, a callable, or None (linear)."""
    if identifier is None:
        return linear
    if callable(identifier):
        return identifier
    if isinstance(identifier, str):
        fn = _BY_NAME.get(identifier)
        if fn is None:
            raise ValueError(f"Unknown activation {identifier!r}; known: {sorted(_BY_NAME)}")
        return fn
    raise TypeError(f"Could not interpret activation {identifier!r}")


def serialize(fn):
    if fn is None:
        return "linear"
    name = getattr(fn, "__name__", None)
    if name in _BY_NAME and _BY_NAME[name] is fn:
        return name
    if name == "swish":
        return "swish"
    raise ValueError(f"Cannot serialize the custom activation {fn!r}; register it by name or pass a string")


def deserialize(config, custom_objects=None):
    """The activation named by ``config`` (a name, or Keras' ``{"class_name": "function", "config": name}``)."""
    if isinstance(config, dict):
        config = config.get("config", config.get("class_name"))
    if custom_objects and config in custom_objects:
        return custom_objects[config]
    return get(config)
