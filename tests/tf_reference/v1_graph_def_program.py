"""A TF1 freeze-and-serve program, run by TensorFlow 2.21 (``v1_graph_def_oracle.py``) and by
tensorweave (``tests/test_v1_graph_def.py``) with only the ``tf`` module swapped: train a small
MLP, freeze it with ``graph_util.convert_variables_to_constants``, write the GraphDef with
``write_graph(as_text=False)``, parse it back, import it with a prefix, with ``input_map`` and
with ``return_elements``, and prune with ``extract_sub_graph``."""
import os

import numpy as np

W1 = ((np.arange(12).reshape(3, 4) % 5) - 2.0) / 4.0
W2 = ((np.arange(4).reshape(4, 1) % 3) - 1.0) / 2.0
X = np.sin(np.arange(15, dtype=np.float64)).reshape(5, 3).astype(np.float32)
Y = (X.sum(1, keepdims=True) > 0).astype(np.float32)


def run(tf, workdir):
    out = {}
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 3], name="x")
        labels = tf.placeholder(tf.float32, [None, 1], name="labels")
        w1 = tf.Variable(W1.astype(np.float32), name="w1")
        b1 = tf.Variable(tf.zeros([4]), name="b1")
        hidden = tf.nn.relu(tf.matmul(x, w1) + b1, name="hidden")
        w2 = tf.get_variable("w2", initializer=W2.astype(np.float32))
        output = tf.identity(tf.matmul(hidden, w2), name="output")
        loss = tf.reduce_mean(tf.square(output - labels))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(5):
                sess.run(train, {x: X, labels: Y})
            out["trained"] = sess.run(output, {x: X}).tolist()
            frozen = tf.graph_util.convert_variables_to_constants(sess, sess.graph_def, ["output"])
        sub = tf.graph_util.extract_sub_graph(g.as_graph_def(), ["hidden"])
    sub_names = {n.name for n in sub.node}
    out["sub_graph"] = {"has_x": "x" in sub_names, "has_hidden": "hidden" in sub_names,
                        "has_output": "output" in sub_names, "has_labels": "labels" in sub_names}
    out["frozen_has_variables"] = any(n.op in ("VariableV2", "VarHandleOp", "ReadVariableOp") for n in frozen.node)
    out["frozen_has_labels"] = any(n.name == "labels" for n in frozen.node)
    tf.train.write_graph(frozen, workdir, "frozen.pb", as_text=False)
    graph_def = tf.GraphDef()
    with open(os.path.join(workdir, "frozen.pb"), "rb") as f:
        graph_def.ParseFromString(f.read())
    with tf.Graph().as_default():
        served, = tf.import_graph_def(graph_def, return_elements=["output:0"])
        out["prefixed_name"] = served.name
        with tf.Session() as sess:
            out["served"] = sess.run(served, {"import/x:0": X}).tolist()
    with tf.Graph().as_default():
        z = tf.placeholder(tf.float32, [None, 3], name="z")
        mapped, hidden_op = tf.import_graph_def(graph_def, input_map={"x:0": z * 2.0},
                                                return_elements=["output:0", "hidden"], name="")
        out["mapped_name"], out["hidden_op"] = mapped.name, hidden_op.name
        with tf.Session() as sess:
            out["mapped"] = sess.run(mapped, {z: X / 2.0}).tolist()
    return out
