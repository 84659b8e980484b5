"""A bidirectional LSTM over rows (``tf.nn.static_bidirectional_rnn`` on ``tf.unstack``-ed steps,
``LSTMCell`` forward and backward), then a GRU stack run with ``bidirectional_dynamic_rnn`` and
``sequence_length`` (the TF1 "bidirectional RNN" example, extended with a padded variant).

Changes from a TF1 program: the import line; data: scikit-learn's 8x8 digits with the last rows
of half the images cut (padded) to exercise ``sequence_length``; 300 steps.
"""
import numpy as np
import tensorweave.compat.v1 as tf
from corpus_data import Batches, digits

METRIC = ("accuracy", "higher")
# TensorFlow 2.21 tf.compat.v1 on this file (run_reference.py --tensorflow, TF_USE_LEGACY_KERAS=1):
TF_REFERENCE = {"first_loss": 2.32035, "last_loss": 0.035452, "metric": 0.986111}

timesteps, num_input, num_hidden = 8, 8, 24


def main():
    x_train, y_train, x_test, y_test = digits()
    rng = np.random.RandomState(0)
    lens_train = np.where(rng.rand(len(x_train)) < 0.5, 8, 6).astype(np.int32)
    lens_test = np.where(rng.rand(len(x_test)) < 0.5, 8, 6).astype(np.int32)
    data = Batches(np.concatenate([x_train, lens_train[:, None]], 1), y_train)
    tf.set_random_seed(7)
    X = tf.placeholder(tf.float32, [None, timesteps, num_input])
    L = tf.placeholder(tf.int32, [None])
    Y = tf.placeholder(tf.int64, [None])
    x_steps = tf.unstack(X, timesteps, 1)
    lstm_fw = tf.nn.rnn_cell.LSTMCell(num_hidden, forget_bias=1.0)
    lstm_bw = tf.nn.rnn_cell.LSTMCell(num_hidden, forget_bias=1.0)
    outputs, _, _ = tf.nn.static_bidirectional_rnn(lstm_fw, lstm_bw, x_steps, dtype=tf.float32)
    with tf.variable_scope("padded"):
        (out_fw, out_bw), (st_fw, st_bw) = tf.nn.bidirectional_dynamic_rnn(
            tf.nn.rnn_cell.GRUCell(num_hidden), tf.nn.rnn_cell.GRUCell(num_hidden), X, sequence_length=L,
            dtype=tf.float32)
    features = tf.concat([outputs[-1], st_fw, st_bw], 1)
    logits = tf.layers.dense(features, 10)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=Y, logits=logits))
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), Y), tf.float32))

    def feed(x, lens, y):
        x = x.reshape(-1, timesteps, num_input).copy()
        x[lens == 6, 6:] = 0.0
        return {X: x, L: lens, Y: y}
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(loss, feed(x_train, lens_train, y_train))
        for _ in range(300):
            bx, by = data.next_batch(64)
            sess.run(train_op, feed(bx[:, :64], bx[:, 64].astype(np.int32), by))
        last = sess.run(loss, feed(x_train, lens_train, y_train))
        acc = sess.run(accuracy, feed(x_test, lens_test, y_test))
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(acc)}
