"""tw.cond / tw.while_loop inside planned tw.functions on global tensors: results and training
equal one device; bodies holding what cannot be planned are clear errors (split layouts and
random draws inside bodies: test_plan13_control_split.py)."""
import warnings

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S

P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])
X = np.arange(21, dtype=np.float32).reshape(7, 3) / 10        # 7 rows: uneven on 2 and 3 ranks
W = np.full((3, 2), 0.3, np.float32)


def _body(x, w, threshold):
    h = tw.matmul(x, w)
    y = tw.cond(tw.reduce_sum(h) > threshold, lambda: h * 2.0, lambda: h - 1.0)
    _, z = tw.while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, z * 1.5 + tw.reduce_mean(h)), (0, y))
    return z, tw.cond(threshold > 0.0, lambda: tw.reduce_max(x), lambda: tw.reduce_min(x))


@pytest.mark.parametrize("placement,sbp", [(P3, S(0)), (P2, S(1))])
@pytest.mark.parametrize("threshold", [1.0, 100.0])                # both branches taken
def test_cond_and_while_loop_give_the_single_device_result(placement, sbp, threshold):
    want = [t.numpy() for t in tw.function(_body)(tw.constant(X), tw.constant(W), tw.constant(threshold))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = tw.function(_body)(tw.constant(X).to_global(placement=placement, sbp=sbp),
                                 tw.constant(W).to_global(placement=placement, sbp=B), tw.constant(threshold))
    for g, w in zip(got, want):             # (the bodies are planned on the inputs' layouts: outputs may be split)
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-6)
        if g.sbp == (B,):
            assert all(np.array_equal(p, g.to_local()[0].numpy()) for p in (t.numpy() for t in g.to_local()))


def _train(placement):
    kw = {} if placement is None else {"placement": placement, "sbp": B}
    w = tw.Variable(W, **kw)
    c = tw.Variable(np.float32(0.5), **kw)

    @tw.function
    def step(x):
        with tw.GradientTape() as tape:
            h = tw.matmul(x, w)
            y = tw.cond(tw.reduce_sum(h) > 1.0, lambda: h * c, lambda: h + c)    # c read inside a branch
            _, z = tw.while_loop(lambda i, z: i < 2, lambda i, z: (i + 1, tw.tanh(z) * c), (0, y))
            loss = tw.reduce_mean(tw.square(z))
        gw, gc = tape.gradient(loss, [w, c])
        w.assign_sub(0.1 * gw)
        c.assign_sub(0.1 * gc)
        return tw.cond(loss > 0.0, lambda: c.assign_add(0.01), lambda: c.read_value()) * 0 + loss
    x = tw.constant(X) if placement is None else tw.constant(X).to_global(placement=placement, sbp=S(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        losses = [float(step(x).numpy()) for _ in range(4)]
    return losses, w.numpy(), c.numpy()


def test_training_through_cond_and_while_loop_equals_one_device():
    want, got = _train(None), _train(P2)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-6)


def test_control_flow_on_local_values_only_runs_on_every_rank():
    @tw.function
    def f(x, n):
        scale = tw.cond(n > 2, lambda: tw.constant(2.0), lambda: tw.constant(3.0))      # all local
        return x * scale
    got = f(tw.constant(X).to_global(placement=P2, sbp=S(0)), tw.constant(5))
    assert got.sbp == (S(0),)
    np.testing.assert_array_equal(got.numpy(), X * 2.0)


def test_bodies_that_cannot_run_on_every_rank_are_clear_errors():
    # (random draws and split variables inside bodies are planned now: test_plan13_control_split.py)
    x = tw.constant(X).to_global(placement=P2, sbp=S(0))
    local = tw.Variable(np.float32(1.0), name="local_c")
    with pytest.raises(tw.errors.UnimplementedError, match=r"uses the local variable behind .* Hint: make the "
                                                           r"variable global"):
        tw.function(lambda x: tw.cond(tw.reduce_sum(x) > 0, lambda: x * local, lambda: x))(x)
    with pytest.raises(tw.errors.UnimplementedError,
                       match=r"\(StatefulIf\) in a planned function .* updates state .* on local values only"):
        tw.function(lambda x, n: x * tw.cond(n > 0, lambda: local.assign_add(1.0), lambda: local.read_value()))(
            x, tw.constant(1))


def test_tf1_session_cond_on_a_global_variable():
    import tensorweave.compat.v1 as tf
    results = []
    for placement in (None, P2):
        g = tf.Graph()
        with g.as_default():
            kw = {} if placement is None else {"placement": placement, "sbp": B}
            w = tw.Variable(W, **kw)
            x = tf.placeholder(tf.float32, [7, 3])
            h = tf.matmul(x, w)
            y = tf.cond(tf.reduce_sum(h) > 1.0, lambda: h * 2.0, lambda: -h)
            with tf.Session() as sess:
                if placement is None:
                    sess.run(tf.global_variables_initializer())
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    results.append([sess.run(y, {x: X * s}) for s in (1.0, 0.01)])
    for a, b in zip(*results):
        np.testing.assert_allclose(b, a, rtol=1e-6)


def test_nested_bodies_are_checked_all_the_way_down():
    x = tw.constant(X).to_global(placement=P2, sbp=S(0))

    def inner_pins(x):           # a to_global inside a cond inside a while body
        return tw.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, tw.cond(
            tw.reduce_sum(y) > 0, lambda: y.to_global(placement=P2, sbp=B), lambda: y)), (0, x))[1]

    def clean_inner_then_pin(x):   # a clean nested cond first, the pin after it in the same body
        return tw.cond(tw.reduce_sum(x) > 0,
                       lambda: tw.cond(tw.reduce_max(x) > 0, lambda: x, lambda: -x).to_global(placement=P2, sbp=B),
                       lambda: x)
    for fn in (inner_pins, clean_inner_then_pin):
        with pytest.raises(tw.errors.UnimplementedError, match=r"its body holds '[^']*' \(_ToGlobal\), a to_global"):
            tw.function(fn)(x)
