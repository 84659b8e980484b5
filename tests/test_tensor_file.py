"""Tensor files on the safetensors library: every dtype, interop both ways, slices, in-memory files."""
import json
import struct

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

from tensorweave.saving import tensor_file

DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
          np.float16, ml_dtypes.bfloat16, np.float32, np.float64]


def _values():
    rng = np.random.default_rng(0)
    out = {f"t{i}": (rng.standard_normal((3, 4)) * 50).astype(d) for i, d in enumerate(DTYPES)}
    out["scalar"] = np.float64(2.5)
    out["empty"] = np.zeros((0, 3), np.int32)
    out["big_endian"] = np.arange(5, dtype=">i4")
    out["strided"] = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    return out


def _equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype.newbyteorder("=") == b.dtype.newbyteorder("=")
    np.testing.assert_array_equal(a.astype(a.dtype.newbyteorder("=")), b)


def test_round_trip_every_dtype_and_layout(tmp_path):
    path = str(tmp_path / "t.safetensors")
    values = _values()
    tensor_file.write_tensors(path, values, {"format": "test", "n": 3})
    out = tensor_file.read_tensors(path)
    assert sorted(out) == sorted(values)
    for k, v in values.items():
        _equal(v, out[k])
        assert out[k].flags.writeable
    assert tensor_file.read_metadata(path) == {"format": "test", "n": "3"}
    assert tensor_file.read_tensors(path, names=["t3"]).keys() == {"t3"}
    with pytest.raises(tensor_file.TensorFileError, match=r"no tensors named \['nope'\]"):
        tensor_file.read_tensors(path, names=["t3", "nope"])


def test_encode_equals_the_written_file_and_loads_from_memory(tmp_path):
    path = tmp_path / "t.safetensors"
    values = _values()
    tensor_file.write_tensors(str(path), values, {"k": "v"})
    blob = tensor_file.encode(values, {"k": "v"})
    assert blob == path.read_bytes()
    out = tensor_file.load_bytes(blob, "member")
    for k, v in values.items():
        _equal(v, out[k])


def test_files_interoperate_with_the_safetensors_library_both_ways(tmp_path):
    values = {k: v for k, v in _values().items() if v.dtype != ml_dtypes.bfloat16 and v.dtype.byteorder != ">"}
    ours, theirs = str(tmp_path / "ours.safetensors"), str(tmp_path / "theirs.safetensors")
    tensor_file.write_tensors(ours, values)
    for k, v in safetensors.numpy.load_file(ours).items():
        _equal(values[k], v)
    safetensors.numpy.save_file({k: np.ascontiguousarray(v) if v.ndim else np.array(v)
                                 for k, v in values.items()}, theirs, metadata={"from": "library"})
    for k, v in tensor_file.read_tensors(theirs).items():
        _equal(values[k], v)
    assert tensor_file.read_metadata(theirs) == {"from": "library"}


def test_read_slice_returns_just_the_rows_asked_for(tmp_path):
    path = str(tmp_path / "t.safetensors")
    w = np.arange(7 * 3, dtype=np.float32).reshape(7, 3)
    tensor_file.write_tensors(path, {"w": w, "b": np.ones(2, ml_dtypes.bfloat16)})
    np.testing.assert_array_equal(tensor_file.read_slice(path, "w", (slice(3, 5),)), w[3:5])
    np.testing.assert_array_equal(tensor_file.read_slice(path, "w", (slice(6, 7), slice(1, 3))), w[6:7, 1:3])
    assert tensor_file.read_slice(path, "w", (slice(7, 7),)).shape == (0, 3)
    assert tensor_file.read_slice(path, "b", (slice(0, 1),)).dtype == ml_dtypes.bfloat16
    with pytest.raises(tensor_file.TensorFileError, match="no tensor named 'x'"):
        tensor_file.read_slice(path, "x", (slice(0, 1),))


def _raw(header, data):
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def test_a_file_our_checks_pass_but_the_library_refuses_is_a_tensor_file_error(tmp_path):
    # A gap between entries is harmless to our checks; the library insists on packed data.
    path = tmp_path / "gap.safetensors"
    header = {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
              "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}
    path.write_bytes(_raw(header, b"\0" * 12))
    with pytest.raises(tensor_file.TensorFileError, match="gap.safetensors: the safetensors library refused"):
        tensor_file.read_tensors(str(path))
    with pytest.raises(tensor_file.TensorFileError, match="member: the safetensors library refused"):
        tensor_file.load_bytes(path.read_bytes(), "member")


def test_unsupported_dtypes_are_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "t.safetensors"
    with pytest.raises(TypeError, match="Cannot store tensor 'c' of dtype complex64"):
        tensor_file.write_tensors(str(path), {"c": np.zeros(2, np.complex64)})
    assert list(tmp_path.iterdir()) == []
