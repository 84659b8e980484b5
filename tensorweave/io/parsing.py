"""Parsing serialised ``tf.train.Example`` records: ``parse_example``, ``parse_single_example`` and the
feature specs ``FixedLenFeature``, ``FixedLenSequenceFeature`` and ``VarLenFeature``.

Dtypes map to the Example's lists as in TF: ``int64`` <- ``int64_list``, ``float32`` <- ``float_list``,
``string`` <- ``bytes_list`` (values are ``bytes``). Fixed-length features become dense tensors
``[batch] + shape``; variable-length ones become a :class:`~tensorweave.SparseTensor`
``[batch, max length]``. Eagerly the records are parsed at once; in a graph (``tw.function``,
``Dataset.map`` tracing) the parse runs as one host call with the same outputs.

>>> import tensorweave as tw
>>> ex = tw.train.Example(features=tw.train.Features(feature={
...     "x": tw.train.Feature(float_list=tw.train.FloatList(value=[1.5, 2.5]))}))
>>> out = tw.io.parse_single_example(ex.SerializeToString(), {
...     "x": tw.io.FixedLenFeature([2], tw.float32), "tags": tw.io.VarLenFeature(tw.string)})
>>> out["x"].numpy().tolist(), out["tags"].dense_shape.numpy().tolist()
([1.5, 2.5], [0])
"""
import collections

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.tensor import EagerTensor
from tensorweave.io.example_pb import DecodeError, Example

_KIND = {_dt.int64: "int64_list", _dt.float32: "float_list", _dt.string: "bytes_list"}
_KIND_NAME = {"int64_list": "int64", "float_list": "float", "bytes_list": "string"}


class FixedLenFeature(collections.namedtuple("FixedLenFeature", ["shape", "dtype", "default_value"])):
    """A feature with a fixed number of values, parsed to a dense tensor of ``shape``."""

    def __new__(cls, shape, dtype, default_value=None):
        return super().__new__(cls, _shape(shape), _check_dtype(dtype), default_value)


class FixedLenSequenceFeature(collections.namedtuple(
        "FixedLenSequenceFeature", ["shape", "dtype", "allow_missing", "default_value"])):
    """A feature holding a sequence of ``shape``-sized items, parsed to ``[batch, n] + shape``."""

    def __new__(cls, shape, dtype, allow_missing=False, default_value=None):
        return super().__new__(cls, _shape(shape), _check_dtype(dtype), allow_missing, default_value)


class VarLenFeature(collections.namedtuple("VarLenFeature", ["dtype"])):
    """A feature with any number of values, parsed to a SparseTensor."""

    def __new__(cls, dtype):
        return super().__new__(cls, _check_dtype(dtype))


class SparseFeature(collections.namedtuple("SparseFeature", ["index_key", "value_key", "dtype", "size",
                                                              "already_sorted"])):
    """A SparseTensor whose indices come from the int64 feature(s) ``index_key`` and values from
    ``value_key``; its dense shape is ``size`` (one entry per index key)."""

    def __new__(cls, index_key, value_key, dtype, size, already_sorted=False):
        keys = [index_key] if isinstance(index_key, str) else list(index_key)
        sizes = [size] if isinstance(size, int) else list(size)
        if len(keys) != len(sizes):
            raise ValueError(f"SparseFeature: {len(keys)} index keys but {len(sizes)} sizes")
        return super().__new__(cls, index_key, value_key, _check_dtype(dtype), size, already_sorted)


class RaggedFeature(collections.namedtuple("RaggedFeature", ["dtype", "value_key", "partitions", "row_splits_dtype",
                                                              "validate"])):
    """A feature parsed to a RaggedTensor ``[batch, None]`` (a vector for one example); nested
    ``partitions`` are not supported."""

    def __new__(cls, dtype, value_key=None, partitions=(), row_splits_dtype=_dt.int32, validate=False):
        if partitions:
            raise NotImplementedError("RaggedFeature: partitions are not supported yet")
        return super().__new__(cls, _check_dtype(dtype), value_key, tuple(partitions), row_splits_dtype, validate)


def _shape(shape):
    return tuple(int(d) for d in (shape if isinstance(shape, (list, tuple)) else
                                  list(getattr(shape, "as_list", lambda: shape)())))


def _check_dtype(dtype):
    d = _dt.as_dtype(dtype)
    if d not in _KIND:
        raise ValueError(f"Example features must be int64, float32 or string, got {d.name}")
    return d


def _values(feature, spec_dtype, key, index):
    kind = feature.WhichOneof("kind")
    if kind is None:
        return []
    if kind != _KIND[spec_dtype]:
        raise ValueError(f"Name: <unknown>, Key: {key}, Index: {index}. Data types don't match. Expected type: "
                         f"{_KIND_NAME[_KIND[spec_dtype]]}, Actual type: {_KIND_NAME[kind]}")
    return getattr(feature, kind).value


def _np_values(vals, dtype):
    if dtype is _dt.string:
        out = np.empty(len(vals), dtype=object)
        out[:] = list(vals)
        return out
    return np.asarray(vals, dtype=dtype.np_dtype)


def _default(spec, key, n):
    dv = spec.default_value
    if dv is None:
        return None
    arr = np.asarray(dv, dtype=object if spec.dtype is _dt.string else spec.dtype.np_dtype)
    if arr.size == 1:
        arr = np.full(n, arr.reshape(()), dtype=arr.dtype)
    if arr.size != n:
        raise ValueError(f"Key: {key}. default_value has {arr.size} values, shape {list(spec.shape)} needs {n}")
    return arr.reshape(-1)


def _parse_np(records, features):
    """{key: array or (indices, values, dense_shape)} for the serialised Examples ``records``."""
    examples = []
    for i, r in enumerate(records):
        if isinstance(r, str):
            r = r.encode("utf-8")
        try:
            examples.append(Example.FromString(r).features.feature)
        except DecodeError as e:
            raise ValueError(f"Could not parse example input {i}: {e}") from None
    out = {}
    b = len(examples)
    for key in sorted(features):
        spec = features[key]
        if isinstance(spec, VarLenFeature):
            rows = [_values(f[key], spec.dtype, key, i) if key in f else [] for i, f in enumerate(examples)]
            idx = [[i, j] for i, row in enumerate(rows) for j in range(len(row))]
            out[key] = (np.asarray(idx, np.int64).reshape(-1, 2), _np_values([v for row in rows for v in row], spec.dtype),
                        np.asarray([b, max((len(r) for r in rows), default=0)], np.int64))
            continue
        n = int(np.prod(spec.shape)) if spec.shape else 1
        if isinstance(spec, FixedLenSequenceFeature):
            rows = []
            for i, f in enumerate(examples):
                if key not in f and not spec.allow_missing:
                    raise ValueError(f"Name: <unknown>, Feature: {key} is required but could not be found.")
                vals = _values(f[key], spec.dtype, key, i) if key in f else []
                if len(vals) % n:
                    raise ValueError(f"Name: <unknown>, Key: {key}, Index: {i}. Number of values {len(vals)} is not "
                                     f"a multiple of the item size {n} (shape {list(spec.shape)})")
                rows.append(_np_values(vals, spec.dtype))
            steps = max((len(r) // n for r in rows), default=0)
            fill = spec.default_value if spec.default_value is not None else (b"" if spec.dtype is _dt.string else 0)
            arr = np.full((b, steps * n), fill, dtype=object if spec.dtype is _dt.string else spec.dtype.np_dtype)
            for i, r in enumerate(rows):
                arr[i, :len(r)] = r
            out[key] = arr.reshape((b, steps) + spec.shape)
            continue
        arr = np.empty((b, n), dtype=object if spec.dtype is _dt.string else spec.dtype.np_dtype)
        for i, f in enumerate(examples):
            vals = _values(f[key], spec.dtype, key, i) if key in f else None
            if vals is None or (len(vals) == 0 and spec.default_value is not None and n):
                d = _default(spec, key, n)
                if d is None:
                    raise ValueError(f"Name: <unknown>, Feature: {key} (data type: {_KIND_NAME[_KIND[spec.dtype]]}) "
                                     "is required but could not be found.")
                arr[i] = d
                continue
            if len(vals) != n:
                raise ValueError(f"Name: <unknown>, Key: {key}, Index: {i}. Number of {_KIND_NAME[_KIND[spec.dtype]]} "
                                 f"values != expected. Values size: {len(vals)} but output shape: {list(spec.shape)}")
            arr[i] = _np_values(vals, spec.dtype)
        out[key] = arr.reshape((b,) + spec.shape)
    return out


def _records(serialized):
    a = serialized.numpy() if isinstance(serialized, EagerTensor) else np.asarray(serialized, dtype=object)
    return np.asarray(a, dtype=object).reshape(-1).tolist(), np.shape(a)


def _flat_specs(features):
    """[(key, part, dtype, static shape)] of the host call's outputs, in order."""
    out = []
    for key in sorted(features):
        spec = features[key]
        if isinstance(spec, VarLenFeature):
            out += [(key, "indices", _dt.int64, [None, 2]), (key, "values", spec.dtype, [None]),
                    (key, "dense_shape", _dt.int64, [2])]
        elif isinstance(spec, FixedLenSequenceFeature):
            out.append((key, "dense", spec.dtype, [None, None] + list(spec.shape)))
        else:
            out.append((key, "dense", spec.dtype, [None] + list(spec.shape)))
    return out


def _assemble(features, parts):
    from tensorweave.sparse.sparse_tensor import SparseTensor
    result = {}
    for key in sorted(features):
        p = parts[key]
        result[key] = SparseTensor(*p) if isinstance(features[key], VarLenFeature) else p
    return result


def _lower(features):
    """(plain specs, {key: (kind, spec)}) with SparseFeature/RaggedFeature read as VarLenFeatures."""
    plain, composite = {}, {}
    for key, spec in features.items():
        if isinstance(spec, SparseFeature):
            keys = [spec.index_key] if isinstance(spec.index_key, str) else list(spec.index_key)
            for k in keys:
                plain[k] = VarLenFeature(_dt.int64)
            plain[spec.value_key] = VarLenFeature(spec.dtype)
            composite[key] = ("sparse", spec)
        elif isinstance(spec, RaggedFeature):
            plain[spec.value_key or key] = VarLenFeature(spec.dtype)
            composite[key] = ("ragged", spec)
        else:
            plain[key] = spec
    return plain, composite


def _raise_composites(parsed, features, composite):
    import numpy as np_
    from tensorweave.ragged.ragged_tensor import RaggedTensor
    from tensorweave.sparse.sparse_tensor import SparseTensor
    out = {k: v for k, v in parsed.items() if k in features}
    for key, (kind, spec) in composite.items():
        if kind == "ragged":
            vt = parsed[spec.value_key or key]
            batch = int(vt.dense_shape.numpy()[0])
            lengths = np_.bincount(vt.indices.numpy()[:, 0], minlength=batch) if batch else np_.zeros(0, np_.int64)
            out[key] = RaggedTensor.from_row_lengths(vt.values, lengths.astype(np_.int64))
            continue
        keys = [spec.index_key] if isinstance(spec.index_key, str) else list(spec.index_key)
        sizes = [spec.size] if isinstance(spec.size, int) else list(spec.size)
        vals = parsed[spec.value_key]
        rows = vals.indices.numpy()[:, 0]
        cols = [parsed[k].values.numpy() for k in keys]
        if any(len(c) != len(rows) for c in cols):
            raise ValueError(f"SparseFeature {key}: index and value features have different lengths")
        for c, n, k in zip(cols, sizes, keys):
            if len(c) and (c.min() < 0 or c.max() >= n):
                raise ValueError(f"SparseFeature {key}: index {k} has values outside [0, {n})")
        ind = np_.stack([rows] + cols, axis=1).astype(np_.int64) if len(rows) else np_.zeros((0, 1 + len(keys)), np_.int64)
        batch = int(vals.dense_shape.numpy()[0])
        st = SparseTensor(ind, vals.values, [batch] + sizes)
        if not spec.already_sorted:
            from tensorweave.sparse.sparse_ops import reorder
            st = reorder(st)
        out[key] = st
    return out


def parse_example(serialized, features, example_names=None, name=None):
    """Parses a batch ``[B]`` of serialised Examples; returns ``{key: Tensor, SparseTensor or RaggedTensor}``."""
    if not features:
        raise ValueError("parse_example: 'features' must name at least one feature")
    plain, composite = _lower(features)
    if composite:
        if not (isinstance(serialized, EagerTensor) or not hasattr(serialized, "op")):
            raise NotImplementedError("parse_example: SparseFeature/RaggedFeature run eagerly only")
        return _raise_composites(parse_example(serialized, plain), features, composite)
    specs = _flat_specs(features)
    if isinstance(serialized, EagerTensor) or not hasattr(serialized, "op"):
        records, _ = _records(serialized)
        parsed = _parse_np(records, features)
        parts = {}
        for key, part, dtype, _ in specs:
            v = parsed[key]
            if isinstance(v, tuple):
                v = v[("indices", "values", "dense_shape").index(part)]
            parts.setdefault(key, []).append(convert_to_tensor(v, dtype=dtype))
        return _assemble(features, {k: (tuple(v) if len(v) == 3 else v[0]) for k, v in parts.items()})
    return _parse_graph(serialized, features, specs)


def _parse_graph(serialized, features, specs):
    from tensorweave.ops.script_ops import numpy_function

    def host(records):
        parsed = _parse_np(np.asarray(records, dtype=object).reshape(-1).tolist(), features)
        flat = []
        for key, part, dtype, _ in specs:
            v = parsed[key]
            flat.append(v[("indices", "values", "dense_shape").index(part)] if isinstance(v, tuple) else v)
        return flat
    outs = numpy_function(host, [serialized], [d for _, _, d, _ in specs])
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    parts = {}
    for (key, part, dtype, shape), t in zip(specs, outs):
        t.set_shape(shape)
        parts.setdefault(key, []).append(t)
    return _assemble(features, {k: (tuple(v) if len(v) == 3 else v[0]) for k, v in parts.items()})


def parse_single_example(serialized, features, example_names=None, name=None):
    """Parses one serialised Example (a scalar string); dense features lose the batch dimension and
    sparse ones are ``[length]``."""
    from tensorweave.ops import array_ops as A
    from tensorweave.sparse.sparse_tensor import SparseTensor
    batch = parse_example(A.reshape(convert_to_tensor(serialized, dtype=_dt.string), [1]), features)
    from tensorweave.ragged.ragged_tensor import RaggedTensor
    out = {}
    for key, v in batch.items():
        if isinstance(v, SparseTensor):
            out[key] = SparseTensor(v.indices[:, 1:], v.values, v.dense_shape[1:])
        elif isinstance(v, RaggedTensor):
            out[key] = v.values
        else:
            out[key] = v[0]
    return out


def decode_json_example(json_examples, name=None):
    """Serialised Examples from their protobuf JSON form (``{"features": {"feature": {"x": {"int64List":
    {"value": ["1"]}}}}}``; bytes values are base64, as the JSON mapping says)."""
    import base64
    import json
    from tensorweave.io.example_pb import BytesList, Feature, Features, FloatList, Int64List
    arr = np.asarray(json_examples.numpy() if isinstance(json_examples, EagerTensor) else json_examples, dtype=object)
    out = np.empty(arr.shape, dtype=object)
    for i, text in np.ndenumerate(arr):
        try:
            doc = json.loads(text.decode() if isinstance(text, bytes) else text)
        except ValueError as e:
            raise ValueError(f"decode_json_example: invalid JSON ({e})") from None
        feats = {}
        for key, f in doc.get("features", {}).get("feature", {}).items():
            if "int64List" in f:
                feats[key] = Feature(int64_list=Int64List(value=[int(v) for v in f["int64List"].get("value", [])]))
            elif "floatList" in f:
                feats[key] = Feature(float_list=FloatList(value=[float(v) for v in f["floatList"].get("value", [])]))
            elif "bytesList" in f:
                feats[key] = Feature(bytes_list=BytesList(value=[base64.b64decode(v) for v in f["bytesList"].get("value", [])]))
            else:
                feats[key] = Feature()
        out[i] = Example(features=Features(feature=feats)).SerializeToString()
    return convert_to_tensor(out, dtype=_dt.string)


def parse_single_sequence_example(serialized, context_features=None, sequence_features=None, example_name=None,
                                  name=None):
    """Parses one serialised SequenceExample: ``(context dict, sequence dict)``. Sequence features are
    ``FixedLenSequenceFeature`` (dense ``[steps] + shape``) or ``VarLenFeature`` (sparse ``[steps, n]``)."""
    from tensorweave.io.example_pb import SequenceExample
    from tensorweave.sparse.sparse_tensor import SparseTensor
    data = serialized.numpy() if isinstance(serialized, EagerTensor) else serialized
    data = data.encode() if isinstance(data, str) else bytes(data)
    try:
        se = SequenceExample.FromString(data)
    except DecodeError as e:
        raise ValueError(f"Could not parse a SequenceExample: {e}") from None
    context = {}
    if context_features:
        ctx_bytes = Example(features=se.context).SerializeToString()
        context = parse_single_example(ctx_bytes, context_features)
    seqs = {}
    for key, spec in sorted((sequence_features or {}).items()):
        fl = se.feature_lists.feature_list.get(key)
        steps = fl.feature if fl is not None else []
        if fl is None and isinstance(spec, FixedLenSequenceFeature) and not spec.allow_missing:
            raise ValueError(f"Name: <unknown>, Feature list: {key} is required but could not be found.")
        rows = [_values(f, spec.dtype, key, i) for i, f in enumerate(steps)]
        if isinstance(spec, VarLenFeature):
            idx = [[i, j] for i, r in enumerate(rows) for j in range(len(r))]
            seqs[key] = SparseTensor(np.asarray(idx, np.int64).reshape(-1, 2),
                                     convert_to_tensor(_np_values([v for r in rows for v in r], spec.dtype),
                                                       dtype=spec.dtype),
                                     np.asarray([len(rows), max((len(r) for r in rows), default=0)], np.int64))
            continue
        n = int(np.prod(spec.shape)) if spec.shape else 1
        for i, r in enumerate(rows):
            if len(r) != n:
                raise ValueError(f"Name: <unknown>, Key: {key}, Index: {i}. Number of values {len(r)} != expected "
                                 f"{n} (shape {list(spec.shape)})")
        arr = np.stack([_np_values(r, spec.dtype) for r in rows]) if rows else \
            np.zeros((0, n), object if spec.dtype is _dt.string else spec.dtype.np_dtype)
        seqs[key] = convert_to_tensor(arr.reshape((len(rows),) + spec.shape), dtype=spec.dtype)
    return context, seqs


def parse_sequence_example(serialized, context_features=None, sequence_features=None, example_names=None,
                           name=None):
    """Parses a batch of SequenceExamples: ``(context, sequences, lengths)``; dense sequences are
    padded to the longest, ``lengths`` gives each dense feature's step counts."""
    from tensorweave.ops import array_ops as A
    from tensorweave.sparse.sparse_tensor import SparseTensor
    recs, _ = _records(serialized)
    parsed = [parse_single_sequence_example(r, context_features, sequence_features) for r in recs]
    context = {}
    for key in sorted(context_features or {}):
        vals = [c[key] for c, _ in parsed]
        if isinstance(vals[0], SparseTensor):
            ind = np.concatenate([np.concatenate([np.full((len(v.indices.numpy()), 1), b), v.indices.numpy()], 1)
                                  for b, v in enumerate(vals)]).astype(np.int64)
            context[key] = SparseTensor(ind.reshape(-1, 2), A.concat([v.values for v in vals], 0),
                                        [len(vals), max(int(v.dense_shape.numpy()[0]) for v in vals)])
        else:
            context[key] = A.stack(vals)
    seqs, lengths = {}, {}
    for key, spec in sorted((sequence_features or {}).items()):
        vals = [s[key] for _, s in parsed]
        if isinstance(spec, VarLenFeature):
            parts, steps = [], max(int(v.dense_shape.numpy()[0]) for v in vals)
            width = max(int(v.dense_shape.numpy()[1]) for v in vals)
            for b, v in enumerate(vals):
                i = v.indices.numpy()
                parts.append(np.concatenate([np.full((len(i), 1), b), i], 1))
            seqs[key] = SparseTensor(np.concatenate(parts).reshape(-1, 3).astype(np.int64),
                                     A.concat([v.values for v in vals], 0), [len(vals), steps, width])
            continue
        steps = max(v.shape[0] for v in vals)
        fill = spec.default_value if spec.default_value is not None else (b"" if spec.dtype is _dt.string else 0)
        arr = np.full((len(vals), steps) + spec.shape, fill, dtype=object if spec.dtype is _dt.string else spec.dtype.np_dtype)
        for b, v in enumerate(vals):
            arr[b, :v.shape[0]] = v.numpy()
        seqs[key] = convert_to_tensor(arr, dtype=spec.dtype)
        lengths[key] = convert_to_tensor(np.asarray([v.shape[0] for v in vals], np.int64))
    return context, seqs, lengths
