"""compat.v1 and the top level share one implementation where TensorFlow has one: ``tf.Assert``,
``map_fn``/``scan``/``foldl``/``foldr``/``vectorized_map``, the rank assertions and the block
rearrangements (TF1 keeps only its argument order). Expected texts and values are TF 2.21's."""
import numpy as np
import pytest

import tensorweave as tw
import tensorweave.compat.v1 as tf

# TF 2.21: tf.debugging.Assert(False, ["too big", [1, 5], [1.5, 2.25]]) run in a graph
TF_ASSERT_MESSAGE = "assertion failed: [too big] [1 5] [1.5 2.25]"
# TF 2.21: tf.compat.v1.assert_rank(tf.compat.v1.placeholder(tf.float32, [2, 2], name="x"), 3, message="m")
TF_RANK_MESSAGE = "m.  Tensor x:0 must have rank 3.  Received rank 2, shape (2, 2)"
# TF 2.21: tf.map_fn(lambda r: r * r + 1.0, q) with q a [None] placeholder fed [1, 2, 3]
TF_MAP_FN_UNKNOWN_LENGTH = [2.0, 5.0, 10.0]


def _same(a, b):
    """The same function (the top level wraps its functions for argument errors)."""
    return getattr(a, "__wrapped__", a) is getattr(b, "__wrapped__", b)


def test_one_assert_with_tensorflows_message_in_graphs_and_eagerly():
    assert _same(tw.Assert, tf.Assert)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.int32, [2])
        check = tw.Assert(tf.reduce_all(x < 3), ["too big", x, tf.constant([1.5, 2.25])])
        assert check.type == "Assert"
    with tf.Session(graph=g) as sess:
        with pytest.raises(tf.errors.InvalidArgumentError) as e:
            sess.run(check, {x: [1, 5]})
    assert str(e.value).splitlines()[0] == TF_ASSERT_MESSAGE
    with pytest.raises(tw.errors.InvalidArgumentError) as e:
        tw.Assert(tw.reduce_all(tw.constant([1, 5]) < 3), ["too big", tw.constant([1, 5]), tw.constant([1.5, 2.25])])
    assert str(e.value) == TF_ASSERT_MESSAGE


def test_rank_assertions_share_tensorflows_text():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [2, 2], name="x")
        for check in (tf.assert_rank, tw.assert_rank):
            with pytest.raises(ValueError) as e:
                check(x, 3, message="m")
            assert str(e.value) == TF_RANK_MESSAGE
        p = tf.placeholder(tf.float32, None, name="p")
        with tf.control_dependencies([tw.assert_rank(p, 2)]):
            y = tf.identity(p)
    with tf.Session(graph=g) as sess:
        np.testing.assert_array_equal(sess.run(y, {p: np.ones((2, 2))}), np.ones((2, 2)))
        with pytest.raises(tf.errors.InvalidArgumentError, match="Tensor p:0 must have rank 2"):
            sess.run(y, {p: [1.0, 2.0]})


def test_higher_order_functions_are_the_same_and_take_an_unknown_length():
    for name in ("map_fn", "scan", "foldl", "foldr", "vectorized_map"):
        assert _same(getattr(tw, name), getattr(tf, name)), name
    g = tf.Graph()
    with g.as_default():
        q = tf.placeholder(tf.float32, [None])
        out = tw.map_fn(lambda r: r * r + 1.0, q)     # tw.map_fn once needed a static length
    with tf.Session(graph=g) as sess:
        assert sess.run(out, {q: [1.0, 2.0, 3.0]}).tolist() == TF_MAP_FN_UNKNOWN_LENGTH


def test_block_rearrangements_take_tf1_arguments_and_unknown_batches():
    x = np.arange(32, dtype=np.float32).reshape(2, 4, 4, 1)
    np.testing.assert_array_equal(tf.space_to_depth(x, 2, "s2d", "NHWC"), tw.nn.space_to_depth(x, 2))
    np.testing.assert_array_equal(tf.depth_to_space(tf.space_to_depth(x, 2), 2), x)
    batched = tf.space_to_batch(x, [[0, 0], [0, 0]], block_size=2)
    np.testing.assert_array_equal(batched, tw.space_to_batch(x, [2, 2], [[0, 0], [0, 0]]))
    np.testing.assert_array_equal(tf.batch_to_space(batched, [[0, 0], [0, 0]], 2), x)
    np.testing.assert_array_equal(tf.batch_to_space_nd(batched, [2, 2], [[0, 0], [0, 0]]), x)
    g = tf.Graph()
    with g.as_default():
        p = tf.placeholder(tf.float32, [None, 4, 4, 1])
        round_trip = tf.depth_to_space(tf.space_to_depth(p, 2), 2)
    with tf.Session(graph=g) as sess:
        np.testing.assert_array_equal(sess.run(round_trip, {p: x}), x)
