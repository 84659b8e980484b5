"""The planner's joint search (``distribute/plan_search.py``): on a graph where the greedy pass
pays an all-to-all (a chain settles on rows, S(0), beside a class-split S(1) value), the joint
plan moves fewer bytes and equals one device; on the planner's test functions it is never
costlier than greedy (its own cost model), and with the search off the greedy plan is kept."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, P, S
from tensorweave.distribute import plan_search

P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])
MESH = tw.placement("cpu", ranks=[[0, 1], [2, 3]])
RNG = np.random.default_rng(1314)
X = RNG.standard_normal((5, 7)).astype(np.float32)
W = RNG.standard_normal((5, 7)).astype(np.float32)


def chain(x):
    """A softmax-like gradient: ``ones`` broadcast (any layout is free) times a constant, its row sums, and
    ``exp(x)`` of a class-split x. Greedy writes the ones as rows (S(0): fewer bytes per rank),
    then must all-to-all exp(x) to meet them; jointly, the chain follows x's S(1)."""
    one = tw.reshape(tw.ones_like(tw.reduce_sum(x)), [1, 1])      # global (B): a loss gradient's seed
    g = tw.broadcast_to(one, [5, 7]) * W
    return g - tw.exp(x) * tw.reduce_sum(g, axis=1, keepdims=True)


def _plan(fn, *args):
    return tw.function(fn).get_concrete_function(*args)._global.plan


def _bytes(fn, *args):
    return tw.distribute.explain(tw.function(fn), *args).to_dict()["bytes_moved"]


def test_joint_plan_moves_fewer_bytes_than_greedy_and_equals_one_device(monkeypatch):
    x = tw.constant(X).to_global(placement=P3, sbp=S(1))
    want = chain(tw.constant(X)).numpy()
    monkeypatch.setattr(plan_search, "SEARCH", False)
    greedy = _bytes(chain, x)
    np.testing.assert_allclose(tw.function(chain)(x).numpy(), want, rtol=1e-6)
    monkeypatch.setattr(plan_search, "SEARCH", True)
    joint = _bytes(chain, x)
    got = tw.function(chain)(x)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    assert greedy > 0 and joint < greedy, (greedy, joint)
    greedy_cost, kept = _plan(chain, x).search
    assert kept < greedy_cost


def test_log_softmax_gradient_keeps_the_classes_split():
    """With the decomposition (plan_decompose.py) the forward moves row statistics only; the
    search keeps the backward's chain on S(1) too (greedy all-to-alls exp(log_softmax))."""
    def loss_and_grad(x):
        with tw.GradientTape() as tape:
            tape.watch(x)
            loss = tw.reduce_sum(tw.nn.log_softmax(x) * W)
        return loss, tape.gradient(loss, x)
    x = tw.constant(X).to_global(placement=P3, sbp=S(1))
    shapes = {tuple(c["shape"]) for c in tw.distribute.explain(tw.function(loss_and_grad), x).to_dict()["collectives"]}
    assert shapes == {(5, 1)}
    _, g = tw.function(loss_and_grad)(x)
    _, want = loss_and_grad(tw.constant(X))
    np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=2e-5, atol=1e-6)


def _mlp(x, w, b):
    h = tw.nn.relu(tw.matmul(x, w) + b)
    return tw.reduce_sum(h * h, axis=1) - tw.reduce_mean(h)


def _grads(x, w, b):
    with tw.GradientTape() as tape:
        tape.watch([w, b])
        loss = tw.reduce_mean(tw.square(tw.matmul(x, w) + b)) + tw.reduce_sum(tw.nn.softmax(tw.matmul(x, w)))
    return tape.gradient(loss, [w, b]) + [loss]


CASES = {"dp2": (P2, S(0), B, B), "mp3": (P3, B, S(1), S(0)), "contract2": (P2, S(1), S(0), B),
         "partial3": (P3, S(0), B, P), "mesh": (MESH, (S(0), S(1)), (B, S(0)), (B, B))}


@pytest.mark.parametrize("fn", [_mlp, _grads, chain], ids=["mlp", "grads", "chain"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_never_costlier_than_greedy_and_equal_to_one_device(fn, case):
    placement, xs, ws, bs = CASES[case]
    vals = (RNG.standard_normal((7, 5)).astype(np.float32), RNG.standard_normal((5, 7)).astype(np.float32),
            RNG.standard_normal((7,)).astype(np.float32))
    if fn is chain:
        vals, (xs,) = (X,), (xs,)
    args = [tw.constant(v).to_global(placement=placement, sbp=s) for v, s in zip(vals, (xs, ws, bs))]
    gp = _plan(fn, *args)
    if gp.search is not None:
        greedy_cost, kept = gp.search
        assert kept <= greedy_cost
    got = tw.nest.flatten(tw.function(fn)(*args))
    want = tw.nest.flatten(fn(*[tw.constant(v) for v in vals]))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=1e-5)


def test_search_off_or_without_look_ahead_keeps_the_greedy_plan(monkeypatch):
    x = tw.constant(X).to_global(placement=P3, sbp=S(1))
    monkeypatch.setattr(plan_search, "SEARCH", False)
    assert _plan(chain, x).search is None


def test_the_dp_alone_finds_the_joint_plan(monkeypatch):
    """The DP's sinks-up choice on its own (no improvement pass) beats greedy on the chain."""
    monkeypatch.setattr(plan_search._Model, "improve", lambda self, assign: assign)
    x = tw.constant(X).to_global(placement=P3, sbp=S(1))
    greedy_cost, kept = _plan(chain, x).search
    assert kept < greedy_cost
    np.testing.assert_allclose(tw.function(chain)(x).numpy(), chain(tw.constant(X)).numpy(), rtol=1e-6)
