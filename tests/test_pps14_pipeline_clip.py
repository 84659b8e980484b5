"""In-process pipelines: ``train_step`` with ``global_clipnorm`` over stages on different placements
(one op cannot read them all: each stage's squared sum, added on the controller) equals one device."""
import numpy as np
import pytest

import tensorweave as tw

RNG = np.random.default_rng(5)
X = RNG.standard_normal((9, 4)).astype(np.float32)
Y = RNG.standard_normal((9, 2)).astype(np.float32)
W = [(RNG.standard_normal((4, 5)) * 0.6).astype(np.float32), (RNG.standard_normal((5, 2)) * 0.6).astype(np.float32)]


class Layer(tw.Module):
    def __init__(self, w, act):
        super().__init__()
        self.w, self.act = tw.Variable(w), act

    def __call__(self, h):
        h = tw.matmul(h, self.w)
        return tw.nn.relu(h) if self.act else h


def _loss(y, p):
    return tw.reduce_mean((y - p) ** 2)


@pytest.mark.parametrize("make_opt", [lambda: tw.keras.optimizers.Adam(0.05, global_clipnorm=0.2),
                                      lambda: tw.keras.optimizers.SGD(0.3, global_clipnorm=0.1, loss_scale_factor=2.0),
                                      lambda: tw.keras.optimizers.SGD(0.3, global_clipnorm=-0.5),
                                      lambda: tw.keras.optimizers.SGD(0.3)],
                         ids=["adam", "sgd-loss-scale", "negative-is-off", "no-clip"])        # (Keras: a clip <= 0 clips nothing)
def test_global_clipnorm_across_stage_placements_equals_one_device(make_opt):
    ref = [Layer(W[0], True), Layer(W[1], False)]
    opt = make_opt()
    want = []
    for _ in range(3):
        with tw.GradientTape() as tape:
            loss = _loss(Y, ref[1](ref[0](X)))
        grads = tape.gradient(loss, [ref[0].w, ref[1].w])
        if opt.global_clipnorm:
            assert float(tw.linalg.global_norm(grads)) / (opt.loss_scale_factor or 1) > opt.global_clipnorm  # clips
        opt.apply_gradients(zip(grads, [ref[0].w, ref[1].w]))
        want.append(float(loss))
    stages = [Layer(W[0], True), Layer(W[1], False)]
    pipe = tw.distribute.pipeline([(stages[0], tw.placement("cpu", ranks=[0])),
                                   (stages[1], tw.placement("cpu", ranks=[1]))], micro_batches=3, loss=_loss)
    p_opt = make_opt()
    got = [float(pipe.train_step(X, Y, p_opt)) for _ in range(3)]
    np.testing.assert_allclose(got, want, rtol=2e-5)
    for s, r in zip(stages, ref):
        np.testing.assert_allclose(s.w.numpy(), r.w.numpy(), rtol=2e-5, atol=1e-6)
    assert p_opt.global_clipnorm == make_opt().global_clipnorm        # put back after the step
