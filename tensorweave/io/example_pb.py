"""``tf.train.Example`` and friends, encoded by hand in the protocol-buffer wire format.

The messages are those of TensorFlow's public ``example.proto``/``feature.proto``::

    Example         { Features features = 1; }
    SequenceExample { Features context = 1; FeatureLists feature_lists = 2; }
    Features        { map<string, Feature> feature = 1; }
    FeatureLists    { map<string, FeatureList> feature_list = 1; }
    FeatureList     { repeated Feature feature = 1; }
    Feature         { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                                   Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }   FloatList { repeated float value = 1 [packed]; }
    Int64List { repeated int64 value = 1 [packed]; }

Encoding follows the protobuf encoding spec (varint tags ``field << 3 | wire type``, length-
delimited submessages, packed repeated scalars, negative int64 as ten-byte varints, map entries
as ``{key = 1, value = 2}`` messages); decoding also accepts unpacked scalars, unknown fields
(skipped) and fields in any order, as protobuf parsers do. Serialised bytes equal TensorFlow's
for the same message. Decoding checks every length against the buffer and nesting depth, and
raises :class:`DecodeError` on malformed input; nothing in the data is executed.

>>> ex = Example(features=Features(feature={"x": Feature(int64_list=Int64List(value=[1, -2]))}))
>>> data = ex.SerializeToString()
>>> data.hex()
'0a160a140a0178120f1a0d0a0b01feffffffffffffffff01'
>>> Example.FromString(data).features.feature["x"].int64_list.value
[1, -2]
"""
import struct

__all__ = ["BytesList", "FloatList", "Int64List", "Feature", "Features", "FeatureList", "FeatureLists", "Example",
           "SequenceExample", "DecodeError"]

_MAX_DEPTH = 64


class DecodeError(ValueError):
    """Malformed protocol-buffer bytes."""


# ---- wire primitives ---------------------------------------------------------------------
def _varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(buf, pos, end):
    result = shift = 0
    while True:
        if pos >= end:
            raise DecodeError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise DecodeError("varint longer than 10 bytes")


def _tag(field, wire):
    return _varint(field << 3 | wire)


def _ld(field, payload):
    return _tag(field, 2) + _varint(len(payload)) + payload


def _fields(buf, pos, end):
    """Yields (field number, wire type, value) with value an int (varint/fixed) or a (start, end) span."""
    while pos < end:
        key, pos = _read_varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise DecodeError("field number 0")
        if wire == 0:
            v, pos = _read_varint(buf, pos, end)
        elif wire == 1:
            if pos + 8 > end:
                raise DecodeError("truncated 64-bit field")
            v, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = _read_varint(buf, pos, end)
            if pos + n > end:
                raise DecodeError(f"length {n} runs past the end of the message")
            v, pos = (pos, pos + n), pos + n
        elif wire == 5:
            if pos + 4 > end:
                raise DecodeError("truncated 32-bit field")
            v, pos = buf[pos:pos + 4], pos + 4
        else:
            raise DecodeError(f"unsupported wire type {wire}")
        yield field, wire, v


def _signed64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


# ---- lists -------------------------------------------------------------------------------
class _List:
    __slots__ = ("value",)

    def __init__(self, value=()):
        self.value = [self._coerce(v) for v in value]

    def __eq__(self, other):
        return type(self) is type(other) and self.value == other.value

    def __repr__(self):
        return f"{type(self).__name__}(value={self.value!r})"

    def SerializeToString(self, deterministic=None):  # noqa: N802 - protobuf's name
        return self._encode()

    @classmethod
    def FromString(cls, data):  # noqa: N802
        return cls._decode(memoryview(bytes(data)), 0, len(data), 0)


class BytesList(_List):
    __slots__ = ()

    @staticmethod
    def _coerce(v):
        if isinstance(v, str):
            return v.encode("utf-8")
        if not isinstance(v, (bytes, bytearray)):
            raise TypeError(f"BytesList values must be bytes or str, got {type(v).__name__}")
        return bytes(v)

    def _encode(self, deterministic=False):
        return b"".join(_ld(1, v) for v in self.value)

    @classmethod
    def _decode(cls, buf, pos, end, depth):
        out = cls()
        for f, w, v in _fields(buf, pos, end):
            if f == 1 and w == 2:
                out.value.append(bytes(buf[v[0]:v[1]]))
        return out


class FloatList(_List):
    __slots__ = ()

    @staticmethod
    def _coerce(v):
        return struct.unpack("<f", struct.pack("<f", float(v)))[0]

    def _encode(self, deterministic=False):
        if not self.value:
            return b""
        return _ld(1, struct.pack(f"<{len(self.value)}f", *self.value))

    @classmethod
    def _decode(cls, buf, pos, end, depth):
        out = cls()
        for f, w, v in _fields(buf, pos, end):
            if f != 1:
                continue
            if w == 2:
                n = v[1] - v[0]
                if n % 4:
                    raise DecodeError("packed floats: length is not a multiple of 4")
                out.value.extend(struct.unpack(f"<{n // 4}f", buf[v[0]:v[1]]))
            elif w == 5:
                out.value.append(struct.unpack("<f", v)[0])
        return out


class Int64List(_List):
    __slots__ = ()

    @staticmethod
    def _coerce(v):
        v = int(v)
        if not -(1 << 63) <= v < 1 << 63:
            raise ValueError(f"Int64List value {v} is out of the int64 range")
        return v

    def _encode(self, deterministic=False):
        if not self.value:
            return b""
        return _ld(1, b"".join(_varint(v) for v in self.value))

    @classmethod
    def _decode(cls, buf, pos, end, depth):
        out = cls()
        for f, w, v in _fields(buf, pos, end):
            if f != 1:
                continue
            if w == 2:
                p, e = v
                while p < e:
                    x, p = _read_varint(buf, p, e)
                    out.value.append(_signed64(x))
            elif w == 0:
                out.value.append(_signed64(v))
        return out


# ---- messages ----------------------------------------------------------------------------
class Feature:
    """One feature: exactly one of ``bytes_list``, ``float_list``, ``int64_list`` (or none)."""
    __slots__ = ("_kind", "_list")
    _KINDS = {"bytes_list": (1, BytesList), "float_list": (2, FloatList), "int64_list": (3, Int64List)}

    def __init__(self, bytes_list=None, float_list=None, int64_list=None):
        given = [(k, v) for k, v in (("bytes_list", bytes_list), ("float_list", float_list),
                                     ("int64_list", int64_list)) if v is not None]
        if len(given) > 1:
            raise ValueError(f"Feature: set one of bytes_list, float_list, int64_list, got {[k for k, _ in given]}")
        self._kind, self._list = given[0] if given else (None, None)

    def WhichOneof(self, name):  # noqa: N802 - protobuf's name
        if name != "kind":
            raise ValueError(f"Feature has no oneof {name!r}")
        return self._kind

    def HasField(self, name):  # noqa: N802
        return self._kind == name

    def __getattr__(self, name):
        if name in Feature._KINDS:
            if self._kind == name:
                return self._list
            return Feature._KINDS[name][1]()
        raise AttributeError(name)

    def __eq__(self, other):
        return isinstance(other, Feature) and self._kind == other._kind and self._list == other._list

    def __repr__(self):
        return f"Feature({self._kind}={self._list!r})" if self._kind else "Feature()"

    def _encode(self, deterministic=False):
        if self._kind is None:
            return b""
        return _ld(Feature._KINDS[self._kind][0], self._list._encode())

    @classmethod
    def _decode(cls, buf, pos, end, depth):
        out = cls()
        by_num = {n: (k, c) for k, (n, c) in Feature._KINDS.items()}
        for f, w, v in _fields(buf, pos, end):
            if f in by_num and w == 2:
                kind, c = by_num[f]
                out._kind, out._list = kind, c._decode(buf, v[0], v[1], depth + 1)
        return out

    SerializeToString = lambda self, deterministic=None: self._encode(bool(deterministic))  # noqa: E731
    FromString = classmethod(lambda cls, data: cls._decode(memoryview(bytes(data)), 0, len(data), 0))


def _map_encode(field, mapping, deterministic):
    # protobuf writes map entries in an unspecified order; deterministic=True sorts them by key, as
    # protobuf's deterministic serialisation does (the bytes TF's deterministic=True writes).
    items = sorted(mapping.items()) if deterministic else mapping.items()
    return b"".join(_ld(field, _ld(1, k.encode("utf-8")) + _ld(2, v._encode(deterministic))) for k, v in items)


def _map_decode(buf, pos, end, value_cls, depth):
    """The map in field 1 of the message at ``buf[pos:end]``: its entries as a dict."""
    out = {}
    for f, w, v in _fields(buf, pos, end):
        if f == 1 and w == 2:
            k, val = _map_entry(buf, v, value_cls, depth + 1)
            out[k] = val
    return out


def _map_entry(buf, span, value_cls, depth):
    if depth > _MAX_DEPTH:
        raise DecodeError("messages nested too deeply")
    key, value = "", value_cls()
    for f, w, v in _fields(buf, span[0], span[1]):
        if f == 1 and w == 2:
            try:
                key = bytes(buf[v[0]:v[1]]).decode("utf-8")
            except UnicodeDecodeError:
                raise DecodeError("a feature name is not valid UTF-8") from None
        elif f == 2 and w == 2:
            value = value_cls._decode(buf, v[0], v[1], depth + 1)
    return key, value


class _Message:
    __slots__ = ()

    def SerializeToString(self, deterministic=None):  # noqa: N802
        return self._encode(bool(deterministic))

    @classmethod
    def FromString(cls, data):  # noqa: N802
        data = bytes(data)
        return cls._decode(memoryview(data), 0, len(data), 0)

    def ParseFromString(self, data):  # noqa: N802
        other = type(self).FromString(data)
        for s in self.__slots__:
            setattr(self, s, getattr(other, s))
        return len(data)

    def __eq__(self, other):
        return type(self) is type(other) and all(getattr(self, s) == getattr(other, s) for s in self._public())

    def _public(self):
        return [s for s in self.__slots__ if not s.startswith("_")]

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{s}={getattr(self, s)!r}' for s in self._public())})"


class Features(_Message):
    """A map from feature names to :class:`Feature`."""
    __slots__ = ("feature",)

    def __init__(self, feature=None):
        self.feature = dict(feature or {})

    def _encode(self, deterministic=False):
        return _map_encode(1, self.feature, deterministic)

    @classmethod
    def _decode(cls, buf, pos, end, depth):
        return cls(_map_decode(buf, pos, end, Feature, depth))


class FeatureList(_Message):
    """A list of :class:`Feature` (one per time step of a SequenceExample)."""
    __slots__ = ("feature",)

    def __init__(self, feature=None):
        self.feature = list(feature or [])

    def _encode(self, deterministic=False):
        return b"".join(_ld(1, f._encode()) for f in self.feature)

    @classmethod
    def _decode(cls, buf, pos, end, depth):
        out = cls()
        for f, w, v in _fields(buf, pos, end):
            if f == 1 and w == 2:
                out.feature.append(Feature._decode(buf, v[0], v[1], depth + 1))
        return out


class FeatureLists(_Message):
    """A map from names to :class:`FeatureList`."""
    __slots__ = ("feature_list",)

    def __init__(self, feature_list=None):
        self.feature_list = dict(feature_list or {})

    def _encode(self, deterministic=False):
        return _map_encode(1, self.feature_list, deterministic)

    @classmethod
    def _decode(cls, buf, pos, end, depth):
        return cls(_map_decode(buf, pos, end, FeatureList, depth))


class Example(_Message):
    """A record of named features: the usual content of a TFRecord file."""
    __slots__ = ("features", "_set")

    def __init__(self, features=None):
        self._set = features is not None     # protobuf's field presence: Example() serialises to b""
        self.features = features if features is not None else Features()

    def _encode(self, deterministic=False):
        if not (self._set or self.features.feature):
            return b""
        return _ld(1, self.features._encode(deterministic))

    @classmethod
    def _decode(cls, buf, pos, end, depth):
        out = cls()
        for f, w, v in _fields(buf, pos, end):
            if f == 1 and w == 2:
                out.features, out._set = Features._decode(buf, v[0], v[1], depth + 1), True
        return out


class SequenceExample(_Message):
    """Context features plus per-step feature lists."""
    __slots__ = ("context", "feature_lists")

    def __init__(self, context=None, feature_lists=None):
        self.context = context if context is not None else Features()
        self.feature_lists = feature_lists if feature_lists is not None else FeatureLists()

    def _encode(self, deterministic=False):
        out = b""
        if self.context.feature:
            out += _ld(1, self.context._encode(deterministic))
        if self.feature_lists.feature_list:
            out += _ld(2, self.feature_lists._encode(deterministic))
        return out

    @classmethod
    def _decode(cls, buf, pos, end, depth):
        out = cls()
        for f, w, v in _fields(buf, pos, end):
            if f == 1 and w == 2:
                out.context = Features._decode(buf, v[0], v[1], depth + 1)
            elif f == 2 and w == 2:
                out.feature_lists = FeatureLists._decode(buf, v[0], v[1], depth + 1)
        return out
