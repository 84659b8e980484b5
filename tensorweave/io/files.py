"""Whole-file reads and writes, raw bytes and base64 as string tensors (``tf.io.read_file`` ...).

>>> import os, tempfile
>>> import tensorweave as tw
>>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
>>> tw.io.write_file(path, b"\\x01\\x00\\x02\\x00")
>>> tw.io.decode_raw(tw.io.read_file(path), tw.int16).numpy().tolist()
[1, 2]
"""
import base64
import glob as _glob
import os

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.tensor import Tensor


def _scalar_bytes(value, what):
    if isinstance(value, Tensor):
        value = value.numpy()
    if isinstance(value, np.ndarray):
        value = value[()]
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise TypeError(f"{what}: expected a string, got {type(value).__name__}")


def _string(value):
    arr = np.empty((), dtype=object)
    arr[()] = value
    return convert_to_tensor(arr, dtype=_dt.string)


def read_file(filename, name=None):
    """The contents of ``filename`` as a scalar string tensor (bytes)."""
    path = os.fsdecode(_scalar_bytes(filename, "read_file"))
    try:
        with open(path, "rb") as f:
            return _string(f.read())
    except FileNotFoundError:
        raise errors.NotFoundError(f"{path}; No such file or directory") from None


def write_file(filename, contents, name=None):
    """Writes the scalar string ``contents`` to ``filename`` (creating parent directories)."""
    path = os.fsdecode(_scalar_bytes(filename, "write_file"))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(_scalar_bytes(contents, "write_file"))


def matching_files(pattern, name=None):
    """The sorted file names matching a glob ``pattern`` (or each of several)."""
    pats = np.asarray(pattern.numpy() if isinstance(pattern, Tensor) else pattern, dtype=object).reshape(-1)
    names = sorted({n for p in pats for n in _glob.glob(os.fsdecode(p if isinstance(p, bytes) else str(p).encode()))})
    out = np.empty(len(names), dtype=object)
    out[:] = [n.encode() for n in names]
    return convert_to_tensor(out, dtype=_dt.string)


def _in_graph(value, np_fn, dtype, extra_dims):
    """``np_fn`` on a graph tensor's value when the op runs (a ``numpy_function`` node), with the
    static shape ``value.shape + extra_dims``; None for eager values (the caller computes at once)."""
    from tensorweave.core.graph import SymbolicTensor
    if not isinstance(value, SymbolicTensor):
        return None
    from tensorweave.ops.script_ops import numpy_function
    out = numpy_function(np_fn, [value], dtype, stateful=False)
    if value.shape.rank is not None:
        out.set_shape(value.shape.as_list() + list(extra_dims))
    return out


def _map_strings(value, fn):
    def apply(a):
        a = np.asarray(a, dtype=object)
        out = np.empty(a.shape, dtype=object)
        for i, v in np.ndenumerate(a):
            out[i] = fn(v.encode("utf-8") if isinstance(v, str) else bytes(v))
        return out
    lazy = _in_graph(value, apply, _dt.string, [])
    if lazy is not None:
        return lazy
    return convert_to_tensor(apply(value.numpy() if isinstance(value, Tensor) else value), dtype=_dt.string)


def decode_raw(input_bytes, out_type, little_endian=True, fixed_length=None, name=None):
    """Reinterprets each string's bytes as a vector of ``out_type`` (one row per string)."""
    lazy = _in_graph(input_bytes, lambda a: _decode_raw(a, out_type, little_endian, fixed_length),
                     _dt.as_dtype(out_type), [fixed_length // np.dtype(_dt.as_dtype(out_type).np_dtype).itemsize
                                              if fixed_length is not None else None])
    if lazy is not None:
        return lazy
    return convert_to_tensor(_decode_raw(input_bytes.numpy() if isinstance(input_bytes, Tensor) else input_bytes,
                                         out_type, little_endian, fixed_length))


def _decode_raw(a, out_type, little_endian, fixed_length):
    dt = np.dtype(_dt.as_dtype(out_type).np_dtype).newbyteorder("<" if little_endian else ">")
    a = np.asarray(a, dtype=object)
    rows = []
    for v in a.reshape(-1):
        b = v.encode("utf-8") if isinstance(v, str) else bytes(v)
        if fixed_length is not None:
            b = b[:int(fixed_length)].ljust(int(fixed_length), b"\0")
        if len(b) % dt.itemsize:
            raise ValueError(f"decode_raw: input size {len(b)} is not a multiple of {dt.itemsize} "
                             f"(the size of {_dt.as_dtype(out_type).name})")
        rows.append(np.frombuffer(b, dt).astype(dt.newbyteorder("=")))
    if a.ndim == 0:
        return rows[0]
    n = {len(r) for r in rows}
    if len(n) > 1:
        raise ValueError(f"decode_raw: inputs have different lengths {sorted(n)}; pass fixed_length")
    return np.stack(rows).reshape(a.shape + (n.pop() if n else 0,)) if rows else \
        np.zeros(a.shape + (0,), dt.newbyteorder("="))


def encode_base64(input, pad=False, name=None):  # noqa: A002 - TF's name
    """Web-safe base64 (``-`` and ``_``), without ``=`` padding unless ``pad``."""
    return _map_strings(input, lambda b: base64.urlsafe_b64encode(b) if pad else
                        base64.urlsafe_b64encode(b).rstrip(b"="))


def decode_base64(input, name=None):  # noqa: A002
    """Decodes web-safe base64 (padding optional)."""
    def dec(b):
        try:
            return base64.urlsafe_b64decode(b + b"=" * (-len(b) % 4))
        except ValueError as e:
            raise ValueError(f"decode_base64: invalid base64 input ({e})") from None
    return _map_strings(input, dec)


def decode_compressed(bytes, compression_type="", name=None):  # noqa: A002 - TF's name
    """Decompresses each string (``"ZLIB"`` or ``"GZIP"``; ``""`` returns them unchanged)."""
    import gzip
    import zlib
    c = str(compression_type).upper()
    if c not in ("", "ZLIB", "GZIP"):
        raise ValueError(f"decode_compressed: compression_type must be '', 'ZLIB' or 'GZIP', got {compression_type!r}")
    fn = {"": lambda b: b, "ZLIB": zlib.decompress, "GZIP": gzip.decompress}[c]
    return _map_strings(bytes, fn)


def decode_csv(records, record_defaults, field_delim=",", use_quote_delim=True, na_value="", select_cols=None,
               name=None):
    """Parses CSV lines into one tensor per column; each column's dtype (and default for empty
    fields) comes from ``record_defaults`` (an empty default makes the column required)."""
    import csv
    recs = np.asarray(records.numpy() if isinstance(records, Tensor) else records, dtype=object)
    defaults = []
    for d in record_defaults:
        t = convert_to_tensor(d) if not isinstance(d, Tensor) else d
        v = np.asarray(t.numpy()).reshape(-1)
        defaults.append((t.dtype if t.dtype is not _dt.float32 or v.size else t.dtype, v[0] if v.size else None))
    cols = list(select_cols) if select_cols is not None else list(range(len(defaults)))
    out = [np.empty(recs.shape, dtype=object if dt is _dt.string else dt.np_dtype) for dt, _ in defaults]
    for idx, line in np.ndenumerate(recs):
        text = line.decode("utf-8") if isinstance(line, bytes) else str(line)
        reader = csv.reader([text], delimiter=field_delim, quotechar='"' if use_quote_delim else None,
                            quoting=csv.QUOTE_MINIMAL if use_quote_delim else csv.QUOTE_NONE)
        fields = next(reader, [""])
        if max(cols) >= len(fields) or (select_cols is None and len(fields) != len(defaults)):
            raise ValueError(f"decode_csv: expect {len(defaults)} fields but have {len(fields)} in record {idx}: "
                             f"{text!r}")
        for k, c in enumerate(cols):
            dt, dv = defaults[k]
            f = fields[c]
            if f == "" or f == na_value:
                if dv is None:
                    raise ValueError(f"decode_csv: field {c} is required but missing in record {idx}: {text!r}")
                out[k][idx] = dv.encode() if isinstance(dv, str) else dv
                continue
            try:
                out[k][idx] = f.encode() if dt is _dt.string else (f.lower() in ("true", "1") if dt.is_bool else
                                                                  int(f) if dt.is_integer else float(f))
            except ValueError:
                raise ValueError(f"decode_csv: field {c} of record {idx} is not a valid {dt.name}: {f!r}") from None
    return [convert_to_tensor(o, dtype=dt) for o, (dt, _) in zip(out, defaults)]


def match_filenames_once(pattern, name=None):
    """The files matching ``pattern`` (TF caches them in a local variable; here: evaluated at once)."""
    return matching_files(pattern)
