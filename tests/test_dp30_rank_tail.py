"""A data-parallel rank plan's tail and its first segment (issue 13, session 26 dp30): the step
counter's ``_Once`` runs before the last bucket's wait, not after the update
(``rank_graph.RankOps.once_before_wait``), and the losses' ``S(0) -> P(sum)`` pad is a compiled row
(``nogil_ops.PAD``), so the forward and backward are one nogil segment. Bits stay those of main's
order and of segments off, on 1, 2 and 3 ranks."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, Partial, S
from tensorweave.distribute import rank_graph
from tensorweave.distribute.boxing import plan_boxing, run_boxing_on_rank
from tensorweave.distribute.layout import Placement, shard_slices
from tensorweave.distribute.plan_ops import _local_boxing
from tensorweave.kernels.cpu import jit, nogil_ops as N
from tensorweave.runtime import nogil_segments
from mlp_step import mlp_step, plans, run, same
from test_nogil24_segments import _segments, one_thread, switch  # noqa: F401 - fixtures

SIZES = (32, 512, 512, 10)      # (test_seg27_rank_segments: products the segments hold)


def _train(ranks, momentum=0.0, optimizer=None, batch=22, steps=4):
    step, params = mlp_step(SIZES, ranks, batch=batch, seed=30, momentum=momentum, optimizer=optimizer)
    losses, weights = run(step, params, steps)
    return losses, weights, step


def _order(plan):
    return [st.node.op if st.node.op != "_Once" else "counter" for st in plan.steps]


def _kept_after(monkeypatch):
    monkeypatch.setattr(rank_graph.RankOps, "once_before_wait", lambda self: None)     # main's order


# ---- the counter's _Once before the wait -----------------------------------------------------------

@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_the_counter_runs_before_the_wait_with_the_same_bits(one_thread, monkeypatch, ranks, momentum):  # noqa: F811
    moved = _train(ranks, momentum)
    for plan in plans(moved[2]):
        order = _order(plan)
        assert order.count("counter") == 1 and order.index("counter") + 1 == order.index("_AllReduceWait")
    with monkeypatch.context() as m:
        _kept_after(m)
        kept = _train(ranks, momentum)
    for plan in plans(kept[2]):
        assert _order(plan)[-1] == "counter"
    assert same(moved[0], kept[0]) and same(moved[1], kept[1])
    one = _train(None, momentum)
    np.testing.assert_allclose(np.array(moved[0], np.float64), np.array(one[0], np.float64), rtol=1e-5)


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_the_counter_counts_every_step(one_thread, ranks):  # noqa: F811
    opt = []
    _train(ranks, optimizer=lambda: opt.append(tw.keras.optimizers.SGD(0.05)) or opt[0], steps=5)
    assert int(np.asarray(opt[0].iterations.numpy())) == 5


def test_an_update_ordered_after_the_counter_keeps_it_after(one_thread, monkeypatch):  # noqa: F811
    adam = lambda: tw.keras.optimizers.Adam(0.01)  # noqa: E731 - its update reads the counter
    got = _train(2, optimizer=adam)
    for plan in plans(got[2]):
        assert _order(plan)[-1] == "counter"
    _kept_after(monkeypatch)
    kept = _train(2, optimizer=adam)
    assert same(got[0], kept[0]) and same(got[1], kept[1])


class _Op:
    """A pass node's stand-in: type, inputs (values), attrs, control inputs."""

    def __init__(self, type_, inputs=(), ctrl=(), **attrs):
        self.type, self.inputs, self.attrs, self.control_inputs = type_, tuple(inputs), attrs, list(ctrl)
        self.outputs = [_Value(self)]

    def __repr__(self):
        return self.type


class _Value:
    def __init__(self, op):
        self.op = op


def _tail(counter_ins=None, between=(), ctrl=(), broadcast=False, buckets=1):
    """An op list: the buckets' starts and waits, a weight's update, then the counter's handle, a
    constant and the counter's ``_Once`` (or ``counter_ins`` in place of its inputs)."""
    weight, counter = object(), object()
    w = _Op("VarHandleOp", variable=weight)
    ops = [w]
    for _ in range(buckets):
        start = _Op("_AllReduceStart")
        ops += [start, _Op("_AllReduceWait", [start.outputs[0]])]
    update = _Op("ResourceGroupApplyKerasMomentum", [w.outputs[0]])
    handle, one = _Op("VarHandleOp", variable=counter), _Op("Const")
    ops += [update, *between, handle, one]
    ins = counter_ins(handle, update) if counter_ins else [handle.outputs[0], one.outputs[0]]
    once = _Op("_Once", ins, [update] if ctrl else (), **({} if broadcast is None else {"broadcast": broadcast}))
    ops.append(once)
    r = rank_graph.RankOps.__new__(rank_graph.RankOps)
    r.ops = ops
    return r, once, handle, counter


def test_once_before_wait_moves_the_counter_with_its_handle_and_constant():
    r, once, handle, _ = _tail(buckets=2)
    before = list(r.ops)
    r.once_before_wait()
    assert [n.type for n in r.ops] == ["VarHandleOp", "_AllReduceStart", "_AllReduceWait", "_AllReduceStart",
                                       "VarHandleOp", "Const", "_Once", "_AllReduceWait",
                                       "ResourceGroupApplyKerasMomentum"]
    assert r.ops[4] is handle and r.ops[6] is once and sorted(map(id, r.ops)) == sorted(map(id, before))


def _unmoved(r):
    before = list(r.ops)
    r.once_before_wait()
    return all(a is b for a, b in zip(r.ops, before)) and len(r.ops) == len(before)


def test_once_before_wait_leaves_what_it_must():
    assert _unmoved(_tail(broadcast=True)[0])                   # read by someone: a broadcast
    assert _unmoved(_tail(broadcast=None)[0])                   # (as rank_ops makes a read one)
    assert _unmoved(_tail(ctrl=True)[0])                        # ordered after the update
    read_h = _Op("VarHandleOp")
    r, _, _, counter = _tail(between=[read_h, _Op("ReadVariableOp", [read_h.outputs[0]])])
    read_h.attrs["variable"] = counter                          # the counter read after the wait
    assert _unmoved(r)
    # an input made from other values after the wait
    add = _Op("AddV2", [_Op("Const").outputs[0]])
    assert _unmoved(_tail(between=[add], counter_ins=lambda h, u: [h.outputs[0], add.outputs[0]])[0])
    r, once, _, _ = _tail()
    r.ops = [n for n in r.ops if n.type not in ("_AllReduceStart", "_AllReduceWait")]
    assert _unmoved(r)                                          # no bucket


def test_a_read_of_another_variable_after_the_wait_does_not_hold_it():
    other = _Op("VarHandleOp", variable=object())
    r, once, _, _ = _tail(between=[other, _Op("ReadVariableOp", [other.outputs[0]])])
    r.once_before_wait()
    assert r.ops.index(once) < [n.type for n in r.ops].index("_AllReduceWait")


# ---- the losses' pad as a compiled row ---------------------------------------------------------------

PADS = [((7,), [0, 1], (S(0),), (Partial("sum"),)),
        ((10, 3), [0, 1, 2], (S(0),), (Partial("sum"),)),
        ((6,), [[0, 1], [2, 3]], (B, S(0)), (B, Partial("sum")))]


@pytest.mark.parametrize("shape, ranks, src, dst", PADS)
def test_the_pad_row_gives_the_boxing_bits(shape, ranks, src, dst):
    p = Placement("cpu", ranks)
    plan = plan_boxing(shape, np.float32, p, src, dst)
    value = (np.arange(np.prod(shape)).reshape(shape) - 3.5).astype(np.float32)
    value.flat[0] = -0.0
    for index, where in enumerate(shard_slices(shape, p, src)):
        step = _local_boxing(plan, p.ranks[index])
        piece = np.ascontiguousarray(value[where])
        form = nogil_segments._pad_form((0,), [piece], *step.rows_padded)
        assert form is not None and form[0] == N.PAD
        want = run_boxing_on_rank(plan, p.ranks[index], piece, None)
        out = np.full(want.size, 7.0, np.float32)           # (the row writes every element)
        addrs = np.array([piece.ctypes.data, 0, out.ctypes.data], np.int64)
        prog = np.zeros((1, N.WIDTH), np.int64)
        prog[0, :4], prog[0, 4:7] = [N.PAD, 0, -1, 2], form[2]
        assert jit.compile_now(N.run_program, prog, addrs)(prog, addrs) == 0
        assert out.tobytes() == want.tobytes() == step(piece).tobytes()


def test_only_a_sum_of_rows_is_a_pad_row():
    p = Placement("cpu", [0, 1])
    for src, dst in [((S(0),), (Partial("max"),)), ((S(1),), (Partial("sum"),))]:
        assert not hasattr(_local_boxing(plan_boxing((4, 6), np.float32, p, src, dst), 1), "rows_padded")
    step = _local_boxing(plan_boxing((5, 2), np.float32, p, (S(0),), (Partial("sum"),)), 1)
    assert step.rows_padded == (5, 3, 5)
    form = nogil_segments._pad_form
    assert form((4,), [np.ones((2, 2), np.float32)], 5, 3, 5) == (N.PAD, (4, -1), (4, 10, 6))
    assert form((4,), [np.ones((3, 2), np.float32)], 5, 3, 5) is None           # not its rows
    assert form((4,), [np.ones((2, 2), np.float64)], 5, 3, 5) is None           # not float32
    assert form((4,), [np.ones((2, 2), np.float32).T], 5, 3, 5) is None         # not contiguous
    assert form((4,), [np.float32(1.0)], 5, 3, 5) is None
    assert form((4,), [np.array(1.0, np.float32)], 5, 3, 5) is None              # 0-d: no rows


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_forward_and_backward_are_one_segment_with_the_same_bits(one_thread, switch, ranks):  # noqa: F811
    switch(False)
    off = _train(ranks)
    switch(True)
    on = _train(ranks)
    assert same(on[0], off[0]) and same(on[1], off[1])
    for plan, segs in zip(plans(on[2]), _segments(on[2])):
        xent = next(s for s in segs if "FusedSparseSoftmaxCrossEntropy" in {plan.steps[j].node.op for j in s.members})
        held = [plan.steps[j].node.op for j in xent.members]
        assert ranks == 1 or {"_Boxing", "Mean"} <= set(held)     # (one rank's plan boxes its own way)
        assert all(s.runs["compiled"] >= 2 and s.runs["python"] == 0 for s in segs)
