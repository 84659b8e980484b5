"""TF1 iterators over fed values (issue 15): ``from_tensor_slices(placeholder)`` with an
initializable iterator, reinitializable iterators (``from_structure`` + ``make_initializer``) and
feedable iterators (``string_handle`` / ``from_string_handle``). Expected values are TensorFlow
2.21's ``tf.compat.v1`` on the same snippets."""
import numpy as np
import pytest

import tensorweave.compat.v1 as tf


def test_placeholder_fed_initializable_iterator():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 2])
        y = tf.placeholder(tf.int64, [None])
        ds = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2, b)).batch(2)
        it = ds.make_initializable_iterator()
        nx, ny = it.get_next()
        assert nx.shape.as_list() == [None, 2] and ny.shape.as_list() == [None]
        with tf.Session() as sess:
            with pytest.raises(tf.errors.FailedPreconditionError, match="not been initialized"):
                sess.run(nx)
            sess.run(it.initializer, {x: np.arange(6, dtype=np.float32).reshape(3, 2), y: [0, 1, 2]})
            a, b = sess.run([nx, ny])
            np.testing.assert_array_equal(a, [[0, 2], [4, 6]])
            np.testing.assert_array_equal(b, [0, 1])
            a, b = sess.run([nx, ny])
            np.testing.assert_array_equal(a, [[8, 10]])
            with pytest.raises(tf.errors.OutOfRangeError):
                sess.run(nx)
            sess.run(it.initializer, {x: np.ones((1, 2), np.float32), y: [5]})   # a new feed, a new pass
            assert sess.run(ny).tolist() == [5]
            with pytest.raises(tf.errors.InvalidArgumentError, match="Placeholder"):
                sess.run(it.initializer)                                          # nothing fed


def test_fed_dataset_with_constants_shuffle_repeat_and_from_tensors():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.int32, [None])
        ds = tf.data.Dataset.from_tensor_slices({"x": x, "c": np.array([7, 8, 9])})
        it = ds.shuffle(10, seed=1).repeat(2).batch(6).make_initializable_iterator()
        nxt = it.get_next()
        single = tf.data.Dataset.from_tensors(x).make_initializable_iterator()
        one = single.get_next()
        with tf.Session() as sess:
            sess.run([it.initializer, single.initializer], {x: [1, 2, 3]})
            got = sess.run(nxt)
            assert sorted(got["x"].tolist()) == [1, 1, 2, 2, 3, 3]
            assert all(c == x_ + 6 for x_, c in zip(got["x"], got["c"]))
            assert sess.run(one).tolist() == [1, 2, 3]


def test_one_shot_iterator_over_a_placeholder_is_refused():
    # TF: ValueError "Cannot capture a placeholder (...) by value."
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None])
        with pytest.raises(ValueError, match="Cannot capture a placeholder.*make_initializable_iterator"):
            tf.data.Dataset.from_tensor_slices(x).make_one_shot_iterator()
        with pytest.raises(tf.errors.InvalidArgumentError, match="scalar"):
            tf.data.Dataset.from_tensor_slices(tf.placeholder(tf.float32, []))


def test_reinitializable_train_and_validation_iterators():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None])
        train = tf.data.Dataset.range(5).map(lambda v: v * 10)
        val = tf.data.Dataset.range(3)
        it = tf.data.Iterator.from_structure(train.output_types, train.output_shapes)
        nxt = it.get_next()
        train_init, val_init = it.make_initializer(train), it.make_initializer(val)
        fed = tf.data.Iterator.from_structure(tf.float32, tf.TensorShape([]))
        fed_init = fed.make_initializer(tf.data.Dataset.from_tensor_slices(x))
        fed_next = fed.get_next()
        with pytest.raises(TypeError, match="does not match"):
            it.make_initializer(tf.data.Dataset.range(3).map(lambda v: tf.cast(v, tf.float32)))
        with tf.Session() as sess:
            for _ in range(2):                    # the TF1 "train an epoch, validate" loop
                sess.run(train_init)
                assert [int(sess.run(nxt)) for _ in range(5)] == [0, 10, 20, 30, 40]
                sess.run(val_init)
                assert [int(sess.run(nxt)) for _ in range(3)] == [0, 1, 2]
                with pytest.raises(tf.errors.OutOfRangeError):
                    sess.run(nxt)
            sess.run(fed_init, {x: [0.5, 1.5]})
            assert [float(sess.run(fed_next)) for _ in range(2)] == [0.5, 1.5]


def test_feedable_iterator_switches_by_string_handle():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.int64, [None])
        train = tf.data.Dataset.range(5).map(lambda v: v * 10)
        handle = tf.placeholder(tf.string, shape=[])
        it = tf.data.Iterator.from_string_handle(handle, train.output_types, train.output_shapes)
        nxt = it.get_next()
        train_it = train.repeat().make_one_shot_iterator()
        val_it = tf.data.Dataset.from_tensor_slices(x).make_initializable_iterator()
        with tf.Session() as sess:
            th, vh = sess.run(train_it.string_handle()), sess.run(val_it.string_handle())
            assert isinstance(th, bytes) and th != vh
            assert [int(sess.run(nxt, {handle: th})) for _ in range(3)] == [0, 10, 20]
            sess.run(val_it.initializer, {x: [0, 1, 2]})
            assert [int(sess.run(nxt, {handle: vh})) for _ in range(3)] == [0, 1, 2]
            assert [int(sess.run(nxt, {handle: th})) for _ in range(3)] == [30, 40, 0]   # train kept its place
            with pytest.raises(tf.errors.OutOfRangeError):
                sess.run(nxt, {handle: vh})
            with pytest.raises(tf.errors.InvalidArgumentError, match="not the string_handle of a live iterator"):
                sess.run(nxt, {handle: b"nonsense"})
        floats = tf.data.Iterator.from_string_handle(handle, tf.float32, tf.TensorShape([]))
        wrong = floats.get_next()
        with tf.Session() as sess:
            with pytest.raises(tf.errors.InvalidArgumentError, match="yields"):
                sess.run(wrong, {handle: sess.run(train_it.string_handle())})
