"""A two-layer perceptron with dropout fed through a ``keep_prob`` placeholder, weights from
``tf.truncated_normal``, TF1's ``reduction_indices`` and ``tf.arg_max`` (the "deep MNIST" style).

Changes from a TF1 program: the import line; data: scikit-learn's 8x8 digits instead of the MNIST
download; 600 steps.
"""
import numpy as np
import tensorweave.compat.v1 as tf
from corpus_data import Batches, digits, one_hot

METRIC = ("accuracy", "higher")
# TensorFlow 2.21 tf.compat.v1 on this file (run_reference.py --tensorflow, TF_USE_LEGACY_KERAS=1):
TF_REFERENCE = {"first_loss": 2.38725, "last_loss": 0.142958, "metric": 0.958333}


def weight_variable(shape):
    initial = tf.truncated_normal(shape, stddev=0.1)
    return tf.Variable(initial)


def bias_variable(shape):
    initial = tf.constant(0.1, shape=shape)
    return tf.Variable(initial)


def main():
    x_train, y_train, x_test, y_test = digits()
    data = Batches(x_train, one_hot(y_train))
    tf.set_random_seed(2)

    x = tf.placeholder(tf.float32, [None, 64])
    y_ = tf.placeholder(tf.float32, [None, 10])
    keep_prob = tf.placeholder(tf.float32)
    W1, b1 = weight_variable([64, 128]), bias_variable([128])
    h1 = tf.nn.relu(tf.matmul(x, W1) + b1)
    h1_drop = tf.nn.dropout(h1, keep_prob)
    W2, b2 = weight_variable([128, 10]), bias_variable([10])
    y = tf.nn.softmax(tf.matmul(h1_drop, W2) + b2)
    cross_entropy = tf.reduce_mean(-tf.reduce_sum(y_ * tf.log(y + 1e-10), reduction_indices=[1]))
    train_step = tf.train.AdamOptimizer(1e-3).minimize(cross_entropy)
    correct_prediction = tf.equal(tf.arg_max(y, 1), tf.arg_max(y_, 1))
    accuracy = tf.reduce_mean(tf.to_float(correct_prediction))

    sess = tf.InteractiveSession()
    tf.global_variables_initializer().run()
    full = {x: x_train, y_: one_hot(y_train), keep_prob: 1.0}
    first = cross_entropy.eval(full)
    for i in range(600):
        batch_xs, batch_ys = data.next_batch(50)
        train_step.run({x: batch_xs, y_: batch_ys, keep_prob: 0.5})
    last = cross_entropy.eval(full)
    acc = accuracy.eval({x: x_test, y_: one_hot(y_test), keep_prob: 1.0})
    sess.close()
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(acc)}
