"""TF1's ``tf.train.Supervisor`` (single-process chief).

``tf_reference/v1_supervisor_program.py`` runs here with ``tensorweave.compat.v1`` and must give
TensorFlow 2.21's results (``tf_reference/v1_supervisor.json``)."""
import json
import os
import sys
import threading

import numpy as np
import pytest

import tensorweave.compat.v1 as tf

HERE = os.path.dirname(os.path.abspath(__file__))


def test_supervised_training_matches_tensorflow(tmp_path):
    sys.path.insert(0, os.path.join(HERE, "tf_reference"))
    try:
        import v1_supervisor_program
    finally:
        sys.path.pop(0)
    with open(os.path.join(HERE, "tf_reference", "v1_supervisor.json")) as f:
        ref = json.load(f)
    got = v1_supervisor_program.run(tf, str(tmp_path))
    for key in ("w", "restored_w", "w_after"):
        np.testing.assert_allclose(got[key], ref[key], rtol=1e-5, err_msg=key)
    for key in ("finalized", "stopped", "restored_step", "reraised", "latest", "graph_written"):
        assert got[key] == ref[key], key


def test_services_loop_and_summaries(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        tf.summary.scalar("step_value", tf.cast(step, tf.float32))
        train = tf.assign_add(step, 1)
        sv = tf.train.Supervisor(logdir=str(tmp_path), save_model_secs=3600, save_summaries_secs=3600)
        ran = threading.Event()
        with sv.managed_session() as sess:
            sv.loop(3600, ran.set)             # a looper runs its target at once, then every interval
            assert ran.wait(60)
            sess.run(train)
            sv.summary_computed(sess, sess.run(sv.summary_op))
        assert sv.should_stop()
    assert tf.train.latest_checkpoint(str(tmp_path)) is not None     # the checkpoint thread's first save
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert 1 in [e.step for e in acc.Scalars("step_value")]
    with pytest.raises(ValueError, match="is_chief=False .* needs several processes"):
        with tf.Graph().as_default():
            tf.train.Supervisor(is_chief=False)


def test_basic_train_loop_runs_until_a_stop_and_retries_after_an_abort(tmp_path):
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        train = tf.assign_add(step, 1)
        sv = tf.train.Supervisor(logdir=str(tmp_path), save_model_secs=0, save_summaries_secs=0)
        seen = []

        def train_step(sess, limit):
            seen.append(int(sess.run(train)))
            if len(seen) == 2:
                raise tf.errors.AbortedError(None, None, "the session was aborted")
            if seen[-1] >= limit:
                sv.request_stop()
        tf.train.basic_train_loop(sv, train_step, args=(3,))
    assert seen == [1, 2, 1, 2, 3]       # the abort started a fresh session (no checkpoint: from zero)
