"""Tensor files in the safetensors layout, written atomically and read with validation.

Layout: an 8-byte little-endian header length ``N``, ``N`` bytes of JSON
(``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``),
then the raw little-endian data. The reader checks everything before allocating: the
header length against the file size, JSON types, known dtypes, non-negative shapes
whose byte size matches the offsets, offsets inside the data and not overlapping. Any
problem raises :class:`TensorFileError` (a ``ValueError``) naming the file and the entry.

>>> import numpy as np, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "t.safetensors")
>>> write_tensors(path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, {"format": "demo"})
>>> read_tensors(path)["w"].tolist()
[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
>>> read_metadata(path)
{'format': 'demo'}
"""
import json
import os
import struct
import tempfile

import ml_dtypes
import numpy as np

from tensorweave.saving.atomic import (CRASH_ENV, crash_point, fsync_dir,  # noqa: F401 - fsync_dir re-exported
                                      lock_temporary, unlock)
from tensorweave.saving.validation import loads_strict, open_regular

MAX_HEADER_BYTES = 100 << 20   # a header larger than this is refused before it is read
MAX_RANK = 64                  # NumPy's limit on the number of dimensions
# NumPy sizes an array as (product of its non-zero dimensions) x itemsize in a signed 64-bit
# integer, even when a zero dimension makes it empty; a shape beyond that is refused here.
MAX_EXTENT_BYTES = (1 << 63) - 1

_DTYPES = {
    "BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8), "I16": np.dtype(np.int16),
    "U16": np.dtype(np.uint16), "I32": np.dtype(np.int32), "U32": np.dtype(np.uint32), "I64": np.dtype(np.int64),
    "U64": np.dtype(np.uint64), "F16": np.dtype(np.float16), "BF16": np.dtype(ml_dtypes.bfloat16),
    "F32": np.dtype(np.float32), "F64": np.dtype(np.float64),
}
_CODES = {v: k for k, v in _DTYPES.items()}


class TensorFileError(ValueError):
    pass


def encode_chunks(tensors, metadata=None):
    """A tensor file as ``[header, data, data, ...]`` byte chunks (the arrays' own buffers, not copies)."""
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        native = a.dtype.newbyteorder("=") if a.dtype.byteorder not in "=|" else a.dtype
        code = _CODES.get(native)
        if code is None:
            raise TypeError(f"Cannot store tensor {name!r} of dtype {a.dtype} (supported: {sorted(_DTYPES)})")
        # (np.ascontiguousarray would turn a 0-d array into shape (1,))
        a = np.array(a, dtype=native.newbyteorder("<"), order="C", copy=None)
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        chunks.append(memoryview(a.reshape(-1).view(np.uint8)))
        offset += a.nbytes
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # align the data to 8 bytes
    return [struct.pack("<Q", len(raw)) + raw] + chunks


def encode(tensors, metadata=None):
    """The bytes of a tensor file (header + data) for ``{name: array}``."""
    return b"".join(encode_chunks(tensors, metadata))


def write_bytes_atomic(path, payload, stage_prefix=None):
    """Writes ``payload`` (bytes, or a list of bytes-like chunks) to a temporary file beside ``path``,
    fsyncs, then renames it over ``path``. With ``stage_prefix`` (a string) the checkpoint crash
    hook (``saving.atomic.crash_point``) may stop it at ``partial_write``/``written``/``renamed``."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    chunks = [payload] if isinstance(payload, (bytes, bytearray, memoryview)) else payload
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path) + "-")
    lock = lock_temporary(tmp)     # (so the next writer's clean-up leaves it alone meanwhile)
    try:
        with os.fdopen(fd, "wb") as f:
            if (stage_prefix is not None
                    and os.environ.get(CRASH_ENV, "").partition(":")[0] == stage_prefix + "partial_write"):
                # The crash hook wants a torn write: half the bytes reach the disk, then the process dies.
                chunks = list(chunks)
                data = b"".join(bytes(memoryview(c).cast("B")) for c in chunks)
                f.write(data[:len(data) // 2])
                f.flush()
                os.fsync(f.fileno())
                crash_point(stage_prefix + "partial_write")
                f.seek(0)
                f.truncate()
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        if stage_prefix is not None:
            crash_point(stage_prefix + "written")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    finally:
        unlock(lock)
    fsync_dir(directory)
    if stage_prefix is not None:
        crash_point(stage_prefix + "renamed")


def write_tensors(path, tensors, metadata=None):
    """Writes ``{name: array}`` (and string ``metadata``) to ``path`` atomically."""
    write_bytes_atomic(path, encode_chunks(tensors, metadata))


def _header(path, f, size):
    where = os.fspath(path)
    if size < 8:
        raise TensorFileError(f"{where}: not a tensor file (only {size} bytes; truncated?)")
    (n,) = struct.unpack("<Q", f.read(8))
    if n > MAX_HEADER_BYTES or n > size - 8:
        raise TensorFileError(f"{where}: header claims {n} bytes but the file has {size - 8} after the length "
                              "field (truncated or corrupt file)")
    try:
        header = loads_strict(f.read(n).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise TensorFileError(f"{where}: header is not valid JSON ({type(e).__name__}: {e})") from None
    if not isinstance(header, dict):
        raise TensorFileError(f"{where}: header must be a JSON object")
    return header, 8 + n


def _validate(path, header, data_size):
    where = os.fspath(path)
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise TensorFileError(f"{where}: __metadata__ must map strings to strings")
    spans = []
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise TensorFileError(f"{where}: entry {name!r} must have exactly dtype, shape and data_offsets")
        dtype = _DTYPES.get(entry["dtype"]) if isinstance(entry["dtype"], str) else None
        if dtype is None:
            raise TensorFileError(f"{where}: entry {name!r} has unknown dtype {entry['dtype']!r}")
        shape, offsets = entry["shape"], entry["data_offsets"]
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise TensorFileError(f"{where}: entry {name!r} has an invalid shape {shape!r}")
        if (not isinstance(offsets, list) or len(offsets) != 2 or
                not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
            raise TensorFileError(f"{where}: entry {name!r} has invalid data_offsets {offsets!r}")
        begin, end = offsets
        if len(shape) > MAX_RANK:
            raise TensorFileError(f"{where}: entry {name!r} has rank {len(shape)} (at most {MAX_RANK} dimensions)")
        n, extent = 1, dtype.itemsize
        for d in shape:
            n *= d   # Python ints: an absurd shape gives a huge number, never an overflow
            extent *= max(d, 1)
        if not 0 <= begin <= end <= data_size:
            raise TensorFileError(f"{where}: entry {name!r} has offsets {offsets} outside the {data_size} data bytes")
        if end - begin != n * dtype.itemsize:
            raise TensorFileError(f"{where}: entry {name!r} declares shape {shape} ({n * dtype.itemsize} bytes of "
                                  f"{entry['dtype']}) but spans {end - begin} bytes")
        if extent > MAX_EXTENT_BYTES:
            raise TensorFileError(f"{where}: entry {name!r} has shape {shape}, too large for an array on this "
                                  "machine (corrupt file?)")
        spans.append((begin, end, name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise TensorFileError(f"{where}: entries {n0!r} and {n1!r} overlap")
    return meta


def _open(path):
    return open_regular(path, os.fspath(path), TensorFileError)


def read_metadata(path):
    """The ``__metadata__`` of a tensor file (validated like :func:`read_tensors`)."""
    with _open(path) as f:
        size = os.fstat(f.fileno()).st_size
        header, start = _header(path, f, size)
        return _validate(path, header, size - start)


def read_tensors(path, names=None):
    """``{name: array}`` from a tensor file (only ``names`` when given); validates first."""
    with _open(path) as f:
        size = os.fstat(f.fileno()).st_size
        header, start = _header(path, f, size)
        _validate(path, header, size - start)
        out = {}
        for name, entry in header.items():
            if names is not None and name not in names:
                continue
            begin, end = entry["data_offsets"]
            f.seek(start + begin)
            buf = f.read(end - begin)
            if len(buf) != end - begin:
                raise TensorFileError(f"{os.fspath(path)}: entry {name!r} is cut short (truncated file)")
            dtype = _DTYPES[entry["dtype"]].newbyteorder("<")
            out[name] = np.frombuffer(buf, dtype=dtype).astype(dtype.newbyteorder("="), copy=False) \
                .reshape(entry["shape"]).copy()
        if names is not None:
            missing = set(names) - set(out)
            if missing:
                raise TensorFileError(f"{os.fspath(path)}: no tensors named {sorted(missing)}")
        return out
