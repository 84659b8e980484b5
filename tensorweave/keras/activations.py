"""Activation functions by name (``"relu"``, ``"softmax"`` ...), as in ``keras.activations``.

>>> import tensorweave as tw
>>> from tensorweave.keras import activations
>>> activations.get("relu")(tw.constant([-1.0, 2.0])).numpy()
array([0., 2.], dtype=float32)
"""
from tensorweave import nn as _nn
from tensorweave.ops import math_ops as _m


def linear(x):
    return x


def relu(x, negative_slope=0.0, max_value=None, threshold=0.0):
    if negative_slope == 0.0 and max_value is None and threshold == 0.0:
        return _nn.relu(x)
    y = _m.where(x > threshold, x, (x - threshold) * negative_slope)
    return _m.minimum(y, max_value) if max_value is not None else y


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


_BY_NAME = {f.__name__: f for f in (linear, relu, softmax, log_softmax, sigmoid, hard_sigmoid, tanh, elu, selu,
                                    gelu, softplus, softsign, swish, relu6, leaky_relu, exponential)}
_BY_NAME["silu"] = swish


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
