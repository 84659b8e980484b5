"""A small convolutional classifier fed from binary record files, after the TF1 CIFAR-10 tutorial
(``cifar10_input.py``/``cifar10.py``/``cifar10_train.py``/``cifar10_eval.py``): command-line
``tf.app.flags``, ``tf.logging``, ``tf.gfile``; a ``FixedLengthRecordReader`` on a
``string_input_producer`` queue, ``tf.decode_raw`` + ``strided_slice`` + ``transpose`` of each
``label byte + depth-major image`` record; ``random_flip_left_right``,
``per_image_standardization`` and ``shuffle_batch``; ``variable_scope``s with ``get_variable``
on the CPU, weight decay added to the ``losses`` collection, ``tf.nn.lrn`` after pooling,
``exponential_decay`` and an ``ExponentialMovingAverage`` of the loss; evaluation with
``tf.nn.in_top_k`` over a one-epoch queue of the test file.

Changes from a TF1 program: the data (12x12 images of four synthetic classes written to
temporary files in CIFAR-10's binary layout, instead of the downloaded batches); 250 steps and
smaller layers; ``main`` returns the numbers the test checks instead of ``tf.app.run()``
(flags are read from ``FLAGS`` as the tutorial does). Metric: test accuracy (``in_top_k`` precision).
"""
import os
import tempfile

import numpy as np
import tensorweave.compat.v1 as tf

METRIC = ("test_accuracy", "higher")
TF_REFERENCE = {"first_loss": 1.4262030124664307, "last_loss": 0.1390841156244278, "metric": 0.94}

FLAGS = tf.app.flags.FLAGS
for _name, _value, _help in (("cifar_batch_size", 32, "Number of images to process in a batch."),
                             ("cifar_max_steps", 250, "Number of batches to run.")):
    if _name not in FLAGS:       # defined once per process (the test runner may load the file again)
        tf.app.flags.DEFINE_integer(_name, _value, _help)

IMAGE, DEPTH, CLASSES = 12, 3, 4
RECORD_BYTES = 1 + IMAGE * IMAGE * DEPTH


def write_batches(data_dir, name, n, seed):
    """``n`` records of CIFAR-10's layout: a label byte, then the image depth-major (R, G, B planes)."""
    rng = np.random.RandomState(seed)
    patterns = np.random.RandomState(11).randint(0, 256, size=(CLASSES, DEPTH, IMAGE, IMAGE))
    labels = rng.randint(0, CLASSES, size=n)
    images = np.clip(patterns[labels] + rng.randint(-230, 231, size=(n, DEPTH, IMAGE, IMAGE)), 0, 255)
    path = os.path.join(data_dir, name)
    with tf.gfile.GFile(path, "wb") as f:
        for label, image in zip(labels, images):
            f.write(bytes([label]) + image.astype(np.uint8).tobytes())
    return path


def read_cifar(filename_queue):
    reader = tf.FixedLengthRecordReader(record_bytes=RECORD_BYTES)
    key, value = reader.read(filename_queue)
    record = tf.decode_raw(value, tf.uint8)
    label = tf.cast(tf.strided_slice(record, [0], [1]), tf.int32)
    depth_major = tf.reshape(tf.strided_slice(record, [1], [RECORD_BYTES]), [DEPTH, IMAGE, IMAGE])
    image = tf.transpose(depth_major, [1, 2, 0])
    return image, label


def inputs(filenames, distort, batch_size, num_epochs=None):
    for f in filenames:
        if not tf.gfile.Exists(f):
            raise ValueError("Failed to find file: " + f)
    filename_queue = tf.train.string_input_producer(filenames, num_epochs=num_epochs, shuffle=distort, seed=2)
    image, label = read_cifar(filename_queue)
    image = tf.cast(image, tf.float32)
    if distort:
        image = tf.image.random_flip_left_right(image, seed=4)
    image = tf.image.per_image_standardization(image)
    image.set_shape([IMAGE, IMAGE, DEPTH])
    label.set_shape([1])
    if distort:
        images, labels = tf.train.shuffle_batch([image, label], batch_size=batch_size, num_threads=1,
                                                capacity=400, min_after_dequeue=200, seed=6)
    else:
        images, labels = tf.train.batch([image, label], batch_size=batch_size, num_threads=1, capacity=400,
                                        allow_smaller_final_batch=True)
    return images, tf.reshape(labels, [-1])


def _variable_with_weight_decay(name, shape, stddev, wd):
    with tf.device("/cpu:0"):
        var = tf.get_variable(name, shape, initializer=tf.truncated_normal_initializer(stddev=stddev, seed=1),
                              dtype=tf.float32)
    if wd is not None:
        tf.add_to_collection("losses", tf.multiply(tf.nn.l2_loss(var), wd, name="weight_loss"))
    return var


def inference(images):
    with tf.variable_scope("conv1") as scope:
        kernel = _variable_with_weight_decay("weights", [3, 3, 3, 16], stddev=0.1, wd=None)
        conv = tf.nn.conv2d(images, kernel, [1, 1, 1, 1], padding="SAME")
        biases = tf.get_variable("biases", [16], initializer=tf.constant_initializer(0.0))
        conv1 = tf.nn.relu(tf.nn.bias_add(conv, biases), name=scope.name)
    pool1 = tf.nn.max_pool(conv1, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME", name="pool1")
    norm1 = tf.nn.lrn(pool1, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75, name="norm1")
    with tf.variable_scope("local3") as scope:
        reshape = tf.reshape(norm1, [-1, 6 * 6 * 16])
        weights = _variable_with_weight_decay("weights", [6 * 6 * 16, 32], stddev=0.04, wd=0.004)
        biases = tf.get_variable("biases", [32], initializer=tf.constant_initializer(0.1))
        local3 = tf.nn.relu(tf.matmul(reshape, weights) + biases, name=scope.name)
    with tf.variable_scope("softmax_linear") as scope:
        weights = _variable_with_weight_decay("weights", [32, CLASSES], stddev=1 / 32.0, wd=None)
        biases = tf.get_variable("biases", [CLASSES], initializer=tf.constant_initializer(0.0))
        return tf.add(tf.matmul(local3, weights), biases, name=scope.name)


def loss_of(logits, labels):
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(labels, tf.int64), logits=logits)
    tf.add_to_collection("losses", tf.reduce_mean(cross_entropy, name="cross_entropy"))
    return tf.add_n(tf.get_collection("losses"), name="total_loss")


def train_op_of(total_loss, global_step):
    lr = tf.train.exponential_decay(0.1, global_step, 200, 0.5, staircase=True)
    averages = tf.train.ExponentialMovingAverage(0.9, name="avg")
    loss_averages_op = averages.apply([total_loss])
    with tf.control_dependencies([loss_averages_op]):
        grads = tf.train.GradientDescentOptimizer(lr).compute_gradients(total_loss)
    return tf.train.GradientDescentOptimizer(lr).apply_gradients(grads, global_step=global_step), averages


def main():
    if not FLAGS.is_parsed():
        FLAGS([__file__])       # what tf.app.run() does first (this file is run by a test, not a command line)
    tf.logging.set_verbosity(tf.logging.WARN)
    data_dir = tempfile.mkdtemp()
    train_files = [write_batches(data_dir, f"data_batch_{i}.bin", 400, i) for i in (1, 2)]
    test_file = write_batches(data_dir, "test_batch.bin", 200, 9)
    tf.set_random_seed(0)
    with tf.Graph().as_default():
        global_step = tf.train.get_or_create_global_step()
        images, labels = inputs(train_files, True, FLAGS.cifar_batch_size)
        with tf.variable_scope("model"):
            logits = inference(images)
        total_loss = loss_of(logits, labels)
        train_op, _ = train_op_of(total_loss, global_step)
        test_images, test_labels = inputs([test_file], False, 50, num_epochs=1)
        with tf.variable_scope("model", reuse=True):
            top_k_op = tf.nn.in_top_k(inference(test_images), test_labels, 1)
        with tf.Session() as sess:
            sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
            coord = tf.train.Coordinator()
            threads = tf.train.start_queue_runners(sess=sess, coord=coord)
            losses = []
            for step in range(FLAGS.cifar_max_steps):
                _, loss_value = sess.run([train_op, total_loss])
                losses.append(loss_value)
                if step % 100 == 0:
                    tf.logging.info("step %d, loss = %.2f", step, loss_value)
            true_count = total = 0
            try:
                while True:
                    predictions = sess.run(top_k_op)
                    true_count += int(np.sum(predictions))
                    total += len(predictions)
            except tf.errors.OutOfRangeError:
                pass
            coord.request_stop()
            coord.join(threads, stop_grace_period_secs=5)
    return {"first_loss": float(np.mean(losses[:5])), "last_loss": float(np.mean(losses[-20:])),
            "metric": true_count / max(total, 1), "evaluated": total}
