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
"""
import zlib

import numpy as np

try:
    from isal.isal_zlib import crc32 as _fast_crc32
except ImportError:       # the optional extra is absent: zlib's (same values, slower)
    _fast_crc32 = None

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
