"""A pipeline inside one planned tw.function: layers on disjoint rank sets, values moved by
``to_global`` (plan_placements.py): planned as segments per placement with transfers between
them; forward, gradients and Adam training == one device and == the same code run eagerly."""
import re

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import errors
from tensorweave.core.sbp import B, P, S

RNG = np.random.default_rng(130)
X = RNG.standard_normal((7, 4)).astype(np.float32)         # 7 rows: uneven on 2 and 3 ranks
W1 = RNG.standard_normal((4, 5)).astype(np.float32)
B1 = (RNG.standard_normal(5) * 0.1).astype(np.float32)
W2 = RNG.standard_normal((5, 3)).astype(np.float32)
P1 = tw.placement("cpu", ranks=[0, 1])
P2 = tw.placement("cpu", ranks=[2, 3, 4])
MESH = tw.placement("cpu", ranks=[[2, 3], [4, 5]])


def _model(glob, stage2=P2, w2_sbp=(B,), h_sbp=(S(0),)):
    if glob:
        w1 = tw.Variable(W1, placement=P1, sbp=S(1))
        b1 = tw.Variable(B1, placement=P1, sbp=S(0))
        w2 = tw.Variable(W2, placement=stage2, sbp=w2_sbp)
    else:
        w1, b1, w2 = tw.Variable(W1), tw.Variable(B1), tw.Variable(W2)

    def loss_fn(x):
        h = tw.nn.relu(tw.matmul(x, w1) + b1)
        if glob:
            h = h.to_global(placement=stage2, sbp=h_sbp)
        return tw.reduce_mean(tw.square(tw.tanh(tw.matmul(h, w2))))
    return [w1, b1, w2], loss_fn


def _x(glob):
    return tw.constant(X).to_global(placement=P1, sbp=S(0)) if glob else tw.constant(X)


def _grads(glob, planned, **kw):
    variables, loss_fn = _model(glob, **kw)

    def step(x):
        with tw.GradientTape() as tape:
            loss = loss_fn(x)
        return loss, tape.gradient(loss, variables)
    f = tw.function(step) if planned else step
    loss, grads = f(_x(glob))
    return loss, grads


@pytest.mark.parametrize("stage2,w2_sbp,h_sbp", [(P2, (B,), (S(0),)), (P2, (S(1),), (B,)),
                                                 (MESH, (B, S(1)), (S(0), B))])
def test_forward_and_gradients_equal_one_device_and_eager(stage2, w2_sbp, h_sbp):
    want_loss, want = _grads(False, False)
    for planned in (False, True):
        loss, grads = _grads(True, planned, stage2=stage2, w2_sbp=w2_sbp, h_sbp=h_sbp)
        np.testing.assert_allclose(loss.numpy(), want_loss.numpy(), rtol=2e-5)
        for g, w, v in zip(grads, want, (P1, P1, stage2)):
            assert g.placement == v          # each gradient on its variable's placement
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=1e-7)
    assert grads[0].placement == P1 and loss.placement == stage2


def _train(glob, planned, steps=3):
    variables, loss_fn = _model(glob)
    opt = tw.keras.optimizers.Adam(0.1)

    def step(x):
        with tw.GradientTape() as tape:
            loss = loss_fn(x)
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss
    f = tw.function(step) if planned else step
    x = _x(glob)
    return [float(f(x)) for _ in range(steps)], [v.numpy() for v in variables]


def test_adam_training_across_two_placements_equals_one_device():
    want_losses, want = _train(False, False)
    for planned in (False, True):
        losses, got = _train(True, planned)
        np.testing.assert_allclose(losses, want_losses, rtol=2e-5)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-7)


def test_planned_as_segments_with_the_moves_between_them():
    variables, loss_fn = _model(True)

    @tw.function
    def step(x):
        with tw.GradientTape() as tape:
            loss = loss_fn(x)
        return loss, tape.gradient(loss, variables)
    x = _x(True)
    planned = step.get_concrete_function(x)._global
    assert [s.placement for s in planned.segments] == [P1, P2, P1]    # forward 1 | forward+backward 2 | backward 1
    ranks = [list(s.plan.placement.ranks) for s in planned.segments]
    assert ranks == [[0, 1], [2, 3, 4], [0, 1]]
    back = planned.segments[2]
    (plan, src, reader), = back.transfers.values()
    assert reader.type == "_ToPlacement" and plan.src_placement == P2 and plan.dst_placement == P1
    assert src[1] == (P,) and plan.dst_sbp == (S(0),)   # the partial gradient reduce-scattered, then sent


def test_explain_lists_ops_per_placement_and_the_transfers_with_bytes():
    variables, loss_fn = _model(True)

    def step(x):
        with tw.GradientTape() as tape:
            loss = loss_fn(x)
        return loss, tape.gradient(loss, variables)
    e = tw.distribute.explain(step, _x(True))
    d = e.to_dict()
    assert [s["placement"]["ranks"] for s in d["segments"]] == [[0, 1], [2, 3, 4], [0, 1]]
    by_segment = {}
    for o in d["ops"]:
        by_segment.setdefault(o["segment"], []).append(o["type"])
    assert "_ToGlobal" in by_segment[1] and "ReluGrad" in by_segment[2] and "Relu" in by_segment[0]
    forward = [t for t in d["transfers"] if t["op"].startswith("_ToGlobal")]
    # h: 7 x 5 float32, S(0) on ranks [0, 1] (rows 4, 3) -> S(0) on [2, 3, 4] (rows 3, 2, 2): all of it moves
    assert [(t["kind"], t["from"]["sbp"], t["to"]["sbp"], t["bytes"]) for t in forward] == [
        ("transfer", "(S(0),)", "(S(0),)", 7 * 5 * 4)]
    back = [t for t in d["transfers"] if t["op"].startswith("_ToPlacement")]
    assert [t["kind"] for t in back] == ["reduce_scatter", "transfer"] and back[1]["to"]["ranks"] == [0, 1]
    assert d["bytes_moved"] == sum(c["bytes"] for c in d["collectives"]) + sum(t["bytes"] for t in d["transfers"])
    text = str(e)
    assert "3 segments on ranks [0, 1], ranks [2, 3, 4], ranks [0, 1]" in text
    assert " segment 1 on ranks [2, 3, 4]:" in text and "transfers between placements:" in text
    assert re.search(r"transfer +ranks \[0, 1\] \(S\(0\),\) -> ranks \[2, 3, 4\] \(S\(0\),\) +140 B +float32\[7, 5\]", text)


def test_reading_two_placements_without_a_move_is_refused_with_the_op_named():
    w1 = tw.Variable(W1, placement=P1, sbp=B)
    w2 = tw.Variable(W2, placement=P2, sbp=B)
    f = tw.function(lambda x: tw.matmul(tw.matmul(x, w1), w2))
    with pytest.raises(errors.InvalidArgumentError, match=r"inputs are on different placements for 'MatMul_1' "
                       r"\(MatMul\).*on ranks \[0, 1\].*on ranks \[2, 3, 4\](.|\n)*Hint: move one with x.to_global"):
        f(_x(True))


def _outer(glob, planned):
    variables, loss_fn = _model(glob)
    f = tw.function(loss_fn) if planned else loss_fn
    x = _x(glob)
    with tw.GradientTape(persistent=True) as tape:
        tape.watch(x)
        loss = f(x)
        scaled = loss * 3.0                                 # an op after the call: the upstream is not ones
    return loss, tape.gradient(scaled, variables + [x])


def test_an_outer_tape_over_a_call_gives_one_devices_gradients():
    want_loss, want = _outer(False, False)
    for planned in (True, False):
        loss, grads = _outer(True, planned)
        np.testing.assert_allclose(loss.numpy(), want_loss.numpy(), rtol=2e-5)
        for g, w, where in zip(grads, want, (P1, P1, P2, P1)):
            assert g.placement == where                   # each gradient on its variable's (input's) placement
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=1e-7)


def test_an_outer_tape_trains_with_adam_across_calls():
    variables, loss_fn = _model(True)
    ref_vars, ref_fn = _model(False)
    f, opt, ref_opt = tw.function(loss_fn), tw.keras.optimizers.Adam(0.1), tw.keras.optimizers.Adam(0.1)
    for _ in range(3):
        with tw.GradientTape() as tape:
            loss = f(_x(True))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        with tw.GradientTape() as tape:
            ref = ref_fn(_x(False))
        ref_opt.apply_gradients(zip(tape.gradient(ref, ref_vars), ref_vars))
        np.testing.assert_allclose(loss.numpy(), ref.numpy(), rtol=2e-5)
    for v, r in zip(variables, ref_vars):
        np.testing.assert_allclose(v.numpy(), r.numpy(), rtol=2e-5, atol=1e-7)


def _tf1_train(glob, steps=3):
    tf = tw.compat.v1
    with tf.Graph().as_default():
        w1 = tw.Variable(W1, name="w1", **(dict(placement=P1, sbp=S(1)) if glob else {}))
        w2 = tw.Variable(W2, name="w2", **(dict(placement=P2, sbp=B) if glob else {}))
        x = tf.placeholder(tw.float32, [None, 4])            # an open batch: planned per fed shape
        h = tw.nn.relu(tw.matmul(x, w1))
        if glob:
            h = h.to_global(placement=P2, sbp=S(0))
        loss = tw.reduce_mean(tw.square(tw.tanh(tw.matmul(h, w2))))
        train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            losses = [sess.run([train, loss], {x: X[:n]})[1] for n in (7, 5, 7)[:steps]]
            return losses, sess.run([w1, w2])


def test_session_run_of_a_tf1_graph_on_two_placements_trains_as_one_device():
    losses, weights = _tf1_train(True)
    want_losses, want = _tf1_train(False)
    np.testing.assert_allclose(losses, want_losses, rtol=2e-5)
    for got, w in zip(weights, want):
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=1e-7)
    assert not np.allclose(weights[0], W1)


def test_random_draws_in_the_second_stage_are_one_devices_and_drawn_there():
    def make(glob):
        w1 = tw.Variable(W1, placement=P1, sbp=B) if glob else tw.Variable(W1)
        w2 = tw.Variable(W2, placement=P2, sbp=B) if glob else tw.Variable(W2)

        @tw.function
        def f(x):
            h = tw.nn.relu(tw.matmul(x, w1))
            if glob:
                h = h.to_global(placement=P2, sbp=S(0))
            h = tw.nn.dropout(h, 0.5, seed=7) + tw.random.uniform((7, 5), seed=3)
            return tw.matmul(h, w2)
        return f
    planned, one = make(True), make(False)
    x = _x(True)
    for _ in range(2):                       # the streams continue across calls as on one device
        y = planned(x)
        assert y.placement == P2
        # same draws (a wrong mask or stream moves values by O(1)); the products on row shards
        # may round differently from one device's (BLAS kernels by row count)
        np.testing.assert_allclose(y.numpy(), one(_x(False)).numpy(), rtol=2e-5, atol=1e-6)
    transfers = tw.distribute.explain(planned, x).to_dict()["transfers"]
    assert [t["op"] for t in transfers] == ["_ToGlobal"]       # the draws are planned on stage 2, not moved
