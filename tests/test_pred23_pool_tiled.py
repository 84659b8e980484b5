"""``MaxPool``'s forward pass over windows that tile a small input (issue 18, pred23,
``kernels/cpu/pool_tiled.py``): the general loop's values bit for bit (first maximum in raster
order, a NaN winning), compiled and twin alike; anything else keeps the general loop."""
import warnings

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import jit, nn_loops, pool_kernels, pool_tiled


def _general(x, ksize, strides):
    """``MaxPool`` by the general compiled loop (``nn_loops.max_windows``), VALID padding."""
    out = tuple((n - k) // s + 1 for n, k, s in zip(x.shape[1:-1], ksize, strides))
    y = np.empty((x.shape[0],) + out + (x.shape[-1],), x.dtype)
    pool_kernels._max_windows(x, ksize, strides, ((0, 0),) * len(ksize), y, y, False)
    return y


def _input(rng, shape, dtype):
    """Values with ties (a few levels), signed zeros and NaNs, so the order of the taps shows."""
    x = rng.integers(-2, 3, shape).astype(dtype)
    x[x == 0] = np.where(rng.random(int((x == 0).sum())) < 0.5, -0.0, 0.0)
    x.reshape(-1)[rng.choice(x.size, max(1, x.size // 50), replace=False)] = np.nan
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,ksize", [((1, 24, 24, 64), (2, 2)), ((3, 6, 9, 5), (2, 3)), ((1, 4, 4, 1), (1, 1))])
def test_the_tiled_pass_gives_the_general_loops_bits(rng, dtype, shape, ksize):
    x = _input(rng, shape, dtype)
    expected = _general(x, list(ksize), list(ksize))
    out = tuple(n // k for n, k in zip(shape[1:-1], ksize))
    for run in (jit.compile_now(pool_tiled.max_tiled, x, ksize[0], ksize[1], expected.copy()),
                pool_tiled.max_tiled.twin):
        got = np.full((shape[0],) + out + (shape[-1],), 7, dtype)
        assert run(x, ksize[0], ksize[1], got) is None                         # it writes `out` only
        np.testing.assert_array_equal(got, expected)
        assert np.array_equal(np.signbit(got), np.signbit(expected))           # -0.0 and 0.0 apart
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)         # an all-NaN window
        reference = np.nanmax(x.reshape(shape[0], out[0], ksize[0], out[1], ksize[1], shape[-1]), axis=(2, 4))
    clean = ~np.isnan(expected)
    np.testing.assert_array_equal(expected[clean], reference[clean])


@pytest.mark.parametrize("case,tiled", [
    ("cnn", True), ("odd size", False), ("overlapping", False), ("same padding", False), ("large", True),
    ("channels first", True), ("int", False), ("wide windows", True),
])
def test_max_pool_takes_the_tiled_pass_only_where_it_applies(rng, monkeypatch, case, tiled):
    shape, ksize, strides, padding, fmt, dtype = (1, 24, 24, 8), [2, 2], [2, 2], "VALID", "NHWC", np.float32
    if case == "odd size":
        shape = (1, 25, 24, 8)
    elif case == "overlapping":
        ksize = [3, 3]
    elif case == "same padding":
        shape, padding = (1, 25, 25, 8), "SAME"
    elif case == "large":                                   # over one tile: the tiled pass over tiles of the batch
        shape = (2, 128, 128, 16)
    elif case == "channels first":
        shape, fmt = (1, 8, 24, 24), "NCHW"
    elif case == "int":
        dtype = np.int32
    elif case == "wide windows":                            # 2x3 windows: each size its own
        shape, ksize, strides = (3, 24, 24, 8), [2, 3], [2, 3]
    x = rng.standard_normal(shape).astype(dtype)
    calls = []
    real = pool_tiled.max_tiled
    monkeypatch.setattr(pool_tiled, "max_tiled", lambda *args: (calls.append(1), real(*args))[1])
    got = pool_kernels._max_pool(x, ksize, strides, padding, fmt)
    assert bool(calls) == tiled
    if not tiled:
        expected = tw.nn.max_pool2d(tw.constant(x), ksize, strides, padding, data_format=fmt).numpy()
    elif fmt == "NCHW":                                     # pooled channels-last, as the kernel does
        expected = _general(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), ksize, strides).transpose(0, 3, 1, 2)
    else:
        expected = _general(x, ksize, strides)
    np.testing.assert_array_equal(got, expected)


def test_the_general_loop_is_what_the_tiled_pass_is_compared_with():
    """(A guard on the helper above: it is the loop ``MaxPool`` ran before the tiled pass.)"""
    x = np.arange(16.0, dtype=np.float32).reshape(1, 4, 4, 1)
    assert _general(x, [2, 2], [2, 2])[0, :, :, 0].tolist() == [[5.0, 7.0], [13.0, 15.0]]
    assert nn_loops.max_windows is not pool_tiled.max_tiled
