"""The remapping pass folds ``Softmax``'s composite gradient ``y * (g - Sum(g * y, axis, keepdims))``
into one ``SoftmaxGrad`` (``runtime/passes/remapping.py``, issue 18 session 17, tx21): against the
unfused plan and a float64 NumPy reference within a rounding of the row sum, any softmax axis,
float32 and float64, eager = graph; no fold where an intermediate is seen elsewhere, the sum is
over another axis, or the switch is off."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.runtime.passes import remapping
from test_graph_passes import _plan, _run, _types

tf1 = tw.compat.v1
RNG = np.random.default_rng(1721)


def _want(x, w, axis):
    y = np.exp(x - x.max(axis=axis, keepdims=True))
    y /= y.sum(axis=axis, keepdims=True)
    return y * (w - np.sum(w * y, axis=axis, keepdims=True))


def _graph(shape, axis, dtype=tw.float32):
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(dtype, shape)
        w = tw.constant(np.cos(np.arange(np.prod(shape))).reshape(shape).astype(dtype.np_dtype))
        loss = tw.reduce_sum(tw.nn.softmax(x, axis=axis) * w)
        dx = tw.gradients(loss, [x])[0]
    return x, dx, np.cos(np.arange(np.prod(shape))).reshape(shape)


@pytest.mark.parametrize("dtype,tol", [(tw.float32, 2e-6), (tw.float64, 1e-13)])
@pytest.mark.parametrize("shape,axis", [((3, 7), -1), ((2, 3, 5, 6), -1), ((2, 5, 4), 1)])
def test_the_composite_gradient_is_one_node_within_a_rounding(dtype, tol, shape, axis):
    x, dx, w = _graph(shape, axis, dtype)
    xv = RNG.normal(size=shape).astype(dtype.np_dtype)
    plan = _plan([dx], [x])
    types = _types(plan)
    assert types.count("SoftmaxGrad") == 1 and "Sub" not in types and "Sum" not in types
    on = _run(plan, [xv])[0]
    off = _run(_plan([dx], [x], remapping=False), [xv])[0]
    assert on.dtype == off.dtype == dtype.np_dtype
    np.testing.assert_allclose(on, off, rtol=tol, atol=tol)
    np.testing.assert_allclose(on, _want(xv.astype(np.float64), w, axis), rtol=10 * tol, atol=10 * tol)


def _composite(fetch_sum=False, sum_axis=-1, scale_g=False):
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(tw.float32, [4, 6])
        gv = tw.constant(np.sin(np.arange(24.0)).reshape(4, 6).astype(np.float32))
        y = tw.nn.softmax(x)
        s = tw.reduce_sum(gv * y, axis=sum_axis, keepdims=True)
        out = y * ((gv * 2.0 if scale_g else gv) - s)
    return x, [out, s] if fetch_sum else [out]


@pytest.mark.parametrize("case", ["sum fetched", "other axis", "other g"])
def test_no_fold_where_an_intermediate_is_seen_or_the_pattern_differs(case):
    x, fetches = _composite(fetch_sum=case == "sum fetched", sum_axis=0 if case == "other axis" else -1,
                            scale_g=case == "other g")
    plan = _plan(fetches, [x])
    assert "SoftmaxGrad" not in _types(plan)
    xv = RNG.normal(size=(4, 6)).astype(np.float32)
    off = _run(_plan(fetches, [x], remapping=False), [xv])
    for a, b in zip(off, _run(plan, [xv])):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_the_written_out_gradient_folds_too_and_the_switch_turns_it_off(monkeypatch):
    x, fetches = _composite()
    assert _types(_plan(fetches, [x])).count("SoftmaxGrad") == 1
    monkeypatch.setattr(remapping, "SOFTMAX_GRAD", False)
    assert "SoftmaxGrad" not in _types(_plan(fetches, [x]))


def test_eager_equals_graph():
    xv = RNG.normal(size=(2, 3, 8)).astype(np.float32)
    wv = RNG.normal(size=(2, 3, 8)).astype(np.float32)

    def grad(x):
        with tw.GradientTape() as tape:
            tape.watch(x)
            loss = tw.reduce_sum(tw.nn.softmax(x) * wv)
        return tape.gradient(loss, x)
    eager = grad(tw.constant(xv)).numpy()
    graph = tw.function(grad)(tw.constant(xv)).numpy()
    np.testing.assert_allclose(graph, eager, rtol=2e-6, atol=2e-7)
    np.testing.assert_allclose(graph, _want(xv.astype(np.float64), wv, -1), rtol=1e-5, atol=1e-6)
