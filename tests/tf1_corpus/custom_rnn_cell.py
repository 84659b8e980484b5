"""A user-written RNN cell (a subclass of ``tf.nn.rnn_cell.RNNCell`` with its own ``__call__`` making
its weights by ``tf.get_variable``, as TF1 tutorials on custom cells write them: here a minimal
gated unit) run by ``tf.nn.dynamic_rnn`` with ``sequence_length`` over the rows of each image,
the final state classified. TF1 runs such a cell in a ``tf.while_loop``; so does tensorweave.

Changes from a TF1 program: the import line; data: scikit-learn's 8x8 digits read as 8 rows of 8
pixels (every second image cut to its first 6 rows through ``sequence_length``); 150 steps.
"""
import numpy as np
import tensorweave.compat.v1 as tf
from corpus_data import Batches, digits

METRIC = ("accuracy", "higher")
# TensorFlow 2.21 tf.compat.v1 on this file (run_reference.py --tensorflow, TF_USE_LEGACY_KERAS=1):
TF_REFERENCE = {"first_loss": 2.348927, "last_loss": 0.218437, "metric": 0.930556}


class MinimalGatedCell(tf.nn.rnn_cell.RNNCell):
    """h' = (1 - f) * h + f * tanh(W [x, f * h] + b), f = sigmoid(U [x, h] + c)."""

    def __init__(self, num_units):
        super(MinimalGatedCell, self).__init__()
        self._num_units = num_units

    @property
    def state_size(self):
        return self._num_units

    @property
    def output_size(self):
        return self._num_units

    def __call__(self, inputs, state, scope=None):
        with tf.variable_scope(scope or "minimal_gated_cell"):
            depth = inputs.get_shape()[-1]
            init = tf.glorot_uniform_initializer(seed=1)
            U = tf.get_variable("U", [depth + self._num_units, self._num_units], initializer=init)
            c = tf.get_variable("c", [self._num_units], initializer=tf.ones_initializer())
            W = tf.get_variable("W", [depth + self._num_units, self._num_units], initializer=init)
            b = tf.get_variable("b", [self._num_units], initializer=tf.zeros_initializer())
            f = tf.sigmoid(tf.matmul(tf.concat([inputs, state], 1), U) + c)
            candidate = tf.tanh(tf.matmul(tf.concat([inputs, f * state], 1), W) + b)
            new_h = (1.0 - f) * state + f * candidate
        return new_h, new_h


def main():
    x_train, y_train, x_test, y_test = digits()
    data = Batches(x_train, y_train)
    tf.set_random_seed(7)
    x = tf.placeholder(tf.float32, [None, 8, 8])
    y = tf.placeholder(tf.int64, [None])
    lengths = tf.placeholder(tf.int32, [None])
    cell = MinimalGatedCell(32)
    outputs, state = tf.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=tf.float32)
    logits = tf.layers.dense(state, 10, kernel_initializer=tf.glorot_uniform_initializer(seed=2))
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    train_op = tf.train.AdamOptimizer(0.02).minimize(loss)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))

    def feed(images, labels):
        n = len(images)
        return {x: images.reshape(n, 8, 8), y: labels, lengths: np.where(np.arange(n) % 2 == 0, 8, 6)}
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(loss, feed(x_train, y_train))
        for _ in range(150):
            sess.run(train_op, feed(*data.next_batch(64)))
        last = sess.run(loss, feed(x_train, y_train))
        acc = sess.run(accuracy, feed(x_test, y_test))
        out = sess.run(outputs, feed(x_test[:2], y_test[:2]))
        assert not out[1, 6:].any()         # past its length a sequence's outputs are zeros
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(acc)}
