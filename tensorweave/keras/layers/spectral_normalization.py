"""``SpectralNormalization`` (Miyato et al., 2018): wraps a layer with a ``kernel`` (or
``embeddings``) and, at each training call, divides that kernel by its largest singular value,
estimated by ``power_iterations`` steps of power iteration from the persistent ``vector_u``
(Keras 3's layer: the kernel variable itself is rescaled, so inference uses the last one).

>>> import numpy as np
>>> from tensorweave import keras
>>> sn = keras.layers.SpectralNormalization(keras.layers.Dense(3), power_iterations=30)
>>> _ = sn(np.ones((2, 4), "float32"), training=True)
>>> round(float(np.linalg.svd(sn.layer.kernel.numpy(), compute_uv=False)[0]), 3)
1.0
"""
import tensorweave as tw
from tensorweave.keras import initializers
from tensorweave.keras.layers.wrappers import Wrapper


def _unit(x):
    return x * tw.math.rsqrt(tw.maximum(tw.reduce_sum(tw.square(x)), 1e-7))


class SpectralNormalization(Wrapper):
    def __init__(self, layer, power_iterations=1, **kwargs):
        super().__init__(layer, **kwargs)
        if power_iterations <= 0:
            raise ValueError(f"`power_iterations` should be greater than zero. Received: "
                             f"`power_iterations={power_iterations}`")
        self.power_iterations = power_iterations

    def build(self, input_shape):
        super().build(input_shape)
        kernel = getattr(self.layer, "kernel", None)
        if kernel is None:
            kernel = getattr(self.layer, "embeddings", None)
        if kernel is None:
            raise ValueError(f"{type(self.layer).__name__} object has no attribute 'kernel' nor 'embeddings'")
        self._kernel = kernel
        self.kernel_shape = tuple(kernel.shape.as_list())
        self.vector_u = self.add_weight(shape=(1, self.kernel_shape[-1]),
                                        initializer=initializers.TruncatedNormal(stddev=0.02), trainable=False,
                                        name="vector_u", dtype=kernel.dtype)

    def normalized_weights(self):
        """``(vector_u, kernel / sigma)`` after the power iterations (no gradient through ``u, v``)."""
        weights = tw.reshape(self._kernel, [-1, self.kernel_shape[-1]])
        u = tw.identity(self.vector_u)
        for _ in range(self.power_iterations):
            v = _unit(tw.matmul(u, weights, transpose_b=True))
            u = _unit(tw.matmul(v, weights))
        u, v = tw.stop_gradient(u), tw.stop_gradient(v)
        sigma = tw.matmul(tw.matmul(v, weights), u, transpose_b=True)
        return u, tw.reshape(self._kernel / sigma, self.kernel_shape)

    def call(self, inputs, training=False):
        if training:
            u, kernel = self.normalized_weights()
            zero = tw.reduce_all(tw.equal(self._kernel, 0))      # an all-zero kernel has no direction
            self.vector_u.assign(tw.where(zero, tw.identity(self.vector_u), u))
            self._kernel.assign(tw.where(zero, tw.identity(self._kernel), kernel))
        return tw.cast(self.layer(inputs), tw.convert_to_tensor(inputs).dtype)

    def compute_output_shape(self, input_shape):
        return self.layer.compute_output_shape(input_shape)

    def get_config(self):
        return {**super().get_config(), "power_iterations": self.power_iterations}
