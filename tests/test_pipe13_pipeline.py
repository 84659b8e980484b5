"""Pipeline parallelism: the schedules as data (GPipe, 1F1B), the bubble formula, and pipelined
training (2 stages on disjoint placements, 4 micro-batches, 20 steps) equal to one device."""
import warnings

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras
from tensorweave.core.sbp import B, S
from tensorweave.distribute.pipeline_schedule import (Action, bubble_fraction, make_schedule, peak_activations,
                                                      stage_orders)

STEPS = 20
RNG = np.random.default_rng(11)
X = RNG.standard_normal((14, 6)).astype(np.float32)          # 14 rows: micro-batches of 4, 4, 3, 3
Y = RNG.standard_normal((14, 3)).astype(np.float32)
W1 = (RNG.standard_normal((6, 10)) * 0.4).astype(np.float32)
B1 = np.full(10, 0.1, np.float32)
W2 = (RNG.standard_normal((10, 3)) * 0.4).astype(np.float32)
B2 = np.zeros(3, np.float32)
STAGE0 = tw.placement("cpu", ranks=[0, 1])
STAGE1 = tw.placement("cpu", ranks=[2, 3])


# ---- the schedules ---------------------------------------------------------------------------------
def _by_stage(schedule, p):
    return [[(a.micro_batch, a.kind) for a in schedule if a.stage == s] for s in range(p)]


def test_gpipe_runs_every_forward_then_every_backward():
    sched = make_schedule(3, 4, "gpipe")
    assert all(isinstance(a, Action) for a in sched)
    last_f = max(a.time for a in sched if a.kind == "F")
    assert all(a.time > last_f for a in sched if a.kind == "B")
    for s, order in enumerate(_by_stage(sched, 3)):
        assert order == [(m, "F") for m in range(4)] + [(m, "B") for m in range(4)]
    assert [a.time for a in sched if a.kind == "F" and a.micro_batch == 0] == [0, 1, 2]
    assert peak_activations(sched) == [4, 4, 4]


def test_1f1b_has_warm_up_steady_state_and_cool_down():
    p, m = 4, 8
    orders = _by_stage(make_schedule(p, m, "1f1b"), p)
    assert orders == stage_orders(p, m, "1f1b")
    for s, order in enumerate(orders):
        warmup = p - s - 1
        assert order[:warmup] == [(i, "F") for i in range(warmup)]                  # warm-up: forwards only
        steady = order[warmup:warmup + 2 * (m - warmup)]
        assert steady[0::2] == [(warmup + i, "F") for i in range(m - warmup)]       # steady: 1F then 1B
        assert steady[1::2] == [(i, "B") for i in range(m - warmup)]
        assert order[warmup + 2 * (m - warmup):] == [(i, "B") for i in range(m - warmup, m)]   # cool-down
    assert peak_activations(make_schedule(p, m, "1f1b")) == [4, 3, 2, 1]           # vs GPipe's 8 each
    assert stage_orders(3, 1, "1f1b")[0] == [(0, "F"), (0, "B")]                    # fewer micro-batches than stages


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_schedules_respect_dependencies_and_the_bubble_formula(schedule):
    for p in range(1, 5):
        for m in range(1, 9):
            sched = make_schedule(p, m, schedule)
            when = {(a.stage, a.micro_batch, a.kind): a.time for a in sched}
            assert len(when) == len(sched) == 2 * p * m
            assert len({(a.stage, a.time) for a in sched}) == len(sched)             # one action per stage per slot
            for (s, mb, kind), t in when.items():
                if kind == "F" and s:
                    assert t > when[(s - 1, mb, "F")]
                if kind == "B":
                    assert t > when[(s, mb, "F")]
                    if s + 1 < p:
                        assert t > when[(s + 1, mb, "B")]
            assert 1 + max(when.values()) == 2 * (m + p - 1)
            assert bubble_fraction(sched) == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)
    pipe = tw.distribute.pipeline([(tw.nn.relu, STAGE0), (tw.negative, STAGE1)], micro_batches=4,
                                  schedule=schedule)
    assert pipe.bubble_fraction == pytest.approx(1 / 5) and "bubble 0.200" in repr(pipe)


# ---- training --------------------------------------------------------------------------------------
class Dense(tw.Module):
    def __init__(self, w, b, activation=None, name=None):
        super().__init__(name=name)
        with self.name_scope:
            self.w, self.b = tw.Variable(w, name="w"), tw.Variable(b, name="b")
        self.activation = activation

    def __call__(self, x):
        y = tw.matmul(x, self.w) + self.b
        return self.activation(y) if self.activation else y


def _mse(y, pred):
    return tw.reduce_mean(tw.square(pred - y))


@pytest.fixture(scope="module")
def one_device():
    l1, l2 = Dense(W1, B1, tw.nn.relu), Dense(W2, B2)
    opt = tw.keras.optimizers.Adam(0.05)
    x, y = tw.constant(X), tw.constant(Y)
    losses = []
    for _ in range(STEPS):
        with tw.GradientTape() as tape:
            loss = _mse(y, l2(l1(x)))
        variables = l1.trainable_variables + l2.trainable_variables
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        losses.append(float(loss))
    return losses, [v.numpy() for v in variables]


@pytest.mark.parametrize("schedule,tensor_parallel", [("1f1b", False), ("gpipe", False), ("1f1b", True)])
def test_pipelined_training_equals_one_device(schedule, tensor_parallel, one_device):
    l1, l2 = Dense(W1, B1, tw.nn.relu, name="l1"), Dense(W2, B2, name="l2")
    if tensor_parallel:          # pipeline x tensor parallelism: split weights inside each stage
        l1.to_global(STAGE0, {"w": S(1), "b": S(0)})
        l2.to_global(STAGE1, {"w": S(0)})
    pipe = tw.distribute.pipeline([(l1, STAGE0), (l2, STAGE1)], micro_batches=4, schedule=schedule, loss=_mse)
    assert l1.w.placement == STAGE0 and l2.w.placement == STAGE1 and l1.w.sbp == ((S(1),) if tensor_parallel else (B,))
    opt = tw.keras.optimizers.Adam(0.05)
    losses = [float(pipe.train_step(X, Y, opt)) for _ in range(STEPS)]
    assert pipe.held_activations == pipe.peak_activations == ([2, 1] if schedule == "1f1b" else [4, 4])
    want_losses, want = one_device
    np.testing.assert_allclose(losses, want_losses, rtol=2e-5)
    assert [v.name for v in pipe.trainable_variables] == ["l1/b:0", "l1/w:0", "l2/b:0", "l2/w:0"]
    for v, w in zip(pipe.trainable_variables, want):
        np.testing.assert_allclose(v.numpy(), w, rtol=2e-5, atol=1e-6, err_msg=v.name)
    # slots live with their stage's variables
    for (ref, _), slot in opt._slots.items():
        var = next(v for v in pipe.trainable_variables if id(v) == ref)
        assert slot.placement == var.placement and slot.sbp == var.sbp


def test_gradients_are_accumulated_over_micro_batches_and_cross_placements_by_boxing(monkeypatch):
    from tensorweave.distribute import boxing
    kinds = []
    real = boxing.plan_boxing

    def spy(shape, dtype, placement, src, dst, dst_placement=None):
        plan = real(shape, dtype, placement, src, dst, dst_placement)
        if dst_placement is not None and dst_placement != placement:
            kinds.append((placement.ranks, dst_placement.ranks, tuple(shape)))
        return plan
    monkeypatch.setattr(boxing, "plan_boxing", spy)
    monkeypatch.setattr(tw.distribute.global_tensor, "plan_boxing", spy)
    l1, l2 = Dense(W1, B1, tw.nn.relu), Dense(W2, B2)
    pipe = tw.distribute.pipeline([(l1, STAGE0), (l2, STAGE1)], micro_batches=2, schedule="gpipe", loss=_mse)
    loss, grads, variables = pipe.forward_backward(X, Y)
    assert ((0, 1), (2, 3), (7, 10)) in kinds and ((2, 3), (0, 1), (7, 10)) in kinds   # activation, gradient
    # the same loss and gradients as the whole batch on one device
    m1, m2 = Dense(W1, B1, tw.nn.relu), Dense(W2, B2)
    with tw.GradientTape() as tape:
        want_loss = _mse(tw.constant(Y), m2(m1(tw.constant(X))))
    want = tape.gradient(want_loss, m1.trainable_variables + m2.trainable_variables)
    assert float(loss) == pytest.approx(float(want_loss), rel=1e-6)
    for g, w, v in zip(grads, want, variables):
        assert g.sbp == (tw.sbp.partial_sum,)            # a replicated weight's gradient: P, all-reduced by the update
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6, err_msg=v.name)


def test_keras_layers_as_stages_built_in_place_or_converted():
    first = keras.layers.Dense(10, activation="relu")
    first.build((None, 6))
    first.set_weights([W1, B1])
    second = keras.layers.Dense(3, kernel_initializer=lambda shape, dtype=None: W2)     # built by its first call
    s0, s1 = tw.placement("cpu", ranks=[0]), tw.placement("cpu", ranks=[1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = tw.distribute.pipeline([(first, s0), (second, s1)], micro_batches=3, loss=keras.losses.MeanSquaredError())
        loss = pipe.train_step(X, Y, keras.optimizers.SGD(0.1))
        out = pipe(X)
    assert second.kernel.placement == s1 and first.kernel.placement == s0
    h = np.maximum(X @ W1 + B1, 0)
    assert float(loss) == pytest.approx(float(np.mean((h @ W2 - Y) ** 2)), rel=1e-5)
    assert out.placement == s1 and out.shape == tw.TensorShape([14, 3])
    np.testing.assert_allclose(out.numpy(), np.maximum(X @ first.kernel.numpy() + first.bias.numpy(), 0)
                               @ second.kernel.numpy() + second.bias.numpy(), rtol=1e-5, atol=1e-6)


def test_pipeline_bad_input_errors():
    with pytest.raises(ValueError, match=r"stages 0 and 1 share ranks \[1\].*disjoint placements"):
        tw.distribute.pipeline([(tw.nn.relu, STAGE0), (tw.nn.relu, tw.placement("cpu", ranks=[1, 2]))])
    with pytest.raises(ValueError, match=r"schedule must be one of \('gpipe', '1f1b', 'interleaved_1f1b'\), "
                                         r"got 'interleaved'"):
        tw.distribute.pipeline([(tw.nn.relu, STAGE0)], schedule="interleaved")
    with pytest.raises(TypeError, match=r"stage 1 must be a \(callable, placement\) pair"):
        tw.distribute.pipeline([(tw.nn.relu, STAGE0), tw.nn.relu])
    with pytest.raises(TypeError, match=r"stage 0's placement must be tw.placement"):
        tw.distribute.pipeline([(tw.nn.relu, [0, 1])])
    pipe = tw.distribute.pipeline([(tw.nn.relu, STAGE0), (tw.negative, STAGE1)], micro_batches=4, loss=_mse)
    with pytest.raises(ValueError, match=r"x of shape \[3, 6\] has 3 rows for 4 micro-batches"):
        pipe.forward_backward(X[:3], Y[:3])
    bad = tw.distribute.pipeline([(lambda x: x.numpy(), STAGE0)], micro_batches=1, loss=_mse)
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"stage 0 returned .*not a tensor on its placement"):
        bad(X)
    with pytest.raises(ValueError, match=r"training needs loss="):
        tw.distribute.pipeline([(tw.nn.relu, STAGE0)]).forward_backward(X, Y)


def test_one_optimizer_step_updates_variables_on_several_placements():
    # regression: the fused group update put variables of two placements into one op
    a = tw.Variable(np.ones(3, np.float32), placement=STAGE0, sbp=B)
    b = tw.Variable(np.ones(3, np.float32), placement=STAGE1, sbp=S(0))
    opt = tw.keras.optimizers.Adam(0.1)
    opt.apply_gradients([(tw.constant(np.ones(3, np.float32)).to_global(placement=STAGE0, sbp=B), a),
                         (tw.constant(np.ones(3, np.float32)).to_global(placement=STAGE1, sbp=S(0)), b)])
    np.testing.assert_allclose(a.numpy(), np.full(3, 0.9), rtol=1e-5)
    np.testing.assert_allclose(b.numpy(), np.full(3, 0.9), rtol=1e-5)
    assert int(opt.iterations.numpy()) == 1


def test_a_keras_sequential_split_into_stages_trains_like_train_on_batch():
    def make():
        return keras.Sequential([keras.Input((6,)), keras.layers.Dense(10, activation="relu"),
                                 keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(3)])
    keras.utils.set_random_seed(4)
    want_model = make()
    model = make()
    model.set_weights(want_model.get_weights())
    want_model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse")
    want = [want_model.train_on_batch(X, Y) for _ in range(5)]
    pipe = tw.distribute.pipeline([(model.layers[:2], STAGE0), (model.layers[2:], STAGE1)], micro_batches=4,
                                  loss="mse")
    opt = keras.optimizers.Adam(0.02)
    got = [float(pipe.train_step(X, Y, opt)) for _ in range(5)]
    np.testing.assert_allclose(got, want, rtol=2e-5)
    assert model.layers[1].kernel.placement == STAGE0 and model.layers[2].kernel.placement == STAGE1
    for a, b in zip(model.get_weights(), want_model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def test_a_stage_that_cuts_the_gradient_sends_zeros_back():
    l1, l2 = Dense(W1, B1, tw.nn.relu), Dense(W2, B2)
    pipe = tw.distribute.pipeline([(l1, STAGE0), (lambda h: l2(tw.stop_gradient(h)), STAGE1)], micro_batches=2,
                                  loss=_mse)
    _, grads, variables = pipe.forward_backward(X, Y)
    by_var = {id(v): g for v, g in zip(variables, grads)}
    assert not np.any(by_var[id(l1.w)].numpy()) and np.any(by_var[id(l2.w)].numpy())


def test_3d_parallelism_a_2x2_mesh_stage_data_and_tensor_parallel_then_a_1d_stage(one_device):
    l1, l2 = Dense(W1, B1, tw.nn.relu), Dense(W2, B2)
    mesh = tw.placement("cpu", ranks=[[0, 1], [2, 3]])
    l1.to_global(mesh, {"w": (B, S(1)), "b": (B, S(0))})          # batch S(0) over mesh axis 0, weights over axis 1
    pipe = tw.distribute.pipeline([(l1, mesh), (l2, tw.placement("cpu", ranks=[4, 5]))], micro_batches=3, loss=_mse)
    opt = tw.keras.optimizers.Adam(0.05)
    losses = [float(pipe.train_step(X, Y, opt)) for _ in range(5)]
    np.testing.assert_allclose(losses, one_device[0][:5], rtol=2e-5)
