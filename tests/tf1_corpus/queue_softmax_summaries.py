"""Softmax regression fed by the TF1 queue pipeline, with summaries and streaming metrics, after
the TF1 "Reading data" and "TensorBoard: visualizing learning" tutorials: ``slice_input_producer``
and ``shuffle_batch`` filled by queue runners under a ``Coordinator``, ``tf.losses``, summaries
merged and written by a ``FileWriter``, then ``tf.metrics.accuracy``/``auc`` over a test set.

Changes from a TF1 program: the data (three Gaussian blobs in 10 dimensions instead of MNIST
files); 200 steps; the log directory is a temporary one; ``main`` returns the numbers the test
checks. Metric: test accuracy from ``tf.metrics.accuracy``.
"""
import tempfile

import numpy as np
import tensorweave.compat.v1 as tf

METRIC = ("test_accuracy", "higher")
TF_REFERENCE = {"first_loss": 1.0986123085021973, "last_loss": 0.1666506826877594, "metric": 0.949999988079071}


def make_data(n, seed):
    rng = np.random.RandomState(seed)
    centers = np.random.RandomState(7).randn(3, 10).astype(np.float32)
    labels = rng.randint(0, 3, size=n)
    return (centers[labels] + 0.9 * rng.randn(n, 10)).astype(np.float32), labels.astype(np.int64)


def main():
    train_x, train_y = make_data(600, 0)
    test_x, test_y = make_data(200, 1)
    tf.set_random_seed(0)
    image, label = tf.train.slice_input_producer([train_x, train_y], shuffle=True, seed=3)
    images, labels = tf.train.shuffle_batch([image, label], batch_size=32, capacity=200, min_after_dequeue=100,
                                            num_threads=2, seed=5)
    W = tf.Variable(tf.zeros([10, 3]), name="weights")
    b = tf.Variable(tf.zeros([3]), name="biases")

    def logits_of(x):
        return tf.matmul(x, W) + b
    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits_of(images))
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    tf.summary.scalar("loss", loss)
    tf.summary.histogram("weights", W)
    merged = tf.summary.merge_all()

    test_images = tf.placeholder(tf.float32, [None, 10])
    test_labels = tf.placeholder(tf.int64, [None])
    test_logits = logits_of(test_images)
    accuracy, accuracy_update = tf.metrics.accuracy(test_labels, tf.argmax(test_logits, 1))
    auc, auc_update = tf.metrics.auc(tf.equal(test_labels, 0), tf.nn.softmax(test_logits)[:, 0])

    log_dir = tempfile.mkdtemp()
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        writer = tf.summary.FileWriter(log_dir, sess.graph)
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        losses = []
        try:
            for step in range(200):
                if coord.should_stop():
                    break
                if step % 50 == 0:
                    _, loss_value, summary = sess.run([train_op, loss, merged])
                    writer.add_summary(summary, step)
                else:
                    _, loss_value = sess.run([train_op, loss])
                losses.append(loss_value)
        finally:
            coord.request_stop()
            coord.join(threads)
        writer.close()
        for i in range(0, len(test_x), 50):
            sess.run([accuracy_update, auc_update], {test_images: test_x[i:i + 50], test_labels: test_y[i:i + 50]})
        acc, auc_value = sess.run([accuracy, auc])
    return {"first_loss": float(losses[0]), "last_loss": float(np.mean(losses[-20:])), "metric": float(acc),
            "auc": float(auc_value)}
