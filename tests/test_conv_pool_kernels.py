"""The fast convolution and pooling kernels against the naive references of the op table, in
the cases the table's small samples do not reach: a batch split over several im2col tiles,
1x1 convolutions, and max pooling with ties, NaN and infinities."""
import numpy as np
import pytest

import tensorweave as tw
from opinfos.nn import ref_conv, ref_conv_backprop_filter, ref_conv_transpose, ref_pool
from tensorweave.kernels.cpu import conv_kernels


@pytest.fixture
def one_image_tiles(monkeypatch):
    """Column buffers of one image each, so every batch runs as several tiles."""
    monkeypatch.setattr(conv_kernels, "TILE_BYTES", 1)


CASES = [  # (input shape NHWC, filter shape, kwargs)
    ((5, 7, 6, 3), (3, 3, 3, 4), {"strides": 1, "padding": "VALID"}),
    ((4, 6, 7, 2), (3, 2, 2, 3), {"strides": 2, "padding": "SAME"}),
    ((3, 7, 7, 2), (2, 3, 2, 2), {"strides": 1, "padding": "SAME", "dilations": 2}),
    ((3, 5, 6, 2), (2, 2, 2, 3), {"strides": [1, 2], "padding": [[0, 0], [1, 2], [2, 1], [0, 0]]}),
    ((3, 4, 5, 6), (1, 1, 6, 4), {"strides": 1, "padding": "VALID"}),
    ((3, 6, 5, 4), (3, 3, 4, 2), {"strides": 1, "padding": "SAME", "data_format": "NCHW"}),
]


@pytest.mark.parametrize("xs,fs,kw", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tiled_conv2d_matches_reference(one_image_tiles, rng, xs, fs, kw, dtype):
    if kw.get("data_format") == "NCHW":
        xs = (xs[0], xs[3], xs[1], xs[2])
    x = rng.uniform(-1, 1, xs).astype(dtype)
    f = rng.uniform(-1, 1, fs).astype(dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    y = tw.nn.conv2d(x, f, **kw).numpy()
    np.testing.assert_allclose(y, ref_conv(x, f, **kw), rtol=tol, atol=tol)
    dy = rng.uniform(-1, 1, y.shape).astype(dtype)
    np.testing.assert_allclose(tw.nn.conv2d_backprop_filter(x, list(fs), dy, **kw).numpy(),
                               ref_conv_backprop_filter(x, list(fs), dy, **kw), rtol=tol, atol=tol)
    np.testing.assert_allclose(tw.nn.conv2d_backprop_input(list(xs), f, dy, **kw).numpy(),
                               ref_conv_transpose(dy, f, list(xs), **kw), rtol=tol, atol=tol)


@pytest.mark.parametrize("nd", [1, 3])
def test_tiled_conv1d_conv3d_match_reference(one_image_tiles, rng, nd):
    x = rng.uniform(-1, 1, (3,) + (6, 5, 4)[:nd] + (2,))
    f = rng.uniform(-1, 1, (3, 2, 2)[:nd] + (2, 3))
    kw = {"strides": 2, "padding": "SAME"}
    y = tw.nn.convolution(x, f, **kw).numpy()
    np.testing.assert_allclose(y, ref_conv(x, f, **kw), rtol=1e-10, atol=1e-10)
    dy = rng.uniform(-1, 1, y.shape)
    np.testing.assert_allclose(tw.nn.conv_transpose(dy, f, list(x.shape), **kw).numpy(),
                               ref_conv_transpose(dy, f, list(x.shape), **kw), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_tiles_on_threads_match_one_thread(one_image_tiles, rng, monkeypatch, padding):
    """Tiles spread over threads (each with single-threaded BLAS) give the same bits as one
    thread: outputs are disjoint per tile and the filter gradient adds tiles in order."""
    from tensorweave.kernels import threads
    x = rng.uniform(-1, 1, (6, 9, 8, 5)).astype(np.float32)
    f = rng.uniform(-1, 1, (3, 3, 5, 7)).astype(np.float32)
    kw = {"strides": 1, "padding": padding}

    def all_three():
        y = tw.nn.conv2d(x, f, **kw).numpy()
        return [y, tw.nn.conv2d_backprop_filter(x, [3, 3, 5, 7], y, **kw).numpy(),
                tw.nn.conv2d_backprop_input(list(x.shape), f, y, **kw).numpy()]
    monkeypatch.setattr(threads, "intra_op_threads", lambda: 1)
    one = all_three()
    monkeypatch.setattr(threads, "intra_op_threads", lambda: 2)
    monkeypatch.setattr(threads, "cores", lambda: 2)
    two = all_three()
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(one[1], ref_conv_backprop_filter(x, [3, 3, 5, 7], one[0], **kw), rtol=1e-4, atol=1e-4)


def test_conv2d_empty_batch():
    y = tw.nn.conv2d(np.zeros((0, 5, 5, 2), np.float32), np.ones((3, 3, 2, 4), np.float32), 1, "SAME")
    assert y.shape == (0, 5, 5, 4)
    df = tw.nn.conv2d_backprop_filter(np.zeros((0, 5, 5, 2), np.float32), [3, 3, 2, 4],
                                      np.zeros((0, 5, 5, 4), np.float32), 1, "SAME")
    np.testing.assert_array_equal(df.numpy(), np.zeros((3, 3, 2, 4), np.float32))


@pytest.mark.parametrize("shape,ksize,strides,padding", [
    ((2, 8, 6, 3), 2, 2, "VALID"),  # windows tile the input: the gradient writes every element once
    ((2, 7, 6, 3), 2, 2, "VALID"), ((2, 7, 6, 3), 3, 2, "SAME"), ((2, 7, 6, 3), 3, 1, "SAME"),
    ((2, 7, 6, 3), 2, 3, "VALID")])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_max_pool_and_gradient_with_ties_nan_inf(rng, shape, ksize, strides, padding, data_format):
    x = rng.integers(-3, 3, shape).astype(np.float64)  # many ties
    x[0, 1, 1, 0], x[1, 4, 2, 1], x[0, 5, 5, 2] = np.nan, -np.inf, np.inf
    if data_format == "NCHW":
        x = np.ascontiguousarray(np.moveaxis(x, -1, 1))
    kw = {"ksize": ksize, "strides": strides, "padding": padding, "data_format": data_format}
    xt = tw.constant(x)
    with tw.GradientTape() as tape:
        tape.watch(xt)
        y = tw.nn.max_pool2d(xt, **kw)
    g = rng.uniform(-1, 1, y.shape)
    dx = tape.gradient(y, xt, output_gradients=tw.constant(g)).numpy()
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(y.numpy(), ref_pool("max", 2)(x, ksize, strides, padding, data_format))
    # Reference gradient: each window's g goes to its first maximum (a NaN counting as the maximum).
    xl = np.moveaxis(x, 1, -1) if data_format == "NCHW" else x
    gl = np.moveaxis(g, 1, -1) if data_format == "NCHW" else g
    want = np.zeros_like(xl)
    out = gl.shape[1:3]
    pad_h = max((out[0] - 1) * strides + ksize - xl.shape[1], 0) // 2 if padding == "SAME" else 0
    pad_w = max((out[1] - 1) * strides + ksize - xl.shape[2], 0) // 2 if padding == "SAME" else 0
    for b, i, j, c in np.ndindex(*gl.shape):
        best = None
        for a in range(ksize):
            for e in range(ksize):
                r, s = i * strides + a - pad_h, j * strides + e - pad_w
                if 0 <= r < xl.shape[1] and 0 <= s < xl.shape[2]:
                    v = xl[b, r, s, c]
                    if best is None or v > xl[best + (c,)] or (np.isnan(v) and not np.isnan(xl[best + (c,)])):
                        best = (b, r, s)
        want[best + (c,)] += gl[b, i, j, c]
    if data_format == "NCHW":
        want = np.moveaxis(want, -1, 1)
    np.testing.assert_allclose(dx, want, rtol=1e-12, atol=1e-12)


def test_relu_gradient_is_one_relu_grad_op():
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [4])
        (dx,) = tw.gradients(tw.reduce_sum(tw.nn.relu(x)), [x])
    assert "ReluGrad" in {op.type for op in g.get_operations()}
    with tw.Session(graph=g) as sess:
        np.testing.assert_array_equal(sess.run(dx, {x: [-1.0, 0.0, 2.0, np.nan]}), [0.0, 0.0, 1.0, 0.0])

