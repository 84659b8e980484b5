"""Tests added by mutation testing today's distribute changes (docs/design/mutation-testing.md,
session 11): the group's bucket reduction on one member; on several placements the planning
seconds, segments opened by a local value, the gradient of a move on one placement, the layout
named when a concrete function gets another."""
import types

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import errors
from tensorweave.core.sbp import S
from tensorweave.distribute import collective
from tensorweave.distribute.collective import InProcessGroup


def test_a_one_member_bucket_is_a_read_only_copy_of_its_values(monkeypatch):
    """The group's own bucket reduction on one member (a communicator of one rank answers before
    it reaches the group): a copy of the values, chunk by chunk."""
    monkeypatch.setattr(collective, "REDUCE_CHUNK", 4)          # several chunks, one member takes them all
    values = [np.arange(10, dtype=np.float32), np.arange(6.0).reshape(2, 3)]
    for op in ("sum", "max", "prod"):
        got = InProcessGroup([0], timeout=20).reduce_start(0, values, op).wait()
        for g, v in zip(got, values):
            np.testing.assert_array_equal(g, v)
            assert g.dtype == v.dtype and g is not v and not g.flags.writeable


def _scripted_clock(monkeypatch, *readings):
    """plan_placements' clock reads ``readings`` in order (no measured time in a test)."""
    from tensorweave.distribute import plan_placements
    monkeypatch.setattr(plan_placements, "time", types.SimpleNamespace(perf_counter=iter(readings).__next__))


def test_session_run_planning_seconds_are_the_clock_difference_around_planning(monkeypatch):
    from tensorweave.distribute.plan_placements import MultiPlacementSessionRun
    _scripted_clock(monkeypatch, 10.0, 12.5)
    tf = tw.compat.v1
    p1, p2 = tw.placement("cpu", ranks=[0, 1]), tw.placement("cpu", ranks=[2, 3])
    with tf.Graph().as_default() as g:
        w1 = tw.Variable(np.ones((4, 5), np.float32), placement=p1, sbp=S(1))
        w2 = tw.Variable(np.ones((5, 3), np.float32), placement=p2, sbp=S(1))
        x = tf.placeholder(tw.float32, [6, 4])
        y = tw.reduce_sum(tw.matmul(tw.matmul(x, w1).to_global(placement=p2, sbp=S(0)), w2))
        run = MultiPlacementSessionRun([y], [], [x], g)
    assert run.seconds == 2.5


def test_the_gradient_of_a_move_on_one_placement_is_no_move():
    """On one placement the gradient of ``to_global`` is the incoming gradient itself: a local
    one stays local (no ``_ToPlacement`` op in the plan, as between two placements)."""
    p = tw.placement("cpu", ranks=[0, 1])
    x = tw.constant(np.arange(8.0, dtype=np.float32).reshape(4, 2)).to_global(placement=p, sbp=S(0))

    def f(x):
        with tw.GradientTape() as tape:
            tape.watch(x)
            y = x.to_global(placement=p, sbp=tw.sbp.broadcast)
        return tape.gradient(y, x, output_gradients=tw.ones((4, 2)) * 3.0)
    ops = [o["type"] for o in tw.distribute.explain(f, x).to_dict()["ops"]]
    assert ops == ["Fill", "Mul"]
    np.testing.assert_array_equal(tw.function(f)(x).numpy(), np.full((4, 2), 3.0, np.float32))


def test_explain_planning_seconds_of_a_function_on_two_placements_are_the_clock_difference(monkeypatch):
    p1, p2 = tw.placement("cpu", ranks=[0, 1]), tw.placement("cpu", ranks=[2, 3])
    w = tw.Variable(np.ones((4, 3), np.float32), placement=p2, sbp=S(1))

    def f(x):
        return tw.reduce_sum(tw.matmul(tw.exp(x).to_global(placement=p2, sbp=S(0)), w))
    x = tw.constant(np.ones((6, 4), np.float32)).to_global(placement=p1, sbp=S(0))
    _scripted_clock(monkeypatch, 3.0, 4.75)
    assert tw.distribute.explain(f, x).to_dict()["planning_seconds"] == 1.75


def test_a_local_result_computed_first_leaves_the_stages_their_placements():
    """A local value that no stage reads (computed first, returned as is) opens the first
    segment: the stage ops after it still get their own segments on their placements."""
    p1, p2 = tw.placement("cpu", ranks=[0, 1]), tw.placement("cpu", ranks=[2, 3])
    w = tw.Variable(np.full((4, 3), 2.0, np.float32), placement=p2, sbp=S(1))

    @tw.function
    def f(x, c):
        k = c * 3.0
        return k, tw.reduce_sum(tw.matmul(tw.exp(x).to_global(placement=p2, sbp=S(0)), w))
    x = tw.constant(np.zeros((6, 4), np.float32)).to_global(placement=p1, sbp=S(0))
    k, y = f(x, tw.constant(np.float32(2.0)))
    assert float(k) == 6.0 and float(y) == 6 * 4 * 3 * 2.0 and y.placement == p2


def test_a_concrete_function_on_two_placements_names_the_layout_it_got():
    p1, p2 = tw.placement("cpu", ranks=[0, 1]), tw.placement("cpu", ranks=[2, 3])
    w = tw.Variable(np.full((4, 3), 2.0, np.float32), placement=p2, sbp=S(1))

    @tw.function
    def f(x):
        return tw.reduce_sum(tw.matmul(tw.exp(x).to_global(placement=p2, sbp=S(0)), w))
    x = np.zeros((6, 4), np.float32)
    cf = f.get_concrete_function(tw.constant(x).to_global(placement=p1, sbp=S(0)))
    with pytest.raises(errors.InvalidArgumentError, match=r"traced for \(placement.*\(S\(0\),\)\), got a local tensor"):
        cf(tw.constant(x))
    with pytest.raises(errors.InvalidArgumentError, match=r"got \(placement\(type=\"cpu\", ranks=\[0, 1\]\), \(B,\)\)"):
        cf(tw.constant(x).to_global(placement=p1, sbp=tw.sbp.broadcast))


def test_the_look_ahead_leaves_a_contractions_own_partial_unpriced():
    """exp(c) feeding ``matmul(., w)`` with ``w`` split on its rows: ``S(1) x S(0) -> P`` makes
    no input partial, so it is free ahead (the result is returned partial); pricing its
    reduction would all-gather ``w`` instead (made_partial_cost)."""
    p = tw.placement("cpu", ranks=[0, 1])
    c = tw.constant(np.ones((64, 2), np.float32)).to_global(placement=p, sbp=tw.sbp.broadcast)
    w = tw.constant(np.ones((2, 3), np.float32)).to_global(placement=p, sbp=S(0))

    def f(c, w):
        return tw.matmul(tw.exp(c), w)
    e = tw.distribute.explain(f, c, w).to_dict()
    assert [o["signature"] for o in e["ops"]] == ["S(1) -> S(1)", "S(1), S(0) -> P"] and e["collectives"] == []
    np.testing.assert_allclose(tw.function(f)(c, w).numpy(), np.full((64, 3), 2 * np.e, np.float32), rtol=1e-6)
