"""Reshaping layers: UpSampling1D/2D/3D, ZeroPadding1D/2D/3D, Cropping1D/2D/3D, RepeatVector.

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.layers.ZeroPadding2D(1)(np.ones((1, 2, 2, 1), "float32")).shape
TensorShape([1, 4, 4, 1])
"""
import tensorweave as tw
from tensorweave.keras.engine.layer import InputSpec, Layer


def _data_format(value):
    from tensorweave.keras.ops.nn import _channels_first
    return "channels_first" if _channels_first(value) else "channels_last"


def _tuple(value, n, what, layer):
    if isinstance(value, int):
        return (value,) * n
    value = tuple(int(v) for v in value)
    if len(value) != n:
        raise ValueError(f"{layer}: `{what}` must be an int or a tuple of {n} ints, got {value}")
    return value


def _pairs(value, n, what, layer):
    """``((before, after),) * n`` from an int, n ints, or n pairs (1-D layers: an int or one pair)."""
    if isinstance(value, int):
        return ((value, value),) * n
    value = tuple(value)
    if n == 1 and len(value) == 2 and all(isinstance(v, int) for v in value):
        return (value,)
    if len(value) != n:
        raise ValueError(f"{layer}: `{what}` must be an int, a tuple of {n} ints or of {n} pairs, got {value}")
    out = []
    for v in value:
        if isinstance(v, int):
            out.append((v, v))
        else:
            v = tuple(int(a) for a in v)
            if len(v) != 2:
                raise ValueError(f"{layer}: each entry of `{what}` must be an int or a pair, got {value}")
            out.append(v)
    return tuple(out)


def _spatial_axes(nd, data_format):
    return list(range(2, 2 + nd)) if data_format == "channels_first" else list(range(1, 1 + nd))


class _UpSampling(Layer):
    nd = None

    def __init__(self, size=2, data_format=None, interpolation="nearest", **kwargs):
        super().__init__(**kwargs)
        name = type(self).__name__
        self.size = _tuple(size, self.nd, "size", name)
        self.data_format = _data_format(data_format) if self.nd > 1 else "channels_last"
        if interpolation not in ("nearest", "bilinear"):
            raise ValueError(f"{name}: interpolation must be 'nearest' or 'bilinear', got {interpolation!r}")
        self.interpolation = interpolation
        self.input_spec = InputSpec(ndim=self.nd + 2)

    def call(self, inputs):
        axes = _spatial_axes(self.nd, self.data_format)
        if self.interpolation == "bilinear":
            from tensorweave.keras.ops import image
            dims = [inputs.shape.as_list()[a] for a in axes]
            return image.resize(inputs, [d * s for d, s in zip(dims, self.size)], interpolation="bilinear",
                                data_format=self.data_format)
        x = inputs
        for a, s in zip(axes, self.size):
            if s != 1:
                x = tw.repeat(x, s, axis=a)
        return x

    def get_config(self):
        config = {**super().get_config(), "size": self.size[0] if self.nd == 1 else list(self.size)}
        if self.nd > 1:
            config["data_format"] = self.data_format
        if self.nd == 2:
            config["interpolation"] = self.interpolation
        return config


class UpSampling1D(_UpSampling):
    """Repeats each step ``size`` times along the time axis."""
    nd = 1

    def __init__(self, size=2, **kwargs):
        super().__init__(size=size, **kwargs)


class UpSampling2D(_UpSampling):
    """Repeats rows and columns (``interpolation="nearest"``) or resizes bilinearly."""
    nd = 2


class UpSampling3D(_UpSampling):
    nd = 3

    def __init__(self, size=(2, 2, 2), data_format=None, **kwargs):
        super().__init__(size=size, data_format=data_format, **kwargs)


class _ZeroPadding(Layer):
    nd = None

    def __init__(self, padding=1, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.padding = _pairs(padding, self.nd, "padding", type(self).__name__)
        self.data_format = _data_format(data_format) if self.nd > 1 else "channels_last"
        self.input_spec = InputSpec(ndim=self.nd + 2)

    def call(self, inputs):
        pads = [[0, 0]] * (self.nd + 2)
        for a, p in zip(_spatial_axes(self.nd, self.data_format), self.padding):
            pads[a] = list(p)
        return tw.pad(inputs, pads)

    def get_config(self):
        config = {**super().get_config(), "padding": list(self.padding[0]) if self.nd == 1 else
                  [list(p) for p in self.padding]}
        if self.nd > 1:
            config["data_format"] = self.data_format
        return config


class ZeroPadding1D(_ZeroPadding):
    nd = 1

    def __init__(self, padding=1, **kwargs):
        super().__init__(padding=padding, **kwargs)


class ZeroPadding2D(_ZeroPadding):
    nd = 2


class ZeroPadding3D(_ZeroPadding):
    nd = 3


class _Cropping(Layer):
    nd = None

    def __init__(self, cropping, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.cropping = _pairs(cropping, self.nd, "cropping", type(self).__name__)
        self.data_format = _data_format(data_format) if self.nd > 1 else "channels_last"
        self.input_spec = InputSpec(ndim=self.nd + 2)

    def call(self, inputs):
        dims = inputs.shape.as_list()
        key = [slice(None)] * (self.nd + 2)
        for a, (lo, hi) in zip(_spatial_axes(self.nd, self.data_format), self.cropping):
            if dims[a] is not None and lo + hi >= dims[a]:
                raise ValueError(f"{type(self).__name__} layer '{self.name}': cropping {self.cropping} leaves nothing "
                                 f"of an input of shape {tuple(dims)}")
            key[a] = slice(lo, -hi if hi else None)
        return inputs[tuple(key)]

    def get_config(self):
        config = {**super().get_config(), "cropping": list(self.cropping[0]) if self.nd == 1 else
                  [list(c) for c in self.cropping]}
        if self.nd > 1:
            config["data_format"] = self.data_format
        return config


class Cropping1D(_Cropping):
    nd = 1

    def __init__(self, cropping=(1, 1), **kwargs):
        super().__init__(cropping=cropping, **kwargs)


class Cropping2D(_Cropping):
    nd = 2

    def __init__(self, cropping=((0, 0), (0, 0)), data_format=None, **kwargs):
        super().__init__(cropping=cropping, data_format=data_format, **kwargs)


class Cropping3D(_Cropping):
    nd = 3

    def __init__(self, cropping=((1, 1), (1, 1), (1, 1)), data_format=None, **kwargs):
        super().__init__(cropping=cropping, data_format=data_format, **kwargs)


class RepeatVector(Layer):
    """``(batch, features)`` -> ``(batch, n, features)``."""

    def __init__(self, n, **kwargs):
        super().__init__(**kwargs)
        self.n = int(n)
        self.input_spec = InputSpec(ndim=2)

    def call(self, inputs):
        return tw.repeat(tw.expand_dims(inputs, 1), self.n, axis=1)

    def get_config(self):
        return {**super().get_config(), "n": self.n}
