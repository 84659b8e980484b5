"""A convolutional network written with ``tf.layers`` (conv2d, max_pooling2d, flatten, dense,
dropout with a ``training`` placeholder), as in the TF1 "layers" tutorial.

Changes from a TF1 program: the import line; data: scikit-learn's 8x8 digits (so 3x3 kernels and
one pooling step) instead of MNIST; 300 steps.
"""
import numpy as np
import tensorweave.compat.v1 as tf
from corpus_data import Batches, digits

METRIC = ("accuracy", "higher")
# TensorFlow 2.21 tf.compat.v1 on this file (run_reference.py --tensorflow, TF_USE_LEGACY_KERAS=1):
TF_REFERENCE = {"first_loss": 2.315527, "last_loss": 0.042845, "metric": 0.980556}


def cnn_model(features, training):
    input_layer = tf.reshape(features, [-1, 8, 8, 1])
    conv1 = tf.layers.conv2d(inputs=input_layer, filters=16, kernel_size=[3, 3], padding="same",
                             activation=tf.nn.relu)
    pool1 = tf.layers.max_pooling2d(inputs=conv1, pool_size=[2, 2], strides=2)
    conv2 = tf.layers.conv2d(inputs=pool1, filters=32, kernel_size=[3, 3], padding="same", activation=tf.nn.relu)
    pool2_flat = tf.layers.flatten(conv2)
    dense = tf.layers.dense(inputs=pool2_flat, units=64, activation=tf.nn.relu)
    dropout = tf.layers.dropout(inputs=dense, rate=0.4, training=training)
    return tf.layers.dense(inputs=dropout, units=10)


def main():
    x_train, y_train, x_test, y_test = digits()
    data = Batches(x_train, y_train)
    tf.set_random_seed(3)
    x = tf.placeholder(tf.float32, [None, 64])
    labels = tf.placeholder(tf.int64, [None])
    training = tf.placeholder_with_default(False, [])
    logits = cnn_model(x, training)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    global_step = tf.train.get_or_create_global_step()
    train_op = tf.train.AdamOptimizer(learning_rate=0.002).minimize(loss, global_step=global_step)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, axis=1), labels), tf.float32))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(loss, {x: x_train, labels: y_train})
        for step in range(300):
            bx, by = data.next_batch(64)
            sess.run(train_op, {x: bx, labels: by, training: True})
        last = sess.run(loss, {x: x_train, labels: y_train})
        acc = sess.run(accuracy, {x: x_test, labels: y_test})
        names = [v.name for v in tf.trainable_variables()]
    assert names[:2] == ["conv2d/kernel:0", "conv2d/bias:0"] and names[-2:] == ["dense_1/kernel:0", "dense_1/bias:0"]
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(acc)}
