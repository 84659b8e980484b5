"""Tensor files in the safetensors layout: written atomically, read after our own validation,
with the ``safetensors`` library doing the I/O.

Layout: an 8-byte little-endian header length ``N``, ``N`` bytes of JSON
(``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``),
then the raw little-endian data. Writes go straight from the arrays' buffers to the
descriptor that is then fsynced (:func:`write_tensors` says why not the library's
``serialize_file``); the library reads, through a memory map (``safe_open``: only the
tensors, or the rows, asked for). Before it touches a file we check what a crafted file could abuse,
with errors naming the file and the entry: a regular file only (a FIFO would block
forever), the header length against the file size and :data:`MAX_HEADER_BYTES`, JSON
types, known dtypes, non-negative shapes whose byte size matches the offsets, offsets
inside the data and not overlapping, ranks and extents NumPy can hold. Any problem raises
:class:`TensorFileError` (a ``ValueError``). Writes go to a temporary file beside the
target, are fsynced, renamed over it, and the directory fsynced.

>>> import numpy as np, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "t.safetensors")
>>> write_tensors(path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, {"format": "demo"})
>>> read_tensors(path)["w"].tolist()
[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
>>> read_metadata(path)
{'format': 'demo'}
>>> read_slice(path, "w", (slice(1, 2),)).tolist()
[[3.0, 4.0, 5.0]]
"""
import io
import json
import os
import shutil
import struct
import tempfile

import ml_dtypes
import numpy as np
import safetensors

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
_LIBRARY_ORDER = ("BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64")


class TensorFileError(ValueError):
    pass


def _stored(tensors):
    """``{name: (array, code)}``: each array as stored (little-endian, C order; a copy only where
    it is not already so) and its safetensors dtype code."""
    out = {}
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        native = a.dtype.newbyteorder("=") if a.dtype.byteorder not in "=|" else a.dtype
        if native not in _CODES:
            raise TypeError(f"Cannot store tensor {name!r} of dtype {a.dtype} (supported: {sorted(_DTYPES)})")
        # (np.ascontiguousarray would turn a 0-d array into shape (1,))
        out[name] = np.array(a, dtype=native.newbyteorder("<"), order="C", copy=None), _CODES[native]
    return out


def _specs(tensors):
    """``{name: TensorSpec}`` over the arrays' own little-endian C-order buffers, and the arrays
    to keep alive while the library reads them."""
    specs, keep = {}, []
    for name, (a, _) in _stored(tensors).items():
        keep.append(a)
        native = a.dtype.newbyteorder("=")
        specs[name] = safetensors.TensorSpec(dtype=native.name, shape=a.shape, data_ptr=a.ctypes.data,
                                             data_len=a.nbytes)
    return specs, keep


def _layout(stored, metadata):
    """The header bytes (length field included) of a file holding ``stored`` and the order of
    the tensors' data: the library's own (its dtype order, widest first, then names), so every
    tensor starts aligned to its item size and the file is the bytes ``encode`` gives (the
    header padded to 8 bytes with spaces, as the library pads it)."""
    order = sorted(stored, key=lambda n: (-_LIBRARY_ORDER.index(stored[n][1]), n))
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name in order:
        a, code = stored[name]
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, order


def _write_all(fd, buffer):
    view = memoryview(buffer).cast("B")
    while view:
        view = view[os.write(fd, view):]


def _metadata(metadata):
    return {str(k): str(v) for k, v in metadata.items()} if metadata else None


def encode(tensors, metadata=None):
    """The bytes of a tensor file (header + data) for ``{name: array}``."""
    specs, keep = _specs(tensors)
    out = bytes(safetensors.serialize(specs, metadata=_metadata(metadata)))
    del keep
    return out


def _write_atomic(path, fill, stage_prefix=None):
    """Creates ``path`` atomically: ``fill(file, temporary_path)`` writes a temporary file beside
    it, which is fsynced and renamed over ``path``, then the directory is fsynced. With
    ``stage_prefix`` (a string) the checkpoint crash hook (``saving.atomic.crash_point``) may
    stop it at ``partial_write`` (half the bytes on disk under the temporary name), ``written``
    or ``renamed``."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path) + "-")
    lock = lock_temporary(tmp)     # (so the next writer's clean-up leaves it alone meanwhile)
    try:
        with os.fdopen(fd, "r+b") as f:
            fill(f, tmp)
            f.flush()
            if (stage_prefix is not None
                    and os.environ.get(CRASH_ENV, "").partition(":")[0] == stage_prefix + "partial_write"):
                # The crash hook wants a torn write: half the bytes reach the disk, then the process dies.
                f.truncate(os.fstat(f.fileno()).st_size // 2)
                os.fsync(f.fileno())
                crash_point(stage_prefix + "partial_write")
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


def write_bytes_atomic(path, payload, stage_prefix=None):
    """Writes ``payload`` (bytes, or a list of bytes-like chunks) to ``path`` atomically (see
    :func:`_write_atomic` for the crash stages)."""
    chunks = [payload] if isinstance(payload, (bytes, bytearray, memoryview)) else payload

    def fill(f, tmp):
        for chunk in chunks:
            f.write(chunk)
    _write_atomic(path, fill, stage_prefix)


def write_tensors(path, tensors, metadata=None, stage_prefix=None):
    """Writes ``{name: array}`` (and string ``metadata``) to ``path`` atomically, straight from
    the arrays' buffers (no serialized copy in memory), through the descriptor that is then
    fsynced. (Not the library's ``serialize_file``: it writes its own temporary file and renames
    it over the path, so the descriptor fsynced here would be the replaced empty file's — the
    data was never fsynced — and it was 2-3x slower than one ``write`` per tensor on this
    machine; the library reads every file written here, tested.)"""
    stored = _stored(tensors)
    head, order = _layout(stored, _metadata(metadata))

    def fill(f, tmp):
        fd = f.fileno()
        _write_all(fd, head)
        for name in order:
            a = stored[name][0]
            if a.nbytes:
                _write_all(fd, a.reshape(-1).view(np.uint8))
    _write_atomic(path, fill, stage_prefix)


def copy_atomic(source, path):
    """Copies the file ``source`` to ``path`` atomically (temporary name, fsync, rename, directory
    fsync): how a file written on one disk is put durably on another."""
    def fill(f, tmp):
        with open_regular(source) as src:
            shutil.copyfileobj(src, f, 16 << 20)
    _write_atomic(path, fill)


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


def _checked_header(path, f):
    size = os.fstat(f.fileno()).st_size
    header, start = _header(path, f, size)
    meta = _validate(path, header, size - start)
    return header, meta


def _library_path(f, path):
    # The library opens by path: on Linux the descriptor's own path is the inode just
    # validated (a file swapped in meanwhile cannot be read instead); elsewhere, the path.
    own = f"/proc/self/fd/{f.fileno()}"
    return own if os.path.exists(own) else os.fspath(path)


def _library_error(path, e):
    return TensorFileError(f"{os.fspath(path)}: the safetensors library refused the file ({e})")


def read_metadata(path):
    """The ``__metadata__`` of a tensor file (validated like :func:`read_tensors`)."""
    with _open(path) as f:
        return _checked_header(path, f)[1]


def read_header(path):
    """``({name: {"dtype", "shape", "data_offsets"}}, metadata)`` of a tensor file, validated."""
    with _open(path) as f:
        return _checked_header(path, f)


def read_tensors(path, names=None):
    """``{name: array}`` from a tensor file (only ``names`` when given); validates first."""
    with _open(path) as f:
        header, _ = _checked_header(path, f)
        if names is not None:
            missing = set(names) - set(header)
            if missing:
                raise TensorFileError(f"{os.fspath(path)}: no tensors named {sorted(missing)}")
        wanted = [n for n in header if names is None or n in names]
        try:
            with safetensors.safe_open(_library_path(f, path), framework="numpy") as lib:
                return {n: lib.get_tensor(n) for n in wanted}
        except (safetensors.SafetensorError, OSError) as e:
            raise _library_error(path, e) from None


def read_slice(path, name, index):
    """Part of one tensor, ``index`` a tuple of slices (one per leading axis at least), reading
    only the bytes it covers (a rank restoring its shard of a checkpoint)."""
    with _open(path) as f:
        header, _ = _checked_header(path, f)
        if name not in header:
            raise TensorFileError(f"{os.fspath(path)}: no tensor named {name!r}")
        shape = header[name]["shape"]
        index = tuple(index)
        extent = [len(range(*sl.indices(n))) for sl, n in zip(index, shape)] + shape[len(index):]
        if 0 in extent:     # an empty shard (the library refuses an empty range at the end)
            return np.empty(extent, _DTYPES[header[name]["dtype"]])
        try:
            with safetensors.safe_open(_library_path(f, path), framework="numpy") as lib:
                return lib.get_slice(name)[index]
        except (safetensors.SafetensorError, OSError) as e:
            raise _library_error(path, e) from None


def map_tensor(path, name):
    """``(data, dtype, shape)`` of one tensor: ``data`` a read-only ``uint8`` memory map of its
    stored bytes (validated header first; nothing is read until used) — for a reader that
    checks a byte range before copying part of it out."""
    with _open(path) as f:
        header, _ = _checked_header(path, f)
        if name not in header:
            raise TensorFileError(f"{os.fspath(path)}: no tensor named {name!r}")
        entry = header[name]
        dtype = _DTYPES[entry["dtype"]].newbyteorder("<")
        begin, end = entry["data_offsets"]
        f.seek(0)
        start = 8 + struct.unpack("<Q", f.read(8))[0] + begin
        if end == begin:
            return np.empty(0, np.uint8), dtype, tuple(entry["shape"])
        return np.memmap(f, np.uint8, "r", offset=start, shape=(end - begin,)), dtype, tuple(entry["shape"])


def metadata_of_bytes(data, where):
    """The ``__metadata__`` of a tensor file held in memory (its header validated first)."""
    header, start = _header(where, io.BytesIO(data), len(data))
    meta = header.get("__metadata__", {})
    _validate(where, header, len(data) - start)
    return meta


def load_bytes(data, where):
    """``{name: array}`` of a tensor file held in memory (e.g. a zip member), validated first."""
    header, start = _header(where, io.BytesIO(data), len(data))
    _validate(where, header, len(data) - start)
    try:
        entries = safetensors.deserialize(bytes(data))
    except safetensors.SafetensorError as e:
        raise _library_error(where, e) from None
    return {name: np.frombuffer(e["data"], dtype=_DTYPES[e["dtype"]].newbyteorder("<"))
            .astype(_DTYPES[e["dtype"]], copy=True).reshape(e["shape"])
            for name, e in entries}
