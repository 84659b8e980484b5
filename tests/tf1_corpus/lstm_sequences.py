"""Sequence classification with an LSTM: each image read row by row as a sequence,
``tf.nn.rnn_cell.BasicLSTMCell`` run by ``tf.nn.dynamic_rnn``, the last output classified (the
"recurrent network on MNIST" program of the TF1 example collections).

Changes from a TF1 program: the import line; data: scikit-learn's 8x8 digits (8 steps of 8
pixels); 400 steps.
"""
import numpy as np
import tensorweave.compat.v1 as tf
from corpus_data import Batches, digits

METRIC = ("accuracy", "higher")
# TensorFlow 2.21 tf.compat.v1 on this file (run_reference.py --tensorflow, TF_USE_LEGACY_KERAS=1):
TF_REFERENCE = {"first_loss": 2.306643, "last_loss": 0.051515, "metric": 0.977778}

timesteps, num_input, num_hidden, num_classes = 8, 8, 32, 10


def RNN(x, weights, biases):
    lstm_cell = tf.nn.rnn_cell.BasicLSTMCell(num_hidden, forget_bias=1.0)
    outputs, states = tf.nn.dynamic_rnn(lstm_cell, x, dtype=tf.float32)
    return tf.matmul(outputs[:, -1], weights["out"]) + biases["out"]


def main():
    x_train, y_train, x_test, y_test = digits()
    data = Batches(x_train, y_train)
    tf.set_random_seed(6)
    X = tf.placeholder("float", [None, timesteps, num_input])
    Y = tf.placeholder(tf.int64, [None])
    weights = {"out": tf.Variable(tf.random_normal([num_hidden, num_classes], stddev=0.1))}
    biases = {"out": tf.Variable(tf.random_normal([num_classes], stddev=0.1))}
    logits = RNN(X, weights, biases)
    loss_op = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=Y))
    train_op = tf.train.AdamOptimizer(learning_rate=0.01).minimize(loss_op)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), Y), tf.float32))
    init = tf.global_variables_initializer()
    seq = lambda a: a.reshape((-1, timesteps, num_input))  # noqa: E731
    with tf.Session() as sess:
        sess.run(init)
        first = sess.run(loss_op, {X: seq(x_train), Y: y_train})
        for step in range(400):
            bx, by = data.next_batch(64)
            sess.run(train_op, feed_dict={X: seq(bx), Y: by})
        last = sess.run(loss_op, {X: seq(x_train), Y: y_train})
        acc = sess.run(accuracy, feed_dict={X: seq(x_test), Y: y_test})
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(acc)}
