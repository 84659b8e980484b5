"""CPU kernels for ``ops/text_ops.py`` (strings are NumPy object arrays of ``str``)."""
import functools
import re
import string

import numpy as np

from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu.farmhash import fingerprint64, siphash24

# Keras' default punctuation set: ASCII punctuation, removed (not replaced by spaces)
_PUNCT = re.compile("[" + re.escape(string.punctuation) + "]")


def _text(v):
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


@k("KerasTextStandardize")
def _standardize(x, mode):
    x = np.asarray(x, dtype=object)
    out = np.empty(x.shape, dtype=object)
    for i, v in np.ndenumerate(x):
        s = _text(v)
        if mode in ("lower", "lower_and_strip_punctuation"):
            s = s.lower()
        if mode in ("strip_punctuation", "lower_and_strip_punctuation"):
            s = _PUNCT.sub("", s)
        out[i] = s
    return out


def _with_ngrams(tokens, ngrams):
    out = []
    for n in ngrams:
        out.extend(" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
    return out


@k("KerasTextSplit")
def _split(x, split, length, ngrams=(1,)):
    rows = [_text(v).split() if split == "whitespace" else list(_text(v)) for v in np.asarray(x, dtype=object)]
    if tuple(ngrams) != (1,):
        rows = [_with_ngrams(r, ngrams) for r in rows]
    n = length if length >= 0 else max((len(r) for r in rows), default=0)
    out = np.full((len(rows), n), "", dtype=object)
    for i, r in enumerate(rows):
        r = r[:n]
        out[i, :len(r)] = r
    return out


@functools.lru_cache(maxsize=32)
def _table(keys, values):
    if keys and isinstance(keys[0], str):
        arr = np.asarray(keys, dtype=object)
    else:
        arr = np.asarray(keys, dtype=np.int64)
    order = np.argsort(arr, kind="stable")
    return arr[order], np.asarray(values, dtype=np.int64)[order]


@k("KerasVocabularyLookup")
def _lookup(x, keys, values, default, key_kind):
    x = np.asarray(x)
    if not keys:
        return np.full(x.shape, default, dtype=np.int64)
    sorted_keys, sorted_values = _table(keys, values)
    flat = x.reshape(-1)
    if key_kind == "string":
        flat = np.asarray([_text(v) for v in flat], dtype=object)
    else:
        flat = flat.astype(np.int64)
    pos = np.clip(np.searchsorted(sorted_keys, flat), 0, len(sorted_keys) - 1)
    hit = sorted_keys[pos] == flat
    return np.where(hit, sorted_values[pos], default).astype(np.int64).reshape(x.shape)


@k("KerasHashBucket")
def _hash_bucket(x, num_buckets, key):
    x = np.asarray(x)
    out = np.empty(x.shape, dtype=np.int64)
    for i, v in np.ndenumerate(x):
        text = _text(v) if x.dtype.kind in "OUS" else str(int(v))
        h = fingerprint64(text) if key is None else siphash24(key[0], key[1], text)
        out[i] = h % num_buckets
    return out
