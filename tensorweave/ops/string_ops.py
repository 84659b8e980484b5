"""String ops (``tw.strings``): string tensors hold Python ``str`` or ``bytes`` elements (dtype
``tw.string``); ops work on their UTF-8 bytes as TensorFlow does, and each result string keeps
its input's flavour. Kernels are in ``kernels/cpu/string_kernels.py``; ops that return one
string per input have static shapes in graphs, and splitting ops return a
:class:`~tensorweave.RaggedTensor` built from ``(values, row_splits)`` outputs.

>>> import tensorweave as tw
>>> s = tw.constant([b"Hello World", b"a  b"])
>>> tw.strings.lower(s).numpy().tolist()
[b'hello world', b'a  b']
>>> tw.strings.split(s).to_list()
[[b'Hello', b'World'], [b'a', b'b']]
>>> tw.strings.to_number(tw.constant(["1.5", "-2"])).numpy().tolist()
[1.5, -2.0]
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op
from tensorweave.core.shape import TensorShape
from tensorweave.core.tensor import Tensor

__all__ = ["length", "lower", "upper", "strip", "regex_replace", "regex_full_match", "substr", "to_number",
           "as_string", "join", "reduce_join", "split", "format", "unicode_decode", "unicode_encode",
           "unicode_split", "unicode_transcode", "bytes_split", "ngrams", "unsorted_segment_join",
           "to_hash_bucket_strong", "to_hash_bucket_fast"]


def _strings(x, what):
    t = convert_to_tensor(x, dtype=_dt.string) if not isinstance(x, Tensor) else x
    if t.dtype is not _dt.string:
        raise TypeError(f"tw.strings.{what} expects a string tensor, got {t.dtype.name}. "
                        "Hint: tw.strings.as_string converts numbers")
    return t


def _same_shape(dtype):
    return lambda inputs, attrs: (inputs[0].shape, attrs.get("out_type", dtype) if dtype is None else dtype)


def _ragged_out(inputs, attrs):
    return [(TensorShape([None]), attrs.get("_values_dtype", _dt.string)), (TensorShape([None]), _dt.int64)]


for _name, _dtype in (("StringLength", _dt.int32), ("StringLower", _dt.string), ("StringUpper", _dt.string),
                      ("StringStrip", _dt.string), ("RegexReplace", _dt.string), ("RegexFullMatch", _dt.bool_),
                      ("Substr", _dt.string), ("AsString", _dt.string)):
    register_op(_name, infer=_same_shape(_dtype), grad=NOT_DIFFERENTIABLE)
register_op("StringToHashBucketStrong", infer=_same_shape(_dt.int64), grad=NOT_DIFFERENTIABLE)
register_op("StringToHashBucketFast", infer=_same_shape(_dt.int64), grad=NOT_DIFFERENTIABLE)
register_op("StringToNumber", infer=lambda i, a: (i[0].shape, _dt.as_dtype(a["out_type"])), grad=NOT_DIFFERENTIABLE)


def _join_infer(inputs, attrs):
    from tensorweave.core.shape import broadcast_static
    shape = inputs[0].shape
    for t in inputs[1:]:
        shape = broadcast_static(shape, t.shape)
    return shape, _dt.string


def _reduce_join_infer(inputs, attrs):
    s = inputs[0].shape
    if s.rank is None:
        return TensorShape(None), _dt.string
    axes = range(s.rank) if attrs["axis"] is None else [a % s.rank for a in attrs["axis"]]
    dims = [1 if d in axes else n for d, n in enumerate(s.as_list())] if attrs["keepdims"] else \
        [n for d, n in enumerate(s.as_list()) if d not in axes]
    return TensorShape(dims), _dt.string


register_op("StringJoin", infer=_join_infer, grad=NOT_DIFFERENTIABLE)
register_op("ReduceJoin", infer=_reduce_join_infer, grad=NOT_DIFFERENTIABLE)
for _name in ("StringSplit", "UnicodeDecode", "UnicodeSplit", "BytesSplit"):
    register_op(_name, infer=_ragged_out, num_outputs=2, grad=NOT_DIFFERENTIABLE)
register_op("UnicodeEncode", infer=lambda i, a: (TensorShape([i[1].shape[0] - 1 if i[1].shape[0] else None]),
                                                 _dt.string), grad=NOT_DIFFERENTIABLE)
register_op("UnsortedSegmentJoin", infer=lambda i, a: (TensorShape([a["num_segments"]] + i[0].shape.as_list()[
    i[1].shape.rank:]), _dt.string), grad=NOT_DIFFERENTIABLE)


def _run(op, inputs, attrs=None, name=None):
    return execute(get_op(op), inputs, attrs or {}, name)


def length(input, name=None, unit="BYTE"):  # noqa: A002 - TF's argument name
    """The length of each string in bytes (``unit="UTF8_CHAR"``: in characters)."""
    if unit not in ("BYTE", "UTF8_CHAR"):
        raise ValueError(f"tw.strings.length: unit must be 'BYTE' or 'UTF8_CHAR', got {unit!r}")
    return _run("StringLength", [_strings(input, "length")], {"unit": unit}, name)


def lower(input, encoding="", name=None):  # noqa: A002
    """Lower-cases ASCII letters (all letters with ``encoding="utf-8"``)."""
    return _run("StringLower", [_strings(input, "lower")], {"encoding": encoding}, name)


def upper(input, encoding="", name=None):  # noqa: A002
    """Upper-cases ASCII letters (all letters with ``encoding="utf-8"``)."""
    return _run("StringUpper", [_strings(input, "upper")], {"encoding": encoding}, name)


def strip(input, name=None):  # noqa: A002
    """Removes leading and trailing whitespace."""
    return _run("StringStrip", [_strings(input, "strip")], {}, name)


def regex_replace(input, pattern, rewrite, replace_global=True, name=None):  # noqa: A002
    """Replaces matches of ``pattern`` with ``rewrite`` (``\\1`` refers to a group)."""
    return _run("RegexReplace", [_strings(input, "regex_replace")],
                {"pattern": pattern, "rewrite": rewrite, "replace_global": bool(replace_global)}, name)


def regex_full_match(input, pattern, name=None):  # noqa: A002
    """Whether each whole string matches ``pattern``."""
    return _run("RegexFullMatch", [_strings(input, "regex_full_match")], {"pattern": pattern}, name)


def substr(input, pos, len, name=None, unit="BYTE"):  # noqa: A002
    """``len`` bytes (or UTF-8 characters) from ``pos`` (negative: from the end)."""
    pos, n = np.asarray(pos), np.asarray(len)
    return _run("Substr", [_strings(input, "substr")], {"pos": pos, "length": n, "unit": unit}, name)


def to_number(string_tensor, out_type=_dt.float32, name=None):
    """Parses each string as a number of ``out_type``."""
    out_type = _dt.as_dtype(out_type)
    return _run("StringToNumber", [_strings(string_tensor, "to_number")], {"out_type": out_type.np_dtype}, name)


def as_string(input, precision=-1, scientific=False, shortest=False, width=-1, fill="", name=None):  # noqa: A002
    """Formats numbers (and bools) as strings: floats as ``%f`` (6 decimals) unless told otherwise."""
    x = convert_to_tensor(input)
    if x.dtype is _dt.string:
        return x
    return _run("AsString", [x], {"precision": int(precision), "scientific": bool(scientific),
                                  "shortest": bool(shortest), "width": int(width), "fill": fill or " "}, name)


def join(inputs, separator="", name=None):
    """Joins the strings of several tensors elementwise (they broadcast)."""
    ts = [_strings(t, "join") for t in inputs]
    return _run("StringJoin", ts, {"separator": separator}, name)


def reduce_join(inputs, axis=None, keepdims=False, separator="", name=None):
    """Joins strings along ``axis`` (all axes by default)."""
    axes = None if axis is None else [int(a) for a in np.ravel(axis)]
    return _run("ReduceJoin", [_strings(inputs, "reduce_join")],
                {"axis": axes, "keepdims": bool(keepdims), "separator": separator}, name)


def _ragged(values, splits, shape):
    from tensorweave.ragged.ragged_tensor import RaggedTensor
    rt = RaggedTensor(values, splits, validate=False)
    if shape.rank == 0:
        return values
    return rt


def split(input, sep=None, maxsplit=-1, name=None):  # noqa: A002
    """Splits each string at ``sep`` (runs of whitespace by default): a RaggedTensor of the pieces,
    or a vector for a scalar input."""
    x = _strings(input, "split")
    if x.shape.rank not in (0, 1):
        raise ValueError(f"tw.strings.split: input must be a scalar or a vector, got shape {x.shape.as_list()}")
    vals, splits = _run("StringSplit", [x], {"sep": sep or "", "maxsplit": int(maxsplit)}, name)
    return _ragged(vals, splits, x.shape)


def bytes_split(input, name=None):  # noqa: A002
    """Splits each string into single bytes."""
    x = _strings(input, "bytes_split")
    vals, splits = _run("BytesSplit", [x], {}, name)
    return _ragged(vals, splits, x.shape)


def unicode_decode(input, input_encoding, errors="replace", replacement_char=65533, replace_control_characters=False,
                   name=None):  # noqa: A002
    """The code points of each string (int32), ragged."""
    x = _strings(input, "unicode_decode")
    vals, splits = _run("UnicodeDecode", [x], {"input_encoding": input_encoding, "errors": errors,
                                               "replacement_char": int(replacement_char),
                                               "_values_dtype": _dt.int32}, name)
    return _ragged(vals, splits, x.shape)


def unicode_split(input, input_encoding, errors="replace", replacement_char=65533, name=None):  # noqa: A002
    """The characters of each string, each as its own encoded string, ragged."""
    x = _strings(input, "unicode_split")
    vals, splits = _run("UnicodeSplit", [x], {"input_encoding": input_encoding, "errors": errors,
                                              "replacement_char": int(replacement_char)}, name)
    return _ragged(vals, splits, x.shape)


def unicode_encode(input, output_encoding, errors="replace", replacement_char=65533, name=None):  # noqa: A002
    """Strings from code points: a RaggedTensor (or a vector for one string)."""
    from tensorweave.ragged.ragged_tensor import RaggedTensor
    from tensorweave.ops import array_ops as A
    if isinstance(input, RaggedTensor):
        vals, splits = input.values, input.row_splits
    else:
        x = convert_to_tensor(input)
        if x.shape.rank == 1:
            return _run("UnicodeEncode", [x, A.constant(np.array([0, x.shape[0]], np.int64))],
                        {"output_encoding": output_encoding}, name)[0]
        vals = A.reshape(x, [-1])
        splits = A.constant(np.arange(0, x.shape[0] * x.shape[1] + 1, x.shape[1], dtype=np.int64))
    return _run("UnicodeEncode", [vals, splits], {"output_encoding": output_encoding}, name)


def unicode_transcode(input, input_encoding, output_encoding, errors="replace", replacement_char=65533,
                      replace_control_characters=False, name=None):  # noqa: A002
    """Re-encodes each string from ``input_encoding`` to ``output_encoding``."""
    codes = unicode_decode(input, input_encoding, errors, replacement_char)
    return unicode_encode(codes, output_encoding)


def ngrams(data, ngram_width, separator=" ", pad_values=None, padding_width=None, preserve_short_sequences=False,
           name=None):
    """The ``ngram_width``-grams of each row of tokens (a vector or RaggedTensor), joined by ``separator``."""
    from tensorweave.ragged.ragged_tensor import RaggedTensor
    from tensorweave.ragged import constant
    widths = [int(w) for w in np.ravel(ngram_width)]
    if pad_values is not None:
        raise NotImplementedError("tw.strings.ngrams: pad_values is not supported yet")
    rows = data.to_list() if isinstance(data, RaggedTensor) else [list(convert_to_tensor(data).numpy())]
    sep = separator.encode() if isinstance(separator, str) else separator
    out = []
    for r in rows:
        r = [v.encode() if isinstance(v, str) else v for v in r]
        grams = [sep.join(r[i:i + w]) for w in widths for i in range(len(r) - w + 1)]
        if not grams and preserve_short_sequences and r:
            grams = [sep.join(r)]
        out.append(grams)
    if isinstance(data, RaggedTensor):
        res = constant(out, dtype=_dt.string) if any(out) else RaggedTensor.from_row_lengths(
            convert_to_tensor(np.empty(0, object), dtype=_dt.string), [0] * len(out))
        return res
    return convert_to_tensor(np.array(out[0], dtype=object), dtype=_dt.string)


def to_hash_bucket_strong(input, num_buckets, key, name=None):  # noqa: A002
    """``SipHash-2-4(key, s) % num_buckets`` for each string (``key``: two 64-bit ints), as TF."""
    key = [int(v) for v in key]
    if len(key) != 2:
        raise ValueError(f"to_hash_bucket_strong: key must be two integers, got {key}")
    if int(num_buckets) < 1:
        raise ValueError(f"to_hash_bucket_strong: num_buckets must be positive, got {num_buckets}")
    return _run("StringToHashBucketStrong", [_strings(input, "to_hash_bucket_strong")],
                {"num_buckets": int(num_buckets), "key": key}, name)


def to_hash_bucket_fast(input, num_buckets, name=None):  # noqa: A002
    """``Fingerprint64(s) % num_buckets`` (FarmHash64) for each string, as TF."""
    if int(num_buckets) < 1:
        raise ValueError(f"to_hash_bucket_fast: num_buckets must be positive, got {num_buckets}")
    return _run("StringToHashBucketFast", [_strings(input, "to_hash_bucket_fast")],
                {"num_buckets": int(num_buckets)}, name)


def unsorted_segment_join(inputs, segment_ids, num_segments, separator="", name=None):
    """Joins the strings of each segment (in order of appearance)."""
    return _run("UnsortedSegmentJoin", [_strings(inputs, "unsorted_segment_join"), convert_to_tensor(segment_ids)],
                {"num_segments": int(num_segments), "separator": separator}, name)


def format(template, inputs, placeholder="{}", summarize=3, name=None):  # noqa: A001 - TF's name
    """Fills ``placeholder`` s in ``template`` with the tensors' printed values (TF's ``tf.print`` style)."""
    ts = inputs if isinstance(inputs, (list, tuple)) else [inputs]
    pieces = template.split(placeholder)
    if len(pieces) - 1 != len(ts):
        raise ValueError(f"tw.strings.format: {len(pieces) - 1} placeholders in the template but {len(ts)} inputs")
    out = pieces[0]
    for t, rest in zip(ts, pieces[1:]):
        out += _tf_str(np.asarray(convert_to_tensor(t).numpy()), summarize) + rest
    return convert_to_tensor(out.encode(), dtype=_dt.string)


def _tf_str(a, summarize):
    """A tensor printed as TF prints it: ``[1 2 3]``, nested, ``...`` past ``summarize`` per dimension."""
    def item(v):
        if isinstance(v, (bytes, str)):
            return '"' + (v.decode() if isinstance(v, bytes) else v) + '"'
        if isinstance(v, (bool, np.bool_)):
            return "True" if v else "False"
        return str(v.item() if hasattr(v, "item") else v)

    def rec(x):
        if x.ndim == 0:
            return item(x[()])
        n = x.shape[0]
        idx = list(range(n)) if summarize < 0 or n <= 2 * summarize else \
            list(range(summarize)) + [None] + list(range(n - summarize, n))
        parts = ["..." if i is None else rec(x[i]) for i in idx]
        return "[" + (" " if x.ndim == 1 else "\n ").join(parts) + "]"
    return rec(a)
