"""``LayerNormalization(rms_scaling=True)`` gives Keras 3.15's numbers: ``x * rsqrt(var(x) + eps) * gamma``
(the CENTRED variance, an uncentred ``x``, no ``beta``; keras/src/ops/nn.py ``_layer_normalization``),
on the fused op (``ops/layer_norm_ops.py``, ``rms=True``) and the composite path, eager and graph, in
``keras.ops.layer_normalization``, the ONNX export and a saved model; the real RMS
(``RMSNormalization``, ``mean(x^2)``) keeps Keras' numbers too. The constants below were computed
once with Keras 3.15.1 (TensorFlow backend) from the printed ``X``/``G``."""
import os

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras
from tensorweave.keras.layers import normalization as N
from tensorweave.ops.layer_norm_ops import layer_norm

X = np.array([[[-0.04, 2.688, 1.532, -0.536], [2.044, -2.2, 1.887, -0.424], [1.963, 1.578, -0.834, 1.757]],
              [[1.384, -0.592, 4.702, 2.304], [-1.664, -1.276, 1.334, 1.324], [-0.754, 3.132, 0.894, -1.025]]],
             np.float32)
G = np.array([1.277, 1.039, 0.962, 1.454], np.float32)
# keras.layers.LayerNormalization(rms_scaling=True), gamma = G (epsilon 1e-3)
KERAS_LAST = [[[-0.039931, 2.183236, 1.152099, -0.609235], [1.486363, -1.301641, 1.033713, -0.351062],
               [2.209592, 1.445185, -0.7072, 2.251837]],
              [[0.92875, -0.323228, 2.377001, 1.760429], [-1.510719, -0.942553, 0.912369, 1.368649],
               [-0.581431, 1.965047, 0.519336, -0.899961]]]
# ... its gradients of sum(y * cos(arange(24)).reshape(2, 3, 4)) (TensorFlow's tape)
KERAS_DX = [[[1.181821, 0.095861, -0.432812, -0.84597], [-0.389995, 0.042285, 0.603512, 0.58691],
             [0.006485, -0.741573, -1.103486, 0.134525]],
            [[0.545902, 0.403882, 0.168305, -0.567685], [-0.132117, 0.354539, -0.198262, 0.376798],
             [0.152352, -0.026545, -0.539898, -0.663599]]]
KERAS_DGAMMA = [0.51702, -1.555958, 1.574481, 0.580316]
# LayerNormalization(axis=[1, 2], rms_scaling=True, epsilon=1e-5), gamma ones
KERAS_AXES_12 = [[[-0.027516, 1.84907, 1.05386, -0.368713], [1.406063, -1.513375, 1.298063, -0.291669],
                  [1.350344, 1.085503, -0.573707, 1.208637]],
                 [[0.740682, -0.316824, 2.516393, 1.233043], [-0.890531, -0.682883, 0.713923, 0.708572],
                  [-0.403522, 1.676168, 0.478446, -0.548554]]]
# keras.ops.layer_normalization(X, G, G, rms_scaling=True): epsilon 1e-7, beta ignored
KERAS_OPS = [[[-0.039943, 2.183904, 1.152451, -0.609422], [1.486604, -1.301852, 1.033881, -0.351118],
              [2.210451, 1.445747, -0.707474, 2.252713]],
             [[0.928878, -0.323273, 2.377329, 1.760672], [-1.511101, -0.942791, 0.9126, 1.368995],
              [-0.581537, 1.965405, 0.51943, -0.900126]]]
# keras.layers.RMSNormalization(), scale = G (epsilon 1e-6): the real root mean square
KERAS_RMSNORM = [[[-0.032532, 1.778724, 0.938636, -0.496355], [1.461511, -1.279878, 1.01643, -0.345192],
                  [1.575509, 1.030463, -0.504256, 1.605632]],
                 [[0.648787, -0.225794, 1.660477, 1.229764], [-1.509206, -0.941609, 0.911455, 1.367277],
                  [-0.550704, 1.8612, 0.49189, -0.852401]]]

RNG = np.random.default_rng(1915)
pytestmark = pytest.mark.filterwarnings("ignore:LayerNormalization.rms_scaling=True. is deprecated")


def keras_rms_scaling(x, gamma, axes, eps):
    """Keras 3.15's formula in float64 NumPy."""
    x = np.asarray(x, np.float64)
    return x / np.sqrt(x.var(axis=tuple(axes), keepdims=True) + eps) * gamma


def _run(layer, x, fused, graph, w=None):
    """``(y, dx, dgamma)`` of ``sum(y * w)`` through ``layer`` on its fused or composite path."""
    w = np.cos(np.arange(x.size)).reshape(x.shape).astype(x.dtype) if w is None else w

    def step(v):
        with tw.GradientTape() as tape:
            tape.watch(v)
            y = layer(v)
            loss = tw.reduce_sum(y * tw.constant(w))
        return [y] + tape.gradient(loss, [v] + layer.trainable_weights)
    old = N.FUSED_LAYER_NORM
    N.FUSED_LAYER_NORM = fused
    try:
        return [t.numpy() for t in (tw.function(step) if graph else step)(tw.constant(x))]
    finally:
        N.FUSED_LAYER_NORM = old


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("graph", [False, True])
def test_layer_gives_keras_numbers_and_gradients(fused, graph):
    layer = N.LayerNormalization(rms_scaling=True)
    layer.build(X.shape)
    layer.gamma.assign(G)
    assert layer.beta is None and len(layer.trainable_weights) == 1
    y, dx, dgamma = _run(layer, X, fused, graph)
    np.testing.assert_allclose(y, KERAS_LAST, rtol=0, atol=3e-6)
    np.testing.assert_allclose(y, keras_rms_scaling(X, G, [-1], 1e-3), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dx, KERAS_DX, rtol=0, atol=5e-6)
    np.testing.assert_allclose(dgamma, KERAS_DGAMMA, rtol=0, atol=5e-6)
    layer12 = N.LayerNormalization(axis=[1, 2], rms_scaling=True, epsilon=1e-5)
    np.testing.assert_allclose(_run(layer12, X, fused, graph)[0], KERAS_AXES_12, rtol=0, atol=3e-6)


@pytest.mark.parametrize("kwargs,shape", [({}, (3, 7)), ({"axis": [1, 2], "epsilon": 1e-5}, (2, 3, 5)),
                                          ({"axis": 1}, (2, 6, 3)), ({"scale": False}, (4, 9))])
def test_layer_against_numpy_fused_equals_composite(kwargs, shape):
    x = (RNG.standard_normal(shape) * 2 + 3.0).astype(np.float32)     # a mean that matters
    layer = N.LayerNormalization(rms_scaling=True, gamma_initializer="random_normal", **kwargs)
    layer.build(shape)
    axes = layer._axes
    gamma = 1.0 if layer.gamma is None else N._broadcast(layer.gamma, len(shape), axes).numpy()
    want = keras_rms_scaling(x, gamma, axes, layer.epsilon)
    ref = _run(layer, x, fused=False, graph=False)
    np.testing.assert_allclose(ref[0], want, rtol=2e-5, atol=2e-5)
    for graph in (False, True):
        for a, b in zip(_run(layer, x, fused=True, graph=graph), ref):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)


def _fd(f, v, h=1e-6):
    """Central differences of the scalar ``f`` at ``v`` (float64), element by element."""
    g = np.zeros_like(v)
    for i in np.ndindex(v.shape):
        e = np.zeros_like(v)
        e[i] = h
        g[i] = (f(v + e) - f(v - e)) / (2 * h)
    return g


def test_fused_gradients_match_float64_finite_differences():
    # x with a row mean far from 0 (where the centred variance and mean(x^2) differ), gamma, and
    # the statistics outputs (mean, inv) in the loss so their gradients are checked too
    x0 = RNG.standard_normal((3, 5)) + 2.0
    g0 = RNG.uniform(0.5, 1.5, 5)
    w, k1, k2 = RNG.standard_normal((3, 5)), RNG.standard_normal(3), RNG.standard_normal(3)

    def loss(x, gamma):
        y, mean, inv = layer_norm(x, gamma, tw.zeros([5], tw.float64), 1e-3, rms=True)
        return tw.reduce_sum(y * w) + tw.reduce_sum(mean * k1) + tw.reduce_sum(inv * inv * k2)
    x, gamma = tw.constant(x0), tw.constant(g0)
    with tw.GradientTape() as tape:
        tape.watch([x, gamma])
        value = loss(x, gamma)
    dx, dgamma = tape.gradient(value, [x, gamma])
    np.testing.assert_allclose(dx.numpy(), _fd(lambda v: loss(tw.constant(v), gamma).numpy(), x0), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(dgamma.numpy(), _fd(lambda v: loss(x, tw.constant(v)).numpy(), g0), rtol=1e-6,
                               atol=1e-8)
    y, mean, inv = (t.numpy() for t in layer_norm(x, gamma, tw.zeros([5], tw.float64), 1e-3, rms=True))
    np.testing.assert_allclose(mean, x0.mean(1), rtol=1e-12)
    np.testing.assert_allclose(inv, 1 / np.sqrt(x0.var(1) + 1e-3), rtol=1e-12)
    np.testing.assert_allclose(y, keras_rms_scaling(x0, g0, [-1], 1e-3), rtol=1e-12)


def test_the_switch_off_variable_selects_the_composite(monkeypatch):
    # TW_FUSED_LAYER_NORM=0 is read at import into FUSED_LAYER_NORM; with it off the graph has no
    # LayerNorm op and still Keras' numbers
    layer = N.LayerNormalization(rms_scaling=True)
    layer.build(X.shape)
    layer.gamma.assign(G)
    for fused in (True, False):
        monkeypatch.setattr(N, "FUSED_LAYER_NORM", fused)
        fn = tw.function(lambda v: layer(v))
        types = [op.type for op in fn.get_concrete_function(tw.TensorSpec(X.shape, tw.float32)).graph.get_operations()]
        assert ("LayerNorm" in types) == fused
        np.testing.assert_allclose(fn(tw.constant(X)).numpy(), KERAS_LAST, rtol=0, atol=3e-6)


def test_keras_ops_rms_scaling_ignores_beta_and_warns():
    with pytest.warns(UserWarning, match="rms_scaling=True"):
        got = keras.ops.layer_normalization(X, G, G, rms_scaling=True)
    np.testing.assert_allclose(got.numpy(), KERAS_OPS, rtol=0, atol=3e-6)


def test_rms_normalization_stays_the_root_mean_square():
    layer = keras.layers.RMSNormalization()
    layer.build(X.shape)
    layer.scale.assign(G)
    np.testing.assert_allclose(layer(X).numpy(), KERAS_RMSNORM, rtol=0, atol=3e-6)
    np.testing.assert_allclose(keras.ops.rms_normalization(X, G, epsilon=1e-6).numpy(), KERAS_RMSNORM, rtol=0,
                               atol=3e-6)


def _model():
    inp = keras.Input(shape=(3, 4))
    a = keras.layers.LayerNormalization(rms_scaling=True, name="ln_last")(inp)
    b = keras.layers.LayerNormalization(axis=[1, 2], rms_scaling=True, epsilon=1e-5, name="ln_12")(inp)
    model = keras.Model(inp, [a, b])
    model.get_layer("ln_last").gamma.assign(G)
    return model


def test_saved_and_loaded_model_keeps_keras_numbers(tmp_path):
    model = _model()
    path = str(tmp_path / "rms.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.get_layer("ln_last").get_config()["rms_scaling"] is True
    a, b = loaded.predict(X, verbose=0)
    np.testing.assert_allclose(a, KERAS_LAST, rtol=0, atol=3e-6)
    np.testing.assert_allclose(b, KERAS_AXES_12, rtol=0, atol=3e-6)


@pytest.mark.parametrize("opset", [17, 13])
def test_onnx_export_equals_the_layer(tmp_path, opset):
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    import tensorweave.onnx as tw_onnx
    path = os.path.join(tmp_path, "rms.onnx")
    tw_onnx.export(_model(), path, opset=opset)
    loaded = onnx.load(path)
    onnx.checker.check_model(loaded, full_check=True)
    a, b = ReferenceEvaluator(loaded).run(None, {loaded.graph.input[0].name: X})
    np.testing.assert_allclose(a, KERAS_LAST, rtol=0, atol=3e-6)
    np.testing.assert_allclose(b, KERAS_AXES_12, rtol=0, atol=3e-6)
