"""Normalization layers: BatchNormalization and LayerNormalization (Keras 3 arguments and defaults).

``BatchNormalization`` normalizes with the statistics of the batch while training
(``training=True``) and updates its non-trainable ``moving_mean``/``moving_variance`` with
``assign`` (``moving = moving * momentum + batch * (1 - momentum)``); in inference it uses the
moving statistics. As in Keras 3, a layer with ``trainable=False`` always runs in inference mode
(that is how a pretrained BN is frozen for fine-tuning).

>>> import numpy as np
>>> from tensorweave.keras.layers.normalization import BatchNormalization
>>> bn = BatchNormalization(momentum=0.5)
>>> y = bn(np.array([[0.0], [2.0]], np.float32), training=True)
>>> [round(float(v), 4) for v in y.numpy().ravel()]
[-0.9995, 0.9995]
>>> bn.moving_mean.numpy().tolist(), bn.moving_variance.numpy().tolist()
([0.5], [1.0])
"""
import os
import warnings

import tensorweave as tw
from tensorweave.keras import initializers, regularizers
from tensorweave.keras.engine.layer import InputSpec, Layer
from tensorweave.keras.layers.conv import _serialize_constraint
from tensorweave.ops.batch_norm_ops import batch_norm_training
from tensorweave.ops.layer_norm_ops import layer_norm

__all__ = ["BatchNormalization", "LayerNormalization"]

#: ``LayerNormalization`` over trailing axes as the fused ``LayerNorm`` op (read when the layer is
#: called); ``TW_FUSED_LAYER_NORM=0``: ``moments`` + ``batch_normalization``, for comparisons
FUSED_LAYER_NORM = os.environ.get("TW_FUSED_LAYER_NORM", "1") != "0"


def _axis_list(axis, ndim, layer):
    axes = [axis] if isinstance(axis, int) else list(axis)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:
            raise ValueError(f"Invalid axis {axis!r} for layer '{layer.name}' ({type(layer).__name__}): inputs have "
                             f"{ndim} dimensions")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"Duplicate axis {axis!r} for layer '{layer.name}'")
    return sorted(out)


def _broadcast(v, ndim, axes):
    """Reshapes a parameter of shape ``[input_shape[a] for a in axes]`` to broadcast against the input."""
    if axes == [ndim - 1]:
        return v  # already broadcasts on the last axis
    shape = [1] * ndim
    for a, d in zip(axes, v.shape.as_list()):
        shape[a] = d
    return tw.reshape(v, shape)


class BatchNormalization(Layer):
    """Normalizes each feature (``axis``, by default the last) to zero mean and unit variance over
    the batch (and all other axes), then scales by ``gamma`` and shifts by ``beta``.

    Weights, in Keras' order: ``gamma``, ``beta`` (trainable), ``moving_mean``,
    ``moving_variance`` (non-trainable). The moving variance is updated with the batch's biased
    variance, as Keras 3. A ``mask`` (``(batch, steps)`` for sequences) leaves masked steps out of
    the batch statistics.

    >>> import numpy as np
    >>> from tensorweave.keras.layers.normalization import BatchNormalization
    >>> bn = BatchNormalization(axis=1)          # channels_first images
    >>> bn(np.ones((2, 3, 4, 4), np.float32)).shape, [w.shape.as_list() for w in bn.weights]
    (TensorShape([2, 3, 4, 4]), [[3], [3], [3], [3]])
    """
    _cast_numeric_inputs = True

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True, beta_initializer="zeros",
                 gamma_initializer="ones", moving_mean_initializer="zeros", moving_variance_initializer="ones",
                 beta_regularizer=None, gamma_regularizer=None, beta_constraint=None, gamma_constraint=None,
                 synchronized=False, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(axis, int):
            raise TypeError(f"Expected an int for the `axis` argument of BatchNormalization, received axis={axis!r}")
        self.axis = int(axis)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.center = bool(center)
        self.scale = bool(scale)
        # on one device the batch statistics already are the global ones
        self.synchronized = bool(synchronized)
        self.beta_initializer = initializers.get(beta_initializer)
        self.gamma_initializer = initializers.get(gamma_initializer)
        self.moving_mean_initializer = initializers.get(moving_mean_initializer)
        self.moving_variance_initializer = initializers.get(moving_variance_initializer)
        self.beta_regularizer = regularizers.get(beta_regularizer)
        self.gamma_regularizer = regularizers.get(gamma_regularizer)
        self.beta_constraint = beta_constraint
        self.gamma_constraint = gamma_constraint
        self.supports_masking = True
        self.gamma = self.beta = None

    def build(self, input_shape):
        ndim = len(input_shape)
        self._axes = _axis_list(self.axis, ndim, self)
        dim = input_shape[self._axes[0]]
        if dim is None:
            raise ValueError(f"Axis {self.axis} of the inputs to layer '{self.name}' (BatchNormalization) must have a "
                             f"known size; received input shape {tuple(input_shape)}")
        shape = (dim,)
        if self.scale:
            self.gamma = self.add_weight(name="gamma", shape=shape, initializer=self.gamma_initializer,
                                         regularizer=self.gamma_regularizer, constraint=self.gamma_constraint)
        if self.center:
            self.beta = self.add_weight(name="beta", shape=shape, initializer=self.beta_initializer,
                                        regularizer=self.beta_regularizer, constraint=self.beta_constraint)
        self.moving_mean = self.add_weight(name="moving_mean", shape=shape, initializer=self.moving_mean_initializer,
                                           trainable=False)
        self.moving_variance = self.add_weight(name="moving_variance", shape=shape,
                                               initializer=self.moving_variance_initializer, trainable=False)
        self.input_spec = InputSpec(ndim=ndim, axes={self.axis: dim})
        self._reduction_axes = [a for a in range(ndim) if a not in self._axes]
        self.built = True

    def _moments(self, x, mask):
        if mask is None:
            return tw.nn.moments(x, axes=self._reduction_axes)
        w = tw.cast(tw.convert_to_tensor(mask), x.dtype)
        while w.shape.rank < x.shape.rank:
            w = tw.expand_dims(w, -1)
        # the weight of each position: 1 where unmasked, broadcast over the features
        w = w * tw.ones_like(x)
        count = tw.reduce_sum(w, axis=self._reduction_axes)
        mean = tw.div_no_nan(tw.reduce_sum(w * x, axis=self._reduction_axes), count)
        centred = x - _broadcast(mean, x.shape.rank, self._axes)
        variance = tw.div_no_nan(tw.reduce_sum(w * tw.square(centred), axis=self._reduction_axes), count)
        return mean, variance

    def call(self, inputs, training=None, mask=None):
        ndim = inputs.shape.rank
        low = inputs.dtype in (tw.float16, tw.bfloat16)
        x = tw.cast(inputs, tw.float32) if low else inputs  # statistics in float32
        fused = training and self.trainable and mask is None and self._axes in ([ndim - 1], [1])
        if fused:
            # one op with a two-pass kernel each way (the composite graph made ~9 passes)
            c = x.shape[self._axes[0]]
            gamma = tw.ones([c], x.dtype) if self.gamma is None else tw.cast(self.gamma, x.dtype)
            beta = tw.zeros([c], x.dtype) if self.beta is None else tw.cast(self.beta, x.dtype)
            y, mean, variance = batch_norm_training(x, gamma, beta, self.epsilon,
                                                    "NHWC" if self._axes == [ndim - 1] else "NCHW")
        if training and self.trainable:
            if not fused:
                mean, variance = self._moments(x, mask)
            m = self.momentum
            vdt = self.moving_mean.dtype
            self.moving_mean.assign(self.moving_mean * m + tw.cast(mean, vdt) * (1.0 - m))
            self.moving_variance.assign(self.moving_variance * m + tw.cast(variance, vdt) * (1.0 - m))
        else:
            mean, variance = self.moving_mean.value(), self.moving_variance.value()

        def b(v):
            return None if v is None else _broadcast(tw.cast(v, x.dtype), ndim, self._axes)
        if not fused:
            y = tw.nn.batch_normalization(x, b(mean), b(variance), b(self.beta), b(self.gamma), self.epsilon)
        return tw.cast(y, inputs.dtype) if low else y

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "axis": self.axis, "momentum": self.momentum, "epsilon": self.epsilon,
                "center": self.center, "scale": self.scale,
                "beta_initializer": initializers.serialize(self.beta_initializer),
                "gamma_initializer": initializers.serialize(self.gamma_initializer),
                "moving_mean_initializer": initializers.serialize(self.moving_mean_initializer),
                "moving_variance_initializer": initializers.serialize(self.moving_variance_initializer),
                "beta_regularizer": regularizers.serialize(self.beta_regularizer),
                "gamma_regularizer": regularizers.serialize(self.gamma_regularizer),
                "beta_constraint": _serialize_constraint(self.beta_constraint),
                "gamma_constraint": _serialize_constraint(self.gamma_constraint),
                "synchronized": self.synchronized}


class LayerNormalization(Layer):
    """Normalizes each example over ``axis`` (by default the last; an int or a list), then scales
    by ``gamma`` and shifts by ``beta`` (both shaped like the normalized axes). Same computation in
    training and inference. ``rms_scaling=True`` is Keras 3's: ``x * rsqrt(var(x) + epsilon) * gamma``
    (the centred variance, an uncentred ``x``, no ``beta``); Keras deprecates it because it is not a
    root mean square: ``RMSNormalization`` is.

    >>> import numpy as np
    >>> from tensorweave.keras.layers.normalization import LayerNormalization
    >>> LayerNormalization(epsilon=0.0)(np.array([[1.0, 3.0]], np.float32)).numpy()
    array([[-1.,  1.]], dtype=float32)
    """
    _cast_numeric_inputs = True

    def __init__(self, axis=-1, epsilon=1e-3, center=True, scale=True, rms_scaling=False, beta_initializer="zeros",
                 gamma_initializer="ones", beta_regularizer=None, gamma_regularizer=None, beta_constraint=None,
                 gamma_constraint=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(axis, (list, tuple)):
            self.axis = [int(a) for a in axis]
        elif isinstance(axis, int):
            self.axis = axis
        else:
            raise TypeError(f"Expected an int or a list/tuple of ints for the argument 'axis', but received: {axis!r}")
        self.epsilon = float(epsilon)
        self.center = bool(center)
        self.scale = bool(scale)
        self.rms_scaling = bool(rms_scaling)
        if self.rms_scaling:    # as Keras 3 warns
            warnings.warn("LayerNormalization(rms_scaling=True) is deprecated (as in Keras 3): it scales the inputs "
                          "by the variance, not the root mean square; use keras.layers.RMSNormalization for that")
        self.beta_initializer = initializers.get(beta_initializer)
        self.gamma_initializer = initializers.get(gamma_initializer)
        self.beta_regularizer = regularizers.get(beta_regularizer)
        self.gamma_regularizer = regularizers.get(gamma_regularizer)
        self.beta_constraint = beta_constraint
        self.gamma_constraint = gamma_constraint
        self.supports_masking = True
        self.gamma = self.beta = None

    def build(self, input_shape):
        ndim = len(input_shape)
        self._axes = _axis_list(self.axis, ndim, self)
        shape = tuple(input_shape[a] for a in self._axes)
        if None in shape:
            raise ValueError(f"The normalized axes {self.axis} of the inputs to layer '{self.name}' "
                             f"(LayerNormalization) must have known sizes; received input shape {tuple(input_shape)}")
        if self.scale:
            self.gamma = self.add_weight(name="gamma", shape=shape, initializer=self.gamma_initializer,
                                         regularizer=self.gamma_regularizer, constraint=self.gamma_constraint)
        if self.center and not self.rms_scaling:
            self.beta = self.add_weight(name="beta", shape=shape, initializer=self.beta_initializer,
                                        regularizer=self.beta_regularizer, constraint=self.beta_constraint)
        self.input_spec = InputSpec(ndim=ndim, axes={a: input_shape[a] for a in self._axes})
        self.built = True

    def call(self, inputs):
        ndim = inputs.shape.rank
        low = inputs.dtype in (tw.float16, tw.bfloat16)
        x = tw.cast(inputs, tw.float32) if low else inputs

        def b(v):
            return None if v is None else _broadcast(tw.cast(v, x.dtype), ndim, self._axes)
        if FUSED_LAYER_NORM and self._axes == list(range(ndim - len(self._axes), ndim)):
            # one op, one pass over each row each way (ops/layer_norm_ops.py); the graph below
            # made ~6 passes forward and ~12 in the gradient
            shape = [x.shape[a] for a in self._axes]
            gamma = tw.ones(shape, x.dtype) if self.gamma is None else tw.cast(self.gamma, x.dtype)
            beta = tw.zeros(shape, x.dtype) if self.beta is None else tw.cast(self.beta, x.dtype)
            y = layer_norm(x, gamma, beta, self.epsilon, self._axes[0], rms=self.rms_scaling)[0]
        elif self.rms_scaling:     # Keras 3.15's formula (keras/src/ops/nn.py _layer_normalization)
            _, variance = tw.nn.moments(x, axes=self._axes, keepdims=True)
            y = x * tw.rsqrt(variance + self.epsilon)
            if self.gamma is not None:
                y = y * b(self.gamma)
        else:
            mean, variance = tw.nn.moments(x, axes=self._axes, keepdims=True)
            y = tw.nn.batch_normalization(x, mean, variance, b(self.beta), b(self.gamma), self.epsilon)
        return tw.cast(y, inputs.dtype) if low else y

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "axis": self.axis, "epsilon": self.epsilon, "center": self.center,
                "scale": self.scale, "rms_scaling": self.rms_scaling,
                "beta_initializer": initializers.serialize(self.beta_initializer),
                "gamma_initializer": initializers.serialize(self.gamma_initializer),
                "beta_regularizer": regularizers.serialize(self.beta_regularizer),
                "gamma_regularizer": regularizers.serialize(self.gamma_regularizer),
                "beta_constraint": _serialize_constraint(self.beta_constraint),
                "gamma_constraint": _serialize_constraint(self.gamma_constraint)}
