"""Lion's, Adamax's and Nadam's fused updates (ResourceApply{Lion,Adamax,Nadam}, their sparse and group
forms; kernels/cpu/lion_kernels.py, adamax_kernels.py, nadam_kernels.py): the same bits as the op-built rules — dense with
the decay folded in, sparse rows, several variables in one group op, float32 and float64 — and,
as fused update ops, ZeRO-1 in planned data-parallel steps (2 and 3 ranks equal one device)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute import planner
from tensorweave.ops import training_ops
from zero13_model import SHAPES, slots_of, train


MAKE = {"Lion": lambda wd: tw.keras.optimizers.Lion(0.01, beta_1=0.8, weight_decay=wd),
        "Adamax": lambda wd: tw.keras.optimizers.Adamax(0.05, beta_2=0.9, weight_decay=wd),
        "Nadam": lambda wd: tw.keras.optimizers.Nadam(0.05, beta_1=0.8, beta_2=0.99, weight_decay=wd)}


def _train(cls, dtype, sparse, weight_decay):
    rng = np.random.default_rng(3)
    table = tw.Variable(rng.standard_normal((7, 3)).astype(dtype))
    dense = tw.Variable(rng.standard_normal((4, 3)).astype(dtype))
    opt = MAKE[cls](weight_decay)
    ids = tw.constant([5, 0, 5, 2])
    for _ in range(4):
        with tw.GradientTape() as tape:
            rows = tw.gather(table, ids) if sparse else tw.gather(tw.convert_to_tensor(table), ids)
            loss = tw.reduce_sum(tw.square(rows - 0.4) * tw.matmul(tw.ones((4, 4), dtype), dense))
        opt.apply_gradients(zip(tape.gradient(loss, [table, dense]), [table, dense]))
    return [table.numpy(), dense.numpy()] + [v.numpy() for v in opt.variables[2:]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("weight_decay", [None, 0.3])
@pytest.mark.parametrize("cls", sorted(MAKE))
def test_fused_update_has_the_rule_s_bits(monkeypatch, cls, dtype, sparse, weight_decay):
    fused = _train(cls, dtype, sparse, weight_decay)
    monkeypatch.setattr(training_ops, "FUSED_DTYPES", ())          # the op-built rule, decay apart
    for a, b in zip(fused, _train(cls, dtype, sparse, weight_decay)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("cls", sorted(MAKE))
def test_one_group_op_in_a_traced_step(cls):
    ws = [tw.Variable(np.ones((3, 2), np.float32)), tw.Variable(np.ones(2, np.float32))]
    opt = MAKE[cls](None)

    @tw.function
    def step():
        opt.apply_gradients(zip([tw.ones((3, 2)), -tw.ones(2)], ws))
    ops = [op.type for op in step.get_concrete_function().graph.get_operations()]
    assert ops.count(f"ResourceGroupApply{cls}") == 1 and f"ResourceApply{cls}" not in ops


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("cls", sorted(MAKE))
def test_zero1_equals_one_device(monkeypatch, cls, ranks):
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)
    monkeypatch.setattr(planner, "ZERO_GATHER_WEIGHT", 0)
    want, opt1, vs1, _, _ = train(None, MAKE[cls](0.1))
    got, opt, vs, step, x = train(tw.placement("cpu", ranks=list(range(ranks))), MAKE[cls](0.1))
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
    for v1, v in zip(vs1, vs):
        for name, slot in slots_of(opt, v).items():
            assert slot.sbp == (tw.sbp.split(0),)
            np.testing.assert_allclose(slot.numpy(), slots_of(opt1, v1)[name].numpy(), rtol=2e-5, atol=1e-6)
    for b in step.get_concrete_function(x)._global.bound:
        ops = [n.op for n in b.spec.nodes]
        assert ops.count("_GatherRows") == 1 and ops.count("_VariableRows") == len(SHAPES)


@pytest.mark.parametrize("fused", [True, False])
def test_lion_s_zero_interpolation_keeps_the_weight_and_nan_stays_nan(monkeypatch, fused):
    if not fused:
        monkeypatch.setattr(training_ops, "FUSED_DTYPES", ())
    w = tw.Variable(np.ones(4, np.float32))
    tw.keras.optimizers.Lion(0.5).apply([tw.constant([2.0, 0.0, -1.0, np.nan], tw.float32)], [w])
    np.testing.assert_array_equal(w.numpy(), [0.5, 1.0, 1.5, np.nan])


@pytest.mark.parametrize("fused", [True, False])
def test_adamax_s_norm_takes_nan_as_np_maximum(monkeypatch, fused):
    if not fused:
        monkeypatch.setattr(training_ops, "FUSED_DTYPES", ())
    w = tw.Variable(np.ones(3, np.float32))
    opt = tw.keras.optimizers.Adamax(0.1)
    opt.apply([tw.constant([np.nan, 2.0, 0.0], tw.float32)], [w])
    np.testing.assert_array_equal(opt.moments(w)[1].numpy(), [np.nan, 2.0, 0.0])
    assert np.isnan(w.numpy()[0]) and w.numpy()[2] == 1.0
    opt.apply([tw.constant([1.0, 1.0, 1.0])], [w])                 # a NaN norm stays NaN (beta_2 * u wins)
    np.testing.assert_array_equal(opt.moments(w)[1].numpy(), np.float32([np.nan, 0.999 * 2.0, 1.0]))
