"""Winograd F(4x4, 3x3) convolutions (kernels/cpu/winograd.py): forward, input and filter
gradients against the float64 im2col reference, for every padding the path takes."""
import itertools

import numpy as np
import pytest

from tensorweave.kernels.cpu import conv_kernels as ck
from tensorweave.kernels.cpu import winograd
from tensorweave.kernels import threads

RNG = np.random.default_rng(7)
SHAPES = [(2, 26, 26, 32, 64), (3, 11, 9, 8, 16), (1, 4, 5, 9, 8), (2, 3, 3, 8, 8), (33, 7, 7, 8, 8)]
PADS = ["VALID", "SAME", [(2, 1), (0, 2)], [(1, 0), (2, 2)]]
S = [1, 1]


def _close(got, ref):
    """Winograd's float32 rounding: a few 1e-6 of the output's largest magnitude."""
    assert got.dtype == np.float32 and got.shape == ref.shape
    assert np.abs(got - ref).max() <= 2e-5 * np.abs(ref).max()


def _case(shape, pad):
    n, h, w, c, o = shape
    x = RNG.standard_normal((n, h, w, c)).astype(np.float32)
    f = (RNG.standard_normal((3, 3, c, o)) / np.sqrt(9 * c)).astype(np.float32)
    y = ck.conv_forward(x.astype(np.float64), f.astype(np.float64), S, S, pad, "NHWC")
    dy = RNG.standard_normal(y.shape).astype(np.float32)
    return x, f, y, dy


@pytest.mark.parametrize("shape,pad", list(itertools.product(SHAPES, PADS)))
def test_forward_and_both_gradients_match_the_float64_reference(shape, pad):
    x, f, y, dy = _case(shape, pad)
    x64, f64, dy64 = x.astype(np.float64), f.astype(np.float64), dy.astype(np.float64)
    _close(ck.conv_forward(x, f, S, S, pad, "NHWC"), y)
    _close(ck.conv_backprop_input(list(x.shape), f, dy, S, S, pad, "NHWC"),
           ck.conv_backprop_input(list(x.shape), f64, dy64, S, S, pad, "NHWC"))
    _close(ck.conv_backprop_filter(x, list(f.shape), dy, S, S, pad, "NHWC"),
           ck.conv_backprop_filter(x64, list(f.shape), dy64, S, S, pad, "NHWC"))


def test_the_path_is_taken_only_where_it_applies():
    assert winograd.applies(np.float32, (3, 3, 8, 8), S, S, [(1, 1), (1, 1)])
    for dtype, fs, st, dl, pads in [(np.float64, (3, 3, 8, 8), S, S, [(0, 0)] * 2),
                                    (np.float32, (5, 5, 8, 8), S, S, [(0, 0)] * 2),
                                    (np.float32, (3, 3, 1, 32), S, S, [(0, 0)] * 2),
                                    (np.float32, (3, 3, 8, 8), [2, 2], S, [(0, 0)] * 2),
                                    (np.float32, (3, 3, 8, 8), S, [2, 2], [(0, 0)] * 2),
                                    (np.float32, (3, 3, 8, 8), S, S, [(3, 0), (0, 0)])]:
        assert not winograd.applies(dtype, fs, st, dl, pads)


def test_switching_it_off_gives_im2col(monkeypatch):
    x, f, y, _ = _case((2, 10, 10, 8, 8), "SAME")
    on = ck.conv_forward(x, f, S, S, "SAME", "NHWC")
    monkeypatch.setattr(winograd, "ENABLED", False)
    off = ck.conv_forward(x, f, S, S, "SAME", "NHWC")
    assert not np.array_equal(on, off)    # different rounding: the path really changed
    _close(off, y)


def test_fused_bias_and_relu_are_the_separate_ops_bit_for_bit():
    x, f, _, _ = _case((3, 9, 9, 8, 16), "SAME")
    b = RNG.standard_normal(16).astype(np.float32)
    fused = ck.conv_forward(x, f, S, S, "SAME", "NHWC", bias=b, relu=True)
    np.testing.assert_array_equal(fused, np.maximum(ck.conv_forward(x, f, S, S, "SAME", "NHWC") + b, 0))


def test_filter_gradient_bits_do_not_depend_on_the_thread_count():
    x, f, _, dy = _case((40, 8, 8, 8, 8), "VALID")
    before = threads.intra_op_threads()
    try:
        threads.set_intra_op_threads(1)
        one = ck.conv_backprop_filter(x, list(f.shape), dy, S, S, "VALID", "NHWC")
        threads.set_intra_op_threads(2)
        two = ck.conv_backprop_filter(x, list(f.shape), dy, S, S, "VALID", "NHWC")
    finally:
        threads.set_intra_op_threads(before)
    np.testing.assert_array_equal(one, two)


def test_empty_batches_and_outputs():
    f = np.ones((3, 3, 8, 8), np.float32)
    assert ck.conv_forward(np.ones((0, 5, 5, 8), np.float32), f, S, S, "SAME", "NHWC").shape == (0, 5, 5, 8)
    np.testing.assert_array_equal(
        ck.conv_backprop_filter(np.ones((0, 5, 5, 8), np.float32), [3, 3, 8, 8], np.ones((0, 5, 5, 8), np.float32),
                                S, S, "SAME", "NHWC"), np.zeros((3, 3, 8, 8), np.float32))


def test_channels_first_and_half_precision_take_the_path_too():
    x, f, y, dy = _case((2, 9, 9, 8, 16), "SAME")
    xc = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    got = ck.conv_forward(xc, f, S, S, "SAME", "NCHW")
    _close(np.ascontiguousarray(got.transpose(0, 2, 3, 1)), y)
    half = ck.conv_forward(x.astype(np.float16), f.astype(np.float16), S, S, "SAME", "NHWC")
    assert half.dtype == np.float16
    np.testing.assert_allclose(half.astype(np.float64), y, atol=2e-2 * np.abs(y).max())


def test_keras_conv_layer_eager_graph_and_float64_agree():
    import tensorweave as tw
    x = RNG.standard_normal((4, 12, 12, 8)).astype(np.float32)
    layer = tw.keras.layers.Conv2D(16, 3, padding="same", activation="relu")
    eager = layer(x).numpy()
    graph = tw.function(lambda t: layer(t))(tw.constant(x)).numpy()
    np.testing.assert_array_equal(graph, eager)
    w, b = [v.numpy().astype(np.float64) for v in layer.weights]
    ref = np.maximum(ck.conv_forward(x.astype(np.float64), w, S, S, "SAME", "NHWC") + b, 0)
    _close(eager, ref)
