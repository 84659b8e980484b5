"""The TF1 example: softmax regression ``softmax(xW + b)`` on scikit-learn's bundled digits,
trained in graph mode with minibatch gradient descent: the gradients come from
``tw.gradients`` and the updates are variable-assign ops run by a ``Session``.

>>> import io
>>> acc = train_digits(epochs=2, out=io.StringIO())
>>> acc > 0.85
True
"""
import sys
import time

import numpy as np

def configure(p):
    p.add_argument("--epochs", type=int, default=20, help="passes over the training set (default 20)")
    p.add_argument("--batch-size", type=int, default=32, help="minibatch size (default 32)")
    p.add_argument("--lr", type=float, default=0.5, help="gradient-descent step size (default 0.5)")
    p.add_argument("--test-fraction", type=float, default=0.2, help="held-out share of the data (default 0.2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the batch order (default 0)")


def load_digits_split(test_fraction=0.2, seed=0):
    """scikit-learn's bundled 8x8 digits (1797 images, no download), scaled to [0, 1] and split
    with a fixed seed: ``(x_train, y_train, x_test, y_test)`` with float32 images and int labels."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit("tensorweave train needs scikit-learn (its bundled digits dataset). "
                         "Hint: pip install scikit-learn, or run `make demo`.") from None
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    perm = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = perm[:n_test], perm[n_test:]
    return x[train], y[train], x[test], y[test]


def _log_softmax(logits):
    from tensorweave import nn, reduce_logsumexp
    fn = getattr(nn, "log_softmax", None)
    if fn is not None:
        return fn(logits)
    return logits - reduce_logsumexp(logits, axis=1, keepdims=True)


def build_softmax_regression(tf, n_features, n_classes, lr):
    """Adds the model, loss, training step and accuracy to the default graph; returns them by name."""
    x = tf.placeholder(tf.float32, shape=[None, n_features], name="x")
    labels = tf.placeholder(tf.float32, shape=[None, n_classes], name="labels")  # one-hot
    w = tf.Variable(np.zeros((n_features, n_classes), np.float32), name="W")
    b = tf.Variable(np.zeros((n_classes,), np.float32), name="b")
    logits = tf.matmul(x, w) + b
    loss = -tf.reduce_mean(tf.reduce_sum(labels * _log_softmax(logits), axis=1), name="loss")
    grad_w, grad_b = tf.gradients(loss, [w, b])
    train_op = tf.group(tf.assign_sub(w, lr * grad_w), tf.assign_sub(b, lr * grad_b), name="train")
    correct = tf.equal(tf.argmax(logits, axis=1), tf.argmax(labels, axis=1))
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32), name="accuracy")
    return dict(x=x, labels=labels, w=w, b=b, logits=logits, loss=loss, train_op=train_op,
                accuracy=accuracy, init=tf.global_variables_initializer())


def train_digits(epochs=20, batch_size=32, lr=0.5, test_fraction=0.2, seed=0, out=None):
    """Trains softmax regression on digits with a Session; returns the test accuracy."""
    import tensorweave.compat.v1 as tf
    out = sys.stdout if out is None else out
    x_train, y_train, x_test, y_test = load_digits_split(test_fraction, seed)
    n_classes = 10
    eye = np.eye(n_classes, dtype=np.float32)
    graph = tf.Graph()
    with graph.as_default():
        m = build_softmax_regression(tf, x_train.shape[1], n_classes, lr)
    print(f"softmax regression on digits: {len(x_train)} train / {len(x_test)} test images, "
          f"{x_train.shape[1]} features, {len(graph.get_operations())} graph nodes", file=out)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    with tf.Session(graph=graph) as sess:
        sess.run(m["init"])
        train_feed = {m["x"]: x_train, m["labels"]: eye[y_train]}
        for epoch in range(1, epochs + 1):
            order = rng.permutation(len(x_train))
            for i in range(0, len(order), batch_size):
                idx = order[i:i + batch_size]
                sess.run(m["train_op"], feed_dict={m["x"]: x_train[idx], m["labels"]: eye[y_train[idx]]})
            loss, acc = sess.run([m["loss"], m["accuracy"]], feed_dict=train_feed)
            print(f"epoch {epoch:3d}  loss {loss:.4f}  train accuracy {acc:.4f}", file=out)
        test_acc = float(sess.run(m["accuracy"], feed_dict={m["x"]: x_test, m["labels"]: eye[y_test]}))
    print(f"test accuracy {test_acc:.4f}  ({time.perf_counter() - start:.2f} s)", file=out)
    return test_acc


def run(args):
    for name in ("epochs", "batch_size"):
        if getattr(args, name) < 1:
            raise SystemExit(f"tensorweave graph-demo: --{name.replace('_', '-')} must be at least 1")
    train_digits(args.epochs, args.batch_size, args.lr, args.test_fraction, args.seed)
    return 0
