"""The remapping pass folds a constant scale after a softmax gradient into ``SoftmaxGrad``
(``runtime/passes/remapping.py``): the same bits as the unfused plan, and no fold where the
gradient is seen elsewhere, the scale is not a constant scalar, or the gradient already scales."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.ops.softmax_grad_ops import softmax_grad
from test_graph_passes import _plan, _run, _types

tf1 = tw.compat.v1
RNG = np.random.default_rng(1814)


@pytest.fixture(autouse=True)
def _fused_softmax_gradient(monkeypatch):
    from tensorweave.ops import softmax_grad_ops
    monkeypatch.setattr(softmax_grad_ops, "FUSED", True)     # off by default (see its FUSED)


def _graph(scale, dtype=tw.float32, fetch_grad=False, left=False):
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(dtype, [3, 7])
        w = tw.constant(np.cos(np.arange(21.0)).reshape(3, 7).astype(dtype.np_dtype))
        y = tw.nn.softmax(x)
        sg = softmax_grad(y, w)
        c = tw.constant(np.asarray(scale, dtype.np_dtype))
        out = c * sg if left else sg * c
    return x, [out, sg] if fetch_grad else [out]


def _off_on(x, fetches, dtype=np.float32):
    xv = RNG.normal(size=(3, 7)).astype(dtype)
    off = _run(_plan(fetches, [x], remapping=False), [xv])
    plan = _plan(fetches, [x])
    on = _run(plan, [xv])
    for a, b in zip(off, on):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    return _types(plan)


@pytest.mark.parametrize("dtype", [tw.float32, tw.float64])
@pytest.mark.parametrize("left", [False, True])
def test_constant_scale_folds_into_the_softmax_gradient_with_the_same_bits(dtype, left):
    x, fetches = _graph(0.125 if dtype is tw.float32 else 0.3, dtype, left=left)
    types = _off_on(x, fetches, dtype.np_dtype)
    assert types.count("SoftmaxGrad") == 1 and "Mul" not in types


def test_the_gradient_of_a_scaled_softmax_is_one_node():
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(tw.float32, [3, 7])
        loss = tw.reduce_sum(tw.nn.softmax(x * 0.125) * tw.constant(np.cos(np.arange(21.0)).reshape(3, 7), tw.float32))
        dx = tw.gradients(loss, [x])[0]
    types = _off_on(x, [dx])
    assert types == ["Mul", "Softmax", "SoftmaxGrad"]     # the forward's scale, the softmax, its gradient


@pytest.mark.parametrize("case", ["fetched", "vector", "twice"])
def test_no_fold_where_the_gradient_is_seen_or_the_scale_is_not_a_constant_scalar(case):
    if case == "fetched":
        x, fetches = _graph(0.5, fetch_grad=True)
    elif case == "vector":
        x, fetches = _graph(np.linspace(0.5, 2.0, 7))
    else:   # a gradient already scaled (its own scale attr) keeps the Mul: scale * c would round
        g = tw.Graph()
        with g.as_default():
            x = tf1.placeholder(tw.float32, [3, 7])
            sg = softmax_grad(tw.nn.softmax(x), tw.ones([3, 7]), scale=3.0)
            fetches = [sg * tw.constant(np.float32(0.1))]
    types = _off_on(x, fetches)
    assert "Mul" in types
