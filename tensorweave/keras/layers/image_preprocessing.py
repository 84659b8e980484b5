"""Image preprocessing and augmentation layers: Resizing, CenterCrop, RandomFlip, RandomRotation,
RandomZoom, RandomContrast, RandomTranslation. The random layers act only while training (as in
Keras 3); at inference they return their input (cast to the layer's dtype).

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.layers.Resizing(2, 3)(np.ones((1, 4, 6, 3), "float32")).shape
TensorShape([1, 2, 3, 3])
"""
import numpy as np

import tensorweave as tw
from tensorweave.keras.engine.layer import Layer
from tensorweave.keras.layers.reshaping import _data_format
from tensorweave.keras.ops import image as _image


class _ImageLayer(Layer):
    def __init__(self, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.data_format = _data_format(data_format)

    def _float(self, inputs):
        return tw.cast(inputs, self.compute_dtype)

    def _hw(self, x):
        dims = x.shape.as_list()
        r = len(dims)
        return (dims[r - 2], dims[r - 1]) if self.data_format == "channels_first" else (dims[r - 3], dims[r - 2])

    def get_config(self):
        return {**super().get_config(), "data_format": self.data_format}


class Resizing(_ImageLayer):
    def __init__(self, height, width, interpolation="bilinear", crop_to_aspect_ratio=False, pad_to_aspect_ratio=False,
                 fill_mode="constant", fill_value=0.0, antialias=False, data_format=None, **kwargs):
        super().__init__(data_format=data_format, **kwargs)
        self.height, self.width = int(height), int(width)
        self.interpolation = interpolation
        self.crop_to_aspect_ratio = bool(crop_to_aspect_ratio)
        self.pad_to_aspect_ratio = bool(pad_to_aspect_ratio)
        self.fill_mode = fill_mode
        self.fill_value = float(fill_value)
        self.antialias = bool(antialias)

    def call(self, inputs):
        return _image.resize(self._float(inputs), (self.height, self.width), interpolation=self.interpolation,
                             antialias=self.antialias, crop_to_aspect_ratio=self.crop_to_aspect_ratio,
                             pad_to_aspect_ratio=self.pad_to_aspect_ratio, fill_mode=self.fill_mode,
                             fill_value=self.fill_value, data_format=self.data_format)

    def get_config(self):
        return {**super().get_config(), "height": self.height, "width": self.width,
                "interpolation": self.interpolation, "crop_to_aspect_ratio": self.crop_to_aspect_ratio,
                "pad_to_aspect_ratio": self.pad_to_aspect_ratio, "fill_mode": self.fill_mode,
                "fill_value": self.fill_value, "antialias": self.antialias}


def _center_crop(layer, x):
    h, w = layer._hw(x)
    if h < layer.height or w < layer.width:
        return _image.resize(x, (layer.height, layer.width), crop_to_aspect_ratio=True, data_format=layer.data_format)
    top, left = (h - layer.height) // 2, (w - layer.width) // 2
    return _image.crop_images(x, top, left, target_height=layer.height, target_width=layer.width,
                              data_format=layer.data_format)


class CenterCrop(_ImageLayer):
    """The central ``height x width`` window; smaller images are first resized (keeping the target's
    aspect ratio by cropping), as Keras does."""

    def __init__(self, height, width, data_format=None, **kwargs):
        super().__init__(data_format=data_format, **kwargs)
        self.height, self.width = int(height), int(width)

    def call(self, inputs):
        return _center_crop(self, self._float(inputs))

    def get_config(self):
        return {**super().get_config(), "height": self.height, "width": self.width}


def _factor_range(factor, what, symmetric=True):
    if isinstance(factor, (tuple, list)):
        lo, hi = float(factor[0]), float(factor[1])
    else:
        lo, hi = (-float(factor), float(factor)) if symmetric else (float(factor), float(factor))
    if lo > hi:
        raise ValueError(f"{what}: the lower bound {lo} is larger than the upper bound {hi}")
    return lo, hi


class _RandomLayer(_ImageLayer):
    def __init__(self, seed=None, data_format=None, **kwargs):
        super().__init__(data_format=data_format, **kwargs)
        self.seed = seed

    def _uniform(self, n, lo, hi):
        return tw.random.uniform(tw.reshape(n, [1]), minval=lo, maxval=hi, dtype=tw.float32, seed=self.seed)

    def call(self, inputs, training=True):
        x = self._float(inputs)
        if not training:
            return x
        single = x.shape.rank == 3
        if single:
            x = tw.expand_dims(x, 0)
        out = self._augment(x)
        return tw.squeeze(out, 0) if single else out

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "seed": self.seed}


class RandomFlip(_RandomLayer):
    def __init__(self, mode="horizontal_and_vertical", seed=None, data_format=None, **kwargs):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        if mode not in ("horizontal", "vertical", "horizontal_and_vertical"):
            raise ValueError(f"RandomFlip: mode must be 'horizontal', 'vertical' or 'horizontal_and_vertical', got "
                             f"{mode!r}")
        self.mode = mode

    def _augment(self, x):
        n = tw.shape(x)[0]
        cf = self.data_format == "channels_first"
        h_axis, w_axis = (2, 3) if cf else (1, 2)
        for axis, on in ((w_axis, "horizontal" in self.mode), (h_axis, "vertical" in self.mode)):
            if on:
                flip = tw.reshape(tw.less(self._uniform(n, 0.0, 1.0), 0.5), [-1, 1, 1, 1])
                x = tw.where(flip, tw.reverse(x, [axis]), x)
        return x

    def get_config(self):
        return {**super().get_config(), "mode": self.mode}


class _AffineLayer(_RandomLayer):
    def __init__(self, fill_mode="reflect", interpolation="bilinear", seed=None, fill_value=0.0, data_format=None,
                 **kwargs):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        self.fill_mode = fill_mode
        self.interpolation = interpolation
        self.fill_value = float(fill_value)

    def _augment(self, x):
        h, w = self._hw(x)
        t = self._transform(tw.shape(x)[0], float(h), float(w))
        return _image.affine_transform(x, t, interpolation=self.interpolation, fill_mode=self.fill_mode,
                                       fill_value=self.fill_value, data_format=self.data_format)

    def get_config(self):
        return {**super().get_config(), "fill_mode": self.fill_mode, "fill_value": self.fill_value,
                "interpolation": self.interpolation}


class RandomRotation(_AffineLayer):
    """Rotates by a random angle in ``[lower, upper] * 2 pi`` about the image centre."""

    def __init__(self, factor, fill_mode="reflect", interpolation="bilinear", seed=None, fill_value=0.0,
                 data_format=None, **kwargs):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.factor = factor
        self._lo, self._hi = _factor_range(factor, "RandomRotation")

    def _transform(self, n, h, w):
        angle = self._uniform(n, self._lo * 2 * np.pi, self._hi * 2 * np.pi)
        c, s = tw.cos(angle), tw.sin(angle)
        x_off = ((w - 1) - (c * (w - 1) - s * (h - 1))) / 2.0
        y_off = ((h - 1) - (s * (w - 1) + c * (h - 1))) / 2.0
        z = tw.zeros_like(c)
        return tw.stack([c, -s, x_off, s, c, y_off, z, z], axis=1)

    def get_config(self):
        return {**super().get_config(), "factor": list(self.factor) if isinstance(self.factor, tuple) else self.factor}


class RandomZoom(_AffineLayer):
    """Zooms by ``1 + f`` per axis, ``f`` uniform in the factor range (negative: zoom in); without
    ``width_factor`` both axes share one zoom (the aspect ratio is kept)."""

    def __init__(self, height_factor, width_factor=None, fill_mode="reflect", interpolation="bilinear", seed=None,
                 fill_value=0.0, data_format=None, **kwargs):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.height_factor = height_factor
        self.width_factor = width_factor
        self._h = _factor_range(height_factor, "RandomZoom")
        self._w = None if width_factor is None else _factor_range(width_factor, "RandomZoom")
        for lo in (self._h[0], (self._w or (0, 0))[0]):
            if lo < -1:
                raise ValueError(f"RandomZoom: factors must be >= -1, got {height_factor}, {width_factor}")

    def _transform(self, n, h, w):
        zy = 1.0 + self._uniform(n, *self._h)
        zx = zy if self._w is None else 1.0 + self._uniform(n, *self._w)
        x_off = ((w - 1.0) / 2.0) * (1.0 - zx)
        y_off = ((h - 1.0) / 2.0) * (1.0 - zy)
        z = tw.zeros_like(zx)
        return tw.stack([zx, z, x_off, z, zy, y_off, z, z], axis=1)

    def get_config(self):
        def js(v):
            return list(v) if isinstance(v, tuple) else v
        return {**super().get_config(), "height_factor": js(self.height_factor), "width_factor": js(self.width_factor)}


class RandomTranslation(_AffineLayer):
    """Shifts by a random fraction of the height and width."""

    def __init__(self, height_factor, width_factor, fill_mode="reflect", interpolation="bilinear", seed=None,
                 fill_value=0.0, data_format=None, **kwargs):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.height_factor, self.width_factor = height_factor, width_factor
        self._h = _factor_range(height_factor, "RandomTranslation")
        self._w = _factor_range(width_factor, "RandomTranslation")

    def _transform(self, n, h, w):
        dy = self._uniform(n, *self._h) * h
        dx = self._uniform(n, *self._w) * w
        one, z = tw.ones_like(dx), tw.zeros_like(dx)
        return tw.stack([one, z, -dx, z, one, -dy, z, z], axis=1)

    def get_config(self):
        def js(v):
            return list(v) if isinstance(v, tuple) else v
        return {**super().get_config(), "height_factor": js(self.height_factor), "width_factor": js(self.width_factor)}


class RandomContrast(_RandomLayer):
    """``(x - mean) * f + mean`` per image and channel with ``f`` uniform in ``[1 - lower, 1 + upper]``,
    clipped to ``value_range``."""

    def __init__(self, factor, value_range=(0, 255), seed=None, data_format=None, **kwargs):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        self.factor = factor
        lo, hi = (float(factor[0]), float(factor[1])) if isinstance(factor, (tuple, list)) else (float(factor),
                                                                                                  float(factor))
        if lo < 0 or hi < 0 or lo > 1:
            raise ValueError(f"RandomContrast: factor must be non-negative (and the lower one <= 1), got {factor}")
        self._range = (1.0 - lo, 1.0 + hi)
        self.value_range = tuple(value_range)

    def _augment(self, x):
        f = tw.reshape(self._uniform(tw.shape(x)[0], *self._range), [-1, 1, 1, 1])
        axes = [2, 3] if self.data_format == "channels_first" else [1, 2]
        mean = tw.reduce_mean(x, axis=axes, keepdims=True)
        out = (x - mean) * tw.cast(f, x.dtype) + mean
        return tw.clip_by_value(out, float(self.value_range[0]), float(self.value_range[1]))

    def get_config(self):
        return {**super().get_config(), "factor": list(self.factor) if isinstance(self.factor, tuple) else self.factor,
                "value_range": list(self.value_range)}


class RandomCrop(_RandomLayer):
    """A random ``height x width`` window while training; the central one (resized up if needed) at
    inference."""

    def __init__(self, height, width, seed=None, data_format=None, **kwargs):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        self.height, self.width = int(height), int(width)

    def call(self, inputs, training=True):
        x = self._float(inputs)
        h, w = self._hw(x)
        if not training or h < self.height or w < self.width:
            return _center_crop(self, x)
        single = x.shape.rank == 3
        if single:
            x = tw.expand_dims(x, 0)
        cf = self.data_format == "channels_first"
        top = tw.cast(self._uniform(tw.constant(1), 0.0, float(h - self.height + 1)), tw.int32)[0]
        left = tw.cast(self._uniform(tw.constant(1), 0.0, float(w - self.width + 1)), tw.int32)[0]
        begin = tw.stack([0, 0, top, left]) if cf else tw.stack([0, top, left, 0])
        c = x.shape.as_list()[1 if cf else 3]
        c = -1 if c is None else c
        size = [-1, c, self.height, self.width] if cf else [-1, self.height, self.width, c]
        out = tw.slice(x, begin, size)
        return tw.squeeze(out, 0) if single else out

    def compute_output_shape(self, input_shape):
        s = list(input_shape)
        r = len(s)
        hi, wi = (r - 2, r - 1) if self.data_format == "channels_first" else (r - 3, r - 2)
        s[hi], s[wi] = self.height, self.width
        return tuple(s)

    def get_config(self):
        return {**super().get_config(), "height": self.height, "width": self.width}


class RandomBrightness(_RandomLayer):
    """Adds ``delta * (max - min)`` of ``value_range`` per image, ``delta`` uniform in the factor range,
    clipped to ``value_range``."""

    def __init__(self, factor, value_range=(0, 255), seed=None, **kwargs):
        super().__init__(seed=seed, **kwargs)
        self.factor = factor
        self._lo, self._hi = _factor_range(factor, "RandomBrightness")
        if self._lo < -1 or self._hi > 1:
            raise ValueError(f"RandomBrightness: factor must be within [-1, 1], got {factor}")
        self.value_range = tuple(value_range)

    def _augment(self, x):
        lo, hi = float(self.value_range[0]), float(self.value_range[1])
        delta = tw.reshape(self._uniform(tw.shape(x)[0], self._lo, self._hi), [-1, 1, 1, 1]) * (hi - lo)
        return tw.clip_by_value(x + tw.cast(delta, x.dtype), lo, hi)

    def get_config(self):
        return {**super().get_config(), "factor": list(self.factor) if isinstance(self.factor, tuple) else self.factor,
                "value_range": list(self.value_range)}


class RandomShear(_AffineLayer):
    """Shears along x and/or y by a factor drawn from ``x_factor``/``y_factor`` (a float f: [-f, f])."""

    def __init__(self, x_factor=0.0, y_factor=0.0, interpolation="bilinear", fill_mode="reflect", fill_value=0.0,
                 data_format=None, seed=None, **kwargs):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.x_factor, self.y_factor = x_factor, y_factor
        self._x = _factor_range(x_factor, "RandomShear")
        self._y = _factor_range(y_factor, "RandomShear")

    def _transform(self, n, h, w):
        sx = self._uniform(n, *self._x)
        sy = self._uniform(n, *self._y)
        one, z = tw.ones_like(sx), tw.zeros_like(sx)
        return tw.stack([one, -sx, z, -sy, one, z, z, z], axis=1)

    def get_config(self):
        def js(v):
            return list(v) if isinstance(v, tuple) else v
        return {**super().get_config(), "x_factor": js(self.x_factor), "y_factor": js(self.y_factor)}


class RandomGrayscale(_RandomLayer):
    """Turns each image grey (kept as 3 channels) with probability ``factor``."""

    def __init__(self, factor=0.5, data_format=None, seed=None, **kwargs):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        if not 0 <= factor <= 1:
            raise ValueError(f"RandomGrayscale: factor must be in [0, 1], got {factor}")
        self.factor = float(factor)

    def _augment(self, x):
        gray = _image.rgb_to_grayscale(x, data_format=self.data_format)
        axis = 1 if self.data_format == "channels_first" else 3
        gray = tw.concat([gray] * 3, axis)
        pick = tw.reshape(tw.less(self._uniform(tw.shape(x)[0], 0.0, 1.0), self.factor), [-1, 1, 1, 1])
        return tw.where(pick, gray, x)

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


class AutoContrast(_ImageLayer):
    """Stretches each image channel's values to fill ``value_range`` (not random: also at inference)."""

    def __init__(self, value_range=(0, 255), **kwargs):
        super().__init__(**kwargs)
        self.value_range = tuple(value_range)

    def call(self, inputs):
        x = self._float(inputs)
        axes = [x.shape.rank - 2, x.shape.rank - 1] if self.data_format == "channels_first" else \
            [x.shape.rank - 3, x.shape.rank - 2]
        lo = tw.reduce_min(x, axis=axes, keepdims=True)
        hi = tw.reduce_max(x, axis=axes, keepdims=True)
        span = hi - lo
        scale = tw.where(tw.greater(span, 0.0), (self.value_range[1] - self.value_range[0]) /
                         tw.where(tw.greater(span, 0.0), span, tw.ones_like(span)), tw.ones_like(span))
        out = (x - lo) * scale + self.value_range[0]
        return tw.where(tw.greater(span, 0.0), out, x)   # a constant channel stays as it is

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "value_range": list(self.value_range)}
