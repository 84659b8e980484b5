"""A TF1 ``tf.train.Supervisor`` training program, run by TensorFlow 2.21 (``v1_supervisor_oracle.py``)
and by tensorweave (``tests/test_v1_supervisor.py``) with only the ``tf`` module swapped: train in
``managed_session``, save, end on ``OutOfRangeError``, resume from the checkpoint in a new graph,
re-raise other errors. Timed services are off (``save_model_secs=0``) so the run is deterministic."""
import os

import numpy as np

X = np.linspace(-1.0, 1.0, 8, dtype=np.float32).reshape(8, 1)
Y = 3.0 * X - 0.5


def _model(tf):
    w = tf.Variable(tf.zeros([1, 1]), name="w")
    b = tf.Variable(0.0, name="b")
    loss = tf.reduce_mean(tf.square(tf.matmul(tf.constant(X), w) + b - tf.constant(Y)))
    step = tf.train.get_or_create_global_step()
    return w, step, tf.train.GradientDescentOptimizer(0.3).minimize(loss, global_step=step)


def run(tf, logdir):
    out = {}
    with tf.Graph().as_default():
        w, step, train = _model(tf)
        sv = tf.train.Supervisor(logdir=logdir, save_model_secs=0, save_summaries_secs=0)
        try:
            tf.constant(1.0)
            out["finalized"] = False
        except RuntimeError:
            out["finalized"] = True
        with sv.managed_session() as sess:
            for _ in range(5):
                sess.run(train)
            out["w"] = sess.run(w).tolist()
            sv.saver.save(sess, sv.save_path, global_step=sv.global_step)
            raise tf.errors.OutOfRangeError(None, None, "the input ended")     # ends the loop quietly
        out["stopped"] = sv.should_stop()
    with tf.Graph().as_default():
        w, step, train = _model(tf)
        sv = tf.train.Supervisor(logdir=logdir, save_model_secs=0, save_summaries_secs=0)
        with sv.managed_session() as sess:
            out["restored_step"] = int(sess.run(step))
            out["restored_w"] = sess.run(w).tolist()
            for _ in range(3):
                sess.run(train)
            out["w_after"] = sess.run(w).tolist()
    with tf.Graph().as_default():
        _model(tf)
        sv = tf.train.Supervisor(logdir=logdir, save_model_secs=0, save_summaries_secs=0)
        try:
            with sv.managed_session():
                raise ValueError("boom")
        except ValueError as e:
            out["reraised"] = str(e)
    out["latest"] = os.path.basename(tf.train.latest_checkpoint(logdir))
    out["graph_written"] = os.path.exists(os.path.join(logdir, "graph.pbtxt"))
    return out
