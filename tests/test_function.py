"""tw.function: tracing, caching per signature, input_signature, captures, gradients."""
import numpy as np
import pytest

import tensorweave as tw


def test_traces_once_per_signature():
    @tw.function
    def f(x, scale=2.0):
        return x * scale

    f(tw.constant([1.0]))
    f(tw.constant([5.0]))
    assert f.experimental_get_tracing_count() == 1
    f(tw.constant([1.0, 2.0]))            # new shape
    assert f.experimental_get_tracing_count() == 2
    f(tw.constant([1.0]), scale=3.0)      # new Python value
    assert f.experimental_get_tracing_count() == 3
    f(tw.constant([1.0], dtype=tw.float64), scale=3.0)  # new dtype
    assert f.experimental_get_tracing_count() == 4


def test_input_signature_generalises_shapes_and_rejects_others():
    @tw.function(input_signature=[tw.TensorSpec([None], tw.float32)])
    def f(x):
        return tw.reduce_sum(x)

    assert float(f(tw.constant([1.0, 2.0]))) == 3.0
    assert float(f(tw.constant([1.0, 2.0, 3.0]))) == 6.0
    assert f.experimental_get_tracing_count() == 1
    with pytest.raises(ValueError, match="input_signature"):
        f(tw.constant([[1.0]]))
    cf = f.get_concrete_function()
    assert cf.inputs[0].shape.as_list() == [None]


def test_nested_structures_and_numpy_inputs():
    @tw.function
    def f(d):
        return {"sum": d["a"] + d["b"][0], "n": 3}

    out = f({"a": np.ones(2, np.float32), "b": [tw.ones([2])]})
    np.testing.assert_array_equal(out["sum"].numpy(), [2.0, 2.0])
    assert out["n"] == 3


def test_function_runs_through_graph_and_captures_eager_tensors():
    c = tw.constant([10.0, 20.0])

    @tw.function
    def f(x):
        assert not tw.executing_eagerly()
        return x + c

    np.testing.assert_array_equal(f(tw.constant([1.0, 2.0])).numpy(), [11.0, 22.0])
    cf = f.get_concrete_function(tw.TensorSpec([2], tw.float32))
    assert any(op.type == "AddV2" for op in cf.graph.get_operations())


def test_tape_through_function_call():
    v = tw.Variable(3.0, dtype=tw.float64)

    @tw.function
    def f(x):
        return x * x * v

    x = tw.constant(2.0, dtype=tw.float64)
    with tw.GradientTape(persistent=True) as t:
        t.watch(x)
        y = f(x)
    assert float(t.gradient(y, x)) == 12.0
    assert float(t.gradient(y, v)) == 4.0


def test_training_step_in_function_matches_eager():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(16, 3)).astype(np.float32)
    Y = X @ np.array([[1.0], [-2.0], [0.5]], np.float32)

    def make():
        return tw.Variable(np.zeros((3, 1), np.float32))

    def step(w, x, y):
        with tw.GradientTape() as tape:
            loss = tw.reduce_mean(tw.square(tw.matmul(x, w) - y))
        g = tape.gradient(loss, w)
        w.assign_sub(0.1 * g)
        return loss

    w1, w2 = make(), make()
    fstep = tw.function(step)
    for _ in range(20):
        l1 = step(w1, tw.constant(X), tw.constant(Y))
        l2 = fstep(w2, tw.constant(X), tw.constant(Y))
    np.testing.assert_allclose(w1.numpy(), w2.numpy(), rtol=1e-6)
    np.testing.assert_allclose(float(l1), float(l2), rtol=1e-6)
    assert fstep.experimental_get_tracing_count() == 1


def test_method_decoration_binds_self():
    class Model:
        def __init__(self):
            self.w = tw.Variable(2.0)

        @tw.function
        def __call__(self, x):
            return self.w * x

    a, b = Model(), Model()
    b.w.assign(5.0)
    assert float(a(tw.constant(1.0))) == 2.0 and float(b(tw.constant(1.0))) == 5.0
