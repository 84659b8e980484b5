"""``Sum``/``Mean`` over consecutive middle axes (``reduce_kernels._middle_sum``: the compiled
slice-by-slice sum, issue 18 enc29 took its shape arithmetic off ``np.prod``): every spelling of
``axis`` reduces the same axes, the values are NumPy's slice-by-slice sums' bits, the cases the
loop does not take fall back to NumPy."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import reduce_kernels as rk

RNG = np.random.default_rng(29)


def _slices(x, axes):
    """NumPy's order for a non-last axis: from zeros, slice after slice (the loop's bits)."""
    lead = x.shape[:axes[0]]
    trail = x.shape[axes[-1] + 1:]
    mid = x.reshape(int(np.prod(lead, dtype=int)), -1, int(np.prod(trail, dtype=int)))
    out = np.zeros((mid.shape[0], mid.shape[2]), x.dtype)
    for r in range(mid.shape[1]):
        out += mid[:, r]
    return out.reshape(lead + trail)


@pytest.mark.parametrize("axis", [1, -2, (1,), [1], (-2,), np.array([1]), np.int64(1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_spelling_of_a_middle_axis_sums_it(axis, dtype):
    x = RNG.standard_normal((2, 128, 16)).astype(dtype)
    got = rk._sum(x, axis, False)
    assert got.shape == (2, 16) and got.dtype == dtype
    assert np.array_equal(got, _slices(x, (1,)))
    assert np.array_equal(rk._sum(x, axis, True), _slices(x, (1,))[:, None, :])


def test_consecutive_middle_axes_and_the_mean():
    x = RNG.standard_normal((3, 4, 5, 8)).astype(np.float32)
    assert np.array_equal(rk._sum(x, (1, 2), False), _slices(x, (1, 2)))
    assert np.array_equal(rk._sum(x, [2, 1], True), _slices(x, (1, 2))[:, None, None, :])
    # an axis counted from the end among others: still the loop's (NumPy's own sum adds the same way)
    assert np.array_equal(rk._middle_sum(x, (1, -2), False), _slices(x, (1, 2)))
    mean = rk._mean(x, (1, 2), False)
    assert mean.dtype == np.float32 and np.array_equal(mean, _slices(x, (1, 2)) / np.float32(20))
    e = RNG.standard_normal((1, 128, 256)).astype(np.float32)     # encoder2's mean over positions
    assert np.array_equal(rk._mean(e, (1,), False), _slices(e, (1,)) / np.float32(128))
    np.testing.assert_allclose(rk._mean(e, (1,), False), e.astype(np.float64).mean(1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("why", ["last axis", "gap", "short trail", "all axes", "int", "strided", "empty"])
def test_the_rest_is_numpy_s(why):
    x = RNG.standard_normal((4, 6, 8)).astype(np.float32)
    axis = {"last axis": (2,), "gap": (0, 2), "all axes": None}.get(why, (1,))
    if why == "short trail":
        x = x[:, :, :4].copy()
    if why == "int":
        x = RNG.integers(0, 9, (4, 6, 8))
    if why == "strided":
        x = x[:, :, ::2]
    if why == "empty":
        x = x[:, :0]
    assert rk._middle_sum(x, axis, False) is None
    np.testing.assert_allclose(rk._sum(x, axis, False), np.sum(x, axis=axis), rtol=1e-5)
