"""Batch normalization with ``tf.layers.batch_normalization``: a boolean ``is_training``
placeholder, the moving averages updated through the ``UPDATE_OPS`` collection as a control
dependency of the train op (the pattern every TF1 batch-norm program needs).

Changes from a TF1 program: the import line; data: scikit-learn's 8x8 digits; 300 steps.
"""
import numpy as np
import tensorweave.compat.v1 as tf
from corpus_data import Batches, digits

METRIC = ("accuracy", "higher")
# TensorFlow 2.21 tf.compat.v1 on this file (run_reference.py --tensorflow, TF_USE_LEGACY_KERAS=1):
TF_REFERENCE = {"first_loss": 2.315611, "last_loss": 0.01345, "metric": 0.972222}


def main():
    x_train, y_train, x_test, y_test = digits()
    data = Batches(x_train, y_train)
    tf.set_random_seed(5)
    x = tf.placeholder(tf.float32, [None, 64])
    y = tf.placeholder(tf.int64, [None])
    is_training = tf.placeholder(tf.bool, name="is_training")
    h = tf.layers.dense(x, 64, use_bias=False)
    h = tf.layers.batch_normalization(h, training=is_training)
    h = tf.nn.relu(h)
    h = tf.layers.dense(h, 64, use_bias=False)
    h = tf.nn.relu(tf.layers.batch_normalization(h, training=is_training, momentum=0.9))
    logits = tf.layers.dense(h, 10)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    with tf.control_dependencies(update_ops):
        train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(loss, {x: x_train, y: y_train, is_training: False})
        for _ in range(300):
            bx, by = data.next_batch(64)
            sess.run(train_op, {x: bx, y: by, is_training: True})
        last = sess.run(loss, {x: x_train, y: y_train, is_training: False})
        acc = sess.run(accuracy, {x: x_test, y: y_test, is_training: False})
        moving = [v for v in tf.global_variables() if "moving_mean" in v.name]
        assert len(moving) == 2 and float(np.abs(sess.run(moving[0])).sum()) > 0
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(acc)}
