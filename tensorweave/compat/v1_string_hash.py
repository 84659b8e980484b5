"""TF1's ``tf.string_to_hash_bucket``: ``Hash64(s) % num_buckets`` with TensorFlow's legacy string
hash (MurmurHash64A, seed ``0xDECAFCAFFE``), so bucket ids equal those TF1 programs computed
(feature hashing, vocabularies by hash). TF itself prefers ``_fast`` (FarmHash) and ``_strong``.

>>> import tensorweave.compat.v1 as tf
>>> tf.string_to_hash_bucket(["hello world", ""], 1000003).numpy().tolist()
[168296, 598820]
"""
import struct

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_kernel, register_op
from tensorweave.core.sbp_rules import elementwise_rule
from tensorweave.core.tensor import Tensor

__all__ = ["string_to_hash_bucket", "legacy_hash64"]

_M = 0xC6A4A7935BD1E995
_MASK = (1 << 64) - 1
_SEED = 0xDECAFCAFFE

# per string, so any split of the strings splits the buckets the same way
register_op("StringToHashBucket", infer=lambda inputs, attrs: (inputs[0].shape, _dt.int64), grad=NOT_DIFFERENTIABLE,
            sbp=elementwise_rule())


def legacy_hash64(data, seed=_SEED):
    """TensorFlow's ``Hash64`` of ``data`` (bytes): MurmurHash64A, 8 little-endian bytes at a time."""
    n = len(data)
    h = (seed ^ (n * _M)) & _MASK
    whole = n - n % 8
    for (k,) in struct.iter_unpack("<Q", data[:whole]):
        k = (k * _M) & _MASK
        k ^= k >> 47
        h ^= (k * _M) & _MASK
        h = (h * _M) & _MASK
    if n % 8:
        for j, b in enumerate(data[whole:]):
            h ^= b << (8 * j)
        h = (h * _M) & _MASK
    h ^= h >> 47
    h = (h * _M) & _MASK
    return h ^ (h >> 47)


@register_kernel("StringToHashBucket", "CPU")
def _hash_bucket(x, num_buckets):
    flat = [legacy_hash64(v if isinstance(v, bytes) else str(v).encode("utf-8")) % num_buckets
            for v in np.asarray(x, dtype=object).reshape(-1)]
    return np.array(flat, np.int64).reshape(np.shape(x))


def string_to_hash_bucket(string_tensor, num_buckets, name=None):
    """The bucket ``Hash64(s) % num_buckets`` of each string (TF1's legacy hash; int64)."""
    t = string_tensor if isinstance(string_tensor, Tensor) else convert_to_tensor(string_tensor, dtype=_dt.string)
    if t.dtype is not _dt.string:
        raise TypeError(f"string_to_hash_bucket: string_tensor must be strings, got {t.dtype.name}")
    if int(num_buckets) < 1:
        raise ValueError(f"string_to_hash_bucket: num_buckets must be positive, got {num_buckets}")
    return execute(get_op("StringToHashBucket"), [t], {"num_buckets": int(num_buckets)}, name)
