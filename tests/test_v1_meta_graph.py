"""TF1 meta graphs (issue 15): ``Saver.save`` writes ``<prefix>.meta``; ``import_meta_graph`` +
``restore`` + ``get_tensor_by_name`` in a fresh graph (and a fresh process) continue the program.
Expected numbers come from TensorFlow 2.21's ``tf.compat.v1`` running the same snippets."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorweave.compat.v1 as tf
from tensorweave.compat import v1_meta_graph
from tensorweave.saving import tensor_file
from tensorweave.saving.validation import LoadError


def _linear_program(directory):
    """x @ w trained one step of GradientDescent(0.1) on sum(y), then saved (TF's snippet)."""
    with tf.Graph().as_default() as g:
        x = tf.placeholder(tf.float32, [None, 2], name="x")
        w = tf.Variable([[1.0], [2.0]], name="w")
        y = tf.identity(tf.matmul(x, w), name="y")
        tf.add_to_collection("outputs", y)
        tf.add_to_collection("misc", "hello")
        tf.add_to_collection("misc", 7)
        step = tf.train.get_or_create_global_step()
        tf.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(y), global_step=step)
        saver = tf.train.Saver()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(tf.get_collection("train_op")[0], {x: [[1.0, 1.0]]})
            return saver.save(sess, os.path.join(directory, "m"), global_step=step), g


def test_save_writes_meta_and_import_restores_and_trains(tmp_path):
    prefix, _ = _linear_program(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "m-1.meta", "m-1.safetensors"]
    with tf.Graph().as_default() as g:
        saver = tf.train.import_meta_graph(prefix + ".meta")
        assert isinstance(saver, tf.train.Saver)
        assert [v.name for v in tf.global_variables()][:2] == ["w:0", "global_step:0"]
        assert [v.name for v in tf.trainable_variables()] == ["w:0"]
        assert tf.get_collection("misc") == [b"hello", 7]         # TF gives strings back as bytes
        (y,) = tf.get_collection("outputs")
        assert y is g.get_tensor_by_name("y:0") and y.shape.as_list() == [None, 1]
        (train,) = tf.get_collection("train_op")
        with tf.Session() as sess:
            saver.restore(sess, prefix)
            # TF 2.21: [[2.8]], step 1; after one more step w = [[0.8], [1.8]]
            np.testing.assert_allclose(sess.run("y:0", {"x:0": [[1.0, 1.0]]}), [[2.8]], rtol=1e-6)
            assert sess.run("global_step:0") == 1
            sess.run(train, {"x:0": [[1.0, 1.0]]})
            np.testing.assert_allclose(sess.run("w:0"), [[0.8], [1.8]], rtol=1e-6)
            assert sess.run("global_step:0") == 2


def test_uninitialized_imported_variables_and_initializer(tmp_path):
    prefix, _ = _linear_program(str(tmp_path))
    with tf.Graph().as_default():
        tf.train.import_meta_graph(prefix + ".meta")
        with tf.Session() as sess:
            with pytest.raises(tf.errors.FailedPreconditionError, match="uninitialized value w"):
                sess.run("y:0", {"x:0": [[1.0, 1.0]]})
            sess.run(tf.global_variables_initializer())        # the imported initializers
            np.testing.assert_allclose(sess.run("y:0", {"x:0": [[1.0, 1.0]]}), [[3.0]])


def test_variable_tensor_name_fetches_its_value():
    # The handle node of tf.Variable(name="w") is "w" (it was "w/w/"), so "w:0" names it, and
    # fetching it gives the value, as TF1 does.
    with tf.Graph().as_default() as g:
        w = tf.Variable([1.0, 2.0], name="w")
        assert g.get_tensor_by_name("w:0").op.type == "VarHandleOp"
        with tf.Session() as sess:
            sess.run(w.initializer)
            np.testing.assert_array_equal(sess.run("w:0"), [1.0, 2.0])
        with tf.name_scope("block") as scope:
            z = tf.identity(tf.constant(1.0), name=scope)
        assert z.op.name == "block"


_FRESH = """
import sys
import numpy as np
import tensorweave.compat.v1 as tf
prefix, out = sys.argv[1], sys.argv[2]
with tf.Graph().as_default() as g:
    saver = tf.train.import_meta_graph(prefix + ".meta")
    x = g.get_tensor_by_name("x:0")
    keep = g.get_tensor_by_name("keep_prob:0")
    probs = g.get_tensor_by_name("probs:0")
    loss = tf.get_collection("loss")[0]
    train = tf.get_collection("train_op")[0]
    with tf.Session() as sess:
        saver.restore(sess, prefix)
        feed = {x: np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4), keep: 1.0,
                "y:0": np.array([0, 1, 2, 0, 1, 2])}
        before = sess.run(probs, feed)
        for _ in range(3):
            sess.run(train, feed)
        np.savez(out, before=before, after=sess.run(loss, feed), step=sess.run(tf.train.get_global_step()))
"""


def _mlp(train_steps, directory=None):
    """A tf.layers MLP with dropout and Adam; returns predictions, the loss after 3 more steps,
    and the prefix saved after ``train_steps`` steps."""
    tf.set_random_seed(3)
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    y = tf.placeholder(tf.int64, [None], name="y")
    keep = tf.placeholder_with_default(1.0, [], name="keep_prob")
    step = tf.train.get_or_create_global_step()
    h = tf.layers.dense(x, 8, activation=tf.nn.relu)
    h = tf.nn.dropout(h, keep_prob=keep)
    logits = tf.layers.dense(h, 3)
    tf.nn.softmax(logits, name="probs")
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    tf.add_to_collection("loss", loss)
    train = tf.train.AdamOptimizer(0.05).minimize(loss, global_step=step)
    return x, y, keep, loss, train


def test_fresh_process_continues_training_exactly(tmp_path):
    feed_x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4)
    feed_y = np.array([0, 1, 2, 0, 1, 2])
    with tf.Graph().as_default() as g:
        x, y, keep, loss, train = _mlp(2)
        saver = tf.train.Saver()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(2):
                sess.run(train, {x: feed_x, y: feed_y, keep: 0.8})
            prefix = saver.save(sess, str(tmp_path / "model"), global_step=tf.train.get_global_step())
            feed = {x: feed_x, y: feed_y, keep: 1.0}
            before = sess.run(g.get_tensor_by_name("probs:0"), feed)
            for _ in range(3):
                sess.run(train, feed)
            after = sess.run(loss, feed)
    script = tmp_path / "fresh.py"
    script.write_text(textwrap.dedent(_FRESH))
    subprocess.run([sys.executable, str(script), prefix, str(tmp_path / "out.npz")], check=True, timeout=120)
    got = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(got["before"], before)
    np.testing.assert_array_equal(got["after"], after)      # Adam's slots and step came back too
    assert int(got["step"]) == 5


def test_import_scope_clear_devices_and_input_map(tmp_path):
    with tf.Graph().as_default():
        with tf.device("/cpu:0"):
            x = tf.placeholder(tf.float32, [None], name="x")
            w = tf.Variable(2.0, name="w")
            tf.identity(x * w, name="y")
        tf.train.export_meta_graph(str(tmp_path / "g.meta"))
    with tf.Graph().as_default() as g:
        tf.constant(1.0, name="w")                    # a name already taken
        tf.train.import_meta_graph(str(tmp_path / "g.meta"), import_scope="imp")
        assert [v.name for v in tf.global_variables()] == ["imp/w:0"]
        assert g.get_operation_by_name("imp/y").device.endswith("CPU:0")
        tf.train.import_meta_graph(str(tmp_path / "g.meta"), clear_devices=True)
        assert [v.name for v in tf.global_variables()] == ["imp/w:0", "w_1:0"]
        assert not g.get_operation_by_name("y").device
        feed = tf.constant([5.0], name="fed")
        tf.train.import_meta_graph(str(tmp_path / "g.meta"), import_scope="mapped", input_map={"x:0": feed})
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            assert sess.run("imp/y:0", {"imp/x:0": [1.0, 3.0]}).tolist() == [2.0, 6.0]
            assert sess.run("mapped/y:0").tolist() == [10.0]
        with pytest.raises(ValueError, match="not placeholders"):
            tf.train.import_meta_graph(str(tmp_path / "g.meta"), input_map={"w:0": feed})


def test_export_scope_and_meta_graph_object():
    with tf.Graph().as_default():
        tf.constant(3.0, name="outside")
        with tf.name_scope("model"):
            a = tf.placeholder(tf.float32, [], name="a")
            tf.add(a, 1.0, name="b")
        mg = tf.train.export_meta_graph(export_scope="model")
        assert [n["name"] for n in mg.graph_def["nodes"]] == ["a", "Const", "b"]
        assert tf.train.import_meta_graph(mg) is None                 # no variables: no Saver
    with tf.Graph().as_default():
        tf.train.import_meta_graph(mg, import_scope="m2")
        with tf.Session() as sess:
            assert sess.run("m2/b:0", {"m2/a:0": 2.0}) == 3.0


def test_python_nodes_are_left_out_and_named_on_lookup(tmp_path):
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [], name="x")
        s = tf.summary.scalar("x", x)
        merged = tf.summary.merge_all()
        f = tf.py_func(lambda v: v * 2, [x], tf.float32, name="doubler")
        tf.identity(f, name="after_py")
        tf.add_to_collection("misc", tf.train.Coordinator())          # not serializable: left out
        tf.add_to_collection("kept", x)
        mg = tf.train.export_meta_graph(str(tmp_path / "g.meta"))
    assert {s.op.name, merged.op.name, "doubler", "after_py"} <= set(mg.doc["dropped"])
    assert "misc" not in mg.collection_def and mg.collection_def["kept"] == [{"tensor": "x:0"}]
    with tf.Graph().as_default() as g:
        tf.train.import_meta_graph(str(tmp_path / "g.meta"))
        with pytest.raises(KeyError, match="after_py.*left out.*ran Python code"):
            g.get_tensor_by_name("after_py:0")


def test_control_flow_round_trip(tmp_path):
    with tf.Graph().as_default():
        n = tf.placeholder(tf.int32, [], name="n")
        v = tf.Variable(1.5, name="v")
        i, acc = tf.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a * v), [0, tf.constant(1.0)])
        out = tf.cond(n > 2, lambda: acc, lambda: -acc)
        tf.identity(out, name="out")
        tf.identity(tf.gradients(out, v)[0], name="grad")
        saver = tf.train.Saver()
        with tf.Session() as sess:
            sess.run(v.initializer)
            prefix = saver.save(sess, str(tmp_path / "cf"))
            want = sess.run(["out:0", "grad:0"], {n: 3})
    with tf.Graph().as_default():
        saver = tf.train.import_meta_graph(prefix + ".meta")
        with tf.Session() as sess:
            saver.restore(sess, prefix)
            np.testing.assert_allclose(sess.run(["out:0", "grad:0"], {"n:0": 3}), want)
            np.testing.assert_allclose(want, [3.375, 6.75])


def test_write_meta_graph_false_and_max_to_keep(tmp_path):
    with tf.Graph().as_default():
        v = tf.Variable(1.0, name="v")
        saver = tf.train.Saver(max_to_keep=2)
        with tf.Session() as sess:
            sess.run(v.initializer)
            saver.save(sess, str(tmp_path / "a"), write_meta_graph=False)
            assert not os.path.exists(tmp_path / "a.meta")
            for step in range(3):
                saver.save(sess, str(tmp_path / "m"), global_step=step)
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith("m")) == [
        "m-1.meta", "m-1.safetensors", "m-2.meta", "m-2.safetensors"]


def _rewrite(path, edit):
    meta = tensor_file.read_metadata(path)
    doc = json.loads(meta["meta_graph"])
    edit(doc)
    meta["meta_graph"] = json.dumps(doc)
    tensor_file.write_tensors(path, tensor_file.read_tensors(path), meta)


def _set_op(doc, name, op_type):
    next(n for n in doc["graph"]["nodes"] if n["name"] == name)["op"] = op_type


@pytest.mark.parametrize("edit, message", [
    (lambda d: _set_op(d, "y", "PyFunc"), "PyFunc.*cannot be loaded"),
    (lambda d: _set_op(d, "y", "NoSuchOp"), "unknown op type 'NoSuchOp'"),
    (lambda d: d["variables"][0].update(name="y"), "does not name its own VarHandleOp"),
    (lambda d: d["collections"].update(c=[{"pickle": "x"}]), "unknown collection item tag"),
    (lambda d: d["collections"].update(c=[{"op": "nope"}]), "not in the saved graph"),
    (lambda d: d["saver"]["restore"].update(w=["x:0", "y"]), "does not assign its placeholder"),
    (lambda d: d.update(extra=1), "unknown field"),
], ids=["python-node", "unknown-op", "variable-not-handle", "collection-tag", "collection-name", "saver",
        "extra-field"])
def test_tampered_meta_files_are_refused(tmp_path, edit, message):
    prefix, _ = _linear_program(str(tmp_path))
    _rewrite(prefix + ".meta", edit)
    with tf.Graph().as_default(), pytest.raises(LoadError, match=message):
        tf.train.import_meta_graph(prefix + ".meta")


def test_not_a_meta_file(tmp_path):
    prefix, _ = _linear_program(str(tmp_path))
    with tf.Graph().as_default(), pytest.raises(LoadError, match="not a tensorweave meta graph"):
        tf.train.import_meta_graph(prefix + ".safetensors")
    assert v1_meta_graph.FORMAT == "tensorweave.meta_graph"


def test_an_imported_graph_saves_and_imports_again(tmp_path):
    prefix, _ = _linear_program(str(tmp_path))
    with tf.Graph().as_default():
        saver = tf.train.import_meta_graph(prefix + ".meta")
        with tf.Session() as sess:
            saver.restore(sess, prefix)
            sess.run(tf.get_collection("train_op")[0], {"x:0": [[1.0, 1.0]]})
            again = saver.save(sess, str(tmp_path / "again"))
            fresh = tf.train.Saver().save(sess, str(tmp_path / "fresh"))
    for p in (again, fresh):
        with tf.Graph().as_default():
            saver = tf.train.import_meta_graph(p + ".meta")
            with tf.Session() as sess:
                saver.restore(sess, p)
                np.testing.assert_allclose(sess.run("w:0"), [[0.8], [1.8]], rtol=1e-6)
                assert sess.run("global_step:0") == 2


def test_a_tensorflow_meta_file_is_refused_with_a_hint(tmp_path):
    path = tmp_path / "model.meta"
    path.write_bytes(b"\n\x8f\x02\n\x0cmeta_info_def" + bytes(range(64)))   # the start of a protobuf
    with tf.Graph().as_default(), pytest.raises(LoadError, match="written by TensorFlow"):
        tf.train.import_meta_graph(str(path))
