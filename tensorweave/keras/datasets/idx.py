"""IDX files (the format MNIST ships in): a reader that validates the header against the file,
and a writer.

The format: two zero bytes, a dtype code, the number of dimensions ``ndim``, then ``ndim``
big-endian uint32 sizes and the values, big-endian, row-major. Files may be gzip-compressed
(recognised by their content, not their name).

>>> import os, tempfile
>>> import numpy as np
>>> from tensorweave.keras.datasets import idx
>>> path = os.path.join(tempfile.mkdtemp(), "x.idx3-ubyte.gz")
>>> idx.write_idx(path, np.arange(24, dtype=np.uint8).reshape(2, 3, 4))
>>> a = idx.read_idx(path)
>>> a.shape, a.dtype, int(a[1, 2, 3])
((2, 3, 4), dtype('uint8'), 23)
>>> idx.magic_number(path)
2051
"""
import gzip
import os
import zlib

import numpy as np

# dtype code -> big-endian NumPy dtype (the codes of the IDX format description)
DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CODES = {v.newbyteorder("="): k for k, v in DTYPES.items()}
_GZIP_MAGIC = b"\x1f\x8b"


def _read_bytes(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] != _GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as e:
        raise ValueError(f"{path}: not a valid gzip file ({e}). Hint: the download may be incomplete; "
                         "fetch the file again.") from None


def _header(path, data):
    if len(data) < 4:
        raise ValueError(f"{path}: too short for an IDX file ({len(data)} bytes; the header alone needs 4)")
    if data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: not an IDX file: the magic number must start with two zero bytes, "
                         f"got {data[:4].hex()}")
    code, ndim = data[2], data[3]
    if code not in DTYPES:
        known = ", ".join(f"0x{c:02X} ({d.name})" for c, d in DTYPES.items())
        raise ValueError(f"{path}: unknown IDX dtype code 0x{code:02X}; known codes: {known}")
    if ndim == 0:
        raise ValueError(f"{path}: IDX header declares 0 dimensions")
    end = 4 + 4 * ndim
    if len(data) < end:
        raise ValueError(f"{path}: truncated IDX header: {ndim} dimensions need {end} bytes, the file has "
                         f"{len(data)}")
    dims = tuple(int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4))
    return code, dims, end


def magic_number(path):
    """The file's magic number as an int (2051 for MNIST images, 2049 for labels)."""
    data = _read_bytes(path)
    _header(path, data)
    return int.from_bytes(data[:4], "big")


def read_idx(path):
    """Reads an IDX file (raw or gzip) into a NumPy array in native byte order.

    Raises ``ValueError`` naming the file when the magic number or dtype code is invalid or
    when the sizes declared in the header do not match the data in the file.
    """
    path = os.fspath(path)
    data = _read_bytes(path)
    code, dims, start = _header(path, data)
    dtype = DTYPES[code]
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    found = len(data) - start
    if found != expected:
        what = "truncated" if found < expected else "has extra bytes"
        raise ValueError(f"{path}: IDX file {what}: the header declares shape {dims} of {dtype.name} "
                         f"({expected} bytes of data) but the file holds {found} bytes of data")
    arr = np.frombuffer(data, dtype, offset=start).reshape(dims)
    # astype makes a writable native-order copy (frombuffer over bytes is read-only).
    return arr.astype(dtype.newbyteorder("="))


def write_idx(path, array):
    """Writes ``array`` as an IDX file; gzip-compressed when ``path`` ends in ``.gz``."""
    array = np.asarray(array)
    native = array.dtype.newbyteorder("=")
    if native not in _CODES:
        raise ValueError(f"write_idx: IDX cannot hold dtype {array.dtype}; use one of "
                         + ", ".join(d.name for d in _CODES))
    if array.ndim == 0 or array.ndim > 255:
        raise ValueError(f"write_idx: IDX needs 1 to 255 dimensions, got {array.ndim}")
    code = _CODES[native]
    payload = (bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
               + np.ascontiguousarray(array, DTYPES[code]).tobytes())
    path = os.fspath(path)
    if path.endswith(".gz"):
        payload = gzip.compress(payload, mtime=0)
    with open(path, "wb") as f:
        f.write(payload)
