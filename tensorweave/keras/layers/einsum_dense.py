"""``EinsumDense``: a dense layer whose kernel contraction is an einsum equation.

>>> import numpy as np
>>> from tensorweave import keras
>>> layer = keras.layers.EinsumDense("abc,cd->abd", output_shape=(None, 5), bias_axes="d")
>>> layer(np.ones((2, 3, 4), "float32")).shape, [w.shape.as_list() for w in layer.weights]
(TensorShape([2, 3, 5]), [[4, 5], [5]])
"""
import re

import tensorweave as tw
from tensorweave.keras import activations, initializers, regularizers
from tensorweave.keras.engine.layer import Layer


def kernel_initializer_for(init, equation):
    """``init`` with the fans of an einsum kernel: Keras 3's rule (``EinsumDense.build``).

    A ``VarianceScaling`` initializer (Glorot, He, LeCun) without ``input_axes``/``output_axes`` gets
    them from ``equation`` (``"in,kernel->out"``): the kernel's axes that appear in the output are
    output units, the others input units. Without this the fans of a ``(256, 4, 64)`` attention kernel
    would follow the convolution rule (fan_in 1024, fan_out 16384) and its weights come out 5.8x
    smaller than Keras'. Other initializers come back unchanged; the layer's config keeps ``init``.

    >>> init = kernel_initializer_for(initializers.GlorotUniform(), "abc,cde->abde")
    >>> init.input_axes, init.output_axes
    ([0], [1, 2])
    """
    if not isinstance(init, initializers.VarianceScaling) or (init.input_axes is not None
                                                              and init.output_axes is not None):
        return init
    _, kernel, out = equation.replace(" ", "").replace("->", ",").split(",")
    config = dict(init.get_config(), input_axes=[i for i, c in enumerate(kernel) if c not in out],
                  output_axes=[i for i, c in enumerate(kernel) if c in out])
    return type(init).from_config(config)


class EinsumDense(Layer):
    def __init__(self, equation, output_shape, activation=None, bias_axes=None, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, kernel_constraint=None,
                 bias_constraint=None, **kwargs):
        for k in ("lora_rank", "lora_alpha", "gptq_unpacked_column_size", "quantization_config"):
            kwargs.pop(k, None)
        activity_regularizer = kwargs.pop("activity_regularizer", None)
        super().__init__(**kwargs)
        m = re.fullmatch(r"([a-zA-Z.]+),([a-zA-Z.]+)->([a-zA-Z.]+)", equation.replace(" ", ""))
        if m is None or "." in equation:
            raise ValueError(f"EinsumDense: equation must look like 'ab,bc->ac' (no ellipsis), got {equation!r}")
        self.equation = equation
        self._in, self._kernel, self._out = m.groups()
        self.partial_output_shape = [output_shape] if isinstance(output_shape, int) or output_shape is None \
            else list(output_shape)
        if len(self.partial_output_shape) != len(self._out) - 1:
            raise ValueError(f"EinsumDense: output_shape {output_shape} must give the {len(self._out) - 1} "
                             f"non-batch dimensions of '{self._out}'")
        self.bias_axes = bias_axes
        if bias_axes and any(c not in self._out for c in bias_axes):
            raise ValueError(f"EinsumDense: bias_axes {bias_axes!r} must be output dimensions of {equation!r}")
        self.activation = activations.get(activation)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.activity_regularizer = regularizers.get(activity_regularizer)
        self.kernel_constraint, self.bias_constraint = kernel_constraint, bias_constraint

    def _out_dims(self, input_shape):
        sizes = dict(zip(self._in, input_shape))
        out = [None]
        for c, d in zip(self._out[1:], self.partial_output_shape):
            out.append(d if d is not None else sizes.get(c))
        out[0] = sizes.get(self._out[0])
        return out

    def build(self, input_shape):
        sizes = dict(zip(self._in, input_shape))
        out = self._out_dims(input_shape)
        sizes.update({c: d for c, d in zip(self._out, out) if c not in sizes})
        kshape = []
        for c in self._kernel:
            if sizes.get(c) is None:
                raise ValueError(f"EinsumDense layer '{self.name}': the size of kernel dimension '{c}' is unknown "
                                 f"for input shape {tuple(input_shape)}")
            kshape.append(sizes[c])
        self.kernel = self.add_weight(shape=tuple(kshape), name="kernel",
                                      initializer=kernel_initializer_for(self.kernel_initializer, self.equation),
                                      regularizer=self.kernel_regularizer, constraint=self.kernel_constraint)
        if self.bias_axes:
            first = min(self._out.index(c) for c in self.bias_axes)
            bshape = [sizes[c] if c in self.bias_axes else 1 for c in self._out[first:]]
            self.bias = self.add_weight(shape=tuple(bshape), name="bias", initializer=self.bias_initializer,
                                        regularizer=self.bias_regularizer, constraint=self.bias_constraint)
        else:
            self.bias = None
        self.built = True

    def call(self, inputs):
        y = tw.einsum(f"{self._in},{self._kernel}->{self._out}", inputs, self.kernel)
        if self.bias is not None:
            y = y + self.bias
        y = self.activation(y)
        if self.activity_regularizer is not None:
            self.add_loss(self.activity_regularizer(y))
        return y

    def compute_output_shape(self, input_shape):
        return tuple(self._out_dims(input_shape))

    def get_config(self):
        return {**super().get_config(), "output_shape": self.partial_output_shape, "equation": self.equation,
                "activation": activations.serialize(self.activation), "bias_axes": self.bias_axes,
                "kernel_initializer": initializers.serialize(self.kernel_initializer),
                "bias_initializer": initializers.serialize(self.bias_initializer),
                "kernel_regularizer": regularizers.serialize(self.kernel_regularizer),
                "bias_regularizer": regularizers.serialize(self.bias_regularizer),
                "activity_regularizer": regularizers.serialize(self.activity_regularizer)}
