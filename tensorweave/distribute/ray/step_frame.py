"""The binary frames of a step channel (``step_channel.py``): a step's request and its answer as
fixed headers, plain values and raw array bytes — parsed with ``struct`` and ``np.frombuffer``,
never unpickled.

A frame is a 40-byte header (``<4sBBHQQIIQ``: magic ``TWSF``, version, kind, flags, step id,
generation or rank, function id, value count, body length) and a body of ``count`` tagged values
from a fixed set: None, bool, int (64-bit), float, str, bytes, a NumPy array or scalar of a dtype
on :data:`DTYPES` (dtype name, shape, raw bytes aligned to 16), tuples and lists of these (nested
at most :data:`MAX_DEPTH` deep), and a *function by id* (``@``): the step functions were
registered on the worker beforehand through a Ray actor call (Ray's transport), so a frame only
names them. Every length is checked against the bytes there are; anything else — a bad magic,
a truncated or oversized frame, an unknown tag, dtype or function id, trailing bytes — raises
:class:`FrameError`, so a crafted frame can at most be rejected (no code runs from one).

An error answer carries ``(exception type name, message, rank, op, source line, notes, missing)``
(``missing``: a collective timeout's ranks that did not arrive, else None); the driver rebuilds it
with :func:`exception_of` as one of a fixed set of types (tensorweave's errors, the collectives'
abort and timeout, common builtins), else as a :class:`RemoteError` naming the original type
(``tw.distribute.RemoteError``).

>>> import numpy as np
>>> frame = encode(KIND_REQUEST, 7, 0, 3, (np.arange(3, dtype=np.float32), (1, None), "x"))
>>> head = parse_header(frame[:HEADER.size])
>>> head.step, head.fn, head.count, len(frame) == HEADER.size + head.body_len
(7, 3, 3, True)
>>> decode(head, frame[HEADER.size:])
[array([0., 1., 2.], dtype=float32), (1, None), 'x']
"""
import builtins
import collections
import struct
import traceback
import types

import ml_dtypes
import numpy as np

from tensorweave.core import errors

MAGIC, VERSION = b"TWSF", 1
HEADER = struct.Struct("<4sBBHQQIIQ")
KIND_REQUEST, KIND_ANSWER, KIND_ERROR, KIND_STOP = 1, 2, 3, 4
MAX_FRAME_BYTES = 1 << 36          # 64 GB: a body length above is a broken or hostile frame
MAX_DEPTH = 16
_ALIGN = 16
_DTYPE_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                "float32", "float64", "complex64", "complex128", "bfloat16")
DTYPES = types.MappingProxyType({n: np.dtype(ml_dtypes.bfloat16 if n == "bfloat16" else n) for n in _DTYPE_NAMES})
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

Header = collections.namedtuple("Header", "kind step gen fn count body_len")


class FrameError(errors.DataLossError):
    """A step-channel frame that is not one this module writes (rejected, never interpreted)."""


class Unencodable(TypeError):
    """A value outside the frames' fixed set (the driver sends that step by an actor call)."""


class RemoteError(errors.UnknownError):
    """A rank's exception whose type is not in the fixed set the driver rebuilds; ``remote_type``
    is the original type's name."""

    remote_type = None


# ---- writing ----------------------------------------------------------------------------------------
def encode(kind, step, gen, fn, values, fn_id=None):
    """The frame (bytes) of ``values`` (a tuple); ``fn_id(f)`` gives a function's registered id
    (None: functions are :class:`Unencodable`)."""
    parts = []
    size = [0]

    def put(b):
        parts.append(b)
        size[0] += len(b)

    for v in values:
        _put(v, put, size, fn_id, 0)
    return HEADER.pack(MAGIC, VERSION, kind, 0, step, gen, fn, len(values), size[0]) + b"".join(parts)


def _put(v, put, size, fn_id, depth):
    if depth > MAX_DEPTH:
        raise Unencodable(f"values nested deeper than {MAX_DEPTH}")
    if v is None:
        put(b"N")
    elif v is True or v is False:
        put(b"T" if v else b"F")
    elif type(v) is int:
        if not -(1 << 63) <= v < 1 << 63:
            raise Unencodable(f"an int beyond 64 bits ({v})")
        put(b"i" + _I64.pack(v))
    elif type(v) is float:
        put(b"f" + _F64.pack(v))
    elif type(v) is str:
        b = v.encode("utf-8")
        put(b"s" + _U32.pack(len(b)) + b)
    elif type(v) is bytes:
        put(b"b" + _U32.pack(len(v)) + v)
    elif isinstance(v, (np.ndarray, np.generic)) and type(v) is not np.matrix:
        _put_array(np.asarray(v), b"g" if isinstance(v, np.generic) else b"a", put, size)
    elif type(v) in (tuple, list):
        put((b"(" if type(v) is tuple else b"[") + _U32.pack(len(v)))
        for x in v:
            _put(x, put, size, fn_id, depth + 1)
    elif isinstance(v, types.FunctionType) and fn_id is not None:
        put(b"@" + _U32.pack(fn_id(v)))
    else:
        raise Unencodable(f"a {type(v).__name__} cannot cross a step channel (arrays, scalars, str, bytes, "
                          "None, tuples and lists of these, registered functions)")


def _put_array(a, tag, put, size):
    name = a.dtype.name
    if DTYPES.get(name) != a.dtype.newbyteorder("="):
        raise Unencodable(f"an array of dtype {a.dtype} (not on the step frames' list: {', '.join(_DTYPE_NAMES)})")
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    data = np.ascontiguousarray(a).reshape(-1).view(np.uint8)     # a strided array's elements, in order
    nb = name.encode()
    put(tag + bytes([len(nb)]) + nb + bytes([a.ndim]) + b"".join(_I64.pack(d) for d in a.shape)
        + _U64.pack(data.nbytes))
    put(bytes(-size[0] % _ALIGN))                                 # the data starts 16-aligned in the body
    put(data.data)


# ---- reading ----------------------------------------------------------------------------------------
def parse_header(head):
    """The :class:`Header` of a frame's first :data:`HEADER` ``.size`` bytes, checked."""
    if len(head) != HEADER.size:
        raise FrameError(f"step frame: a header of {len(head)} bytes, not {HEADER.size} (truncated)")
    magic, version, kind, flags, step, gen, fn, count, body_len = HEADER.unpack(head)
    if magic != MAGIC:
        raise FrameError(f"step frame: bad magic {magic!r} (not {MAGIC!r}): not a tensorweave step frame")
    if version != VERSION or flags:
        raise FrameError(f"step frame: version {version} flags {flags}, this reader knows version {VERSION}")
    if kind not in (KIND_REQUEST, KIND_ANSWER, KIND_ERROR, KIND_STOP):
        raise FrameError(f"step frame: unknown kind {kind}")
    if body_len > MAX_FRAME_BYTES:
        raise FrameError(f"step frame: a body of {body_len} bytes, above the limit of {MAX_FRAME_BYTES} (oversized)")
    if count > body_len:
        raise FrameError(f"step frame: {count} values in {body_len} bytes")
    return Header(kind, step, gen, fn, count, body_len)


def decode(head, body, fns=None):
    """The ``head.count`` values of a frame's ``body`` (a bytearray: its arrays are writable views
    of it); ``fns``: registered id -> function (None: a function reference is an error)."""
    if len(body) != head.body_len:
        raise FrameError(f"step frame: a body of {len(body)} bytes, its header says {head.body_len} (truncated)")
    reader = _Reader(memoryview(body), fns or {})
    out = [reader.value(0) for _ in range(head.count)]
    if reader.pos != len(body):
        raise FrameError(f"step frame: {len(body) - reader.pos} bytes after its {head.count} values")
    return out


class _Reader:
    __slots__ = ("buf", "pos", "fns")

    def __init__(self, buf, fns):
        self.buf, self.pos, self.fns = buf, 0, fns

    def take(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise FrameError(f"step frame: {n} bytes wanted at offset {self.pos} of {len(self.buf)} (truncated)")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, s):
        return s.unpack(self.take(s.size))[0]

    def value(self, depth):
        if depth > MAX_DEPTH:
            raise FrameError(f"step frame: values nested deeper than {MAX_DEPTH}")
        tag = bytes(self.take(1))
        if tag == b"N":
            return None
        if tag in (b"T", b"F"):
            return tag == b"T"
        if tag == b"i":
            return self.unpack(_I64)
        if tag == b"f":
            return self.unpack(_F64)
        if tag == b"s":
            try:
                return str(self.take(self.unpack(_U32)), "utf-8")
            except UnicodeDecodeError as e:
                raise FrameError(f"step frame: a str that is not UTF-8 ({e})") from None
        if tag == b"b":
            return bytes(self.take(self.unpack(_U32)))
        if tag in (b"a", b"g"):
            a = self.array()
            return a[()] if tag == b"g" else a
        if tag in (b"(", b"["):
            n = self.unpack(_U32)
            if n > len(self.buf) - self.pos:
                raise FrameError(f"step frame: a sequence of {n} values in {len(self.buf) - self.pos} bytes")
            items = [self.value(depth + 1) for _ in range(n)]
            return tuple(items) if tag == b"(" else items
        if tag == b"@":
            i = self.unpack(_U32)
            if i not in self.fns:
                raise FrameError(f"step frame: function id {i} was not registered on this worker")
            return self.fns[i]
        raise FrameError(f"step frame: unknown value tag {tag!r} at offset {self.pos - 1}")

    def array(self):
        name = bytes(self.take(self.take(1)[0]))
        dtype = DTYPES.get(name.decode("ascii", "replace"))
        if dtype is None:
            raise FrameError(f"step frame: dtype {name!r} is not on the list ({', '.join(_DTYPE_NAMES)})")
        ndim = self.take(1)[0]
        if ndim > 32:
            raise FrameError(f"step frame: an array of {ndim} dimensions (at most 32)")
        shape = tuple(self.unpack(_I64) for _ in range(ndim))
        nbytes = self.unpack(_U64)
        if any(d < 0 for d in shape) or nbytes != int(np.prod(shape, dtype=object)) * dtype.itemsize:
            raise FrameError(f"step frame: {nbytes} bytes for a {dtype} array of shape {shape}")
        self.take(-self.pos % _ALIGN)
        data = self.take(nbytes)
        return np.frombuffer(data, dtype).reshape(shape)


# ---- errors -----------------------------------------------------------------------------------------
def error_values(e, rank):
    """``(type name, message, rank, op, source line, notes, missing)`` of a rank's exception ``e``
    (``missing``: its ``.missing`` ranks as a tuple of ints, a :class:`CollectiveTimeoutError`'s, else None)."""
    message = e.message if isinstance(e, errors.OpError) else \
        e.args[0] if len(e.args) == 1 and isinstance(e.args[0], str) else str(e)
    op = getattr(e, "op", None)
    op = op if isinstance(op, str) else getattr(op, "name", None)
    frames = traceback.extract_tb(e.__traceback__) if e.__traceback__ is not None else []
    line = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None
    notes = tuple(n for n in getattr(e, "__notes__", ()) if isinstance(n, str))
    missing = getattr(e, "missing", None)
    missing = tuple(int(r) for r in missing) if isinstance(missing, (tuple, list)) and all(
        isinstance(r, (int, np.integer)) for r in missing) else None
    return type(e).__name__, str(message), rank, op if isinstance(op, str) else None, line, notes, missing


_BUILTIN_NAMES = ("ValueError", "TypeError", "KeyError", "IndexError", "LookupError", "RuntimeError",
                  "ArithmeticError", "ZeroDivisionError", "OverflowError", "FloatingPointError", "AssertionError",
                  "NotImplementedError", "MemoryError", "TimeoutError", "OSError", "FileNotFoundError",
                  "AttributeError", "RecursionError", "UnicodeError", "BufferError", "EOFError")


def _known_types():
    from tensorweave.distribute.collective import CollectiveAbortedError, CollectiveTimeoutError
    known = {n: getattr(builtins, n) for n in _BUILTIN_NAMES}
    known.update({n: c for n, c in vars(errors).items() if isinstance(c, type) and issubclass(c, errors.OpError)})
    for c in (CollectiveAbortedError, CollectiveTimeoutError, FrameError, RemoteError):
        known[c.__name__] = c
    return types.MappingProxyType(known)


def exception_of(values):
    """The exception :func:`error_values` described: its own type when on the fixed list (else a
    :class:`RemoteError` naming it), with its message, notes, ``.rank``, ``.remote_op`` and
    ``.remote_line`` (and ``.missing`` where the rank's exception had one: a collective timeout's
    ranks that did not arrive)."""
    if len(values) != 7:
        raise FrameError(f"step frame: an error answer of {len(values)} values, not 7")
    name, message, rank, op, line, notes, missing = values
    if not (isinstance(name, str) and isinstance(message, str) and isinstance(notes, tuple)):
        raise FrameError("step frame: an error answer whose type name, message or notes are malformed")
    if missing is not None and not (isinstance(missing, tuple) and all(type(r) is int for r in missing)):
        raise FrameError("step frame: an error answer whose missing ranks are not a tuple of ints")
    cls = _KNOWN.get(name)
    if cls is None:
        e = RemoteError(f"{name}: {message}")
        e.remote_type = name
    else:
        e = cls(message)
    e.rank, e.remote_op, e.remote_line = rank, op, line
    if missing is not None:
        e.missing = missing
    for n in notes:
        e.add_note(n)
    if line is not None:
        e.add_note(f"(rank {rank}{f', op {op}' if op else ''}: raised at {line})")
    return e


_KNOWN = _known_types()
