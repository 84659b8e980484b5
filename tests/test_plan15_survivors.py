"""Session 14's mutation survivors in the planner's shortcuts, killed (docs/design/mutation-testing.md,
session 15 zero19): the look-ahead's rule-cost memo keyed on which inputs are decided; a function
result the search must keep (frozen) is not priced; ``_fetch_prices`` skips a value also read
unpinned on another placement, and prices a function result at its read plus its transfers."""
import numpy as np

import tensorweave as tw
from tensorweave.core.sbp import B, P, S
from tensorweave.distribute import plan_placements, planner
from tensorweave.distribute.interpreter import Layout

P2 = tw.placement("cpu", ranks=[0, 1])


def test_the_rule_cost_memo_tells_a_decided_b_input_from_an_undecided_one():
    """``x + y`` with ``x`` hypothetically ``P``: an undecided ``y`` (priced as ``B``) costs
    nothing (``P + P -> P``); a decided ``B`` ``y`` padded to ``P`` costs the reduction that
    follows (``made_partial_cost``). Asked in that order, a memo without the decided inputs in
    its key answered 0 the second time."""
    graph = tw.function(lambda x, y: x + y).get_concrete_function(
        tw.TensorSpec([64, 32], tw.float32), tw.TensorSpec([64, 32], tw.float32)).graph
    add = next(op for op in graph.get_operations() if op.type == "AddV2")
    x, y = add.inputs
    gp = planner.GraphPlan([add], [x, y], list(add.outputs), P2, "t")
    pl = planner._Planner(gp, True)
    hyp = Layout((64, 32), tw.float32, (P,), P2)
    undecided = pl._rule_cost(add, 0, hyp)
    gp.layouts[id(y)] = Layout((64, 32), tw.float32, (B,), P2)
    decided = pl._rule_cost(add, 0, hyp)
    fresh = planner._Planner(gp, True)._rule_cost(add, 0, hyp)
    assert undecided == 0 and decided == fresh > 0


def test_a_frozen_result_is_not_priced(monkeypatch):
    """``y`` is returned and also assigned to an ``S(0)`` variable (a reader whose layout is fixed:
    ``y`` is frozen at ``S(0)``). Its read's price is the same for every plan, so the search's
    costs are those without result prices; priced anyway, they grew by the all-gather's bytes."""
    v = tw.Variable(np.zeros((64, 16), np.float32), placement=P2, sbp=S(0))
    x = tw.constant(np.ones((64, 16), np.float32)).to_global(placement=P2, sbp=S(0))

    def f(x):
        y = x * 2.0
        v.assign(y)
        return y
    costs = {}
    for on in (False, True):
        monkeypatch.setattr(planner, "PRICE_OUTPUTS", on)
        gp = tw.function(f).get_concrete_function(x)._global.plan
        assert gp.layouts[id(gp.fetches[0])]._sbp == (S(0),)
        costs[on] = tuple(gp.search) if gp.search is not None else None
    assert costs[True] == costs[False]
    np.testing.assert_array_equal(tw.function(f)(x).numpy(), np.full((64, 16), 2.0, np.float32))


class _T:
    """A stand-in tensor / op for ``_fetch_prices``."""

    def __init__(self, type_="Tanh", **attrs):
        self.type, self.attrs = type_, attrs
        self.shape = tw.TensorShape([64, 16])
        self.dtype = tw.float32


def _pin(ranks, sbp):
    return _T("_ToGlobal", placement_type="cpu", ranks=ranks, sbp=[sbp])


def test_fetch_prices_skip_a_value_also_read_unpinned_on_another_placement():
    t, pin, other = _T(), _pin([2, 3], "S(0)"), _T("Tanh")
    seg_of = {id(pin): 1, id(other): 1}
    got = plan_placements._fetch_prices([t], set(), {id(t): [pin]}, seg_of, 0, P2)
    assert got is not None and got[id(t)]((S(0),)) > 0
    assert plan_placements._fetch_prices([t], set(), {id(t): [pin, other]}, seg_of, 0, P2) is None


def test_fetch_prices_price_a_function_result_at_its_read_plus_its_transfers(monkeypatch):
    t, pin = _T(), _pin([2, 3], "S(0)")
    seg_of = {id(pin): 1}
    moved = plan_placements._fetch_prices([t], set(), {id(t): [pin]}, seg_of, 0, P2)[id(t)]
    both = plan_placements._fetch_prices([t], {id(t)}, {id(t): [pin]}, seg_of, 0, P2)[id(t)]
    read = planner.output_prices([t], P2)[id(t)]
    for nd in ((P,), (S(0),), (B,)):
        assert both(nd) == moved(nd) + read(nd)
    alone = plan_placements._fetch_prices([t], {id(t)}, {}, seg_of, 0, P2)[id(t)]
    assert alone((B,)) == 0 and alone((P,)) == read((P,)) > 0
    monkeypatch.setattr(planner, "PRICE_OUTPUTS", False)      # results unpriced: kept (frozen), not free
    assert plan_placements._fetch_prices([t], {id(t)}, {}, seg_of, 0, P2) is None


def test_a_result_of_an_earlier_stage_is_not_returned_partial_where_gathering_costs_less():
    """Stage 1 (ranks 0, 1) computes a 256x2 @ 2x256 contraction and returns it; stage 2 (ranks 2, 3)
    works on another input. The result was frozen at greedy's ``P`` (its read all-reduces 512 KiB);
    priced, the stage gathers its two small inputs instead."""
    rng = np.random.default_rng(15)
    h, w = rng.standard_normal((256, 2)).astype(np.float32), rng.standard_normal((2, 256)).astype(np.float32)
    q = tw.placement("cpu", ranks=[2, 3])
    args = (tw.constant(h).to_global(placement=P2, sbp=S(1)), tw.constant(w).to_global(placement=P2, sbp=S(0)),
            tw.constant(np.ones((4, 4), np.float32)).to_global(placement=q, sbp=S(0)))

    def f(h, w, u):
        return tw.matmul(h, w), tw.reduce_sum(tw.tanh(u))
    z, s = tw.function(f)(*args)
    assert z.sbp == (B,)
    np.testing.assert_allclose(z.numpy(), h @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(float(s), 16 * np.tanh(1.0), rtol=1e-5)
