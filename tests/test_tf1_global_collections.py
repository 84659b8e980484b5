"""A global variable made in a TF1 graph joins the graph's collections as a local one does, so
TF1 programs find it the usual way: ``Saver()`` saves it, ``minimize()`` trains it,
``global_variables_initializer()`` covers it."""
import numpy as np
import pytest

import tensorweave as tw
import tensorweave.compat.v1 as tf

TWO = tw.placement("cpu", ranks=[0, 1])
W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)


def _train(placement, steps=3):
    with tf.Graph().as_default() as g:
        kw = dict(placement=placement, sbp=tw.sbp.split(0)) if placement else {}
        w = tw.Variable(W, name="w", **kw)
        frozen = tw.Variable(np.ones(3, np.float32), name="frozen", trainable=False, **(
            dict(placement=placement, sbp=tw.sbp.broadcast) if placement else {}))
        x = tf.placeholder(tw.float32, [2, 4])
        loss = tw.reduce_sum(tw.square(tw.matmul(x, w) - frozen))
        train = tf.train.GradientDescentOptimizer(0.05).minimize(loss)
        assert [v.name for v in tf.global_variables()] == ["w:0", "frozen:0", "iteration:0"]
        assert tf.trainable_variables() == [w]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            losses = [sess.run([train, loss], {x: X})[1] for _ in range(steps)]
            return losses, sess.run(w), g


def test_minimize_finds_and_trains_a_global_variable_as_one_device():
    losses, w, _ = _train(TWO)
    ref_losses, ref_w, _ = _train(None)
    np.testing.assert_allclose(losses, ref_losses, rtol=2e-5)
    np.testing.assert_allclose(w, ref_w, rtol=2e-5)
    assert not np.allclose(w, W)


def test_default_saver_saves_global_variables(tmp_path):
    with tf.Graph().as_default():
        w = tw.Variable(W, name="w", placement=TWO, sbp=tw.sbp.split(0))
        saver = tf.train.Saver()           # no var_list: the graph's global variables
        with tf.Session() as sess:
            path = saver.save(sess, str(tmp_path / "model"))
    np.testing.assert_array_equal(tf.train.load_variable(path, "w"), W)


def test_collections_argument():
    with tf.Graph().as_default() as g:
        tw.Variable(W, name="mine", placement=TWO, sbp=tw.sbp.split(0), collections=["mine"])
        assert [v.name for v in g.get_collection("mine")] == ["mine:0"]
        assert tf.global_variables() == []
        assert g.get_operation_by_name("mine/Initializer").type == "NoOp"

