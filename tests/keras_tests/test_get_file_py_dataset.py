"""keras.utils.get_file (file:// and local origins, cache, md5/sha256, safe extraction) and
keras.utils.PyDataset in fit/evaluate/predict (epoch hooks, shuffling, worker threads)."""
import hashlib
import io
import os
import tarfile
import threading
import zipfile

import numpy as np
import pytest

from tensorweave import keras


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def test_get_file_copies_caches_and_checks_hashes(tmp_path, capsys):
    src = _write(tmp_path / "w.bin", b"weights")
    sha, md5 = hashlib.sha256(b"weights").hexdigest(), hashlib.md5(b"weights").hexdigest()
    cache = tmp_path / "cache"
    path = keras.utils.get_file(origin="file://" + src, cache_dir=cache, file_hash=sha)
    assert path == str(cache / "datasets" / "w.bin") and open(path, "rb").read() == b"weights"
    # cached: the origin is not read again
    os.remove(src)
    assert keras.utils.get_file("w.bin", origin="file://" + src, cache_dir=cache, md5_hash=md5) == path
    # a stale cached copy is fetched again; a wrong hash after fetching is an error (and no file stays)
    _write(path, b"stale")
    src = _write(tmp_path / "w.bin", b"weights")
    keras.utils.get_file(origin=src, cache_dir=cache, file_hash=sha, cache_subdir="datasets")
    assert "file hash does not match the original value" in capsys.readouterr().out
    assert open(path, "rb").read() == b"weights"
    with pytest.raises(ValueError, match="Incomplete or corrupted file detected. The md5 file hash does not match"):
        keras.utils.get_file("other.bin", origin=src, cache_dir=cache, file_hash="0" * 32)
    assert not os.path.exists(cache / "datasets" / "other.bin")


def test_get_file_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match='specify the "origin" argument'):
        keras.utils.get_file("x")
    with pytest.raises(ValueError, match="file:// URLs and local paths only"):
        keras.utils.get_file(origin="https://example.com/data.npz", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="Paths are no longer accepted as the `fname` argument"):
        keras.utils.get_file("a/b.txt", origin="file:///nowhere", cache_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        keras.utils.get_file(origin="file://" + str(tmp_path / "missing.txt"), cache_dir=tmp_path)


def _tar(path, members, mode="w:gz"):
    with tarfile.open(path, mode) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return str(path)


def test_get_file_extracts_tar_and_zip(tmp_path):
    tgz = _tar(tmp_path / "data.tar.gz", [("data/a.txt", b"A"), ("data/sub/b.txt", b"B")])
    out = keras.utils.get_file("data.tar.gz", origin="file://" + tgz, extract=True, cache_dir=tmp_path / "c")
    assert out == str(tmp_path / "c" / "datasets" / "data_extracted")
    assert open(os.path.join(out, "data", "sub", "b.txt")).read() == "B"
    out = keras.utils.get_file(origin="file://" + tgz, untar=True, cache_dir=tmp_path / "u")
    assert out == str(tmp_path / "u" / "datasets" / "data.tar.gz")     # Keras 3's name when fname is not given
    assert os.path.isdir(out) and os.path.isfile(tmp_path / "u" / "datasets" / "data.tar.gz_archive")
    zpath = str(tmp_path / "z.zip")
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("z/c.txt", "C")
    out = keras.utils.get_file("z.zip", origin=zpath, extract=True, cache_dir=tmp_path / "c")
    assert open(os.path.join(out, "z", "c.txt")).read() == "C"


@pytest.mark.parametrize("name", ["../evil.txt", "/abs/evil.txt", "ok/../../evil.txt"])
def test_get_file_refuses_path_traversal(tmp_path, name):
    bad = _tar(tmp_path / "bad.tar", [("fine.txt", b"x"), (name, b"evil")], mode="w")
    with pytest.raises(ValueError, match="would be written outside"):
        keras.utils.get_file("bad.tar", origin=bad, extract=True, cache_dir=tmp_path / "c")
    assert not os.path.exists(tmp_path / "c" / "evil.txt") and not os.path.exists(tmp_path / "evil.txt")
    zpath = str(tmp_path / "bad.zip")
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr(name, "evil")
    with pytest.raises(ValueError, match="would be written outside"):
        keras.utils.get_file("bad.zip", origin=zpath, extract=True, cache_dir=tmp_path / "c")


def test_get_file_refuses_links_in_archives(tmp_path):
    path = str(tmp_path / "link.tar")
    with tarfile.open(path, "w") as t:
        info = tarfile.TarInfo("passwd")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        t.addfile(info)
    with pytest.raises(ValueError, match="is a link or a device"):
        keras.utils.get_file("link.tar", origin=path, extract=True, cache_dir=tmp_path / "c")


# ---- PyDataset ----------------------------------------------------------------------------------------
class Batches(keras.utils.PyDataset):
    def __init__(self, x, y, batch_size=8, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch_size = x, y, batch_size
        self.calls, self.epochs_begun, self.epochs_ended = [], 0, 0
        self.threads = set()

    def __len__(self):
        return int(np.ceil(len(self.x) / self.batch_size))

    def __getitem__(self, i):
        self.calls.append(i)
        self.threads.add(threading.get_ident())
        s = slice(i * self.batch_size, (i + 1) * self.batch_size)
        return self.x[s], self.y[s]

    def on_epoch_begin(self):
        self.epochs_begun += 1

    def on_epoch_end(self):
        self.epochs_ended += 1


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3)).astype("float32")
    return x, (x @ np.array([[1.0], [-2.0], [0.5]], "float32")).astype("float32")


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    return model


def test_fit_evaluate_predict_on_a_py_dataset():
    x, y = _data()
    ds = Batches(x, y)
    model = _model()
    history = model.fit(ds, epochs=3, verbose=0, shuffle=False)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert ds.calls == [0, 1, 2, 3, 4] * 3 and ds.epochs_begun == ds.epochs_ended == 3
    # the same numbers as the arrays in the same batches
    twin = _model()
    twin.fit(x, y, batch_size=8, epochs=3, verbose=0, shuffle=False)
    np.testing.assert_allclose(model.get_weights()[0], twin.get_weights()[0], rtol=1e-6)
    assert model.evaluate(ds, verbose=0) == pytest.approx(twin.evaluate(x, y, batch_size=8, verbose=0), rel=1e-6)
    assert ds.epochs_ended == 4
    np.testing.assert_allclose(model.predict(ds, verbose=0), twin.predict(x, verbose=0), rtol=1e-6)
    # shuffle=True visits every batch once per epoch, in another order
    ds.calls.clear()
    model.fit(ds, epochs=1, verbose=0, shuffle=True, steps_per_epoch=5)
    assert sorted(ds.calls) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="`y` and `sample_weight` must not be given"):
        model.fit(ds, y, verbose=0)


def test_py_dataset_workers_load_in_threads_in_order():
    x, y = _data()
    ds = Batches(x, y, batch_size=4, workers=3, max_queue_size=4)
    preds = _model().predict(ds, verbose=0)
    np.testing.assert_allclose(preds, _model().predict(x, verbose=0), rtol=1e-6)
    assert ds.threads and threading.get_ident() not in ds.threads   # loaded by worker threads, not here
    assert ds.workers == 3 and ds.max_queue_size == 4 and not ds.use_multiprocessing
    with pytest.warns(UserWarning, match="use_multiprocessing=True is not supported"):
        _model().evaluate(Batches(x, y, workers=2, use_multiprocessing=True), verbose=0)


def test_py_dataset_without_len_needs_steps():
    class Endless(keras.utils.PyDataset):
        def __getitem__(self, i):
            return np.ones((2, 3), "float32"), np.zeros((2, 1), "float32")
    model = _model()
    with pytest.raises(ValueError, match="has no __len__: pass steps_per_epoch"):
        model.fit(Endless(), epochs=1, verbose=0)
    model.fit(Endless(), epochs=1, steps_per_epoch=3, verbose=0)
    assert keras.utils.Sequence is keras.utils.PyDataset
