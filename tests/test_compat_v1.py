"""``tensorweave.compat.v1``: TF1 semantics and names (issue 15) - the bugs found running TF1
programs unchanged, TF1's argument aliases, and the TF1-only functions."""
import numpy as np
import pytest

import tensorweave as tw
import tensorweave.compat.v1 as tf


# ---- bug 1: TF1's dropout takes keep_prob ------------------------------------------------------
def test_v1_dropout_keep_prob_is_the_fraction_kept():
    x = tw.ones([20000])
    y = tf.nn.dropout(x, keep_prob=0.8, seed=3).numpy()
    assert abs((y > 0).mean() - 0.8) < 0.02
    np.testing.assert_allclose(np.unique(y), [0.0, 1.25])
    # keep_prob=1.0 keeps everything (it used to be read as rate=1.0 and give NaN)
    np.testing.assert_array_equal(tf.nn.dropout(x, 1.0).numpy(), np.ones(20000, np.float32))
    # TF1's later spelling
    y = tf.nn.dropout(x, rate=0.25, seed=3).numpy()
    assert abs((y > 0).mean() - 0.75) < 0.02


def test_v1_dropout_keep_prob_from_a_placeholder():
    g = tf.Graph()
    with g.as_default():
        x = tf.ones([10000])
        keep = tf.placeholder(tf.float32)
        y = tf.nn.dropout(x, keep)
    with tf.Session(graph=g) as sess:
        np.testing.assert_array_equal(sess.run(y, {keep: 1.0}), np.ones(10000, np.float32))
        kept = sess.run(y, {keep: 0.5})
    assert abs((kept > 0).mean() - 0.5) < 0.03 and set(np.unique(kept)) == {0.0, 2.0}


def test_v1_dropout_argument_errors():
    with pytest.raises(ValueError, match="exactly one of keep_prob and rate"):
        tf.nn.dropout(tw.ones([2]), keep_prob=0.5, rate=0.5)
    with pytest.raises(ValueError, match=r"range \(0, 1\]"):
        tf.nn.dropout(tw.ones([2]), keep_prob=0.0)


# ---- bug 2: gradient of a full reduction of an unknown-rank tensor -----------------------------
@pytest.mark.parametrize("reduce", ["reduce_sum", "reduce_mean", "reduce_max", "reduce_prod"])
@pytest.mark.parametrize("keepdims", [False, True])
def test_gradient_of_a_full_reduction_of_unknown_rank(reduce, keepdims):
    xv = np.array([[1.0, 2.0], [3.0, -4.0]], np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder("float")
        assert x.shape.rank is None
        (grad,) = tf.gradients(getattr(tf, reduce)(x * x, keepdims=keepdims), [x])
        known = tf.constant(xv)
        (expected,) = tf.gradients(getattr(tf, reduce)(known * known, keepdims=keepdims), [known])
    with tf.Session(graph=g) as sess:
        got, want = sess.run([grad, expected], {x: xv})
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ---- bug 3: compat.v1 has data and keras -----------------------------------------------------
def test_v1_has_data_and_keras():
    assert tf.keras.layers.Dense is tw.keras.layers.Dense
    assert tf.data.Dataset is tw.data.Dataset
    g = tf.Graph()
    with g.as_default():
        it = tf.data.Dataset.from_tensor_slices((np.arange(5), np.arange(5) * 2.0)).batch(2).make_one_shot_iterator()
        a, b = it.get_next()
        assert a.shape.as_list() == [None] and b.dtype == tf.float64
    with tf.Session(graph=g) as sess:
        seen = []
        while True:
            try:
                seen.append(sess.run(a).tolist())
            except tf.errors.OutOfRangeError:
                break
    assert seen == [[0, 1], [2, 3], [4]]


def test_v1_initializable_iterator_restarts_and_must_be_initialized():
    g = tf.Graph()
    with g.as_default():
        it = tf.data.make_initializable_iterator(tf.data.Dataset.range(3))
        nxt = it.get_next()
        assert it.output_types == tf.int64
    with tf.Session(graph=g) as sess:
        with pytest.raises(tf.errors.FailedPreconditionError, match="initializ"):
            sess.run(nxt)
        for _ in range(2):
            sess.run(it.initializer)
            assert [int(sess.run(nxt)) for _ in range(3)] == [0, 1, 2]
            with pytest.raises(tf.errors.OutOfRangeError):
                sess.run(nxt)


# ---- bug 4: an unknown keyword names the op ---------------------------------------------------
def test_unknown_keyword_names_the_op_its_arguments_and_the_line():
    with pytest.raises(TypeError) as info:
        line = test_unknown_keyword_names_the_op_its_arguments_and_the_line.__code__.co_firstlineno + 3
        tw.reduce_sum(tw.ones([2]), axes=0)
    msg = str(info.value)
    assert msg.startswith("reduce_sum() got an unexpected keyword argument 'axes'"), msg
    assert "<locals>" not in msg
    assert "reduce_sum takes (input_tensor, axis=None, keepdims=False, name=None)" in msg
    assert f"test_compat_v1.py:{line}" in msg
    assert "did you mean 'axis'?" in msg


@pytest.mark.parametrize("fn", [tw.reduce_mean, tw.nn.softmax, tw.math.argmax, tw.nn.relu, tw.linalg.matmul,
                                tw.random.uniform, tf.reduce_max])
def test_every_public_op_function_names_itself(fn):
    with pytest.raises(TypeError, match=rf"^{fn.__name__}\(\) got an unexpected keyword argument 'bogus'"):
        fn(tw.ones([2, 2]), bogus=1)


def test_errors_raised_inside_an_op_are_left_alone():
    with pytest.raises(TypeError, match="does not support dtype string"):
        tw.reduce_sum(tw.constant(["a"]))
