"""OpInfos for TF1-only ops defined in ``tensorweave/compat`` (``StringToHashBucket`` ...).
References: the bucket numbers TensorFlow 2.21's ``tf.compat.v1.string_to_hash_bucket`` gives."""
import numpy as np

import tensorweave as tw
from opinfo import OpInfo, Sample
from tensorweave.compat.v1_string_hash import string_to_hash_bucket

_STRINGS = ["", "a", "ab", "abcdefg", "abcdefgh", "abcdefghi", "hello world", "tensorweave", "\u00e9t\u00e9 \u2603",
            "x" * 37]
# tf.compat.v1.string_to_hash_bucket(_STRINGS, n) in TensorFlow 2.21
_TF_BUCKETS = {1000003: [598820, 789371, 280251, 784299, 41559, 679702, 168296, 507100, 914980, 826521],
               7: [3, 4, 0, 4, 4, 5, 0, 0, 2, 0],
               2 ** 63 - 1: [105434511174508092, 2996632905371535868, 8190890202413169699, 2960345911509200449,
                             3429851175771700306, 6766191100966087061, 936430787915428848, 2548820906659287757,
                             4311592551343089448, 3892015006607142968]}


def _bucket_ref(x, num_buckets):
    table = dict(zip(_STRINGS, _TF_BUCKETS[num_buckets]))
    return np.vectorize(lambda v: table[v.decode() if isinstance(v, bytes) else v], otypes=[np.int64])(x)


OPS = [
    OpInfo("string_to_hash_bucket", string_to_hash_bucket, _bucket_ref, dtypes=(tw.string,), grad=False,
           samples=lambda d, r: [Sample((np.array(_STRINGS, dtype=object).reshape(2, 5), n), name=f"mod{n}")
                                 for n in _TF_BUCKETS]),
]
