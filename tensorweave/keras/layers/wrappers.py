"""``TimeDistributed``: applies a layer to every time step (axis 1) of its input, with one set of
weights, by folding time into the batch.

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.layers.TimeDistributed(keras.layers.Dense(2))(np.ones((3, 5, 4), "float32")).shape
TensorShape([3, 5, 2])
"""
import tensorweave as tw
from tensorweave.core import nest
from tensorweave.keras.engine.layer import Layer


class Wrapper(Layer):
    """Base of layers that wrap one other layer (``self.layer``), serialised inside their config."""

    def __init__(self, layer, **kwargs):
        if not isinstance(layer, Layer):
            raise ValueError(f"{type(self).__name__} wraps a keras Layer instance, got {layer!r}")
        super().__init__(**kwargs)
        self.layer = layer

    def build(self, input_shape=None):
        if not self.layer.built:
            self.layer.build(input_shape)
            self.layer.built = True
        self.built = True

    def call(self, *args, **kwargs):
        return self.layer(*args, **kwargs)

    def get_config(self):
        from tensorweave.keras.layers import serialize
        return {**super().get_config(), "layer": serialize(self.layer)}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        from tensorweave.keras.layers import deserialize
        config = dict(config)
        config["layer"] = deserialize(config["layer"], custom_objects)
        return cls(**config)


class TimeDistributed(Wrapper):
    def __init__(self, layer, **kwargs):
        super().__init__(layer, **kwargs)
        self.supports_masking = True

    def build(self, input_shape):
        if len(input_shape) < 3:
            raise ValueError(f"TimeDistributed layer '{self.name}' needs inputs of rank >= 3 (batch, time, ...), "
                             f"got shape {tuple(input_shape)}")
        if not self.layer.built:
            self.layer.build((None,) + tuple(input_shape[2:]))
            self.layer.built = True
        self.built = True

    def call(self, inputs, training=None, mask=None):
        dims = inputs.shape.as_list()
        t = dims[1] if dims[1] is not None else tw.shape(inputs)[1]
        inner = dims[2:]
        folded = tw.reshape(inputs, [-1] + [d if d is not None else -1 for d in inner]) if None not in inner else \
            tw.reshape(inputs, tw.concat([[-1], tw.shape(inputs)[2:]], 0))
        kwargs = {}
        if self.layer._call_has_training:
            kwargs["training"] = training
        if mask is not None and self.layer._call_has_mask:
            kwargs["mask"] = tw.reshape(mask, [-1] + [d for d in mask.shape.as_list()[2:]])
        out = self.layer(folded, **kwargs)

        def unfold(y):
            rest = y.shape.as_list()[1:]
            if None not in rest and not isinstance(t, tw.Tensor):
                return tw.reshape(y, [-1, t] + rest)
            return tw.reshape(y, tw.concat([tw.shape(inputs)[:2], tw.shape(y)[1:]], 0))
        return nest.map_structure(unfold, out)

    def compute_mask(self, inputs, mask=None):
        return mask


class Pipeline(Layer):
    """Applies its layers in order (Keras' preprocessing ``Pipeline``), passing ``training`` on."""

    def __init__(self, layers, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self._stages = list(layers)

    @property
    def layers(self):
        return list(self._stages)

    def call(self, inputs, training=None):
        x = inputs
        for layer in self._stages:
            x = layer(x, training=training) if layer._call_has_training else layer(x)
        return x

    def get_config(self):
        from tensorweave.keras.layers import serialize
        return {**super().get_config(), "layers": [serialize(layer) for layer in self.layers]}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        from tensorweave.keras.layers import deserialize
        config = dict(config)
        config["layers"] = [deserialize(c, custom_objects) for c in config["layers"]]
        return cls(**config)
