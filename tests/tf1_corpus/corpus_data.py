"""Data for the TF1 corpus programs (what replaced their downloads): scikit-learn's 8x8 digits
(1,797 images; read from scikit-learn's CSV when scikit-learn cannot be imported, as in the
TensorFlow reference run), the MNIST test set from /work/shared/datasets, synthetic sets."""
import gzip
import os

import numpy as np

MNIST_DIR = "/work/shared/datasets/mnist"


def _digits_arrays():
    try:
        from sklearn.datasets import load_digits
        d = load_digits()
        return d.data.astype(np.float32), d.target.astype(np.int64)
    except ImportError:
        raw = np.loadtxt(os.environ["DIGITS_CSV"], delimiter=",")
        return raw[:, :-1].astype(np.float32), raw[:, -1].astype(np.int64)


def digits(n_test=360, seed=42):
    """``x_train, y_train, x_test, y_test``: pixels scaled to [0, 1], labels 0..9, a fixed split."""
    x, y = _digits_arrays()
    x = x / 16.0
    perm = np.random.RandomState(seed).permutation(len(x))
    return x[perm[n_test:]], y[perm[n_test:]], x[perm[:n_test]], y[perm[:n_test]]


def one_hot(y, n=10):
    return np.eye(n, dtype=np.float32)[y]


def mnist_test_set():
    """The 10,000 MNIST test images (float32 in [0, 1], flat) and labels, or None when absent."""
    images, labels = os.path.join(MNIST_DIR, "t10k-images-idx3-ubyte.gz"), os.path.join(MNIST_DIR,
                                                                                       "t10k-labels-idx1-ubyte.gz")
    if not (os.path.exists(images) and os.path.exists(labels)):
        return None
    with gzip.open(images) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float32) / 255.0
    with gzip.open(labels) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return x, y


class Batches:
    """``next_batch(n)`` over shuffled epochs, as the old ``mnist.train.next_batch``."""

    def __init__(self, x, y, seed=0):
        self.x, self.y, self.rng, self.pos = x, y, np.random.RandomState(seed), len(x)
        self.order = None

    def next_batch(self, n):
        if self.pos + n > len(self.x):
            self.order, self.pos = self.rng.permutation(len(self.x)), 0
        idx = self.order[self.pos:self.pos + n]
        self.pos += n
        return self.x[idx], self.y[idx]
