"""Tensor files are fsynced where their bytes are: the writer writes through the descriptor
it fsyncs (the library's ``serialize_file`` wrote its own temporary file and renamed it over
ours, so the fsync hit the replaced empty file), and the safetensors library reads every file
written so, bit for bit, whatever the dtypes, shapes and metadata."""
import os

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

from tensorweave.saving import tensor_file


def _tensors():
    rng = np.random.default_rng(3)
    return {"f64": rng.standard_normal((3, 5)), "f32": rng.standard_normal(7).astype(np.float32),
            "bf16": rng.standard_normal((2, 2)).astype(ml_dtypes.bfloat16), "i8": np.arange(-3, 4, dtype=np.int8),
            "scalar": np.array(4, np.int64), "empty": np.zeros((0, 3), np.float32), "b": np.array([True, False]),
            "big_endian": np.arange(4, dtype=">i4"), "strided": np.arange(20, dtype=np.uint16).reshape(4, 5)[:, ::2],
            "näme": np.ones(3, np.float16)}


def test_the_fsynced_descriptor_is_the_file_that_ends_up_at_the_path(tmp_path, monkeypatch):
    synced = []
    real = os.fsync

    def fsync(fd):
        st = os.fstat(fd)
        synced.append((st.st_ino, st.st_size))
        return real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    path = tmp_path / "t.safetensors"
    tensor_file.write_tensors(path, {"w": np.arange(1000, dtype=np.float32)}, {"k": "v"})
    st = os.stat(path)
    assert (st.st_ino, st.st_size) in synced


def test_the_library_reads_what_we_write_bit_for_bit(tmp_path):
    tensors = _tensors()
    path = str(tmp_path / "t.safetensors")
    tensor_file.write_tensors(path, tensors, {"format": "demo", "ünïcode": "✓"})
    got = safetensors.numpy.load_file(path)
    assert sorted(got) == sorted(tensors)
    for name, a in tensors.items():
        want = np.asarray(a)
        assert got[name].shape == want.shape and got[name].dtype.newbyteorder("=") == want.dtype.newbyteorder("=")
        stored = np.ascontiguousarray(want.astype(want.dtype.newbyteorder("<"))).reshape(-1)
        assert got[name].reshape(-1).tobytes() == stored.tobytes()
    with safetensors.safe_open(path, framework="numpy") as f:
        assert f.metadata() == {"format": "demo", "ünïcode": "✓"}
    # and our reader, and our encoder (the library's serialize) agree byte for byte on the data
    ours = tensor_file.read_tensors(path)
    assert all(np.array_equal(ours[n], np.asarray(a)) for n, a in tensors.items())
    # (one metadata key: the library orders several in a hash map's order)
    tensor_file.write_tensors(path, tensors, {"ünïcode": "✓"})
    assert tensor_file.encode(tensors, {"ünïcode": "✓"}) == open(path, "rb").read()


def test_every_tensor_starts_aligned_to_its_item_size(tmp_path):
    path = tmp_path / "t.safetensors"
    tensor_file.write_tensors(path, _tensors(), {"m": "x" * 5})
    header, _ = tensor_file.read_header(path)
    with open(path, "rb") as f:
        start = 8 + int.from_bytes(f.read(8), "little")
    assert start % 8 == 0
    for name, entry in header.items():
        item = tensor_file._DTYPES[entry["dtype"]].itemsize
        assert (start + entry["data_offsets"][0]) % item == 0, name


def test_unsupported_dtypes_are_refused_before_anything_is_written(tmp_path):
    with pytest.raises(TypeError, match="Cannot store tensor 'c' of dtype complex64"):
        tensor_file.write_tensors(tmp_path / "t.safetensors", {"c": np.ones(2, np.complex64)})
    assert os.listdir(tmp_path) == []
