"""Noise and dropout layers active only while training: GaussianNoise, GaussianDropout,
AlphaDropout, SpatialDropout1D/2D/3D. At inference they return their input.

>>> import numpy as np
>>> from tensorweave import keras
>>> x = np.ones((2, 3), "float32")
>>> (keras.layers.GaussianNoise(0.1)(x, training=False).numpy() == x).all()
np.True_
"""
import numpy as np

import tensorweave as tw
from tensorweave.keras.engine.layer import InputSpec, Layer


def _check_rate(rate, layer, upper_inclusive=False):
    ok = 0 <= rate <= 1 if upper_inclusive else 0 <= rate < 1
    if not ok:
        raise ValueError(f"Invalid value received for argument `rate` of {layer}. Expected a float value between "
                         f"0 and 1. Received: rate={rate}")
    return float(rate)


class GaussianNoise(Layer):
    """Adds zero-mean Gaussian noise of ``stddev`` while training."""

    def __init__(self, stddev, seed=None, **kwargs):
        super().__init__(**kwargs)
        if stddev < 0:
            raise ValueError(f"GaussianNoise: stddev must be non-negative, got {stddev}")
        self.stddev = float(stddev)
        self.seed = seed
        self.supports_masking = True

    def call(self, inputs, training=False):
        if training and self.stddev > 0:
            return inputs + tw.random.normal(tw.shape(inputs), stddev=self.stddev, dtype=inputs.dtype, seed=self.seed)
        return inputs

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "stddev": self.stddev, "seed": self.seed}


class GaussianDropout(Layer):
    """Multiplies by Gaussian noise of mean 1 and variance ``rate / (1 - rate)`` while training."""

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = _check_rate(rate, "GaussianDropout", upper_inclusive=False)
        self.seed = seed
        self.supports_masking = True

    def call(self, inputs, training=False):
        if training and self.rate > 0:
            std = float(np.sqrt(self.rate / (1.0 - self.rate)))
            return inputs * tw.random.normal(tw.shape(inputs), mean=1.0, stddev=std, dtype=inputs.dtype,
                                             seed=self.seed)
        return inputs

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}


_SELU_ALPHA = 1.6732632423543772
_SELU_SCALE = 1.0507009873554805


class AlphaDropout(Layer):
    """Dropout that keeps SELU's self-normalising mean and variance: dropped units take SELU's
    negative saturation value, then an affine map restores mean 0 and variance 1."""

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = _check_rate(rate, "AlphaDropout", upper_inclusive=True)
        self.noise_shape = None if noise_shape is None else tuple(noise_shape)
        self.seed = seed
        self.supports_masking = True

    def call(self, inputs, training=False):
        if not training or self.rate <= 0:
            return inputs
        alpha_p = -_SELU_ALPHA * _SELU_SCALE
        shape = tw.shape(inputs) if self.noise_shape is None else [
            d if d is not None else tw.shape(inputs)[i] for i, d in enumerate(self.noise_shape)]
        if isinstance(shape, list):
            shape = tw.stack([tw.cast(d, tw.int32) for d in shape])
        kept = tw.greater_equal(tw.random.uniform(shape, dtype=inputs.dtype, seed=self.seed), self.rate)
        kept = tw.cast(kept, inputs.dtype)
        a = ((1 - self.rate) * (1 + self.rate * alpha_p ** 2)) ** -0.5
        b = -a * alpha_p * self.rate
        x = inputs * kept + alpha_p * (1 - kept)
        return a * x + b

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "noise_shape": None if self.noise_shape is None else
                list(self.noise_shape), "seed": self.seed}


class _SpatialDropout(Layer):
    """Drops whole feature maps (one decision per sample and channel)."""
    nd = None

    def __init__(self, rate, data_format=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = _check_rate(rate, type(self).__name__)
        from tensorweave.keras.layers.reshaping import _data_format
        self.data_format = _data_format(data_format) if self.nd > 1 else "channels_last"
        self.seed = seed
        self.input_spec = InputSpec(ndim=self.nd + 2)
        self.supports_masking = True

    def call(self, inputs, training=False):
        if not training or self.rate <= 0:
            return inputs
        s = tw.shape(inputs)
        ones = [tw.constant(1)] * self.nd
        dims = [s[0], s[1]] + ones if self.data_format == "channels_first" else [s[0]] + ones + [s[self.nd + 1]]
        return tw.nn.dropout(inputs, self.rate, noise_shape=tw.stack(dims), seed=self.seed)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = {**super().get_config(), "rate": self.rate, "seed": self.seed}
        if self.nd > 1:
            config["data_format"] = self.data_format
        return config


class SpatialDropout1D(_SpatialDropout):
    nd = 1

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(rate, seed=seed, **kwargs)


class SpatialDropout2D(_SpatialDropout):
    nd = 2


class SpatialDropout3D(_SpatialDropout):
    nd = 3


class ActivityRegularization(Layer):
    """Adds ``l1 * sum(|x|) + l2 * sum(x^2)`` of its input to the model's losses; returns the input."""

    def __init__(self, l1=0.0, l2=0.0, **kwargs):
        super().__init__(**kwargs)
        self.l1, self.l2 = float(l1), float(l2)
        self.supports_masking = True

    def call(self, inputs):
        loss = 0.0
        if self.l1:
            loss = loss + self.l1 * tw.reduce_sum(tw.abs(inputs))
        if self.l2:
            loss = loss + self.l2 * tw.reduce_sum(tw.square(inputs))
        if self.l1 or self.l2:
            self.add_loss(loss)
        return inputs

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "l1": self.l1, "l2": self.l2}
