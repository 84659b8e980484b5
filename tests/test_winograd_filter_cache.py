"""Winograd's transformed filter is kept per variable storage (``core/derived.py``) and dropped
when the variable changes: by assignment, by an in-place optimizer or scatter update; arrays
that are not a variable's storage are never cached."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import derived
from tensorweave.kernels.cpu import conv_kernels as ck
from tensorweave.kernels.cpu import winograd

RNG = np.random.default_rng(11)
S = [1, 1]


@pytest.fixture
def transforms(monkeypatch):
    """Counts the filter transforms actually computed."""
    calls = []
    real = winograd._filter_transform

    def counting(f):
        calls.append(f.shape)
        return real(f)
    monkeypatch.setattr(winograd, "_filter_transform", counting)
    return calls


def _x():
    return RNG.standard_normal((2, 10, 10, 8)).astype(np.float32)


def _f():
    return (RNG.standard_normal((3, 3, 8, 16)) / 8).astype(np.float32)


def _reference(x, f):
    return ck.conv_forward(x.astype(np.float64), np.asarray(f, np.float64), S, S, "SAME", "NHWC")


def _conv(x, v):
    return tw.nn.conv2d(x, v, 1, "SAME").numpy()


def _check(got, x, f):
    ref = _reference(x, f)
    assert np.abs(got - ref).max() <= 2e-5 * np.abs(ref).max()


def test_repeated_calls_on_a_variable_transform_once(transforms):
    x, v = _x(), tw.Variable(_f())
    first = _conv(x, v)
    second = _conv(x, v)
    assert len(transforms) == 1
    np.testing.assert_array_equal(first, second)


def test_the_transform_is_the_uncached_one_bit_for_bit(transforms):
    x, f = _x(), _f()
    uncached = _conv(x, tw.constant(f.copy()))
    v = tw.Variable(f)
    _conv(x, v)
    np.testing.assert_array_equal(_conv(x, v), uncached)


def test_assign_invalidates(transforms):
    x, f, g = _x(), _f(), _f()
    v = tw.Variable(f)
    _conv(x, v)
    v.assign(g)
    _check(_conv(x, v), x, g)
    v.assign_add(g)
    _check(_conv(x, v), x, 2 * g)
    assert len(transforms) == 3


def test_in_place_optimizer_update_invalidates(transforms):
    x, f = _x(), _f()
    v = tw.Variable(f)
    _conv(x, v)
    address = v._value.ctypes.data              # not a reference: that would make the update copy
    grad = np.ones_like(f)
    tw.keras.optimizers.SGD(0.5).apply_gradients([(tw.constant(grad), v)])
    assert v._value.ctypes.data == address      # updated in place: same array, new contents
    _check(_conv(x, v), x, f - 0.5 * grad)


def test_in_place_scatter_update_invalidates(transforms):
    x, f = _x(), _f()
    v = tw.Variable(f)
    _conv(x, v)
    rows = np.zeros((1, 3, 8, 16), np.float32)
    v.scatter_update(tw.IndexedSlices(tw.constant(rows), tw.constant([1])))
    g = f.copy()
    g[1] = 0
    _check(_conv(x, v), x, g)


def test_graph_reads_hit_and_see_updates(transforms):
    x, f = _x(), _f()
    v = tw.Variable(f)
    fn = tw.function(lambda t: tw.nn.conv2d(t, v, 1, "SAME"))
    first = fn(tw.constant(x)).numpy()
    fn(tw.constant(x))
    assert len(transforms) == 1
    _check(first, x, f)
    v.assign(2 * f)
    _check(fn(tw.constant(x)).numpy(), x, 2 * f)


def test_a_users_array_modified_in_place_is_never_stale(transforms):
    x, f = _x(), _f()
    _conv(x, f)
    f *= 3                                      # the same array object, new values
    _check(_conv(x, f), x, f)
    assert len(transforms) == 2


def test_a_variable_assigned_from_a_numpy_array_does_not_alias_it():
    f = _f()
    v = tw.Variable(np.zeros_like(f))
    v.assign(f)
    f[0] = 7.0
    assert not np.any(v.numpy() == 7.0)


def test_training_reuses_the_forward_transform_for_the_input_gradient(transforms):
    x, v = tw.constant(_x()), tw.Variable(_f())
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = tw.reduce_sum(tw.nn.conv2d(x, v, 1, "SAME"))
    assert tape.gradient(y, x) is not None
    assert len(transforms) == 1
