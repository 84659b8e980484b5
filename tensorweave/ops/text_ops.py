"""Primitives behind Keras' text and lookup preprocessing layers (``TextVectorization``,
``StringLookup``, ``IntegerLookup``): standardising strings, splitting them into a padded token
matrix, and mapping tokens through a fixed vocabulary. None is differentiable.

>>> import tensorweave as tw
>>> from tensorweave.ops import text_ops
>>> toks = text_ops.text_split(text_ops.text_standardize(tw.constant(["Hi, there!", "a"])))
>>> toks.numpy().tolist()
[['hi', 'there'], ['a', '']]
>>> text_ops.vocabulary_lookup(toks, ["hi", "a"], [2, 3], default=1).numpy().tolist()
[[2, 1], [3, 1]]
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.ops import rules

STANDARDIZE_MODES = ("lower", "strip_punctuation", "lower_and_strip_punctuation")
SPLIT_MODES = ("whitespace", "character")


def _infer_standardize(inputs, attrs):
    rules.check_dtype(inputs[0], (_dt.string,), "KerasTextStandardize")
    return inputs[0].shape, _dt.string


def _infer_split(inputs, attrs):
    x = inputs[0]
    rules.check_dtype(x, (_dt.string,), "KerasTextSplit")
    if x.shape.rank is not None and x.shape.rank != 1:
        raise ValueError(f"text_split needs a 1-D tensor of strings, got shape {fmt(x.shape)}")
    n = x.shape.as_list()[0] if x.shape.rank else None
    length = attrs["length"]
    return TensorShape([n, length if length >= 0 else None]), _dt.string


def _infer_lookup(inputs, attrs):
    x = inputs[0]
    want = _dt.string if attrs["key_kind"] == "string" else None
    if want is not None and x.dtype is not want or want is None and not x.dtype.is_integer:
        raise TypeError(f"vocabulary_lookup: the vocabulary holds {attrs['key_kind']} keys but the input is "
                        f"{x.dtype.name}")
    return x.shape, _dt.int64


def _infer_hash(inputs, attrs):
    x = inputs[0]
    if x.dtype is not _dt.string and not x.dtype.is_integer:
        raise TypeError(f"hash_bucket needs strings or integers, got {x.dtype.name}")
    return x.shape, _dt.int64


register_op("KerasHashBucket", infer=_infer_hash, grad=NOT_DIFFERENTIABLE)
register_op("KerasTextStandardize", infer=_infer_standardize, grad=NOT_DIFFERENTIABLE)
register_op("KerasTextSplit", infer=_infer_split, grad=NOT_DIFFERENTIABLE)
register_op("KerasVocabularyLookup", infer=_infer_lookup, grad=NOT_DIFFERENTIABLE)


def text_standardize(x, mode="lower_and_strip_punctuation", name=None):
    """Lower-cases and/or removes ASCII punctuation (Keras' ``TextVectorization`` standardisation)."""
    if mode not in STANDARDIZE_MODES:
        raise ValueError(f"text_standardize: mode must be one of {STANDARDIZE_MODES}, got {mode!r}")
    return execute(get_op("KerasTextStandardize"), [convert_to_tensor(x)], {"mode": mode}, name)


def text_split(x, split="whitespace", length=-1, ngrams=(1,), name=None):
    """``[batch]`` strings -> ``[batch, length]`` tokens padded with ``""`` (``length=-1``: the longest).

    ``ngrams`` lists the n-gram sizes to emit, in that order (``(1, 2)``: the tokens, then the
    space-joined pairs of neighbours), as Keras' ``TextVectorization(ngrams=2)``."""
    if split not in SPLIT_MODES:
        raise ValueError(f"text_split: split must be one of {SPLIT_MODES}, got {split!r}")
    ngrams = tuple(int(n) for n in ngrams)
    if not ngrams or min(ngrams) < 1:
        raise ValueError(f"text_split: ngrams must be positive sizes, got {ngrams}")
    return execute(get_op("KerasTextSplit"), [convert_to_tensor(x)],
                   {"split": split, "length": int(length), "ngrams": ngrams}, name)


def vocabulary_lookup(x, keys, values, default, name=None):
    """``values[i]`` where ``x == keys[i]``, else ``default`` (int64)."""
    x = convert_to_tensor(x)
    keys = tuple(str(k) for k in keys) if x.dtype is _dt.string else tuple(int(k) for k in keys)
    if len(set(keys)) != len(keys):
        raise ValueError("vocabulary_lookup: the vocabulary has repeated entries")
    attrs = {"keys": keys, "values": tuple(int(v) for v in values), "default": int(default),
             "key_kind": "string" if x.dtype is _dt.string else "int"}
    return execute(get_op("KerasVocabularyLookup"), [x], attrs, name)


def hash_bucket(x, num_buckets, key=None, name=None):
    """``FarmHash64(x) % num_buckets`` (``key=(k0, k1)``: SipHash-2-4 instead), the bucket numbers of
    TensorFlow's ``to_hash_bucket_fast``/``_strong``; integers are hashed as their decimal strings.

    >>> import tensorweave as tw
    >>> from tensorweave.ops import text_ops
    >>> text_ops.hash_bucket(tw.constant(["a", "b", "hello world"]), 10).numpy().tolist()
    [9, 2, 1]
    """
    if int(num_buckets) < 1:
        raise ValueError(f"hash_bucket: num_buckets must be positive, got {num_buckets}")
    attrs = {"num_buckets": int(num_buckets), "key": None if key is None else (int(key[0]), int(key[1]))}
    return execute(get_op("KerasHashBucket"), [convert_to_tensor(x)], attrs, name)
