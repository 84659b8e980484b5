"""Activation layers: LeakyReLU, PReLU, ReLU, ELU, Softmax (Keras 3's arguments and configs).

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.layers.LeakyReLU(negative_slope=0.1)(np.array([[-2.0, 3.0]], "float32")).numpy().tolist()
[[-0.20000000298023224, 3.0]]
"""
import warnings

import tensorweave as tw
from tensorweave.keras import activations, initializers, regularizers
from tensorweave.keras.engine.layer import InputSpec, Layer


class LeakyReLU(Layer):
    """``x`` for ``x >= 0``, ``negative_slope * x`` otherwise (``alpha=`` is Keras 2's name)."""

    def __init__(self, negative_slope=0.3, **kwargs):
        if "alpha" in kwargs:
            negative_slope = kwargs.pop("alpha")
            warnings.warn("LeakyReLU: argument `alpha` is deprecated; use `negative_slope`", stacklevel=2)
        super().__init__(**kwargs)
        if negative_slope is None or negative_slope < 0:
            raise ValueError(f"The negative_slope value of a Leaky ReLU layer cannot be None or negative, "
                             f"got {negative_slope}")
        self.negative_slope = float(negative_slope)
        self.supports_masking = True

    def call(self, inputs):
        return tw.nn.leaky_relu(inputs, alpha=self.negative_slope)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "negative_slope": self.negative_slope}


class PReLU(Layer):
    """Leaky ReLU with a learned slope per element (shared along ``shared_axes``)."""

    def __init__(self, alpha_initializer="Zeros", alpha_regularizer=None, alpha_constraint=None, shared_axes=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.alpha_initializer = initializers.get(alpha_initializer)
        self.alpha_regularizer = regularizers.get(alpha_regularizer)
        self.alpha_constraint = alpha_constraint
        if shared_axes is None:
            self.shared_axes = None
        else:
            self.shared_axes = [int(shared_axes)] if isinstance(shared_axes, int) else [int(a) for a in shared_axes]
        self.supports_masking = True

    def build(self, input_shape):
        shape = list(input_shape[1:])
        for a in self.shared_axes or ():
            shape[a - 1] = 1
        if None in shape:
            raise ValueError(f"PReLU layer '{self.name}' needs known non-batch dimensions (or shared_axes over the "
                             f"unknown ones); got input shape {tuple(input_shape)}")
        self.alpha = self.add_weight(shape=tuple(shape), name="alpha", initializer=self.alpha_initializer,
                                     regularizer=self.alpha_regularizer, constraint=self.alpha_constraint)
        axes = {i: d for i, d in enumerate(input_shape) if i and d is not None and i not in (self.shared_axes or ())}
        self.input_spec = InputSpec(ndim=len(input_shape), axes=axes)
        self.built = True

    def call(self, inputs):
        return tw.nn.relu(inputs) - self.alpha * tw.nn.relu(-inputs)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "alpha_initializer": initializers.serialize(self.alpha_initializer),
                "alpha_regularizer": regularizers.serialize(self.alpha_regularizer), "alpha_constraint": None,
                "shared_axes": self.shared_axes}


class ReLU(Layer):
    """``max_value`` above it, ``x`` from ``threshold`` up, ``negative_slope * (x - threshold)`` below."""

    def __init__(self, max_value=None, negative_slope=0.0, threshold=0.0, **kwargs):
        super().__init__(**kwargs)
        if max_value is not None and max_value < 0:
            raise ValueError(f"max_value of a ReLU layer cannot be negative, got {max_value}")
        if negative_slope is None or negative_slope < 0:
            raise ValueError(f"negative_slope of a ReLU layer cannot be None or negative, got {negative_slope}")
        if threshold is None or threshold < 0:
            raise ValueError(f"threshold of a ReLU layer cannot be None or negative, got {threshold}")
        self.max_value = None if max_value is None else float(max_value)
        self.negative_slope = float(negative_slope)
        self.threshold = float(threshold)
        self.supports_masking = True

    def call(self, inputs):
        return activations.relu(inputs, negative_slope=self.negative_slope, max_value=self.max_value,
                                threshold=self.threshold)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "max_value": self.max_value, "negative_slope": self.negative_slope,
                "threshold": self.threshold}


class ELU(Layer):
    def __init__(self, alpha=1.0, **kwargs):
        super().__init__(**kwargs)
        self.alpha = float(alpha)
        self.supports_masking = True

    def call(self, inputs):
        if self.alpha == 1.0:
            return tw.nn.elu(inputs)
        return tw.where(inputs > 0, inputs, self.alpha * tw.math.expm1(tw.minimum(inputs, 0.0)))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "alpha": self.alpha}


def _large_negative(dtype):
    return -3e4 if dtype in (tw.float16, tw.bfloat16) else -1e9


class Softmax(Layer):
    """Softmax over ``axis`` (an int or a tuple); masked positions get probability 0."""

    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        self.axis = axis if isinstance(axis, int) else tuple(axis)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        x = inputs
        if mask is not None:
            x = x + (1.0 - tw.cast(mask, x.dtype)) * _large_negative(x.dtype)
        if isinstance(self.axis, tuple):
            out = tw.exp(x - tw.reduce_logsumexp(x, axis=list(self.axis), keepdims=True))
        else:
            out = tw.nn.softmax(x, axis=self.axis)
        if mask is not None:
            out = out * tw.cast(mask, out.dtype)
        return out

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "axis": list(self.axis) if isinstance(self.axis, tuple) else self.axis}
