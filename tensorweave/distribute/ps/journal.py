"""A parameter server's write-ahead journal: every change since its last save, replayed by a
restarted server after loading that save, so it comes back with exactly the state it had.

A record is one call (``create``, ``assign``, ``push``) as plain data: an 8-byte little-endian
length, a JSON header (the call's scalar arguments and, per array, dtype and shape), then the
arrays' bytes. No pickles: a journal cannot run code. Records are appended and flushed to the
OS before the change is applied (a killed process loses nothing the OS has); a record cut
short by the kill is ignored when read (its call was not acknowledged: Ray sends it again).

>>> import numpy as np, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "ps-0.journal")
>>> j = Journal(path)
>>> j.append({"op": "assign", "key": "0", "shard": 0}, [np.arange(3, dtype=np.float32)])
>>> [(h["op"], [a.tolist() for a in arrays]) for h, arrays in read(path)]
[('assign', [[0.0, 1.0, 2.0]])]
>>> j.truncate(); list(read(path))
[]
"""
import json
import os
import struct

import numpy as np

_LENGTH = struct.Struct("<Q")
# the dtypes a journal may hold (what variables and gradients are): nothing else is read back
_DTYPES = {np.dtype(t).str for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                                     np.uint8, np.bool_)} | {"bfloat16"}


class Journal:
    """Appends records to ``path`` (created if missing)."""

    def __init__(self, path):
        self.path = path
        self._file = open(path, "ab")

    def append(self, header, arrays=()):
        arrays = [np.ascontiguousarray(a) for a in arrays]
        header = dict(header, arrays=[[_dtype_name(a.dtype), list(a.shape)] for a in arrays])
        head = json.dumps(header).encode()
        self._file.write(_LENGTH.pack(len(head)) + head + b"".join(a.tobytes() for a in arrays))
        self._file.flush()

    def truncate(self):
        """Everything so far is in a save: the journal starts again empty."""
        self._file.truncate(0)
        self._file.seek(0)

    def close(self):
        self._file.close()


def _dtype_name(dtype):
    return "bfloat16" if dtype.name == "bfloat16" else dtype.str


def _np_dtype(name):
    if name not in _DTYPES:
        raise ValueError(f"parameter-server journal: dtype {name!r} is not one a journal holds")
    if name == "bfloat16":
        from tensorweave.core import dtypes
        return dtypes.bfloat16.np_dtype
    return np.dtype(name)


def read(path):
    """``(header, [arrays])`` of each whole record of the journal at ``path`` (none if absent)."""
    if not os.path.exists(path):
        return
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos + _LENGTH.size <= len(data):
        (n,) = _LENGTH.unpack_from(data, pos)
        if pos + _LENGTH.size + n > len(data):
            return                                  # cut short by the kill
        header = json.loads(data[pos + _LENGTH.size:pos + _LENGTH.size + n])
        pos += _LENGTH.size + n
        arrays = []
        for name, shape in header.pop("arrays"):
            dtype = _np_dtype(name)
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if pos + size > len(data):
                return
            arrays.append(np.frombuffer(data, dtype, count=size // dtype.itemsize, offset=pos).reshape(shape).copy())
            pos += size
        yield header, arrays
