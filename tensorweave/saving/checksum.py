"""CRC-32 (zlib's polynomial) of tensor bytes, as fast as the machine allows.

Checkpoints record the CRC-32 of every tensor or shard and check it on every whole read, so
the checksum runs over every byte saved and restored. ``zlib.crc32`` does about 1 GB/s on a
server core — a quarter of a sharded restore's time. ISA-L's ``crc32`` (the optional
``isal`` package: ``pip install 'tensorweave[fastcrc]'``) computes the same value with
carry-less multiplication at 10 GB/s or more; without it, zlib's is used. Either way the
values are identical, so checkpoints written with one verify with the other.

>>> import numpy as np, zlib
>>> data = np.arange(1000, dtype=np.float32)
>>> crc32(data) == zlib.crc32(data.tobytes()) & 0xFFFFFFFF
True
>>> whole, chunks = chunked_crc32(data, 1024)
>>> whole == crc32(data), len(chunks), chunks[1] == zlib.crc32(data.tobytes()[1024:2048])
(True, 4, True)

**Chunked CRCs** let a reader that needs only a byte range of a stored array check just
the chunks that range touches (a rank reading its rows of another rank's shard):
:func:`chunked_crc32` gives the CRC of every ``chunk_bytes`` block and, in the same pass,
the whole array's (ISA-L combines the chunk values; without it, a second pass).
"""
import zlib

import numpy as np

try:
    from isal.isal_zlib import crc32 as _fast_crc32
except ImportError:       # the optional extra is absent: zlib's (same values, slower)
    _fast_crc32 = None
try:
    from isal.isal_zlib import crc32_combine as _combine
except ImportError:       # (older isal, or none): the whole CRC is a second pass
    _combine = None

BACKEND = "isal" if _fast_crc32 is not None else "zlib"


def _crc(buffer, value=0):
    return (_fast_crc32 or zlib.crc32)(buffer, value) & 0xFFFFFFFF


def little_endian_bytes(a):
    """The little-endian C-order bytes of array ``a`` (as a tensor file stores them), as a
    flat ``uint8`` view (a copy only when ``a`` is big-endian or not contiguous)."""
    a = np.asarray(a)
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and not np.little_endian):
        a = a.astype(a.dtype.newbyteorder("<"))
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def crc32(a, value=0):
    """CRC-32 of array ``a``'s stored bytes (continuing from ``value``)."""
    return _crc(little_endian_bytes(a), value)


def chunked_crc32(a, chunk_bytes):
    """``(crc32 of the whole, [crc32 of each chunk_bytes block])`` of array ``a``'s stored
    bytes (the last block may be shorter)."""
    data = little_endian_bytes(a)
    n = data.size
    chunks = [_crc(data[i:i + chunk_bytes]) for i in range(0, n, chunk_bytes)] or [_crc(data)]
    if _combine is not None and _fast_crc32 is not None:
        whole = chunks[0]
        for i, c in enumerate(chunks[1:], 1):
            whole = _combine(whole, c, min(chunk_bytes, n - i * chunk_bytes)) & 0xFFFFFFFF
    else:
        whole = _crc(data)
    return whole, chunks


def bytes_crc32(buffer):
    """CRC-32 of a bytes-like object (a ``uint8`` view of a memory-mapped file)."""
    return _crc(buffer)
