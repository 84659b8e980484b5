"""OpInfos for the text/lookup primitives (ops/text_ops.py); references in plain Python."""
import string

import numpy as np

import tensorweave as tw
from opinfo import OpInfo, Sample
from tensorweave.ops import text_ops

_SENTENCES = np.array(["The cat, SAT!", "  two   spaces ", "", "don't stop."], dtype=object)


def _std_ref(x, mode):
    def one(s):
        if "lower" in mode:
            s = s.lower()
        if "punctuation" in mode:
            s = "".join(c for c in s if c not in string.punctuation)
        return s
    return np.vectorize(one, otypes=[object])(x)


def _split_ref(x, split="whitespace", length=-1, ngrams=(1,)):
    rows = [s.split() if split == "whitespace" else list(s) for s in x]
    rows = [[" ".join(r[i:i + n]) for n in ngrams for i in range(len(r) - n + 1)] for r in rows]
    n = length if length >= 0 else max(len(r) for r in rows)
    return np.array([(r + [""] * n)[:n] for r in rows], dtype=object).reshape(len(rows), n)


def _lookup_ref(x, keys, values, default):
    table = dict(zip(keys, values))
    return np.vectorize(lambda v: table.get(v, default), otypes=[np.int64])(x)


# bucket numbers recorded from TensorFlow 2.21 (to_hash_bucket_fast / _strong with key [7, 11])
_HASH_REF = {("a", None): 9, ("b", None): 2, ("hello world", None): 1, ("", None): 3, ("a", (7, 11)): 0,
             ("b", (7, 11)): 2, ("hello world", (7, 11)): 4, ("", (7, 11)): 7}


def _hash_ref(x, num_buckets, key=None):
    return np.vectorize(lambda v: _HASH_REF[(v, key)], otypes=[np.int64])(x)


OPS = [
    OpInfo("hash_bucket", text_ops.hash_bucket, _hash_ref, dtypes=(tw.string,), grad=False,
           samples=lambda d, r: [Sample((np.array([["a", "b"], ["hello world", ""]], dtype=object), 10), name="fast"),
                                 Sample((np.array(["a", "b", "hello world", ""], dtype=object), 10, (7, 11)),
                                        name="strong")]),
    OpInfo("text_standardize", text_ops.text_standardize, _std_ref, dtypes=(tw.string,), grad=False,
           samples=lambda d, r: [Sample((_SENTENCES.reshape(2, 2), m), name=m) for m in text_ops.STANDARDIZE_MODES]),
    OpInfo("text_split", text_ops.text_split, _split_ref, dtypes=(tw.string,), grad=False,
           samples=lambda d, r: [Sample((_SENTENCES,), name="longest"),
                                 Sample((_SENTENCES,), {"length": 2}, name="truncate"),
                                 Sample((_SENTENCES[:2],), {"split": "character", "length": 4}, name="chars"),
                                 Sample((_SENTENCES,), {"ngrams": (1, 2)}, name="bigrams")]),
    OpInfo("vocabulary_lookup_string", text_ops.vocabulary_lookup, _lookup_ref, dtypes=(tw.string,), grad=False,
           samples=lambda d, r: [Sample((np.array([["b", "zz"], ["", "a"]], dtype=object), ["a", "b", ""],
                                         [5, 3, 0], 1), name="strings")]),
    OpInfo("vocabulary_lookup_int", text_ops.vocabulary_lookup, _lookup_ref, dtypes=(tw.int64,), grad=False,
           samples=lambda d, r: [Sample((r.integers(0, 9, size=(3, 4)), [7, 2, 5], [1, 2, 3], 0), name="ints"),
                                 Sample((np.zeros((0,), np.int64), [1], [1], 0), name="empty")]),
]
