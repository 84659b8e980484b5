"""Data-parallel training with one model "tower" per device, as the TF1 multi-GPU CIFAR-10
program does: ``tf.device('/cpu:%d')`` and ``tf.name_scope('tower_%d')`` per tower, variables
shared through ``tf.get_variable_scope().reuse_variables()``, the towers' gradients averaged
(``tf.expand_dims``/``tf.concat``/``tf.reduce_mean``) and applied once; two CPU devices from
``ConfigProto(device_count={'CPU': 2})`` with soft placement.

Changes from a TF1 program: the import line; devices: two CPUs instead of GPUs; data:
scikit-learn's 8x8 digits; 300 steps.
"""
import numpy as np
import tensorweave.compat.v1 as tf
from corpus_data import Batches, digits

METRIC = ("accuracy", "higher")
# TensorFlow 2.21 tf.compat.v1 on this file (run_reference.py --tensorflow, TF_USE_LEGACY_KERAS=1):
TF_REFERENCE = {"first_loss": 2.280642, "last_loss": 0.110851, "metric": 0.958333}
NUM_DEVICES = 2


def inference(x):
    with tf.variable_scope("hidden"):
        w = tf.get_variable("weights", [64, 64], initializer=tf.truncated_normal_initializer(stddev=0.1))
        b = tf.get_variable("biases", [64], initializer=tf.constant_initializer(0.1))
        h = tf.nn.relu(tf.matmul(x, w) + b)
    with tf.variable_scope("softmax_linear"):
        w = tf.get_variable("weights", [64, 10], initializer=tf.truncated_normal_initializer(stddev=0.1))
        b = tf.get_variable("biases", [10], initializer=tf.constant_initializer(0.0))
        return tf.matmul(h, w) + b


def tower_loss(x, y):
    logits = inference(x)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def average_gradients(tower_grads):
    average_grads = []
    for grad_and_vars in zip(*tower_grads):
        grads = [tf.expand_dims(g, 0) for g, _ in grad_and_vars]
        grad = tf.reduce_mean(tf.concat(axis=0, values=grads), 0)
        average_grads.append((grad, grad_and_vars[0][1]))
    return average_grads


def main():
    x_train, y_train, x_test, y_test = digits()
    data = Batches(x_train, y_train)
    tf.set_random_seed(10)
    with tf.device("/cpu:0"):
        global_step = tf.get_variable("global_step", [], initializer=tf.constant_initializer(0), trainable=False,
                                      dtype=tf.int32)
        opt = tf.train.GradientDescentOptimizer(0.3)
        xs = [tf.placeholder(tf.float32, [None, 64]) for _ in range(NUM_DEVICES)]
        ys = [tf.placeholder(tf.int64, [None]) for _ in range(NUM_DEVICES)]
        tower_grads, losses = [], []
        with tf.variable_scope(tf.get_variable_scope()):
            for i in range(NUM_DEVICES):
                with tf.device("/cpu:%d" % i):
                    with tf.name_scope("tower_%d" % i) as scope:
                        loss = tower_loss(xs[i], ys[i])
                        tf.get_variable_scope().reuse_variables()
                        grads = opt.compute_gradients(loss)
                        tower_grads.append(grads)
                        losses.append(loss)
        grads = average_gradients(tower_grads)
        train_op = opt.apply_gradients(grads, global_step=global_step)
        with tf.variable_scope(tf.get_variable_scope(), reuse=True):
            eval_logits = inference(xs[0])
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(eval_logits, 1), ys[0]), tf.float32))
    assert len(tf.trainable_variables()) == 4
    config = tf.ConfigProto(allow_soft_placement=True, log_device_placement=False, device_count={"CPU": NUM_DEVICES})
    with tf.Session(config=config) as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(losses[0], {xs[0]: x_train, ys[0]: y_train})
        for step in range(300):
            feed = {}
            for i in range(NUM_DEVICES):
                bx, by = data.next_batch(32)
                feed[xs[i]], feed[ys[i]] = bx, by
            sess.run(train_op, feed)
        last = sess.run(losses[0], {xs[0]: x_train, ys[0]: y_train})
        acc = sess.run(accuracy, {xs[0]: x_test, ys[0]: y_test})
        assert sess.run(global_step) == 300
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(acc)}
