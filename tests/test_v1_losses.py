"""``tf.compat.v1.losses`` against TensorFlow 2.21's ``tf.compat.v1.losses``.

TF_VALUES were recorded once by running the same inputs through TensorFlow in the benchmark venv
(``tensorflow.compat.v1`` in graph mode); the script is the body of ``_compute`` with ``tf``
being TensorFlow.
"""
import numpy as np
import pytest

import tensorweave.compat.v1 as tf

TF_VALUES = {
    ('absolute_difference', 'SUM'): 2.0147359371185303,
    ('mean_squared_error', 'SUM'): 0.7333459854125977,
    ('huber_loss', 'SUM'): 9.372215270996094,
    ('log_loss', 'SUM'): 12.51638412475586,
    ('hinge_loss', 'SUM'): 12.097272872924805,
    ('cosine_distance', 'SUM'): 0.24771422147750854,
    ('sigmoid_cross_entropy', 'SUM'): 8.753742218017578,
    ('softmax_cross_entropy', 'SUM'): 4.708633899688721,
    ('sparse_softmax_cross_entropy', 'SUM'): 4.735829830169678,
    ('absolute_difference', 'MEAN'): 0.19187961518764496,
    ('mean_squared_error', 'MEAN'): 0.06984247267246246,
    ('huber_loss', 'MEAN'): 0.8925919532775879,
    ('log_loss', 'MEAN'): 1.1920366287231445,
    ('hinge_loss', 'MEAN'): 1.1521211862564087,
    ('cosine_distance', 'MEAN'): 0.07077549397945404,
    ('sigmoid_cross_entropy', 'MEAN'): 0.8336897492408752,
    ('softmax_cross_entropy', 'MEAN'): 1.345323920249939,
    ('sparse_softmax_cross_entropy', 'MEAN'): 1.353094220161438,
    ('absolute_difference', 'SUM_OVER_BATCH_SIZE'): 0.1678946614265442,
    ('mean_squared_error', 'SUM_OVER_BATCH_SIZE'): 0.061112165451049805,
    ('huber_loss', 'SUM_OVER_BATCH_SIZE'): 0.7810179591178894,
    ('log_loss', 'SUM_OVER_BATCH_SIZE'): 1.0430320501327515,
    ('hinge_loss', 'SUM_OVER_BATCH_SIZE'): 1.0081061124801636,
    ('cosine_distance', 'SUM_OVER_BATCH_SIZE'): 0.061928555369377136,
    ('sigmoid_cross_entropy', 'SUM_OVER_BATCH_SIZE'): 0.7294785380363464,
    ('softmax_cross_entropy', 'SUM_OVER_BATCH_SIZE'): 1.1771584749221802,
    ('sparse_softmax_cross_entropy', 'SUM_OVER_BATCH_SIZE'): 1.1839574575424194,
    ('absolute_difference', 'SUM_BY_NONZERO_WEIGHTS'): 0.22385954856872559,
    ('mean_squared_error', 'SUM_BY_NONZERO_WEIGHTS'): 0.0814828872680664,
    ('huber_loss', 'SUM_BY_NONZERO_WEIGHTS'): 1.0413572788238525,
    ('log_loss', 'SUM_BY_NONZERO_WEIGHTS'): 1.390709400177002,
    ('hinge_loss', 'SUM_BY_NONZERO_WEIGHTS'): 1.3441414833068848,
    ('cosine_distance', 'SUM_BY_NONZERO_WEIGHTS'): 0.08257140964269638,
    ('sigmoid_cross_entropy', 'SUM_BY_NONZERO_WEIGHTS'): 0.9726380109786987,
    ('softmax_cross_entropy', 'SUM_BY_NONZERO_WEIGHTS'): 1.5695446729660034,
    ('sparse_softmax_cross_entropy', 'SUM_BY_NONZERO_WEIGHTS'): 1.5786099433898926,
    ('mean_pairwise_squared_error', 'default'): 0.6097209453582764,
    ('total', 'default'): 77.38956451416016,
}
REDUCTIONS = ["SUM", "MEAN", "SUM_OVER_BATCH_SIZE", "SUM_BY_NONZERO_WEIGHTS"]


def _inputs():
    rng = np.random.RandomState(0)
    y = rng.rand(4, 3).astype(np.float32)
    p = rng.rand(4, 3).astype(np.float32)
    lab01 = (rng.rand(4, 3) > 0.5).astype(np.float32)
    logits = rng.randn(4, 3).astype(np.float32)
    onehot = np.eye(3, dtype=np.float32)[[0, 2, 1, 2]]
    sparse = np.array([0, 2, 1, 2])
    w = np.array([[1.0], [0.0], [2.0], [0.5]], np.float32)
    return y, p, lab01, logits, onehot, sparse, w


def _compute():
    y, p, lab01, logits, onehot, sparse, w = _inputs()
    R = tf.losses.Reduction
    out = {}
    for red in REDUCTIONS:
        r = getattr(R, red)
        out[("absolute_difference", red)] = tf.losses.absolute_difference(y, p, weights=w, reduction=r)
        out[("mean_squared_error", red)] = tf.losses.mean_squared_error(y, p, weights=w, reduction=r)
        out[("huber_loss", red)] = tf.losses.huber_loss(y, p * 3, weights=w, delta=0.7, reduction=r)
        out[("log_loss", red)] = tf.losses.log_loss(lab01, p, weights=w, reduction=r)
        out[("hinge_loss", red)] = tf.losses.hinge_loss(lab01, logits, weights=w, reduction=r)
        out[("cosine_distance", red)] = tf.losses.cosine_distance(
            tf.nn.l2_normalize(y, 1), tf.nn.l2_normalize(p, 1), axis=1, weights=w, reduction=r)
        out[("sigmoid_cross_entropy", red)] = tf.losses.sigmoid_cross_entropy(
            lab01, logits, weights=w, label_smoothing=0.1, reduction=r)
        out[("softmax_cross_entropy", red)] = tf.losses.softmax_cross_entropy(
            onehot, logits, weights=w[:, 0], label_smoothing=0.2, reduction=r)
        out[("sparse_softmax_cross_entropy", red)] = tf.losses.sparse_softmax_cross_entropy(
            sparse, logits, weights=w, reduction=r)
    out[("mean_pairwise_squared_error", "default")] = tf.losses.mean_pairwise_squared_error(y, p, weights=w)
    out[("total", "default")] = tf.losses.get_total_loss()
    return out


def test_losses_match_tensorflow_compat_v1():
    g = tf.Graph()
    with g.as_default():
        tensors = _compute()
    with tf.Session(graph=g) as sess:
        values = sess.run(tensors)
    assert set(values) == set(TF_VALUES)
    for key, want in TF_VALUES.items():
        np.testing.assert_allclose(values[key], want, rtol=2e-5, atol=1e-6, err_msg=str(key))


def test_reduction_none_keeps_the_weighted_elements():
    y, p, *_, w = _inputs()
    g = tf.Graph()
    with g.as_default():
        loss = tf.losses.absolute_difference(y, p, weights=w, reduction=tf.losses.Reduction.NONE)
    with tf.Session(graph=g) as sess:
        np.testing.assert_allclose(sess.run(loss), np.abs(p - y) * w, rtol=1e-6)


def test_losses_collection_and_total_with_regularization():
    g = tf.Graph()
    with g.as_default():
        a = tf.losses.mean_squared_error([1.0], [3.0])
        tf.losses.add_loss(tf.constant(0.5))
        tf.add_to_collection("regularization_losses", tf.constant(0.25))
        assert len(tf.losses.get_losses()) == 2
        total = tf.losses.get_total_loss()
        without_reg = tf.losses.get_total_loss(add_regularization_losses=False)
        reg = tf.losses.get_regularization_loss()
    with tf.Session(graph=g) as sess:
        assert sess.run([a, total, without_reg, reg]) == pytest.approx([4.0, 4.75, 4.5, 0.25])


def test_loss_gradients_flow_to_logits_only():
    g = tf.Graph()
    with g.as_default():
        logits = tf.Variable([[1.0, 2.0, 0.5]])
        labels = tf.Variable([[0.0, 1.0, 0.0]])
        loss = tf.losses.softmax_cross_entropy(labels, logits)
        g_logits, g_labels = tf.gradients(loss, [logits, labels])
        init = tf.global_variables_initializer()
    assert g_labels is None
    with tf.Session(graph=g) as sess:
        sess.run(init)
        z = np.array([1.0, 2.0, 0.5])
        softmax = np.exp(z) / np.exp(z).sum()
        np.testing.assert_allclose(sess.run(g_logits)[0], softmax - [0, 1, 0], rtol=1e-5)


def test_bad_inputs_name_the_loss_and_shapes():
    g = tf.Graph()
    with g.as_default():
        with pytest.raises(ValueError, match=r"mean_squared_error: predictions shape \(2, ?3\).*labels shape"):
            tf.losses.mean_squared_error(np.zeros((2, 2), np.float32), np.zeros((2, 3), np.float32))
        with pytest.raises(ValueError, match="Invalid Reduction Key 'bogus'"):
            tf.losses.mean_squared_error([1.0], [2.0], reduction="bogus")
        with pytest.raises(ValueError, match="no losses were added"):
            tf.losses.get_total_loss()
        with pytest.raises(ValueError, match="specify 'axis'"):
            tf.losses.cosine_distance([1.0], [1.0])
