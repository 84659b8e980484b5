"""Graphs, operations, names, scopes, collections, control dependencies and Session behaviour."""
import collections

import numpy as np
import pytest

import tensorweave as tw


def test_ops_get_unique_names_and_scopes():
    g = tw.Graph()
    with g.as_default():
        a = tw.constant(1.0, name="a")
        b = tw.constant(2.0, name="a")
        with g.name_scope("layer"):
            c = tw.add(a, b)
            with g.name_scope("inner"):
                d = tw.multiply(c, c, name="sq")
        with g.name_scope("layer"):
            e = tw.add(a, b)
    assert (a.name, b.name) == ("a:0", "a_1:0")
    assert c.name == "layer/AddV2:0"
    assert d.name == "layer/inner/sq:0"
    assert e.name == "layer_1/AddV2:0"
    assert g.get_tensor_by_name("layer/inner/sq:0") is d
    assert g.get_operation_by_name("layer/AddV2") is c.op
    assert [t.name for t in d.op.inputs] == ["layer/AddV2:0", "layer/AddV2:0"]
    assert d.op.type == "Mul" and c.op.attrs == {}


def test_operation_records_creation_site_and_device():
    g = tw.Graph()
    with g.as_default():
        with tw.device("/cpu:0"):
            x = tw.constant([1.0, 2.0])
    assert x.op.traceback.endswith(f"test_graph.py:{test_operation_records_creation_site_and_device.__code__.co_firstlineno + 4}")
    assert "CPU:0" in x.op.device


def test_static_shapes_are_partially_known():
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [None, 3])
        y = tw.matmul(x, tw.ones([3, 4]))
        z = tw.reduce_sum(y, axis=0)
        w = tw.reshape(x, [-1])
    assert y.shape.as_list() == [None, 4]
    assert z.shape.as_list() == [4]
    assert w.shape.as_list() == [None]


def test_session_runs_only_needed_subgraph():
    g = tw.Graph()
    with g.as_default():
        unfed = tw.placeholder(tw.float32, [2])
        unused = unfed * 2.0  # noqa: F841 - would fail if run
        x = tw.constant([1.0, 2.0]) + 1.0
    with tw.Session(graph=g) as sess:
        np.testing.assert_array_equal(sess.run(x), [2.0, 3.0])


def test_nested_fetches_keep_their_structure():
    Pair = collections.namedtuple("Pair", "a b")
    g = tw.Graph()
    with g.as_default():
        a = tw.constant(1)
        b = tw.constant(2)
    with tw.Session(graph=g) as s:
        out = s.run({"x": [a, (b, a)], "p": Pair(a, b), "op": b.op})
    assert out["x"][0] == 1 and out["x"][1] == (2, 1)
    assert out["p"] == Pair(1, 2) and out["op"] is None


def test_control_dependencies_order_reads_after_assignment():
    g = tw.Graph()
    with g.as_default():
        v = tw.Variable(1.0)
        assign = v.assign(5.0)
        with tw.control_dependencies([assign]):
            read = v.read_value() + 0.0
        init = tw.compat.v1.global_variables_initializer()
    with tw.Session(graph=g) as s:
        s.run(init)
        assert s.run(read) == 5.0


def test_collections_and_initializer():
    g = tw.Graph()
    with g.as_default():
        v = tw.Variable(1.0, name="v")
        w = tw.Variable(2.0, trainable=False, name="w")
        assert tw.compat.v1.global_variables() == [v, w]
        assert tw.compat.v1.trainable_variables() == [v]
        g.add_to_collection("mine", 3)
        assert g.get_collection("mine") == [3]
        read = v.value() * 2.0
    with tw.Session(graph=g) as s:
        with pytest.raises(tw.errors.FailedPreconditionError, match="uninitialized value v"):
            s.run(read)
        s.run(v.initializer)
        assert s.run(read) == 2.0


def test_feeding_any_tensor_replaces_its_producer():
    g = tw.Graph()
    with g.as_default():
        a = tw.constant(1.0)
        b = a * 10.0
        c = b + 1.0
    with tw.Session(graph=g) as s:
        assert s.run(c, {b: 5.0}) == 6.0
        assert s.run(c) == 11.0


def test_interactive_session_eval():
    g = tw.Graph()
    with g.as_default():
        x = tw.constant(3.0) * 2.0
    sess = tw.InteractiveSession(graph=g)
    try:
        assert x.eval() == 6.0
        assert x.op.run() is None
    finally:
        sess.close()


def test_graph_tensors_refuse_python_bool_and_numpy():
    g = tw.Graph()
    with g.as_default():
        x = tw.constant(1.0)
        with pytest.raises(TypeError, match="Python bool"):
            bool(x)
        with pytest.raises(TypeError):
            np.asarray(x)


def test_mixing_graphs_is_an_error():
    g1, g2 = tw.Graph(), tw.Graph()
    with g1.as_default():
        a = tw.constant(1.0)
    with g2.as_default():
        with pytest.raises(ValueError, match="same graph"):
            tw.add(a, 1.0)


def test_compat_v1_disable_eager(graph_mode):
    import tensorweave.compat.v1 as tf
    assert not tf.executing_eagerly()
    x = tf.constant(2.0)
    assert isinstance(x, tw.Tensor) and x.op.graph is tf.get_default_graph()
    with tf.Session() as s:
        assert s.run(x * 3.0) == 6.0


def test_finalized_graph_rejects_new_ops():
    g = tw.Graph()
    g.finalize()
    with g.as_default():
        with pytest.raises(RuntimeError, match="finalized"):
            tw.constant(1.0)
