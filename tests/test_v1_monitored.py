"""``tf.train.MonitoredTrainingSession``: init or restore, hooks, checkpoints, summaries, input end."""
import os

import numpy as np
import pytest

import tensorweave.compat.v1 as tf
from tensorweave.compat.v1_monitored import load_variable


def _graph(steps_per_epoch=None):
    g = tf.Graph()
    with g.as_default():
        step = tf.train.get_or_create_global_step()
        w = tf.Variable(4.0, name="w")
        loss = tf.square(w)
        train = tf.train.GradientDescentOptimizer(0.25).minimize(loss, global_step=step)
        tf.summary.scalar("loss", loss)
    return g, step, w, train


def test_checkpoints_and_resume(tmp_path):
    d = str(tmp_path)
    g, step, w, train = _graph()
    with g.as_default():
        with tf.train.MonitoredTrainingSession(checkpoint_dir=d, save_checkpoint_steps=2, save_summaries_steps=1,
                                               hooks=[tf.train.StopAtStepHook(last_step=3)]) as sess:
            while not sess.should_stop():
                sess.run(train)
    files = sorted(f for f in os.listdir(d) if f.startswith("model.ckpt-") and not f.endswith(".meta"))
    assert files == ["model.ckpt-0.safetensors", "model.ckpt-2.safetensors", "model.ckpt-3.safetensors"]
    assert load_variable(d, "w") == pytest.approx(0.5)
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(d))
    # A new graph and session in the same directory resume at step 3.
    g, step, w, train = _graph()
    with g.as_default():
        with tf.train.MonitoredTrainingSession(checkpoint_dir=d, hooks=[tf.train.StopAtStepHook(num_steps=2)]) as sess:
            assert sess.run(step) == 3
            while not sess.should_stop():
                sess.run(train)
    assert load_variable(d, "global_step") == 5 and load_variable(d, "w") == pytest.approx(0.125)


def test_end_of_queue_input_ends_the_loop_cleanly():
    g = tf.Graph()
    with g.as_default():
        x = tf.train.slice_input_producer([np.arange(10, dtype=np.float32)], num_epochs=2, shuffle=False)[0]
        total = tf.Variable(0.0)
        add = tf.assign_add(total, x)
        seen = []

        class Record(tf.train.SessionRunHook):
            def end(self, session):
                seen.append(float(session.run(total)))
        with tf.train.SingularMonitoredSession(hooks=[Record()]) as sess:
            while not sess.should_stop():
                sess.run(add)
    assert seen == [90.0]


def test_an_error_in_the_loop_propagates_without_running_end_hooks():
    g, step, w, train = _graph()
    ended = []

    class End(tf.train.SessionRunHook):
        def end(self, session):
            ended.append(True)
    with g.as_default():
        with pytest.raises(ValueError, match="boom"):
            with tf.train.MonitoredTrainingSession(hooks=[End()]) as sess:
                sess.run(train)
                raise ValueError("boom")
    assert ended == []


def test_hook_fetches_and_stop_request():
    g, step, w, train = _graph()
    values = []

    class Watch(tf.train.SessionRunHook):
        def before_run(self, run_context):
            return tf.train.SessionRunArgs(w)

        def after_run(self, run_context, run_values):
            values.append(float(run_values.results))
            if len(values) == 3:
                run_context.request_stop()
    with g.as_default():
        with tf.train.MonitoredTrainingSession(hooks=[Watch()]) as sess:
            while not sess.should_stop():
                sess.run(train)
    assert len(values) == 3
    with pytest.raises(ValueError, match="exactly one of save_secs and save_steps"):
        tf.train.CheckpointSaverHook("/tmp", save_secs=1, save_steps=1)


def test_feed_final_ops_and_step_counter_hooks(monkeypatch):
    import itertools

    from tensorweave.estimator import hooks
    ticks = itertools.count()
    monkeypatch.setattr(hooks, "_now", lambda: 0.5 * next(ticks))   # a clock, not the machine's speed
    g = tf.Graph()
    with g.as_default():
        step = tf.train.get_or_create_global_step()
        x = tf.placeholder(tf.float32, [])
        total = tf.Variable(0.0)
        add = tf.group(tf.assign_add(total, x), tf.assign_add(step, 1))
        feeds = iter(range(1, 100))
        final = tf.train.FinalOpsHook(total)
        counter = tf.train.StepCounterHook(every_n_steps=2)
        hooks = [tf.train.FeedFnHook(lambda: {x: float(next(feeds))}), final, counter,
                 tf.train.StopAtStepHook(last_step=6)]
        with tf.train.MonitoredTrainingSession(hooks=hooks) as sess:
            while not sess.should_stop():
                sess.run(add)
    assert final.final_ops_values == 21.0
    assert len(counter.steps_per_sec) >= 1
    assert counter.steps_per_sec == [4.0, 4.0]   # triggers at steps 1, 3, 5: 2 steps per 0.5 s tick
    timer = tf.train.SecondOrStepTimer(every_steps=3)
    assert timer.should_trigger_for_step(0)
    timer.update_last_triggered_step(0)
    assert [timer.should_trigger_for_step(s) for s in (1, 2, 3)] == [False, False, True]
