"""``tf.feature_column``: how raw features (a dict of tensors) become a model's input.

*Dense* columns (numeric, bucketized as one-hot, indicator, embedding) give a float ``[batch, n]``
block each; :func:`input_layer` concatenates them (sorted by column name, as TF). *Categorical*
columns (vocabulary list, hash bucket, identity, bucketized, crossed) give integer ids
``[batch, k]``, ``-1`` where a value has no id; :func:`linear_model` weights them directly, and
the indicator/embedding columns turn them into dense blocks.

Hashing (hash buckets, crosses, out-of-vocabulary buckets) uses a 64-bit BLAKE2b fingerprint of
the value's bytes, so ids are stable across runs and machines but differ from TensorFlow's
FarmHash ids (same distribution, other buckets).

>>> import numpy as np
>>> import tensorweave.compat.v1 as tf
>>> fc = tf.feature_column
>>> age = fc.numeric_column("age")
>>> color = fc.categorical_column_with_vocabulary_list("color", ["red", "green"])
>>> g = tf.Graph()
>>> with g.as_default():
...     features = {"age": tf.constant([[30.0], [50.0]]),
...                 "color": tf.constant(np.array([b"green", b"blue"], dtype=object))}
...     net = fc.input_layer(features, [fc.bucketized_column(age, [40.0]), fc.indicator_column(color)])
>>> with tf.Session(graph=g) as sess:
...     sess.run(net).tolist()
[[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]]
"""
import collections
import hashlib
import math

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import name_scope
from tensorweave.ops import array_ops as _a
from tensorweave.ops import math_ops as _m
from tensorweave.ops import random_ops as _rand
from tensorweave.ops import reduce_ops as _r
from tensorweave.ops.indexing_ops import one_hot as _one_hot
from tensorweave.ops.script_ops import numpy_function
from tensorweave.ops.variables import Variable

__all__ = ["numeric_column", "bucketized_column", "categorical_column_with_vocabulary_list",
           "categorical_column_with_vocabulary_file",
           "categorical_column_with_hash_bucket", "categorical_column_with_identity", "indicator_column",
           "embedding_column", "crossed_column", "input_layer", "linear_model", "make_parse_example_spec"]


def fingerprint(value):
    """The 64-bit fingerprint used for hash buckets (BLAKE2b of the value's bytes)."""
    data = value if isinstance(value, bytes) else str(value).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _as_bytes(v):
    if isinstance(v, bytes):
        return v
    if isinstance(v, (np.integer, int)):
        return str(int(v)).encode()
    return str(v).encode()


def _rows(t):
    """``t`` as ``[batch, k]``: a ``[batch]`` feature becomes one column."""
    t = convert_to_tensor(t)
    if t.shape.rank == 1:
        return _a.expand_dims(t, 1)
    if t.shape.rank is not None and t.shape.rank > 2:
        return _a.reshape(t, [-1, int(np.prod(t.shape.as_list()[1:]))])
    return t


def _ids_op(fn, values, name):
    """Applies ``fn`` (a ``[batch, k]`` array -> int64 ids) in the graph."""
    out = numpy_function(lambda v: np.asarray(fn(np.asarray(v)), np.int64), [values], _dt.int64, name=name)
    return _a.reshape(out, [-1, values.shape[1] if values.shape.rank == 2 and values.shape[1] is not None else -1])


class _Column:
    """Base of the columns; ``name`` orders them in :func:`input_layer` and names their variables."""

    is_categorical = False
    is_dense = False

    def __repr__(self):
        return f"{type(self).__name__}(name={self.name!r})"


class _NumericColumn(_Column, collections.namedtuple(
        "NumericColumn", ["key", "shape", "default_value", "dtype", "normalizer_fn"])):
    is_dense = True

    @property
    def name(self):
        return self.key

    @property
    def variable_shape(self):
        return int(np.prod(self.shape))

    def values(self, features):
        if self.key not in features:
            raise ValueError(f"numeric_column {self.key!r}: no feature {self.key!r} in the input "
                             f"(features: {sorted(features)})")
        x = _m.cast(convert_to_tensor(features[self.key]), self.dtype)
        if self.normalizer_fn is not None:
            x = self.normalizer_fn(x)
        return _a.reshape(x, [-1, self.variable_shape])

    def dense(self, features, scope_vars):
        return _m.cast(self.values(features), _dt.float32)


def numeric_column(key, shape=(1,), default_value=None, dtype=_dt.float32, normalizer_fn=None):
    """A real-valued feature of ``shape`` per example."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    dtype = _dt.as_dtype(dtype)
    if not (dtype.is_floating or dtype.is_integer):
        raise ValueError(f"numeric_column {key!r}: dtype must be numeric, got {dtype.name}")
    if normalizer_fn is not None and not callable(normalizer_fn):
        raise TypeError(f"numeric_column {key!r}: normalizer_fn must be callable")
    return _NumericColumn(key, shape, default_value, dtype, normalizer_fn)


class _Categorical(_Column):
    is_categorical = True


class _BucketizedColumn(_Categorical, collections.namedtuple("BucketizedColumn", ["source_column", "boundaries"])):
    is_dense = True

    @property
    def name(self):
        return f"{self.source_column.name}_bucketized"

    @property
    def num_buckets(self):
        return (len(self.boundaries) + 1) * self.source_column.variable_shape

    @property
    def variable_shape(self):
        return self.num_buckets

    def ids(self, features):
        x = _m.cast(self.source_column.values(features), _dt.float32)
        b = convert_to_tensor(np.asarray(self.boundaries, np.float32))
        bucket = _r.reduce_sum(_m.cast(_m.greater_equal(_a.expand_dims(x, -1), b), _dt.int64), axis=-1)
        # Element i of a multi-dimensional source gets its own range of buckets (TF1).
        offsets = np.arange(self.source_column.variable_shape, dtype=np.int64) * (len(self.boundaries) + 1)
        return _m.add(bucket, convert_to_tensor(offsets))

    def dense(self, features, scope_vars):
        return _one_hot_sum(self.ids(features), self.num_buckets)


def bucketized_column(source_column, boundaries):
    """Buckets of a numeric column: ``(-inf, b0), [b0, b1), ..., [bn, inf)``."""
    if not isinstance(source_column, _NumericColumn):
        raise ValueError(f"bucketized_column: source_column must be a numeric_column, got {source_column!r}")
    boundaries = [float(b) for b in boundaries]
    if not boundaries or any(a >= b for a, b in zip(boundaries, boundaries[1:])):
        raise ValueError(f"bucketized_column: boundaries must be a sorted list without repeats, got {boundaries}")
    return _BucketizedColumn(source_column, tuple(boundaries))


class _VocabularyListColumn(_Categorical, collections.namedtuple(
        "VocabularyListColumn", ["key", "vocabulary_list", "dtype", "default_value", "num_oov_buckets"])):

    name = property(lambda self: self.key)

    @property
    def num_buckets(self):
        return len(self.vocabulary_list) + self.num_oov_buckets

    def ids(self, features):
        table = {_as_bytes(v): i for i, v in enumerate(self.vocabulary_list)}
        n, oov, default = len(self.vocabulary_list), self.num_oov_buckets, self.default_value

        def lookup(values):
            flat = [table.get(_as_bytes(v), -2) for v in values.ravel()]
            out = np.array(flat, np.int64).reshape(values.shape)
            missing = out == -2
            if oov:
                out[missing] = [n + fingerprint(_as_bytes(v)) % oov for v in values[missing]]
            else:
                out[missing] = default
            return out
        return _ids_op(lookup, _rows(_feature(features, self.key)), f"{self.key}_lookup")


def categorical_column_with_vocabulary_list(key, vocabulary_list, dtype=None, default_value=-1, num_oov_buckets=0):
    """Ids from a vocabulary (strings or ints); others get ``default_value`` or a hashed OOV bucket."""
    vocabulary_list = tuple(vocabulary_list)
    if not vocabulary_list:
        raise ValueError(f"categorical_column_with_vocabulary_list {key!r}: the vocabulary is empty")
    if len(set(vocabulary_list)) != len(vocabulary_list):
        raise ValueError(f"categorical_column_with_vocabulary_list {key!r}: duplicate keys in the vocabulary")
    if num_oov_buckets and default_value != -1:
        raise ValueError(f"categorical_column_with_vocabulary_list {key!r}: can't specify both default_value and "
                         f"num_oov_buckets")
    if dtype is None:
        dtype = _dt.string if isinstance(vocabulary_list[0], (str, bytes)) else _dt.int64
    return _VocabularyListColumn(key, vocabulary_list, _dt.as_dtype(dtype), default_value, num_oov_buckets)


def categorical_column_with_vocabulary_file(key, vocabulary_file, vocabulary_size=None, num_oov_buckets=0,
                                            default_value=None, dtype=_dt.string):
    """Like the vocabulary-list column, with one vocabulary entry per line of ``vocabulary_file``
    (the first ``vocabulary_size`` lines when given)."""
    with open(vocabulary_file, encoding="utf-8") as f:
        words = [line.rstrip("\n") for line in f]
    if vocabulary_size is not None:
        if vocabulary_size > len(words):
            raise ValueError(f"categorical_column_with_vocabulary_file {key!r}: vocabulary_size {vocabulary_size} "
                             f"is larger than the file's {len(words)} lines")
        words = words[:vocabulary_size]
    dtype = _dt.as_dtype(dtype)
    if dtype.is_integer:
        words = [int(w) for w in words]
    return categorical_column_with_vocabulary_list(key, words, dtype, -1 if default_value is None else default_value,
                                                   num_oov_buckets)


class _HashBucketColumn(_Categorical, collections.namedtuple("HashBucketColumn", ["key", "hash_bucket_size",
                                                                                  "dtype"])):
    name = property(lambda self: self.key)
    num_buckets = property(lambda self: self.hash_bucket_size)

    def ids(self, features):
        size = self.hash_bucket_size
        return _ids_op(lambda v: np.array([fingerprint(_as_bytes(x)) % size for x in v.ravel()],
                                          np.int64).reshape(v.shape),
                       _rows(_feature(features, self.key)), f"{self.key}_hash")


def categorical_column_with_hash_bucket(key, hash_bucket_size, dtype=_dt.string):
    """Ids ``fingerprint(value) % hash_bucket_size`` (integers hash as their decimal strings)."""
    if hash_bucket_size is None or hash_bucket_size < 1:
        raise ValueError(f"categorical_column_with_hash_bucket {key!r}: hash_bucket_size must be at least 1, "
                         f"got {hash_bucket_size}")
    return _HashBucketColumn(key, int(hash_bucket_size), _dt.as_dtype(dtype))


class _IdentityColumn(_Categorical, collections.namedtuple("IdentityColumn", ["key", "number_buckets",
                                                                             "default_value"])):
    name = property(lambda self: self.key)
    num_buckets = property(lambda self: self.number_buckets)

    def ids(self, features):
        n, default, key = self.number_buckets, self.default_value, self.key

        def check(values):
            values = values.astype(np.int64)
            bad = (values < 0) | (values >= n)
            if bad.any():
                if default is None:
                    raise ValueError(f"categorical_column_with_identity {key!r}: value {values[bad][0]} is not in "
                                     f"[0, {n}). Hint: pass default_value=")
                values = np.where(bad, default, values)
            return values
        return _ids_op(check, _rows(_feature(features, key)), f"{key}_identity")


def categorical_column_with_identity(key, num_buckets, default_value=None):
    """Integer features that are their own ids, in ``[0, num_buckets)``."""
    if num_buckets < 1:
        raise ValueError(f"categorical_column_with_identity {key!r}: num_buckets must be at least 1")
    if default_value is not None and not 0 <= default_value < num_buckets:
        raise ValueError(f"categorical_column_with_identity {key!r}: default_value {default_value} not in "
                         f"[0, {num_buckets})")
    return _IdentityColumn(key, int(num_buckets), default_value)


class _CrossedColumn(_Categorical, collections.namedtuple("CrossedColumn", ["keys", "hash_bucket_size",
                                                                           "hash_key"])):
    @property
    def name(self):
        return "_X_".join(sorted(k if isinstance(k, str) else k.name for k in self.keys))

    num_buckets = property(lambda self: self.hash_bucket_size)

    def ids(self, features):
        parts = []
        for k in self.keys:
            if isinstance(k, str):
                parts.append(_rows(_feature(features, k)))
            else:
                parts.append(k.ids(features))
        size = self.hash_bucket_size
        kinds = [isinstance(k, str) for k in self.keys]

        def cross(*columns):
            out = []
            for row in zip(*columns):
                values = [[_as_bytes(v) for v in r] if raw else [b"#" + _as_bytes(v) for v in r if v >= 0]
                          for r, raw in zip(row, kinds)]
                crossed = [b"_X_".join(combo) for combo in _product(values)]
                out.append([fingerprint(c) % size for c in crossed])
            width = max((len(r) for r in out), default=0)
            return np.array([r + [-1] * (width - len(r)) for r in out], np.int64).reshape(len(out), width)
        ids = numpy_function(lambda *c: cross(*[np.asarray(x) for x in c]), parts, _dt.int64, name="cross")
        return _a.reshape(ids, [_a.shape(parts[0])[0], -1])


def _product(lists):
    out = [[]]
    for values in lists:
        out = [o + [v] for o in out for v in values]
    return out


def crossed_column(keys, hash_bucket_size, hash_key=None):
    """Ids of the combinations of several features' values (raw keys or categorical columns), hashed."""
    keys = tuple(keys)
    if len(keys) < 2:
        raise ValueError(f"crossed_column: keys must have at least 2 elements, got {keys}")
    for k in keys:
        if not isinstance(k, str) and not (getattr(k, "is_categorical", False) and hasattr(k, "ids")):
            raise ValueError(f"crossed_column: each key must be a feature name or a categorical column, got {k!r}")
        if isinstance(k, _HashBucketColumn):
            raise ValueError("crossed_column does not support a hash-bucket column; pass its key (a string) instead")
    if hash_bucket_size is None or hash_bucket_size < 1:
        raise ValueError(f"crossed_column: hash_bucket_size must be at least 1, got {hash_bucket_size}")
    return _CrossedColumn(keys, int(hash_bucket_size), hash_key)


def _feature(features, key):
    if key not in features:
        raise ValueError(f"feature column: no feature {key!r} in the input (features: {sorted(features)})")
    return features[key]


def _one_hot_sum(ids, depth):
    return _r.reduce_sum(_one_hot(ids, depth, dtype=_dt.float32), axis=1)


class _IndicatorColumn(_Column, collections.namedtuple("IndicatorColumn", ["categorical_column"])):
    is_dense = True

    name = property(lambda self: f"{self.categorical_column.name}_indicator")
    variable_shape = property(lambda self: self.categorical_column.num_buckets)

    def dense(self, features, scope_vars):
        return _one_hot_sum(self.categorical_column.ids(features), self.categorical_column.num_buckets)


def indicator_column(categorical_column):
    """A multi-hot ``[batch, num_buckets]`` block of a categorical column (counts for repeated ids)."""
    _require_categorical("indicator_column", categorical_column)
    return _IndicatorColumn(categorical_column)


def _require_categorical(what, column):
    if not getattr(column, "is_categorical", False):
        raise ValueError(f"{what}: expected a categorical column (categorical_column_with_*, bucketized_column, "
                         f"crossed_column), got {column!r}")


def _combine(rows, mask, combiner):
    """Sums/means/sqrtn-s the ``[batch, k, d]`` rows where ``mask`` ([batch, k]) is 1."""
    total = _r.reduce_sum(_m.multiply(rows, _a.expand_dims(mask, -1)), axis=1)
    if combiner == "sum":
        return total
    count = _r.reduce_sum(mask, axis=1, keepdims=True)
    if combiner == "mean":
        return _m.div_no_nan(total, count)
    return _m.div_no_nan(total, _m.sqrt(count))


def _lookup(weights, ids, combiner):
    valid = _m.greater_equal(ids, 0)
    safe = _m.maximum(ids, 0)
    return _combine(_a.gather(weights, safe), _m.cast(valid, weights.dtype), combiner)


class _EmbeddingColumn(_Column, collections.namedtuple("EmbeddingColumn", [
        "categorical_column", "dimension", "combiner", "initializer", "trainable", "max_norm"])):
    is_dense = True

    name = property(lambda self: f"{self.categorical_column.name}_embedding")
    variable_shape = property(lambda self: self.dimension)

    def dense(self, features, scope_vars):
        n = self.categorical_column.num_buckets
        with name_scope(self.name):
            init = self.initializer or (lambda shape, dtype: _rand.truncated_normal(
                shape, stddev=1.0 / math.sqrt(self.dimension), dtype=dtype))
            weights = Variable(lambda: init([n, self.dimension], dtype=_dt.float32), name="embedding_weights",
                               trainable=self.trainable)
            scope_vars.setdefault(self, []).append(weights)
            out = _lookup(weights, self.categorical_column.ids(features), self.combiner)
            if self.max_norm is not None:
                out = _clip_rows(out, self.max_norm)
        return out


def _clip_rows(x, max_norm):
    norm = _m.sqrt(_r.reduce_sum(_m.square(x), axis=1, keepdims=True))
    return _m.multiply(x, _m.div_no_nan(convert_to_tensor(np.float32(max_norm)), _m.maximum(norm, max_norm)))


def embedding_column(categorical_column, dimension, combiner="mean", initializer=None, ckpt_to_load_from=None,
                     tensor_name_in_ckpt=None, max_norm=None, trainable=True, use_safe_embedding_lookup=True):
    """A learned ``dimension``-wide vector per id, combined over an example's ids (mean, sum or sqrtn)."""
    _require_categorical("embedding_column", categorical_column)
    if dimension is None or dimension < 1:
        raise ValueError(f"embedding_column: dimension must be at least 1, got {dimension}")
    if combiner not in ("mean", "sqrtn", "sum"):
        raise ValueError(f"embedding_column: combiner must be 'mean', 'sqrtn' or 'sum', got {combiner!r}")
    if initializer is not None and not callable(initializer):
        raise ValueError("embedding_column: initializer must be callable")
    if ckpt_to_load_from is not None:
        raise NotImplementedError("embedding_column: ckpt_to_load_from is not supported; warm-start the Estimator "
                                  "(warm_start_from) instead")
    return _EmbeddingColumn(categorical_column, int(dimension), combiner, initializer, trainable, max_norm)


def _sorted(feature_columns, what):
    cols = list(feature_columns) if isinstance(feature_columns, (list, tuple, set)) else [feature_columns]
    if not cols:
        raise ValueError(f"{what}: feature_columns must not be empty")
    names = [c.name for c in cols]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{what}: duplicate feature column names {dupes}")
    return sorted(cols, key=lambda c: c.name)


def input_layer(features, feature_columns, weight_collections=None, trainable=True, cols_to_vars=None,
                cols_to_output_tensors=None):
    """The dense columns' blocks, concatenated in column-name order: ``[batch, sum of widths]``."""
    cols = _sorted(feature_columns, "input_layer")
    for c in cols:
        if not c.is_dense:
            raise ValueError(f"input_layer: items of feature_columns must be dense columns, got {c!r}. You can wrap "
                             f"a categorical column with an embedding_column or indicator_column.")
    scope_vars = {}
    outputs = []
    with name_scope("input_layer"):
        for c in cols:
            with name_scope(c.name):
                out = c.dense(features, scope_vars)
            outputs.append(out)
            if cols_to_output_tensors is not None:
                cols_to_output_tensors[c] = out
    if cols_to_vars is not None:
        cols_to_vars.update({c: scope_vars.get(c, []) for c in cols})
    return outputs[0] if len(outputs) == 1 else _a.concat(outputs, axis=1)


def linear_model(features, feature_columns, units=1, sparse_combiner="sum", weight_collections=None,
                 trainable=True, cols_to_vars=None):
    """``sum_c (x_c @ W_c) + bias``: numeric columns multiply a ``[width, units]`` weight, categorical
    ones add their ids' weight rows (combined by ``sparse_combiner``)."""
    if sparse_combiner not in ("mean", "sqrtn", "sum"):
        raise ValueError(f"linear_model: sparse_combiner must be 'mean', 'sqrtn' or 'sum', got {sparse_combiner!r}")
    cols = _sorted(feature_columns, "linear_model")
    terms = []
    cols_to_vars = cols_to_vars if cols_to_vars is not None else {}
    with name_scope("linear_model"):
        for c in cols:
            with name_scope(c.name):
                if c.is_categorical:
                    w = Variable(lambda n=c.num_buckets: _a.zeros([n, units]), name="weights", trainable=trainable)
                    terms.append(_lookup(w, c.ids(features), sparse_combiner))
                else:
                    x = c.dense(features, {})
                    w = Variable(lambda n=c.variable_shape: _a.zeros([n, units]), name="weights",
                                 trainable=trainable)
                    terms.append(_m.matmul(x, w))
                cols_to_vars[c] = [w]
        bias = Variable(lambda: _a.zeros([units]), name="bias_weights", trainable=trainable)
        cols_to_vars["bias"] = [bias]
        return _m.add(_m.add_n(terms) if len(terms) > 1 else terms[0], bias, name="weighted_sum")


def _default_of(column):
    """A numeric column's default as nested tuples of its shape (TF's form: 0.5 for shape 2 is (0.5, 0.5))."""
    if column.default_value is None:
        return None
    values = np.asarray(column.default_value).reshape(-1)
    full = np.broadcast_to(values if values.size > 1 else values[0], column.shape)

    def nested(a):
        return tuple(nested(x) for x in a) if a.ndim > 1 else tuple(a.tolist())
    return nested(full) if full.ndim else full.item()


def make_parse_example_spec(feature_columns):
    """The ``tf.io.parse_example`` spec of the raw features the columns read: a
    ``FixedLenFeature`` per numeric column, a ``VarLenFeature`` per categorical one (as TF)."""
    from tensorweave.io.parsing import FixedLenFeature, VarLenFeature
    spec = {}

    def add(key, feature):
        if spec.setdefault(key, feature) != feature:
            raise ValueError(f"make_parse_example_spec: feature {key!r} is read as {spec[key]} and as {feature}")

    def visit(c):
        if isinstance(c, str):
            add(c, VarLenFeature(_dt.string))
        elif isinstance(c, _NumericColumn):
            add(c.key, FixedLenFeature(tuple(c.shape), c.dtype, _default_of(c)))
        elif isinstance(c, _BucketizedColumn):
            visit(c.source_column)
        elif isinstance(c, (_IndicatorColumn, _EmbeddingColumn)):
            visit(c.categorical_column)
        elif isinstance(c, _CrossedColumn):
            for k in c.keys:
                visit(k)
        elif isinstance(c, (_VocabularyListColumn, _HashBucketColumn)):
            add(c.key, VarLenFeature(c.dtype))
        elif isinstance(c, _IdentityColumn):
            add(c.key, VarLenFeature(_dt.int64))
        else:
            raise ValueError(f"make_parse_example_spec: {c!r} is not a feature column")
    for c in feature_columns:
        visit(c)
    return spec
