"""``Embedding``: integer ids to dense vectors (Keras 3 arguments and defaults).

The table is read with the variable's ``sparse_read`` (through ``tw.nn.embedding_lookup``), so
its gradient is an ``IndexedSlices`` holding only the rows looked up; optimizers then update
just those rows. ``mask_zero=True`` makes id 0 padding: ``compute_mask`` returns ``ids != 0``,
which Sequential and functional models pass to the layers downstream.

>>> import numpy as np
>>> from tensorweave.keras.layers.embedding import Embedding
>>> emb = Embedding(10, 3, mask_zero=True)
>>> ids = np.array([[4, 2, 0, 0]])
>>> emb(ids).shape, emb.compute_mask(ids).numpy().tolist()
(TensorShape([1, 4, 3]), [[True, True, False, False]])
"""
import numpy as np

import tensorweave as tw
from tensorweave.keras import initializers, regularizers
from tensorweave.keras.engine.layer import Layer
from tensorweave.keras.layers.conv import _serialize_constraint

__all__ = ["Embedding"]


class Embedding(Layer):
    """Looks up row ``i`` of an ``(input_dim, output_dim)`` table for each id ``i``; the output has
    the ids' shape plus ``output_dim``.

    ``input_length`` (Keras 2) is accepted and fixes the input shape to ``(None, input_length)``;
    ``weights=[table]`` sets the initial table. Ids must lie in ``[0, input_dim)``.
    """

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", embeddings_regularizer=None,
                 embeddings_constraint=None, mask_zero=False, weights=None, lora_rank=None, input_length=None,
                 **kwargs):
        if input_length is not None and kwargs.get("input_shape") is None and \
                kwargs.get("batch_input_shape") is None:
            kwargs["input_shape"] = (input_length,)
        super().__init__(**kwargs)
        if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d <= 0 for d in (input_dim, output_dim)):
            raise ValueError(f"Both `input_dim` and `output_dim` should be positive, received input_dim={input_dim} "
                             f"and output_dim={output_dim}")
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        if lora_rank:
            raise NotImplementedError("Embedding: lora_rank is not supported")
        self.embeddings_initializer = initializers.get(embeddings_initializer)
        self.embeddings_regularizer = regularizers.get(embeddings_regularizer)
        self.embeddings_constraint = embeddings_constraint
        self.mask_zero = bool(mask_zero)
        self.input_length = input_length
        self.supports_masking = self.mask_zero
        # ids are integers: never cast them to the layer's float dtype
        self.autocast = False
        if weights is not None:
            self.build(None)
            self.set_weights(weights if isinstance(weights, list) else [weights])

    def build(self, input_shape=None):
        if self.built:
            return
        self.embeddings = self.add_weight(name="embeddings", shape=(self.input_dim, self.output_dim),
                                          initializer=self.embeddings_initializer,
                                          regularizer=self.embeddings_regularizer,
                                          constraint=self.embeddings_constraint)
        self.built = True

    def call(self, inputs):
        ids = inputs
        if not isinstance(ids, tw.Tensor):
            ids = tw.convert_to_tensor(np.asarray(ids))
        if ids.dtype not in (tw.int32, tw.int64):
            ids = tw.cast(ids, tw.int32)  # e.g. a float keras.Input holding ids
        return tw.nn.embedding_lookup(self.embeddings, ids)

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        return tw.not_equal(tw.convert_to_tensor(inputs), 0)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.output_dim,)

    def get_config(self):
        config = {**super().get_config(), "input_dim": self.input_dim, "output_dim": self.output_dim,
                  "embeddings_initializer": initializers.serialize(self.embeddings_initializer),
                  "embeddings_regularizer": regularizers.serialize(self.embeddings_regularizer),
                  "embeddings_constraint": _serialize_constraint(self.embeddings_constraint),
                  "mask_zero": self.mask_zero}
        if self.input_length is not None:
            config["input_length"] = self.input_length
            config.pop("batch_input_shape", None)  # input_length recreates it
        return config
