"""1x1 convolutions without padding as one GEMM over the batch (kernels/cpu/conv_pointwise.py) and
their choice against im2col (conv_choice.use_pointwise): values against test_conv20_planes' NumPy
reference, gradients against float64 finite differences, eager == graph, and which path runs for
which (scripted) timing — never how fast anything is."""
import json

import numpy as np
import pytest
import scripted_clock

from tensorweave.kernels.cpu import conv_choice, conv_kernels as ck, conv_pointwise as cpw
from test_conv20_planes import _case, _geometry, _references

RNG = np.random.default_rng(24)

#: (input [N, *S, C], strides, padding, output channels): 1x1 windows, no padding
CASES = [((2, 8, 8, 4), (2, 2), "VALID", 6),
         ((3, 7, 7, 3), (2, 2), "SAME", 5),        # odd size: the last row and column are read
         ((2, 5, 6, 3), (1, 1), "SAME", 4),        # stride 1: the input is the column matrix
         ((2, 9, 3), (3,), "VALID", 2),
         ((1, 4, 5, 6, 2), (2, 1, 2), "SAME", 3)]


def _three(xs, strides, padding, o, dtype):
    x, f = _case(xs, (1,) * (len(xs) - 2), o, dtype)
    out, pads = _geometry(xs, f.shape[:-2], strides, (1,) * len(strides), padding)
    dy = RNG.standard_normal((xs[0],) + out + (o,)).astype(dtype)
    return x, f, dy, out, pads


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs,strides,padding,o", CASES)
def test_pointwise_matches_the_numpy_reference(xs, strides, padding, o, dtype):
    x, f, dy, out, pads = _three(xs, strides, padding, o, dtype)
    assert cpw.applies(x.dtype, f.shape[:-2], pads, 1)
    refs = _references(x, f, dy, strides, (1,) * len(strides), padding)
    got = (cpw.forward(x, f, out, strides), cpw.backprop_input(xs, f, dy, out, strides),
           cpw.backprop_filter(x, f.shape, dy, out, strides))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for g, r in zip(got, refs):
        assert g.dtype == dtype and g.shape == r.shape
        assert np.abs(g - r).max() <= tol * np.abs(r).max()


def test_gradients_match_float64_finite_differences():
    x, f, w, out, _ = _three((2, 7, 6, 3), (2, 3), "SAME", 4, np.float64)    # loss = sum(w * conv(x, f))

    def loss(x_, f_):
        return float(np.sum(w * cpw.forward(x_, f_, out, (2, 3))))
    dx, df = cpw.backprop_input(x.shape, f, w, out, (2, 3)), cpw.backprop_filter(x, f.shape, w, out, (2, 3))
    eps = 1e-6
    for arr, grad, is_x in ((x, dx, True), (f, df, False)):
        for flat in RNG.choice(arr.size, 10, replace=False):
            idx = np.unravel_index(flat, arr.shape)
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += eps
            minus[idx] -= eps
            args = ((plus, f), (minus, f)) if is_x else ((x, plus), (x, minus))
            numeric = (loss(*args[0]) - loss(*args[1])) / (2 * eps)
            assert abs(numeric - grad[idx]) <= 1e-6 * max(1.0, abs(numeric))


def test_fused_bias_relu_and_what_does_not_apply():
    x, f, _, out, pads = _three((2, 8, 8, 4), (2, 2), "VALID", 6, np.float32)
    bias = RNG.standard_normal(6).astype(np.float32)
    plain = cpw.forward(x, f, out, (2, 2))
    np.testing.assert_array_equal(cpw.forward(x, f, out, (2, 2), bias, True), np.maximum(plain + bias, 0))
    assert not cpw.applies(np.float32, (1, 1), ((0, 1), (0, 0)), 1)     # padded
    assert not cpw.applies(np.float32, (3, 3), pads, 1)
    assert not cpw.applies(np.float32, (1, 1), pads, 2)                 # grouped
    assert not cpw.applies(np.float16, (1, 1), pads, 1)


# ---- the choice (conv_choice.use_pointwise) -----------------------------------------------------
@pytest.fixture
def scripted(monkeypatch, tmp_path):
    """Auto mode, a fresh cache file, a quiet machine, and a scripted clock (seconds per call)."""
    monkeypatch.setattr(conv_choice, "POINTWISE_MODE", "auto")
    times = {"pointwise": 1e-3, "im2col": 1e-3}
    calls = scripted_clock.script(monkeypatch, tmp_path, times)
    conv_choice.reset()
    yield times, calls, tmp_path / "conv-tuning.json"
    conv_choice.reset()


S2 = [2, 2]


def _kernels(x, f, dy):
    return (ck.conv_forward(x, f, S2, [1, 1], "SAME", "NHWC"),
            ck.conv_backprop_input(list(x.shape), f, dy, S2, [1, 1], "SAME", "NHWC"),
            ck.conv_backprop_filter(x, list(f.shape), dy, S2, [1, 1], "SAME", "NHWC"))


@pytest.mark.parametrize("faster", ["pointwise", "im2col"])
def test_the_faster_path_runs_and_is_remembered(scripted, faster):
    times, calls, path = scripted
    times["im2col" if faster == "pointwise" else "pointwise"] = 1e-2
    x, f, dy, out, pads = _three((3, 9, 10, 5), (2, 2), "SAME", 8, np.float32)
    want = {"pointwise": (cpw.forward(x, f, out, S2), cpw.backprop_input(x.shape, f, dy, out, S2),
                          cpw.backprop_filter(x, f.shape, dy, out, S2)),
            "im2col": (ck._dense_forward(x, f, out, pads, S2, [1, 1]),
                       ck._dense_backprop_input(x.shape, f, dy, out, pads, S2, [1, 1]),
                       ck._dense_backprop_filter(x, f.shape, dy, out, pads, S2, [1, 1]).reshape(f.shape))}[faster]
    for g, w in zip(_kernels(x, f, dy), want):
        np.testing.assert_array_equal(g, w)          # the chosen path's own bits
    assert set(calls) == {"pointwise", "im2col"}
    saved = json.loads(path.read_text())["choices"]
    assert sorted(saved) == sorted(conv_choice.pointwise_class(k, 3, (9, 10), 5, 8, S2) for k in conv_choice.KINDS)
    assert {e["backend"] for e in saved.values()} == {faster}
    timed = len(calls)
    conv_choice.reset()                              # another process on this machine: the file
    for g, w in zip(_kernels(x, f, dy), want):
        np.testing.assert_array_equal(g, w)
    assert len(calls) == timed


@pytest.mark.parametrize("mode,want", [("0", False), ("1", True), ("never", False)])
def test_overrides_skip_the_timing(monkeypatch, mode, want):
    monkeypatch.setattr(conv_choice, "POINTWISE_MODE", mode)

    def runners():
        raise AssertionError("must not be timed")
    assert conv_choice.use_pointwise("forward", 4, (8, 8), 3, 8, (2, 2), runners) is want


def test_keras_shortcut_eager_graph_and_gradients_agree(monkeypatch):
    import tensorweave as tw
    monkeypatch.setattr(conv_choice, "POINTWISE_MODE", "1")
    x = tw.constant(RNG.standard_normal((4, 10, 10, 3)).astype(np.float32))
    layer = tw.keras.layers.Conv2D(8, 1, strides=2, use_bias=False)

    def run(t):
        with tw.GradientTape() as tape:
            tape.watch(t)
            loss = tw.reduce_sum(layer(t) ** 2)
        return [loss] + tape.gradient(loss, [t] + layer.trainable_weights)
    eager = [v.numpy() for v in run(x)]
    graph = [v.numpy() for v in tw.function(run)(x)]
    for e, g in zip(eager, graph):
        np.testing.assert_array_equal(g, e)
    w = layer.weights[0].numpy().astype(np.float64)
    y_ref = _references(x.numpy(), w, np.zeros((4, 5, 5, 8)), S2, [1, 1], "VALID")[0]
    assert np.abs(np.sum(y_ref ** 2) - eager[0]) <= 1e-5 * np.sum(y_ref ** 2)
    dx_ref = _references(x.numpy(), w, 2 * y_ref, S2, [1, 1], "VALID")[1]    # d sum(y^2) / dy = 2y
    np.testing.assert_allclose(eager[1], dx_ref, rtol=1e-4, atol=1e-4)
