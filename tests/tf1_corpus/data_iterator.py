"""Logistic regression whose inputs come from a ``tf.data`` pipeline inside the graph:
``Dataset.from_tensor_slices(...).shuffle().repeat().batch()`` read through
``make_one_shot_iterator().get_next()``, and an evaluation set read to its end with an
initializable iterator and ``tf.errors.OutOfRangeError`` (the TF1 "importing data" guide).

Changes from a TF1 program: the import line; data: scikit-learn's 8x8 digits; 400 steps.
"""
import numpy as np
import tensorweave.compat.v1 as tf
from corpus_data import digits

METRIC = ("accuracy", "higher")
# TensorFlow 2.21 tf.compat.v1 on this file (run_reference.py --tensorflow, TF_USE_LEGACY_KERAS=1):
TF_REFERENCE = {"first_loss": 2.302584, "last_loss": 0.193707, "metric": 0.955556}


def main():
    x_train, y_train, x_test, y_test = digits()
    tf.set_random_seed(11)
    train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1000, seed=1).repeat().batch(64)
    features, labels = train.make_one_shot_iterator().get_next()
    test_iter = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(100).make_initializable_iterator()
    test_x, test_y = test_iter.get_next()

    W = tf.Variable(tf.zeros([64, 10]))
    b = tf.Variable(tf.zeros([10]))

    def logits_of(x):
        return tf.matmul(tf.cast(x, tf.float32), W) + b
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits_of(features)))
    train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
    correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits_of(test_x), 1), test_y), tf.float32))
    full_x = tf.placeholder(tf.float32, [None, 64])
    full_y = tf.placeholder(tf.int64, [None])
    full_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=full_y,
                                                                              logits=logits_of(full_x)))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(full_loss, {full_x: x_train, full_y: y_train})
        for _ in range(400):
            sess.run(train_op)
        last = sess.run(full_loss, {full_x: x_train, full_y: y_train})
        sess.run(test_iter.initializer)
        total = 0.0
        while True:
            try:
                total += sess.run(correct)
            except tf.errors.OutOfRangeError:
                break
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(total) / len(x_test)}
