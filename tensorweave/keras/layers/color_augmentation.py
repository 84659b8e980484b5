"""Keras 3's colour augmentation layers: ``Solarization``, ``RandomInvert``, ``RandomPosterization``,
``RandomColorDegeneration``, ``RandomSaturation``, ``RandomSharpness``, ``RandomHue``. Each draws one factor per image from its
``factor`` range while training and leaves its input alone (cast to the layer dtype) at
inference; images are ``[batch, height, width, channels]`` (or one image) in ``value_range``.
With a fixed factor (``factor=(f, f)``) the output equals Keras' (tests/keras_tests/test_color_augmentation.py).

>>> import numpy as np
>>> from tensorweave import keras
>>> img = np.array([[[[10.0, 200.0, 30.0]]]], "float32")
>>> keras.layers.RandomInvert(factor=(1.0, 1.0))(img, training=True).numpy().ravel().tolist()
[245.0, 55.0, 225.0]
"""
import tensorweave as tw
from tensorweave.keras.layers.image_preprocessing import _RandomLayer
from tensorweave.keras.ops import image as _image


def _factor(factor, bounds, layer):
    message = (f"{layer}: the `factor` argument should be a number (or a list of two numbers) in the range "
               f"[{bounds[0]}, {bounds[1]}]. Received: factor={factor}")
    if isinstance(factor, (tuple, list)):
        if len(factor) != 2 or factor[0] > bounds[1] or factor[1] < bounds[0]:
            raise ValueError(message)
        return tuple(sorted(float(f) for f in factor))
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not bounds[0] <= factor <= bounds[1]:
        raise ValueError(message)
    return max(-abs(float(factor)), bounds[0]), abs(float(factor))


def _rescale(x, source, target):
    if tuple(source) == tuple(target):
        return x
    return (x - source[0]) / (source[1] - source[0]) * (target[1] - target[0]) + target[0]


class _ColorLayer(_RandomLayer):
    _BOUNDS = (0.0, 1.0)

    def __init__(self, factor, value_range=(0, 255), seed=None, data_format=None, **kwargs):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        self._factor_arg = factor
        self.factor = _factor(factor, self._BOUNDS, type(self).__name__)
        if len(value_range) != 2 or value_range[0] >= value_range[1]:
            raise ValueError(f"{type(self).__name__}: value_range must be (low, high) with low < high, got "
                             f"{value_range}")
        self.value_range = (float(value_range[0]), float(value_range[1]))

    def _per_image(self, x):
        lo, hi = self.factor
        return tw.reshape(self._uniform(tw.shape(x)[0], lo, hi), [-1, 1, 1, 1])

    def get_config(self):
        f = self._factor_arg
        return {**super().get_config(), "factor": list(f) if isinstance(f, tuple) else f,
                "value_range": list(self.value_range)}


class RandomInvert(_ColorLayer):
    """``value_range[1] - x`` for each image with probability drawn from ``factor`` (1: always)."""

    def __init__(self, factor=1.0, value_range=(0, 255), seed=None, data_format=None, **kwargs):
        super().__init__(factor, value_range, seed, data_format, **kwargs)

    def _augment(self, x):
        probability = self._per_image(x)
        threshold = tw.reshape(self._uniform(tw.shape(x)[0], 0.0, 1.0), [-1, 1, 1, 1])
        return tw.where(tw.less(threshold, probability), self.value_range[1] - x, x)


class RandomColorDegeneration(_ColorLayer):
    """Blends each image towards its grey version: ``x + f (grey - x)``, ``f`` from ``factor``."""

    def _augment(self, x):
        grey = _image.rgb_to_grayscale(x, data_format=self.data_format)
        out = x + tw.cast(self._per_image(x), x.dtype) * (grey - x)
        return tw.clip_by_value(out, self.value_range[0], self.value_range[1])


class RandomSaturation(_ColorLayer):
    """Scales the HSV saturation by ``f / (1 - f)`` (``f`` from ``factor``: 0.5 keeps the image, 0
    makes it grey, 1 saturates it fully)."""

    def _augment(self, x):
        f = tw.reshape(self._uniform(tw.shape(x)[0], *self.factor), [-1, 1, 1])
        f = tw.cast(f / (1.0 - f + 1e-7), x.dtype)
        hsv = _image.rgb_to_hsv(x, data_format=self.data_format)
        axis = 1 if self.data_format == "channels_first" else 3
        h, s, v = tw.unstack(hsv, axis=axis)
        s = tw.clip_by_value(s * f, self.value_range[0], self.value_range[1])
        return _image.hsv_to_rgb(tw.stack([h, s, v], axis=axis), data_format=self.data_format)


class RandomPosterization(_ColorLayer):
    """Keeps the ``b`` highest bits of each 8-bit channel value, ``b`` an integer from ``factor``
    in [1, 8]."""
    _BOUNDS = (1, 8)

    def _augment(self, x):
        lo, hi = int(self.factor[0]), int(self.factor[1])
        n = tw.shape(x)[0]
        if lo != hi:
            bits = tw.random.uniform(tw.reshape(n, [1]), minval=lo, maxval=hi, dtype=tw.int32, seed=self.seed)
        else:
            bits = tw.fill(tw.reshape(n, [1]), lo)
        shift = tw.cast(tw.reshape(8 - bits, [-1, 1, 1, 1]), tw.uint8)
        pixels = tw.cast(_rescale(x, self.value_range, (0.0, 255.0)), tw.uint8)
        pixels = tw.bitwise.left_shift(tw.bitwise.right_shift(pixels, shift), shift)
        return _rescale(tw.cast(pixels, x.dtype), (0.0, 255.0), self.value_range)


class Solarization(_RandomLayer):
    """Adds ``addition`` (drawn from ``addition_factor``) to each image on a 0-255 scale, clips,
    and inverts the values at or above ``threshold`` (drawn from ``threshold_factor``). As in
    Keras, a factor ``(lo, hi)`` draws from ``[lo, hi * 255]``."""

    def __init__(self, addition_factor=0.0, threshold_factor=0.0, value_range=(0, 255), seed=None, **kwargs):
        super().__init__(seed=seed, **kwargs)
        self._args = (addition_factor, threshold_factor)
        self.addition_factor = _factor(addition_factor, (0.0, 1.0), "Solarization")
        self.threshold_factor = _factor(threshold_factor, (0.0, 1.0), "Solarization")
        self.value_range = (float(value_range[0]), float(value_range[1]))

    def _draw(self, x, factor):
        return tw.reshape(self._uniform(tw.shape(x)[0], factor[0], factor[1] * 255.0), [-1, 1, 1, 1])

    def _augment(self, x):
        additions, thresholds = self._draw(x, self.addition_factor), self._draw(x, self.threshold_factor)
        out = tw.clip_by_value(_rescale(x, self.value_range, (0.0, 255.0)) + additions, 0.0, 255.0)
        out = tw.where(tw.less(out, thresholds), out, 255.0 - out)
        return _rescale(out, (0.0, 255.0), self.value_range)

    def get_config(self):
        a, t = self._args
        return {**super().get_config(), "addition_factor": list(a) if isinstance(a, tuple) else a,
                "threshold_factor": list(t) if isinstance(t, tuple) else t, "value_range": list(self.value_range)}


class RandomSharpness(_ColorLayer):
    """Blends each image with a 3x3 smoothed copy: ``x + (1 - 2f)(smooth - x)``, ``f`` from
    ``factor`` (0.5 keeps the image; below blurs, above sharpens), clipped to ``value_range``."""

    def _augment(self, x):
        channels_first = self.data_format == "channels_first"
        if channels_first:
            x = tw.transpose(x, [0, 2, 3, 1])
        a, b = 1.0 / 13.0, 5.0 / 13.0
        kernel = tw.constant([[a, a, a], [a, b, a], [a, a, a]], dtype=x.dtype)
        kernel = tw.tile(tw.reshape(kernel, [3, 3, 1, 1]), [1, 1, x.shape[-1], 1])
        smooth = tw.nn.depthwise_conv2d(x, kernel, strides=[1, 1, 1, 1], padding="SAME")
        f = tw.cast(self._per_image(x) * 2.0, x.dtype)
        out = tw.clip_by_value(x + (1.0 - f) * (smooth - x), self.value_range[0], self.value_range[1])
        return tw.transpose(out, [0, 3, 1, 2]) if channels_first else out


class RandomHue(_ColorLayer):
    """Rotates each image's hue by ``±f / 2`` of the colour circle (``f`` from ``factor``, the
    sign drawn per image), through HSV, clipped back into ``value_range``."""

    def _augment(self, x):
        n = tw.shape(x)[0]
        sign = tw.where(tw.greater(self._uniform(n, 0.0, 1.0), 0.5), -tw.ones([n]), tw.ones([n]))
        shift = tw.cast(tw.reshape(sign * self._uniform(n, *self.factor) * 0.5, [-1, 1, 1]), x.dtype)
        hsv = _image.rgb_to_hsv(_rescale(x, self.value_range, (0.0, 1.0)), data_format=self.data_format)
        axis = 1 if self.data_format == "channels_first" else 3
        h, s, v = tw.unstack(hsv, axis=axis)
        h = h + shift
        h = tw.where(h > 1.0, h - 1.0, h)
        h = tw.where(h < 0.0, h + 1.0, h)
        rgb = _image.hsv_to_rgb(tw.stack([h, s, v], axis=axis), data_format=self.data_format)
        return _rescale(tw.clip_by_value(rgb, 0.0, 1.0), (0.0, 1.0), self.value_range)
