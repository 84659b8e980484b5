"""TFRecord files: ``TFRecordWriter``, ``TFRecordOptions``, ``tf_record_iterator`` and
``tw.data.TFRecordDataset``.

A TFRecord file is a sequence of records, each framed as TensorFlow's documented format::

    uint64 length            (little-endian)
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

with ``masked_crc(c) = ((c >> 15) | (c << 17)) + 0xa282ead8`` (mod 2^32) over CRC-32C
(Castagnoli). Files may be GZIP- or ZLIB-compressed as a whole stream. Reading checks both CRCs
and the framing, and raises ``DataLossError`` naming the file and the record number.

>>> import os, tempfile
>>> import tensorweave as tw
>>> path = os.path.join(tempfile.mkdtemp(), "r.tfrecord")
>>> with tw.io.TFRecordWriter(path) as w:
...     w.write(b"first")
...     w.write(b"second")
>>> [r.numpy() for r in tw.data.TFRecordDataset(path)]
[b'first', b'second']
"""
import gzip
import os
import struct
import zlib

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.tensor import Tensor
from tensorweave.core.tensor_spec import TensorSpec
from tensorweave.kernels.cpu.jit import njit

_POLY = 0x82F63B78
_TABLE = np.zeros(256, np.uint32)
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE[_i] = _c


@njit
def _crc_loop(data, table):
    crc = np.uint32(0xFFFFFFFF)
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ np.uint32(0xFFFFFFFF)


def crc32c(data):
    """CRC-32C (Castagnoli) of ``data``; short inputs skip the compiled loop."""
    if len(data) < 64:
        crc = 0xFFFFFFFF
        for b in data:
            crc = int(_TABLE[(crc ^ b) & 0xFF]) ^ (crc >> 8)
        return crc ^ 0xFFFFFFFF
    return int(_crc_loop(np.frombuffer(data, np.uint8), _TABLE))


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _compression(options):
    if isinstance(options, TFRecordOptions):
        return options.compression_type
    if options in (None, ""):
        return ""
    c = str(options).upper()
    if c not in ("GZIP", "ZLIB", "NONE"):
        raise ValueError(f"TFRecord compression_type must be '', 'GZIP' or 'ZLIB', got {options!r}")
    return "" if c == "NONE" else c


class TFRecordOptions:
    """Options of a TFRecord file: ``compression_type`` ``""``, ``"GZIP"`` or ``"ZLIB"``."""

    def __init__(self, compression_type=None, flush_mode=None, input_buffer_size=None, output_buffer_size=None,
                 window_bits=None, compression_level=None, compression_method=None, mem_level=None,
                 compression_strategy=None):
        self.compression_type = _compression(compression_type)
        self.compression_level = -1 if compression_level is None else int(compression_level)

    @classmethod
    def get_compression_type_string(cls, options):
        return _compression(options)


def _path(p):
    if isinstance(p, Tensor):
        p = p.numpy()
    if isinstance(p, np.ndarray):
        p = p[()]
    return os.fsdecode(p) if isinstance(p, bytes) else os.fspath(p)


class TFRecordWriter:
    """Writes records (bytes) to a TFRecord file; a context manager."""

    def __init__(self, path, options=None):
        self._path = _path(path)
        comp = _compression(options)
        level = options.compression_level if isinstance(options, TFRecordOptions) else -1
        raw = open(self._path, "wb")
        if comp == "GZIP":
            self._fh = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9 if level < 0 else level, mtime=0)
            self._raw = raw
        elif comp == "ZLIB":
            self._fh, self._raw, self._z = raw, raw, zlib.compressobj(level)
        else:
            self._fh, self._raw = raw, raw
        self._zlib = comp == "ZLIB"

    def write(self, record):
        if isinstance(record, Tensor):
            record = record.numpy()
        if isinstance(record, np.ndarray):
            record = record[()]
        if isinstance(record, str):
            record = record.encode("utf-8")
        if not isinstance(record, (bytes, bytearray)):
            raise TypeError(f"TFRecordWriter.write: expected bytes, got {type(record).__name__}")
        head = struct.pack("<Q", len(record))
        frame = head + struct.pack("<I", masked_crc(head)) + bytes(record) + struct.pack("<I", masked_crc(record))
        self._fh.write(self._z.compress(frame) if self._zlib else frame)

    def flush(self):
        if self._zlib:
            self._fh.write(self._z.flush(zlib.Z_SYNC_FLUSH))
        self._fh.flush()

    def close(self):
        if self._fh is None:
            return
        if self._zlib:
            self._fh.write(self._z.flush())
        self._fh.close()
        if self._raw is not self._fh:
            self._raw.close()
        self._fh = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _open_stream(path, comp):
    if comp == "GZIP":
        return gzip.open(path, "rb")
    if comp == "ZLIB":
        import io
        with open(path, "rb") as f:
            return io.BytesIO(zlib.decompress(f.read()))
    return open(path, "rb")


def read_records(path, compression_type=None):
    """Yields the records of one TFRecord file, checking the framing and CRCs."""
    comp = _compression(compression_type)
    with _open_stream(path, comp) as f:
        n = 0
        while True:
            head = f.read(12)
            if not head:
                return
            if len(head) < 12:
                raise errors.DataLossError(f"TFRecord file {path}: truncated record header at record {n}")
            length, crc = struct.unpack("<QI", head)
            if masked_crc(head[:8]) != crc:
                raise errors.DataLossError(f"TFRecord file {path}: corrupted record at {n} (length CRC mismatch). "
                                           "Hint: is the file compressed? pass compression_type='GZIP' or 'ZLIB'")
            data = f.read(length)
            tail = f.read(4)
            if len(data) < length or len(tail) < 4:
                raise errors.DataLossError(f"TFRecord file {path}: truncated record {n}")
            if masked_crc(data) != struct.unpack("<I", tail)[0]:
                raise errors.DataLossError(f"TFRecord file {path}: corrupted record at {n} (data CRC mismatch)")
            yield data
            n += 1


def tf_record_iterator(path, options=None):
    """The records of a TFRecord file as bytes (``tf.compat.v1.io.tf_record_iterator``)."""
    return read_records(_path(path), options)


# ---- the dataset -------------------------------------------------------------------------
def _dataset_classes():
    from tensorweave.data import structure
    from tensorweave.data.dataset import Dataset
    from tensorweave.data.iterators import _Iter

    class TFRecordDataset(Dataset):
        """The records of one or more TFRecord files as scalar string tensors (bytes), file after file."""

        def __init__(self, filenames, compression_type=None, buffer_size=None, num_parallel_reads=None, name=None):
            super().__init__()
            names = structure.as_array(filenames)
            self._files = [_path(f) for f in names.reshape(-1)]
            self._comp = _compression(compression_type)
            self._spec = TensorSpec([], _dt.string)

        def _make_iter(self):
            return _RecordIter(self._files, self._comp)

    class _RecordIter(_Iter):
        _state_fields = ("_file", "_record")

        def __init__(self, files, comp):
            self._files, self._comp = files, comp
            self._file, self._record, self._gen = 0, 0, None

        def next(self):
            while self._file < len(self._files):
                if self._gen is None:
                    self._gen = read_records(self._files[self._file], self._comp)
                    for _ in range(self._record):     # restored from a checkpoint: skip what was read
                        next(self._gen)
                try:
                    data = next(self._gen)
                except StopIteration:
                    self._gen, self._file, self._record = None, self._file + 1, 0
                    continue
                self._record += 1
                arr = np.empty((), dtype=object)
                arr[()] = data
                return (arr,)
            raise StopIteration

        def close(self):
            if self._gen is not None:
                self._gen.close()
                self._gen = None

    class FixedLengthRecordDataset(Dataset):
        """Records of ``record_bytes`` bytes from binary files (after ``header_bytes``, before
        ``footer_bytes``), as scalar string tensors."""

        def __init__(self, filenames, record_bytes, header_bytes=None, footer_bytes=None, buffer_size=None,
                     compression_type=None, num_parallel_reads=None, name=None):
            super().__init__()
            self._files = [_path(f) for f in structure.as_array(filenames).reshape(-1)]
            self._sizes = (int(record_bytes), int(header_bytes or 0), int(footer_bytes or 0))
            if self._sizes[0] <= 0:
                raise ValueError(f"FixedLengthRecordDataset: record_bytes must be positive, got {record_bytes}")
            self._comp = _compression(compression_type)
            self._spec = TensorSpec([], _dt.string)

        def _make_iter(self):
            return _FixedIter(self._files, self._sizes, self._comp)

    class _FixedIter(_Iter):
        _state_fields = ("_file", "_record")

        def __init__(self, files, sizes, comp):
            self._files, self._sizes, self._comp = files, sizes, comp
            self._file, self._record, self._data = 0, 0, None

        def next(self):
            size, head, foot = self._sizes
            while self._file < len(self._files):
                if self._data is None:
                    with _open_stream(self._files[self._file], self._comp) as f:
                        raw = f.read()
                    body = raw[head:len(raw) - foot]
                    if len(body) % size:
                        raise errors.DataLossError(
                            f"FixedLengthRecordDataset: {self._files[self._file]} has {len(body)} bytes between header "
                            f"and footer, not a multiple of record_bytes={size}")
                    self._data = body
                start = self._record * size
                if start < len(self._data):
                    self._record += 1
                    arr = np.empty((), dtype=object)
                    arr[()] = self._data[start:start + size]
                    return (arr,)
                self._file, self._record, self._data = self._file + 1, 0, None
            raise StopIteration

    return TFRecordDataset, FixedLengthRecordDataset


def __getattr__(name):
    if name in ("TFRecordDataset", "FixedLengthRecordDataset"):
        tfr, fixed = _dataset_classes()
        globals().update(TFRecordDataset=tfr, FixedLengthRecordDataset=fixed)
        return globals()[name]
    raise AttributeError(name)
