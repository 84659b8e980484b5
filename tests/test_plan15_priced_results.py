"""A function's results priced at the layout its caller reads them in (``planner.PRICE_OUTPUTS``,
``output_prices``; the joint search's priced fetches): a large contraction's partial sum is not
returned ``P`` (the caller's read would all-reduce it) when gathering the small inputs costs less;
a small one stays ``P``; ``explain`` lists each result's read bytes; on the planner's test
functions no result is left unreplicated where its producer's ``B`` candidate costs less in the
search's own model. Values equal one device."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, P, S
from tensorweave.distribute import plan_search, planner

P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])
RNG = np.random.default_rng(1515)


def outer(x, w):
    return tw.matmul(x, w)


def _args(m, k, n):
    x, w = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((k, n)).astype(np.float32)
    return (x, w), (tw.constant(x).to_global(placement=P2, sbp=S(1)), tw.constant(w).to_global(placement=P2, sbp=S(0)))


def test_a_large_partial_result_is_replicated_inside_the_plan(monkeypatch):
    """256x2 @ 2x256 with the contraction split: P costs nothing inside but 512 KiB when read;
    gathering both inputs moves 4 KiB."""
    (x, w), args = _args(256, 2, 256)
    monkeypatch.setattr(planner, "PRICE_OUTPUTS", False)
    free = tw.distribute.explain(tw.function(outer), *args).to_dict()
    assert [r["sbp"] for r in free["results"]] == ["(P,)"] and free["bytes_moved"] == 0
    assert free["results_read_bytes"] == 256 * 256 * 4 * 2
    monkeypatch.undo()
    priced = tw.distribute.explain(tw.function(outer), *args).to_dict()
    assert [r["sbp"] for r in priced["results"]] == ["(B,)"] and priced["results_read_bytes"] == 0
    assert 0 < priced["bytes_moved"] < free["results_read_bytes"]
    got = tw.function(outer)(*args)
    assert got.sbp == (B,)
    np.testing.assert_allclose(got.numpy(), x @ w, rtol=1e-5, atol=1e-5)
    greedy, kept = tw.function(outer).get_concrete_function(*args)._global.plan.search
    assert kept < greedy


def test_a_small_partial_result_stays_partial_and_explain_lists_its_read():
    """8x4 @ 4x2: the result's read (64 B each way) is cheaper than two more collectives."""
    (x, w), args = _args(8, 4, 2)
    e = tw.distribute.explain(tw.function(outer), *args)
    d = e.to_dict()
    assert d["results"] == [{"tensor": d["results"][0]["tensor"], "sbp": "(P,)", "read_bytes": 128}]
    assert "results not replicated" in e.text()
    np.testing.assert_allclose(tw.function(outer)(*args).numpy(), x @ w, rtol=1e-5, atol=1e-5)


def test_a_pinned_result_keeps_its_pin():
    (x, w), args = _args(256, 2, 256)
    got = tw.function(lambda x, w: outer(x, w).to_global(sbp=P))(*args)
    assert got.sbp == (P,)
    np.testing.assert_allclose(got.numpy(), x @ w, rtol=1e-5, atol=1e-5)


def _grads(x, w, b):
    with tw.GradientTape() as tape:
        tape.watch([w, b])
        loss = tw.reduce_mean(tw.square(tw.matmul(x, w) + b)) + tw.reduce_sum(tw.nn.softmax(tw.matmul(x, w)))
    return tape.gradient(loss, [w, b]) + [loss]


def _mlp(x, w, b):
    h = tw.nn.relu(tw.matmul(x, w) + b)
    return tw.reduce_sum(h * h, axis=1) - tw.reduce_mean(h)


CASES = {"dp2": (P2, S(0), B, B), "mp3": (P3, B, S(1), S(0)), "contract2": (P2, S(1), S(0), B),
         "partial3": (P3, S(0), B, P), "wide2": (P2, S(1), S(0), S(0))}


@pytest.mark.parametrize("fn", [_mlp, _grads, outer], ids=["mlp", "grads", "outer"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_no_result_is_left_unreplicated_where_its_b_candidate_costs_less(monkeypatch, fn, case):
    """In the search's own model (the plan's final choices): moving a priced result's producer
    to a candidate with the result ``B`` never lowers the total."""
    models = []
    real = plan_search._Model.__init__

    def recording(self, *a, **k):
        real(self, *a, **k)
        models.append(self)
    monkeypatch.setattr(plan_search._Model, "__init__", recording)
    placement, xs, ws, bs = CASES[case]
    shapes = ((7, 40), (40, 64), (64,)) if fn is not outer else ((64, 6), (6, 64))
    vals = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    args = [tw.constant(v).to_global(placement=placement, sbp=s) for v, s in zip(vals, (xs, ws, bs))]
    gp = tw.function(fn).get_concrete_function(*args)._global.plan
    checked = 0
    for model in models:
        if model.pl.gp is not gp:
            continue
        assign = []
        for n in model.nodes:
            p = gp.op_plans[id(n.op)]
            assign.append(next(c for c, combo in enumerate(n.combos)
                               if list(combo[1]) == list(p.in_nd) and list(combo[2]) == list(p.out_nd)))
        total = model.total(assign)
        b = model._id((B,) * placement.ndim)
        for (i, j) in model.priced:
            if model.cout[i][assign[i]][j] == b:
                continue
            for c in model.allowed[i]:
                if model.cout[i][c][j] == b:
                    checked += 1
                    assert model.total(assign[:i] + [c] + assign[i + 1:]) >= total, (fn.__name__, case, i, c)
    got = tw.nest.flatten(tw.function(fn)(*args))
    want = tw.nest.flatten(fn(*[tw.constant(v) for v in vals]))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=1e-5)
