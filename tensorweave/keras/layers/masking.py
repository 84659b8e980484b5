"""``Masking``: marks time steps whose features all equal ``mask_value`` as padding; RNNs,
``Softmax`` and the other mask-aware layers downstream skip them.

>>> import numpy as np
>>> from tensorweave import keras
>>> x = np.array([[[1.0], [0.0], [2.0]]], "float32")
>>> keras.layers.Masking()(x)._keras_mask.numpy().tolist()
[[True, False, True]]
"""
import tensorweave as tw
from tensorweave.keras.engine.layer import Layer


class Masking(Layer):
    def __init__(self, mask_value=0.0, **kwargs):
        super().__init__(**kwargs)
        self.mask_value = float(mask_value)
        self.supports_masking = True

    def compute_mask(self, inputs, mask=None):
        return tw.reduce_any(tw.not_equal(inputs, tw.cast(self.mask_value, inputs.dtype)), axis=-1)

    def call(self, inputs):
        keep = tw.reduce_any(tw.not_equal(inputs, tw.cast(self.mask_value, inputs.dtype)), axis=-1, keepdims=True)
        return inputs * tw.cast(keep, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "mask_value": self.mask_value}
