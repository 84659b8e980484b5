"""MNIST from IDX files on disk (``keras.datasets.mnist.load_data`` without the download).

``path`` is a directory holding ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte`` (each optionally ``.gz``; the
``train-images.idx3-ubyte`` spelling works too), or a directory with such a ``mnist/`` folder.
Without ``path``, ``$TENSORWEAVE_DATASETS`` (or ``$KERAS_DATASETS_DIR``) is searched. For a
bundled sample that needs no files, see ``mnist_sample``.

>>> import os, tempfile
>>> import numpy as np
>>> from tensorweave.keras.datasets import idx, mnist
>>> d = tempfile.mkdtemp()
>>> for split, n in (("train", 3), ("t10k", 2)):
...     idx.write_idx(os.path.join(d, f"{split}-images-idx3-ubyte.gz"), np.zeros((n, 28, 28), np.uint8))
...     idx.write_idx(os.path.join(d, f"{split}-labels-idx1-ubyte.gz"), np.arange(n, dtype=np.uint8))
>>> (x_train, y_train), (x_test, y_test) = mnist.load_data(d)
>>> x_train.shape, x_train.dtype, y_test.tolist()
((3, 28, 28), dtype('uint8'), [0, 1])
"""
import numpy as np

from tensorweave.keras.datasets import _paths, idx

_PREFIX = {"train": "train", "test": "t10k"}
IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049


def _candidates(split, kind):
    base, ext = _PREFIX[split], "idx3-ubyte" if kind == "images" else "idx1-ubyte"
    names = [f"{base}-{kind}-{ext}", f"{base}-{kind}.{ext}"]
    return [n + ".gz" for n in names] + names


def _has_any(d):
    return any(_paths.first_existing(d, _candidates(s, k)) for s in _PREFIX for k in ("images", "labels"))


def _read(path, magic, what):
    got = idx.magic_number(path)
    if got != magic:
        raise ValueError(f"{path}: magic number {got}, but MNIST {what} files have {magic}")
    arr = idx.read_idx(path)
    if what == "images" and arr.shape[1:] != (28, 28):
        raise ValueError(f"{path}: MNIST images must be 28x28, the file holds shape {arr.shape}")
    if arr.dtype != np.uint8:
        raise ValueError(f"{path}: MNIST files hold uint8, this one holds {arr.dtype}")
    return arr


def load_split(path=None, split="train"):
    """``(images, labels)`` of one split (``"train"`` or ``"test"``): uint8 ``(N, 28, 28)`` and
    uint8 ``(N,)``. Useful when a directory holds only one split, as ``../shared/datasets/mnist``
    holds only the test images (split those for a train/test pair)."""
    if split not in _PREFIX:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    d = _paths.find_dir("mnist", path, _has_any)
    files = {}
    for kind in ("images", "labels"):
        p = _paths.first_existing(d, _candidates(split, kind))
        if p is None:
            raise FileNotFoundError(
                f"mnist: {d} has no {split} {kind} file (looked for {', '.join(_candidates(split, kind))})")
        files[kind] = p
    x = _read(files["images"], IMAGES_MAGIC, "images")
    y = _read(files["labels"], LABELS_MAGIC, "labels")
    if y.ndim != 1 or len(x) != len(y):
        raise ValueError(f"mnist: {files['images']} holds {len(x)} images but {files['labels']} holds "
                         f"{y.shape[0] if y.ndim else 0} labels")
    return x, y


def load_data(path=None):
    """``(x_train, y_train), (x_test, y_test)`` as Keras returns them: uint8 images
    ``(N, 28, 28)`` in 0..255 and uint8 labels 0..9."""
    try:
        train = load_split(path, "train")
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{e}. Hint: mnist.load_split(path, 'test') reads a directory that only "
                                "has the test split; mnist_sample.load_data() needs no files.") from None
    return train, load_split(path, "test")


__all__ = ["load_data", "load_split"]
