"""``ReversibleEmbedding``: an embedding that also maps vectors back to logits over its vocabulary
(``reverse=True``), with the table tied (default) or a separate ``reverse_embeddings`` matrix.

>>> import numpy as np
>>> from tensorweave import keras
>>> emb = keras.layers.ReversibleEmbedding(10, 4)
>>> emb(np.array([[1, 2]])).shape, emb(np.ones((1, 4), "float32"), reverse=True).shape
(TensorShape([1, 2, 4]), TensorShape([1, 10]))
"""
import tensorweave as tw
from tensorweave.keras.layers.embedding import Embedding


class ReversibleEmbedding(Embedding):
    def __init__(self, input_dim, output_dim, tie_weights=True, embeddings_initializer="uniform",
                 embeddings_regularizer=None, embeddings_constraint=None, mask_zero=False, reverse_dtype=None,
                 logit_soft_cap=None, **kwargs):
        kwargs.pop("quantization_config", None)
        super().__init__(input_dim, output_dim, embeddings_initializer=embeddings_initializer,
                         embeddings_regularizer=embeddings_regularizer, embeddings_constraint=embeddings_constraint,
                         mask_zero=mask_zero, **kwargs)
        self.tie_weights = bool(tie_weights)
        self.reverse_dtype = reverse_dtype
        self.logit_soft_cap = logit_soft_cap

    def build(self, input_shape=None):
        if self.built:
            return
        super().build(input_shape)
        self.built = False
        if not self.tie_weights:
            self.reverse_embeddings = self.add_weight(name="reverse_embeddings",
                                                      shape=(self.output_dim, self.input_dim),
                                                      initializer=self.embeddings_initializer,
                                                      regularizer=self.embeddings_regularizer,
                                                      constraint=self.embeddings_constraint)
        self.built = True

    def call(self, inputs, reverse=False):
        if not reverse:
            return super().call(inputs)
        x = tw.cast(inputs, self.compute_dtype) if not isinstance(inputs, tw.Tensor) or \
            inputs.dtype != self.compute_dtype else inputs
        table = tw.transpose(self.embeddings) if self.tie_weights else self.reverse_embeddings
        if self.reverse_dtype is not None:
            x, table = tw.cast(x, self.reverse_dtype), tw.cast(table, self.reverse_dtype)
        logits = tw.tensordot(x, table, [[x.shape.rank - 1], [0]])
        if self.logit_soft_cap is not None:
            cap = float(self.logit_soft_cap)
            logits = tw.tanh(logits / cap) * cap
        return logits

    def compute_output_shape(self, input_shape, reverse=False):
        if reverse:
            return tuple(input_shape)[:-1] + (self.input_dim,)
        return super().compute_output_shape(input_shape)

    def get_config(self):
        return {**super().get_config(), "tie_weights": self.tie_weights, "reverse_dtype": self.reverse_dtype,
                "logit_soft_cap": self.logit_soft_cap}
