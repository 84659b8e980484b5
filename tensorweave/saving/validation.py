"""Checks that loaders run on untrusted files before anything is allocated or built.

A saved model is data written by someone else. Every loader in :mod:`tensorweave.saving`
parses JSON with :func:`parse_json` (size, depth and number checks), and checks names,
shapes and dtypes with the helpers here, so that a malformed or malicious file ends in a
:class:`LoadError` (a ``ValueError``) that says what is wrong and where, never in a crash,
a huge allocation or code being run.

>>> parse_json(b'{"a": [1, 2.5, null]}', "demo.json")
{'a': [1, 2.5, None]}
>>> parse_json(b'{"a": NaN}', "demo.json")
Traceback (most recent call last):
...
tensorweave.saving.validation.LoadError: demo.json: not valid JSON (NaN is not allowed)
>>> check_shape([None, 3], "demo")
[None, 3]
"""
import json
import os
import re
import stat

from tensorweave.core import dtypes as _dt

# Limits. They are far above what a real model needs and far below what would hurt the
# machine reading the file; each is checked before the thing it bounds is built.
MAX_JSON_BYTES = 256 << 20        # a saved_model.json / Keras config larger than this is refused
MAX_JSON_DEPTH = 200              # nesting of JSON arrays/objects
MAX_NODES = 2_000_000             # graph nodes, all functions together
MAX_FUNCTION_DEPTH = 32           # If/While bodies nested in bodies
MAX_RANK = 64
MAX_DIM = 1 << 40                 # one dimension of a (symbolic) shape
MAX_INLINE_ELEMENTS = 4096        # a constant stored in the JSON itself
MAX_NAME = 1024                   # node, variable, signature names
MAX_STRING = 1 << 20              # any other string value
MAX_LIST = 1 << 20                # elements of one list

# Dtypes a saved tensor may have: everything with a fixed NumPy layout, plus strings
# (inline constants only); ``resource``/``variant`` values are Python objects and never saved.
TENSOR_DTYPES = {d.name: d for d in _dt.ALL if d.np_dtype is not None and d is not _dt.string}
TENSOR_DTYPES["string"] = _dt.string
# Dtypes a placeholder, signature or attr may name (handles included: they are symbolic).
ALL_DTYPES = {d.name: d for d in _dt.ALL}

_NODE_NAME = re.compile(r"^[A-Za-z0-9_.\-/>]+$")


class LoadError(ValueError):
    """A saved file is malformed, inconsistent, too large, or asks for something unsafe."""


def fail(where, message):
    raise LoadError(f"{where}: {message}")


def _reject_constant(name):
    raise ValueError(f"{name} is not allowed")


def _finite_float(text):
    value = float(text)
    if value in (float("inf"), float("-inf")):
        # JSON has no infinity; Python's reader turns a literal like 1e999 into one.
        raise ValueError(f"the number {text[:40]} is out of range (JSON numbers must be finite)")
    return value


def loads_strict(text):
    """``json.loads`` without NaN/Infinity, also not as out-of-range literals such as ``1e999``
    (raises ``ValueError``; ``RecursionError`` for absurd nesting is the caller's to catch)."""
    return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)


def parse_json(data, where, max_bytes=MAX_JSON_BYTES):
    """Parses ``data`` (bytes) as strict JSON: size-limited, no NaN/Infinity, bounded depth."""
    if len(data) > max_bytes:
        fail(where, f"{len(data)} bytes of JSON is over the limit of {max_bytes}")
    try:
        text = data.decode("utf-8")
        value = loads_strict(text)
    except RecursionError:
        fail(where, "JSON nested too deeply")
    except (UnicodeDecodeError, ValueError) as e:
        fail(where, f"not valid JSON ({e})")
    check_depth(value, where)
    return value


def open_regular(path, where=None, error=None):
    """Opens ``path`` for binary reading, refusing (with ``error``, default :class:`LoadError`)
    anything that is not a regular file: a FIFO, a device, a socket or a directory would make
    a reader block forever or read without end. The check is made on the opened descriptor
    (no race with a file swapped in between), opened non-blocking so that a FIFO without a
    writer cannot hang the open itself. ``OSError`` (missing file ...) passes through."""
    where = where or os.fspath(path)
    error = error or LoadError
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
                 | getattr(os, "O_BINARY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
            raise error(f"{where}: is {kind}, not a regular file; refusing to read it")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_json_file(path, where=None, max_bytes=MAX_JSON_BYTES):
    """Reads and parses a JSON file (a regular file only), checking its size before reading it."""
    where = where or os.fspath(path)
    try:
        f = open_regular(path, where)
    except OSError as e:
        fail(where, f"cannot be read ({e.strerror or e})")
    with f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            fail(where, f"{size} bytes of JSON is over the limit of {max_bytes}")
        data = f.read(max_bytes + 1)
    return parse_json(data, where, max_bytes)


def check_depth(value, where, limit=MAX_JSON_DEPTH):
    """Walks ``value`` iteratively (no recursion to exhaust) and bounds its nesting."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if d > limit:
            fail(where, f"JSON nested deeper than {limit} levels")
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)


def expect(value, types, where, what):
    """``value`` if it is an instance of ``types`` (bools are not ints here), else LoadError."""
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        fail(where, f"{what} must be {_type_names(types)}, got {value!r}")
    if not isinstance(value, types):
        fail(where, f"{what} must be {_type_names(types)}, got {_short(value)}")
    return value


def _type_names(types):
    types = types if isinstance(types, tuple) else (types,)
    names = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number",
             bool: "true/false", type(None): "null"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def _short(value):
    s = repr(value)
    return s if len(s) <= 80 else s[:77] + "..."


def check_keys(obj, where, required=(), optional=()):
    """``obj`` must be a dict with all ``required`` keys and nothing outside required+optional."""
    expect(obj, dict, where, "entry")
    missing = [k for k in required if k not in obj]
    if missing:
        fail(where, f"missing field(s) {missing}")
    extra = sorted(set(obj) - set(required) - set(optional))
    if extra:
        fail(where, f"unknown field(s) {extra}")
    return obj


def check_int(value, where, what, lo=None, hi=None):
    expect(value, int, where, what)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        fail(where, f"{what} = {value} is outside [{lo}, {hi}]")
    return value


def check_string(value, where, what, limit=MAX_STRING):
    expect(value, str, where, what)
    if len(value) > limit:
        fail(where, f"{what} is {len(value)} characters long (limit {limit})")
    return value


def check_name(value, where, what="name"):
    """A node/variable name: printable ASCII without ':' (which separates the output index)."""
    check_string(value, where, what, MAX_NAME)
    if not value or not _NODE_NAME.match(value):
        fail(where, f"{what} {value!r} is not a valid name (letters, digits and _.-/> only)")
    return value


def check_list(value, where, what, limit=MAX_LIST):
    expect(value, list, where, what)
    if len(value) > limit:
        fail(where, f"{what} has {len(value)} elements (limit {limit})")
    return value


def check_dtype(value, where, what="dtype", allowed=ALL_DTYPES):
    expect(value, str, where, what)
    d = allowed.get(value)
    if d is None:
        fail(where, f"unknown {what} {_short(value)}; expected one of {sorted(allowed)}")
    return d


def check_shape(value, where, what="shape", allow_unknown=True):
    """A shape: null (unknown rank, when allowed) or a list of ints in [0, MAX_DIM] / null."""
    if value is None:
        if not allow_unknown:
            fail(where, f"{what} must be fully known")
        return None
    check_list(value, where, what, MAX_RANK)
    for d in value:
        if d is None and allow_unknown:
            continue
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= MAX_DIM:
            fail(where, f"{what} {_short(value)} has an invalid dimension {d!r} "
                        f"(dimensions are integers in [0, {MAX_DIM}]{' or null' if allow_unknown else ''})")
    return list(value)


def num_elements(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def check_safe_filename(value, where, what="file name"):
    """A plain file name (no directories, no '..', no drive or control characters)."""
    check_string(value, where, what, 255)
    if (not value or value in (".", "..") or "/" in value or "\\" in value or "\x00" in value
            or ":" in value or any(ord(c) < 32 for c in value)):
        fail(where, f"{what} {value!r} is not a plain file name")
    return value
