"""``tf.compat.v1.train`` names beyond the optimizers: checkpoint readers and helpers over the
Saver's files, monitored sessions with their hooks, queue-runner input helpers, threads."""
import os

import numpy as np
import pytest

import tensorweave.compat.v1 as tf


def _saved(tmp_path, values=((1.0, 2.0), (3.0,))):
    g = tf.Graph()
    with g.as_default():
        a = tf.get_variable("scope/a", initializer=tf.constant(list(values[0])))
        b = tf.get_variable("b", initializer=tf.constant(list(values[1])))
        saver = tf.train.Saver()
    with tf.Session(graph=g) as sess:
        sess.run([a.initializer, b.initializer])
        return saver.save(sess, os.path.join(str(tmp_path), "model"), global_step=5)


def test_load_checkpoint_reads_saver_files(tmp_path):
    path = _saved(tmp_path)
    for reader in (tf.train.load_checkpoint(path), tf.train.NewCheckpointReader(str(tmp_path))):
        assert reader.get_variable_to_shape_map() == {"b": [1], "scope/a": [2]}
        assert reader.has_tensor("scope/a") and not reader.has_tensor("c")
        assert reader.get_tensor("scope/a").tolist() == [1.0, 2.0]
        assert reader.get_variable_to_dtype_map()["b"] == tf.float32
        with pytest.raises(tf.errors.NotFoundError, match="Key c not found"):
            reader.get_tensor("c")


def test_init_from_checkpoint_by_scope_and_by_name(tmp_path):
    path = _saved(tmp_path)
    g = tf.Graph()
    with g.as_default():
        a = tf.get_variable("new/a", [2])
        b = tf.get_variable("other_b", [1])
        c = tf.get_variable("c", initializer=tf.constant([7.0]))
        tf.train.init_from_checkpoint(path, {"scope/": "new/", "b": "other_b"})
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        assert sess.run(a).tolist() == [1.0, 2.0] and sess.run(b).tolist() == [3.0]
        assert sess.run(c).tolist() == [7.0]      # not in the map: its own initializer


def test_init_from_checkpoint_rejects_shape_mismatch_and_unknown_names(tmp_path):
    path = _saved(tmp_path)
    with tf.Graph().as_default():
        tf.get_variable("a3", [3])
        with pytest.raises(ValueError, match="doesn't match"):
            tf.train.init_from_checkpoint(path, {"scope/a": "a3"})
        with pytest.raises(ValueError, match="nope is not found"):
            tf.train.init_from_checkpoint(path, {"scope/a": "nope"})
        with pytest.raises(ValueError, match="Tensor zzz is not found in .* checkpoint"):
            tf.train.init_from_checkpoint(path, {"zzz": "a3"})


def test_checkpoint_state_helpers(tmp_path):
    path = _saved(tmp_path)
    assert len(tf.train.get_checkpoint_mtimes([path, path + "-missing"])) == 1
    state = tf.train.generate_checkpoint_state_proto(str(tmp_path), "m-2", ["m-1"])
    assert state.all_model_checkpoint_paths == ["m-1", "m-2"]
    with pytest.raises(ValueError, match="must match"):
        tf.train.generate_checkpoint_state_proto(str(tmp_path), "m-2", ["m-1"], all_model_checkpoint_timestamps=[1.0])
    tf.train.update_checkpoint_state(str(tmp_path), path)
    assert tf.train.latest_checkpoint(str(tmp_path)) == path
    tf.train.remove_checkpoint(path)
    assert not tf.train.checkpoint_exists(path)


def test_monitored_session_with_hooks_and_scaffold(tmp_path):
    g = tf.Graph()
    with g.as_default():
        step = tf.train.create_global_step()
        w = tf.Variable(1.0)
        loss = tf.square(w)
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
        tf.summary.scalar("loss", loss)
        seen = []

        class Recorder(tf.train.SessionRunHook):
            def before_run(self, ctx):
                assert isinstance(ctx, tf.train.SessionRunContext)
                return tf.train.SessionRunArgs(loss)

            def after_run(self, ctx, values):
                assert isinstance(values, tf.train.SessionRunValues)
                seen.append(float(values.results))
        hooks = [Recorder(), tf.train.NanTensorHook(loss), tf.train.StopAtStepHook(last_step=3),
                 tf.train.LoggingTensorHook({"loss": loss}, every_n_iter=2),
                 tf.train.SummarySaverHook(save_steps=1, output_dir=str(tmp_path), summary_op=tf.summary.merge_all())]
        creator = tf.train.ChiefSessionCreator(scaffold=tf.train.Scaffold())
        with tf.train.MonitoredSession(session_creator=creator, hooks=hooks) as sess:
            while not sess.should_stop():
                sess.run(train)
    assert len(seen) == 3 and seen[0] == 1.0 and seen[1] < seen[0]
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(tmp_path))
    assert isinstance(creator, tf.train.SessionCreator)


def test_nan_tensor_hook_stops_with_error():
    with tf.Graph().as_default():
        x = tf.Variable(np.nan)
        with pytest.raises(tf.train.NanLossDuringTrainingError):
            with tf.train.MonitoredSession(hooks=[tf.train.NanTensorHook(x)]) as sess:
                sess.run(x)


def test_global_step_waiter_hook_passes_once_reached():
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        inc = tf.assign_add(step, 1)
        with tf.train.MonitoredSession(hooks=[tf.train.GlobalStepWaiterHook(0)]) as sess:
            assert sess.run(inc) == 1
    with tf.Graph().as_default():
        with pytest.raises(RuntimeError, match="Global step should be created"):
            tf.train.GlobalStepWaiterHook(3).begin()


def test_checkpoint_saver_listener_and_manager(tmp_path):
    calls = []

    class Listener(tf.train.CheckpointSaverListener):
        def after_save(self, session, global_step_value):
            calls.append(global_step_value)
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        inc = tf.assign_add(step, 1)
        hook = tf.train.CheckpointSaverHook(str(tmp_path), save_steps=2, listeners=[Listener()])
        with tf.train.MonitoredSession(hooks=[hook]) as sess:
            for _ in range(4):
                sess.run(inc)
    assert calls and calls[-1] == 4
    ckpt = tf.train.Checkpoint(v=tf.Variable(2.0))
    manager = tf.train.CheckpointManager(ckpt, str(tmp_path / "objects"), max_to_keep=1)
    manager.save()
    assert manager.latest_checkpoint is not None


def test_queue_input_helpers_and_queue_runner_namespace():
    with tf.Graph().as_default():
        limited = tf.train.limit_epochs(tf.constant([1, 2]), num_epochs=2)
        q = tf.train.range_input_producer(3, shuffle=False)
        item = q.dequeue()
        produced = tf.train.input_producer(tf.constant([10, 20]), shuffle=False).dequeue()
        batch = tf.train.shuffle_batch_join([[tf.constant(1)], [tf.constant(2)]], batch_size=4, capacity=8,
                                            min_after_dequeue=0, seed=1)
        kept = tf.train.maybe_shuffle_batch([tf.constant(5)], 2, 8, 0, keep_input=True, seed=1)
        kept_join = tf.train.maybe_batch_join([[tf.constant(6)]], tf.constant(True), 2)
        kept_shuffle_join = tf.train.maybe_shuffle_batch_join([[tf.constant(7)]], 2, 8, 0, True, seed=1)
        with tf.Session() as sess:
            sess.run(tf.local_variables_initializer())
            coord = tf.train.Coordinator()
            threads = tf.train.queue_runner.start_queue_runners(sess, coord)
            assert [sess.run(item) for _ in range(4)] == [0, 1, 2, 0]
            assert sess.run(produced) == 10
            got = sess.run(batch)[0].tolist()
            assert len(got) == 4 and set(got) <= {1, 2}
            assert sess.run(kept)[0].tolist() == [5, 5] and sess.run(kept_join)[0].tolist() == [6, 6]
            assert sess.run(kept_shuffle_join)[0].tolist() == [7, 7]
            assert sess.run(limited).tolist() == [1, 2] and sess.run(limited).tolist() == [1, 2]
            with pytest.raises(tf.errors.OutOfRangeError):
                sess.run(limited)
            coord.request_stop()
            coord.join(threads, ignore_live_threads=True)
    assert tf.train.queue_runner.QueueRunner is tf.train.QueueRunner
    assert tf.train.queue_runner.add_queue_runner is tf.train.add_queue_runner


def test_looper_thread_calls_target_until_stop():
    coord = tf.train.Coordinator()
    calls = []

    def target(limit):
        calls.append(1)
        if len(calls) == limit:
            coord.request_stop()
    thread = tf.train.LooperThread.loop(coord, None, target, args=(5,))
    coord.join([thread])
    assert len(calls) == 5
    with pytest.raises(ValueError, match="require that you also pass 'target'"):
        tf.train.LooperThread(coord, None, args=(1,))


def test_optimizer_base_class_and_slots():
    assert issubclass(tf.train.ProximalAdagradOptimizer, tf.train.Optimizer)
    with pytest.raises(ValueError, match="initial_accumulator_value must be positive"):
        tf.train.ProximalAdagradOptimizer(0.1, initial_accumulator_value=0.0)
    with tf.Graph().as_default():
        w = tf.Variable([1.0, 2.0])
        opt = tf.train.ProximalAdagradOptimizer(0.1)
        opt.minimize(tf.reduce_sum(w * w))
        assert opt.get_slot_names() == ["accumulator"] and opt.get_slot(w, "accumulator") is not None


def test_session_manager_initializes_then_restores(tmp_path):
    def build():
        v = tf.Variable(3.0, name="v")
        return v, tf.assign(v, 7.0), tf.train.Saver()
    g = tf.Graph()
    with g.as_default():
        v, set7, saver = build()
        manager = tf.train.SessionManager(ready_op=tf.report_uninitialized_variables())
        sess = manager.prepare_session("", init_op=tf.global_variables_initializer(), saver=saver,
                                       checkpoint_dir=str(tmp_path))
        assert sess.run(v) == 3.0
        sess.run(set7)
        saver.save(sess, str(tmp_path / "model"))
        with pytest.raises(RuntimeError, match="no init_op"):
            tf.train.SessionManager().prepare_session("")
    g2 = tf.Graph()
    with g2.as_default():
        v, _, saver = build()
        manager = tf.train.SessionManager(ready_op=tf.report_uninitialized_variables())
        sess = manager.prepare_session("", init_op=tf.global_variables_initializer(), saver=saver,
                                       checkpoint_dir=str(tmp_path))
        assert sess.run(v) == 7.0                  # restored, not initialized
        recovered, ready = manager.recover_session("", saver=saver, checkpoint_dir=str(tmp_path))
        assert ready and recovered.run(v) == 7.0
        fresh, ready = manager.recover_session("", saver=saver, checkpoint_dir=str(tmp_path / "none"))
        assert not ready

    with tf.Graph().as_default():
        tf.Variable(1.0)     # a fresh graph: its variables hold nothing yet
        with pytest.raises(RuntimeError, match="did not make model ready"):
            tf.train.SessionManager(ready_op=tf.report_uninitialized_variables()).prepare_session(
                "", init_op=tf.no_op())
        with pytest.raises(Exception, match="not ready"):
            tf.train.SessionManager(ready_op=tf.report_uninitialized_variables()).wait_for_session("")
