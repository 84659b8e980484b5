"""``AdditiveAttention`` (Bahdanau-style): scores ``sum(scale * tanh(query + key))`` over features.

>>> import numpy as np
>>> from tensorweave import keras
>>> q, v = np.ones((2, 3, 4), "float32"), np.ones((2, 5, 4), "float32")
>>> keras.layers.AdditiveAttention()([q, v]).shape
TensorShape([2, 3, 4])
"""
import tensorweave as tw
from tensorweave.keras.layers.attention import Attention


class AdditiveAttention(Attention):
    def __init__(self, use_scale=True, dropout=0.0, **kwargs):
        kwargs.pop("score_mode", None)
        super().__init__(use_scale=use_scale, dropout=dropout, **kwargs)

    def build(self, input_shape):
        self._validate_inputs(input_shape)
        dim = input_shape[0][-1]
        self.scale = self.add_weight(name="scale", shape=(dim,), initializer="glorot_uniform") \
            if self.use_scale else None
        self.concat_score_weight = None
        self.built = True

    def _calculate_scores(self, query, key):
        s = tw.tanh(tw.expand_dims(query, -2) + tw.expand_dims(key, -3))
        if self.scale is not None:
            s = self.scale * s
        return tw.reduce_sum(s, axis=-1)

    def get_config(self):
        config = super().get_config()
        config.pop("score_mode", None)
        return config
