"""Planned tw.functions as pipeline stages: with an outer tape over a planned call (plan_tape.py)
a stage whose call is a tw.function runs each micro-batch's forward and backward as one planned
call per rank (no per-op hand-offs), and pipelined training stays one device's. Only this test
file is added for it: distribute/pipeline.py (pipe14's) is unchanged."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S
from tensorweave.distribute import interpreter

RNG = np.random.default_rng(14)
X = RNG.standard_normal((14, 6)).astype(np.float32)          # 14 rows: micro-batches of 4, 4, 3, 3
Y = RNG.standard_normal((14, 3)).astype(np.float32)
W1 = (RNG.standard_normal((6, 10)) * 0.4).astype(np.float32)
B1 = (RNG.standard_normal(10) * 0.1).astype(np.float32)
W2 = (RNG.standard_normal((10, 3)) * 0.4).astype(np.float32)
B2 = np.zeros(3, np.float32)
STAGE0, STAGE1 = tw.placement("cpu", ranks=[0, 1]), tw.placement("cpu", ranks=[2, 3])
STEPS = 5


class Dense(tw.Module):
    """A layer whose call is a planned tw.function once its variables are global (``planned``)."""

    def __init__(self, w, b, activation=None, name=None, planned=True):
        super().__init__(name=name)
        with self.name_scope:
            self.w, self.b = tw.Variable(w, name="w"), tw.Variable(b, name="b")
        self.activation = activation
        self._call = tw.function(self.forward) if planned else self.forward

    def forward(self, x):
        y = tw.matmul(x, self.w) + self.b
        return self.activation(y) if self.activation else y

    def __call__(self, x):
        return self._call(x)


def _mse(y, pred):
    return tw.reduce_mean(tw.square(pred - y))


def _one_device():
    l1, l2 = Dense(W1, B1, tw.nn.relu, planned=False), Dense(W2, B2, planned=False)
    opt = tw.keras.optimizers.Adam(0.05)
    losses = []
    for _ in range(STEPS):
        with tw.GradientTape() as tape:
            loss = _mse(tw.constant(Y), l2(l1(tw.constant(X))))
        variables = l1.trainable_variables + l2.trainable_variables
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        losses.append(float(loss))
    return losses, [v.numpy() for v in variables]


def _pipelined(planned, schedule, tensor_parallel=False, count=None):
    l1 = Dense(W1, B1, tw.nn.relu, name="l1", planned=planned)
    l2 = Dense(W2, B2, name="l2", planned=planned)
    if tensor_parallel:
        l1.to_global(STAGE0, {"w": S(1), "b": S(0)})
        l2.to_global(STAGE1, {"w": S(0)})
    pipe = tw.distribute.pipeline([(l1, STAGE0), (l2, STAGE1)], micro_batches=4, schedule=schedule, loss=_mse)
    opt = tw.keras.optimizers.Adam(0.05)
    losses = []
    for _ in range(STEPS):
        if count is not None:
            count.clear()
        losses.append(float(pipe.train_step(X, Y, opt)))
    return losses, [v.numpy() for v in l1.trainable_variables + l2.trainable_variables]


@pytest.mark.parametrize("schedule,tensor_parallel", [("1f1b", False), ("gpipe", True)])
def test_planned_stages_train_like_one_device_and_like_eager_stages(schedule, tensor_parallel):
    want_losses, want = _one_device()
    eager = _pipelined(False, schedule, tensor_parallel)
    planned = _pipelined(True, schedule, tensor_parallel)
    np.testing.assert_allclose(planned[0], want_losses, rtol=2e-5)
    for got, w in zip(planned[1], want):
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(planned[0], eager[0], rtol=1e-6)


def test_a_planned_stage_runs_no_eager_global_matmul(monkeypatch):
    """Each stage's forward and backward are planned calls: the eager global interpreter never
    sees the stages' matmuls (it still runs the loss and the optimizer's update)."""
    seen = []
    run = interpreter.run_global_op

    def counting(opdef, inputs, attrs, name=None):
        seen.append(opdef.name)
        return run(opdef, inputs, attrs, name)
    monkeypatch.setattr(interpreter, "run_global_op", counting)
    _pipelined(True, "1f1b", count=seen)
    assert "MatMul" not in seen and "ReluGrad" not in seen
    seen_eager = []
    monkeypatch.setattr(interpreter, "run_global_op",
                        lambda opdef, inputs, attrs, name=None: seen_eager.append(opdef.name) or run(
                            opdef, inputs, attrs, name))
    _pipelined(False, "1f1b", count=seen_eager)
    assert seen_eager.count("MatMul") >= 8       # eager stages: every micro-batch's matmuls op by op
