"""Adaptive pooling layers: AdaptiveAveragePooling1D/2D/3D and AdaptiveMaxPooling1D/2D/3D pool to a
fixed ``output_size`` whatever the input size (PyTorch's bin edges, as Keras 3).

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.layers.AdaptiveAveragePooling2D((2, 3))(np.ones((1, 5, 7, 4), "float32")).shape
TensorShape([1, 2, 3, 4])
"""
from tensorweave.keras.engine.layer import InputSpec, Layer
from tensorweave.keras.layers.reshaping import _data_format, _tuple
from tensorweave.keras.ops import nn as _nn


class _Adaptive(Layer):
    nd = None
    fn = None

    def __init__(self, output_size, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.output_size = _tuple(output_size, self.nd, "output_size", type(self).__name__)
        self.data_format = _data_format(data_format)
        self.input_spec = InputSpec(ndim=self.nd + 2)

    def call(self, inputs):
        pool = _nn.adaptive_average_pool if self.fn == "avg" else _nn.adaptive_max_pool
        return pool(inputs, self.output_size, data_format=self.data_format)

    def get_config(self):
        return {**super().get_config(), "output_size": list(self.output_size), "data_format": self.data_format}


class AdaptiveAveragePooling1D(_Adaptive):
    nd, fn = 1, "avg"


class AdaptiveAveragePooling2D(_Adaptive):
    nd, fn = 2, "avg"


class AdaptiveAveragePooling3D(_Adaptive):
    nd, fn = 3, "avg"


class AdaptiveMaxPooling1D(_Adaptive):
    nd, fn = 1, "max"


class AdaptiveMaxPooling2D(_Adaptive):
    nd, fn = 2, "max"


class AdaptiveMaxPooling3D(_Adaptive):
    nd, fn = 3, "max"
