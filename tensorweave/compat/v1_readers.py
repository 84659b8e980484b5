"""TF1's record readers for queue input pipelines: ``TextLineReader``, ``WholeFileReader``,
``TFRecordReader``, ``FixedLengthRecordReader``, ``IdentityReader`` (on ``ReaderBase``).

``reader.read(filename_queue)`` is a graph op giving ``(key, value)`` strings: it takes the next
file name from the queue when the current file is used up (blocking; ``OutOfRangeError`` once the
queue is closed and empty, which ends the input loop) and returns the file's next record. Keys are
TF's: ``file:line`` (lines from 1, header lines counted), ``file:byte offset`` for TFRecords,
``file:record index`` for fixed-length records, the file name for whole files. A reader is used
by one op at a time (a lock), as TF's.

>>> import os, tempfile
>>> import tensorweave.compat.v1 as tf
>>> path = os.path.join(tempfile.mkdtemp(), "a.csv")
>>> with open(path, "w") as f:
...     _ = f.write("x,y\\n1,2\\n3,4\\n")
>>> g = tf.Graph()
>>> with g.as_default():
...     files = tf.train.string_input_producer([path], num_epochs=1, shuffle=False)
...     key, line = tf.TextLineReader(skip_header_lines=1).read(files)
>>> with tf.Session(graph=g) as sess:
...     sess.run(tf.local_variables_initializer())
...     threads = tf.train.start_queue_runners(sess)
...     [os.path.basename(k.decode()) for k in sess.run([key, line])]
['a.csv:2', '1,2']
"""
import gzip
import os
import struct
import threading
import zlib

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.ops import array_ops as _a
from tensorweave.ops.script_ops import numpy_function

__all__ = ["ReaderBase", "TextLineReader", "WholeFileReader", "TFRecordReader", "FixedLengthRecordReader",
           "IdentityReader"]


def _text(x):
    return x.decode() if isinstance(x, bytes) else str(x)


class ReaderBase:
    """A reader of records from the files named by a queue (see the module docstring)."""

    def __init__(self, name=None, supports_serialize=False):
        self._name = name or type(self).__name__
        self._supports_serialize = supports_serialize
        self._lock = threading.Lock()
        self._records = None        # iterator of (key, value) over the current file
        self._produced = 0
        self._completed = 0

    name = property(lambda self: self._name)
    supports_serialize = property(lambda self: self._supports_serialize)

    def _file_records(self, work):
        """(key, value) pairs of one unit of work (a file name); subclasses define it."""
        raise NotImplementedError

    def _next(self, queue):
        while True:
            if self._records is None:
                work = queue._buffer.take(1, False, queue._shuffle)[0][0]
                self._records = iter(self._file_records(work))
            try:
                key, value = next(self._records)
            except StopIteration:
                self._records = None
                self._completed += 1
                continue
            self._produced += 1
            return key, value

    def read(self, queue, name=None):
        """``(key, value)``: the next record, from the next file of ``queue`` when needed."""
        def read():
            with self._lock:
                key, value = self._next(queue)
            return np.array(key, dtype=object), np.array(value, dtype=object)
        key, value = numpy_function(read, [], [_dt.string, _dt.string], name=name or f"{self._name}_ReaderReadV2")
        return _a.reshape(key, []), _a.reshape(value, [])

    def read_up_to(self, queue, num_records, name=None):
        """Up to ``num_records`` records ``(keys, values)`` (fewer at the end of the input)."""
        n = int(num_records)

        def read():
            keys, values = [], []
            with self._lock:
                for _ in range(n):
                    try:
                        k, v = self._next(queue)
                    except errors.OutOfRangeError:
                        if keys:
                            break
                        raise
                    keys.append(k)
                    values.append(v)
            return np.array(keys, dtype=object), np.array(values, dtype=object)
        keys, values = numpy_function(read, [], [_dt.string, _dt.string], name=name or f"{self._name}_ReadUpToV2")
        return _a.reshape(keys, [-1]), _a.reshape(values, [-1])

    def num_records_produced(self, name=None):
        return _a.reshape(numpy_function(lambda: np.int64(self._produced), [], _dt.int64,
                                         name=name or f"{self._name}_NumRecordsProduced"), [])

    def num_work_units_completed(self, name=None):
        return _a.reshape(numpy_function(lambda: np.int64(self._completed), [], _dt.int64,
                                         name=name or f"{self._name}_NumWorkUnitsCompleted"), [])

    def reset(self, name=None):
        """Back to the initial state (no current file, counters at zero)."""
        def reset():
            with self._lock:
                self._records, self._produced, self._completed = None, 0, 0
            return np.int32(0)
        return numpy_function(reset, [], _dt.int32, name=name or f"{self._name}_ReaderReset").op

    def serialize_state(self, name=None):
        raise errors.UnimplementedError(f"{type(self).__name__} does not support serializing its state")

    def restore_state(self, state, name=None):
        raise errors.UnimplementedError(f"{type(self).__name__} does not support restoring its state")


def _open(path, compression):
    path = _text(path)
    if not os.path.isfile(path):
        raise errors.NotFoundError(f"{path}; No such file or directory")
    if compression == "GZIP":
        return gzip.open(path, "rb")
    if compression == "ZLIB":
        with open(path, "rb") as f:
            import io
            return io.BytesIO(zlib.decompress(f.read()))
    return open(path, "rb")


class TextLineReader(ReaderBase):
    """The lines of text files (without their newline), skipping ``skip_header_lines`` per file."""

    def __init__(self, skip_header_lines=None, name=None):
        super().__init__(name or "TextLineReader")
        self._skip = int(skip_header_lines or 0)

    def _file_records(self, work):
        with _open(work, "") as f:
            for number, line in enumerate(f, 1):
                if number <= self._skip:
                    continue
                yield f"{_text(work)}:{number}".encode(), line.rstrip(b"\n").rstrip(b"\r")


class WholeFileReader(ReaderBase):
    """Each file as one record: key the file name, value its contents."""

    def __init__(self, name=None):
        super().__init__(name or "WholeFileReader")

    def _file_records(self, work):
        with _open(work, "") as f:
            yield (work if isinstance(work, bytes) else str(work).encode()), f.read()


class IdentityReader(ReaderBase):
    """Each unit of work as one record: key and value are the queued string itself."""

    def __init__(self, name=None):
        super().__init__(name or "IdentityReader", supports_serialize=False)

    def _file_records(self, work):
        w = work if isinstance(work, bytes) else str(work).encode()
        yield w, w


def _compression_of(options):
    if options is None:
        return ""
    ct = getattr(options, "compression_type", options)
    return {0: "", 1: "ZLIB", 2: "GZIP", None: ""}.get(ct, ct) or ""


class TFRecordReader(ReaderBase):
    """The records of TFRecord files (``options``: a ``TFRecordOptions`` or compression name);
    keys ``file:offset`` of each record in the uncompressed stream."""

    def __init__(self, name=None, options=None):
        super().__init__(name or "TFRecordReader")
        self._compression = _compression_of(options)

    def _file_records(self, work):
        with _open(work, self._compression) as f:
            offset = 0
            while True:
                head = f.read(12)
                if not head:
                    return
                if len(head) < 12:
                    raise errors.DataLossError(f"truncated record at {offset} in {_text(work)}")
                (length,) = struct.unpack("<Q", head[:8])
                data = f.read(length)
                crc = f.read(4)
                if len(data) < length or len(crc) < 4:
                    raise errors.DataLossError(f"truncated record at {offset} in {_text(work)}")
                yield f"{_text(work)}:{offset}".encode(), data
                offset += 16 + length


class FixedLengthRecordReader(ReaderBase):
    """Records of ``record_bytes`` bytes after ``header_bytes`` and before ``footer_bytes`` of each
    file (``hop_bytes``: records start every ``hop_bytes``); keys ``file:record index``."""

    def __init__(self, record_bytes, header_bytes=None, footer_bytes=None, hop_bytes=None, name=None, encoding=None):
        super().__init__(name or "FixedLengthRecordReader")
        self._record, self._header = int(record_bytes), int(header_bytes or 0)
        self._footer, self._hop = int(footer_bytes or 0), int(hop_bytes or 0)
        self._encoding = encoding or ""

    def _file_records(self, work):
        with _open(work, self._encoding) as f:
            data = f.read()
        body = data[self._header:len(data) - self._footer]
        step = self._hop or self._record
        index = 0
        for start in range(0, len(body) - self._record + 1, step):
            yield f"{_text(work)}:{index}".encode(), body[start:start + self._record]
            index += 1
