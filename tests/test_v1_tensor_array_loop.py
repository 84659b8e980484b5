"""TensorArrays as loop variables of compat.v1's ``tf.while_loop`` (TF1 code passes them so).

``tf_reference/v1_tensor_array_loop_program.py`` runs here with ``tensorweave.compat.v1`` and must
give TensorFlow 2.21's results (``tf_reference/v1_tensor_array_loop.json``)."""
import json
import os
import sys

import numpy as np
import pytest

import tensorweave.compat.v1 as tf

HERE = os.path.dirname(os.path.abspath(__file__))


def test_tensor_array_loops_match_tensorflow():
    sys.path.insert(0, os.path.join(HERE, "tf_reference"))
    try:
        import v1_tensor_array_loop_program
    finally:
        sys.path.pop(0)
    with open(os.path.join(HERE, "tf_reference", "v1_tensor_array_loop.json")) as f:
        ref = json.load(f)
    got = v1_tensor_array_loop_program.run(tf)
    for key, want in ref.items():
        np.testing.assert_allclose(got[key], want, rtol=1e-5, atol=1e-6, err_msg=key)


def test_eager_loop_and_errors():
    ta = tf.TensorArray(tf.float32, size=3)
    i, ta = tf.while_loop(lambda i, t: i < 3, lambda i, t: (i + 1, t.write(i, tf.fill([2], tf.cast(i, tf.float32)))),
                          (tf.constant(0), ta))
    assert int(i) == 3 and ta.stack().numpy().tolist() == [[0, 0], [1, 1], [2, 2]]
    with tf.Graph().as_default():
        unused = tf.TensorArray(tf.float32, size=2)
        with pytest.raises(ValueError, match="loop variable 1 is a TensorArray the body neither writes"):
            tf.while_loop(lambda i, t: i < 2, lambda i, t: (i + 1, t), (tf.constant(0), unused))
        ragged = tf.TensorArray(tf.float32, size=2)
        p = tf.placeholder(tf.float32, [None])
        with pytest.raises(ValueError, match="its element shape must be static"):
            tf.while_loop(lambda i, t: i < 2, lambda i, t: (i + 1, t.write(i, p)), (tf.constant(0), ragged))
