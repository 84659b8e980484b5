"""A rank plan's steps left in Python moved into nogil segments (issue 13, session 23 seg27): the
product ``runtime/overlap.py`` starts early runs inside a segment where ``overlap.defer`` would run it
at once (a rank thread's products are not split), and the apply after the bucket's wait runs as a
segment's rows, the ZeRO-1 weights' ``_VariableRows`` views made at its start only where the update
writes them (``runtime/nogil_segments.py``). The bits stay those of segments off, on 1, 2 and 3 ranks
and on one device, whichever optimizer form the bucket applies."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute import fused_sgd
from tensorweave.kernels.cpu import jit, nogil_ops as N
from tensorweave.runtime import nogil_segments, overlap
from mlp_step import mlp_step, plans, run, same
from test_nogil24_segments import _segments, one_thread, switch  # noqa: F401 - fixtures

SIZES = (32, 512, 512, 10)      # the middle layer's gradient products: a pair the schedule starts early


@pytest.fixture(autouse=True)
def keep_early(monkeypatch):
    """Products started early kept in segments (the default since session 24; ``TW_NOGIL_EARLY_PRODUCTS=0`` off)."""
    monkeypatch.setitem(nogil_segments._keep_early, "on", True)


def test_products_started_early_stay_out_when_switched_off(one_thread, switch, monkeypatch):  # noqa: F811
    monkeypatch.setitem(nogil_segments._keep_early, "on", False)
    on = _train(switch, True, 2)
    off = _train(switch, False, 2)
    assert same(on[0], off[0]) and same(on[1], off[1])
    assert all(plan.overlap_kept is None and plan.runner.overlap for plan in plans(on[2]))


def _step(ranks, momentum=0.0):
    """The MLP step (784-512-512-10's shape, smaller) on ``ranks`` in-process ranks (None: one device)."""
    return mlp_step(SIZES, ranks, batch=24, seed=27, momentum=momentum)


def _train(switch, on, ranks, steps=5, momentum=0.0, between=None):  # noqa: F811
    switch(on)
    step, params = _step(ranks, momentum=momentum)
    return (*run(step, params, steps, between and (lambda i: between(step, i))), step)


def _ops(seg):
    return [seg.plan.steps[seg.first + k].node.op for k in range(len(seg.steps))]


@pytest.mark.parametrize("ranks", [None, 1, 2, 3])
def test_products_started_early_run_in_segments_with_the_same_bits(one_thread, switch, ranks):  # noqa: F811
    off = _train(switch, False, ranks)
    on = _train(switch, True, ranks)
    assert same(on[0], off[0]) and same(on[1], off[1])
    for plan, segs in zip(plans(on[2]), _segments(on[2])):
        early = overlap._schedule([(st.node.op, st.ins, st.node.heavy, overlap._barrier(st.node))
                                   for st in plan.steps], [st.outs if st.single else None for st in plan.steps],
                                  plan.deps)
        assert early or ranks == 1, "the step has a product the schedule starts early"
        # on this thread (one BLAS thread) defer runs them at once: each is a compiled step of a segment
        assert (plan.overlap_kept or set()) == {j for j, _, _ in early} and plan.runner.overlap == []
        inside = {seg.first + k: seg for seg in segs for k in range(len(seg.steps))}
        assert all(j in inside and inside[j].kept for j in plan.overlap_kept or ())
        for j, launch, _ in early:      # right before its launch step (the plain runner's order)
            members = inside[j].members
            assert members.index(j) + 1 == members.index(launch) and inside[j].first == min(members)
        assert all(seg.runs["compiled"] >= 2 for seg in segs)


def test_against_one_device_within_rounding(one_thread, switch):  # noqa: F811
    one = _train(switch, True, None)
    for ranks in (2, 3):
        dp = _train(switch, True, ranks)
        np.testing.assert_allclose(np.array(dp[0], np.float64), np.array(one[0], np.float64), rtol=1e-5)
        for a, b in zip(dp[1], one[1]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_thread_that_would_hand_off_sends_the_plan_back(one_thread, switch, monkeypatch):  # noqa: F811
    switch(True)
    step, _ = _step(2)
    for _ in range(2):
        step()
    jit.wait_for_compiles()
    step()
    bound, segs = plans(step), _segments(step)
    guarded = [seg for per in segs for seg in per if seg.kept]
    assert len(guarded) == 2 and all(plan.overlap_kept for plan in bound)
    real = overlap.hands_off
    monkeypatch.setattr(overlap, "hands_off", lambda: True)
    loss = step()
    # the segments ran their steps the Python way, the plans go back to be recorded with the schedule whole
    assert all(seg.runs["python"] == 1 and seg.runs["why"] == "share or busy" for seg in guarded)
    assert all(plan.runner is None and plan.overlap_kept is None for plan in bound)
    assert all(overlap.schedule(plan) for plan in bound)
    monkeypatch.setattr(overlap, "hands_off", real)
    assert np.isfinite(loss.numpy())
    step()                               # recorded again on this thread: kept in segments once more
    assert all(plan.overlap_kept for plan in bound)


def test_kept_only_where_a_segment_holds_the_product(one_thread, switch, monkeypatch):  # noqa: F811
    """A product whose run is too short for a segment keeps its overlap (no segment would guard it)."""
    switch(True)
    monkeypatch.setattr(nogil_segments, "MIN_INSTRUCTIONS", 10 ** 6)
    step, _ = _step(2)
    for _ in range(3):
        step()
    for plan in plans(step):
        assert plan.overlap_kept is None and overlap.schedule(plan)


def _apply_segments(step):
    return [[seg for seg in segs if N.APPLY in seg.program[:, 0]] for segs in _segments(step)]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("ranks", [2, 3])
def test_rank_apply_in_a_segment_skips_what_the_bucket_applied(one_thread, switch, ranks, momentum):  # noqa: F811
    off = _train(switch, False, ranks, momentum=momentum)
    on = _train(switch, True, ranks, momentum=momentum)
    assert same(on[0], off[0]) and same(on[1], off[1])
    for applied in _apply_segments(on[2]):
        assert len(applied) == 1
        seg = applied[0]
        ops = _ops(seg)
        assert ops[-1] == "ResourceGroupApplyKerasMomentum" and set(ops[:-1]) == {"_VariableRows"}
        # rows for the variables kept all-reduced only: the ZeRO-1 weights' gradients were applied by
        # the bucket (None), no view made (which are ZeRO-1 is the planner's choice by size)
        assert set(seg.program[:, 0]) == {N.APPLY} and seg.views == []
        assert len(seg.absent) == len(ops) - 1 and len(seg.program) + len(seg.absent) == 6
        assert (seg.program[:, 5] >= 0).all() == (momentum > 0)
        assert seg.runs["compiled"] >= 2 and seg.runs["python"] <= 1


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_unfused_rank_apply_updates_the_zero_rows_in_a_segment(one_thread, switch, monkeypatch, momentum):  # noqa: F811
    monkeypatch.setattr(fused_sgd, "ENABLED", False)       # the update writes each rank's rows itself
    off = _train(switch, False, 2, momentum=momentum)
    on = _train(switch, True, 2, momentum=momentum)
    assert same(on[0], off[0]) and same(on[1], off[1])
    for applied in _apply_segments(on[2]):
        seg = applied[0]
        assert list(seg.program[:, 0]) == [N.APPLY] * 6 and not seg.absent and len(seg.views) == 3
        assert seg.runs["compiled"] >= 2
        rows = [seg.program[r, 4] for r in range(6)]        # a weight's row: its rank's rows, not the whole
        assert sorted(rows)[-1] == 256 * 512 and 16 * 512 in rows


def test_a_gradient_the_bucket_did_not_apply_runs_the_python_way(one_thread, switch, monkeypatch):  # noqa: F811
    targets = fused_sgd.BucketUpdate.targets

    def between(step, i):
        if i == 3:          # this step's bucket applies nothing: the wait hands out the weights' rows
            monkeypatch.setattr(fused_sgd.BucketUpdate, "targets", lambda self: [None] * len(targets(self)))
        if i == 4:
            monkeypatch.setattr(fused_sgd.BucketUpdate, "targets", targets)
    off = _train(switch, False, 2, between=between)
    on = _train(switch, True, 2, between=between)
    assert same(on[0], off[0]) and same(on[1], off[1])
    for applied in _apply_segments(on[2]):
        assert applied[0].runs["python"] >= 1 and applied[0].runs["compiled"] >= 1
    assert applied[0].runs["why"] in ("a gradient its bucket did not apply", "compiling")


def test_a_runner_made_again_records_with_the_whole_schedule(one_thread, switch):  # noqa: F811
    """A plan whose runner is dropped (a benchmark's wrappers, a re-bound step) records again from the
    whole schedule: its products are kept in segments again, with the bits of segments off."""
    off = _train(switch, False, 2, steps=6)

    def between(step, i):
        if i == 4:
            for plan in plans(step):
                assert plan.overlap_kept
                plan.runner = None
    on = _train(switch, True, 2, steps=6, between=between)
    assert same(on[0], off[0]) and same(on[1], off[1])
    assert all(plan.overlap_kept and plan.runner.overlap == [] for plan in plans(on[2]))


def test_hands_off_is_defers_condition(monkeypatch):
    from tensorweave.kernels.cpu import gemm
    monkeypatch.setitem(overlap.ENABLED, "on", True)
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    assert overlap.hands_off()
    with gemm.blocks_here(2):           # (the helper's product, or one already out): never handed off
        assert not overlap.hands_off()
    monkeypatch.setattr(gemm, "split_parts", lambda: 1)
    assert not overlap.hands_off()
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    monkeypatch.setitem(overlap.ENABLED, "on", False)
    assert not overlap.hands_off()
