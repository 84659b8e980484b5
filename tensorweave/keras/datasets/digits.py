"""scikit-learn's bundled handwritten digits (1,797 images of 8x8 pixels in 0..16), offline.

The CSV inside scikit-learn is read directly (scikit-learn must be installed, but is not
imported, which would take over a second).

>>> from tensorweave.keras.datasets import digits
>>> (x_train, y_train), (x_test, y_test) = digits.load_data()
>>> x_train.shape, x_test.shape, x_train.dtype, int(x_train.max())
((1438, 8, 8), (359, 8, 8), dtype('uint8'), 16)
"""
import numpy as np

from tensorweave.keras.datasets import _bundled, _paths

NUM_EXAMPLES = 1797


def load_all():
    """All ``(images, labels)``: uint8 ``(1797, 8, 8)`` with values 0..16 and uint8 labels."""
    path = _bundled.package_file("sklearn", "datasets", "data", "digits.csv.gz")
    if path is not None:
        arr = _bundled.read_csv_ints(path, 65, np.uint8)
        return np.ascontiguousarray(arr[:, :64].reshape(-1, 8, 8)), arr[:, 64].copy()
    try:   # a future scikit-learn may move the file; its public loader still works
        from sklearn.datasets import load_digits
    except ImportError:
        raise ModuleNotFoundError("digits needs scikit-learn's bundled data. Hint: pip install scikit-learn") \
            from None
    d = load_digits()
    return d.images.astype(np.uint8), d.target.astype(np.uint8)


def load_data(test_split=0.2, seed=0):
    """``(x_train, y_train), (x_test, y_test)`` with a fixed stratified split (``test_split``
    of each digit's images in the test set, chosen by ``seed``), in shuffled order. Pixels are
    uint8 in 0..16 (divide by 16 to scale), labels uint8 0..9."""
    x, y = load_all()
    train, test = _paths.split_indices(y, test_split, seed)
    return (x[train], y[train]), (x[test], y[test])
