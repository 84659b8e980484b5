"""TF1 RNN drivers on ``while_loop`` (issue 15): ``dynamic_rnn`` with a user-written cell (its own
``__call__`` and ``get_variable``), cells without a fused kernel, ``sequence_length``, unknown time
steps, ``raw_rnn`` with a ``TensorArray``-reading ``loop_fn``; gradients through the loop.

``tf_reference/v1_rnn.json`` holds TensorFlow 2.21's results of ``tf_reference/v1_rnn_oracle.py``
(run in the benchmark venv with ``TF_USE_LEGACY_KERAS=1``); the same program runs here with the
import line changed."""
import json
import os
import runpy
import sys

import numpy as np
import pytest

import tensorweave.compat.v1 as tf
from tensorweave.compat.v1_tensor_array import TensorArray

HERE = os.path.dirname(__file__)


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    """The oracle program run under tensorweave (its import line swapped)."""
    src = open(os.path.join(HERE, "tf_reference", "v1_rnn_oracle.py")).read()
    src = src.replace("import tensorflow.compat.v1 as tf", "import tensorweave.compat.v1 as tf")
    src = src.replace("tf.disable_v2_behavior()", "")
    path = tmp_path_factory.mktemp("rnn") / "prog.py"
    path.write_text(src)
    out = str(path.with_suffix(".json"))
    argv, sys.argv = sys.argv, [str(path), out]
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = argv
    return json.load(open(out))


@pytest.fixture(scope="module")
def theirs():
    return json.load(open(os.path.join(HERE, "tf_reference", "v1_rnn.json")))


@pytest.mark.parametrize("case", ["dynamic", "raw", "peephole"])
def test_matches_tensorflow(ours, theirs, case):
    a, b = ours[case], theirs[case]
    assert a["names"] == b["names"]
    for key in b:
        if key == "names":
            continue
        got, want = (a[key], b[key]) if key != "grads" else (np.concatenate([np.ravel(g) for g in a[key]]),
                                                               np.concatenate([np.ravel(g) for g in b[key]]))
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-10, atol=1e-12, err_msg=f"{case} {key}")


class SumCell(tf.nn.rnn_cell.RNNCell):
    """A user cell: its own ``__call__``, variables by ``get_variable``, a tuple state."""

    def __init__(self, n):
        super().__init__()
        self._n = n

    @property
    def state_size(self):
        return (self._n, self._n)

    @property
    def output_size(self):
        return self._n

    def __call__(self, inputs, state, scope=None):
        with tf.variable_scope(scope or "sum_cell"):
            w = tf.get_variable("w", [int(inputs.shape[-1]) + self._n, self._n], dtype=inputs.dtype,
                                initializer=tf.random_normal_initializer(stddev=0.5, seed=2))
            h = tf.tanh(tf.matmul(tf.concat([inputs, state[0]], 1), w))
        return h, (h, state[1] + h)


def test_user_cell_any_length_and_float64_gradient_by_finite_differences():
    rng = np.random.RandomState(0)
    xv = rng.randn(3, 6, 2)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, None, 2])        # time steps unknown when building
        lengths = tf.placeholder(tf.int32, [None])
        out, (h, total) = tf.nn.dynamic_rnn(SumCell(3), x, sequence_length=lengths, dtype=tf.float64)
        assert out.shape.as_list() == [None, None, 3]
        (w,) = tf.global_variables()
        assert w.name == "rnn/sum_cell/w:0" and w.dtype == tf.float64
        loss = tf.reduce_sum(out ** 2) + tf.reduce_sum(total * h)
        gw, gx = tf.gradients(loss, [w, x])
        new_w = tf.placeholder(tf.float64, w.shape)
        set_w = w.assign(new_w)
        feed = {x: xv, lengths: [6, 2, 0]}
        with tf.Session() as sess:
            sess.run(w.initializer)
            o, hv, tv, gwv, gxv = sess.run([out, h, total, gw, gx], feed)
            assert not o[1, 2:].any() and not o[2].any() and not hv[2].any()   # past each length: zeros, state kept
            np.testing.assert_allclose(hv[1], o[1, 1])
            np.testing.assert_allclose(tv[0], o[0].sum(0))
            w0 = sess.run(w)
            eps, num = 1e-6, np.zeros_like(w0)
            for i in np.ndindex(*w0.shape):
                for sign in (1, -1):
                    wp = w0.copy()
                    wp[i] += sign * eps
                    sess.run(set_w, {new_w: wp})
                    num[i] += sign * sess.run(loss, feed) / (2 * eps)
            np.testing.assert_allclose(gwv, num, rtol=1e-6, atol=1e-8)
            sess.run(set_w, {new_w: w0})
            x1 = xv.copy()
            x1[0, 3, 1] += eps
            x2 = xv.copy()
            x2[0, 3, 1] -= eps
            fd = (sess.run(loss, {x: x1, lengths: [6, 2, 0]}) - sess.run(loss, {x: x2, lengths: [6, 2, 0]})) / (2 * eps)
            np.testing.assert_allclose(gxv[0, 3, 1], fd, rtol=1e-6)
            assert not gxv[1, 2:].any()                  # steps past a sequence's end get no gradient


def test_user_cell_eagerly_and_time_major():
    xv = np.random.RandomState(1).randn(2, 4, 2).astype(np.float32)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [4, 2, 2])
        out_t, _ = tf.nn.dynamic_rnn(SumCell(3), x, dtype=tf.float32, time_major=True, scope="tm")
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            wv = sess.run(tf.global_variables()[0])
            got = sess.run(out_t, {x: xv.transpose(1, 0, 2)})
    h = np.zeros((2, 3), np.float32)
    want = []
    for t in range(4):
        h = np.tanh(np.concatenate([xv[:, t], h], 1) @ wv)
        want.append(h)
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-5)


def test_training_a_user_cell_lowers_the_loss():
    rng = np.random.RandomState(0)
    xv = rng.randn(16, 5, 2).astype(np.float32)
    yv = xv.sum(axis=(1, 2)) > 0
    with tf.Graph().as_default():
        tf.set_random_seed(0)
        x = tf.placeholder(tf.float32, [None, None, 2])
        out, _ = tf.nn.dynamic_rnn(SumCell(4), x, dtype=tf.float32)
        logits = tf.layers.dense(out[:, -1], 1)[:, 0]
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(yv, tf.float32), logits=logits))
        train = tf.train.AdamOptimizer(0.05).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            first = sess.run(loss, {x: xv})
            for _ in range(30):
                sess.run(train, {x: xv})
            assert sess.run(loss, {x: xv}) < 0.5 * first


def test_cond_inside_while_gradient():
    # The gradient of a cond inside a while body reads the replayed body's tensors (it used to
    # reach for the forward body's placeholders and fail).
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [5])

        def body(t, a):
            v = tf.cond(t + 1 > 3, lambda: tf.zeros([], tf.float64), lambda: tf.gather(x, t))
            return t + 1, a + v * v
        _, a = tf.while_loop(lambda t, a: t < 5, body, [tf.constant(0), tf.constant(0.0, tf.float64)])
        (g,) = tf.gradients(a, x)
        with tf.Session() as sess:
            av, gv = sess.run([a, g], {x: np.arange(5.0)})
    assert av == 5.0 and gv.tolist() == [0.0, 2.0, 4.0, 0.0, 0.0]


def test_concat_gradient_with_sizes_known_only_at_run_time():
    with tf.Graph().as_default():
        a = tf.placeholder(tf.float64, [None, 2])
        b = tf.placeholder(tf.float64, [None, 2])
        y = tf.concat([a, b], 0)
        ga, gb = tf.gradients(tf.reduce_sum(y * tf.reshape(tf.range(tf.size(y), dtype=tf.float64), tf.shape(y))),
                              [a, b])
        with tf.Session() as sess:
            gav, gbv = sess.run([ga, gb], {a: np.ones((1, 2)), b: np.ones((2, 2))})
    assert gav.tolist() == [[0.0, 1.0]] and gbv.tolist() == [[2.0, 3.0], [4.0, 5.0]]


def test_tensor_array():
    ta = TensorArray(tf.float32, size=3).write(1, [1.0, 2.0])
    assert ta.stack().numpy().tolist() == [[0, 0], [1, 2], [0, 0]]
    grown = TensorArray(tf.float32, size=0, dynamic_size=True).write(0, [1.0]).write(2, [3.0])
    assert grown.stack().numpy().tolist() == [[1.0], [0.0], [3.0]] and int(grown.size()) == 3
    un = TensorArray(tf.float32, size=2).unstack([[1.0, 2.0], [3.0, 4.0]])
    assert un.read(1).numpy().tolist() == [3.0, 4.0] and un.gather([1, 0]).numpy().tolist() == [[3, 4], [1, 2]]
    assert un.concat().numpy().tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="size must be given"):
        TensorArray(tf.float32)
    with pytest.raises(ValueError, match="nothing has been written"):
        TensorArray(tf.float32, size=2).read(0)
