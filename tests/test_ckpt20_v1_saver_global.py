"""TF1's tf.train.Saver on global variables (eager, and in TF1 graphs, where
the graph-mode Saver writes them gathered): each rank writes its pieces under the variables' names, restore reshards onto the
variables' current layouts, max_to_keep removes whole sharded checkpoints."""
import os

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.compat.v1 as tf
from tensorweave.core import errors

FOUR, THREE = tw.placement("cpu", ranks=[0, 1, 2, 3]), tw.placement("cpu", ranks=[0, 1, 2])
W = np.arange(15.0, dtype=np.float32).reshape(5, 3)


def _vars(w_value, placement, sbp, bias):
    w = tw.Variable(w_value, placement=placement, sbp=sbp, name="dense/kernel") if placement else \
        tw.Variable(w_value, name="dense/kernel")
    return w, tw.Variable(bias, name="dense/bias")


def test_saver_round_trip_reshards(tmp_path):
    w, b = _vars(W, FOUR, tw.sbp.split(0), np.ones(3, np.float32))
    saver = tf.train.Saver([w, b], max_to_keep=2)
    for step in range(3):
        w.assign(W + step)
        path = saver.save(None, str(tmp_path / "model"), global_step=step)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model-1.sharded", "model-2.sharded"]
    assert tf.train.latest_checkpoint(str(tmp_path)) == path
    assert tf.train.list_variables(str(tmp_path)) == [("dense/bias", [3]), ("dense/kernel", [5, 3])]
    np.testing.assert_array_equal(tf.train.load_variable(str(tmp_path), "dense/kernel"), W + 2)
    for placement, sbp in ((THREE, tw.sbp.split(1)), (None, None)):
        w2, b2 = _vars(np.zeros((5, 3), np.float32), placement, sbp, np.zeros(3, np.float32))
        tf.train.Saver([w2, b2]).restore(None, path)
        np.testing.assert_array_equal(w2.numpy(), W + 2)
        np.testing.assert_array_equal(b2.numpy(), np.ones(3, np.float32))
    w3, _ = _vars(np.zeros((5, 3), np.float32), THREE, tw.sbp.split(0), np.zeros(3, np.float32))
    other = tw.Variable(np.zeros(2, np.float32), name="other")
    with pytest.raises(errors.NotFoundError, match="key other not found in checkpoint"):
        tf.train.Saver([w3, other]).restore(None, path)


def test_saver_in_a_tf1_graph_saves_and_restores_global_variables_across_layouts(tmp_path):
    # global variables in TF1 graphs are planned per rank; the graph-mode Saver writes them gathered
    with tf.Graph().as_default():
        w = tw.Variable(W, placement=FOUR, sbp=tw.sbp.split(0), name="dense/kernel")
        step = w.assign_add(tf.ones((5, 3)))
        saver = tf.train.Saver([w])
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(step)
            path = saver.save(sess, str(tmp_path / "model"), global_step=1)
    assert tf.train.latest_checkpoint(str(tmp_path)) == path
    with tf.Graph().as_default():
        w2 = tw.Variable(np.zeros((5, 3), np.float32), placement=THREE, sbp=tw.sbp.split(1), name="dense/kernel")
        saver = tf.train.Saver([w2])
        with tf.Session() as sess:
            saver.restore(sess, path)
            np.testing.assert_array_equal(sess.run(w2.read_value()), W + 1)


