"""Train, checkpoint with ``tf.train.Saver`` (``global_step`` in the file name, ``max_to_keep``),
then, as a second run of the program would, build the graph again, restore the newest
checkpoint found by ``tf.train.latest_checkpoint`` and continue training (the TF1 "save and
restore" guide's workflow).

Changes from a TF1 program: the import line; data: scikit-learn's 8x8 digits; a temporary
directory; 2 x 150 steps.
"""
import os
import tempfile

import numpy as np
import tensorweave.compat.v1 as tf
from corpus_data import Batches, digits

METRIC = ("accuracy", "higher")
# TensorFlow 2.21 tf.compat.v1 on this file (run_reference.py --tensorflow, TF_USE_LEGACY_KERAS=1):
TF_REFERENCE = {"first_loss": 2.302584, "last_loss": 0.227308, "metric": 0.95}


def build():
    x = tf.placeholder(tf.float32, [None, 64], name="x")
    y = tf.placeholder(tf.int64, [None], name="y")
    global_step = tf.train.get_or_create_global_step()
    with tf.variable_scope("softmax"):
        W = tf.get_variable("W", [64, 10], initializer=tf.zeros_initializer())
        b = tf.get_variable("b", [10], initializer=tf.zeros_initializer())
    logits = tf.matmul(x, W) + b
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    train = tf.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=global_step)
    acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
    return x, y, global_step, loss, train, acc


def main():
    x_train, y_train, x_test, y_test = digits()
    data = Batches(x_train, y_train)
    ckpt_dir = tempfile.mkdtemp()
    with tf.Graph().as_default():
        x, y, step, loss, train, acc = build()
        saver = tf.train.Saver(max_to_keep=3)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            first = sess.run(loss, {x: x_train, y: y_train})
            for i in range(150):
                bx, by = data.next_batch(32)
                sess.run(train, {x: bx, y: by})
                if (i + 1) % 30 == 0:
                    saver.save(sess, os.path.join(ckpt_dir, "model.ckpt"), global_step=step)
            mid = sess.run(loss, {x: x_train, y: y_train})
    with tf.Graph().as_default():
        x, y, step, loss, train, acc = build()
        saver = tf.train.Saver()
        with tf.Session() as sess:
            latest = tf.train.latest_checkpoint(ckpt_dir)
            saver.restore(sess, latest)
            assert latest.endswith("model.ckpt-150") and sess.run(step) == 150
            assert abs(sess.run(loss, {x: x_train, y: y_train}) - mid) < 1e-5
            for i in range(150):
                bx, by = data.next_batch(32)
                sess.run(train, {x: bx, y: by})
            last = sess.run(loss, {x: x_train, y: y_train})
            accuracy = sess.run(acc, {x: x_test, y: y_test})
            assert sess.run(step) == 300
    states = tf.train.get_checkpoint_state(ckpt_dir).all_model_checkpoint_paths
    assert [os.path.basename(p) for p in states] == ["model.ckpt-90", "model.ckpt-120", "model.ckpt-150"], states
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(accuracy)}
