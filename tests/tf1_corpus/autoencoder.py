"""An autoencoder (encoder and decoder of sigmoid layers with weights in dicts of
``tf.Variable(tf.random_normal(...))``) trained with ``RMSPropOptimizer`` on the reconstruction
error (the TF1 example collections' autoencoder).

Changes from a TF1 program: the import line; data: scikit-learn's 8x8 digits; 800 steps; the
metric is the test reconstruction error.
"""
import numpy as np
import tensorweave.compat.v1 as tf
from corpus_data import Batches, digits

METRIC = ("test_mse", "lower")
# TensorFlow 2.21 tf.compat.v1 on this file (run_reference.py --tensorflow, TF_USE_LEGACY_KERAS=1):
TF_REFERENCE = {"first_loss": 0.185369, "last_loss": 0.024833, "metric": 0.025269}
num_hidden_1, num_hidden_2, num_input = 32, 16, 64


def main():
    x_train, y_train, x_test, _ = digits()
    data = Batches(x_train, y_train)
    tf.set_random_seed(12)
    X = tf.placeholder("float", [None, num_input])
    weights = {
        "encoder_h1": tf.Variable(tf.random_normal([num_input, num_hidden_1], stddev=0.3)),
        "encoder_h2": tf.Variable(tf.random_normal([num_hidden_1, num_hidden_2], stddev=0.3)),
        "decoder_h1": tf.Variable(tf.random_normal([num_hidden_2, num_hidden_1], stddev=0.3)),
        "decoder_h2": tf.Variable(tf.random_normal([num_hidden_1, num_input], stddev=0.3)),
    }
    biases = {
        "encoder_b1": tf.Variable(tf.random_normal([num_hidden_1], stddev=0.3)),
        "encoder_b2": tf.Variable(tf.random_normal([num_hidden_2], stddev=0.3)),
        "decoder_b1": tf.Variable(tf.random_normal([num_hidden_1], stddev=0.3)),
        "decoder_b2": tf.Variable(tf.random_normal([num_input], stddev=0.3)),
    }

    def encoder(x):
        layer_1 = tf.nn.sigmoid(tf.add(tf.matmul(x, weights["encoder_h1"]), biases["encoder_b1"]))
        return tf.nn.sigmoid(tf.add(tf.matmul(layer_1, weights["encoder_h2"]), biases["encoder_b2"]))

    def decoder(x):
        layer_1 = tf.nn.sigmoid(tf.add(tf.matmul(x, weights["decoder_h1"]), biases["decoder_b1"]))
        return tf.nn.sigmoid(tf.add(tf.matmul(layer_1, weights["decoder_h2"]), biases["decoder_b2"]))

    y_pred = decoder(encoder(X))
    loss = tf.reduce_mean(tf.pow(X - y_pred, 2))
    optimizer = tf.train.RMSPropOptimizer(0.01).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(loss, {X: x_train})
        for i in range(800):
            batch_x, _ = data.next_batch(64)
            sess.run(optimizer, feed_dict={X: batch_x})
        last = sess.run(loss, {X: x_train})
        test_mse = sess.run(loss, {X: x_test})
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(test_mse)}
