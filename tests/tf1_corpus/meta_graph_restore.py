"""Save a model in one program and continue it in another from the ``.meta`` file alone (the TF1
"save and restore models" tutorial): the first part builds a ``tf.layers`` network, puts its input,
logits and train op into collections and ``Saver.save``s it; the second starts from an empty graph,
``tf.train.import_meta_graph`` + ``restore(latest_checkpoint)``, finds the tensors by name
(``get_tensor_by_name``) and by collection, trains on and evaluates. No model code is rerun.

Changes from a TF1 program: the import line; data: scikit-learn's 8x8 digits; a temporary
directory; 2 x 150 steps; both parts in one file (each in its own graph).
"""
import os
import tempfile

import numpy as np
import tensorweave.compat.v1 as tf
from corpus_data import Batches, digits

METRIC = ("accuracy", "higher")
# TensorFlow 2.21 tf.compat.v1 on this file (run_reference.py --tensorflow, TF_USE_LEGACY_KERAS=1):
TF_REFERENCE = {"first_loss": 2.368274, "last_loss": 0.082392, "metric": 0.972222}


def train_and_save(ckpt_dir, data, x_train, y_train):
    with tf.Graph().as_default():
        tf.set_random_seed(5)
        x = tf.placeholder(tf.float32, [None, 64], name="x")
        y = tf.placeholder(tf.int64, [None], name="y")
        keep_prob = tf.placeholder_with_default(1.0, [], name="keep_prob")
        hidden = tf.layers.dense(x, 32, activation=tf.nn.relu, name="hidden")
        hidden = tf.nn.dropout(hidden, keep_prob=keep_prob)
        logits = tf.layers.dense(hidden, 10, name="logits")
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="loss")
        global_step = tf.train.get_or_create_global_step()
        train_op = tf.train.AdamOptimizer(0.01).minimize(loss, global_step=global_step)
        tf.add_to_collection("logits", logits)
        tf.add_to_collection("my_train_op", train_op)
        saver = tf.train.Saver(max_to_keep=2)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            first = sess.run(loss, {x: x_train, y: y_train})
            for i in range(150):
                bx, by = data.next_batch(32)
                sess.run(train_op, {x: bx, y: by, keep_prob: 0.9})
                if (i + 1) % 50 == 0:
                    saver.save(sess, os.path.join(ckpt_dir, "model"), global_step=global_step)
            mid = sess.run(loss, {x: x_train, y: y_train})
    return first, mid


def main():
    x_train, y_train, x_test, y_test = digits()
    data = Batches(x_train, y_train)
    ckpt_dir = tempfile.mkdtemp()
    first, mid = train_and_save(ckpt_dir, data, x_train, y_train)
    assert sorted(f for f in os.listdir(ckpt_dir) if f.endswith(".meta")) == ["model-100.meta", "model-150.meta"]
    with tf.Graph().as_default() as graph:
        latest = tf.train.latest_checkpoint(ckpt_dir)
        saver = tf.train.import_meta_graph(latest + ".meta")
        x = graph.get_tensor_by_name("x:0")
        y = graph.get_tensor_by_name("y:0")
        keep_prob = graph.get_tensor_by_name("keep_prob:0")
        loss = graph.get_tensor_by_name("loss:0")
        logits = tf.get_collection("logits")[0]
        train_op = tf.get_collection("my_train_op")[0]
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
        with tf.Session() as sess:
            saver.restore(sess, latest)
            step = sess.run(tf.train.get_global_step())
            assert step == 150, step
            assert abs(sess.run(loss, {x: x_train, y: y_train}) - mid) < 1e-5
            for _ in range(150):
                bx, by = data.next_batch(32)
                sess.run(train_op, {x: bx, y: by, keep_prob: 0.9})
            last = sess.run(loss, {x: x_train, y: y_train})
            acc = sess.run(accuracy, {x: x_test, y: y_test})
            assert sess.run(tf.train.get_global_step()) == 300
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(acc)}
