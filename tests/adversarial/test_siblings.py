"""The same defects in the other readers of files: ``Dataset.cache(filename)`` and Keras'
``BackupAndRestore`` (regular files only, crafted contents end in a ValueError naming the
file), and their writers (atomic, no shared temporary name)."""
import io
import os

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.data
from tensorweave import keras
from tensorweave.saving import tensor_file


def _cached(path):
    return tw.data.Dataset.range(5).map(lambda x: x * 2).cache(str(path))


def test_cache_file_roundtrip_and_no_leftovers(tmp_path):
    path = tmp_path / "c"
    assert [int(x) for x in _cached(path)] == [0, 2, 4, 6, 8]
    assert [int(x) for x in _cached(path)] == [0, 2, 4, 6, 8]       # read back from the file
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tmp-") or n.endswith(".tmp")] == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_cache_file_fifo(tmp_path):
    path = tmp_path / "c"
    list(_cached(path))
    target = tmp_path / os.listdir(tmp_path)[0]
    os.remove(target)
    os.mkfifo(target)
    with pytest.raises(ValueError, match="FIFO"):
        list(_cached(path))


def test_crafted_cache_file(tmp_path):
    path = tmp_path / "c"
    list(_cached(path))
    target = tmp_path / os.listdir(tmp_path)[0]
    buf = io.BytesIO()
    np.savez(buf, count=np.asarray(10 ** 9, np.int64), dtype0=np.asarray("int64"),
             rank0=np.zeros(2, np.int64), dims0=np.zeros(0, np.int64), data0=np.zeros(16, np.uint8))
    target.write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match=f"{target}: not a valid cache file \\(IndexError"):
        list(_cached(path))


def _backup_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


@pytest.mark.parametrize("state, message", [
    ('{"epoch": 1e999, "num_weights": 2}', "out of range"),
    ("[" * 5000 + "]" * 5000, "nested"),
    ('{"epoch": "2", "num_weights": 2}', "state is malformed"),
])
def test_crafted_backup_state(tmp_path, state, message):
    tensor_file.write_tensors(str(tmp_path / "backup.safetensors"), {"model/0": np.zeros((3, 1), np.float32)},
                              {"format": "tensorweave.backup", "version": "1", "state": state})
    with pytest.raises(ValueError, match=message):
        _backup_model().fit(np.ones((4, 3)), np.ones((4, 1)), epochs=1, verbose=0,
                            callbacks=[keras.callbacks.BackupAndRestore(str(tmp_path))])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_backup_fifo(tmp_path):
    os.mkfifo(tmp_path / "backup.safetensors")
    with pytest.raises(ValueError, match="FIFO"):
        _backup_model().fit(np.ones((4, 3)), np.ones((4, 1)), epochs=1, verbose=0,
                            callbacks=[keras.callbacks.BackupAndRestore(str(tmp_path))])
