"""cond and while_loop: eager, graph, tw.function, gradients (incl. through variables)."""
import numpy as np
import pytest

import tensorweave as tw


def _fd(f, x, eps=1e-6):
    return (f(x + eps) - f(x - eps)) / (2 * eps)


def test_cond_eager_is_python_if():
    calls = []
    out = tw.cond(tw.constant(True), lambda: calls.append("t") or 1, lambda: calls.append("f") or 2)
    assert out == 1 and calls == ["t"]


@pytest.mark.parametrize("xv", [0.5, 2.0])
def test_cond_graph_value_and_gradient(xv):
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float64, [])
        y = tw.cond(x > 1.0, lambda: x * x * x, lambda: tw.sin(x) * 2.0)
        (dy,) = tw.gradients(y, [x])
    with tw.Session(graph=g) as s:
        val, grad = s.run([y, dy], {x: xv})
    f = (lambda v: v ** 3) if xv > 1 else (lambda v: 2 * np.sin(v))
    np.testing.assert_allclose(val, f(xv))
    np.testing.assert_allclose(grad, _fd(f, xv), rtol=1e-6)


def test_cond_branch_structures_and_dtypes_must_match():
    g = tw.Graph()
    with g.as_default():
        p = tw.placeholder(tw.bool, [])
        with pytest.raises(ValueError, match="same structure"):
            tw.cond(p, lambda: (tw.constant(1.0), tw.constant(2.0)), lambda: tw.constant(1.0))
        with pytest.raises(TypeError, match="float32"):
            tw.cond(p, lambda: tw.constant(1.0), lambda: tw.constant(1))
        out = tw.cond(p, lambda: {"a": tw.zeros([2])}, lambda: {"a": tw.ones([3])})
        assert out["a"].shape.as_list() == [None]


def test_while_loop_graph_value_and_gradient():
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float64, [])
        i, y = tw.while_loop(lambda i, y: i < 4, lambda i, y: (i + 1, y * x + tw.sin(y)), (0, tw.constant(0.5, tw.float64)))
        (dy,) = tw.gradients(y, [x])
    def f(xv):
        y = 0.5
        for _ in range(4):
            y = y * xv + np.sin(y)
        return y
    with tw.Session(graph=g) as s:
        iv, yv, dv = s.run([i, y, dy], {x: 0.7})
    assert iv == 4
    np.testing.assert_allclose(yv, f(0.7))
    np.testing.assert_allclose(dv, _fd(f, 0.7), rtol=1e-6)


def test_while_loop_maximum_iterations_and_shape_invariants():
    @tw.function
    def f(n):
        return tw.while_loop(lambda i, acc: i < n, lambda i, acc: (i + 1, tw.concat([acc, tw.cast(tw.reshape(i, [1]), tw.float32)], 0)),
                             (0, tw.zeros([0])), shape_invariants=([], [None]), maximum_iterations=3)

    i, acc = f(tw.constant(10))
    assert int(i) == 3 and acc.numpy().tolist() == [0.0, 1.0, 2.0]
    g = tw.Graph()
    with g.as_default():
        with pytest.raises(ValueError, match="shape_invariants"):
            tw.while_loop(lambda a: tw.size(a) < 3, lambda a: tw.concat([a, a], 0), [tw.zeros([1])])


def test_gradients_through_variables_inside_control_flow_in_function():
    v = tw.Variable(2.0, dtype=tw.float64)

    @tw.function
    def f(x):
        with tw.GradientTape() as t:
            y = tw.cond(x > 0, lambda: v * x, lambda: v * v)
            _, w = tw.while_loop(lambda i, w: i < 2, lambda i, w: (i + 1, w * v), (0, y))
        return w, t.gradient(w, v)

    w, g = f(tw.constant(3.0, tw.float64))
    assert (float(w), float(g)) == (24.0, 36.0)
    w, g = f(tw.constant(-3.0, tw.float64))
    assert (float(w), float(g)) == (16.0, 32.0)


def test_side_effects_in_branches_run_only_when_taken():
    v = tw.Variable(0)

    @tw.function
    def f(p):
        tw.cond(p, lambda: v.assign_add(1), lambda: v.assign_add(10))
        return v.read_value()

    assert int(f(tw.constant(True))) == 1
    assert int(f(tw.constant(False))) == 11


def test_eager_while_loop_with_tape():
    x = tw.constant(1.5)
    with tw.GradientTape() as t:
        t.watch(x)
        _, y = tw.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), (0, tw.constant(1.0)))
    np.testing.assert_allclose(float(t.gradient(y, x)), 3 * 1.5 ** 2, rtol=1e-6)


def test_case_and_switch_case():
    @tw.function
    def f(i):
        return tw.switch_case(i, [lambda: tw.constant(10), lambda: tw.constant(20), lambda: tw.constant(30)])

    assert [int(f(tw.constant(k))) for k in range(3)] == [10, 20, 30]


def test_gradients_use_the_traced_branches_not_rebound_closures():
    # The branches close over `z`, which is rebound to the cond's output afterwards; the
    # gradient must still differentiate what was traced.
    w = tw.Variable(np.arange(6, dtype=np.float32).reshape(2, 3))

    def loss_fn(x):
        z = tw.matmul(x, w)
        _, z = tw.while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, z * 1.5), (0, z))
        z = tw.cond(tw.reduce_sum(z) > 0, lambda: z + 1.0, lambda: -z)
        return tw.reduce_sum(z * z)

    @tw.function
    def traced(x):
        with tw.GradientTape() as t:
            loss = loss_fn(x)
        return t.gradient(loss, w)

    x = tw.ones([2, 2])
    with tw.GradientTape() as t:
        loss = loss_fn(x)
    np.testing.assert_allclose(traced(x).numpy(), t.gradient(loss, w).numpy(), rtol=1e-6)
    f = tw.function(loss_fn)
    with tw.GradientTape() as t:  # a tape around the call of a function that contains control flow
        loss = f(x)
    np.testing.assert_allclose(t.gradient(loss, w).numpy(), traced(x).numpy(), rtol=1e-6)
