"""MulNoNan's traits (ops/math_ops.py): it joins fused elementwise loops — so the gradients of
sqrt, rsqrt, reciprocal and division, which end in it, fuse again — runs in place into a dead
input, and keeps TF's rule (0 where y is 0, even for an infinite or NaN x) on every path."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.ops.math_ops import mul_no_nan_into
from test_graph_passes import _off_and_on, _plan, _types

tf1 = tw.compat.v1


def _values(dtype, shape=(64, 40), seed=5):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(dtype)
    x[0, :3] = [np.inf, np.nan, -np.inf]
    return x


@pytest.mark.parametrize("dtype", [tw.float32, tw.float64])
def test_mul_no_nan_joins_the_fused_loop(dtype):
    xv, yv = _values(dtype.np_dtype), _values(dtype.np_dtype, seed=6)
    yv[0, :4] = 0.0                                          # where the inf/NaN of x meet y == 0
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(dtype, xv.shape)
        y = tf1.placeholder(dtype, yv.shape)
        z = tw.math.multiply_no_nan(x * tw.constant(2.0, dtype), tw.abs(y)) + tw.constant(1.0, dtype)
    off, on, plan = _off_and_on([z], [x, y], [xv, yv])
    assert "MulNoNan" not in _types(plan) and "FusedElementwise" in _types(plan)
    np.testing.assert_array_equal(on[0], off[0])
    assert (on[0][0, :4] == 1.0).all()                       # 0 * inf and 0 * nan gave 0, then + 1


def test_the_sqrt_and_division_gradients_fuse():
    xv = np.abs(_values(np.float32, seed=7)) + np.float32(0.5)
    xv[1, :5] = 0.0
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(tw.float32, xv.shape)
        y = tw.where(x > 0, tw.sqrt(x) / (x + tw.constant(1.0)), tw.zeros_like(x))
        (dx,) = tw.gradients(tw.reduce_sum(y), [x])
    off, on, plan = _off_and_on([dx], [x], [xv])
    unfused = _types(_plan([dx], [x], disable_meta_optimizer=True))
    assert "MulNoNan" in unfused and "MulNoNan" not in _types(plan)
    np.testing.assert_allclose(on[0], off[0], rtol=1e-6)
    assert not np.isnan(on[0][1:]).any() and (on[0][1, :5] == 0).all()   # row 0 has a NaN x


@pytest.mark.parametrize("into", [0, 1])
def test_in_place_into_either_input(into):
    x = _values(np.float32)
    y = _values(np.float32, seed=8)
    y[0, :3] = 0.0
    args = [x.copy(), y.copy()]
    with np.errstate(all="ignore"):
        expected = np.where(y == 0, np.float32(0), x * y)
        got = mul_no_nan_into(*args, out=args[into])
    assert got is args[into]
    np.testing.assert_array_equal(got, expected)


def test_in_place_with_a_broadcast_y_and_scalars():
    x = _values(np.float64, shape=(4, 3))
    y = np.array([0.0, 2.0, 0.0])
    out = x.copy()
    with np.errstate(all="ignore"):
        mul_no_nan_into(out, y, out=out)
    with np.errstate(all="ignore"):
        expected = np.where(y == 0, 0.0, x * y)
    np.testing.assert_array_equal(out, expected)
    with np.errstate(all="ignore"):                          # inf * 0 (the kernel runs under util.quiet)
        assert float(mul_no_nan_into(np.float32(np.inf), np.float32(0))) == 0.0
    assert float(mul_no_nan_into(np.float32(3), np.float32(2))) == 6.0
