"""``Einsum -> BiasAdd | AddV2 [-> Relu]`` as one ``FusedEinsum`` node (runtime/passes/einsum_bias.py,
kernels/cpu/einsum_bias_kernels.py; issue 18 session 18, enc22): the fused plan gives the unfused
plan's bits, a float64 NumPy reference's values, and fuses only where the values that disappear
are seen by nothing else."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import einsum_bias_kernels
from test_graph_passes import _plan, _run, _types
from test_remapping import _off_on, _same

tf1 = tw.compat.v1
RNG = np.random.default_rng(22)


def _dense_on_sequence(dtype, relu):
    """A Keras ``Dense`` on ``[batch, time, width]``: tensordot's Einsum, BiasAdd, ReLU."""
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(dtype, [2, 5, 6])
        w = RNG.normal(size=(6, 4)).astype(dtype.np_dtype)
        b = RNG.normal(size=4).astype(dtype.np_dtype)
        y = tw.nn.bias_add(tw.tensordot(x, tw.constant(w), [[2], [0]]), tw.constant(b))
        if relu:
            y = tw.nn.relu(y)
    return x, y, w, b


@pytest.mark.parametrize("dtype", [tw.float32, tw.float64])
@pytest.mark.parametrize("relu", [True, False])
def test_dense_on_a_sequence_becomes_one_node_with_the_same_bits(dtype, relu):
    x, y, w, b = _dense_on_sequence(dtype, relu)
    xv = RNG.normal(size=(2, 5, 6)).astype(dtype.np_dtype)
    xv[0, 0, 0] = np.nan     # NaN rows stay NaN through the fused ReLU, as through np.maximum
    off, on, types = _off_on([y], [x], [xv])
    assert "FusedEinsum" in types and not {"Einsum", "BiasAdd", "Relu"} & set(types)
    _same(off, on)
    want = np.einsum("abc,cd->abd", xv.astype(np.float64), w) + b
    want = np.maximum(want, 0) if relu else want
    np.testing.assert_allclose(on[0][1:], want[1:], rtol=1e-5 if dtype == tw.float32 else 1e-12, atol=1e-6)
    assert np.isnan(on[0][0, 0]).all()


def _projection(bias_first, bias_shape=(3, 2)):
    """An attention projection: ``abc,cde->abde`` plus a ``[heads, size]`` bias (``AddV2``)."""
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(tw.float32, [1, 4, 5])
        w = RNG.normal(size=(5, 3, 2)).astype(np.float32)
        b = RNG.normal(size=bias_shape).astype(np.float32)
        e = tw.einsum("abc,cde->abde", x, tw.constant(w))
        y = tw.constant(b) + e if bias_first else e + tw.constant(b)
        out = y * 0.5            # a reader after the add (the query's scale)
    return x, e, y, out, w, b


@pytest.mark.parametrize("bias_first", [False, True])
def test_projection_with_its_bias_either_side_of_the_add_is_fused(bias_first):
    x, _, _, out, w, b = _projection(bias_first)
    xv = RNG.normal(size=(1, 4, 5)).astype(np.float32)
    off, on, types = _off_on([out], [x], [xv])
    assert "FusedEinsum" in types and "Einsum" not in types and "AddV2" not in types
    _same(off, on)
    want = (np.einsum("abc,cde->abde", xv.astype(np.float64), w) + b) * 0.5
    np.testing.assert_allclose(on[0], want, rtol=1e-5, atol=1e-6)


def test_an_add_that_broadcasts_the_product_is_not_fused():
    x, _, _, out, _, _ = _projection(False, bias_shape=(1, 1, 3, 1))     # not the trailing axes [3, 2]
    xv = RNG.normal(size=(1, 4, 5)).astype(np.float32)
    off, on, types = _off_on([out], [x], [xv])
    assert "FusedEinsum" not in types and "Einsum" in types
    _same(off, on)


@pytest.mark.parametrize("seen", ["einsum", "add"])
def test_values_read_elsewhere_or_fetched_stop_the_fusion(seen):
    x, e, y, out, _, _ = _projection(False)
    xv = RNG.normal(size=(1, 4, 5)).astype(np.float32)
    other = e if seen == "einsum" else y
    off, on, types = _off_on([out, other], [x], [xv])
    _same(off, on)
    assert ("FusedEinsum" in types) == (seen == "add")     # the fused node computes the add's output itself


def test_switched_off_it_leaves_the_nodes_apart(monkeypatch):
    from tensorweave.runtime.passes import einsum_bias
    monkeypatch.setattr(einsum_bias, "ENABLED", False)
    x, y, _, _ = _dense_on_sequence(tw.float32, True)
    off, on, types = _off_on([y], [x], [RNG.normal(size=(2, 5, 6)).astype(np.float32)])
    assert "FusedEinsum" not in types and "Einsum" in types
    _same(off, on)


def test_the_kernel_checks_the_bias_and_keeps_other_dtypes_on_numpy():
    a = RNG.normal(size=(2, 3, 4)).astype(np.float16)
    w = RNG.normal(size=(4, 5)).astype(np.float16)
    b = RNG.normal(size=5).astype(np.float16)
    got = einsum_bias_kernels.fused_einsum(a, w, b, "abc,cd->abd", True)
    want = np.maximum(np.einsum("abc,cd->abd", a.astype(np.float32), w.astype(np.float32)).astype(np.float16) + b, 0)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match=r"FusedEinsum \(abc,cd->abd\): bias float16\[4\]"):
        einsum_bias_kernels.fused_einsum(a, w, b[:4], "abc,cd->abd", False)


def test_an_encoder_block_predicts_as_eagerly_and_as_a_float64_reference():
    """A Keras post-norm encoder block (the benchmark's encoder2, small): the plan with its
    ``FusedEinsum`` nodes against the eager layers and a float64 NumPy forward pass."""
    keras = tw.keras
    keras.utils.set_random_seed(3)
    L = keras.layers
    ids = keras.Input((6,), dtype="int32")
    h = L.Embedding(50, 8)(ids)
    att = L.MultiHeadAttention(2, 4)
    h = L.LayerNormalization(epsilon=1e-5)(L.Add()([h, att(h, h)]))
    up, down = L.Dense(16, activation="relu"), L.Dense(8)
    out = L.Dense(1)(L.GlobalAveragePooling1D()(L.LayerNormalization(epsilon=1e-5)(L.Add()([h, down(up(h))]))))
    model = keras.Model(ids, out)
    x = RNG.integers(0, 50, (1, 6)).astype(np.int32)
    graph = np.asarray(model.predict_on_batch(x))
    eager = np.asarray(model(x)).astype(np.float32)
    np.testing.assert_allclose(graph, eager, rtol=1e-5, atol=1e-6)

    def f64(v):
        return np.asarray(v.numpy() if hasattr(v, "numpy") else v, np.float64)

    def norm(v, layer):
        mu, var = v.mean(-1, keepdims=True), v.var(-1, keepdims=True)
        return (v - mu) / np.sqrt(var + 1e-5) * f64(layer.gamma) + f64(layer.beta)
    layers = list(model.layers)
    emb, head = next(la for la in layers if isinstance(la, L.Embedding)), layers[-1]
    ln1, ln2 = [la for la in layers if isinstance(la, L.LayerNormalization)]
    e = f64(emb.embeddings)[x[0]][None]
    q, k, v = (np.einsum("abc,cde->abde", e, f64(d.kernel)) + f64(d.bias)
               for d in (att._query_dense, att._key_dense, att._value_dense))
    s = np.einsum("aecd,abcd->acbe", k, q / 2.0)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = np.einsum("abcd,cde->abe", np.einsum("acbe,aecd->abcd", p, v), f64(att._output_dense.kernel)) \
        + f64(att._output_dense.bias)
    h1 = norm(e + o, ln1)
    f = np.maximum(h1 @ f64(up.kernel) + f64(up.bias), 0) @ f64(down.kernel) + f64(down.bias)
    want = norm(h1 + f, ln2).mean(1) @ f64(head.kernel) + f64(head.bias)
    np.testing.assert_allclose(graph, want, rtol=1e-4, atol=1e-5)
