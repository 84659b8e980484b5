"""``GroupQueryAttention`` (Keras 3's ``GroupedQueryAttention``, Ainslie et al., 2023): multi-head
attention whose ``num_query_heads`` share ``num_key_value_heads`` key/value heads (each key/value
head repeated ``num_query_heads // num_key_value_heads`` times). Keras' weights and order:
``query`` ``[dim, query_heads, head_dim]``, ``key``/``value`` ``[dim, kv_heads, head_dim]``
(``gate`` after ``key`` with ``use_gate``: a sigmoid gate on each head's output), ``attention_output`` ``[query_heads, head_dim, dim]``,
so ``set_weights`` takes Keras' lists. ``sliding_window=w`` lets query ``i`` attend to keys
``|i - j| < w`` only (with ``use_causal_mask``: the causal band of Mistral-style models).

>>> import numpy as np
>>> from tensorweave import keras
>>> gqa = keras.layers.GroupQueryAttention(head_dim=4, num_query_heads=4, num_key_value_heads=2)
>>> x = np.ones((1, 3, 8), "float32")
>>> gqa(x, x).shape, [w.shape.as_list() for w in gqa.weights][2]
(TensorShape([1, 3, 8]), [8, 2, 4])
"""
import tensorweave as tw
from tensorweave.keras.layers.attention import MultiHeadAttention, _proj_equation


class GroupQueryAttention(MultiHeadAttention):
    def __init__(self, head_dim, num_query_heads, num_key_value_heads, dropout=0.0, use_bias=True,
                 sliding_window=None, flash_attention=None, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, use_gate=False, seed=None, **kwargs):
        if num_query_heads % num_key_value_heads != 0:
            raise ValueError("`num_query_heads` must be divisible by `num_key_value_heads`.")
        if sliding_window is not None and (isinstance(sliding_window, bool) or not isinstance(sliding_window, int)
                                           or sliding_window <= 0):
            raise ValueError(f"`sliding_window` must be `None` or a positive integer. Received: "
                             f"sliding_window={sliding_window}")
        super().__init__(num_heads=num_query_heads, key_dim=head_dim, dropout=dropout, use_bias=use_bias,
                         flash_attention=flash_attention, kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
                         bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                         kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, seed=seed, **kwargs)
        self.head_dim, self.num_query_heads, self.num_key_value_heads = head_dim, num_query_heads, num_key_value_heads
        self.num_repeats = num_query_heads // num_key_value_heads
        self.sliding_window, self.use_gate = sliding_window, bool(use_gate)

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = tuple(query_shape if value_shape is None else value_shape)
        key_shape = value_shape if key_shape is None else tuple(key_shape)
        query_shape = tuple(query_shape)
        u, v, h, dim = self.num_query_heads, self.num_key_value_heads, self.head_dim, query_shape[-1]
        eq = _proj_equation(2, 1, 2)[0]
        self._query_dense = self._dense("query", eq, (dim, u, h), (u, h))
        self._query_dense.build(query_shape)
        self._key_dense = self._dense("key", eq, (key_shape[-1], v, h), (v, h))
        self._key_dense.build(key_shape)
        if self.use_gate:
            self._gate_dense = self._dense("gate", eq, (dim, u, h), (u, h))
            self._gate_dense.build(query_shape)
        self._value_dense = self._dense("value", eq, (value_shape[-1], v, h), (v, h))
        self._value_dense.build(value_shape)
        self._build_attention(4)
        self._output_dense = self._dense("attention_output", _proj_equation(2, 2, 1)[0], (u, h, dim), (dim,))
        self._output_dense.build(None)
        self.built = True

    def _compute_attention_mask(self, query, value, query_mask=None, value_mask=None, key_mask=None,
                                attention_mask=None, use_causal_mask=False):
        mask = super()._compute_attention_mask(query, value, query_mask, value_mask, key_mask, attention_mask,
                                               use_causal_mask)
        if self.sliding_window is None:
            return mask
        t, s = tw.shape(query)[1], tw.shape(value)[1]
        rows = tw.reshape(tw.range(t), [1, -1, 1])
        cols = tw.reshape(tw.range(s), [1, 1, -1])
        band = tw.less(tw.abs(rows - cols), self.sliding_window)
        return band if mask is None else tw.logical_and(mask, band)

    def call(self, query, value, key=None, query_mask=None, value_mask=None, key_mask=None, attention_mask=None,
             return_attention_scores=False, training=None, use_causal_mask=False):
        key, attention_mask = self._key_and_mask(query, value, key, query_mask, value_mask, key_mask, attention_mask,
                                                 use_causal_mask)
        gate = tw.sigmoid(self._gate_dense(query)) if self.use_gate else None
        q = self._query_dense(query)
        k = tw.repeat(self._key_dense(key), self.num_repeats, axis=2)
        v = tw.repeat(self._value_dense(value), self.num_repeats, axis=2)
        out, scores = self._compute_attention(q, k, v, attention_mask, training)
        out = self._output_dense(out if gate is None else out * gate)
        if self._activity_regularizer is not None:
            self.add_loss(self._activity_regularizer(out))
        return (out, scores) if return_attention_scores else out

    def get_config(self):
        config = super().get_config()
        for k in ("num_heads", "key_dim", "value_dim", "output_shape", "attention_axes"):
            config.pop(k, None)
        return {**config, "head_dim": self.head_dim, "num_query_heads": self.num_query_heads,
                "num_key_value_heads": self.num_key_value_heads, "use_gate": self.use_gate,
                "sliding_window": self.sliding_window}


GroupedQueryAttention = GroupQueryAttention
