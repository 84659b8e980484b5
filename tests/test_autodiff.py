"""GradientTape and tw.gradients beyond the op table: tapes, unconnected, sparse, custom."""
import numpy as np
import pytest

import tensorweave as tw


def test_persistent_tape_and_reuse_error():
    x = tw.constant(3.0)
    with tw.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
        z = y * x
    assert float(t.gradient(y, x)) == 6.0 and float(t.gradient(z, x)) == 27.0
    with tw.GradientTape() as t2:
        t2.watch(x)
        y = x * x
    t2.gradient(y, x)
    with pytest.raises(RuntimeError, match="persistent"):
        t2.gradient(y, x)


def test_unconnected_and_integer_gradients():
    x = tw.constant(1.0)
    u = tw.constant(2.0)
    with tw.GradientTape() as t:
        t.watch([x, u])
        y = x * 2.0
    gx, gu = t.gradient(y, [x, u])
    assert float(gx) == 2.0 and gu is None
    with tw.GradientTape() as t:
        t.watch([x, u])
        y = x * 2.0
    assert float(t.gradient(y, u, unconnected_gradients="zero")) == 0.0


def test_variables_are_watched_automatically_unless_disabled():
    v = tw.Variable(2.0)
    frozen = tw.Variable(3.0, trainable=False)
    with tw.GradientTape() as t:
        y = v * frozen
    gv, gf = t.gradient(y, [v, frozen])
    assert float(gv) == 3.0 and gf is None
    with tw.GradientTape(watch_accessed_variables=False) as t:
        y = v * v
    assert t.gradient(y, v) is None
    assert t.watched_variables() == ()


def test_third_order_with_nested_tapes():
    x = tw.constant(2.0, dtype=tw.float64)
    with tw.GradientTape() as t3:
        t3.watch(x)
        with tw.GradientTape() as t2:
            t2.watch(x)
            with tw.GradientTape() as t1:
                t1.watch(x)
                y = x ** 4
            d1 = t1.gradient(y, x)
        d2 = t2.gradient(d1, x)
    d3 = t3.gradient(d2, x)
    assert (float(d1), float(d2), float(d3)) == (32.0, 48.0, 48.0)


def test_jacobian_and_batch_jacobian():
    x = tw.constant([[1.0, 2.0], [3.0, 4.0]], dtype=tw.float64)
    with tw.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    j = t.jacobian(y, x).numpy()
    assert j.shape == (2, 2, 2, 2)
    expected = np.zeros((2, 2, 2, 2))
    for i in range(2):
        for k in range(2):
            expected[i, k, i, k] = 2 * x.numpy()[i, k]
    np.testing.assert_array_equal(j, expected)
    bj = t.batch_jacobian(y, x).numpy()
    np.testing.assert_array_equal(bj, np.stack([np.diag(2 * x.numpy()[i]) for i in range(2)]))


def test_gather_gradient_is_sparse_and_densifies():
    params = tw.Variable(np.ones((5, 2), np.float32))
    with tw.GradientTape() as t:
        rows = tw.gather(params, [1, 3, 1])
        loss = tw.reduce_sum(rows * tw.constant([[1.0, 2.0]]))
    g = t.gradient(loss, params)
    assert isinstance(g, tw.IndexedSlices)
    dense = tw.convert_to_tensor(g).numpy()
    np.testing.assert_array_equal(dense, [[0, 0], [2, 4], [0, 0], [1, 2], [0, 0]])


def test_sparse_read_gradient_graph_mode():
    g = tw.Graph()
    with g.as_default():
        v = tw.Variable(np.ones((4, 3), np.float32))
        loss = tw.reduce_sum(v.sparse_read([0, 2]) * 3.0)
        (grad,) = tw.gradients(loss, [v])
        assert isinstance(grad, tw.IndexedSlices)
        dense = tw.convert_to_tensor(grad)
        init = tw.compat.v1.global_variables_initializer()
    with tw.Session(graph=g) as s:
        s.run(init)
        np.testing.assert_array_equal(s.run(dense), [[3] * 3, [0] * 3, [3] * 3, [0] * 3])


def test_stop_gradient_and_grad_ys():
    g = tw.Graph()
    with g.as_default():
        x = tw.constant(3.0)
        y = x * tw.stop_gradient(x)
        (dx,) = tw.gradients(y, [x], grad_ys=[tw.constant(2.0)])
        (none,) = tw.gradients(tw.stop_gradient(x) * 2.0, [x])
    assert none is None
    with tw.Session(graph=g) as s:
        assert s.run(dx) == 6.0


def test_custom_gradient_graph_and_eager():
    @tw.custom_gradient
    def log1pexp(x):
        e = tw.exp(x)

        def grad(dy):
            return dy * (1 - 1 / (1 + e))
        return tw.math.log1p(e), grad

    x = tw.constant(100.0)
    with tw.GradientTape() as t:
        t.watch(x)
        y = log1pexp(x)
    assert float(t.gradient(y, x)) == 1.0  # the naive gradient would be nan
    g = tw.Graph()
    with g.as_default():
        xs = tw.constant(100.0)
        (dx,) = tw.gradients(log1pexp(xs), [xs])
    with tw.Session(graph=g) as s:
        assert s.run(dx) == 1.0


def test_missing_gradient_raises_lookup_error():
    tw.register_op("NoGradOp", infer=lambda i, a: (i[0].shape, i[0].dtype))
    tw.register_kernel("NoGradOp")(lambda x: x)
    x = tw.constant(1.0)
    with tw.GradientTape() as t:
        t.watch(x)
        y = tw.raw_op("NoGradOp", [x])
    with pytest.raises(LookupError, match="No gradient defined for operation"):
        t.gradient(y, x)


def test_div_no_nan_gradient_is_zero_where_the_divisor_is_zero():
    x, y = tw.constant([3.0, np.nan, 2.0], tw.float64), tw.constant([0.0, 0.0, 4.0], tw.float64)
    with tw.GradientTape(persistent=True) as tape:
        tape.watch([x, y])
        z = tw.math.div_no_nan(x, y)
    np.testing.assert_array_equal(z.numpy(), [0.0, 0.0, 0.5])
    np.testing.assert_array_equal(tape.gradient(z, x).numpy(), [0.0, 0.0, 0.25])
    np.testing.assert_array_equal(tape.gradient(z, y).numpy(), [0.0, 0.0, -2.0 / 16.0])
