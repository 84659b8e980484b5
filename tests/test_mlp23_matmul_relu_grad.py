"""An input gradient's product in the ReLU and bias gradients that read it
(``runtime/passes/matmul_relu_grad.py``, ``fused_kernels.matmul_relu_grad_bias_add_grad``, issue 18
session 19, mlp23): ``MatMul -> ReluGrad -> BiasAddGrad`` as one ``FusedMatMulReluGradBiasAddGrad``
node. Same bits as the plan without it (and without remapping), against a float64 NumPy reference
and float64 finite differences, eager = graph, a Keras training step bit for bit; not fused where
the product is seen elsewhere; the overlap pass still pairs the mlp's dW2 with the fused dX2."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import fused_kernels, jit, nn_loops, nn_loops_twins
from tensorweave.runtime import overlap
from tensorweave.runtime.passes import matmul_relu_grad
from test_graph_passes import _plan, _run, _types
from test_mlp18_fused_update import _same as _same_training
from test_mlp18_fused_update import _train

tf1 = tw.compat.v1
RNG = np.random.default_rng(2319)
FUSED = "FusedMatMulReluGradBiasAddGrad"


def _two_layers(dtype, n=12, fetch_product=False, read_product=False):
    """``sum(relu(x @ w1 + b1) @ w2)`` and its gradients with respect to w1 and b1, through the
    hidden layer's input-gradient product ``dh`` (fetched, or read elsewhere, when asked)."""
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(dtype, [n, 7])
        w1 = tf1.placeholder(dtype, [7, 5])
        b1 = tf1.placeholder(dtype, [5])
        w2 = tf1.placeholder(dtype, [5, 3])
        h = tw.nn.relu(tw.nn.bias_add(tw.matmul(x, w1), b1))
        out = tw.matmul(h, w2)
        loss = tw.reduce_sum(out * out)
        dh = tw.gradients(loss, [h])[0]
        gw1, gb1 = tw.gradients(h, [w1, b1], grad_ys=dh)
        fetches = [loss, gw1, gb1]
        if fetch_product:
            fetches.append(dh)
        elif read_product:
            fetches.append(dh * 2.0)
    return fetches, [x, w1, b1, w2]


def _values(dtype, n=12):
    v = [RNG.normal(size=s).astype(dtype.np_dtype) for s in ((n, 7), (7, 5), (5,), (5, 3))]
    v[2][0] = -50.0           # a dead unit: its column of the mask is all zeros
    return v


def _off(monkeypatch, fetches, feeds, values):
    monkeypatch.setattr(matmul_relu_grad, "ENABLED", False)
    plan = _plan(fetches, feeds)
    monkeypatch.setattr(matmul_relu_grad, "ENABLED", True)
    return _run(plan, values), _types(plan)


def _same(a, b):
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("dtype", [tw.float32, tw.float64])
def test_the_product_joins_the_relu_and_bias_gradients_with_the_same_bits(monkeypatch, dtype):
    fetches, feeds = _two_layers(dtype)
    values = _values(dtype)
    plan = _plan(fetches, feeds)
    types = _types(plan)
    assert types.count(FUSED) == 1 and not {"ReluGrad", "BiasAddGrad", "FusedReluGradBiasAddGrad"} & set(types)
    on = _run(plan, values)
    before, before_types = _off(monkeypatch, fetches, feeds, values)
    assert FUSED not in before_types and "FusedReluGradBiasAddGrad" in before_types
    assert before_types.count("MatMul") == types.count("MatMul") + 1
    _same(before, on)
    _same(_run(_plan(fetches, feeds, remapping=False), values), on)


def test_against_a_float64_numpy_reference():
    fetches, feeds = _two_layers(tw.float64)
    x, w1, b1, w2 = values = _values(tw.float64)
    loss, gw1, gb1 = _run(_plan(fetches, feeds), values)
    z = x @ w1 + b1
    h = np.maximum(z, 0)
    out = h @ w2
    dz = np.where(z > 0, (2 * out) @ w2.T, 0.0)
    np.testing.assert_allclose(loss, (out * out).sum(), rtol=1e-13)
    np.testing.assert_allclose(gw1, x.T @ dz, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb1, dz.sum(0), rtol=1e-12, atol=1e-12)
    assert np.all(gb1[0] == 0) and np.all(gw1[:, 0] == 0)          # the dead unit


def test_float64_finite_differences_of_the_fused_plan():
    fetches, feeds = _two_layers(tw.float64, n=4)
    values = _values(tw.float64, n=4)
    plan = _plan(fetches, feeds)
    assert FUSED in _types(plan)
    _, gw1, gb1 = _run(plan, values)
    loss = _plan(fetches[:1], feeds)
    eps = 1e-6
    for index, grad in ((1, gw1), (2, gb1)):
        for pos in [(0, 1), (3, 4), (6, 2)] if index == 1 else [(1,), (3,)]:
            up, down = [v.copy() for v in values], [v.copy() for v in values]
            up[index][pos] += eps
            down[index][pos] -= eps
            fd = (_run(loss, up)[0] - _run(loss, down)[0]) / (2 * eps)
            np.testing.assert_allclose(grad[pos], fd, rtol=1e-6, atol=1e-7)


def test_eager_gradients_equal_the_fused_graphs():
    values = _values(tw.float32)
    x, w1, b1, w2 = (tw.constant(v) for v in values)

    def grads(x, w1, b1, w2):
        with tw.GradientTape() as tape:
            tape.watch([w1, b1])
            out = tw.matmul(tw.nn.relu(tw.nn.bias_add(tw.matmul(x, w1), b1)), w2)
            loss = tw.reduce_sum(out * out)
        return tape.gradient(loss, [w1, b1])
    eager = [g.numpy() for g in grads(x, w1, b1, w2)]
    graph = [g.numpy() for g in tw.function(grads)(x, w1, b1, w2)]
    _same(eager, graph)


@pytest.mark.parametrize("how", ["fetched", "read elsewhere"])
def test_a_product_seen_elsewhere_stays_apart(how):
    fetches, feeds = _two_layers(tw.float32, fetch_product=how == "fetched", read_product=how != "fetched")
    values = _values(tw.float32)
    plan = _plan(fetches, feeds)
    assert FUSED not in _types(plan) and "FusedReluGradBiasAddGrad" in _types(plan)
    _same(_run(_plan(fetches, feeds, remapping=False), values), _run(plan, values))


def test_the_kernel_against_numpy_with_transposes_and_an_infinite_gradient():
    dz = RNG.normal(size=(9, 4)).astype(np.float32)
    w = RNG.normal(size=(6, 4)).astype(np.float32)
    w[2] = np.inf                                  # inf in the product: masked to 0 where the unit is dead
    features = np.maximum(RNG.normal(size=(9, 6)), 0).astype(np.float32)
    features[:, 2] = 0
    with np.errstate(invalid="ignore"):          # (inf - inf in the dead unit's column)
        masked, sums = fused_kernels.matmul_relu_grad_bias_add_grad(dz, w, features, False, True, "NHWC")
        again = fused_kernels.matmul_relu_grad_bias_add_grad(dz.T.copy(), w, features, True, True, "NHWC")
        want = np.where(features > 0, dz @ w.T, 0)
    np.testing.assert_allclose(masked, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(sums, want.astype(np.float64).sum(0), rtol=1e-5)
    assert masked.dtype == sums.dtype == np.float32 and not np.isnan(masked).any()
    _same([masked, sums], list(again))             # (a transposed operand: the same product)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_in_place_mask_loop_and_its_twin_against_numpy(dtype):
    g = RNG.normal(size=(13, 6)).astype(dtype)
    y = RNG.normal(size=(13, 6)).astype(dtype)
    y[0, :3] = [0.0, -0.0, np.nan]                 # not > 0: masked, as ReluGrad's select
    y[1, :2] = [np.finfo(dtype).tiny, np.inf]      # > 0: kept
    want = np.where(y > 0, g, 0)
    compiled = jit.compile_now(nn_loops.relu_mask_column_sums, g, y, np.ones(6))    # (not its twin meanwhile)
    for loop in (compiled, nn_loops_twins.relu_mask_column_sums):
        got, acc = g.copy(), np.ones(6)
        loop(got, y, acc)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(acc, 1 + want.astype(np.float64).sum(0), rtol=1e-12)
        assert not np.signbit(got[0, :3]).any()


def test_mismatched_features_name_the_fused_op():
    with pytest.raises(ValueError, match="FusedMatMulReluGradBiasAddGrad.*must match"):
        fused_kernels.matmul_relu_grad_bias_add_grad(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32),
                                                     np.ones((2, 5), np.float32), False, False, "NHWC")


def test_a_keras_mlp_step_is_bit_identical_and_keeps_its_overlap(monkeypatch):
    on = _train()
    assert on[2].count(FUSED) == 2 and "FusedReluGradBiasAddGrad" not in on[2]
    monkeypatch.setattr(matmul_relu_grad, "ENABLED", False)
    off = _train()
    assert FUSED not in off[2] and off[2].count("FusedReluGradBiasAddGrad") == 2
    _same_training(off, on)
    steps = [(FUSED, (), True), ("MatMul", (), True), ("AddN", (0, 1), False)]
    assert overlap.schedule_of(steps) == [(1, 0, 2)]        # dW2 deferred beside the fused dX2
