"""``tf.nn.ctc_greedy_decoder`` and ``tf.nn.collapse_repeated`` against TensorFlow 2.21
(``tf_reference/v1_ctc.json`` from ``tf_reference/v1_ctc_oracle.py``), eagerly and in a graph."""
import json
import os

import numpy as np
import pytest

import tensorweave.compat.v1 as tf

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf_reference", "v1_ctc.json")) as _f:
    REF = json.load(_f)


@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("blank", [None, 0, 2, -2])
def test_greedy_decoder_matches_tensorflow(merge, blank):
    ref = REF[f"{merge}_{blank}"]
    logits = np.array(REF["logits"], np.float32)
    (d,), neg = tf.nn.ctc_greedy_decoder(logits, REF["seq"], merge_repeated=merge, blank_index=blank)
    assert d.indices.numpy().tolist() == ref["indices"] and d.values.numpy().tolist() == ref["values"]
    assert d.dense_shape.numpy().tolist() == ref["dense_shape"]
    np.testing.assert_allclose(neg.numpy(), ref["neg"], rtol=1e-6)


def test_greedy_decoder_in_a_graph_and_collapse_repeated():
    ref = REF["True_None"]
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, None, 4])
        lengths = tf.placeholder(tf.int32, [None])
        (d,), neg = tf.nn.ctc_greedy_decoder(x, lengths)
        dense = tf.sparse_tensor_to_dense(d, default_value=-1)
    with tf.Session(graph=g) as sess:
        got, got_neg = sess.run([dense, neg], {x: REF["logits"], lengths: REF["seq"]})
    want = np.full(ref["dense_shape"], -1)
    for (i, j), v in zip(ref["indices"], ref["values"]):
        want[i, j] = v
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got_neg, ref["neg"], rtol=1e-6)
    c = REF["collapse"]
    collapsed, new_len = tf.nn.collapse_repeated(np.array(c["labels"], np.int32), np.array(c["lengths"], np.int32))
    assert collapsed.numpy().tolist() == c["collapsed"] and new_len.numpy().tolist() == c["new_lengths"]
    with pytest.raises(ValueError, match=r"ctc_greedy_decoder: inputs must be \[max_time, batch, num_classes\]"):
        tf.nn.ctc_greedy_decoder(np.zeros((3, 4), np.float32), [3])
