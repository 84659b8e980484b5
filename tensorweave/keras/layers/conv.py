"""Convolution layers: Conv1D/2D/3D, Conv1DTranspose/2DTranspose/3DTranspose, DepthwiseConv2D,
SeparableConv2D (Keras 3 names, arguments and defaults).

Kernels are laid out as TensorFlow's (``kernel_size + (in_channels // groups, filters)``; for a
transposed convolution ``kernel_size + (filters, in_channels)``), so weights move between this and
``tf.keras`` unchanged. ``data_format`` is ``"channels_last"`` (the default) or ``"channels_first"``.

>>> import numpy as np
>>> from tensorweave import keras
>>> from tensorweave.keras.layers.conv import Conv2D
>>> layer = Conv2D(4, 3, strides=2, padding="same")
>>> layer(np.zeros((2, 9, 9, 3), np.float32)).shape
TensorShape([2, 5, 5, 4])
>>> [w.shape.as_list() for w in layer.weights]
[[3, 3, 3, 4], [4]]
"""
import numpy as np

import tensorweave as tw
from tensorweave.keras import activations, initializers, regularizers
from tensorweave.keras.engine.layer import InputSpec, Layer

__all__ = ["Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose",
           "DepthwiseConv2D", "SeparableConv2D", "Convolution1D", "Convolution2D", "Convolution3D",
           "Convolution2DTranspose", "SeparableConvolution2D"]


# ---- argument normalization (shared with pooling.py) ------------------------------------------------
def normalize_tuple(value, n, name, allow_zero=False):
    """``value`` (an int or ``n`` ints) as a tuple of ``n`` ints, with Keras' error text."""
    if isinstance(value, (int, np.integer)):
        out = (int(value),) * n
    else:
        try:
            out = tuple(int(v) for v in value)
        except (TypeError, ValueError):
            raise ValueError(f"The `{name}` argument must be a tuple of {n} integers. Received {name}={value!r}") \
                from None
        if len(out) != n:
            raise ValueError(f"The `{name}` argument must be a tuple of {n} integers. Received {name}={value!r}, "
                             f"including {len(out)} elements")
    bad = [v for v in out if v < 0 or (v == 0 and not allow_zero)]
    if bad:
        need = "non-negative" if allow_zero else "positive"
        raise ValueError(f"The `{name}` argument must be a tuple of {n} {need} integers. Received {name}={value!r}")
    return out


def standardize_data_format(data_format):
    if data_format is None:
        from tensorweave.keras import backend
        # backend.image_data_format() where the backend has it (Keras' global setting)
        fn = getattr(backend, "image_data_format", None)
        return fn() if fn is not None else "channels_last"
    df = str(data_format).lower()
    if df not in ("channels_last", "channels_first"):
        raise ValueError(f"The `data_format` argument must be one of {{'channels_first', 'channels_last'}}. "
                         f"Received: data_format={data_format!r}")
    return df


def standardize_padding(padding, allow_causal=False):
    p = str(padding).lower()
    allowed = ("valid", "same", "causal") if allow_causal else ("valid", "same")
    if p not in allowed:
        raise ValueError(f"The `padding` argument must be a list/tuple or one of {allowed}. "
                         f"Received: padding={padding!r}")
    return p


def tw_data_format(rank, data_format):
    """tw.nn's name (``NHWC`` ...) of a Keras data format for ``rank`` spatial dimensions."""
    spatial = {1: "W", 2: "HW", 3: "DHW"}[rank]
    return f"N{spatial}C" if data_format == "channels_last" else f"NC{spatial}"


def conv_output_length(length, kernel, padding, stride, dilation=1):
    """Output length of a convolution or pooling window along one axis (None stays None)."""
    if length is None:
        return None
    eff = (kernel - 1) * dilation + 1
    if padding in ("same", "causal"):  # "causal" pads (kernel - 1) * dilation on the left
        return (length + stride - 1) // stride
    return (length - eff + stride) // stride  # "valid"


def deconv_output_length(length, kernel, padding, output_padding, stride, dilation=1):
    """Output length of a transposed convolution along one axis (Keras' rule)."""
    if length is None:
        return None
    eff = kernel + (kernel - 1) * (dilation - 1)
    if output_padding is None:
        if padding == "valid":
            return length * stride + max(eff - stride, 0)
        return length * stride  # "same"
    pad = eff // 2 if padding == "same" else 0
    return (length - 1) * stride + eff - 2 * pad + output_padding


def check_rank(layer, input_shape, ndim, layout):
    """Raises the input-spec error (naming the layer, expected and received shape) before ``build``
    would fail on a shape of the wrong rank."""
    if input_shape is not None and len(input_shape) != ndim:
        raise ValueError(f"Input 0 of layer \"{layer.name}\" is incompatible with the layer: expected ndim={ndim}, "
                         f"found ndim={len(input_shape)}. Full shape received: {tuple(input_shape)}. "
                         f"Hint: {type(layer).__name__} expects inputs shaped {layout}")


def spatial_layout(rank, data_format):
    """``(batch, rows, cols, channels)`` and the like, for error messages."""
    sp = ", ".join({1: ["steps"], 2: ["rows", "cols"], 3: ["dim1", "dim2", "dim3"]}[rank])
    return f"(batch, {sp}, channels)" if data_format == "channels_last" else f"(batch, channels, {sp})"


# ---- convolutions ---------------------------------------------------------------------------------------
class BaseConv(Layer):
    """Shared by Conv1D/2D/3D: arguments, weights, output shape and config."""
    _cast_numeric_inputs = True

    rank = None

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None, dilation_rate=1,
                 groups=1, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(**kwargs)
        r = self.rank
        if filters is not None and (isinstance(filters, bool) or not isinstance(filters, (int, np.integer))):
            raise ValueError(f"Invalid value for argument `filters`. Expected a strictly positive integer. "
                             f"Received filters={filters!r}.")
        self.filters = None if filters is None else int(filters)
        if self.filters is not None and self.filters <= 0:
            raise ValueError(f"Invalid value for argument `filters`. Expected a strictly positive value. "
                             f"Received filters={filters}.")
        self.groups = int(groups)
        if self.groups <= 0:
            raise ValueError(f"The number of groups must be a positive integer. Received: groups={groups}.")
        if self.filters is not None and self.filters % self.groups:
            raise ValueError(f"The number of filters must be evenly divisible by the number of groups. "
                             f"Received: groups={self.groups}, filters={self.filters}.")
        self.kernel_size = normalize_tuple(kernel_size, r, "kernel_size")
        self.strides = normalize_tuple(strides, r, "strides")
        self.dilation_rate = normalize_tuple(dilation_rate, r, "dilation_rate")
        self.padding = standardize_padding(padding, allow_causal=r == 1)
        self.data_format = standardize_data_format(data_format)
        if max(self.strides) > 1 and max(self.dilation_rate) > 1:
            raise ValueError(f"`strides > 1` not supported in conjunction with `dilation_rate > 1`. "
                             f"Received: strides={self.strides} and dilation_rate={self.dilation_rate}")
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.activity_regularizer = regularizers.get(activity_regularizer)
        self.kernel_constraint = kernel_constraint
        self.bias_constraint = bias_constraint
        self.input_spec = InputSpec(min_ndim=r + 2)

    @property
    def _channel_axis(self):
        return -1 if self.data_format == "channels_last" else 1

    def _input_channels(self, input_shape):
        check_rank(self, input_shape, self.rank + 2, spatial_layout(self.rank, self.data_format))
        c = input_shape[self._channel_axis]
        if c is None:
            raise ValueError(f"The channel dimension of the inputs to layer '{self.name}' ({type(self).__name__}) "
                             f"must be known; received input shape {tuple(input_shape)} "
                             f"(data_format={self.data_format})")
        return int(c)

    def _kernel_shape(self, in_channels):
        if in_channels % self.groups:
            raise ValueError(f"The number of input channels must be evenly divisible by the number of groups. "
                             f"Received groups={self.groups}, but the input has {in_channels} channels "
                             f"(full input shape is {self._built_shape}); layer '{self.name}'")
        return self.kernel_size + (in_channels // self.groups, self.filters)

    def build(self, input_shape):
        self._built_shape = tuple(input_shape)
        c = self._input_channels(input_shape)
        self.kernel = self.add_weight(name="kernel", shape=self._kernel_shape(c),
                                      initializer=self.kernel_initializer, regularizer=self.kernel_regularizer,
                                      constraint=self.kernel_constraint)
        self.bias = self.add_weight(name="bias", shape=(self.filters,), initializer=self.bias_initializer,
                                    regularizer=self.bias_regularizer, constraint=self.bias_constraint) \
            if self.use_bias else None
        self.input_spec = InputSpec(min_ndim=self.rank + 2, axes={self._channel_axis: c})
        self.built = True

    def _tw_padding(self):
        if self.padding == "causal":
            # left padding only: output step t sees inputs <= t (WaveNet); tw.nn takes explicit pairs
            return [((self.kernel_size[0] - 1) * self.dilation_rate[0], 0)]
        return self.padding.upper()

    def convolution_op(self, inputs, kernel):
        return tw.nn.convolution(inputs, kernel, strides=list(self.strides), padding=self._tw_padding(),
                                 data_format=tw_data_format(self.rank, self.data_format),
                                 dilations=list(self.dilation_rate))

    def _finish(self, y):
        if self.use_bias:
            y = tw.nn.bias_add(y, self.bias, data_format="NHWC" if self.data_format == "channels_last" else "NCHW")
        y = self.activation(y)
        if self.activity_regularizer is not None:
            self.add_loss(self.activity_regularizer(y))
        return y

    def call(self, inputs):
        return self._finish(self.convolution_op(inputs, self.kernel))

    def _spatial_out(self, spatial):
        return [conv_output_length(n, k, self.padding, s, d)
                for n, k, s, d in zip(spatial, self.kernel_size, self.strides, self.dilation_rate)]

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        if self.data_format == "channels_last":
            return (input_shape[0], *self._spatial_out(input_shape[1:-1]), self._out_channels(input_shape))
        return (input_shape[0], self._out_channels(input_shape), *self._spatial_out(input_shape[2:]))

    def _out_channels(self, input_shape):
        return self.filters

    def get_config(self):
        return {**super().get_config(), "filters": self.filters, "kernel_size": self.kernel_size,
                "strides": self.strides, "padding": self.padding, "data_format": self.data_format,
                "dilation_rate": self.dilation_rate, "groups": self.groups,
                "activation": activations.serialize(self.activation), "use_bias": self.use_bias,
                "kernel_initializer": initializers.serialize(self.kernel_initializer),
                "bias_initializer": initializers.serialize(self.bias_initializer),
                "kernel_regularizer": regularizers.serialize(self.kernel_regularizer),
                "bias_regularizer": regularizers.serialize(self.bias_regularizer),
                "activity_regularizer": regularizers.serialize(self.activity_regularizer),
                "kernel_constraint": _serialize_constraint(self.kernel_constraint),
                "bias_constraint": _serialize_constraint(self.bias_constraint)}


def _serialize_constraint(c):
    if c is None:
        return None
    if hasattr(c, "get_config"):
        return {"class_name": type(c).__name__, "config": c.get_config()}
    raise ValueError(f"Cannot serialize the constraint {c!r}")


class Conv1D(BaseConv):
    """1-D convolution over ``(batch, steps, channels)`` (or channels first); ``padding="causal"``
    pads on the left only, so output step t depends on inputs up to t.

    >>> import numpy as np
    >>> from tensorweave.keras.layers.conv import Conv1D
    >>> Conv1D(2, 3, padding="causal", dilation_rate=2)(np.ones((1, 10, 4), np.float32)).shape
    TensorShape([1, 10, 2])
    """

    rank = 1


class Conv2D(BaseConv):
    """2-D convolution over ``(batch, rows, cols, channels)`` (``data_format="channels_first"``:
    ``(batch, channels, rows, cols)``); ``groups`` > 1 makes a grouped convolution.

    >>> import numpy as np
    >>> from tensorweave.keras.layers.conv import Conv2D
    >>> Conv2D(6, (3, 3), groups=3, data_format="channels_first")(np.ones((1, 3, 5, 5), np.float32)).shape
    TensorShape([1, 6, 3, 3])
    """

    rank = 2


class Conv3D(BaseConv):
    """3-D convolution over ``(batch, dim1, dim2, dim3, channels)``."""

    rank = 3


# ---- transposed convolutions ------------------------------------------------------------------------
class BaseConvTranspose(BaseConv):
    """Transposed convolution: the gradient of a convolution with respect to its input, which
    maps each input position to a ``kernel_size`` window of the (larger) output."""

    def __init__(self, filters, kernel_size, strides=1, padding="valid", output_padding=None, data_format=None,
                 dilation_rate=1, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, **kwargs):
        if kwargs.get("groups", 1) != 1:
            raise ValueError(f"{type(self).__name__} does not support groups; received groups={kwargs['groups']}")
        kwargs.pop("groups", None)
        super().__init__(filters, kernel_size, strides=strides, padding=padding, data_format=data_format,
                         dilation_rate=dilation_rate, activation=activation, use_bias=use_bias,
                         kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
                         kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                         activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
                         bias_constraint=bias_constraint, **kwargs)
        if self.padding == "causal":
            raise ValueError(f"The `padding` argument must be one of ('valid', 'same'). Received: padding={padding!r}")
        self.output_padding = None if output_padding is None else normalize_tuple(
            output_padding, self.rank, "output_padding", allow_zero=True)
        if self.output_padding is not None:
            for op, s in zip(self.output_padding, self.strides):
                if op >= s:
                    raise ValueError(f"Strides {self.strides} must be greater than output padding "
                                     f"{self.output_padding}. Received strides={self.strides} and "
                                     f"output_padding={self.output_padding}")

    def _kernel_shape(self, in_channels):
        return self.kernel_size + (self.filters, in_channels)

    def _spatial_out(self, spatial):
        ops = self.output_padding or (None,) * self.rank
        return [deconv_output_length(n, k, self.padding, op, s, d)
                for n, k, op, s, d in zip(spatial, self.kernel_size, ops, self.strides, self.dilation_rate)]

    def call(self, inputs):
        shape = inputs.shape.as_list()
        first = 1 if self.data_format == "channels_last" else 2
        static = self._spatial_out(shape[first:first + self.rank])
        if None in shape[:1] + shape[first:first + self.rank]:
            # unknown sizes (a traced function or a fully-convolutional model): the output_shape
            # argument becomes a tensor computed from tw.shape
            dyn = tw.shape(inputs)
            batch = shape[0] if shape[0] is not None else dyn[0]
            sizes = [n if n is not None else dyn[first + i] for i, n in enumerate(shape[first:first + self.rank])]
            out_sp = [o if o is not None else d for o, d in zip(static, self._spatial_out(sizes))]
        else:
            batch, out_sp = shape[0], static
        full = [batch, *out_sp, self.filters] if self.data_format == "channels_last" \
            else [batch, self.filters, *out_sp]
        y = tw.nn.conv_transpose(inputs, self.kernel, full, strides=list(self.strides),
                                 padding=self.padding.upper(),
                                 data_format=tw_data_format(self.rank, self.data_format),
                                 dilations=list(self.dilation_rate))
        if hasattr(y, "set_shape"):
            # a stacked (partly dynamic) output_shape hides the static sizes from the shape rule;
            # restore them so that later layers can build
            y.set_shape(list(self.compute_output_shape(shape)))
        return self._finish(y)

    def get_config(self):
        config = super().get_config()
        config.pop("groups")
        config["output_padding"] = self.output_padding
        return config


class Conv1DTranspose(BaseConvTranspose):
    """Transposed 1-D convolution."""

    rank = 1


class Conv2DTranspose(BaseConvTranspose):
    """Transposed 2-D convolution ("deconvolution"): with ``strides=2`` it doubles rows and cols.

    >>> import numpy as np
    >>> from tensorweave.keras.layers.conv import Conv2DTranspose
    >>> Conv2DTranspose(3, 3, strides=2, padding="same")(np.ones((1, 4, 4, 2), np.float32)).shape
    TensorShape([1, 8, 8, 3])
    """

    rank = 2


class Conv3DTranspose(BaseConvTranspose):
    """Transposed 3-D convolution."""

    rank = 3


# ---- depthwise and separable ------------------------------------------------------------------------
class DepthwiseConv2D(BaseConv):
    """Convolves each input channel with its own ``depth_multiplier`` filters (no mixing across
    channels); output channel ``c * depth_multiplier + k`` comes from input channel ``c``.

    >>> import numpy as np
    >>> from tensorweave.keras.layers.conv import DepthwiseConv2D
    >>> layer = DepthwiseConv2D(3, depth_multiplier=2, padding="same")
    >>> layer(np.ones((1, 5, 5, 4), np.float32)).shape, layer.kernel.shape.as_list()
    (TensorShape([1, 5, 5, 8]), [3, 3, 4, 2])
    """

    rank = 2

    def __init__(self, kernel_size, strides=(1, 1), padding="valid", depth_multiplier=1, data_format=None,
                 dilation_rate=(1, 1), activation=None, use_bias=True, depthwise_initializer="glorot_uniform",
                 bias_initializer="zeros", depthwise_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, depthwise_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(None, kernel_size, strides=strides, padding=padding, data_format=data_format,
                         dilation_rate=dilation_rate, activation=activation, use_bias=use_bias,
                         kernel_initializer=depthwise_initializer, bias_initializer=bias_initializer,
                         kernel_regularizer=depthwise_regularizer, bias_regularizer=bias_regularizer,
                         activity_regularizer=activity_regularizer, kernel_constraint=depthwise_constraint,
                         bias_constraint=bias_constraint, **kwargs)
        self.depth_multiplier = int(depth_multiplier)
        if self.depth_multiplier <= 0:
            raise ValueError(f"Invalid value for argument `depth_multiplier`. Expected a strictly positive value. "
                             f"Received depth_multiplier={depth_multiplier}.")

    def build(self, input_shape):
        c = self._input_channels(input_shape)
        self.kernel = self.add_weight(name="kernel", shape=self.kernel_size + (c, self.depth_multiplier),
                                      initializer=self.kernel_initializer, regularizer=self.kernel_regularizer,
                                      constraint=self.kernel_constraint)
        self.bias = self.add_weight(name="bias", shape=(c * self.depth_multiplier,),
                                    initializer=self.bias_initializer, regularizer=self.bias_regularizer,
                                    constraint=self.bias_constraint) if self.use_bias else None
        self.input_spec = InputSpec(ndim=4, axes={self._channel_axis: c})
        self.built = True

    def call(self, inputs):
        y = tw.nn.depthwise_conv2d(inputs, self.kernel, strides=list(self.strides), padding=self.padding.upper(),
                                   data_format=tw_data_format(2, self.data_format),
                                   dilations=list(self.dilation_rate))
        return self._finish(y)

    def _out_channels(self, input_shape):
        return input_shape[self._channel_axis] * self.depth_multiplier

    def get_config(self):
        config = super().get_config()
        for k in ("filters", "groups"):
            config.pop(k)
        config["depth_multiplier"] = self.depth_multiplier
        config["depthwise_initializer"] = config.pop("kernel_initializer")
        config["depthwise_regularizer"] = config.pop("kernel_regularizer")
        config["depthwise_constraint"] = config.pop("kernel_constraint")
        return config


class SeparableConv2D(BaseConv):
    """A depthwise convolution (``depth_multiplier`` filters per input channel) followed by a
    1x1 convolution to ``filters`` channels: far fewer weights than a full Conv2D.

    >>> import numpy as np
    >>> from tensorweave.keras.layers.conv import SeparableConv2D
    >>> layer = SeparableConv2D(8, 3)
    >>> layer(np.ones((1, 6, 6, 4), np.float32)).shape, [w.shape.as_list() for w in layer.weights]
    (TensorShape([1, 4, 4, 8]), [[3, 3, 4, 1], [1, 1, 4, 8], [8]])
    """

    rank = 2

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), depth_multiplier=1, activation=None, use_bias=True,
                 depthwise_initializer="glorot_uniform", pointwise_initializer="glorot_uniform",
                 bias_initializer="zeros", depthwise_regularizer=None, pointwise_regularizer=None,
                 bias_regularizer=None, activity_regularizer=None, depthwise_constraint=None,
                 pointwise_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(filters, kernel_size, strides=strides, padding=padding, data_format=data_format,
                         dilation_rate=dilation_rate, activation=activation, use_bias=use_bias,
                         bias_initializer=bias_initializer, bias_regularizer=bias_regularizer,
                         activity_regularizer=activity_regularizer, bias_constraint=bias_constraint, **kwargs)
        self.depth_multiplier = int(depth_multiplier)
        if self.depth_multiplier <= 0:
            raise ValueError(f"Invalid value for argument `depth_multiplier`. Expected a strictly positive value. "
                             f"Received depth_multiplier={depth_multiplier}.")
        self.depthwise_initializer = initializers.get(depthwise_initializer)
        self.pointwise_initializer = initializers.get(pointwise_initializer)
        self.depthwise_regularizer = regularizers.get(depthwise_regularizer)
        self.pointwise_regularizer = regularizers.get(pointwise_regularizer)
        self.depthwise_constraint = depthwise_constraint
        self.pointwise_constraint = pointwise_constraint

    def build(self, input_shape):
        c = self._input_channels(input_shape)
        m = self.depth_multiplier
        self.depthwise_kernel = self.add_weight(name="depthwise_kernel", shape=self.kernel_size + (c, m),
                                                initializer=self.depthwise_initializer,
                                                regularizer=self.depthwise_regularizer,
                                                constraint=self.depthwise_constraint)
        self.pointwise_kernel = self.add_weight(name="pointwise_kernel", shape=(1, 1, c * m, self.filters),
                                                initializer=self.pointwise_initializer,
                                                regularizer=self.pointwise_regularizer,
                                                constraint=self.pointwise_constraint)
        self.bias = self.add_weight(name="bias", shape=(self.filters,), initializer=self.bias_initializer,
                                    regularizer=self.bias_regularizer, constraint=self.bias_constraint) \
            if self.use_bias else None
        self.input_spec = InputSpec(ndim=4, axes={self._channel_axis: c})
        self.built = True

    def call(self, inputs):
        y = tw.nn.separable_conv2d(inputs, self.depthwise_kernel, self.pointwise_kernel, strides=list(self.strides),
                                   padding=self.padding.upper(), data_format=tw_data_format(2, self.data_format),
                                   dilations=list(self.dilation_rate))
        return self._finish(y)

    def get_config(self):
        config = super().get_config()
        for k in ("groups", "kernel_initializer", "kernel_regularizer", "kernel_constraint"):
            config.pop(k)
        config.update({"depth_multiplier": self.depth_multiplier,
                       "depthwise_initializer": initializers.serialize(self.depthwise_initializer),
                       "pointwise_initializer": initializers.serialize(self.pointwise_initializer),
                       "depthwise_regularizer": regularizers.serialize(self.depthwise_regularizer),
                       "pointwise_regularizer": regularizers.serialize(self.pointwise_regularizer),
                       "depthwise_constraint": _serialize_constraint(self.depthwise_constraint),
                       "pointwise_constraint": _serialize_constraint(self.pointwise_constraint)})
        return config


# Keras' aliases
Convolution1D = Conv1D
Convolution2D = Conv2D
Convolution3D = Conv3D
Convolution2DTranspose = Conv2DTranspose
SeparableConvolution2D = SeparableConv2D
