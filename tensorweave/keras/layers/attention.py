"""Attention layers (Keras 3 arguments, weights and equations): ``MultiHeadAttention`` and the
dot-product ``Attention``.

``MultiHeadAttention`` keeps Keras 3's weight layout: sublayers ``query``, ``key``, ``value`` with
kernels ``[dim, num_heads, key_dim]`` (``value_dim`` for values) and biases
``[num_heads, key_dim]``, and ``attention_output`` with kernel ``[num_heads, value_dim, *output_shape]``
and bias ``output_shape``, so ``get_weights``/``set_weights`` interchange with Keras. The
projections and the attention itself are ``tw.einsum`` calls built from the input ranks and
``attention_axes``.

>>> import numpy as np
>>> from tensorweave.keras.layers.attention import MultiHeadAttention
>>> mha = MultiHeadAttention(num_heads=2, key_dim=3)
>>> x = np.ones((1, 4, 5), np.float32)
>>> out, scores = mha(x, x, return_attention_scores=True)
>>> out.shape, scores.shape, [w.shape.as_list() for w in mha.weights][:2]
(TensorShape([1, 4, 5]), TensorShape([1, 2, 4, 4]), [[5, 2, 3], [2, 3]])
"""
import math
import string

import tensorweave as tw
from tensorweave.keras import initializers, regularizers
from tensorweave.keras.engine.layer import Layer, positive_int
from tensorweave.keras.layers.einsum_dense import kernel_initializer_for

__all__ = ["MultiHeadAttention", "Attention"]

_LETTERS = string.ascii_lowercase


def _serialize_constraint(c):
    if c is None:
        return None
    if hasattr(c, "get_config"):
        return {"class_name": type(c).__name__, "config": c.get_config()}
    raise ValueError(f"Cannot serialize the constraint {c!r}")


def _large_negative(dtype):
    """What Keras' masked softmax adds at masked positions."""
    return -3e4 if dtype == tw.float16 else -1e9


# ---- einsum equations (as Keras builds them) ------------------------------------------------------
def _proj_equation(free_dims, bound_dims, output_dims):
    """``(equation, bias_axes, output_rank)`` of a projection: ``free_dims`` pass through,
    ``bound_dims`` are contracted with the kernel, ``output_dims`` come from it."""
    inp = _LETTERS[:free_dims]
    bound = _LETTERS[free_dims:free_dims + bound_dims]
    out_new = _LETTERS[free_dims + bound_dims:free_dims + bound_dims + output_dims]
    return f"{inp}{bound},{bound}{out_new}->{inp}{out_new}", out_new, free_dims + output_dims


def _attention_equations(rank, attn_axes):
    """Equations for ``scores = einsum(dot, key, query)`` and ``out = einsum(combine, scores, value)``
    on projected tensors of shape ``(batch, <non-attention dims>, <attention dims>, heads, channels)``."""
    target = _LETTERS[:rank]
    batch_dims = [i for i in range(rank) if i not in attn_axes and i != rank - 1]
    offset = rank
    source = ""
    for i in range(rank):
        if i in batch_dims or i == rank - 1:
            source += target[i]
        else:
            source += _LETTERS[offset]
            offset += 1
    product = "".join([target[i] for i in batch_dims] + [target[i] for i in attn_axes]
                      + [source[i] for i in attn_axes])
    return f"{source},{target}->{product}", f"{product},{source}->{target}", len(product)


class _ProjectionDense(Layer):
    """An einsum projection with a kernel of a given shape (Keras' ``EinsumDense``, as
    ``MultiHeadAttention`` uses it)."""

    def __init__(self, equation, kernel_shape, bias_shape, kernel_initializer, bias_initializer,
                 kernel_regularizer=None, bias_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.equation = equation
        self.kernel_shape = tuple(kernel_shape)
        self.bias_shape = None if bias_shape is None else tuple(bias_shape)
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.kernel_regularizer = kernel_regularizer
        self.bias_regularizer = bias_regularizer
        self.kernel_constraint = kernel_constraint
        self.bias_constraint = bias_constraint

    def build(self, input_shape=None):
        self.kernel = self.add_weight(shape=self.kernel_shape, name="kernel",
                                      initializer=kernel_initializer_for(self.kernel_initializer, self.equation),
                                      regularizer=self.kernel_regularizer, constraint=self.kernel_constraint)
        self.bias = None if self.bias_shape is None else self.add_weight(
            shape=self.bias_shape, name="bias", initializer=self.bias_initializer, regularizer=self.bias_regularizer,
            constraint=self.bias_constraint)
        self.built = True

    def call(self, inputs):
        y = tw.einsum(self.equation, inputs, self.kernel)
        return y if self.bias is None else y + self.bias


def _fresh(init):
    """A new instance of an initializer (so the four projections do not share one)."""
    if hasattr(init, "get_config") and hasattr(type(init), "from_config"):
        return type(init).from_config(init.get_config())
    return init


class MultiHeadAttention(Layer):
    """Multi-head attention (Vaswani et al., 2017) with Keras 3's arguments and weight layout.

    ``call(query, value, key=None, attention_mask=None, return_attention_scores=False,
    training=None, use_causal_mask=False)``; ``attention_mask`` (``[B, T, S]``, True = attend)
    is combined with the causal mask and with ``query_mask``/``value_mask``/``key_mask`` (given,
    or carried by the inputs from an ``Embedding(mask_zero=True)``).
    """

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True, output_shape=None,
                 attention_axes=None, flash_attention=None, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True
        self._num_heads = positive_int(num_heads, "num_heads")
        self._key_dim = positive_int(key_dim, "key_dim")
        self._value_dim = positive_int(value_dim, "value_dim") if value_dim else self._key_dim
        self._dropout = float(dropout)
        self._use_bias = bool(use_bias)
        if output_shape:
            if isinstance(output_shape, int):
                output_shape = (output_shape,)
            try:
                output_shape = tuple(int(d) for d in output_shape)
            except TypeError:
                raise ValueError(f"Invalid `output_shape`: {output_shape}. When specified, the `output_shape` should "
                                 "be of type tuple, list, or int.") from None
        self._output_shape = output_shape or None
        if flash_attention:
            raise NotImplementedError("MultiHeadAttention(flash_attention=True) is not supported by tensorweave")
        self._kernel_initializer = initializers.get(kernel_initializer)
        self._bias_initializer = initializers.get(bias_initializer)
        self._kernel_regularizer = regularizers.get(kernel_regularizer)
        self._bias_regularizer = regularizers.get(bias_regularizer)
        self._activity_regularizer = regularizers.get(activity_regularizer)
        self._kernel_constraint = kernel_constraint
        self._bias_constraint = bias_constraint
        if isinstance(attention_axes, int):
            attention_axes = (attention_axes,)
        elif attention_axes and not isinstance(attention_axes, (list, tuple)):
            raise ValueError(f"`attention_axes` must be an int, list, or tuple.Received: attention_axes="
                             f"{attention_axes}")
        self._attention_axes = tuple(attention_axes) if attention_axes else None
        self._config_attention_axes = self._attention_axes
        self.seed = seed
        self._inverse_sqrt_key_dim = 1.0 / math.sqrt(float(self._key_dim))

    num_heads = property(lambda self: self._num_heads)
    key_dim = property(lambda self: self._key_dim)
    value_dim = property(lambda self: self._value_dim)
    dropout = property(lambda self: self._dropout)
    use_bias = property(lambda self: self._use_bias)
    attention_axes = property(lambda self: self._attention_axes)

    def _dense(self, name, equation, kernel_shape, bias_shape):
        layer = _ProjectionDense(
            equation, kernel_shape, bias_shape if self._use_bias else None, _fresh(self._kernel_initializer),
            _fresh(self._bias_initializer), kernel_regularizer=self._kernel_regularizer,
            bias_regularizer=self._bias_regularizer, kernel_constraint=self._kernel_constraint,
            bias_constraint=self._bias_constraint, name=name, dtype=self._dtype)
        self._track(layer)   # a sublayer: its weights are this layer's, in Keras' order
        return layer

    def build(self, query_shape, value_shape=None, key_shape=None):
        if value_shape is None:   # built from the engine with only the query's shape: self-attention
            value_shape = query_shape
        key_shape = value_shape if key_shape is None else key_shape
        query_shape, value_shape, key_shape = tuple(query_shape), tuple(value_shape), tuple(key_shape)
        if value_shape[1:-1] != key_shape[1:-1]:
            raise ValueError(f"All dimensions of `value` and `key`, except the last one, must be equal. Received: "
                             f"value_shape={value_shape} and key_shape={key_shape}")
        for what, s in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            if s[-1] is None:
                raise ValueError(f"Layer '{self.name}': the last dimension of `{what}` must be known; got shape {s}")
        h, kd, vd = self._num_heads, self._key_dim, self._value_dim
        eq, _, out_rank = _proj_equation(len(query_shape) - 1, 1, 2)
        self._query_dense = self._dense("query", eq, (query_shape[-1], h, kd), (h, kd))
        self._query_dense.build(query_shape)
        eq, _, _ = _proj_equation(len(key_shape) - 1, 1, 2)
        self._key_dense = self._dense("key", eq, (key_shape[-1], h, kd), (h, kd))
        self._key_dense.build(key_shape)
        eq, _, _ = _proj_equation(len(value_shape) - 1, 1, 2)
        self._value_dense = self._dense("value", eq, (value_shape[-1], h, vd), (h, vd))
        self._value_dense.build(value_shape)
        self._build_attention(out_rank)
        out_shape = self._output_shape or (query_shape[-1],)
        eq, _, _ = _proj_equation(len(query_shape) - 1, 2, len(out_shape))
        self._output_dense = self._dense("attention_output", eq, (h, vd) + tuple(out_shape), tuple(out_shape))
        self._output_dense.build(None)
        self.built = True

    def _build_attention(self, rank):
        if self._config_attention_axes is None:
            self._attention_axes = tuple(range(1, rank - 2))
        else:
            self._attention_axes = tuple(a if a >= 0 else (rank - 1) + a for a in self._config_attention_axes)
        self._dot_product_equation, self._combine_equation, scores_rank = \
            _attention_equations(rank, self._attention_axes)
        n = len(self._attention_axes)
        self._norm_axes = tuple(range(scores_rank - n, scores_rank))

    query_dense = property(lambda self: self._query_dense)
    key_dense = property(lambda self: self._key_dense)
    value_dense = property(lambda self: self._value_dense)
    output_dense = property(lambda self: self._output_dense)

    def __call__(self, query, value=None, key=None, **kwargs):
        if value is None and isinstance(query, (list, tuple)) and len(query) in (2, 3):
            # [query, value(, key)]: how a functional model rebuilt from its config calls the layer
            query, value, key = (list(query) + [None])[:3]
        # Build from all three shapes (the engine builds from the first argument only).
        if value is None:
            raise TypeError(f"MultiHeadAttention '{self.name}' needs `value` (call(query, value, key=None, ...))")
        if not self.built:
            def shape(t):
                s = t.shape
                return tuple(s) if isinstance(s, tuple) else tuple(s.as_list())
            conv = [t if hasattr(t, "shape") else tw.convert_to_tensor(t) for t in (query, value, key)
                    if t is not None]
            self.build(shape(conv[0]), shape(conv[1]), shape(conv[2]) if key is not None else None)
        if key is not None:
            kwargs["key"] = key
        return super().__call__(query, value, **kwargs)

    # -- masks --
    def _compute_attention_mask(self, query, value, query_mask=None, value_mask=None, key_mask=None,
                                attention_mask=None, use_causal_mask=False):
        auto = None
        if query_mask is not None:
            auto = tw.expand_dims(tw.cast(query_mask, tw.bool), -1)            # [B, T, 1]
        if value_mask is not None:
            m = tw.expand_dims(tw.cast(value_mask, tw.bool), -2)               # [B, 1, S]
            auto = m if auto is None else tw.logical_and(auto, m)
        if key_mask is not None:
            m = tw.expand_dims(tw.cast(key_mask, tw.bool), -2)
            auto = m if auto is None else tw.logical_and(auto, m)
        if use_causal_mask:
            m = self._compute_causal_mask(query, value)
            auto = m if auto is None else tw.logical_and(auto, m)
        if attention_mask is not None:
            attention_mask = tw.cast(tw.convert_to_tensor(attention_mask), tw.bool)
        if auto is not None:
            attention_mask = auto if attention_mask is None else tw.logical_and(attention_mask, auto)
        return attention_mask

    def _compute_causal_mask(self, query, value=None):
        """``[1, T, S]``: query step i attends to value steps j <= i."""
        t = query.shape[1] if query.shape[1] is not None else tw.shape(query)[1]
        s = t if value is None else (value.shape[1] if value.shape[1] is not None else tw.shape(value)[1])
        if isinstance(t, int) and isinstance(s, int):
            rows = tw.reshape(tw.range(t), [1, t, 1])
            cols = tw.reshape(tw.range(s), [1, 1, s])
        else:
            rows = tw.expand_dims(tw.expand_dims(tw.range(t), 0), -1)
            cols = tw.expand_dims(tw.expand_dims(tw.range(s), 0), 0)
        return tw.greater_equal(rows, cols)

    def _masked_softmax(self, scores, attention_mask=None):
        if attention_mask is not None:
            axis = -len(self._attention_axes) * 2 - 1
            for _ in range(scores.shape.rank - attention_mask.shape.rank):
                attention_mask = tw.expand_dims(attention_mask, axis)
            scores = scores + (1.0 - tw.cast(attention_mask, scores.dtype)) * _large_negative(scores.dtype)
        if len(self._norm_axes) == 1:
            return tw.nn.softmax(scores, axis=self._norm_axes[0])
        return tw.exp(scores - tw.reduce_logsumexp(scores, axis=list(self._norm_axes), keepdims=True))

    def _compute_attention(self, query, key, value, attention_mask=None, training=None):
        query = query * self._inverse_sqrt_key_dim
        scores = tw.einsum(self._dot_product_equation, key, query)
        scores = self._masked_softmax(scores, attention_mask)
        probs = scores
        if training and self._dropout > 0:
            probs = tw.nn.dropout(scores, self._dropout, seed=self.seed)
        return tw.einsum(self._combine_equation, probs, value), scores

    def _key_and_mask(self, query, value, key, query_mask, value_mask, key_mask, attention_mask, use_causal_mask):
        """``key`` (``value`` when None) and the attention mask from the explicit masks or, where
        not given, the inputs' Keras masks."""
        if key is None:
            key = value
        if query_mask is None:
            query_mask = getattr(query, "_keras_mask", None)
        if value_mask is None:
            value_mask = getattr(value, "_keras_mask", None)
        if key_mask is None and key is not value:
            key_mask = getattr(key, "_keras_mask", None)
        return key, self._compute_attention_mask(query, value, query_mask, value_mask, key_mask, attention_mask,
                                                 use_causal_mask)

    def call(self, query, value, key=None, query_mask=None, value_mask=None, key_mask=None, attention_mask=None,
             return_attention_scores=False, training=None, use_causal_mask=False):
        key, attention_mask = self._key_and_mask(query, value, key, query_mask, value_mask, key_mask, attention_mask,
                                                 use_causal_mask)
        q = self._query_dense(query)
        k = self._key_dense(key)
        v = self._value_dense(value)
        out, scores = self._compute_attention(q, k, v, attention_mask, training)
        out = self._output_dense(out)
        if self._activity_regularizer is not None:
            self.add_loss(self._activity_regularizer(out))
        if return_attention_scores:
            return out, scores
        return out

    def compute_mask(self, inputs, mask=None):
        """The output carries the query's mask."""
        if isinstance(mask, (list, tuple)):
            mask = mask[0] if mask else None
        return getattr(inputs, "_keras_mask", None) if mask is None else mask

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        query_shape = tuple(query_shape)
        if value_shape is not None and key_shape is not None and tuple(value_shape)[1:-1] != tuple(key_shape)[1:-1]:
            raise ValueError(f"All dimensions of `value` and `key`, except the last one, must be equal. Received: "
                             f"value_shape={tuple(value_shape)} and key_shape={tuple(key_shape)}")
        if self._output_shape:
            return query_shape[:-1] + tuple(self._output_shape)
        return query_shape

    def get_config(self):
        return {**super().get_config(), "num_heads": self._num_heads, "key_dim": self._key_dim,
                "value_dim": self._value_dim, "dropout": self._dropout, "use_bias": self._use_bias,
                "output_shape": self._output_shape, "attention_axes": self._config_attention_axes,
                "kernel_initializer": initializers.serialize(self._kernel_initializer),
                "bias_initializer": initializers.serialize(self._bias_initializer),
                "kernel_regularizer": regularizers.serialize(self._kernel_regularizer),
                "bias_regularizer": regularizers.serialize(self._bias_regularizer),
                "activity_regularizer": regularizers.serialize(self._activity_regularizer),
                "kernel_constraint": _serialize_constraint(self._kernel_constraint),
                "bias_constraint": _serialize_constraint(self._bias_constraint), "seed": self.seed}


class Attention(Layer):
    """Dot-product (Luong-style) attention: ``softmax(query @ key^T) @ value``.

    ``call([query, value(, key)], mask=[query_mask, value_mask], return_attention_scores=False,
    use_causal_mask=False)``. ``use_scale`` adds a trainable scalar multiplying the scores;
    ``score_mode="concat"`` scores with ``sum(tanh(query + key))``.

    >>> import numpy as np
    >>> q, v = np.ones((2, 3, 4), np.float32), np.ones((2, 5, 4), np.float32)
    >>> Attention()([q, v]).shape
    TensorShape([2, 3, 4])
    """

    def __init__(self, use_scale=False, score_mode="dot", dropout=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.use_scale = bool(use_scale)
        self.score_mode = score_mode
        self.dropout = float(dropout)
        self.seed = seed
        self.supports_masking = True
        if score_mode not in ("dot", "concat"):
            raise ValueError(f"Invalid value for argument score_mode. Expected one of {{'dot', 'concat'}}. "
                             f"Received: score_mode={score_mode}")

    def build(self, input_shape):
        self._validate_inputs(input_shape)
        self.scale = None
        self.concat_score_weight = None
        if self.use_scale:
            self.scale = self.add_weight(name="scale", shape=(), initializer="ones")
        if self.score_mode == "concat":
            self.concat_score_weight = self.add_weight(name="concat_score_weight", shape=(), initializer="ones")
        self.built = True

    def _calculate_scores(self, query, key):
        if self.score_mode == "dot":
            scores = tw.matmul(query, key, transpose_b=True)
            if self.scale is not None:
                scores = scores * self.scale
            return scores
        q = tw.expand_dims(query, -2)
        k = tw.expand_dims(key, -3)
        s = q + k if self.scale is None else self.scale * (q + k)
        return self.concat_score_weight * tw.reduce_sum(tw.tanh(s), axis=-1)

    def _calculate_score_mask(self, scores, v_mask, use_causal_mask):
        if use_causal_mask:
            tq = scores.shape[-2] if scores.shape[-2] is not None else tw.shape(scores)[-2]
            tv = scores.shape[-1] if scores.shape[-1] is not None else tw.shape(scores)[-1]
            rows = tw.expand_dims(tw.expand_dims(tw.range(tq), 0), -1)
            cols = tw.expand_dims(tw.expand_dims(tw.range(tv), 0), 0)
            causal = tw.greater_equal(rows, cols)                    # [1, Tq, Tv]
            if v_mask is not None:
                return tw.logical_and(tw.expand_dims(v_mask, -2), causal)
            return causal
        return v_mask if v_mask is None else tw.expand_dims(v_mask, -2)

    def _apply_scores(self, scores, value, scores_mask=None, training=False):
        if scores_mask is not None:
            padding = tw.cast(tw.logical_not(scores_mask), scores.dtype)
            max_value = 65504.0 if scores.dtype == tw.float16 else 1.0e9
            scores = scores - max_value * padding
        weights = tw.nn.softmax(scores, axis=-1)
        if training and self.dropout > 0:
            weights = tw.nn.dropout(weights, self.dropout, seed=self.seed)
        return tw.matmul(weights, value), weights

    def call(self, inputs, mask=None, training=False, return_attention_scores=False, use_causal_mask=False):
        self._validate_inputs(inputs, mask)
        q, v = inputs[0], inputs[1]
        k = inputs[2] if len(inputs) > 2 else v
        q_mask = mask[0] if mask else None
        v_mask = mask[1] if mask else None
        if v_mask is not None:
            v_mask = tw.cast(v_mask, tw.bool)
        scores = self._calculate_scores(q, k)
        scores_mask = self._calculate_score_mask(scores, v_mask, use_causal_mask)
        result, attention_scores = self._apply_scores(scores, v, scores_mask, training)
        if q_mask is not None:
            result = result * tw.cast(tw.expand_dims(q_mask, -1), result.dtype)
        if return_attention_scores:
            return result, attention_scores
        return result

    def compute_mask(self, inputs, mask=None):
        if mask is None or mask[0] is None:
            return None
        return tw.convert_to_tensor(mask[0])

    def _validate_inputs(self, inputs, mask=None):
        name = type(self).__name__
        if not isinstance(inputs, (list, tuple)):
            raise ValueError(f"{name} layer must be called on a list of inputs, namely [query, value] or "
                             f"[query, value, key]. Received: inputs={inputs}.")
        if len(inputs) < 2 or len(inputs) > 3:
            raise ValueError(f"{name} layer accepts inputs list of length 2 or 3, namely [query, value] or "
                             f"[query, value, key]. Received length: {len(inputs)}.")
        if mask is not None:
            if not isinstance(mask, (list, tuple)):
                raise ValueError(f"{name} layer mask must be a list, namely [query_mask, value_mask]. Received: "
                                 f"mask={mask}.")
            if len(mask) < 2 or len(mask) > 3:
                raise ValueError(f"{name} layer accepts mask list of length 2 or 3. Received: inputs={inputs}, "
                                 f"mask={mask}.")

    def get_config(self):
        return {**super().get_config(), "use_scale": self.use_scale, "score_mode": self.score_mode,
                "dropout": self.dropout, "seed": self.seed}
