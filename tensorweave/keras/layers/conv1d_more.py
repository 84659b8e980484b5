"""DepthwiseConv1D and SeparableConv1D (Keras 3's arguments and weight shapes).

>>> import numpy as np
>>> from tensorweave import keras
>>> layer = keras.layers.SeparableConv1D(4, 3)
>>> layer(np.ones((1, 5, 2), "float32")).shape, [w.shape.as_list() for w in layer.weights]
(TensorShape([1, 3, 4]), [[3, 2, 1], [1, 2, 4], [4]])
"""
import tensorweave as tw
from tensorweave.keras import activations, initializers, regularizers
from tensorweave.keras.engine.layer import InputSpec, Layer
from tensorweave.keras.layers.reshaping import _data_format
from tensorweave.keras.ops import nn as _nn


class _Conv1DBase(Layer):
    def __init__(self, kernel_size, strides, padding, data_format, dilation_rate, depth_multiplier, activation,
                 use_bias, bias_initializer, bias_regularizer, activity_regularizer, bias_constraint, **kwargs):
        super().__init__(**kwargs)
        self.kernel_size = int(kernel_size if isinstance(kernel_size, int) else kernel_size[0])
        self.strides = int(strides if isinstance(strides, int) else strides[0])
        self.padding = str(padding).lower()
        if self.padding not in ("valid", "same"):
            raise ValueError(f"{type(self).__name__}: padding must be 'valid' or 'same', got {padding!r}")
        self.data_format = _data_format(data_format)
        self.dilation_rate = int(dilation_rate if isinstance(dilation_rate, int) else dilation_rate[0])
        self.depth_multiplier = int(depth_multiplier)
        self.activation = activations.get(activation)
        self.use_bias = use_bias
        self.bias_initializer = initializers.get(bias_initializer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.activity_regularizer = regularizers.get(activity_regularizer)
        self.bias_constraint = bias_constraint
        self.input_spec = InputSpec(ndim=3)

    def _channels(self, input_shape):
        c = input_shape[1 if self.data_format == "channels_first" else -1]
        if c is None:
            raise ValueError(f"{type(self).__name__} layer '{self.name}' needs a known channel dimension; got input "
                             f"shape {tuple(input_shape)}")
        return c

    def _finish(self, y):
        if self.use_bias:
            y = tw.nn.bias_add(y, self.bias, data_format="NCW" if self.data_format == "channels_first" else None)
        y = self.activation(y)
        if self.activity_regularizer is not None:
            self.add_loss(self.activity_regularizer(y))
        return y

    def get_config(self):
        return {**super().get_config(), "kernel_size": [self.kernel_size], "strides": [self.strides],
                "padding": self.padding, "data_format": self.data_format, "dilation_rate": [self.dilation_rate],
                "depth_multiplier": self.depth_multiplier, "activation": activations.serialize(self.activation),
                "use_bias": self.use_bias, "bias_initializer": initializers.serialize(self.bias_initializer),
                "bias_regularizer": regularizers.serialize(self.bias_regularizer),
                "activity_regularizer": regularizers.serialize(self.activity_regularizer)}


class DepthwiseConv1D(_Conv1DBase):
    def __init__(self, kernel_size, strides=1, padding="valid", depth_multiplier=1, data_format=None, dilation_rate=1,
                 activation=None, use_bias=True, depthwise_initializer="glorot_uniform", bias_initializer="zeros",
                 depthwise_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 depthwise_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(kernel_size, strides, padding, data_format, dilation_rate, depth_multiplier, activation,
                         use_bias, bias_initializer, bias_regularizer, activity_regularizer, bias_constraint, **kwargs)
        self.depthwise_initializer = initializers.get(depthwise_initializer)
        self.depthwise_regularizer = regularizers.get(depthwise_regularizer)
        self.depthwise_constraint = depthwise_constraint

    def build(self, input_shape):
        c = self._channels(input_shape)
        self.kernel = self.add_weight(shape=(self.kernel_size, c, self.depth_multiplier), name="kernel",
                                      initializer=self.depthwise_initializer,
                                      regularizer=self.depthwise_regularizer, constraint=self.depthwise_constraint)
        self.bias = self.add_weight(shape=(c * self.depth_multiplier,), name="bias",
                                    initializer=self.bias_initializer, regularizer=self.bias_regularizer,
                                    constraint=self.bias_constraint) if self.use_bias else None
        self.built = True

    def call(self, inputs):
        y = _nn.depthwise_conv(inputs, self.kernel, self.strides, self.padding, self.data_format, self.dilation_rate)
        return self._finish(y)

    def get_config(self):
        return {**super().get_config(), "depthwise_initializer": initializers.serialize(self.depthwise_initializer),
                "depthwise_regularizer": regularizers.serialize(self.depthwise_regularizer)}


class SeparableConv1D(_Conv1DBase):
    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None, dilation_rate=1,
                 depth_multiplier=1, activation=None, use_bias=True, depthwise_initializer="glorot_uniform",
                 pointwise_initializer="glorot_uniform", bias_initializer="zeros", depthwise_regularizer=None,
                 pointwise_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 depthwise_constraint=None, pointwise_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(kernel_size, strides, padding, data_format, dilation_rate, depth_multiplier, activation,
                         use_bias, bias_initializer, bias_regularizer, activity_regularizer, bias_constraint, **kwargs)
        self.filters = int(filters)
        self.depthwise_initializer = initializers.get(depthwise_initializer)
        self.pointwise_initializer = initializers.get(pointwise_initializer)
        self.depthwise_regularizer = regularizers.get(depthwise_regularizer)
        self.pointwise_regularizer = regularizers.get(pointwise_regularizer)
        self.depthwise_constraint, self.pointwise_constraint = depthwise_constraint, pointwise_constraint

    def build(self, input_shape):
        c = self._channels(input_shape)
        self.depthwise_kernel = self.add_weight(shape=(self.kernel_size, c, self.depth_multiplier),
                                                name="depthwise_kernel", initializer=self.depthwise_initializer,
                                                regularizer=self.depthwise_regularizer,
                                                constraint=self.depthwise_constraint)
        self.pointwise_kernel = self.add_weight(shape=(1, c * self.depth_multiplier, self.filters),
                                                name="pointwise_kernel", initializer=self.pointwise_initializer,
                                                regularizer=self.pointwise_regularizer,
                                                constraint=self.pointwise_constraint)
        self.bias = self.add_weight(shape=(self.filters,), name="bias", initializer=self.bias_initializer,
                                    regularizer=self.bias_regularizer, constraint=self.bias_constraint) \
            if self.use_bias else None
        self.built = True

    def call(self, inputs):
        y = _nn.separable_conv(inputs, self.depthwise_kernel, self.pointwise_kernel, self.strides, self.padding,
                               self.data_format, self.dilation_rate)
        return self._finish(y)

    def get_config(self):
        return {**super().get_config(), "filters": self.filters,
                "depthwise_initializer": initializers.serialize(self.depthwise_initializer),
                "pointwise_initializer": initializers.serialize(self.pointwise_initializer),
                "depthwise_regularizer": regularizers.serialize(self.depthwise_regularizer),
                "pointwise_regularizer": regularizers.serialize(self.pointwise_regularizer)}
