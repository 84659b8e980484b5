"""Data for the Keras compatibility corpus, read with NumPy only (so the same programs run under
TensorFlow for the reference numbers). Nothing is downloaded: MNIST and rt-polarity come from the
shared datasets folder (``$TENSORWEAVE_DATASETS``, else ``../shared/datasets`` beside the repo); a
program whose data is absent raises ``unittest.SkipTest``.
"""
import gzip
import os
import re
import unittest

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))


def datasets_dir():
    for d in (os.environ.get("TENSORWEAVE_DATASETS"), os.path.join(_HERE, "..", "..", "..", "shared", "datasets"),
              "/work/shared/datasets"):
        if d and os.path.isdir(d):
            return os.path.abspath(d)
    raise unittest.SkipTest("shared datasets folder not found (set TENSORWEAVE_DATASETS)")


def _idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def mnist(n_train=2000, n_test=1000):
    """``keras.datasets.mnist.load_data()``'s layout (uint8 images, uint8 labels), cut from the
    10,000 MNIST test images (the only images in the shared folder)."""
    d = os.path.join(datasets_dir(), "mnist")
    if not os.path.isdir(d):
        raise unittest.SkipTest("MNIST not in the shared datasets")
    x = _idx(os.path.join(d, "t10k-images-idx3-ubyte.gz"))
    y = _idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz"))
    return (x[:n_train], y[:n_train]), (x[-n_test:], y[-n_test:])


def rt_polarity_sequences(num_words=5000, maxlen=40, n=4000, seed=0):
    """rt-polarity sentences as integer sequences (1 = out of vocabulary, 0 = padding, most frequent
    words first), shuffled, padded at the front, as ``keras.datasets.imdb.load_data`` gives them."""
    d = os.path.join(datasets_dir(), "rt-polarity")
    if not os.path.isdir(d):
        raise unittest.SkipTest("rt-polarity not in the shared datasets")
    texts, labels = [], []
    for name, label in (("rt-polarity.neg", 0), ("rt-polarity.pos", 1)):
        with open(os.path.join(d, name), encoding="latin-1") as f:
            for line in f:
                texts.append(re.findall(r"[a-z0-9']+", line.lower()))
                labels.append(label)
    order = np.random.default_rng(seed).permutation(len(texts))[:n]
    texts, labels = [texts[i] for i in order], np.asarray(labels, np.int64)[order]
    counts = {}
    for t in texts:
        for w in t:
            counts[w] = counts.get(w, 0) + 1
    vocab = {w: i + 2 for i, (w, _) in enumerate(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:num_words - 2])}
    seqs = np.zeros((len(texts), maxlen), np.int32)
    for i, t in enumerate(texts):
        ids = [vocab.get(w, 1) for w in t][:maxlen]
        if ids:
            seqs[i, -len(ids):] = ids
    split = int(len(texts) * 0.8)
    return (seqs[:split], labels[:split]), (seqs[split:], labels[split:])


def rt_polarity_texts(n=4000, seed=0):
    """rt-polarity sentences as raw strings with 0/1 labels, shuffled, split 80/20 (the layout of
    ``keras.utils.text_dataset_from_directory`` on the IMDB folders, before batching)."""
    d = os.path.join(datasets_dir(), "rt-polarity")
    if not os.path.isdir(d):
        raise unittest.SkipTest("rt-polarity not in the shared datasets")
    texts, labels = [], []
    for name, label in (("rt-polarity.neg", 0), ("rt-polarity.pos", 1)):
        with open(os.path.join(d, name), encoding="latin-1") as f:
            for line in f:
                texts.append(line.strip())
                labels.append(label)
    order = np.random.default_rng(seed).permutation(len(texts))[:n]
    texts, labels = np.array([texts[i] for i in order]), np.asarray(labels, np.int64)[order]
    split = int(len(texts) * 0.8)
    return (texts[:split], labels[:split]), (texts[split:], labels[split:])


def sine_weather(n=3000, features=4, seed=0):
    """A synthetic multivariate series in the shape of the Jena climate data (hourly rows,
    ``features`` columns): daily and yearly-like cycles with noise; column 1 is the target
    (``temperature``), which depends on the others' past."""
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.float64)
    cols = [np.sin(2 * np.pi * t / 24 + k) + 0.5 * np.sin(2 * np.pi * t / 240 + 2 * k) for k in range(features)]
    data = np.stack(cols, axis=1) + 0.1 * rng.normal(size=(n, features))
    data[6:, 1] += 0.5 * data[:-6, 0]
    return data.astype(np.float32)
