"""``tf.compat.v1.layers``: TF1's layers (classes and functions) over the Keras layers.

What TF1 adds to a Keras layer is where its variables live: a TF1 layer opens a variable scope
on its first call (its ``name``, or a fresh ``dense``, ``dense_1``... when unnamed) and makes its
weights with ``get_variable`` there - so they are called ``dense/kernel:0``, land in the graph's
collections, and are shared through scopes (``reuse=True``/``AUTO_REUSE`` on the function or
an enclosing ``variable_scope``). ``training`` may be a Python bool or a boolean tensor;
``batch_normalization`` in training mode puts its moving-average updates in the
``UPDATE_OPS`` collection (run them with the train op, as TF1 programs do).

>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     x = tf.placeholder(tf.float32, [None, 3])
...     h = tf.layers.dense(x, 4, activation=tf.nn.relu)
...     with tf.variable_scope("head"):
...         y = tf.layers.dense(h, 1, name="out")
...     with tf.variable_scope("head", reuse=True):
...         y2 = tf.layers.dense(h, 1, name="out")
>>> [v.name for v in g.get_collection("trainable_variables")]
['dense/kernel:0', 'dense/bias:0', 'head/out/kernel:0', 'head/out/bias:0']
"""
from tensorweave.compat.v1_initializers import ones_initializer, zeros_initializer
from tensorweave.compat.v1_variable_scope import PartitionedVariable, get_variable, variable_scope
from tensorweave.core.tensor import Tensor
from tensorweave.keras import backend as _backend
from tensorweave.keras import initializers as _initializers
from tensorweave.keras import layers as _kl
from tensorweave.keras.engine.layer import InputSpec  # noqa: F401

__all__ = ["Layer", "InputSpec", "Dense", "Dropout", "Flatten", "Conv1D", "Conv2D", "Conv3D", "Conv2DTranspose",
           "Conv3DTranspose", "SeparableConv1D", "SeparableConv2D", "MaxPooling1D", "MaxPooling2D", "MaxPooling3D",
           "AveragePooling1D", "AveragePooling2D", "AveragePooling3D", "BatchNormalization", "dense", "dropout",
           "flatten", "conv1d", "conv2d", "conv3d", "conv2d_transpose", "conv3d_transpose", "separable_conv1d",
           "separable_conv2d", "max_pooling1d", "max_pooling2d", "max_pooling3d", "average_pooling1d",
           "average_pooling2d", "average_pooling3d", "batch_normalization"]


class _TF1Scoped:
    """Mixin (before a Keras layer class): variables by ``get_variable`` in the layer's variable scope."""

    def __init__(self, *args, name=None, _scope=None, _reuse=None, **kwargs):
        self._tf1_base = name or _backend.snake_case(type(self).__name__)
        self._tf1_scope_name, self._tf1_reuse, self._tf1_scope = _scope, _reuse, None
        super().__init__(*args, name=name, **kwargs)

    @property
    def scope_name(self):
        return self._tf1_scope.name if self._tf1_scope is not None else None

    def _capture_scope(self):
        if self._tf1_scope_name is not None or self._tf1_reuse:
            with variable_scope(self._tf1_scope_name or self._tf1_base, auxiliary_name_scope=False) as s:
                self._tf1_scope = s
        else:
            with variable_scope(None, default_name=self._tf1_base, auxiliary_name_scope=False) as s:
                self._tf1_scope = s

    def __call__(self, inputs, *args, **kwargs):
        if self._tf1_scope is None:
            self._capture_scope()
        reuse = True if self.built else self._tf1_reuse
        with variable_scope(self._tf1_scope, reuse=reuse):
            return super().__call__(inputs, *args, **kwargs)

    def apply(self, inputs, *args, **kwargs):
        return self.__call__(inputs, *args, **kwargs)

    def add_weight(self, name=None, shape=None, dtype=None, initializer=None, regularizer=None, trainable=True,
                   constraint=None, partitioner=None, **kwargs):
        var = get_variable(name, shape=shape, dtype=dtype or self._dtype, initializer=_initializers.get(initializer),
                           regularizer=regularizer, trainable=trainable and self.trainable, constraint=constraint,
                           partitioner=partitioner)
        parts = list(var) if isinstance(var, PartitionedVariable) else [var]
        for v in parts:
            v._keras_name = name
            (self._own_trainable if trainable and self.trainable else self._own_non_trainable).append(v)
        return var

    add_variable = add_weight


class Layer(_TF1Scoped, _kl.Layer):
    """Base class of TF1 layers (a Keras layer whose variables live in a variable scope)."""


def _scalar(flag):
    """A training flag as a scalar tensor (a placeholder made without a shape would make every
    ``where`` over it of unknown shape)."""
    from tensorweave.ops.array_ops import reshape
    return reshape(flag, [])


def _training_switch(training, when_training, otherwise):
    """``when_training()`` or ``otherwise()`` for a Python bool, an element-wise choice for a bool tensor."""
    if isinstance(training, Tensor) or hasattr(training, "_is_variable"):
        from tensorweave.ops.math_ops import where
        return where(_scalar(training), when_training(), otherwise())
    return when_training() if training else otherwise()


class Dense(_TF1Scoped, _kl.Dense):
    def __init__(self, units, activation=None, use_bias=True, kernel_initializer=None,
                 bias_initializer=zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
                 **kwargs):
        super().__init__(units, activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
                         bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                         kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, trainable=trainable,
                         name=name, **kwargs)


class Dropout(_TF1Scoped, _kl.Dropout):
    def __init__(self, rate=0.5, noise_shape=None, seed=None, name=None, **kwargs):
        super().__init__(rate, noise_shape=noise_shape, seed=seed, name=name, **kwargs)

    def call(self, inputs, training=False):
        if self.rate == 0:
            return inputs
        from tensorweave.ops.random_ops import dropout as _dropout
        return _training_switch(training, lambda: _dropout(inputs, self.rate, self.noise_shape, self.seed),
                                lambda: inputs)


class Flatten(_TF1Scoped, _kl.Flatten):
    pass


def _conv_class(keras_cls):
    class Conv(_TF1Scoped, keras_cls):
        def __init__(self, filters, kernel_size, *args, kernel_initializer=None,
                     bias_initializer=zeros_initializer(), **kwargs):
            super().__init__(filters, kernel_size, *args, kernel_initializer=kernel_initializer,
                             bias_initializer=bias_initializer, **kwargs)
    Conv.__name__ = Conv.__qualname__ = keras_cls.__name__
    Conv.__doc__ = f"TF1's ``tf.layers.{keras_cls.__name__}`` (Keras' layer with TF1 variable scoping)."
    return Conv


Conv1D = _conv_class(_kl.Conv1D)
Conv2D = _conv_class(_kl.Conv2D)
Conv3D = _conv_class(_kl.Conv3D)
Conv2DTranspose = _conv_class(_kl.Conv2DTranspose)
Conv3DTranspose = _conv_class(_kl.Conv3DTranspose)


class SeparableConv2D(_TF1Scoped, _kl.SeparableConv2D):
    pass


class SeparableConv1D(_TF1Scoped, _kl.SeparableConv1D):
    pass


def _pool_class(keras_cls):
    class Pool(_TF1Scoped, keras_cls):
        def __init__(self, pool_size, strides, padding="valid", data_format="channels_last", name=None, **kwargs):
            super().__init__(pool_size=pool_size, strides=strides, padding=padding, data_format=data_format,
                             name=name, **kwargs)
    Pool.__name__ = Pool.__qualname__ = keras_cls.__name__
    return Pool


MaxPooling1D = _pool_class(_kl.MaxPooling1D)
MaxPooling2D = _pool_class(_kl.MaxPooling2D)
MaxPooling3D = _pool_class(_kl.MaxPooling3D)
AveragePooling1D = _pool_class(_kl.AveragePooling1D)
AveragePooling2D = _pool_class(_kl.AveragePooling2D)
AveragePooling3D = _pool_class(_kl.AveragePooling3D)
MaxPool1D, MaxPool2D, MaxPool3D = MaxPooling1D, MaxPooling2D, MaxPooling3D
AveragePool1D, AveragePool2D, AveragePool3D = AveragePooling1D, AveragePooling2D, AveragePooling3D
Convolution1D, Convolution2D, Convolution3D = Conv1D, Conv2D, Conv3D
Convolution2DTranspose, Convolution3DTranspose = Conv2DTranspose, Conv3DTranspose


class BatchNormalization(_TF1Scoped, _kl.BatchNormalization):
    """TF1's batch normalization: ``training`` (bool or bool tensor) picks batch or moving statistics;
    in training the moving-average updates go to ``UPDATE_OPS`` (in a graph) or run at once (eagerly)."""

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                 beta_initializer=zeros_initializer(), gamma_initializer=ones_initializer(),
                 moving_mean_initializer=zeros_initializer(), moving_variance_initializer=ones_initializer(),
                 beta_regularizer=None, gamma_regularizer=None, beta_constraint=None, gamma_constraint=None,
                 renorm=False, renorm_clipping=None, renorm_momentum=0.99, fused=None, trainable=True,
                 virtual_batch_size=None, adjustment=None, name=None, **kwargs):
        if renorm or virtual_batch_size is not None or adjustment is not None:
            raise NotImplementedError("tf.layers.BatchNormalization: renorm, virtual_batch_size and adjustment are "
                                      "not supported")
        super().__init__(axis=axis, momentum=momentum, epsilon=epsilon, center=center, scale=scale,
                         beta_initializer=beta_initializer, gamma_initializer=gamma_initializer,
                         moving_mean_initializer=moving_mean_initializer,
                         moving_variance_initializer=moving_variance_initializer, beta_regularizer=beta_regularizer,
                         gamma_regularizer=gamma_regularizer, beta_constraint=beta_constraint,
                         gamma_constraint=gamma_constraint, trainable=trainable, name=name, **kwargs)
        self.fused = fused

    def call(self, inputs, training=False):
        import tensorweave as tw
        from tensorweave.core.context import building_graph
        from tensorweave.keras.layers.normalization import _broadcast
        x = inputs
        ndim = x.shape.rank
        use_batch = _scalar(training) if isinstance(training, Tensor) else bool(training) and self.trainable
        if use_batch is False:
            mean, variance = self.moving_mean.value(), self.moving_variance.value()
        else:
            batch_mean, batch_var = self._moments(x, None)
            # TF1's fused kernel (4-D inputs) keeps the unbiased variance in its moving average.
            n = tw.cast(tw.size(x) // tw.size(batch_mean), batch_var.dtype)
            unbiased = batch_var * n / tw.maximum(n - 1.0, 1.0) if ndim == 4 and self.fused is not False \
                else batch_var
            m = self.momentum
            new_mean = self.moving_mean * m + batch_mean * (1.0 - m)
            new_var = self.moving_variance * m + unbiased * (1.0 - m)
            if isinstance(use_batch, Tensor):
                new_mean = tw.where(use_batch, new_mean, self.moving_mean.value())
                new_var = tw.where(use_batch, new_var, self.moving_variance.value())
                mean = tw.where(use_batch, batch_mean, self.moving_mean.value())
                variance = tw.where(use_batch, batch_var, self.moving_variance.value())
            else:
                mean, variance = batch_mean, batch_var
            updates = [self.moving_mean.assign(new_mean), self.moving_variance.assign(new_var)]
            graph = building_graph()
            if graph is not None:
                for u in updates:
                    graph.add_to_collection("update_ops", getattr(u, "op", u))

        def b(v):
            return None if v is None else _broadcast(tw.cast(v, x.dtype), ndim, self._axes)
        return tw.nn.batch_normalization(x, b(mean), b(variance), b(self.beta), b(self.gamma), self.epsilon)


# ---- the functions ------------------------------------------------------------------------------
def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
          bias_initializer=zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
          activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True, name=None,
          reuse=None):
    """``Dense(...)(inputs)`` in the variable scope ``name`` (or a fresh ``dense_N``)."""
    return Dense(units, activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                 bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
                 bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                 kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, trainable=trainable,
                 name=name, _scope=name, _reuse=reuse)(inputs)


def dropout(inputs, rate=0.5, noise_shape=None, seed=None, training=False, name=None):
    """Dropout of ``rate`` when ``training`` (a bool or a bool tensor); the identity otherwise."""
    return Dropout(rate, noise_shape=noise_shape, seed=seed, name=name)(inputs, training=training)


def flatten(inputs, name=None, data_format="channels_last"):
    return Flatten(name=name, data_format=data_format)(inputs)


def _conv_function(cls, doc_name):
    def conv(inputs, filters, kernel_size, strides=1, padding="valid", data_format="channels_last", dilation_rate=1,
             activation=None, use_bias=True, kernel_initializer=None, bias_initializer=zeros_initializer(),
             kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
             bias_constraint=None, trainable=True, name=None, reuse=None):
        kwargs = {} if "transpose" in doc_name else {"dilation_rate": dilation_rate}
        return cls(filters, kernel_size, strides=strides, padding=padding, data_format=data_format,
                   activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                   bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
                   bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                   kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, trainable=trainable,
                   name=name, _scope=name, _reuse=reuse, **kwargs)(inputs)
    conv.__name__ = conv.__qualname__ = doc_name
    conv.__doc__ = f"TF1's ``tf.layers.{doc_name}``: ``{cls.__name__}(...)(inputs)`` in its variable scope."
    return conv


conv1d = _conv_function(Conv1D, "conv1d")
conv2d = _conv_function(Conv2D, "conv2d")
conv3d = _conv_function(Conv3D, "conv3d")
conv2d_transpose = _conv_function(Conv2DTranspose, "conv2d_transpose")
conv3d_transpose = _conv_function(Conv3DTranspose, "conv3d_transpose")


def _separable_function(cls, doc_name, ones):
    def separable(inputs, filters, kernel_size, strides=ones, padding="valid", data_format="channels_last",
                  dilation_rate=ones, depth_multiplier=1, activation=None, use_bias=True,
                  depthwise_initializer=None, pointwise_initializer=None, bias_initializer=zeros_initializer(),
                  depthwise_regularizer=None, pointwise_regularizer=None, bias_regularizer=None,
                  activity_regularizer=None, depthwise_constraint=None, pointwise_constraint=None,
                  bias_constraint=None, trainable=True, name=None, reuse=None):
        return cls(filters, kernel_size, strides=strides, padding=padding, data_format=data_format,
                   dilation_rate=dilation_rate, depth_multiplier=depth_multiplier, activation=activation,
                   use_bias=use_bias, depthwise_initializer=depthwise_initializer,
                   pointwise_initializer=pointwise_initializer, bias_initializer=bias_initializer,
                   depthwise_regularizer=depthwise_regularizer, pointwise_regularizer=pointwise_regularizer,
                   bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                   depthwise_constraint=depthwise_constraint, pointwise_constraint=pointwise_constraint,
                   bias_constraint=bias_constraint, trainable=trainable, name=name, _scope=name,
                   _reuse=reuse)(inputs)
    separable.__name__ = separable.__qualname__ = doc_name
    separable.__doc__ = f"TF1's ``tf.layers.{doc_name}``."
    return separable


separable_conv2d = _separable_function(SeparableConv2D, "separable_conv2d", (1, 1))
separable_conv1d = _separable_function(SeparableConv1D, "separable_conv1d", 1)


def _pool_function(cls, doc_name):
    def pool(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
        return cls(pool_size, strides, padding=padding, data_format=data_format, name=name)(inputs)
    pool.__name__ = pool.__qualname__ = doc_name
    pool.__doc__ = f"TF1's ``tf.layers.{doc_name}``."
    return pool


max_pooling1d = _pool_function(MaxPooling1D, "max_pooling1d")
max_pooling2d = _pool_function(MaxPooling2D, "max_pooling2d")
max_pooling3d = _pool_function(MaxPooling3D, "max_pooling3d")
average_pooling1d = _pool_function(AveragePooling1D, "average_pooling1d")
average_pooling2d = _pool_function(AveragePooling2D, "average_pooling2d")
average_pooling3d = _pool_function(AveragePooling3D, "average_pooling3d")


def batch_normalization(inputs, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                        beta_initializer=zeros_initializer(), gamma_initializer=ones_initializer(),
                        moving_mean_initializer=zeros_initializer(),
                        moving_variance_initializer=ones_initializer(), beta_regularizer=None,
                        gamma_regularizer=None, beta_constraint=None, gamma_constraint=None, training=False,
                        trainable=True, name=None, reuse=None, renorm=False, renorm_clipping=None,
                        renorm_momentum=0.99, fused=None, virtual_batch_size=None, adjustment=None):
    """TF1's ``tf.layers.batch_normalization`` (see ``BatchNormalization``)."""
    return BatchNormalization(axis=axis, momentum=momentum, epsilon=epsilon, center=center, scale=scale,
                              beta_initializer=beta_initializer, gamma_initializer=gamma_initializer,
                              moving_mean_initializer=moving_mean_initializer,
                              moving_variance_initializer=moving_variance_initializer,
                              beta_regularizer=beta_regularizer, gamma_regularizer=gamma_regularizer,
                              beta_constraint=beta_constraint, gamma_constraint=gamma_constraint, renorm=renorm,
                              renorm_clipping=renorm_clipping, renorm_momentum=renorm_momentum, fused=fused,
                              trainable=trainable, virtual_batch_size=virtual_batch_size, adjustment=adjustment,
                              name=name, _scope=name, _reuse=reuse)(inputs, training=training)
