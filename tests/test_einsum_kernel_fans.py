"""EinsumDense and MultiHeadAttention kernels are initialised with Keras 3's einsum fans (issue 18).

Keras 3 (``EinsumDense.build``) gives a VarianceScaling initializer the kernel's input and output axes
from the equation, so a ``(256, 4, 64)`` attention projection has fan_in 256 and fan_out 256, not the
convolution rule's 1024 and 16384; before, tensorweave's attention kernels were 5.8x smaller than Keras'
(the encoder2 benchmark's loss curve differed from Keras 3's on that account alone).
"""
import math

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.keras import initializers
from tensorweave.keras.layers.einsum_dense import kernel_initializer_for

keras = tw.keras


def _glorot_limit(fan_in, fan_out):
    return math.sqrt(6.0 / (fan_in + fan_out))


def _assert_uniform_limit(w, limit):
    w = np.asarray(w)
    # tens of thousands of uniform draws: the largest lies within 1 % of the limit
    assert np.abs(w).max() <= limit * (1 + 1e-6)
    assert np.abs(w).max() > 0.99 * limit


def test_einsum_dense_kernel_fans_follow_the_equation():
    keras.utils.set_random_seed(0)
    layer = keras.layers.EinsumDense("abc,cde->abde", output_shape=(None, 4, 64), bias_axes="de")
    layer(np.zeros((2, 3, 256), "float32"))
    _assert_uniform_limit(layer.kernel.numpy(), _glorot_limit(256, 4 * 64))
    # the layer's config keeps the initializer as given (Keras 3 too)
    assert layer.get_config()["kernel_initializer"]["config"].get("input_axes") is None


def test_multi_head_attention_kernels_have_keras_scale():
    keras.utils.set_random_seed(0)
    mha = keras.layers.MultiHeadAttention(num_heads=4, key_dim=64)
    x = np.zeros((1, 5, 256), "float32")
    mha(x, x)
    by_name = {w.name.split("/")[-2]: w.numpy() for w in mha.weights if "kernel" in w.name}
    assert set(by_name) == {"query", "key", "value", "attention_output"}
    for name, w in by_name.items():
        _assert_uniform_limit(w, _glorot_limit(256, 256))


def test_other_initializers_and_given_axes_are_kept():
    normal = initializers.RandomNormal(stddev=0.1)
    assert kernel_initializer_for(normal, "abc,cd->abd") is normal
    given = initializers.HeNormal(input_axes=[0], output_axes=[1])
    assert kernel_initializer_for(given, "abc,cde->abde") is given
    he = kernel_initializer_for(initializers.HeUniform(seed=3), "abcd,cde->abe")
    assert (type(he), he.seed, he.input_axes, he.output_axes) == (initializers.HeUniform, 3, [0, 1], [2])


@pytest.mark.parametrize("equation, shape, fans", [("ab,bc->ac", (8, 6), (8, 6)),
                                                    ("abcd,cde->abe", (5, 6, 7), (30, 7))])
def test_fans_of_the_updated_initializer(equation, shape, fans):
    init = kernel_initializer_for(initializers.GlorotUniform(), equation)
    assert initializers._fans(shape, init.input_axes, init.output_axes) == fans
