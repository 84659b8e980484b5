"""tw.compat.v1.train: TF1 optimizers (wrappers over the Keras update rules), global step,
decay functions; in a Session and eagerly."""
import math

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.compat.v1 as tf
from tensorweave.compat import v1_train as train

F64 = tw.float64


# ---- TF1's published update rules (the raw-op docs of ApplyMomentum, ApplyAdam, ...) -------------
def tf1_momentum(w, g, st, t, lr, momentum, use_nesterov=False):
    acc = st["acc"] = momentum * st.get("acc", 0.0) + g
    return w - lr * (g + momentum * acc) if use_nesterov else w - lr * acc


def tf1_adam(w, g, st, t, lr, beta1=0.9, beta2=0.999, epsilon=1e-8):
    m = st["m"] = beta1 * st.get("m", 0.0) + (1 - beta1) * g
    v = st["v"] = beta2 * st.get("v", 0.0) + (1 - beta2) * g * g
    lr_t = lr * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
    return w - lr_t * m / (np.sqrt(v) + epsilon)


def tf1_adagrad(w, g, st, t, lr, initial_accumulator_value=0.1):
    acc = st["acc"] = st.get("acc", initial_accumulator_value) + g * g
    return w - lr * g / np.sqrt(acc)


def tf1_rmsprop(w, g, st, t, lr, decay=0.9, momentum=0.0, epsilon=1e-10, centered=False):
    ms = st["ms"] = decay * st.get("ms", 1.0) + (1 - decay) * g * g     # TF1 starts ms at one
    denom = ms + epsilon
    if centered:
        mg = st["mg"] = decay * st.get("mg", 0.0) + (1 - decay) * g
        denom = ms - mg * mg + epsilon
    mom = st["mom"] = momentum * st.get("mom", 0.0) + lr * g / np.sqrt(denom)
    return w - mom


def tf1_adadelta(w, g, st, t, lr, rho=0.95, epsilon=1e-8):
    acc = st["acc"] = rho * st.get("acc", 0.0) + (1 - rho) * g * g
    upd = np.sqrt(st.get("upd", 0.0) + epsilon) / np.sqrt(acc + epsilon) * g
    st["upd"] = rho * st.get("upd", 0.0) + (1 - rho) * upd * upd
    return w - lr * upd


def tf1_ftrl(w, g, st, t, lr, learning_rate_power=-0.5, initial_accumulator_value=0.1,
             l1_regularization_strength=0.0, l2_regularization_strength=0.0):
    p = -learning_rate_power
    n = st.get("n", initial_accumulator_value)
    n_new = n + g * g
    z = st["z"] = st.get("z", 0.0) + g - (n_new ** p - n ** p) / lr * w
    st["n"] = n_new
    l1, l2 = l1_regularization_strength, l2_regularization_strength
    return np.where(np.abs(z) > l1, (np.sign(z) * l1 - z) / (n_new ** p / lr + 2 * l2), 0.0)


CASES = [
    (train.GradientDescentOptimizer, lambda w, g, st, t, lr: w - lr * g, dict(learning_rate=0.1)),
    (train.MomentumOptimizer, tf1_momentum, dict(learning_rate=0.1, momentum=0.9)),
    (train.MomentumOptimizer, tf1_momentum, dict(learning_rate=0.1, momentum=0.5, use_nesterov=True)),
    (train.AdamOptimizer, tf1_adam, dict(learning_rate=0.1)),
    (train.AdagradOptimizer, tf1_adagrad, dict(learning_rate=0.1)),
    (train.RMSPropOptimizer, tf1_rmsprop, dict(learning_rate=0.1)),
    (train.RMSPropOptimizer, tf1_rmsprop, dict(learning_rate=0.1, momentum=0.5, centered=True)),
    (train.AdadeltaOptimizer, tf1_adadelta, dict(learning_rate=1.0)),
    (train.FtrlOptimizer, tf1_ftrl, dict(learning_rate=0.5, l1_regularization_strength=0.1,
                                          l2_regularization_strength=0.2)),
]
IDS = [c.__name__ + ("-" + "-".join(k for k in kw if k != "learning_rate") if len(kw) > 1 else "")
       for c, _, kw in CASES]


@pytest.mark.parametrize("cls,ref,kw", CASES, ids=IDS)
def test_tf1_rules_in_a_session(cls, ref, kw):
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(2, 3))
    grads = rng.normal(size=(5, 2, 3))
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(w0, name="v")
        grad = tf.placeholder(F64, [2, 3])
        step = train.get_or_create_global_step()
        opt = cls(**kw)
        op = opt.apply_gradients([(grad, v)], global_step=step)
        init = tf.global_variables_initializer()
    assert isinstance(op, tw.Operation)
    w, st = w0.copy(), {}
    hyper = {k: x for k, x in kw.items() if k != "learning_rate"}
    with tf.Session(graph=g) as sess:
        sess.run(init)
        for t in range(5):
            sess.run(op, {grad: grads[t]})
            w = ref(w, grads[t], st, t + 1, kw["learning_rate"], **hyper)
            np.testing.assert_allclose(sess.run(v), w, rtol=1e-12, atol=1e-14)
        assert sess.run(step) == 5
    for name in opt.get_slot_names():
        assert any(s is opt.get_slot(v, name) for s in opt.variables())
    assert opt.get_slot(v, "no-such-slot") is None


def test_gradient_descent_trains_linear_regression():
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(64, 2)).astype(np.float32)
    ys = xs @ np.array([[2.0], [-3.0]], np.float32) + 0.5
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 2])
        y = tf.placeholder(tf.float32, [None, 1])
        w = tf.Variable(tf.zeros([2, 1]), name="w")
        b = tf.Variable(0.0, name="b")
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        global_step = train.get_or_create_global_step()
        train_op = train.GradientDescentOptimizer(0.5).minimize(loss, global_step=global_step)
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        first = sess.run(loss, {x: xs, y: ys})
        for _ in range(60):
            _, last = sess.run([train_op, loss], {x: xs, y: ys})
        np.testing.assert_allclose(sess.run(w).ravel(), [2.0, -3.0], atol=1e-3)
        assert abs(sess.run(b) - 0.5) < 1e-3 and last < first * 1e-4
        assert train.global_step(sess, global_step) == 60


def test_tf1_program_with_default_graph(graph_mode):
    x = tf.constant([[1.0], [2.0], [3.0]])
    y = tf.constant([[2.0], [4.0], [6.0]])
    w = tf.Variable([[0.0]])
    unused = tf.Variable(1.0)   # no gradient: skipped, as TF1 does
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y)) + 0.0 * tf.stop_gradient(unused)
    opt = train.AdamOptimizer(0.1)
    train_op = opt.minimize(loss)
    init = tf.global_variables_initializer()
    with tf.Session() as sess:
        sess.run(init)
        for _ in range(200):
            sess.run(train_op)
        assert abs(sess.run(w)[0, 0] - 2.0) < 0.05 and sess.run(unused) == 1.0
    assert sorted(opt.get_slot_names()) == ["m", "v"]


@pytest.mark.parametrize("cls,kw", [(c, kw) for c, _, kw in CASES], ids=IDS)
def test_eager_minimize_matches_session(cls, kw):
    rng = np.random.default_rng(2)
    w0, target = rng.normal(size=3), rng.normal(size=3)

    def loss_of(w):
        return tw.reduce_sum(tw.square(w - target) * tw.constant([1.0, 2.0, 3.0], F64))

    w = tw.Variable(w0)
    opt = cls(**kw)
    for _ in range(3):
        opt.minimize(lambda: loss_of(w), var_list=[w])

    g = tf.Graph()
    with g.as_default():
        wg = tf.Variable(w0)
        op = cls(**kw).minimize(loss_of(wg))
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        for _ in range(3):
            sess.run(op)
        np.testing.assert_allclose(w.numpy(), sess.run(wg), rtol=1e-12, atol=1e-14)


def test_eager_global_step_and_compute_gradients():
    tw.reset_default_graph()
    step = train.get_or_create_global_step()
    assert train.get_global_step() is step and step.dtype == tw.int64
    w = tw.Variable([1.0, 2.0])
    opt = train.GradientDescentOptimizer(0.5)
    gv = opt.compute_gradients(lambda: tw.reduce_sum(w * w))    # var_list: the watched variables
    assert [v for _, v in gv] == [w]
    assert opt.apply_gradients(gv, global_step=step) is None
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0])
    assert int(step.numpy()) == 1
    with pytest.raises(RuntimeError, match="should be a function"):
        opt.compute_gradients(tw.constant(1.0))
    tw.reset_default_graph()


def test_compute_gradients_errors_and_sparse():
    g = tf.Graph()
    with g.as_default():
        with pytest.raises(ValueError, match="No variables to optimize"):
            train.AdamOptimizer().compute_gradients(tf.constant(1.0))
        emb = tf.Variable(np.zeros((4, 2)), name="emb")
        other = tf.Variable(1.0, name="other")
        loss = tf.reduce_sum(tf.gather(emb, [1, 1, 3]))
        gv = train.AdagradOptimizer(0.1).compute_gradients(loss)
        assert isinstance(gv[0][0], tw.IndexedSlices) and gv[1] == (None, other)
        with pytest.raises(ValueError, match="No gradients provided for any variable"):
            train.GradientDescentOptimizer(0.1).minimize(tf.constant(1.0) + 0.0 * tf.stop_gradient(other.value()),
                                                         var_list=[other])
        with pytest.raises(ValueError, match="Invalid type int32"):
            train.GradientDescentOptimizer(0.1).minimize(tf.constant(1), var_list=[other])
        op = train.GradientDescentOptimizer(0.5).apply_gradients(gv)
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        sess.run(op)
        np.testing.assert_allclose(sess.run(emb), [[0, 0], [-1, -1], [0, 0], [-0.5, -0.5]])


def test_decay_functions_drive_the_rate():
    g = tf.Graph()
    with g.as_default():
        step = train.get_or_create_global_step(g)
        lr = train.exponential_decay(1.0, step, decay_steps=1, decay_rate=0.5, staircase=True)
        pw = train.piecewise_constant(step, [1], [1.0, 0.1])
        w = tf.Variable(0.0)
        op = train.GradientDescentOptimizer(lr).apply_gradients([(tf.constant(-1.0), w)], global_step=step)
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        seen = []
        for _ in range(4):
            seen.append((float(sess.run(lr)), float(sess.run(pw))))
            sess.run(op)
        assert seen == [(1.0, 1.0), (0.5, 1.0), (0.25, pytest.approx(0.1)), (0.125, pytest.approx(0.1))]
        assert sess.run(w) == 1.875
    with pytest.raises(ValueError, match="global_step is required"):
        train.exponential_decay(0.1, None, 10, 0.5)
    eager_step = tw.Variable(3, dtype=tw.int64)
    fn = train.inverse_time_decay(1.0, eager_step, 1, 1.0)
    assert float(fn()) == 0.25
    eager_step.assign(1)
    assert float(fn()) == 0.5     # eagerly a callable, re-evaluated at each use
    assert float(train.polynomial_decay(1.0, eager_step, 2, end_learning_rate=0.0)()) == 0.5
    np.testing.assert_allclose(float(train.cosine_decay(1.0, eager_step, 2)()), 0.5, atol=1e-7)


def test_two_minimize_calls_share_one_optimizer():
    g = tf.Graph()
    with g.as_default():
        a, b = tf.Variable(1.0), tf.Variable(1.0)
        opt = train.MomentumOptimizer(0.5, 0.5)
        op_a = opt.minimize(a * 2.0, var_list=[a])
        op_b = opt.minimize(b * 2.0, var_list=[b])
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        sess.run(op_a)
        sess.run([op_b])
        assert sess.run([a, b]) == [0.0, 0.0]
        assert opt.get_slot(a, "momentum") is not opt.get_slot(b, "momentum")
