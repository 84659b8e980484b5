"""The cross-entropy's scalar tail in its fused node (``runtime/passes/loss_tail.py``, issue 18 mlp22):
the mean over the batch (``Sum``, ``DivNoNan`` by a constant) and the gradient's constant scale
(``Mul``) join ``FusedSparseSoftmaxCrossEntropy``. Same bits as the plan without it, against a
float64 NumPy reference and float64 finite differences, eager = graph, a Keras training step
bit for bit; no fold where an intermediate is seen elsewhere or the pattern differs."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import fused_kernels
from tensorweave.runtime.passes import loss_tail
from test_graph_passes import _plan, _run, _types

tf1 = tw.compat.v1
RNG = np.random.default_rng(2218)
N, C = 6, 5
LABELS = np.array([0, 4, 2, 2, 1, 3], np.int32)


def _graph(dtype, divisor=float(N), fetch=()):
    """The mean cross-entropy as Keras writes it and its gradient; ``fetch`` adds intermediates
    ("losses", "sum", "max": another reader of the losses) to the fetches; ``divisor=None``: a fed divisor."""
    g = tw.Graph()
    with g.as_default():
        logits = tf1.placeholder(dtype, [N, C])
        labels = tf1.placeholder(tw.int32, [N])
        feeds = [logits, labels]
        losses = tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        total = tw.reduce_sum(losses)
        if divisor is None:
            d = tf1.placeholder(dtype, [])
            feeds.append(d)
        else:
            d = tw.constant(divisor, dtype)
        loss = tw.math.divide_no_nan(total, d)
        grad = tw.gradients(loss, [logits])[0]
        extra = {"losses": losses, "sum": total, "max": tw.reduce_max(losses)}
    return [loss, grad] + [extra[k] for k in fetch], feeds


def _values(dtype, extra=()):
    return [RNG.normal(size=(N, C)).astype(dtype.np_dtype) * 3, LABELS] + list(extra)


def _want(x):
    """float64 reference: mean of -log softmax at the labels, (softmax - one-hot) / N."""
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    onehot = np.eye(C)[LABELS]
    return -np.log(p[np.arange(N), LABELS]).mean(), (p - onehot) / N


def _without_tail(monkeypatch, fetches, feeds, values):
    monkeypatch.setattr(loss_tail, "ENABLED", False)
    plan = _plan(fetches, feeds)
    monkeypatch.setattr(loss_tail, "ENABLED", True)
    return _run(plan, values), _types(plan)


@pytest.mark.parametrize("dtype,tol", [(tw.float32, 1e-6), (tw.float64, 1e-13)])
def test_the_mean_and_the_scale_join_the_node_with_the_same_bits(monkeypatch, dtype, tol):
    fetches, feeds = _graph(dtype)
    values = _values(dtype)
    plan = _plan(fetches, feeds)
    types = _types(plan)
    assert types.count("FusedSparseSoftmaxCrossEntropy") == 1
    assert not {"Sum", "DivNoNan", "Mul"} & set(types), types
    on = _run(plan, values)
    before, before_types = _without_tail(monkeypatch, fetches, feeds, values)
    assert {"Sum", "DivNoNan", "Mul"} <= set(before_types)
    unfused = _run(_plan(fetches, feeds, remapping=False), values)
    for a, b, c in zip(on, before, unfused):
        assert a.dtype == b.dtype == c.dtype == dtype.np_dtype and a.shape == b.shape == c.shape
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    loss, grad = _want(values[0])
    np.testing.assert_allclose(on[0], loss, rtol=tol, atol=tol)
    np.testing.assert_allclose(on[1], grad, rtol=tol, atol=tol)


def test_the_gradient_matches_float64_finite_differences():
    fetches, feeds = _graph(tw.float64)
    plan = _plan(fetches, feeds)
    assert "DivNoNan" not in _types(plan)
    x = _values(tw.float64)[0]
    grad = _run(plan, [x, LABELS])[1]
    h, fd = 1e-6, np.zeros_like(x)
    for i in range(N):
        for j in range(C):
            up, down = x.copy(), x.copy()
            up[i, j] += h
            down[i, j] -= h
            fd[i, j] = (_run(plan, [up, LABELS])[0] - _run(plan, [down, LABELS])[0]) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


def test_eager_equals_graph():
    x = _values(tw.float32)[0]
    xt = tw.constant(x)
    with tw.GradientTape() as tape:
        tape.watch(xt)
        losses = tw.nn.sparse_softmax_cross_entropy_with_logits(labels=tw.constant(LABELS), logits=xt)
        loss = tw.math.divide_no_nan(tw.reduce_sum(losses), tw.constant(float(N)))
    eager = [np.asarray(loss), np.asarray(tape.gradient(loss, xt))]
    fetches, feeds = _graph(tw.float32)
    graph = _run(_plan(fetches, feeds), [x, LABELS])
    for a, b in zip(eager, graph):
        np.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("case", ["losses fetched", "losses read elsewhere", "sum fetched", "fed divisor",
                                  "zero divisor", "small divisor"])
def test_no_mean_where_an_intermediate_is_seen_or_the_divisor_is_not_a_constant_of_at_least_1(case):
    fetch = {"losses fetched": ("losses",), "sum fetched": ("sum",), "losses read elsewhere": ("max",)}.get(case, ())
    divisor = {"fed divisor": None, "zero divisor": 0.0, "small divisor": 0.5}.get(case, float(N))
    fetches, feeds = _graph(tw.float32, divisor=divisor, fetch=fetch)
    values = _values(tw.float32, [np.float32(N)] if case == "fed divisor" else [])
    plan = _plan(fetches, feeds)
    types = _types(plan)
    assert "FusedSparseSoftmaxCrossEntropy" in types and "DivNoNan" in types
    # the gradient's scale is its own: taken in unless the divisor is fed (then it is computed, not
    # constant) or zero (DivNoNan's gradient is then a select, no Mul)
    assert "Mul" not in types or case == "fed divisor"
    unfused = _run(_plan(fetches, feeds, remapping=False), values)
    for a, b in zip(unfused, _run(plan, values)):
        np.testing.assert_array_equal(b, a)


def test_a_sum_over_one_axis_is_not_taken():
    g = tw.Graph()
    with g.as_default():
        logits = tf1.placeholder(tw.float32, [N, C])
        labels = tf1.placeholder(tw.int32, [N])
        losses = tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        loss = tw.math.divide_no_nan(tw.reduce_sum(losses, axis=0), tw.constant(float(N)))
        grad = tw.gradients(loss, [logits])[0]
    plan = _plan([loss, grad], [logits, labels])
    assert "Sum" in _types(plan) and "FusedSparseSoftmaxCrossEntropy" in _types(plan)
    values = _values(tw.float32)
    for a, b in zip(_run(_plan([loss, grad], [logits, labels], remapping=False), values), _run(plan, values)):
        np.testing.assert_array_equal(b, a)


def test_the_kernel_scales_in_either_order_and_falls_back_to_the_stock_mul():
    x, labels = RNG.normal(size=(4, 3)).astype(np.float32), np.array([0, 2, 1, 1], np.int32)
    loss, grad = fused_kernels.sparse_xent_tail(x, labels)
    col = RNG.normal(size=(4, 1)).astype(np.float32)
    for first in (True, False):
        _, scaled = fused_kernels.sparse_xent_tail(x, labels, col, scaled=True, scale_first=first)
        np.testing.assert_array_equal(scaled, col * grad)
    # a scale that broadcasts the gradient to a larger shape: the Mul's own result
    big = RNG.normal(size=(2, 4, 3)).astype(np.float32)
    _, scaled = fused_kernels.sparse_xent_tail(x, labels, big, scaled=True)
    assert scaled.shape == (2, 4, 3)
    np.testing.assert_array_equal(scaled, grad * big)
    mean, _ = fused_kernels.sparse_xent_tail(x, labels, np.float32(4.0), mean=True)
    assert mean.dtype == np.float32 and mean.shape == ()
    assert mean == np.float32(np.sum(loss)) / np.float32(4.0)


def _train(steps=2):
    keras = tw.keras
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((7,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(4)])
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(16, 7)).astype(np.float32), rng.integers(0, 4, 16).astype(np.int32)
    losses = [model.train_on_batch(x, y) for _ in range(steps)]
    return losses, [w.numpy() for w in model.weights]


def test_a_keras_training_step_is_bit_for_bit_the_one_without_it(monkeypatch):
    on = _train()
    monkeypatch.setattr(loss_tail, "ENABLED", False)
    off = _train()
    assert on[0] == off[0]
    for a, b in zip(on[1], off[1]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_div_no_nan_of_scalars_outside_the_error_state_has_the_quiet_kernels_bits(dtype):
    from tensorweave.kernels.cpu import math_kernels
    cases = [(3.0, 128.0), (np.inf, 2.0), (np.nan, 3.0), (-7.0, -1.0), (1e-300, 1e3), (1e30, 1.0),
             (1.0, 0.0), (0.0, 0.0), (1.0, 0.5), (1.0, np.inf), (1.0, np.nan)]
    for x, y in cases:
        a, b = np.array(x, dtype), np.array(y, dtype)
        for a, b in ((a, b), (a[()], b[()]), (a, b[()])):       # 0-d arrays, NumPy scalars, mixed
            got, want = math_kernels._div_no_nan(a, b), math_kernels._div_no_nan_quiet(a, b)
            assert type(got) is type(want) and got.dtype == want.dtype and got.tobytes() == want.tobytes(), (x, y)
    with np.errstate(all="raise"):         # the zero branch and small divisors still go through the context
        assert math_kernels._div_no_nan(np.array(1.0, dtype), np.array(0.0, dtype)) == 0.0
        assert math_kernels._div_no_nan(np.array(1e30, dtype), np.array(1e-30, dtype)) > 0
        assert math_kernels._div_no_nan(dtype(1.0), dtype(0.0)) == 0.0


def test_a_scalar_variable_is_not_tracked_for_derived_values():
    from tensorweave.core import derived
    v = tw.Variable(0.0)
    v.assign_add(1.0)
    v.assign(np.float32(2.0))
    assert float(v.numpy()) == 2.0
    s, a = np.array(3.0), np.arange(3.0)
    derived.track(s)
    derived.track(a)
    assert id(s) not in derived._slots and id(a) in derived._slots
