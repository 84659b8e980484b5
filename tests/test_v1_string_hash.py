"""TF1's ``tf.string_to_hash_bucket`` (TF's legacy Hash64); the op table checks it against TF's
buckets too (``opinfos/tf1_ops.py``)."""
import pytest

import tensorweave.compat.v1 as tf
from tensorweave.compat.v1_string_hash import legacy_hash64


def test_string_to_hash_bucket_matches_tensorflow_in_graphs():
    g = tf.Graph()
    with g.as_default():
        p = tf.placeholder(tf.string, [None])
        buckets = tf.string_to_hash_bucket(p, 1000003)
    with tf.Session(graph=g) as sess:     # TF 2.21: tf.compat.v1.string_to_hash_bucket(..., 1000003)
        assert sess.run(buckets, {p: ["hello world", "", "abcdefghi"]}).tolist() == [168296, 598820, 679702]
    # TF 2.21, num_buckets 2**63 - 1 (the hash itself, mod that)
    assert legacy_hash64(b"tensorweave") % (2 ** 63 - 1) == 2548820906659287757
    with pytest.raises(ValueError, match="num_buckets must be positive"):
        tf.string_to_hash_bucket(["a"], 0)
    with pytest.raises(TypeError, match="string_to_hash_bucket: string_tensor must be strings"):
        tf.string_to_hash_bucket(tf.constant([1, 2]), 3)
