"""The TF1 "Importing Data" guide's iterators around one MLP: training data fed through placeholders
into ``Dataset.from_tensor_slices`` and an initializable iterator (``sess.run(iterator.initializer,
feed_dict=...)``), a reinitializable iterator (``Iterator.from_structure`` + ``make_initializer``)
alternating a training epoch and a validation pass, and a feedable iterator (``string_handle`` /
``Iterator.from_string_handle``) switching between a repeating training iterator and the test set.

Changes from a TF1 program: the import line; data: scikit-learn's 8x8 digits; 3 epochs + 150 steps.
"""
import numpy as np
import tensorweave.compat.v1 as tf
from corpus_data import digits

METRIC = ("accuracy", "higher")
# TensorFlow 2.21 tf.compat.v1 on this file (run_reference.py --tensorflow, TF_USE_LEGACY_KERAS=1):
TF_REFERENCE = {"first_loss": 2.415271, "last_loss": 0.130856, "metric": 0.958333}


def model(features, labels):
    with tf.variable_scope("mlp", reuse=tf.AUTO_REUSE):
        hidden = tf.layers.dense(tf.cast(features, tf.float32), 48, activation=tf.nn.relu, name="hidden")
        logits = tf.layers.dense(hidden, 10, name="out")
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1), labels), tf.float32))
    return loss, correct


def main():
    x_train, y_train, x_test, y_test = digits()
    x_val, y_val = x_train[:200], y_train[:200]
    tf.set_random_seed(3)
    # 1. placeholders -> from_tensor_slices -> initializable iterator
    features_ph = tf.placeholder(x_train.dtype, [None, 64])
    labels_ph = tf.placeholder(y_train.dtype, [None])
    fed = tf.data.Dataset.from_tensor_slices((features_ph, labels_ph)).batch(64)
    # 2. a reinitializable iterator over the fed training set and a validation set
    val = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(100)
    iterator = tf.data.Iterator.from_structure(fed.output_types, fed.output_shapes)
    train_init = iterator.make_initializer(fed)
    val_init = iterator.make_initializer(val)
    features, labels = iterator.get_next()
    loss, correct = model(features, labels)
    optimizer = tf.train.GradientDescentOptimizer(0.3)
    train_op = optimizer.minimize(loss)
    # 3. a feedable iterator: one get_next, the handle picks the iterator
    handle = tf.placeholder(tf.string, shape=[])
    feedable = tf.data.Iterator.from_string_handle(handle, fed.output_types, fed.output_shapes)
    f_features, f_labels = feedable.get_next()
    f_loss, f_correct = model(f_features, f_labels)
    f_train = optimizer.minimize(f_loss)
    train_it = fed.repeat().make_initializable_iterator()
    test_it = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(120).make_initializable_iterator()
    full_loss, _ = model(tf.constant(x_train), tf.constant(y_train))

    def run_to_end(sess, fetch, feed=None):
        total = 0.0
        while True:
            try:
                total += sess.run(fetch, feed) or 0.0
            except tf.errors.OutOfRangeError:
                return total

    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(full_loss)
        for _ in range(3):
            sess.run(train_init, {features_ph: x_train, labels_ph: y_train})
            run_to_end(sess, train_op)
            sess.run(val_init)
            val_acc = run_to_end(sess, correct) / len(x_val)
        assert val_acc > 0.5, val_acc
        train_handle, test_handle = sess.run([train_it.string_handle(), test_it.string_handle()])
        sess.run(train_it.initializer, {features_ph: x_train, labels_ph: y_train})
        for _ in range(150):
            sess.run(f_train, {handle: train_handle})
        last = sess.run(full_loss)
        sess.run(test_it.initializer)
        acc = run_to_end(sess, f_correct, {handle: test_handle}) / len(x_test)
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(acc)}
