"""tw.cond / tw.while_loop bodies planned on their inputs' layouts (split batches stay split
inside loops, collectives inside the rank's nested plans) and random draws inside bodies
(per-rank streams): results, gradients and training equal one device."""
import warnings

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S

P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])
RNG = np.random.default_rng(7)
X = RNG.standard_normal((7, 3)).astype(np.float32)         # 7 rows: uneven on 2 and 3 ranks
W = (RNG.standard_normal((3, 3)) * 0.4).astype(np.float32)


def _loop(x, w):
    _, z = tw.while_loop(lambda i, z: tw.logical_and(i < 5, tw.reduce_sum(tw.square(z)) < 400.0),
                         lambda i, z: (i + 1, tw.tanh(tw.matmul(z, w)) * 1.5 + z), (0, x))
    return tw.cond(tw.reduce_sum(z) > 0.0, lambda: z * 2.0, lambda: tw.nn.relu(z) - 1.0)


def _glob(value, placement, sbp):
    return tw.constant(value).to_global(placement=placement, sbp=sbp)


@pytest.mark.parametrize("placement", [P2, P3], ids=["2ranks", "3ranks"])
@pytest.mark.parametrize("sign", [1.0, -1.0])                      # both branches
def test_while_loop_over_a_split_batch_stays_split(placement, sign):
    want = tw.function(_loop)(tw.constant(X * sign), tw.constant(W)).numpy()
    f = tw.function(_loop)
    args = (_glob(X * sign, placement, S(0)), _glob(W, placement, B))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                    # nothing boxed to B by the fallback
        got = f(*args)
    assert got.sbp == (S(0),)
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-5, atol=1e-6)
    kinds = [c["kind"] for c in tw.distribute.explain(f, *args).to_dict()["collectives"]]
    assert "all_gather" not in kinds                     # the batch is never gathered
    assert [p.shape[0] for p in got.to_local()] == [len(s) for s in np.array_split(np.arange(7), placement.size)]


def test_elementwise_loop_over_columns():
    def f(x):
        return tw.while_loop(lambda i, z: i < 4, lambda i, z: (i + 1, tw.sin(z) * 1.1 + 0.1 * z), (0, x))[1]
    got = tw.function(f)(_glob(X, P2, S(1)))
    assert got.sbp == (S(1),)
    np.testing.assert_allclose(got.numpy(), tw.function(f)(tw.constant(X)).numpy(), rtol=1e-6)


def _train(placement, w_sbp, outer_tape):
    kw = {} if placement is None else {"placement": placement, "sbp": w_sbp}
    w = tw.Variable(W, **kw)
    c = tw.Variable(np.float32(0.5), **({} if placement is None else {"placement": placement, "sbp": B}))

    def loss_of(x):
        _, z = tw.while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, tw.tanh(tw.matmul(z, w)) + z * c), (0, x))
        y = tw.cond(tw.reduce_sum(z) > 0.0, lambda: tw.matmul(z, w), lambda: z * c)    # w read inside a branch
        return tw.reduce_mean(tw.square(y))

    @tw.function
    def inner(x):
        with tw.GradientTape() as tape:
            loss = loss_of(x)
        gw, gc = tape.gradient(loss, [w, c])
        w.assign_sub(0.1 * gw)
        c.assign_sub(0.1 * gc)
        return loss
    outer = tw.function(loss_of)
    x = tw.constant(X) if placement is None else _glob(X, placement, S(0))
    losses = []
    for _ in range(3):
        if outer_tape:
            with tw.GradientTape() as tape:
                loss = outer(x)
            gw, gc = tape.gradient(loss, [w, c])
            w.assign_sub(0.1 * gw)
            c.assign_sub(0.1 * gc)
        else:
            loss = inner(x)
        losses.append(float(loss.numpy()))
    return losses, w.numpy(), c.numpy()


@pytest.mark.parametrize("case", ["dp2-inner", "mp3-inner", "dp2-outer", "mp3-outer"])
def test_training_through_split_loops_and_conds_equals_one_device(case):
    layout, tape = case.split("-")
    placement, w_sbp = {"dp2": (P2, B), "mp3": (P3, S(1))}[layout]    # mp3: a split weight inside the bodies
    want = _train(None, None, tape == "outer")
    got = _train(placement, w_sbp, tape == "outer")
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)


def _draws(x):
    y = tw.cond(tw.reduce_sum(x) > -100.0, lambda: x + tw.random.uniform([7, 3], seed=11), lambda: x)
    _, z = tw.while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, z * 0.5 + tw.random.normal([7, 3], seed=12)),
                         (0, y))
    return z, tw.nn.dropout(z, rate=0.5, seed=13)


@pytest.mark.parametrize("placement,sbp", [(P2, S(0)), (P3, S(1)), (P2, B)])
def test_random_draws_inside_bodies_equal_one_device(placement, sbp):
    tw.random.set_seed(3)
    one = tw.function(_draws)
    want = [[t.numpy() for t in one(tw.constant(X))] for _ in range(2)]
    tw.random.set_seed(3)
    f = tw.function(_draws)
    got = [[t.numpy() for t in f(_glob(X, placement, sbp))] for _ in range(2)]
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(got[0][0], got[1][0])          # the second call continues the streams


def test_draws_in_bodies_on_local_values_only():
    tw.random.set_seed(4)
    one = tw.function(lambda x, n: x * tw.cond(n > 0, lambda: tw.random.uniform([], seed=5), lambda: 1.0))
    want = [one(tw.constant(X), tw.constant(1)).numpy() for _ in range(2)]
    tw.random.set_seed(4)
    f = tw.function(lambda x, n: x * tw.cond(n > 0, lambda: tw.random.uniform([], seed=5), lambda: 1.0))
    got = [f(_glob(X, P2, S(0)), tw.constant(1)).numpy() for _ in range(2)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_what_bodies_still_may_not_hold_is_a_clear_error():
    x = _glob(X, P2, S(0))
    with pytest.raises(tw.errors.UnimplementedError,
                       match=r"'cond' \(If\) in a planned function .*its body holds '[^']*' \(_ToGlobal\), a to_global"):
        tw.function(lambda x: tw.cond(tw.reduce_sum(x) > 0, lambda: x.to_global(placement=P2, sbp=B),
                                      lambda: x))(x)
    with pytest.raises(tw.errors.UnimplementedError,
                       match=r"loop variable 1 has shape \(None, 3\); planned control flow on global tensors needs"):
        tw.function(lambda x: tw.while_loop(lambda i, z: i < 2, lambda i, z: (i + 1, tw.concat([z, z], 0)[:7]),
                                            (0, x), shape_invariants=(tw.TensorShape([]),
                                                                      tw.TensorShape([None, 3])))[1])(x)


def test_nested_cond_in_a_loop_on_a_2x2_mesh():
    mesh = tw.placement("cpu", ranks=[[0, 1], [2, 3]])

    def f(x, w):
        def body(i, z):
            z = tw.cond(tw.reduce_max(z) > 2.0, lambda: z * 0.5, lambda: tw.matmul(z, w) + z)
            return i + 1, z
        return tw.while_loop(lambda i, z: i < 4, body, (0, x))[1]
    want = tw.function(f)(tw.constant(X), tw.constant(W)).numpy()
    got = tw.function(f)(_glob(X, mesh, (S(0), S(1))), _glob(W, mesh, (B, B)))
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-5, atol=1e-6)
    assert got.sbp[0] == S(0)


def test_a_split_variable_updated_inside_bodies():
    """Was refused (a body's variable had to be B); now the variable's ops are planned on its layout."""
    def run(placement):
        kw = {} if placement is None else {"placement": placement, "sbp": S(0)}
        v = tw.Variable(np.zeros((7, 3), np.float32), **kw)

        @tw.function
        def f(x):
            def body(i, z):
                v.assign_add(z * 0.5)
                return i + 1, z + v.read_value()
            _, z = tw.while_loop(lambda i, z: i < 3, body, (0, x))
            tw.cond(tw.reduce_sum(z) > 0, lambda: v.assign_sub(x), lambda: v.assign_add(x))
            return z
        x = tw.constant(X) if placement is None else _glob(X, placement, S(0))
        return [f(x).numpy() for _ in range(2)] + [v.numpy()]
    for got, want in zip(run(P3), run(None)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
