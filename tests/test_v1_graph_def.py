"""TF1's GraphDef life cycle: ``as_graph_def``/``sess.graph_def``, ``graph_util`` (freeze, prune,
remove training nodes), ``write_graph``, ``GraphDef.ParseFromString`` and ``import_graph_def``.

``tf_reference/v1_graph_def_program.py`` runs here with ``tensorweave.compat.v1`` and must give
TensorFlow 2.21's results (``tf_reference/v1_graph_def.json``, from ``v1_graph_def_oracle.py``)."""
import json
import os
import sys

import numpy as np
import pytest

import tensorweave.compat.v1 as tf
from tensorweave.saving.validation import LoadError

HERE = os.path.dirname(os.path.abspath(__file__))


def _program():
    sys.path.insert(0, os.path.join(HERE, "tf_reference"))
    try:
        import v1_graph_def_program
    finally:
        sys.path.pop(0)
    return v1_graph_def_program


def test_freeze_write_parse_import_matches_tensorflow(tmp_path):
    with open(os.path.join(HERE, "tf_reference", "v1_graph_def.json")) as f:
        ref = json.load(f)
    got = _program().run(tf, str(tmp_path))
    for key in ("trained", "served", "mapped"):
        np.testing.assert_allclose(got[key], ref[key], rtol=1e-5, atol=1e-7, err_msg=key)
    for key in ("sub_graph", "frozen_has_variables", "frozen_has_labels", "prefixed_name", "mapped_name",
                "hidden_op"):
        assert got[key] == ref[key], key


def _small_graph():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None], name="x")
        w = tf.Variable(2.0, name="w")
        checked = tf.check_numerics(x * w, "bad", name="checked")
        tf.identity(tf.identity(checked, name="inner") + 1.0, name="y")
    return g


def test_graph_def_nodes_round_trip_and_errors(tmp_path):
    g = _small_graph()
    gd = g.as_graph_def()
    assert isinstance(gd, tf.GraphDef) and isinstance(gd.node[0], tf.NodeDef)
    y = [n for n in gd.node if n.name == "y"][0]
    assert y.op == "Identity" and y.input == [n.name for n in gd.node if n.op == "AddV2"]
    again = tf.GraphDef.FromString(gd.SerializeToString())
    assert [n.name for n in again.node] == [n.name for n in gd.node] and gd.ByteSize() > 0
    text = tf.train.write_graph(g, str(tmp_path), "graph.pbtxt")
    with open(text, "rb") as f:
        data = f.read()
    assert b'"op": "Identity"' in data
    with pytest.raises(LoadError, match="text form of a graph"):
        tf.GraphDef().ParseFromString(data)
    with pytest.raises(LoadError, match="protocol buffer"):
        tf.GraphDef().ParseFromString(b"\x08\x01\x12\x03abc")      # what TensorFlow's GraphDef bytes look like
    with pytest.raises(TypeError, match="must be a tf.GraphDef"):
        tf.import_graph_def([n for n in gd.node])
    with pytest.raises(ValueError, match="'nope' is not in the graph"):
        tf.graph_util.extract_sub_graph(gd, ["nope"])


def test_remove_training_nodes_and_variables_left_unfrozen():
    g = _small_graph()
    with g.as_default(), tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        frozen = tf.graph_util.convert_variables_to_constants(sess, g.as_graph_def(), ["y"])
        kept_w = tf.graph_util.convert_variables_to_constants(sess, g.as_graph_def(), ["y"],
                                                              variable_names_blacklist=["w"])
    slim = tf.graph_util.remove_training_nodes(frozen, protected_nodes=["y"])
    ops = {n.name: n.op for n in slim.node}
    assert "checked" not in ops and "inner" not in ops and ops["y"] == "Identity"
    with tf.Graph().as_default():
        y, = tf.import_graph_def(slim, return_elements=["y:0"], name="")
        with tf.Session() as sess:
            assert sess.run(y, {"x:0": [1.0, 3.0]}).tolist() == [3.0, 7.0]
    assert any(n.op == "VarHandleOp" for n in kept_w.node)
    with tf.Graph().as_default():
        y, = tf.import_graph_def(g.as_graph_def(), return_elements=["y:0"], name="m")
        with tf.Session() as sess:
            sess.run("m/w/Assign")   # as in TF, imported variables are in no collection: run their initializer
            assert sess.run(y, {"m/x:0": [1.0]}).tolist() == [3.0]
    assert tf.graph_util.tensor_shape_from_node_def_name(g, "x").as_list() == [None]
    assert tf.graph_util.must_run_on_cpu(g.get_operation_by_name("w"), pin_variables_on_cpu=True)
    assert not tf.graph_util.must_run_on_cpu(g.get_operation_by_name("y"))


def test_file_writer_takes_a_graph_def(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    g = _small_graph()
    with tf.Session(graph=g) as sess:
        writer = tf.summary.FileWriter(str(tmp_path), sess.graph_def)     # TF1's older spelling
        writer.close()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert {n.name for n in acc.Graph().node} >= {"x", "w", "y"}
