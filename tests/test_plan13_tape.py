"""An outer tw.GradientTape over calls of planned tw.functions (global tensors inside): the
gradients of what the function computed, with respect to global variables and inputs, equal
one device's (float32 rtol 2e-5; float64 against finite differences)."""
import warnings

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, P, S

P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])
RNG = np.random.default_rng(13)
X = RNG.standard_normal((7, 4)).astype(np.float32)           # 7 rows: uneven on 2 and 3 ranks
W1 = RNG.standard_normal((4, 5)).astype(np.float32) * 0.5
B1 = RNG.standard_normal(5).astype(np.float32) * 0.1
W2 = RNG.standard_normal((5, 3)).astype(np.float32) * 0.5
Y = RNG.standard_normal((7, 3)).astype(np.float32)

LAYOUTS = {      # name: placement, batch SBP, (w1, b1, w2) SBPs
    "dp2": (P2, S(0), (B, B, B)),
    "mp3": (P3, B, (S(1), S(0), S(0))),
    "zero3": (P3, S(0), (S(0), S(0), S(1))),
}


def _model(placement, sbps):
    if placement is None:
        return [tw.Variable(v) for v in (W1, B1, W2)]
    return [tw.Variable(v, placement=placement, sbp=s) for v, s in zip((W1, B1, W2), sbps)]


def _loss_fn(w1, b1, w2):
    @tw.function
    def step(x, y):
        h = tw.nn.relu(tw.matmul(x, w1) + b1)
        return tw.reduce_mean(tw.square(tw.matmul(h, w2) - y))
    return step


def _feed(value, placement, sbp):
    t = tw.constant(value)
    return t if placement is None else t.to_global(placement=placement, sbp=sbp)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_gradients_of_a_planned_call_equal_one_device(layout):
    placement, batch, sbps = LAYOUTS[layout]
    results = []
    for pl in (None, placement):
        variables = _model(pl, sbps)
        step = _loss_fn(*variables)
        x = _feed(X, pl, batch)
        with tw.GradientTape() as tape:
            tape.watch(x)
            loss = step(x, _feed(Y, pl, batch))
        grads = tape.gradient(loss, variables + [x])
        assert all(getattr(g, "is_global", False) == (pl is not None) for g in grads)
        results.append([float(loss.numpy())] + [g.numpy() for g in grads])
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_data_parallel_weight_gradient_is_partial_then_all_reduced_by_the_optimizer():
    placement, batch, sbps = LAYOUTS["dp2"]
    one, glob = _model(None, sbps), _model(placement, sbps)
    opts = [tw.keras.optimizers.Adam(0.05), tw.keras.optimizers.Adam(0.05)]
    steps = [_loss_fn(*one), _loss_fn(*glob)]
    feeds = [(tw.constant(X), tw.constant(Y)), (_feed(X, placement, batch), _feed(Y, placement, batch))]
    losses = [[], []]
    for _ in range(5):
        for k in range(2):
            variables = (one, glob)[k]
            with tw.GradientTape() as tape:
                loss = steps[k](*feeds[k])
            grads = tape.gradient(loss, variables)
            if k == 1:
                assert grads[0].sbp == (P,)          # a B weight under a split batch: its gradient is partial
            opts[k].apply_gradients(zip(grads, variables))
            losses[k].append(float(loss.numpy()))
    np.testing.assert_allclose(losses[1], losses[0], rtol=2e-5)
    for a, b in zip(glob, one):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-5, atol=1e-6)


def test_float64_gradients_match_finite_differences():
    x0 = RNG.standard_normal((5, 3))
    w0 = RNG.standard_normal((3, 2))
    w = tw.Variable(w0, placement=P3, sbp=S(1))

    @tw.function
    def f(x):
        return tw.reduce_sum(tw.tanh(tw.matmul(x, w)) ** 2)
    x = tw.constant(x0).to_global(placement=P3, sbp=S(0))
    with tw.GradientTape() as tape:
        tape.watch(x)
        loss = f(x)
    gx, gw = (g.numpy() for g in tape.gradient(loss, [x, w]))

    def value(xv, wv):
        return float(np.sum(np.tanh(xv @ wv) ** 2))
    eps = 1e-6
    for grad, base, other, first in ((gx, x0, w0, True), (gw, w0, x0, False)):
        fd = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            d = np.zeros_like(base)
            d[idx] = eps
            args = ((base + d, other), (base - d, other)) if first else ((other, base + d), (other, base - d))
            fd[idx] = (value(*args[0]) - value(*args[1])) / (2 * eps)
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)
    assert float(loss.numpy()) == pytest.approx(value(x0, w0), rel=1e-12)


def test_output_gradients_in_another_layout_and_a_local_input():
    """The backward is planned per layout of the upstream gradients; a local input's gradient
    is local (its logical value)."""
    w = tw.Variable(W1, placement=P2, sbp=B)
    f = tw.function(lambda x, scale: tw.matmul(x, w) * scale)
    x = _feed(X, P2, S(0))
    scale = tw.constant(np.float32(1.5))
    up = RNG.standard_normal((7, 5)).astype(np.float32)
    for up_sbp in (S(0), B, S(1)):
        with tw.GradientTape() as tape:
            tape.watch(scale)
            y = f(x, scale)
        same = tw.placement("cpu", ranks=[0, 1])        # equal to P2, another object: no boxing
        gw, gs = tape.gradient(y, [w, scale], output_gradients=tw.constant(up).to_global(placement=same, sbp=up_sbp))
        np.testing.assert_allclose(gw.numpy(), 1.5 * X.T @ up, rtol=2e-5, atol=1e-5)
        assert not getattr(gs, "is_global", False)
        np.testing.assert_allclose(gs.numpy(), np.sum((X @ W1) * up), rtol=2e-5)
    assert len(f.get_concrete_function(x, scale)._global._tape_halves.backward) == 3


def test_the_backward_sees_the_forward_draws():
    """Dropout inside: the mask the gradient uses is the forward's (saved, not drawn again), and
    both equal one device's."""
    results = []
    for pl in (None, P2):
        w = tw.Variable(W1) if pl is None else tw.Variable(W1, placement=pl, sbp=B)
        tw.random.set_seed(5)

        @tw.function
        def f(x):
            return tw.reduce_sum(tw.nn.dropout(tw.matmul(x, w), rate=0.5, seed=3))
        x = _feed(X, pl, S(0))
        out = []
        for _ in range(2):
            with tw.GradientTape() as tape:
                loss = f(x)
            out += [float(loss.numpy()), tape.gradient(loss, w).numpy()]
        results.append(out)
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    assert not np.allclose(results[1][1], results[1][3])      # a fresh mask per call


def test_persistent_tape_and_a_call_not_watched():
    w = tw.Variable(W1, placement=P2, sbp=B)
    f = tw.function(lambda x: tw.reduce_sum(tw.matmul(x, w)))
    x = _feed(X, P2, S(0))
    with tw.GradientTape(persistent=True) as tape:
        loss = f(x)
    g1, g2 = tape.gradient(loss, w), tape.gradient(loss, w)
    np.testing.assert_array_equal(g1.numpy(), g2.numpy())
    np.testing.assert_allclose(g1.numpy(), np.tile(X.sum(0)[:, None], (1, 5)), rtol=1e-5)
    with tw.GradientTape(watch_accessed_variables=False) as tape:
        loss = f(x)                      # nothing watched: not recorded
    assert tape.gradient(loss, w) is None


def test_outer_tape_on_a_2x2_mesh_hybrid():
    """Data parallel along mesh axis 0, the weights split along mesh axis 1."""
    mesh = tw.placement("cpu", ranks=[[0, 1], [2, 3]])
    results = []
    for pl in (None, mesh):
        if pl is None:
            variables = [tw.Variable(v) for v in (W1, B1, W2)]
        else:
            variables = [tw.Variable(v, placement=pl, sbp=s) for v, s in
                         zip((W1, B1, W2), ((B, S(1)), (B, S(0)), (B, S(0))))]
        step = _loss_fn(*variables)
        x = tw.constant(X) if pl is None else tw.constant(X).to_global(placement=pl, sbp=(S(0), B))
        y = tw.constant(Y) if pl is None else tw.constant(Y).to_global(placement=pl, sbp=(S(0), B))
        with tw.GradientTape() as tape:
            loss = step(x, y)
        results.append([float(loss.numpy())] + [g.numpy() for g in tape.gradient(loss, variables)])
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_an_output_without_gradient_and_upstreams_local_or_on_another_placement():
    """An output the target does not use gets zeros; a local upstream gives a global input a
    B gradient; an upstream on another placement is moved to the function's."""
    w = tw.Variable(W1, placement=P2, sbp=B)
    f = tw.function(lambda x: (tw.reduce_sum(tw.matmul(x, w)), x * 3.0))
    x = _feed(X, P2, S(0))
    with tw.GradientTape(persistent=True) as tape:
        tape.watch(x)
        loss, aux = f(x)
    gw = tape.gradient(loss, w)                                    # aux's upstream: none (zeros)
    np.testing.assert_allclose(gw.numpy(), np.tile(X.sum(0)[:, None], (1, 5)), rtol=1e-5)
    up = RNG.standard_normal(X.shape).astype(np.float32)
    gx = tape.gradient(aux, x, output_gradients=tw.constant(up))    # a local upstream
    np.testing.assert_allclose(gx.numpy(), 3.0 * up, rtol=1e-6)
    triple = tw.function(lambda x: x * 3.0)
    with tw.GradientTape() as tape2:
        tape2.watch(x)
        y = triple(x)
    gx = tape2.gradient(y, x, output_gradients=tw.constant(up))   # no global value reaches it: made B
    assert gx.sbp == (B,) and gx.placement == P2
    np.testing.assert_allclose(gx.numpy(), 3.0 * up, rtol=1e-6)
    gx = tape.gradient(aux, x, output_gradients=tw.constant(up).to_global(placement=P3, sbp=S(1)))
    assert gx.placement == P2
    np.testing.assert_allclose(gx.numpy(), 3.0 * up, rtol=1e-6)


def test_state_updated_by_a_planned_call_under_a_tape():
    """The forward under a tape still runs the function's effects (a counter nobody reads)."""
    w = tw.Variable(W1, placement=P2, sbp=B)
    calls = tw.Variable(0.0, placement=P2, sbp=B)

    @tw.function
    def f(x):
        loss = tw.reduce_sum(tw.matmul(x, w))
        calls.assign_add(1.0)                  # after the read: only the plan's targets run it
        return loss
    x = _feed(X, P2, S(0))
    for _ in range(2):
        with tw.GradientTape() as tape:
            loss = f(x)
        tape.gradient(loss, w)
    assert float(calls.numpy()) == 2.0


def test_a_planned_call_with_an_integer_output():
    """An integer output carries no gradient (the tape hands none): the backward is fed zeros."""
    w = tw.Variable(W1, placement=P2, sbp=B)
    f = tw.function(lambda x: (tw.reduce_sum(tw.matmul(x, w)), tw.argmax(x, axis=1)))
    x = _feed(X, P2, S(0))
    with tw.GradientTape() as tape:
        loss, idx = f(x)
    np.testing.assert_array_equal(idx.numpy(), X.argmax(1))
    np.testing.assert_allclose(tape.gradient(loss, w).numpy(), np.tile(X.sum(0)[:, None], (1, 5)), rtol=1e-5)
