"""A producing segment lays out its output with the later readers in view
(``plan_placements._fetch_prices``, the joint search's priced fetches): a stage's contraction
left partial (``S(k) x S(k) -> P``, the greedy pass's cheapest work, no reader on its stage) is
sent partial to the next stage — every rank's whole partial crossing — unless the transfer's
bytes are counted against each candidate layout; with them the stage computes its output split
and sends that. Bytes moved from ``explain`` before/after; values equal one device."""
import numpy as np

import tensorweave as tw
from tensorweave.core.sbp import S
from tensorweave.distribute import plan_placements

RNG = np.random.default_rng(1416)
H = RNG.standard_normal((160, 12)).astype(np.float32)
W = RNG.standard_normal((12, 180)).astype(np.float32)
P1 = tw.placement("cpu", ranks=[0, 1])
P4 = tw.placement("cpu", ranks=[0, 1, 2, 3])


def stages(h, w):
    z = tw.matmul(h, w) * 2.0                       # stage 1: contraction split (h by columns, w by rows)
    return tw.reduce_sum(tw.tanh(z.to_global(placement=P4, sbp=S(1))))


def _args():
    return tw.constant(H).to_global(placement=P1, sbp=S(1)), tw.constant(W).to_global(placement=P1, sbp=S(0))


def test_the_stage_output_is_laid_out_for_its_transfer(monkeypatch):
    want = np.tanh(H.astype(np.float64) @ W * 2).sum()
    monkeypatch.setattr(plan_placements, "PRICE_FETCHES", False)
    before = tw.distribute.explain(tw.function(stages), *_args()).to_dict()
    np.testing.assert_allclose(float(tw.function(stages)(*_args())), want, rtol=1e-4)
    assert {t["from"]["sbp"] for t in before["transfers"]} == {"(P,)"}
    monkeypatch.undo()
    after = tw.distribute.explain(tw.function(stages), *_args()).to_dict()
    np.testing.assert_allclose(float(tw.function(stages)(*_args())), want, rtol=1e-4)
    assert {t["from"]["sbp"] for t in after["transfers"]} == {"(S(1),)"}
    assert after["bytes_moved"] < before["bytes_moved"], (before["bytes_moved"], after["bytes_moved"])


def test_gradients_through_the_priced_stage_equal_one_device():
    def loss_and_grads(h, w):
        with tw.GradientTape() as tape:
            tape.watch([h, w])
            loss = stages(h, w)
        return loss, tape.gradient(loss, [h, w])
    loss, (gh, gw) = tw.function(loss_and_grads)(*_args())
    want_loss, (wh, ww) = loss_and_grads(tw.constant(H), tw.constant(W))
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-4)
    np.testing.assert_allclose(gh.numpy(), wh.numpy(), rtol=2e-4, atol=1e-4)
    np.testing.assert_allclose(gw.numpy(), ww.numpy(), rtol=2e-4, atol=1e-4)
