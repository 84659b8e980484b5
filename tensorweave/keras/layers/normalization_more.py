"""GroupNormalization, UnitNormalization, RMSNormalization (Keras 3's arguments and weights).

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.layers.UnitNormalization()(np.array([[3.0, 4.0]], "float32")).numpy().tolist()
[[0.6000000238418579, 0.800000011920929]]
"""
import tensorweave as tw
from tensorweave.keras import initializers, regularizers
from tensorweave.keras.engine.layer import Layer


def _axes(axis):
    return [axis] if isinstance(axis, int) else list(axis)


class GroupNormalization(Layer):
    """Normalises each of ``groups`` channel groups over its channels and all non-batch axes."""

    def __init__(self, groups=32, axis=-1, epsilon=1e-3, center=True, scale=True, beta_initializer="zeros",
                 gamma_initializer="ones", beta_regularizer=None, gamma_regularizer=None, beta_constraint=None,
                 gamma_constraint=None, **kwargs):
        super().__init__(**kwargs)
        self.groups, self.axis, self.epsilon = int(groups), int(axis), float(epsilon)
        self.center, self.scale = center, scale
        self.beta_initializer = initializers.get(beta_initializer)
        self.gamma_initializer = initializers.get(gamma_initializer)
        self.beta_regularizer = regularizers.get(beta_regularizer)
        self.gamma_regularizer = regularizers.get(gamma_regularizer)
        self.beta_constraint, self.gamma_constraint = beta_constraint, gamma_constraint
        self.supports_masking = True

    def build(self, input_shape):
        c = input_shape[self.axis]
        if c is None or c % self.groups:
            raise ValueError(f"GroupNormalization layer '{self.name}': the number of channels ({c}) must be a "
                             f"multiple of groups ({self.groups}); input shape {tuple(input_shape)}")
        self.gamma = self.add_weight(shape=(c,), name="gamma", initializer=self.gamma_initializer,
                                     regularizer=self.gamma_regularizer, constraint=self.gamma_constraint) \
            if self.scale else None
        self.beta = self.add_weight(shape=(c,), name="beta", initializer=self.beta_initializer,
                                    regularizer=self.beta_regularizer, constraint=self.beta_constraint) \
            if self.center else None
        self.built = True

    def call(self, inputs):
        r = inputs.shape.rank
        ax = self.axis % r
        x = inputs if ax == r - 1 else tw.transpose(inputs, [i for i in range(r) if i != ax] + [ax])
        dims = x.shape.as_list()
        c = dims[-1]
        if None in dims[1:]:
            grouped = tw.reshape(x, tw.concat([tw.shape(x)[:-1], [self.groups, c // self.groups]], 0))
        else:  # keeps the static shape when only the batch is unknown
            grouped = tw.reshape(x, [-1] + dims[1:-1] + [self.groups, c // self.groups])
        red = list(range(1, r - 1)) + [r]
        mean = tw.reduce_mean(grouped, axis=red, keepdims=True)
        var = tw.reduce_mean(tw.square(grouped - mean), axis=red, keepdims=True)
        y = (grouped - mean) * tw.rsqrt(var + self.epsilon)
        y = tw.reshape(y, tw.shape(x) if None in dims[1:] else [-1] + dims[1:])
        if self.gamma is not None:
            y = y * self.gamma
        if self.beta is not None:
            y = y + self.beta
        if ax != r - 1:
            inv = list(range(r - 1))
            inv.insert(ax, r - 1)
            y = tw.transpose(y, inv)
        return y

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "groups": self.groups, "axis": self.axis, "epsilon": self.epsilon,
                "center": self.center, "scale": self.scale,
                "beta_initializer": initializers.serialize(self.beta_initializer),
                "gamma_initializer": initializers.serialize(self.gamma_initializer),
                "beta_regularizer": regularizers.serialize(self.beta_regularizer),
                "gamma_regularizer": regularizers.serialize(self.gamma_regularizer)}


class UnitNormalization(Layer):
    """Scales to unit L2 norm along ``axis``."""

    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        self.axis = _axes(axis)
        self.supports_masking = True

    def call(self, inputs):
        return tw.nn.l2_normalize(inputs, axis=self.axis)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "axis": self.axis}


class RMSNormalization(Layer):
    """``x / sqrt(mean(x^2) + epsilon) * scale`` along ``axis``."""

    def __init__(self, axis=-1, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.axis = _axes(axis)
        self.epsilon = float(epsilon)
        self.supports_masking = True

    def build(self, input_shape):
        self.scale = self.add_weight(shape=tuple(input_shape[a] for a in self.axis), name="scale",
                                     initializer="ones")
        self.built = True

    def call(self, inputs):
        r = inputs.shape.rank
        axes = [a % r for a in self.axis]
        shape = [inputs.shape.as_list()[i] if i in axes else 1 for i in range(r)]
        y = inputs * tw.rsqrt(tw.reduce_mean(tw.square(inputs), axis=axes, keepdims=True) + self.epsilon)
        return y * tw.reshape(self.scale, shape)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "axis": self.axis, "epsilon": self.epsilon}
