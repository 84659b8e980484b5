"""TF1's checkpoint utilities on Saver checkpoints (issue 15): readers, state-file helpers,
``init_from_checkpoint``, ``warm_start``, ``checkpoints_iterator``; results as TensorFlow 2.21's
``tf.compat.v1`` gives them on the same snippet."""
import os

import numpy as np
import pytest

import tensorweave.compat.v1 as tf


@pytest.fixture
def ckpt(tmp_path):
    with tf.Graph().as_default():
        with tf.variable_scope("old"):
            a = tf.get_variable("a", initializer=tf.constant([1.0, 2.0]))
            b = tf.get_variable("b", initializer=tf.constant(3.0))
        with tf.Session() as sess:
            sess.run([a.initializer, b.initializer])
            prefix = tf.train.Saver().save(sess, str(tmp_path / "m"), global_step=1)
    return str(tmp_path), prefix


def test_readers(ckpt):
    d, prefix = ckpt
    r = tf.train.load_checkpoint(d)
    assert r.has_tensor("old/a") and not r.has_tensor("old/c")
    assert r.get_tensor("old/a").tolist() == [1.0, 2.0]
    assert sorted(r.get_variable_to_shape_map().items()) == [("old/a", [2]), ("old/b", [])]
    assert r.get_variable_to_dtype_map()["old/b"] == tf.float32
    with pytest.raises(tf.errors.NotFoundError, match="old/c"):
        r.get_tensor("old/c")
    assert tf.train.NewCheckpointReader(prefix).get_tensor("old/b") == 3.0
    assert len(tf.train.get_checkpoint_mtimes([prefix, prefix + "-gone"])) == 1
    assert list(tf.train.checkpoints_iterator(d, timeout=0)) == [prefix]
    tf.train.remove_checkpoint(prefix)
    assert not os.path.exists(prefix + ".meta") and tf.train.latest_checkpoint(d) is None


def test_state_file_helpers(ckpt):
    d, prefix = ckpt
    st = tf.train.generate_checkpoint_state_proto(d, prefix, [prefix])
    assert st.model_checkpoint_path == prefix and st.all_model_checkpoint_paths == [prefix]
    tf.train.update_checkpoint_state(d, prefix + "x", [prefix, prefix + "x"])
    state = tf.train.get_checkpoint_state(d)
    assert state.model_checkpoint_path.endswith("m-1x") and len(state.all_model_checkpoint_paths) == 2


def test_init_from_checkpoint_scopes_and_variables(ckpt):
    d, _ = ckpt
    with tf.Graph().as_default():
        with tf.variable_scope("new"):
            a2 = tf.get_variable("a", [2])
            b2 = tf.get_variable("b", [])
        c = tf.get_variable("c", [2])
        tf.train.init_from_checkpoint(d, {"old/": "new/", "old/a": c})
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            got = sess.run([a2, b2, c])
        # TF 2.21: [array([1., 2.]), 3.0, array([1., 2.])]
        assert got[0].tolist() == [1.0, 2.0] and got[1] == 3.0 and got[2].tolist() == [1.0, 2.0]
        with pytest.raises(ValueError, match="old/zz is not found"):
            tf.train.init_from_checkpoint(d, {"old/zz": c})
        with pytest.raises(ValueError, match="doesn't match"):
            tf.train.init_from_checkpoint(d, {"old/b": c})


def test_warm_start_only_the_chosen(ckpt):
    d, _ = ckpt
    with tf.Graph().as_default():
        with tf.variable_scope("old"):
            a3 = tf.get_variable("a", [2])
            b3 = tf.get_variable("b", [], initializer=tf.constant_initializer(-1.0))
        tf.train.warm_start(d, vars_to_warm_start="old/a")
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            assert sess.run(a3).tolist() == [1.0, 2.0] and sess.run(b3) == -1.0


def test_estimator_namespace_has_the_saving_hooks():
    assert tf.estimator.CheckpointSaverHook is tf.train.CheckpointSaverHook
    assert tf.estimator.SummarySaverHook is tf.train.SummarySaverHook
