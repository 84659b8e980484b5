"""The Estimator's and MonitoredTrainingSession's checkpoints are ``tf.train.Saver`` checkpoints
(issue 15): TF1 tools (``latest_checkpoint``, ``Saver.restore``, ``load_variable``/``list_variables``,
``import_meta_graph``) read a model_dir, and an Estimator warm-starts from a Saver's files."""
import os

import numpy as np

import tensorweave.compat.v1 as tf


def _data(n=200, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 2).astype(np.float32)
    return x, (x[:, 0] + 2 * x[:, 1] > 0).astype(np.int64)


def _model_fn(features, labels, mode, params):
    x = tf.identity(features["x"], name="features")
    w = tf.get_variable("w", [2, 2], initializer=tf.zeros_initializer())
    b = tf.get_variable("b", [2], initializer=tf.zeros_initializer())
    logits = tf.add(tf.matmul(x, w), b, name="logits")
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"logits": logits})
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=tf.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def _input(x, y):
    return tf.estimator.inputs.numpy_input_fn({"x": x}, y, batch_size=32, num_epochs=None, shuffle=True)


def test_tf1_tools_read_an_estimator_model_dir(tmp_path):
    x, y = _data()
    est = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path))
    est.train(_input(x, y), steps=20)
    latest = tf.train.latest_checkpoint(str(tmp_path))
    assert os.path.basename(latest) == "model.ckpt-20" and os.path.exists(latest + ".meta")
    names = dict(tf.train.list_variables(str(tmp_path)))
    assert names["w"] == [2, 2] and names["b"] == [2] and names["global_step"] == []
    w = tf.train.load_variable(str(tmp_path), "w")
    np.testing.assert_array_equal(w, est.get_variable_value("w"))
    assert int(tf.train.load_variable(latest, "global_step")) == 20
    # A TF1 graph with the same names restores it with a plain Saver ...
    with tf.Graph().as_default():
        wv = tf.get_variable("w", [2, 2])
        restorer = tf.train.Saver([wv])
        with tf.Session() as sess:
            restorer.restore(sess, latest)
            np.testing.assert_array_equal(sess.run(wv), w)
    # ... and import_meta_graph brings back the model itself.
    with tf.Graph().as_default() as g:
        saver = tf.train.import_meta_graph(latest + ".meta")
        with tf.Session() as sess:
            saver.restore(sess, latest)
            got = sess.run(g.get_tensor_by_name("logits:0"), {g.get_tensor_by_name("features:0"): x[:4]})
    np.testing.assert_allclose(got, x[:4] @ w + est.get_variable_value("b"), rtol=1e-5)


def test_estimator_warm_starts_from_a_saver_checkpoint(tmp_path):
    start = np.array([[1.0, -1.0], [2.0, -2.0]], np.float32)
    with tf.Graph().as_default():
        w = tf.get_variable("w", initializer=start)
        saver = tf.train.Saver()
        os.makedirs(tmp_path / "src")
        with tf.Session() as sess:
            sess.run(w.initializer)
            saver.save(sess, str(tmp_path / "src" / "model.ckpt"), global_step=7)
    x, y = _data()
    settings = tf.estimator.WarmStartSettings(str(tmp_path / "src"), vars_to_warm_start="w")
    est = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path / "dst"), warm_start_from=settings)
    seen = []

    class Peek(tf.train.SessionRunHook):
        def after_create_session(self, session, coord):
            seen.append(session.run(tf.get_default_graph().get_tensor_by_name("w:0")))
    est.train(_input(x, y), steps=1, hooks=[Peek()])
    np.testing.assert_array_equal(seen[0], start)


def test_monitored_session_checkpoints_are_saver_checkpoints(tmp_path):
    d = str(tmp_path)
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        w = tf.Variable(5.0, name="w")
        other = tf.Variable(1.0, name="other")
        train = tf.train.GradientDescentOptimizer(0.25).minimize(tf.square(w), global_step=step)
        # A Scaffold's saver is the one used (TF1): here it leaves `other` out.
        scaffold = tf.train.Scaffold(saver=tf.train.Saver([w, step]))
        with tf.train.MonitoredTrainingSession(checkpoint_dir=d, scaffold=scaffold,
                                               hooks=[tf.train.StopAtStepHook(last_step=4)]) as sess:
            while not sess.should_stop():
                sess.run(train)
            del other
    latest = tf.train.latest_checkpoint(d)
    assert os.path.basename(latest) == "model.ckpt-4"
    assert [n for n, _ in tf.train.list_variables(d)] == ["global_step", "w"]
    assert float(tf.train.load_variable(d, "w")) == 0.3125
    with tf.Graph().as_default():
        wv = tf.Variable(0.0, name="w")
        with tf.Session() as sess:
            tf.train.Saver({"w": wv}).restore(sess, latest)
            assert sess.run(wv) == 0.3125
