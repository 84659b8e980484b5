"""ZeRO-1 in planned data-parallel steps (distribute/zero_update.py): training equals one device,
the slots are sharded (each rank holds only its rows), the bits equal the all-reduce plan's."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S
from tensorweave.distribute import planner
from zero13_model import SHAPES, slots_of, train


@pytest.fixture
def zero_everywhere(monkeypatch):
    """No fixed or gather cost: every weight and bias of the small model is updated in shards."""
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)
    monkeypatch.setattr(planner, "ZERO_GATHER_WEIGHT", 0)


def _ops(step, x):
    return [[n.op for n in b.spec.nodes] for b in step.get_concrete_function(x)._global.bound]


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("optimizer", ["adam", "sgd_momentum", "rmsprop", "adagrad"])
def test_zero_training_equals_one_device_and_shards_the_slots(zero_everywhere, ranks, optimizer):
    p = tw.placement("cpu", ranks=list(range(ranks)))
    want, opt1, vs1, _, _ = train(None, optimizer)
    got, opt, vs, step, x = train(p, optimizer)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
    for v1, v in zip(vs1, vs):
        assert v.sbp == (B,)
        one, mine = slots_of(opt1, v1), slots_of(opt, v)
        assert mine and set(mine) == set(one)
        for name, slot in mine.items():
            assert slot.sbp == (S(0),), (name, slot.sbp)
            bounds = [(0, 0)]
            for piece in slot.to_local():          # each rank holds only its rows, balanced
                lo = bounds[-1][1]
                bounds.append((lo, lo + piece.shape[0]))
                np.testing.assert_allclose(piece.numpy(), one[name].numpy()[lo:lo + piece.shape[0]], rtol=2e-5,
                                           atol=1e-6)
            sizes = [hi - lo for lo, hi in bounds[1:]]
            n = v.shape[0]
            assert sizes == [n // ranks + (i < n % ranks) for i in range(ranks)]
    for ops in _ops(step, x):
        assert ops.count("_GatherRows") == 1 and ops.count("_VariableRows") == len(SHAPES)


@pytest.mark.parametrize("bucket", [True, False])
def test_zero_plan_has_the_all_reduce_plans_bits(zero_everywhere, monkeypatch, bucket):
    """Reduce-scatter then row updates then all-gather == all-reduce then full updates, bit for bit,
    with the bucketed start/wait and with one blocking reduce-scatter boxing per gradient."""
    if not bucket:
        monkeypatch.setattr(planner, "ALL_REDUCE_BUCKET_BYTES", 0)
    p = tw.placement("cpu", ranks=[0, 1, 2])
    monkeypatch.setattr(planner, "ZERO_UPDATES", False)
    plain, opt0, vs0, _, _ = train(p, "adam", steps=6)
    monkeypatch.setattr(planner, "ZERO_UPDATES", True)
    zero, opt, vs, step, x = train(p, "adam", steps=6)
    for a, b in zip(plain, zero):
        np.testing.assert_array_equal(a, b)
    for v0, v in zip(vs0, vs):
        for name, slot in slots_of(opt, v).items():
            np.testing.assert_array_equal(slot.numpy(), slots_of(opt0, v0)[name].numpy())
    kinds = {op for ops in _ops(step, x) for op in ops}
    assert ("_AllReduceStart" in kinds) == bucket and "_GatherRows" in kinds


def test_an_eager_step_after_a_zero_plan_updates_the_rows_and_keeps_the_slots_sharded(zero_everywhere, monkeypatch):
    p = tw.placement("cpu", ranks=[0, 1, 2])
    results = []
    for zero in (False, True):
        monkeypatch.setattr(planner, "ZERO_UPDATES", zero)
        _, opt, vs, step, x = train(p, "adam", steps=3)
        for _ in range(2):                               # eager global steps on the same optimizer
            with tw.GradientTape() as tape:
                loss = tw.reduce_sum(tw.matmul(x, vs[0]) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, vs[:1]), vs[:1]))
        step(x)                                          # and planned again
        slot = slots_of(opt, vs[0])["momentum"]
        assert slot.sbp == ((S(0),) if zero else (B,))
        results.append([v.numpy() for v in vs] + [slot.numpy()])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_two_traces_of_one_step_share_the_sharded_slots(zero_everywhere, monkeypatch):
    """A second input signature plans again: the slots, already S(0), force ZeRO-1 there too, even
    where its cost alone would not choose it."""
    p = tw.placement("cpu", ranks=[0, 1])
    _, opt, vs, step, x = train(p, "adam", steps=1)
    _, opt1, vs1, step1, x1 = train(None, "adam", steps=1)
    small = x1[:6]
    step1(small)
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 10 ** 9)
    small = tw.constant(small.numpy()).to_global(placement=p, sbp=tw.sbp.split(0))
    step(small)
    for ops in _ops(step, small):
        assert ops.count("_GatherRows") == 1 and ops.count("_VariableRows") == len(SHAPES) and "_ZeroApply" not in ops
    for a, b in zip(vs1, vs):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=2e-5, atol=1e-6)
    assert all(s.sbp == (S(0),) for v in vs for s in slots_of(opt, v).values())
    assert len(step._cache) == 2                        # two traces, two plans
