"""TF1's tf.train.Saver on global variables (eager, and in TF1 graphs, where the pieces are
read from the per-rank variables, which live in this process whatever the session): each rank writes its pieces under the
variables' names, restore reshards onto the variables' current layouts (in a graph, each
rank's variable receives its piece; local variables are fed through the session), max_to_keep removes whole sharded checkpoints."""
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


def test_saver_in_a_tf1_graph_writes_shards_and_restores_across_layouts(tmp_path, monkeypatch):
    # in a TF1 graph the Saver reads each rank's piece (its per-rank variable), gathers nothing
    from tensorweave.distribute import layout
    gathered = []
    with tf.Graph().as_default():
        w = tw.Variable(W, placement=FOUR, sbp=tw.sbp.split(0), name="dense/kernel")
        bias = tw.Variable(np.arange(3, dtype=np.float32), placement=FOUR, sbp=tw.sbp.broadcast, name="dense/bias")
        step = tf.train.get_or_create_global_step()
        train = [w.assign_add(tf.ones((5, 3))), step.assign_add(1)]
        saver = tf.train.Saver([w, bias, step])
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train)
            monkeypatch.setattr(layout, "assemble", lambda *a: gathered.append(a) or ASSEMBLE(*a))
            path = saver.save(sess, str(tmp_path / "model"), global_step=step)
    assert gathered == []
    assert sorted(os.listdir(path + ".sharded")) == ["commit_success", "index.json"] + [
        f"shards-rank{r}.safetensors" for r in range(4)]
    from tensorweave.saving import sharded
    index = sharded.read_index(path + ".sharded")
    assert [s["file"] for s in index["variables"]["dense/bias"]["shards"]] == ["shards-rank0.safetensors"]  # one copy
    assert tf.train.latest_checkpoint(str(tmp_path)) == path
    monkeypatch.undo()
    with tf.Graph().as_default():
        w2 = tw.Variable(np.zeros((5, 3), np.float32), placement=THREE, sbp=tw.sbp.split(1), name="dense/kernel")
        b2 = tw.Variable(np.zeros(3, np.float32), placement=THREE, sbp=tw.sbp.split(0), name="dense/bias")
        step2 = tf.train.get_or_create_global_step()
        saver = tf.train.Saver([w2, b2, step2])
        with tf.Session() as sess:
            saver.restore(sess, path)
            np.testing.assert_array_equal(sess.run(w2.read_value()), W + 1)
            np.testing.assert_array_equal(sess.run(b2.read_value()), np.arange(3, dtype=np.float32))
            assert sess.run(step2) == 1
            assert [p.tolist() for p in sess.run(list(w2._locals))] == [(W + 1)[:, i:i + 1].tolist() for i in range(3)]
    w3, _ = _vars(np.zeros((5, 3), np.float32), None, None, np.zeros(3, np.float32))     # eager, one process
    tf.train.Saver({"dense/kernel": w3}).restore(None, path)
    np.testing.assert_array_equal(w3.numpy(), W + 1)


ASSEMBLE = __import__("tensorweave.distribute.layout", fromlist=["assemble"]).assemble


def test_a_checkpoint_of_tw_train_checkpoint_is_not_taken_for_a_saver_one(tmp_path):
    w, _ = _vars(W, FOUR, tw.sbp.split(0), np.ones(3, np.float32))
    prefix = tw.train.Checkpoint(w=w).write(str(tmp_path / "ckpt"))
    with pytest.raises(ValueError, match="not a tf.train.Saver checkpoint .*restore with Checkpoint.restore"):
        tf.train.Saver({"w": w}).restore(None, prefix)


def test_a_saved_shape_or_dtype_that_differs_is_refused(tmp_path):
    w, b = _vars(W, FOUR, tw.sbp.split(0), np.ones(3, np.float32))
    path = tf.train.Saver([w, b]).save(None, str(tmp_path / "model"))
    small = tw.Variable(np.zeros((4, 3), np.float32), placement=THREE, sbp=tw.sbp.split(0), name="dense/kernel")
    with pytest.raises(errors.InvalidArgumentError, match=r"dense/kernel has shape \[5, 3\] in .* but \[4, 3\]"):
        tf.train.Saver({"dense/kernel": small}).restore(None, path)
    wide = tw.Variable(np.zeros((5, 3)), placement=THREE, sbp=tw.sbp.split(0), name="dense/kernel")
    with pytest.raises(errors.InvalidArgumentError, match="dense/kernel is float32 in .* but float64"):
        tf.train.Saver({"dense/kernel": wide}).restore(None, path)
    np.testing.assert_array_equal(small.numpy(), np.zeros((4, 3)))          # nothing was assigned
