"""Weight-decayed optimizers (AdamW, Keras' ``weight_decay=`` on SGD/RMSprop/Adagrad) in the ZeRO-1
update (ops/training_ops.py's ``weight_decay`` attr, distribute/fused_rules.py): the decay runs in
the fused update op, before the update, so one op writes the weight and the planner shards it;
the gradient bucket applies decay and update chunk by chunk. The bits are the
decay-apart path's (the optimizer's own ops, then the update) and the unfused ZeRO-1 step's, on
one device and on 2 and 3 ranks (uneven rows), float32 and float64; the 2/3-rank result equals
one device within the gradient sum's rounding (its order of adding the batch differs)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import S
from tensorweave.distribute import fused_rules, fused_sgd
from tensorweave.keras.optimizers import Optimizer
from test_dp13_fused_sgd import applied, check_apply_chunk, zero_everywhere  # noqa: F401 - fixtures
from zero13_model import model, slots_of

K = tw.keras.optimizers
DECAYED = {
    "adamw": lambda: K.AdamW(0.05, weight_decay=0.1),
    "sgd_wd": lambda: K.SGD(0.05, weight_decay=0.2),
    "momentum_wd": lambda: K.SGD(0.05, momentum=0.9, nesterov=True, weight_decay=0.2),
    "rmsprop_wd": lambda: K.RMSprop(0.01, weight_decay=0.3),
    "adagrad_wd": lambda: K.Adagrad(0.1, weight_decay=0.3),
    "adamw_amsgrad": lambda: K.AdamW(0.05, weight_decay=0.1, amsgrad=True),
}


def _decay_apart(monkeypatch):
    """The optimizer's own decay ops, then the update (the path before the decay was folded)."""
    monkeypatch.setattr(Optimizer, "_folds_decay", lambda self, gradient, variable: False)


def _train(placement, name, steps=3, dtype=np.float32):
    step, vs, opt, x = model(placement, DECAYED[name](), dtype=dtype)
    for _ in range(steps):
        step(x)
    values = [v.numpy() for v in vs] + [s.numpy() for v in vs for _, s in sorted(slots_of(opt, v).items())]
    return values, opt, vs, step, x


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(DECAYED))
def test_one_device_the_folded_decay_has_the_decay_apart_bits(monkeypatch, name, dtype):
    got, opt, _, step, x = _train(None, name, dtype=dtype)
    types = [st.op.type for st in step.get_concrete_function(x)._plan.steps if st.op is not None]
    assert not {"AssignVariableOp", "AssignSubVariableOp"} & set(types)        # no decay op of its own
    _decay_apart(monkeypatch)
    want, _, _, step2, x2 = _train(None, name, dtype=dtype)
    assert "AssignVariableOp" in [st.op.type for st in step2.get_concrete_function(x2)._plan.steps
                                  if st.op is not None]
    _same(got, want)


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("name", sorted(DECAYED))
def test_decayed_updates_get_zero1_and_the_decay_apart_bits(zero_everywhere, applied, monkeypatch, ranks, name):
    """Weights 7x5, 5, 5x3 on 2 and 3 ranks (uneven rows): the slots ``S(0)``, the decayed updates
    applied by the buckets (every rank's rows of every weight, each step); the same bits as the decay applied apart
    (no ZeRO-1: the weight has two writers) and as the bucket's fusion off; one device within rounding."""
    p = tw.placement("cpu", ranks=list(range(ranks)))
    got, opt, vs, _, _ = _train(p, name)
    assert all(s.sbp == (S(0),) for v in vs for s in slots_of(opt, v).values())
    assert len(applied) == 3 * 3 * ranks
    assert all(r.decay for r in applied.rules)
    applied.clear()
    monkeypatch.setattr(fused_sgd, "ENABLED", False)
    _same(got, _train(p, name)[0])
    assert not applied
    monkeypatch.setattr(fused_sgd, "ENABLED", True)
    with monkeypatch.context() as m:
        _decay_apart(m)
        apart, opt2, vs2, _, _ = _train(p, name)
        assert all(s.sbp != (S(0),) for v in vs2 for s in slots_of(opt2, v).values()) and not applied
    _same(got, apart)
    one = _train(None, name)[0]
    for a, w in zip(got, one):
        np.testing.assert_allclose(a, w, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("ranks", [2, 3])
def test_adamw_in_float64_equals_one_device(zero_everywhere, applied, ranks):
    p = tw.placement("cpu", ranks=list(range(ranks)))
    got = _train(p, "adamw", dtype=np.float64)[0]
    assert len(applied) == 3 * 3 * ranks
    for a, w in zip(got, _train(None, "adamw", dtype=np.float64)[0]):
        assert a.dtype == np.float64
        np.testing.assert_allclose(a, w, rtol=1e-12, atol=1e-14)


def test_explain_shows_adamw_s_sharded_update(zero_everywhere):
    p = tw.placement("cpu", ranks=[0, 1])
    step, vs, opt, x = model(p, DECAYED["adamw"]())
    e = tw.distribute.explain(step, x)
    (update,) = [o for o in e.to_dict()["ops"] if o["type"].startswith("ResourceGroupApply")]
    assert update["type"] == "ResourceGroupApplyAdam" and update["signature"].startswith("ZeRO-1 ")
    assert len(update["zero"]) == 3
    assert sum(c["kind"] == "reduce_scatter" for c in e.to_dict()["collectives"]) >= 1
    assert "(ZeRO-1)" in e.text()
    assert not any(o["type"] == "AssignVariableOp" for o in e.to_dict()["ops"])


def test_a_variable_excluded_from_decay_is_updated_without_it(zero_everywhere, applied, monkeypatch):
    """``exclude_from_weight_decay``: the bias gets Adam's update alone (an update op of its own
    attrs: a bucket applies one rule, so the bias's update op runs it on the rank's rows); all of
    it as with the decay applied apart."""
    p = tw.placement("cpu", ranks=[0, 1])

    def run():
        step, vs, opt, x = model(p, DECAYED["adamw"]())
        opt.exclude_from_weight_decay(var_list=[vs[1]])
        for _ in range(2):
            step(x)
        return [v.numpy() for v in vs]
    got = run()
    assert {r.decay for r in applied.rules} == {0.1}
    _decay_apart(monkeypatch)
    _same(got, run())


def test_a_sparse_gradient_is_decayed_apart():
    """An embedding's IndexedSlices gradient: lazy Adam touches its rows, the decay every row (by
    the optimizer's ops, as before); a sparse update op given a decay is refused."""
    from tensorweave.core import errors
    from tensorweave.ops import training_ops
    table = tw.Variable(np.ones((4, 2), np.float32))
    opt = K.AdamW(0.1, weight_decay=0.5)
    grad = tw.IndexedSlices(tw.constant(np.ones((1, 2), np.float32)), tw.constant([1]), tw.constant([4, 2]))
    opt.apply([grad], [table])
    w = table.numpy()
    np.testing.assert_array_equal(w[[0, 2, 3]], np.full((3, 2), np.float32(1) - np.float32(0.5) * np.float32(0.1)))
    assert (w[1] < w[0]).all()
    m = tw.Variable(np.zeros((4, 2), np.float32))
    with pytest.raises(errors.InvalidArgumentError, match="sparse update"):
        training_ops.apply_adam(table, m, m, 0.1, 1, tw.constant(np.ones((1, 2), np.float32)), 0.9, 0.999, 1e-7,
                                indices=tw.constant([1]), weight_decay=0.5)


def test_a_subclass_with_its_own_update_step_decays_apart():
    """The decay is folded only by the update_step that passes it on: a subclass's own step (here
    calling Adam's) still gets the decay, from the optimizer's ops."""
    class Mine(K.AdamW):
        def update_step(self, gradient, variable, learning_rate):
            super().update_step(gradient, variable, learning_rate)

    class Plain(K.AdamW):                  # a rule of its own: never passes the decay on
        def update_step(self, gradient, variable, learning_rate):
            variable.assign_sub(gradient * learning_rate)

    w1, w2, w3 = tw.Variable([2.0]), tw.Variable([2.0]), tw.Variable([2.0])
    for opt, w in ((Mine(0.1, weight_decay=0.5), w1), (K.AdamW(0.1, weight_decay=0.5), w2),
                   (Plain(0.1, weight_decay=0.5), w3)):
        opt.apply([tw.constant([0.0])], [w])
    np.testing.assert_array_equal(w1.numpy(), w2.numpy())
    np.testing.assert_array_equal(w3.numpy(), w2.numpy())
    assert float(w1.numpy()[0]) == pytest.approx(1.9)


@pytest.mark.parametrize("members", [2, 3])
@pytest.mark.parametrize("op,attrs", [
    ("ResourceApplyAdam", {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7, "amsgrad": False}),
    ("ResourceApplyAdam", {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7, "amsgrad": True}),
    ("ResourceApplyKerasMomentum", {"momentum": 0.9, "nesterov": False}),
    ("ResourceApplyKerasMomentum", {"momentum": 0.0, "nesterov": False}),
    ("ResourceApplyKerasRMSprop", {"rho": 0.9, "momentum": 0.5, "epsilon": 1e-7, "centered": True}),
    ("ResourceApplyAdagradV2", {"epsilon": 1e-7})])
def test_apply_chunk_with_decay_equals_the_sum_then_the_decaying_kernel(members, op, attrs):
    """Chunks of 5 elements of a 9x4 weight (cut inside the members' rows), applied in reverse order,
    equal the members' gradients summed in rank order and then the update kernel with its decay."""
    attrs = dict(attrs, weight_decay=0.25)
    rule = fused_rules.rule_for(op, attrs)
    assert rule.decay == 0.25 and rule != fused_rules.rule_for(op, dict(attrs, weight_decay=0.0))
    check_apply_chunk(members, op, attrs)


@pytest.mark.parametrize("factors", [(0.004, 0.003), (0.3, 0.7)])    # the second: w * (wd * lr) differs
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_decay_loop_has_its_twin_s_and_the_optimizer_ops_bits(dtype, factors):
    from tensorweave.kernels.cpu import training_kernels as tk
    from tensorweave.kernels.cpu.jit import compile_now
    rng = np.random.default_rng(5)
    w = (rng.standard_normal(1000) * 100).astype(dtype)
    w[:3] = [0.0, -0.0, 1e-30]
    wd, lr = dtype(factors[0]), dtype(factors[1])
    twin, ops = w.copy(), w - w * wd * lr           # Optimizer._apply_weight_decay's expression
    compile_now(tk._decay_flat, w, wd, lr)(w, wd, lr)
    tk._decay_numpy(twin, wd, lr)
    np.testing.assert_array_equal(w, twin)
    np.testing.assert_array_equal(w, ops)
    assert not np.array_equal(w, (rng.standard_normal(1) + twin))


def test_the_matmul_fused_adam_decays_like_the_stock_kernel(rng):
    """FusedMatMulGroupApplyAdam (the remapping pass's, single device) with AdamW's decay: the weight
    whose gradient is the product and the other ones, as the stock grouped kernel leaves them."""
    from tensorweave.kernels.cpu import fused_kernels, training_kernels
    shapes = [(6, 4), (4,)]
    init = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    a, b = rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    g1 = rng.standard_normal(4).astype(np.float32)
    adam = dict(beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, weight_decay=0.3)
    out = []
    for fused in (False, True):
        handles = [[tw.Variable(w.copy())] + [tw.Variable(np.full(w.shape, 0.5, np.float32)) for _ in range(2)]
                   for w in init]
        flat = [h for hs in handles for h in hs]
        if fused:
            fused_kernels.matmul_group_apply_adam(*flat, np.float32(0.1), np.int64(2), g1, a, b, num_variables=2,
                                                  index=0, transpose_a=True, transpose_b=False, **adam)
        else:
            training_kernels._grouped(training_kernels._apply_adam, 2)(
                *flat, np.float32(0.1), np.int64(2), a.T @ b, g1, num_variables=2, **adam)
        out.append([h.numpy() for h in flat])
    _same(out[0], out[1])
    assert not np.array_equal(out[0][0], init[0])


def test_a_keras_adamw_step_fuses_the_update_with_its_gradient_product_with_the_same_bits():
    """The remapping pass's FusedMatMulGroupApplyAdam takes AdamW's decayed group update as Adam's
    (the decay of each block before its update): the weights as with the pass off."""
    from test_graph_passes import options
    from test_mlp18_fused_update import _data, _mlp, _plan_types
    x, y = _data()
    out = []
    for remapping in (False, True):
        with options(remapping=remapping):
            model = _mlp()
            model.compile(optimizer=K.AdamW(1e-2, weight_decay=0.1),
                          loss=tw.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            for _ in range(3):
                model.train_on_batch(x, y)
            out.append(([np.array(w) for w in model.get_weights()], _plan_types(model)))
    assert "FusedMatMulGroupApplyAdam" in out[1][1] and "AssignVariableOp" not in out[1][1]
    _same(out[0][0], out[1][0])
