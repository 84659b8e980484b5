"""TensorFlow 2.21's ``tf.compat.v1.nn.ctc_greedy_decoder`` and ``collapse_repeated`` on fixed inputs,
written to ``v1_ctc.json`` for ``tests/test_v1_ctc.py``. Run with the benchmark venv::

    ~/.cache/tensorweave/bench-tf-venv/bin/python tests/tf_reference/v1_ctc_oracle.py tests/tf_reference/v1_ctc.json
"""
import json
import sys

import numpy as np


def main(path):
    import tensorflow.compat.v1 as tf
    rng = np.random.RandomState(0)
    logits = rng.randn(6, 3, 4).astype(np.float32)
    logits[1, 0] = logits[0, 0]
    logits[2, 1, 3] = logits[3, 1, 3] = 9.0
    seq = np.array([6, 4, 2], np.int32)
    out = {"logits": logits.tolist(), "seq": seq.tolist()}
    for merge in (True, False):
        for blank in (None, 0, 2, -2):
            (d,), nl = tf.nn.ctc_greedy_decoder(tf.constant(logits), seq, merge_repeated=merge, blank_index=blank)
            out[f"{merge}_{blank}"] = {"indices": d.indices.numpy().tolist(), "values": d.values.numpy().tolist(),
                                       "dense_shape": d.dense_shape.numpy().tolist(), "neg": nl.numpy().tolist()}
    labels = np.array([[1, 1, 2, 2, 2, 3], [4, 4, 4, 4, 0, 0], [5, 6, 6, 5, 5, 7]], np.int32)
    lengths = np.array([6, 3, 5], np.int32)
    collapsed, new_len = tf.nn.collapse_repeated(labels, lengths)
    out["collapse"] = {"labels": labels.tolist(), "lengths": lengths.tolist(),
                       "collapsed": collapsed.numpy().tolist(), "new_lengths": new_len.numpy().tolist()}
    with open(path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1])
