"""The planner's shortcuts for planning time (issue 13: a 1,000-op graph plans in well under a
second) change no plan: the look-ahead's memoised rule costs (``planner.RULE_COST_MEMO``) and
the joint search's shared work figures and per-input DP answers (``plan_search.SHARED_WORK``)
give the same signatures, layouts and boxings as asking every time, on a graph of repeated
blocks like ``benchmarks/bench_planner.py``'s (model-parallel pairs, a layer norm, a softmax)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S
from tensorweave.distribute import plan_search, planner
from tensorweave.distribute.planner import plan_graph

RNG = np.random.default_rng(1415)


def _blocks(p, layers=4):
    mesh = p.ndim == 2       # data-parallel on the first mesh axis, model-parallel on the second
    lay = (lambda s: (S(0) if s == "x" else B, s if s != "x" else B)) if mesh else (lambda s: S(0) if s == "x" else s)
    x = tw.constant(RNG.standard_normal((6, 4)).astype(np.float32)).to_global(placement=p, sbp=lay("x"))
    ws = []
    for i in range(layers):
        split = i % 2 == 0
        a, b = (tw.constant(RNG.standard_normal((4, 4)).astype(np.float32)) for _ in range(2))
        ws += [a.to_global(placement=p, sbp=lay(S(1) if split else B)),
               b.to_global(placement=p, sbp=lay(S(0) if split else B))]

    def f(x, *flat):
        h = x
        for i in range(layers):
            y = tw.matmul(tw.nn.relu(tw.matmul(h, flat[2 * i]) + 0.1), flat[2 * i + 1])
            mean = tw.reduce_mean(y, axis=1, keepdims=True)
            h = h + (y - mean) * tw.math.rsqrt(tw.reduce_mean(tw.square(y - mean), axis=1, keepdims=True) + 1e-5)
        return tw.reduce_sum(tw.nn.softmax(h) * h)
    return f, [x] + ws


def _signature(gp):
    out = []
    for op in gp.ops:
        q = gp.op_plans.get(id(op))
        if q is not None:
            out.append((op.name, q.kind, tuple(map(tuple, q.in_nd)), tuple(map(tuple, q.out_nd)),
                        tuple(None if b is None else (b.src_sbp, b.dst_sbp, int(b.bytes)) for b in q.plans)))
    return out


@pytest.mark.parametrize("ranks", [[0, 1], [0, 1, 2]], ids=["2", "3"])       # (a 2x2 mesh: ~1 min on the loaded CI)
def test_shortcuts_give_the_same_plan(ranks, monkeypatch):
    p = tw.placement("cpu", ranks=ranks)
    f, args = _blocks(p, layers=2 if p.ndim == 2 else 4)
    gp0 = tw.function(f).get_concrete_function(*args)._global.plan
    layouts = [(p, gp0.layouts[id(t)]._sbp) if id(t) not in gp0.local else None for t in gp0.feeds]
    fast = plan_graph(gp0.fetches, [], gp0.feeds, layouts, p)
    monkeypatch.setattr(planner, "RULE_COST_MEMO", False)
    monkeypatch.setattr(plan_search, "SHARED_WORK", False)
    slow = plan_graph(gp0.fetches, [], gp0.feeds, layouts, p)
    assert _signature(fast) == _signature(slow)
    assert tuple(fast.search) == tuple(slow.search) and fast.search.dp == slow.search.dp
    assert any(b is not None for q in fast.op_plans.values() for b in q.plans)       # something is boxed


def test_the_memo_is_asked_and_answers_repeated_questions(monkeypatch):
    """Repeated blocks ask the look-ahead the same questions: the memo holds fewer answers than
    the questions asked."""
    p = tw.placement("cpu", ranks=[0, 1])
    f, args = _blocks(p)
    asked = []
    orig = planner._Planner._least_rule_cost
    monkeypatch.setattr(planner._Planner, "_least_rule_cost", lambda self, *a: asked.append(1) or orig(self, *a))
    gp0 = tw.function(f).get_concrete_function(*args)._global.plan
    memo_asked = len(asked)
    layouts = [(p, gp0.layouts[id(t)]._sbp) if id(t) not in gp0.local else None for t in gp0.feeds]
    monkeypatch.setattr(planner, "RULE_COST_MEMO", False)
    asked.clear()
    plan_graph(gp0.fetches, [], gp0.feeds, layouts, p)
    assert 0 < memo_asked < len(asked), (memo_asked, len(asked))
