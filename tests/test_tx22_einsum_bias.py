"""The remapping pass fuses an ``Einsum`` with the bias add (``BiasAdd``, or ``AddV2`` of a bias
shaped like the product's trailing axes) and ``Relu`` after it into one ``FusedEinsum``
(``runtime/passes/einsum_bias.py``, ``kernels/cpu/einsum_bias_kernels.py``;
issue 18 session 18, tx22): the unfused plan's bits, a NumPy reference, float64 finite
differences through the fused forward, eager = graph, a Keras attention + dense step identical
with the switch on and off; no fusion where the product is seen elsewhere or the addend is no
trailing-axes bias."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.registry import get_op
from tensorweave.kernels.cpu.einsum_bias_kernels import fused_einsum
from tensorweave.runtime.passes import einsum_bias
from test_graph_passes import _plan, _run, _types

tf1 = tw.compat.v1
RNG = np.random.default_rng(2218)
#: kind -> (equation, kernel shape, bias shape); x is [2, 5, 4]
KINDS = {"dense": ("abc,cd->abd", (4, 6), (6,)), "heads": ("abc,cde->abde", (4, 3, 2), (3, 2)),
         "heads, bias first": ("abc,cde->abde", (4, 3, 2), (3, 2)), "output": ("abcd,cde->abe", (5, 4, 3), (3,))}


def _x(kind):
    return (2, 5, 4) if kind != "output" else (2, 6, 5, 4)


def _graph(kind, dtype=tw.float32, relu=False, fetch_product=False, addend=None):
    eq, ws, bs = KINDS[kind]
    w, b = RNG.normal(size=ws), RNG.normal(size=bs if addend is None else addend)
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(dtype, _x(kind))
        wc, bc = (tw.constant(v.astype(dtype.np_dtype)) for v in (w, b))
        if kind == "dense" and addend is None:
            y = tw.tensordot(x, wc, [[2], [0]])
            z = tw.nn.bias_add(y, bc)
        else:
            y = tw.einsum(eq, x, wc)
            z = bc + y if kind == "heads, bias first" else y + bc
        out = tw.nn.relu(z) if relu else z
    return x, [out, y] if fetch_product else [out], (eq, w, b)


def _want(xv, eq, w, b, relu):
    z = np.einsum(eq, xv.astype(np.float64), w) + b
    return np.maximum(z, 0) if relu else z


@pytest.mark.parametrize("dtype,tol", [(tw.float32, 1e-5), (tw.float64, 1e-12)])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("kind", list(KINDS))
def test_the_product_and_its_bias_are_one_node_with_the_unfused_bits(kind, relu, dtype, tol):
    x, fetches, (eq, w, b) = _graph(kind, dtype, relu)
    xv = RNG.normal(size=_x(kind)).astype(dtype.np_dtype)
    plan = _plan(fetches, [x])
    types = _types(plan)
    assert types.count("FusedEinsum") == 1
    assert not {"Einsum", "BiasAdd", "AddV2", "Relu"} & set(types)
    on = _run(plan, [xv])[0]
    off = _run(_plan(fetches, [x], remapping=False), [xv])[0]
    assert on.dtype == off.dtype == dtype.np_dtype and on.shape == off.shape
    np.testing.assert_array_equal(on, off)
    np.testing.assert_allclose(on, _want(xv, eq, w, b, relu), rtol=tol, atol=tol)


@pytest.mark.parametrize("case", ["product fetched", "full-shape addend of another shape", "leading-axes addend"])
def test_no_fusion_where_the_product_is_seen_or_the_addend_is_no_trailing_bias(case):
    addend = {"full-shape addend of another shape": (1, 5, 3, 2), "leading-axes addend": (5, 1, 1)}.get(case)
    x, fetches, _ = _graph("heads", relu=True, fetch_product=case == "product fetched", addend=addend)
    plan = _plan(fetches, [x])
    assert "FusedEinsum" not in _types(plan)
    xv = RNG.normal(size=(2, 5, 4)).astype(np.float32)
    for a, b in zip(_run(_plan(fetches, [x], remapping=False), [xv]), _run(plan, [xv])):
        np.testing.assert_array_equal(a, b)


def test_the_switch_turns_it_off(monkeypatch):
    x, fetches, _ = _graph("dense", relu=True)
    assert "FusedEinsum" in _types(_plan(fetches, [x]))
    monkeypatch.setattr(einsum_bias, "ENABLED", False)
    assert "FusedEinsum" not in _types(_plan(fetches, [x]))


def test_float64_gradients_through_the_fused_forward_match_finite_differences():
    eq, xs, ws, bs = "abc,cde->abde", (2, 3, 4), (4, 2, 3), (2, 3)
    xv, wv, bv = RNG.normal(size=xs), RNG.normal(size=ws), RNG.normal(size=bs)
    cv = RNG.normal(size=(2, 3, 2, 3))
    g = tw.Graph()
    with g.as_default():
        x, w, b = (tf1.placeholder(tw.float64, s) for s in (xs, ws, bs))
        loss = tw.reduce_sum(tw.nn.relu(tw.einsum(eq, x, w) + b) * tw.constant(cv))
        grads = tw.gradients(loss, [x, w, b])
    plan = _plan(grads, [x, w, b])
    assert "FusedEinsum" in _types(plan)
    got = _run(plan, [xv, wv, bv])

    def f(args):
        return float(np.sum(np.maximum(np.einsum(eq, args[0], args[1]) + args[2], 0) * cv))
    for i, v in enumerate((xv, wv, bv)):
        fd = np.zeros_like(v)
        for j in range(v.size):
            hi, lo = [a.copy() for a in (xv, wv, bv)], [a.copy() for a in (xv, wv, bv)]
            hi[i].flat[j] += 1e-6
            lo[i].flat[j] -= 1e-6
            fd.flat[j] = (f(hi) - f(lo)) / 2e-6
        np.testing.assert_allclose(got[i], fd, rtol=1e-6, atol=1e-7)


def test_eager_equals_graph():
    xv, wv = RNG.normal(size=(2, 5, 4)).astype(np.float32), RNG.normal(size=(4, 3, 2)).astype(np.float32)
    bv = RNG.normal(size=(3, 2)).astype(np.float32)

    def f(x):
        return tw.nn.relu(tw.einsum("abc,cde->abde", x, tw.constant(wv)) + tw.constant(bv))
    np.testing.assert_array_equal(tw.function(f)(tw.constant(xv)).numpy(), f(tw.constant(xv)).numpy())


def _keras_steps(monkeypatch, on):
    monkeypatch.setattr(einsum_bias, "ENABLED", on)
    keras = tw.keras
    keras.utils.set_random_seed(3)
    ids = keras.Input((6,), dtype="int32")
    h = keras.layers.Embedding(50, 8)(ids)
    h = keras.layers.LayerNormalization()(keras.layers.Add()([h, keras.layers.MultiHeadAttention(2, 4)(h, h)]))
    h = keras.layers.Dense(8)(keras.layers.Dense(12, activation="relu")(h))
    model = keras.Model(ids, keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(h)))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.BinaryCrossentropy(from_logits=True))
    rng = np.random.default_rng(5)
    x, y = rng.integers(0, 50, (4, 6)).astype(np.int32), rng.integers(0, 2, (4, 1)).astype(np.float32)
    losses = [float(model.train_on_batch(x, y)) for _ in range(3)]
    return losses, [w.numpy() for w in model.weights]


def test_a_keras_attention_and_dense_step_runs_fused_with_the_unfused_bits(monkeypatch):
    calls = []
    kernel = get_op("FusedEinsum").kernels["CPU"]

    def counted(*args, **kwargs):
        calls.append(kwargs["equation"])
        return kernel(*args, **kwargs)
    monkeypatch.setitem(get_op("FusedEinsum").kernels, "CPU", counted)
    on = _keras_steps(monkeypatch, True)
    assert len(set(calls)) >= 2 and len(calls) >= 3 * 4     # (the projections and the dense layers, each step)
    n = len(calls)
    off = _keras_steps(monkeypatch, False)
    assert len(calls) == n
    assert on[0] == off[0]
    for a, b in zip(on[1], off[1]):
        np.testing.assert_array_equal(a, b)


def test_a_bias_of_the_wrong_shape_is_a_clear_error():
    x, w = np.ones((2, 3, 4), np.float32), np.ones((4, 5), np.float32)
    with pytest.raises(ValueError, match=r"FusedEinsum \(abc,cd->abd\): bias float32\[4\] must have the trailing axes "
                                         r"and dtype of the product float32\[2, 3, 5\]"):
        fused_einsum(x, w, np.ones(4, np.float32), "abc,cd->abd", False)
