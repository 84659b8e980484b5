"""Layout choice across segments (plan_placements._choose_moves): a value moved to another
placement without a to_global pin (a gradient going back to its stage) takes the layout that
moves the fewest bytes with what its reader segment then needs, not just its source's SBP."""
import numpy as np

import tensorweave as tw
from tensorweave.core.sbp import S
from tensorweave.distribute import plan_placements

RNG = np.random.default_rng(1302)
X = RNG.standard_normal((8, 6)).astype(np.float32)
W1 = RNG.standard_normal((6, 12)).astype(np.float32)
W2 = RNG.standard_normal((12, 4)).astype(np.float32)
P1 = tw.placement("cpu", ranks=[0, 1])
P2 = tw.placement("cpu", ranks=[2, 3, 4])


def _step(glob):
    if glob:
        w1, w2 = tw.Variable(W1, placement=P1, sbp=S(0)), tw.Variable(W2, placement=P2, sbp=S(0))
    else:
        w1, w2 = tw.Variable(W1), tw.Variable(W2)

    def step(x):
        with tw.GradientTape() as tape:
            h = tw.nn.relu(tw.matmul(x, w1))
            if glob:       # stage 2 model-parallel: h split by columns, w2 by rows
                h = h.to_global(placement=P2, sbp=S(1))
            loss = tw.reduce_mean(tw.square(tw.matmul(h, w2)))
        return loss, tape.gradient(loss, [w1, w2])
    return step


def _x(glob):
    return tw.constant(X).to_global(placement=P1, sbp=S(0)) if glob else tw.constant(X)


def _back(d):
    (move,) = [t for t in d["transfers"] if t["op"].endswith("_ToPlacement")]
    return move, [c for c in d["collectives"] if c["segment"] == 2]


def test_the_gradient_moved_back_is_laid_out_for_its_reader_segment(monkeypatch):
    # h's gradient is S(1) on stage 2 (columns, as h); stage 1's ReluGrad reads it beside the S(0) rows
    monkeypatch.setattr(plan_placements, "MAX_CHOSEN_MOVES", 0)          # the old choice: the source's SBP
    before = tw.distribute.explain(_step(True), _x(True)).to_dict()
    move, back = _back(before)
    assert (move["from"]["sbp"], move["to"]["sbp"], move["bytes"]) == ("(S(1),)", "(S(1),)", 8 * 12 * 4)
    assert [(c["kind"], c["op"], c["bytes"]) for c in back] == [("all_to_all", "ReluGrad", 192)]
    monkeypatch.undo()
    after = tw.distribute.explain(_step(True), _x(True)).to_dict()
    move, back = _back(after)
    assert (move["to"]["sbp"], move["bytes"]) == ("(S(0),)", 8 * 12 * 4)    # moved straight into rows: as many bytes
    assert back == []                                                        # and no all-to-all after it
    assert after["bytes_moved"] == before["bytes_moved"] - 192


def test_values_with_the_chosen_layout_equal_one_device():
    loss, grads = tw.function(_step(True))(_x(True))
    want_loss, want = _step(False)(_x(False))
    np.testing.assert_allclose(loss.numpy(), want_loss.numpy(), rtol=2e-5)
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=1e-6)


def test_one_rank_stages_with_a_local_output():
    """Stages of one rank each; the function also returns a value no global tensor reaches
    (fetched local from its segment, its one rank's value)."""
    q0, q1 = tw.placement("cpu", ranks=[0]), tw.placement("cpu", ranks=[1])
    w1, w2 = tw.Variable(W1, placement=q0, sbp=S(0)), tw.Variable(W2, placement=q1, sbp=S(1))

    @tw.function
    def f(x):
        h = tw.nn.relu(tw.matmul(x, w1)).to_global(placement=q1, sbp=S(0))
        return tw.reduce_sum(tw.matmul(h, w2)), tw.constant(3.0) * 2.0
    y, c = f(tw.constant(X).to_global(placement=q0, sbp=S(0)))
    np.testing.assert_allclose(y.numpy(), np.maximum(X @ W1, 0).dot(W2).sum(), rtol=2e-5)
    assert not getattr(c, "is_global", False) and float(c) == 6.0
