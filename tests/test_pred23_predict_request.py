"""``predict_on_batch``'s request bound per input signature (issue 18, pred23,
``keras/engine/predict_request.py``): the second request of a signature goes straight to the traced
plan and gives the generic call's bits; anything the binding does not cover takes the generic call."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.keras.engine import predict_request
from tensorweave.runtime.function import Function


def _model(outputs=1):
    keras = tw.keras
    keras.utils.set_random_seed(5)
    x = keras.Input((12,))
    h = keras.layers.Dense(16, activation="relu")(x)
    heads = [keras.layers.Dense(3)(h) for _ in range(outputs)]
    model = keras.Model(x, heads[0] if outputs == 1 else heads)
    model.compile(optimizer="adam", loss="mse")
    return model


def _reference(model, x):
    """The two-layer model's forward pass in float64 NumPy."""
    (k1, b1), (k2, b2) = [(layer.kernel.numpy(), layer.bias.numpy()) for layer in model.layers[1:3]]
    return np.maximum(x.astype(np.float64) @ k1 + b1, 0) @ k2 + b2


@pytest.fixture
def generic_calls(monkeypatch):
    """Counts the predict functions' generic calls (``Function.__call__``)."""
    calls = []
    real = Function.__call__

    def counted(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Function, "__call__", counted)
    return calls


def test_the_second_request_of_a_signature_skips_the_generic_call_and_keeps_its_bits(generic_calls):
    model = _model()
    x = np.random.default_rng(0).standard_normal((1, 12)).astype(np.float32)
    first = model.predict_on_batch(x)
    assert len(generic_calls) == 1
    second, third = model.predict_on_batch(x), model.predict_on_batch(x.copy())
    assert len(generic_calls) == 1                      # both through the bound request
    assert type(second) is np.ndarray and second.dtype == np.float32 and second.shape == (1, 3)
    np.testing.assert_array_equal(second, first)
    np.testing.assert_array_equal(third, first)
    np.testing.assert_allclose(second, _reference(model, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(model.predict(x, verbose=0), first)    # predict's one quiet batch too
    assert len(generic_calls) == 1


def test_another_signature_takes_the_generic_call_and_is_bound_in_turn(generic_calls):
    model = _model()
    rng = np.random.default_rng(1)
    one, four = rng.standard_normal((1, 12)).astype(np.float32), rng.standard_normal((4, 12)).astype(np.float32)
    model.predict_on_batch(one)
    got = model.predict_on_batch(four)
    assert len(generic_calls) == 2 and got.shape == (4, 3)
    np.testing.assert_allclose(got, _reference(model, four), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(model.predict_on_batch(four), got)
    assert len(generic_calls) == 2
    model.predict_on_batch(one)                        # the request now bound is the (4, 12) one's
    assert len(generic_calls) == 3
    model.predict_on_batch(one.astype(np.float16))     # another dtype: the generic call (traced anew)
    assert len(generic_calls) == 4


def test_weights_assigned_between_requests_are_read(generic_calls):
    model = _model()
    x = np.ones((1, 12), np.float32)
    model.predict_on_batch(x)
    model.predict_on_batch(x)
    bias = model.layers[2].bias
    bias.assign(bias.numpy() + 1.0)
    np.testing.assert_allclose(model.predict_on_batch(x), _reference(model, x), rtol=1e-5, atol=1e-5)
    assert len(generic_calls) == 1


def test_a_tape_a_retrace_and_several_outputs_take_the_generic_call(generic_calls):
    model = _model()
    x = np.ones((2, 12), np.float32)
    model.predict_on_batch(x)
    with tw.GradientTape():
        model.predict_on_batch(x)                      # a recording tape: the generic call decides
    assert len(generic_calls) == 2
    model.make_predict_function(force=True)            # a new function: nothing bound to it yet
    model.predict_on_batch(x)
    assert len(generic_calls) == 3
    two = _model(outputs=2)
    outs = [two.predict_on_batch(x) for _ in range(2)]
    assert len(generic_calls) == 5 and getattr(two.make_predict_function(), "_tw_request", None) is None
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


def test_a_function_without_a_plan_is_not_bound():
    x = np.ones((1, 2), np.float32)

    def step(data):
        return data[0] + 1.0
    predict_request.bind(step, x)                      # run_eagerly's plain step: nothing to bind
    assert predict_request.run(step, x) is None
    fn = tw.function(step)
    assert predict_request.run(fn, x) is None          # bound only after a generic call checked it
    fn((tw.convert_to_tensor(x),))
    predict_request.bind(fn, x)
    np.testing.assert_array_equal(predict_request.run(fn, x), x + 1.0)
    assert predict_request.run(fn, np.ones((2, 2), np.float32)) is None
