"""Whole-file reads and writes, raw bytes and base64 as string tensors (``tf.io.read_file`` ...).

>>> import os, tempfile
>>> import tensorweave as tw
>>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
>>> tw.io.write_file(path, b"\\x01\\x00\\x02\\x00")
>>> tw.io.decode_raw(tw.io.read_file(path), tw.int16).numpy().tolist()
[1, 2]
"""
import base64
import glob as _glob
import os

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.tensor import Tensor


def _scalar_bytes(value, what):
    if isinstance(value, Tensor):
        value = value.numpy()
    if isinstance(value, np.ndarray):
        value = value[()]
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise TypeError(f"{what}: expected a string, got {type(value).__name__}")


def _string(value):
    arr = np.empty((), dtype=object)
    arr[()] = value
    return convert_to_tensor(arr, dtype=_dt.string)


def read_file(filename, name=None):
    """The contents of ``filename`` as a scalar string tensor (bytes)."""
    path = os.fsdecode(_scalar_bytes(filename, "read_file"))
    try:
        with open(path, "rb") as f:
            return _string(f.read())
    except FileNotFoundError:
        raise errors.NotFoundError(f"{path}; No such file or directory") from None


def write_file(filename, contents, name=None):
    """Writes the scalar string ``contents`` to ``filename`` (creating parent directories)."""
    path = os.fsdecode(_scalar_bytes(filename, "write_file"))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(_scalar_bytes(contents, "write_file"))


def matching_files(pattern, name=None):
    """The sorted file names matching a glob ``pattern`` (or each of several)."""
    pats = np.asarray(pattern.numpy() if isinstance(pattern, Tensor) else pattern, dtype=object).reshape(-1)
    names = sorted({n for p in pats for n in _glob.glob(os.fsdecode(p if isinstance(p, bytes) else str(p).encode()))})
    out = np.empty(len(names), dtype=object)
    out[:] = [n.encode() for n in names]
    return convert_to_tensor(out, dtype=_dt.string)


def _map_strings(value, fn):
    a = np.asarray(value.numpy() if isinstance(value, Tensor) else value, dtype=object)
    out = np.empty(a.shape, dtype=object)
    for i, v in np.ndenumerate(a):
        out[i] = fn(v.encode("utf-8") if isinstance(v, str) else bytes(v))
    return convert_to_tensor(out, dtype=_dt.string)


def decode_raw(input_bytes, out_type, little_endian=True, fixed_length=None, name=None):
    """Reinterprets each string's bytes as a vector of ``out_type`` (one row per string)."""
    dt = np.dtype(_dt.as_dtype(out_type).np_dtype).newbyteorder("<" if little_endian else ">")
    a = np.asarray(input_bytes.numpy() if isinstance(input_bytes, Tensor) else input_bytes, dtype=object)
    rows = []
    for v in a.reshape(-1):
        b = v.encode("utf-8") if isinstance(v, str) else bytes(v)
        if fixed_length is not None:
            b = b[:int(fixed_length)].ljust(int(fixed_length), b"\0")
        if len(b) % dt.itemsize:
            raise ValueError(f"decode_raw: input size {len(b)} is not a multiple of {dt.itemsize} "
                             f"(the size of {_dt.as_dtype(out_type).name})")
        rows.append(np.frombuffer(b, dt).astype(dt.newbyteorder("=")))
    if a.ndim == 0:
        return convert_to_tensor(rows[0])
    n = {len(r) for r in rows}
    if len(n) > 1:
        raise ValueError(f"decode_raw: inputs have different lengths {sorted(n)}; pass fixed_length")
    return convert_to_tensor(np.stack(rows).reshape(a.shape + (n.pop() if n else 0,)))


def encode_base64(input, pad=False, name=None):  # noqa: A002 - TF's name
    """Web-safe base64 (``-`` and ``_``), without ``=`` padding unless ``pad``."""
    return _map_strings(input, lambda b: base64.urlsafe_b64encode(b) if pad else
                        base64.urlsafe_b64encode(b).rstrip(b"="))


def decode_base64(input, name=None):  # noqa: A002
    """Decodes web-safe base64 (padding optional)."""
    def dec(b):
        try:
            return base64.urlsafe_b64decode(b + b"=" * (-len(b) % 4))
        except ValueError as e:
            raise ValueError(f"decode_base64: invalid base64 input ({e})") from None
    return _map_strings(input, dec)
