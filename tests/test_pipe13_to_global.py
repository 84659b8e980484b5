"""``model.to_global(placement, sbp)``: a tw.Module or Keras model trained on one device, made
global part-way, continues with the one-device numbers (optimizer slots follow, values kept)."""
import warnings

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras
from tensorweave.core.sbp import B, S

RNG = np.random.default_rng(3)
X = RNG.standard_normal((12, 6)).astype(np.float32)
Y = RNG.standard_normal((12, 3)).astype(np.float32)
W1 = (RNG.standard_normal((6, 10)) * 0.4).astype(np.float32)
W2 = (RNG.standard_normal((10, 3)) * 0.4).astype(np.float32)
P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])
MESH = tw.placement("cpu", ranks=[[0, 1], [2, 3]])


class MLP(tw.Module):
    def __init__(self):
        super().__init__()
        with self.name_scope:
            self.w1 = tw.Variable(W1, name="w1")
            self.b1 = tw.Variable(np.full(10, 0.1, np.float32), name="b1")
            self.w2 = tw.Variable(W2, name="w2")
            self.b2 = tw.Variable(np.zeros(3, np.float32), name="b2")

    def __call__(self, x):
        return tw.matmul(tw.nn.relu(tw.matmul(x, self.w1) + self.b1), self.w2) + self.b2


def _steps(model, opt, x, y, n):
    losses = []
    for _ in range(n):
        with tw.GradientTape() as tape:
            loss = tw.reduce_mean(tw.square(model(x) - y))
        variables = model.trainable_variables
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        losses.append(float(loss))
    return losses


@pytest.fixture(scope="module")
def one_device():
    model = MLP()
    losses = _steps(model, tw.keras.optimizers.Adam(0.05), tw.constant(X), tw.constant(Y), 20)
    return losses, {v.name: v.numpy() for v in model.variables}


CASES = {
    # name: (placement, data sbp, sbp argument of to_global)
    "data_parallel": (P2, S(0), B),
    "zero_by_callable": (P2, S(0), lambda v: S(0)),
    "model_parallel_by_dict": (P3, B, {"w1": S(1), "b1": S(0), "w2": S(0)}),
    "hybrid_2x2": (MESH, (S(0), B), {"mlp/w1": (B, S(1)), "b1": (B, S(0)), "w2": (B, S(0)), "b2": (B, B)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_module_made_global_after_training_continues_like_one_device(case, one_device):
    placement, data_sbp, sbp = CASES[case]
    model, opt = MLP(), tw.keras.optimizers.Adam(0.05)
    losses = _steps(model, opt, tw.constant(X), tw.constant(Y), 10)
    slot_ids = {id(s) for s in opt.variables if s.shape.rank}
    w1 = model.w1
    assert model.to_global(placement, sbp, optimizer=opt) is model
    assert model.w1 is w1 and w1.is_global and w1.placement == placement and w1.name == "mlp/w1:0"
    x, y = (tw.constant(a).to_global(placement=placement, sbp=data_sbp) for a in (X, Y))
    losses += _steps(model, opt, x, y, 10)
    want_losses, want = one_device
    np.testing.assert_allclose(losses, want_losses, rtol=2e-5)
    for v in model.variables:
        np.testing.assert_allclose(v.numpy(), want[v.name], rtol=2e-5, atol=1e-6, err_msg=v.name)
    # the same slot objects, now global with their variable's layout (Adam: momentum, velocity)
    by_ref = {}
    for (ref, _), slot in opt._slots.items():
        by_ref.setdefault(ref, []).append(slot)
    for v in model.trainable_variables:
        assert [s.sbp for s in by_ref[id(v)]] == [v.sbp, v.sbp]
        assert all(id(s) in slot_ids for s in by_ref[id(v)])
    if case == "zero_by_callable":
        assert {v.sbp for v in model.variables} == {(S(0),)}
        assert [t.shape.as_list() for t in model.w1.to_local()] == [[3, 10], [3, 10]]


def _keras_model():
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu", name="d1"),
                             keras.layers.Dense(3, name="d2")])


def _keras_fit(model, epochs):
    return model.fit(X, Y, batch_size=4, epochs=epochs, shuffle=False, verbose=0).history["loss"]


KERAS_LAYOUTS = {
    "replicated": (P2, B),
    "model_parallel": (P2, {"d1/kernel": S(1), "d1/bias": S(0), "d2/kernel": S(0)}),
    # unmatched weights (d2/bias) are B on both mesh axes (regression: a 1-D B on the 2x2 mesh)
    "hybrid_2x2": (MESH, {"d1/kernel": (B, S(1)), "d1/bias": (B, S(0)), "d2/kernel": (B, S(0))}),
    "replicated_2x2": (MESH, B),
}


@pytest.mark.parametrize("layout", sorted(KERAS_LAYOUTS))
def test_a_keras_model_made_global_after_fit_keeps_fitting_like_one_device(layout):
    keras.utils.set_random_seed(5)
    init = _keras_model().get_weights()

    def fresh():
        m = _keras_model()
        m.set_weights(init)
        m.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse", metrics=["mae"])
        return m
    want_model = fresh()
    want = _keras_fit(want_model, 2)
    model = fresh()
    got = _keras_fit(model, 1)
    placement, sbp = KERAS_LAYOUTS[layout]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.to_global(placement, sbp)
        got += _keras_fit(model, 1)
        evals = model.evaluate(X, Y, batch_size=4, verbose=0)
    np.testing.assert_allclose(got, want, rtol=2e-5)
    np.testing.assert_allclose(evals, want_model.evaluate(X, Y, batch_size=4, verbose=0), rtol=2e-5, atol=1e-6)
    for a, b in zip(model.get_weights(), want_model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    assert all(v.is_global for v in model.weights)
    assert all(v.is_global for v in model.optimizer.variables if v.shape.rank)
    if layout == "model_parallel":
        assert model.layers[0].kernel.sbp == (S(1),) and model.layers[1].bias.sbp == (B,)
    if layout == "hybrid_2x2":
        assert model.layers[0].kernel.sbp == (B, S(1)) and model.layers[1].bias.sbp == (B, B)


def test_a_keras_model_made_global_before_compile_fits_on_split_batches():
    keras.utils.set_random_seed(6)
    want_model = _keras_model()
    model = _keras_model()
    model.set_weights(want_model.get_weights())
    model.to_global(P2, B, batch_sbp=S(0))
    for m in (want_model, model):
        m.compile(optimizer="sgd", loss="mse")
    assert model.distribute_strategy is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _keras_fit(model, 1)
    np.testing.assert_allclose(got, _keras_fit(want_model, 1), rtol=2e-5)
    assert all(getattr(v, "is_global", False) for m in model.metrics for v in m.variables)


def test_to_global_errors_name_the_variable_the_sbp_and_the_shape():
    with pytest.raises(ValueError, match=r"to_global of variable 'mlp/b1': sbp \(S\(1\)\) splits axis 1 of a "
                                         r"tensor of shape \[10\]"):
        MLP().to_global(P2, S(1))
    with pytest.raises(ValueError, match=r"'mlp/w1' matches more than one sbp key: \['w', '1'\]"):
        MLP().to_global(P2, {"w": S(0), "1": B})
    with pytest.raises(TypeError, match="sbp must be an SBP"):
        MLP().to_global(P2, 3)
    with pytest.raises(TypeError, match=r"placement must be tw.placement"):
        MLP().to_global([0, 1], B)
    with pytest.raises(ValueError, match=r"'seq.*' is not built.*Hint: build it first"):
        keras.Sequential([keras.layers.Dense(2)], name="seq").to_global(P2, B)


def test_a_global_variable_is_re_laid_out_in_place():
    model = MLP()
    model.to_global(P2, S(0))
    model.to_global(P3, {"w1": S(1)})
    assert model.w1.placement == P3 and model.w1.sbp == (S(1),) and model.b1.sbp == (B,)
    np.testing.assert_array_equal(model.w1.numpy(), W1)


def test_a_function_traced_before_to_global_reads_and_writes_the_global_value():
    # regression: its old local handle wrote into storage the global variable no longer reads (lost update)
    model = MLP()

    @tw.function
    def bump(x):
        model.b2.assign_add(x)
        return tw.reduce_sum(model.b2)

    @tw.function
    def scatter():
        model.b2.scatter_add(tw.IndexedSlices(tw.constant([1.0]), tw.constant([0])))
    assert float(bump(tw.ones([3]))) == 3.0
    scatter()                                       # (both traced while the variable is local)
    model.to_global(P2, S(0))
    assert float(bump(tw.ones([3]))) == 7.0
    np.testing.assert_array_equal(model.b2.numpy(), [3.0, 2.0, 2.0])
    assert [t.numpy().tolist() for t in model.b2.to_local()] == [[3.0, 2.0], [2.0]]
    with pytest.raises(tw.errors.FailedPreconditionError, match=r"'mlp/b2:0' updated in place through a local "
                                                                r"handle.*Hint: trace the function again"):
        scatter()
