"""Core layers: Dense, Activation, Dropout, Flatten, Reshape, Permute, Lambda (and the small
op layers that Python operators on KerasTensors create).

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.layers.Dense(2, kernel_initializer="ones")(np.ones((1, 3), np.float32)).numpy()
array([[3., 3.]], dtype=float32)
"""
import numpy as np

import tensorweave as tw
from tensorweave.keras import activations, initializers, regularizers
from tensorweave.keras.engine.layer import InputSpec, Layer, positive_int


class Dense(Layer):
    """``activation(inputs @ kernel + bias)`` on the last axis."""
    _cast_numeric_inputs = True

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(**kwargs)
        self.units = positive_int(units, "units")
        self.activation = activations.get(activation)
        self.use_bias = use_bias
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.activity_regularizer = regularizers.get(activity_regularizer)
        self.kernel_constraint = kernel_constraint
        self.bias_constraint = bias_constraint
        self.input_spec = InputSpec(min_ndim=2)
        self.supports_masking = True

    def build(self, input_shape):
        last = input_shape[-1]
        if last is None:
            raise ValueError(f"The last dimension of the inputs to Dense layer '{self.name}' must be known; "
                             f"got input shape {input_shape}")
        self.kernel = self.add_weight(shape=(last, self.units), initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer, constraint=self.kernel_constraint,
                                      name="kernel")
        self.bias = self.add_weight(shape=(self.units,), initializer=self.bias_initializer,
                                    regularizer=self.bias_regularizer, constraint=self.bias_constraint,
                                    name="bias") if self.use_bias else None
        self.input_spec = InputSpec(min_ndim=2, axes={-1: last})
        self.built = True

    def call(self, inputs):
        rank = inputs.shape.rank
        if rank == 2:
            y = tw.matmul(inputs, self.kernel)
        else:
            y = tw.tensordot(inputs, self.kernel, [[rank - 1], [0]])
        if self.use_bias:
            y = tw.nn.bias_add(y, self.bias)
        y = self.activation(y)
        if self.activity_regularizer is not None:
            self.add_loss(self.activity_regularizer(y))
        return y

    def get_config(self):
        return {**super().get_config(), "units": self.units, "activation": activations.serialize(self.activation),
                "use_bias": self.use_bias, "kernel_initializer": initializers.serialize(self.kernel_initializer),
                "bias_initializer": initializers.serialize(self.bias_initializer),
                "kernel_regularizer": regularizers.serialize(self.kernel_regularizer),
                "bias_regularizer": regularizers.serialize(self.bias_regularizer),
                "activity_regularizer": regularizers.serialize(self.activity_regularizer)}


class Activation(Layer):
    def __init__(self, activation, **kwargs):
        super().__init__(**kwargs)
        self.activation = activations.get(activation)
        self.supports_masking = True

    def call(self, inputs):
        return self.activation(inputs)

    def get_config(self):
        return {**super().get_config(), "activation": activations.serialize(self.activation)}


class Dropout(Layer):
    """Randomly zeroes a ``rate`` fraction of inputs while training (scaling the rest)."""

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0 <= rate < 1:
            raise ValueError(f"Invalid value received for argument `rate`. Expected a float value between 0 "
                             f"and 1 (exclusive of 1). Received: rate={rate}")
        self.rate = float(rate)
        self.noise_shape = noise_shape
        self.seed = seed
        self.supports_masking = True

    def call(self, inputs, training=None):
        if training and self.rate > 0:
            return tw.nn.dropout(inputs, self.rate, noise_shape=self.noise_shape, seed=self.seed)
        return inputs

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "noise_shape": self.noise_shape, "seed": self.seed}


class Flatten(Layer):
    def __init__(self, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.data_format = data_format or "channels_last"
        self.input_spec = InputSpec(min_ndim=1)

    def call(self, inputs):
        x = inputs
        if self.data_format == "channels_first" and x.shape.rank and x.shape.rank > 2:
            x = tw.transpose(x, [0] + list(range(2, x.shape.rank)) + [1])
        rest = x.shape.as_list()[1:]
        if None not in rest:
            return tw.reshape(x, [-1, int(np.prod(rest))])
        return tw.reshape(x, tw.stack([tw.shape(x)[0], -1]))

    def get_config(self):
        return {**super().get_config(), "data_format": self.data_format}


class Reshape(Layer):
    def __init__(self, target_shape, **kwargs):
        super().__init__(**kwargs)
        self.target_shape = tuple(target_shape)
        bad = [d for d in self.target_shape if isinstance(d, bool) or not isinstance(d, (int, np.integer))
               or (d < 1 and d != -1)]
        if bad or self.target_shape.count(-1) > 1:
            raise ValueError(f"Invalid `target_shape` {self.target_shape} for Reshape: expected positive integers "
                             "and at most one -1")

    def build(self, input_shape):
        rest = tuple(input_shape)[1:] if input_shape is not None else (None,)
        target = self.target_shape
        if None in rest or target.count(-1) > 1:
            return
        size, known = int(np.prod(rest)), int(np.prod([d for d in target if d != -1]))
        if (-1 not in target and size != known) or (-1 in target and (known == 0 or size % known)):
            extra = "" if -1 not in target else (", however, the input size cannot by divided by the specified "
                                                 "dimensions in target_shape")
            raise ValueError(f"The total size of the tensor must be unchanged{extra}. Received: "
                             f"input_shape={rest}, target_shape={target}. Hint: layer '{self.name}' (Reshape)")

    def call(self, inputs):
        target = list(self.target_shape)
        rest = inputs.shape.as_list()[1:] if inputs.shape.rank is not None else [None]
        if -1 in target and None not in rest:
            known = int(np.prod([d for d in target if d != -1]))
            target[target.index(-1)] = int(np.prod(rest)) // max(known, 1)
        if -1 not in target:
            return tw.reshape(inputs, [-1] + target)  # keeps the static shape when the batch is unknown
        return tw.reshape(inputs, tw.concat([tw.shape(inputs)[:1], tw.constant(target, tw.int32)], 0))

    def get_config(self):
        return {**super().get_config(), "target_shape": self.target_shape}


class Permute(Layer):
    """Permutes the non-batch dimensions (``dims`` counts from 1)."""

    def __init__(self, dims, **kwargs):
        super().__init__(**kwargs)
        self.dims = tuple(dims)
        if sorted(self.dims) != list(range(1, len(self.dims) + 1)):
            raise ValueError(f"Invalid permutation argument `dims` for Permute Layer. The set of indices in "
                             f"`dims` must be consecutive and start from 1. Received dims={self.dims}")
        self.input_spec = InputSpec(ndim=len(self.dims) + 1)

    def call(self, inputs):
        return tw.transpose(inputs, (0,) + self.dims)

    def get_config(self):
        return {**super().get_config(), "dims": self.dims}


class Lambda(Layer):
    """Wraps a Python function as a layer (not serializable by value: see saving's safe_mode)."""

    def __init__(self, function, output_shape=None, mask=None, arguments=None, **kwargs):
        super().__init__(**kwargs)
        self.function = function
        self.arguments = dict(arguments or {})
        self._output_shape = output_shape

    def call(self, inputs):
        return self.function(inputs, **self.arguments)

    def get_config(self):
        return {**super().get_config(), "function": getattr(self.function, "__name__", repr(self.function)),
                "arguments": self.arguments}


class OpLambda(Layer):
    """A tensorweave op applied to KerasTensors (``x + y``, ``x[:, 0]`` in a functional model)."""

    def __init__(self, fn, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.fn = fn

    def call(self, *inputs):
        return self.fn(*inputs)

    def __call__(self, *args, **kwargs):
        return super().__call__(*args, **kwargs)


class Identity(Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs):
        return inputs
