"""TF1 graphs over global variables with placeholders of open shape (``[None, 4]``, the usual
TF1 batch dimension): each ``Session.run`` is planned for the fed shapes (one plan per batch
size, cached), equal to one-device training; the shape refinement behind it is per thread and
leaves the graph as it was."""
import threading

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.compat.v1 as tf
from tensorweave.core.graph import refined_shapes
from tensorweave.runtime.executor import prune

BATCHES = (2, 5, 2, 3)


def _train(placement, sbp):
    with tf.Graph().as_default():
        kw = dict(placement=placement, sbp=sbp) if placement else {}
        w = tw.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 12, name="w", **kw)
        x = tf.placeholder(tw.float32, [None, 4])
        y = tf.placeholder(tw.int64, [None])
        logits = tw.reshape(tw.matmul(x, w), [-1, 3])
        loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.train.AdamOptimizer(0.1).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            losses = []
            for n in BATCHES:
                xs = np.random.RandomState(n).randn(n, 4).astype(np.float32)
                losses.append(sess.run([train, loss], {x: xs, y: np.arange(n) % 3})[1])
            planned = [k for k in sess._plans if len(k) > 4]     # keys carrying fed shapes
            return np.array(losses), sess.run(w), planned


@pytest.mark.parametrize("ranks,sbp", [([0, 1], tw.sbp.split(1)), ([0, 1, 2], tw.sbp.split(0)),
                                       ([0, 1], tw.sbp.broadcast)])
def test_open_batch_dimension_trains_as_one_device(ranks, sbp):
    losses, w, planned = _train(tw.placement("cpu", ranks=ranks), sbp)
    ref_losses, ref_w, _ = _train(None, None)
    np.testing.assert_allclose(losses, ref_losses, rtol=2e-5)
    np.testing.assert_allclose(w, ref_w, rtol=2e-5, atol=1e-7)
    # one plan per distinct batch size of the training signature
    assert sorted({k[-2:] for k in planned}) == [((n, 4), (n,)) for n in sorted(set(BATCHES))]


def test_refinement_is_per_thread_and_leaves_the_graph_alone():
    with tf.Graph().as_default():
        x = tf.placeholder(tw.float32, [None, 4])
        y = tw.reduce_sum(tw.reshape(tw.matmul(x, tw.ones((4, 3))), [-1]), keepdims=True) + tw.zeros_like(x[:, :1])
        ops = prune([y], [], {id(x): 0})
        seen = []
        with refined_shapes(ops, {x: (6, 4)}):
            assert y.shape.as_list() == [6, 1]
            other = threading.Thread(target=lambda: seen.append(y.shape.as_list()))
            other.start()
            other.join()
        assert seen == [[None, 1]]
        assert y.shape.as_list() == [None, 1] and x.shape.as_list() == [None, 4]
