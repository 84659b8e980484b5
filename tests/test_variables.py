"""Variables in eager mode, graph mode and tw.function."""
import numpy as np
import pytest

import tensorweave as tw


def test_eager_assignments_are_immediate():
    v = tw.Variable([1.0, 2.0], name="v")
    v.assign([3.0, 4.0])
    v.assign_add([1.0, 1.0])
    v.assign_sub([0.5, 0.5])
    np.testing.assert_array_equal(v.numpy(), [3.5, 4.5])
    assert v.dtype == tw.float32 and v.shape == [2] and v.name == "v:0"
    assert (v * 2).numpy().tolist() == [7.0, 9.0]
    v += [1.0, 1.0]
    assert v.numpy().tolist() == [4.5, 5.5]


def test_initializers_and_callables():
    v = tw.Variable(lambda: tw.ones([2, 2]) * 3.0)
    assert v.numpy().sum() == 12.0
    w = tw.Variable(np.zeros(3), dtype=tw.float32)
    assert w.dtype == tw.float32
    with pytest.raises(ValueError, match="incompatible"):
        tw.Variable([1.0, 2.0], shape=[3])


def test_assign_checks_dtype_and_shape():
    v = tw.Variable([1.0, 2.0])
    with pytest.raises(tw.errors.InvalidArgumentError, match="shape"):
        v.assign([1.0, 2.0, 3.0])
    with pytest.raises((TypeError, ValueError)):
        v.assign(tw.constant([1, 2]))


def test_graph_assign_takes_effect_when_run():
    g = tw.Graph()
    with g.as_default():
        v = tw.Variable(0, name="counter")
        inc = v.assign_add(1)
        init = tw.compat.v1.global_variables_initializer()
    with tw.Session(graph=g) as s:
        s.run(init)
        assert [int(s.run(inc)) for _ in range(3)] == [1, 2, 3]
        assert int(s.run(v)) == 3


def test_variable_created_inside_function_is_created_once():
    created = []

    class M:
        v = None

    m = M()

    @tw.function
    def f(x):
        if m.v is None:
            m.v = tw.Variable(tw.ones([2]))
            created.append(1)
        return m.v * x

    np.testing.assert_array_equal(f(tw.constant(2.0)).numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(f(tw.constant(3.0)).numpy(), [3.0, 3.0])
    assert created == [1]
    assert isinstance(m.v.numpy(), np.ndarray)


def test_function_side_effects_run_in_program_order():
    v = tw.Variable(1.0)

    @tw.function
    def f():
        v.assign(v * 2.0)
        a = v.read_value()
        v.assign_add(1.0)
        return a, v.read_value()

    a, b = f()
    assert (float(a), float(b)) == (2.0, 3.0)
    a, b = f()
    assert (float(a), float(b)) == (6.0, 7.0)


def test_sparse_read_and_scatter():
    v = tw.Variable(np.arange(12, dtype=np.float32).reshape(4, 3))
    rows = v.sparse_read([3, 0])
    np.testing.assert_array_equal(rows.numpy(), [[9, 10, 11], [0, 1, 2]])
    v.scatter_add(tw.IndexedSlices(tw.ones([2, 3]), tw.constant([1, 1])))
    np.testing.assert_array_equal(v.numpy()[1], [5, 6, 7])
