"""CPU kernels for ``ops/string_ops.py``: Python loops over object arrays of ``str``/``bytes``.

Each element is processed as UTF-8 bytes (TensorFlow's strings are bytes); a result string takes
the flavour of its input element (``str`` in, ``str`` out; ``bytes`` in, ``bytes`` out).
"""
import re

import numpy as np

from tensorweave.kernels.cpu.farmhash import fingerprint64, siphash24
from tensorweave.core.registry import register_kernel as k


def as_bytes(v):
    return v.encode("utf-8") if isinstance(v, str) else bytes(v)


def like(src, b):
    """``b`` (bytes) in the flavour of ``src``."""
    return b.decode("utf-8", errors="replace") if isinstance(src, str) else b


def _map(x, fn, dtype=object):
    x = np.asarray(x, dtype=object)
    out = np.empty(x.shape, dtype=dtype)
    for i, v in np.ndenumerate(x):
        out[i] = fn(v)
    return out


def _chars(b, unit):
    return len(b) if unit == "BYTE" else len(b.decode("utf-8", errors="replace"))


k("StringLength")(lambda x, unit: _map(x, lambda v: _chars(as_bytes(v), unit), np.int32))


def _case(fn_bytes, fn_text):
    def kernel(x, encoding):
        if encoding:
            return _map(x, lambda v: like(v, fn_text(as_bytes(v).decode(encoding)).encode(encoding)))
        return _map(x, lambda v: like(v, fn_bytes(as_bytes(v))))
    return kernel


k("StringLower")(_case(bytes.lower, str.lower))
k("StringUpper")(_case(bytes.upper, str.upper))
k("StringStrip")(lambda x: _map(x, lambda v: like(v, as_bytes(v).strip())))


@k("RegexReplace")
def _regex_replace(x, pattern, rewrite, replace_global):
    pat = re.compile(as_bytes(pattern))
    rw = as_bytes(rewrite)
    return _map(x, lambda v: like(v, pat.sub(rw, as_bytes(v), count=0 if replace_global else 1)))


@k("RegexFullMatch")
def _regex_full_match(x, pattern):
    pat = re.compile(as_bytes(pattern))
    return _map(x, lambda v: pat.fullmatch(as_bytes(v)) is not None, np.bool_)


@k("Substr")
def _substr(x, pos, length, unit):
    x = np.asarray(x, dtype=object)
    pos, length = np.broadcast_to(pos, x.shape), np.broadcast_to(length, x.shape)
    out = np.empty(x.shape, dtype=object)
    for i, v in np.ndenumerate(x):
        b = as_bytes(v)
        seq = b if unit == "BYTE" else b.decode("utf-8")
        p, n = int(pos[i]), int(length[i])
        if p > len(seq) or p < -len(seq):
            raise ValueError(f"substr: position {p} is out of range for a string of length {len(seq)}")
        p = p % len(seq) if p < 0 else p
        piece = seq[p:p + max(n, 0)]
        out[i] = like(v, piece if unit == "BYTE" else piece.encode("utf-8"))
    return out


@k("StringToNumber")
def _to_number(x, out_type):
    def conv(v):
        s = as_bytes(v).decode("utf-8", errors="replace").strip()
        try:
            return int(s, 10) if np.dtype(out_type).kind in "iu" else float(s)
        except ValueError:
            raise ValueError(f"StringToNumberOp could not correctly convert string: {s}") from None
    return _map(x, conv, out_type)


@k("AsString")
def _as_string(x, precision, scientific, shortest, width, fill):
    x = np.asarray(x)
    if x.dtype == np.bool_:
        fmt = lambda v: "true" if v else "false"  # noqa: E731
    elif x.dtype.kind in "iu":
        fmt = lambda v: f"{int(v):{fill}>{width}d}" if width > 0 else str(int(v))  # noqa: E731
    else:
        spec = "e" if scientific else "g" if shortest else "f"
        p = "" if precision < 0 and spec != "f" else f".{6 if precision < 0 else precision}"
        fmt = lambda v: f"{float(v):{fill}>{width if width > 0 else ''}{p}{spec}}" if width > 0 else \
            f"{float(v):{p}{spec}}"  # noqa: E731
    return _map(x, lambda v: fmt(v).encode())


@k("StringJoin")
def _join(*inputs, separator):
    arrs = np.broadcast_arrays(*[np.asarray(a, dtype=object) for a in inputs])
    out = np.empty(arrs[0].shape, dtype=object)
    sep = as_bytes(separator)
    for i in np.ndindex(out.shape):
        parts = [a[i] for a in arrs]
        out[i] = like(parts[0], sep.join(as_bytes(p) for p in parts))
    return out


@k("ReduceJoin")
def _reduce_join(x, axis, keepdims, separator):
    x = np.asarray(x, dtype=object)
    sep = as_bytes(separator)
    axes = tuple(range(x.ndim)) if axis is None else tuple(a % x.ndim for a in axis)
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    kept = moved.shape[:x.ndim - len(axes)]
    flat = moved.reshape(kept + (-1,))
    out = np.empty(kept, dtype=object)
    sample = x.flat[0] if x.size else b""
    for i in np.ndindex(kept):
        out[i] = like(sample, sep.join(as_bytes(v) for v in flat[i]))
    if keepdims:
        out = out.reshape(tuple(1 if d in axes else s for d, s in enumerate(x.shape)))
    return out


def _split_one(b, sep, maxsplit):
    if sep:
        return b.split(sep, maxsplit)
    return b.split(None, maxsplit)


@k("StringSplit")
def _split(x, sep, maxsplit):
    x = np.asarray(x, dtype=object).reshape(-1)
    s = as_bytes(sep) if sep else b""
    rows = [[like(v, p) for p in _split_one(as_bytes(v), s, maxsplit)] for v in x]
    return _ragged(rows)


def _ragged(rows, dtype=object):
    splits = np.zeros(len(rows) + 1, np.int64)
    splits[1:] = np.cumsum([len(r) for r in rows])
    vals = np.empty(int(splits[-1]), dtype=dtype)
    vals[:] = [v for r in rows for v in r] if dtype is object else np.asarray([v for r in rows for v in r], dtype)
    return vals, splits


def _decode(b, encoding, errors, replacement):
    try:
        return b.decode(encoding, errors="strict")
    except UnicodeDecodeError:
        if errors == "strict":
            raise ValueError(f"unicode_decode: invalid {encoding} in {b!r}") from None
        text = b.decode(encoding, errors="replace" if errors == "replace" else "ignore")
        return text.replace("\ufffd", chr(replacement)) if errors == "replace" else text


@k("UnicodeDecode")
def _unicode_decode(x, input_encoding, errors, replacement_char):
    x = np.asarray(x, dtype=object).reshape(-1)
    rows = [[ord(c) for c in _decode(as_bytes(v), input_encoding, errors, replacement_char)] for v in x]
    return _ragged(rows, np.int32)


@k("UnicodeSplit")
def _unicode_split(x, input_encoding, errors, replacement_char):
    x = np.asarray(x, dtype=object).reshape(-1)
    rows = [[like(v, c.encode(input_encoding)) for c in _decode(as_bytes(v), input_encoding, errors, replacement_char)]
            for v in x]
    return _ragged(rows)


@k("UnicodeEncode")
def _unicode_encode(values, splits, output_encoding):
    out = np.empty(len(splits) - 1, dtype=object)
    for i in range(len(out)):
        out[i] = "".join(chr(int(c)) for c in values[splits[i]:splits[i + 1]]).encode(output_encoding)
    return out


@k("BytesSplit")
def _bytes_split(x):
    x = np.asarray(x, dtype=object).reshape(-1)
    return _ragged([[like(v, bytes([c])) for c in as_bytes(v)] for v in x])


@k("UnsortedSegmentJoin")
def _segment_join(x, ids, num_segments, separator):
    x = np.asarray(x, dtype=object)
    ids = np.asarray(ids)
    inner = x.shape[ids.ndim:]
    flat_x = x.reshape((-1,) + inner)
    flat_ids = ids.reshape(-1)
    out = np.empty((num_segments,) + inner, dtype=object)
    sep = as_bytes(separator)
    for j in np.ndindex(inner):
        for s in range(num_segments):
            parts = [as_bytes(flat_x[(r,) + j]) for r in np.nonzero(flat_ids == s)[0]]
            out[(s,) + j] = sep.join(parts)
    return out


_M64 = (1 << 64) - 1


@k("StringToHashBucketStrong")
def _hash_strong(x, num_buckets, key):
    k0, k1 = (int(v) & _M64 for v in key)
    return _map(x, lambda v: siphash24(k0, k1, as_bytes(v)) % num_buckets, np.int64)


@k("StringToHashBucketFast")
def _hash_fast(x, num_buckets):
    return _map(x, lambda v: fingerprint64(as_bytes(v)) % num_buckets, np.int64)
