"""Training on global tensors equals one-device training: an MLP trained 20 steps with Adam
data-parallel, model-parallel, 2-D hybrid on a 2x2 mesh and ZeRO-style (float32, rtol 2e-5)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S

STEPS = 20
RNG = np.random.default_rng(7)
X = RNG.standard_normal((12, 6)).astype(np.float32)          # 12 rows: uneven over 3 ranks' S(1) (10 hidden)
Y = RNG.standard_normal((12, 3)).astype(np.float32)
INIT = {"w1": (RNG.standard_normal((6, 10)) * 0.4).astype(np.float32), "b1": np.full(10, 0.1, np.float32),
        "w2": (RNG.standard_normal((10, 3)) * 0.4).astype(np.float32), "b2": np.zeros(3, np.float32)}
P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])
MESH = tw.placement("cpu", ranks=[[0, 1], [2, 3]])

LAYOUTS = {
    # name: (placement, data sbp, {weight: sbp})
    "data_parallel": (P2, S(0), {"w1": B, "b1": B, "w2": B, "b2": B}),
    "model_parallel": (P3, B, {"w1": S(1), "b1": S(0), "w2": S(0), "b2": B}),
    "hybrid_2x2": (MESH, (S(0), B), {"w1": (B, S(1)), "b1": (B, S(0)), "w2": (B, S(0)), "b2": (B, B)}),
    "zero_sharded": (P2, S(0), {"w1": S(0), "b1": S(0), "w2": S(0), "b2": S(0)}),
}


def _train(x, y, params, optimizer):
    losses = []
    names = sorted(params)
    for _ in range(STEPS):
        with tw.GradientTape() as tape:
            h = tw.nn.relu(tw.matmul(x, params["w1"]) + params["b1"])
            out = tw.matmul(h, params["w2"]) + params["b2"]
            loss = tw.reduce_mean(tw.square(out - y))
        grads = tape.gradient(loss, [params[n] for n in names])
        optimizer.apply_gradients(zip(grads, [params[n] for n in names]))
        losses.append(float(loss))
    return losses, {n: params[n].numpy() for n in names}


@pytest.fixture(scope="module")
def single_device():
    params = {n: tw.Variable(v) for n, v in INIT.items()}
    return _train(tw.constant(X), tw.constant(Y), params, tw.keras.optimizers.Adam(0.05))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_mlp_training_matches_one_device(layout, single_device):
    placement, data_sbp, weight_sbp = LAYOUTS[layout]
    x = tw.constant(X).to_global(placement=placement, sbp=data_sbp)
    y = tw.constant(Y).to_global(placement=placement, sbp=data_sbp)
    params = {n: tw.Variable(v, placement=placement, sbp=weight_sbp[n]) for n, v in INIT.items()}
    opt = tw.keras.optimizers.Adam(0.05)
    losses, final = _train(x, y, params, opt)
    want_losses, want = single_device
    np.testing.assert_allclose(losses, want_losses, rtol=2e-5)
    for n in want:
        np.testing.assert_allclose(final[n], want[n], rtol=2e-5, atol=1e-6, err_msg=n)
        assert params[n].sbp == (weight_sbp[n] if isinstance(weight_sbp[n], tuple) else (weight_sbp[n],))
    # slots keep the variable's layout (ZeRO: sharded optimizer state)
    slots = [v for v in opt.variables if getattr(v, "is_global", False)]
    assert len(slots) == 2 * len(params)
    for v in slots:
        assert v.sbp in {p.sbp for p in params.values()}


def test_a_keras_layer_with_local_weights_trains_on_a_global_batch():
    import warnings
    p = tw.placement("cpu", ranks=[0, 1])

    def run(to_global):
        layer = tw.keras.layers.Dense(3, kernel_initializer="ones")
        x, y = tw.constant(X[:, :4]), tw.constant(np.arange(12) % 3)
        if to_global:
            x, y = (t.to_global(placement=p, sbp=tw.sbp.split(0)) for t in (x, y))
        opt = tw.keras.optimizers.SGD(0.1)
        for _ in range(3):
            with tw.GradientTape() as tape:
                loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=layer(x)))
            grads = tape.gradient(loss, layer.trainable_variables)
            assert not any(g.is_global for g in grads)        # local weights get local (gathered) gradients
            opt.apply_gradients(zip(grads, layer.trainable_variables))
        return float(loss), layer.kernel.numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (want_loss, want), (loss, got) = run(False), run(True)
    assert loss == pytest.approx(want_loss, rel=2e-5)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-7)


def test_data_parallel_gradients_are_all_reduced_by_boxing(monkeypatch):
    from tensorweave.distribute import interpreter
    kinds = []
    real = interpreter.run_boxing_on_rank

    def counting(plan, rank, piece, comm_for):
        if rank == 0:
            kinds.extend((s.kind, plan.shape) for s in plan.steps)
        return real(plan, rank, piece, comm_for)
    monkeypatch.setattr(interpreter, "run_boxing_on_rank", counting)
    x = tw.constant(X).to_global(placement=P2, sbp=S(0))
    w = tw.Variable(INIT["w1"], placement=P2, sbp=B)
    with tw.GradientTape() as tape:
        loss = tw.reduce_sum(tw.matmul(x, w))
    g = tape.gradient(loss, w)
    reduce_w = ("all_reduce", (6, 10))
    assert g.sbp == (tw.sbp.partial_sum,) and reduce_w not in kinds          # no special gradient code
    tw.keras.optimizers.SGD(0.1).apply_gradients([(g, w)])
    assert kinds.count(reduce_w) == 1                                         # the update's P -> B boxing
    np.testing.assert_allclose(w.numpy(), INIT["w1"] - 0.1 * X.sum(0)[:, None], rtol=1e-5)
