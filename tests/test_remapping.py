"""The ``remapping`` graph pass (runtime/passes/remapping.py) and its fused kernels
(kernels/cpu/fused_kernels.py): the fused plans give the unfused plans' results bit for bit,
and nodes are fused only where nothing else can see the values that disappear."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import fused_kernels, nn_kernels
from test_graph_passes import _plan, _run, _types, options

tf1 = tw.compat.v1
RNG = np.random.default_rng(11)


def _off_on(fetches, feeds, values):
    off = _run(_plan(fetches, feeds, remapping=False), values)
    plan = _plan(fetches, feeds)
    return off, _run(plan, values), _types(plan)


def _same(off, on):
    for a, b in zip(off, on):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(b, a)


def _conv_layer(dtype, relu=True, data_format="NHWC"):
    g = tw.Graph()
    with g.as_default():
        shape = [3, 9, 8, 4] if data_format == "NHWC" else [3, 4, 9, 8]
        x = tf1.placeholder(dtype, shape)
        f = tw.constant(RNG.normal(size=(3, 3, 4, 5)).astype(dtype.np_dtype))
        b = tw.constant(RNG.normal(size=5).astype(dtype.np_dtype))
        y = tw.nn.bias_add(tw.nn.conv2d(x, f, 1, "SAME", data_format=data_format), b, data_format=data_format)
        if relu:
            y = tw.nn.relu(y)
    return g, x, y, shape


@pytest.mark.parametrize("dtype", [tw.float32, tw.float64])
@pytest.mark.parametrize("relu", [True, False])
def test_conv_bias_relu_become_one_node_with_the_same_bits(dtype, relu):
    g, x, y, shape = _conv_layer(dtype, relu)
    xv = RNG.normal(size=shape).astype(dtype.np_dtype)
    xv[0, 0, 0, 0] = np.nan   # NaN propagates through the fused ReLU as through np.maximum
    off, on, types = _off_on([y], [x], [xv])
    assert "FusedConv2D" in types and "BiasAdd" not in types and "Relu" not in types
    assert np.isnan(on[0]).any()
    _same(off, on)


def test_channels_first_convolutions_are_not_fused():
    g, x, y, shape = _conv_layer(tw.float32, data_format="NCHW")
    off, on, types = _off_on([y], [x], [RNG.normal(size=shape).astype(np.float32)])
    assert "FusedConv2D" not in types
    _same(off, on)


@pytest.mark.parametrize("read_elsewhere", ["matmul", "bias_add"])
def test_values_read_elsewhere_or_fetched_stop_the_fusion(read_elsewhere):
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(tw.float32, [4, 6])
        w = tw.constant(RNG.normal(size=(6, 3)).astype(np.float32))
        mm = tw.matmul(x, w)
        pre = tw.nn.bias_add(mm, tw.constant([0.5, -0.5, 0.0]))
        y = tw.nn.relu(pre)
        seen = mm if read_elsewhere == "matmul" else pre
        doubled = seen * 2.0
    xv = RNG.normal(size=(4, 6)).astype(np.float32)
    off, on, types = _off_on([y, doubled], [x], [xv])
    _same(off, on)
    if read_elsewhere == "matmul":
        assert "FusedMatMul" not in types
    else:   # the MatMul and BiasAdd still fuse; the ReLU stays apart
        assert "FusedMatMul" in types and "Relu" in types
    off, on, types = _off_on([y, seen], [x], [xv])    # fetched: the same
    _same(off, on)


def test_relu_grad_and_bias_grad_become_one_node_with_the_same_bits():
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(tw.float32, [16, 7])
        w = tw.constant(RNG.normal(size=(7, 5)).astype(np.float32))
        b = tw.constant(RNG.normal(size=5).astype(np.float32))
        h = tw.nn.relu(tw.nn.bias_add(tw.matmul(x, w), b))
        loss = tw.reduce_sum(h * h)
        gw, gb = tw.gradients(loss, [w, b])
    off, on, types = _off_on([loss, gw, gb], [x], [RNG.normal(size=(16, 7)).astype(np.float32)])
    assert "FusedReluGradBiasAddGrad" in types and "BiasAddGrad" not in types
    assert "FusedMatMul" in types
    _same(off, on)


def test_switched_off():
    g, x, y, shape = _conv_layer(tw.float32)
    assert "FusedConv2D" not in _types(_plan([y], [x], remapping=False))
    assert _plan([y], [x]).pass_stats.get("remapping") == 1


def test_keras_cnn_training_is_bit_identical_with_and_without_remapping():
    xs = RNG.normal(size=(8, 8, 8, 1)).astype(np.float32)
    ys = RNG.integers(0, 3, size=8).astype(np.int32)

    def train(on):
        with options(remapping=on):
            tw.keras.utils.set_random_seed(3)
            L = tw.keras.layers
            model = tw.keras.Sequential([tw.keras.Input((8, 8, 1)), L.Conv2D(4, 3, activation="relu"),
                                         L.MaxPooling2D(2), L.Flatten(), L.Dense(8, activation="relu"),
                                         L.Dense(3)])
            model.compile(optimizer=tw.keras.optimizers.Adam(1e-2),
                          loss=tw.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            losses = [float(model.train_on_batch(xs, ys)) for _ in range(3)]
            return losses, model.get_weights()
    try:
        loss_off, w_off = train(False)
        loss_on, w_on = train(True)
    finally:
        tw.random.set_seed(None)
    assert loss_on == loss_off
    for a, b in zip(w_on, w_off):
        np.testing.assert_array_equal(a, b)


# ---- the kernels against NumPy ---------------------------------------------------------------------
def test_fused_matmul_matches_numpy_including_transposes():
    a, w = RNG.normal(size=(6, 4)), RNG.normal(size=(5, 6))
    b = RNG.normal(size=5)
    got = fused_kernels.fused_matmul(a, w, b, True, True, True)
    np.testing.assert_allclose(got, np.maximum(a.T @ w.T + b, 0), rtol=1e-12)
    with pytest.raises(ValueError, match=r"FusedMatMul: bias float64\[4\] must be a vector of the output's 5"):
        fused_kernels.fused_matmul(a, w, b[:4], True, True, False)


def test_grouped_convolution_with_a_fused_bias():
    x, f = RNG.normal(size=(2, 5, 5, 4)), RNG.normal(size=(3, 3, 2, 6))   # two groups
    b = RNG.normal(size=6)
    plain = fused_kernels.conv_forward(x, f, [1, 1], [1, 1], "VALID", "NHWC")
    got = fused_kernels.fused_conv(x, f, b, [1, 1], [1, 1], "VALID", "NHWC", True)
    np.testing.assert_array_equal(got, np.maximum(plain + b, 0))


def test_relu_grad_bias_add_grad_kernel_matches_numpy():
    g, y = RNG.normal(size=(4, 3, 3, 6)).astype(np.float32), RNG.normal(size=(4, 3, 3, 6)).astype(np.float32)
    dz, db = fused_kernels.relu_grad_bias_add_grad(g, y, "NHWC")
    ref = np.where(y > 0, g, 0)
    np.testing.assert_array_equal(dz, ref)
    np.testing.assert_allclose(db, ref.astype(np.float64).sum(axis=(0, 1, 2)), rtol=1e-6)
    dz2, db2 = fused_kernels.relu_grad_bias_add_grad(g[..., ::2], y[..., ::2], "NHWC")   # strided: fallback
    np.testing.assert_array_equal(dz2, ref[..., ::2])
    np.testing.assert_allclose(db2, ref[..., ::2].astype(np.float64).sum(axis=(0, 1, 2)), rtol=1e-6)


def test_bias_add_grad_sums_in_float64():
    # 2**24 + 1 ones: a float32 running sum stops at 2**24
    g = np.ones((2 ** 24 + 1, 1), np.float32)
    assert float(nn_kernels._bias_add_grad(g, "NHWC")[0]) == float(np.float32(2 ** 24 + 1))


def test_a_fed_relu_gradient_is_not_fused():
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(tw.float32, [4, 3])
        b = tw.constant([1.0, -1.0, 0.5])
        pre = tw.nn.bias_add(x, b)
        h = tw.nn.relu(pre)
        dz, db = tw.gradients(tw.reduce_sum(h * h), [pre, b])
    assert dz.op.type == "ReluGrad" and db.op.type == "BiasAddGrad" and db.op.inputs[0] is dz
    xv = RNG.normal(size=(4, 3)).astype(np.float32)
    fed = np.full((4, 3), 2.0, np.float32)
    plan = _plan([db], [x, dz])
    assert "FusedReluGradBiasAddGrad" not in _types(plan)
    np.testing.assert_array_equal(_run(plan, [xv, fed])[0], [8.0, 8.0, 8.0])


@pytest.mark.parametrize("dtype", [tw.float32, tw.float64])
def test_cross_entropy_and_its_gradient_become_one_node_with_the_same_bits(dtype):
    g = tw.Graph()
    with g.as_default():
        logits = tf1.placeholder(dtype, [6, 5])
        labels = tf1.placeholder(tw.int32, [6])
        loss = tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        total = tw.reduce_sum(loss * tw.range(1.0, 7.0, dtype=dtype))
        grad = tw.gradients(total, [logits])[0]
        forward_only = tw.exp(logits)
        alone = tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=forward_only)
    values = [RNG.normal(size=(6, 5)).astype(dtype.np_dtype) * 3, np.array([0, 4, 2, 2, 1, 3], np.int32)]
    off, on, types = _off_on([total, grad], [logits, labels], values)
    _same(off, on)
    assert types.count("FusedSparseSoftmaxCrossEntropy") == 1
    assert "SparseSoftmaxCrossEntropyGrad" not in types and "SparseSoftmaxCrossEntropyWithLogits" not in types
    # without a gradient in the plan the loss stays as it is
    _, _, types = _off_on([alone], [logits, labels], values)
    assert types.count("SparseSoftmaxCrossEntropyWithLogits") == 1 and "FusedSparseSoftmaxCrossEntropy" not in types
    # a bad label is reported by the fused node too
    with pytest.raises(tw.errors.InvalidArgumentError, match="label value of 5"):
        _run(_plan([total, grad], [logits, labels]), [values[0], np.array([0, 5, 2, 2, 1, 3], np.int32)])
