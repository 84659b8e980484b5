"""Repeated calls of the same signature (issue 18, mlp_predict): ``tw.function``'s repeated-call key,
the executor's generated sequential runner, ``gemm.matmul``'s remembered geometry, and Keras'
``predict_on_batch`` — each must give what the full path gives, and fall back to it when the
shapes, dtypes, variables or the model change."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import errors
from tensorweave.kernels.cpu import gemm
from tensorweave.runtime import executor
from tensorweave.runtime import function as function_module


@pytest.fixture
def rng():
    return np.random.default_rng(18)


def _only_cf(fn):
    (cf,) = fn._cache.values()
    return cf


def _dense_fn(w, b):
    @tw.function
    def f(x):
        return tw.nn.relu(tw.matmul(x, w) + b)
    return f


def _reference(x, w, b):
    return np.maximum(x.astype(np.float64) @ np.asarray(w, np.float64) + np.asarray(b, np.float64), 0)


def test_a_repeated_signature_reuses_the_checked_function(rng):
    w = tw.Variable(rng.standard_normal((784, 64)).astype(np.float32))
    b = tw.Variable(rng.standard_normal(64).astype(np.float32))
    f = _dense_fn(w, b)
    x = rng.standard_normal((1, 784)).astype(np.float32)
    first = f(tw.constant(x)).numpy()
    assert len(f._fast) == 1
    calls = []
    cf = _only_cf(f)
    real = cf._call_flat
    cf._call_flat = lambda flat: (calls.append(1), real(flat))[1]   # the full path, counted
    again = f(tw.constant(x)).numpy()
    assert calls == []                       # found by the repeated-call key
    np.testing.assert_array_equal(again, first)
    np.testing.assert_allclose(again, _reference(x, w.numpy(), b.numpy()), rtol=1e-5, atol=1e-5)
    assert f.experimental_get_tracing_count() == 1


def test_new_shapes_and_dtypes_trace_and_are_checked(rng):
    w64 = rng.standard_normal((5, 3))

    @tw.function
    def f(x):
        return tw.matmul(x, tw.cast(w64, x.dtype))
    a = rng.standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_allclose(f(tw.constant(a)).numpy(), a @ w64, rtol=1e-5, atol=1e-5)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(f(tw.constant(b)).numpy(), b @ w64, rtol=1e-5, atol=1e-5)        # new batch: traced
    c = rng.standard_normal((4, 5))
    out = f(tw.constant(c))
    assert out.dtype == tw.float64                                                   # new dtype: traced
    np.testing.assert_allclose(out.numpy(), c @ w64, rtol=1e-12)
    np.testing.assert_allclose(f(tw.constant(a)).numpy(), a @ w64, rtol=1e-5, atol=1e-5)        # back: the first
    assert f.experimental_get_tracing_count() == 3
    assert len(f._fast) == 3


def test_a_key_is_stored_only_after_a_call_succeeded():
    @tw.function
    def f(x):
        return tw.compat.v1.check_numerics(x + 1.0, "bad value") * 2.0
    with pytest.raises(errors.InvalidArgumentError, match="bad value"):
        f(tw.constant(np.array([1.0, np.inf], np.float32)))
    assert f._fast == {}
    assert f(tw.constant(np.array([1.0, 2.0], np.float32))).numpy().tolist() == [4.0, 6.0]
    assert len(f._fast) == 1


def test_arrays_lists_and_tensors_of_one_signature_agree(rng):
    @tw.function
    def f(pair):
        return pair[0] + 2.0 * pair[1]
    a, b = (rng.standard_normal((3, 2)).astype(np.float32) for _ in range(2))
    want = a + 2.0 * b
    for _ in range(2):
        np.testing.assert_allclose(f((a, b)).numpy(), want, rtol=1e-6)              # arrays
        np.testing.assert_allclose(f([tw.constant(a), tw.constant(b)]).numpy(), want, rtol=1e-6)
        np.testing.assert_allclose(f((tw.constant(a), b)).numpy(), want, rtol=1e-6)
    assert len(f._fast) == 3


def test_keys_of_other_arguments_take_the_full_path(rng):
    @tw.function
    def f(x, scale=1.0):
        return x * scale
    x = tw.constant(np.ones(3, np.float32))
    assert float(f(x, scale=3.0).numpy()[0]) == 3.0
    assert float(f(x, 2.0).numpy()[0]) == 2.0       # a Python number: no repeated-call key
    assert float(f(x, 5.0).numpy()[0]) == 5.0
    assert f._fast == {}
    assert function_module._fast_key((x, 2.0), []) is None
    assert function_module._fast_key((x, [x]), []) != function_module._fast_key((x, (x,)), [])


def test_variables_changed_between_calls_are_read_again(rng):
    w = tw.Variable(np.ones((4, 2), np.float32))
    b = tw.Variable(np.zeros(2, np.float32))
    f = _dense_fn(w, b)
    x = np.ones((1, 4), np.float32)
    assert f(tw.constant(x)).numpy().tolist() == [[4.0, 4.0]]
    assert f(tw.constant(x)).numpy().tolist() == [[4.0, 4.0]]
    w.assign(np.full((4, 2), 2.0, np.float32))
    b.assign_add(np.ones(2, np.float32))
    assert f(tw.constant(x)).numpy().tolist() == [[9.0, 9.0]]
    w.assign(np.asfortranarray(np.arange(8, dtype=np.float32).reshape(4, 2)))   # new strides for the GEMM
    np.testing.assert_allclose(f(tw.constant(x)).numpy(), _reference(x, w.numpy(), b.numpy()))


def test_a_tape_sees_a_call_whose_key_was_stored(rng):
    w = tw.Variable(rng.standard_normal((3, 2)).astype(np.float32))

    @tw.function
    def f(x):
        return tw.reduce_sum(tw.matmul(x, w))
    x = tw.constant(rng.standard_normal((2, 3)).astype(np.float32))
    f(x)
    f(x)
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    gx, gw = tape.gradient(y, [x, w])
    np.testing.assert_allclose(gx.numpy(), np.tile(w.numpy().sum(1), (2, 1)), rtol=1e-6)
    np.testing.assert_allclose(gw.numpy(), np.tile(x.numpy().sum(0)[:, None], (1, 2)), rtol=1e-6)


# ---- the executor's generated runner ---------------------------------------------------------------
def _both_ways(fn, *args):
    """``fn(*args)`` on the generated runner and on the loop (_run_sequential), as NumPy."""
    got = [np.asarray(o) for o in tw.nest.flatten(fn(*args))]
    cf = _only_cf(fn)
    assert callable(cf._plan.runner)
    cf._plan.runner = False
    looped = [np.asarray(o) for o in tw.nest.flatten(fn(*args))]
    cf._plan.runner = None
    return got, looped


def test_runner_equals_the_loop_with_presets_several_outputs_and_fed_fetches(rng):
    v = tw.Variable(rng.standard_normal((6, 4)).astype(np.float32))

    @tw.function
    def f(x):
        parts = tw.split(x * 3.0 + v, 2, axis=1)          # a step with two outputs
        top = tw.math.top_k(parts[1], k=1)
        return x, parts[0] - 1.0, top.values, top.indices
    x = tw.constant(rng.standard_normal((6, 4)).astype(np.float32))
    got, looped = _both_ways(f, x)
    for g, l in zip(got, looped):
        np.testing.assert_array_equal(g, l)
    np.testing.assert_array_equal(got[0], x.numpy())
    np.testing.assert_allclose(got[1], (x.numpy() * 3 + v.numpy())[:, :2] - 1, rtol=1e-6)


def test_runner_error_names_the_failing_node():
    @tw.function
    def f(x):
        y = x + 1.0
        return tw.compat.v1.check_numerics(y, "bad value") * 2.0
    ok = tw.constant(np.ones(2, np.float32))
    f(ok)
    assert callable(_only_cf(f)._plan.runner)
    with pytest.raises(errors.InvalidArgumentError, match=r"bad value[\s\S]*\[\[node \S*CheckNumerics"):
        f(tw.constant(np.array([1.0, np.inf], np.float32)))


def test_runner_step_of_each_line():
    @tw.function
    def f(x):
        return tw.exp(x) + tw.sin(x)
    f(tw.constant(np.ones(2, np.float32)))
    plan = _only_cf(f)._plan
    assert sorted(plan.runner.step_of_line.values()) == list(range(len(plan.steps)))


def test_runner_skipped_for_huge_plans(monkeypatch):
    monkeypatch.setattr(executor, "RUNNER_MAX_STEPS", 1)

    @tw.function
    def f(x):
        return tw.exp(x) + tw.sin(x)
    np.testing.assert_allclose(f(tw.constant(np.zeros(2, np.float32))).numpy(), [1.0, 1.0])
    assert _only_cf(f)._plan.runner is False


# ---- gemm.matmul's remembered geometry -----------------------------------------------------------
@pytest.mark.skipif(gemm.library() != "mkl", reason="the BLAS path needs MKL")
def test_geometry_is_per_strides_and_alignment(rng):
    a = rng.standard_normal((8, 300)).astype(np.float32)
    b = rng.standard_normal((300, 40)).astype(np.float32)
    want = a.astype(np.float64) @ b
    np.testing.assert_allclose(gemm.matmul(a, b), want, rtol=1e-4, atol=1e-4)
    bt = np.ascontiguousarray(b.T).T                      # same shape, other strides
    np.testing.assert_allclose(gemm.matmul(a, bt), want, rtol=1e-4, atol=1e-4)
    assert gemm._geometry[(a.shape, a.strides, a.dtype, bt.shape, bt.strides, bt.dtype)][1][0] == gemm._TRANS
    raw = np.zeros(a.nbytes + 1, np.uint8)
    unaligned = np.frombuffer(raw.data, np.float32, a.size, offset=1).reshape(a.shape)
    unaligned[...] = a
    assert not unaligned.flags.aligned
    np.testing.assert_allclose(gemm.matmul(unaligned, b), want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(gemm.library() != "mkl", reason="the BLAS path needs MKL")
def test_library_settings_changed_later_still_hold(monkeypatch, rng):
    """The geometry is remembered, the library is chosen per call: a threshold set after the
    first product sends the next one elsewhere."""
    a = rng.standard_normal((16, 200)).astype(np.float32)
    b = rng.standard_normal((200, 64)).astype(np.float32)
    log = []
    dt = np.dtype(np.float32)
    for table, name in ((gemm._gemm, "threaded"), (gemm._gemm_serial, "serial")):
        real = table[dt]
        monkeypatch.setitem(table, dt, lambda *args, real=real, name=name: (log.append(name), real(*args))[1])
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setattr(gemm, "_openblas", {"found": None})
    monkeypatch.setattr(gemm, "_serial_chosen", {})
    monkeypatch.setitem(gemm._serial_work, dt, 10 ** 9)
    want = a.astype(np.float64) @ b
    np.testing.assert_allclose(gemm.matmul(a, b), want, rtol=1e-4)
    monkeypatch.setitem(gemm._serial_work, dt, 0)
    np.testing.assert_allclose(gemm.matmul(a, b), want, rtol=1e-4)
    assert log == ["serial", "threaded"]


# ---- Keras predict_on_batch -----------------------------------------------------------------------
def _mlp(keras):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_predict_on_batch_follows_weights_dtypes_and_shapes(rng):
    keras = tw.keras
    model = _mlp(keras)
    x = rng.standard_normal((1, 12)).astype(np.float32)
    first = model.predict_on_batch(x)
    np.testing.assert_allclose(model.predict_on_batch(x), np.asarray(model(x)), rtol=1e-6)
    assert isinstance(first, np.ndarray) and first.shape == (1, 3)
    model.set_weights([w * 0.5 for w in model.get_weights()])
    np.testing.assert_allclose(model.predict_on_batch(x), np.asarray(model(x)), rtol=1e-6)
    assert not np.allclose(model.predict_on_batch(x), first)
    np.testing.assert_allclose(model.predict_on_batch(x.astype(np.float64)), model.predict_on_batch(x))
    five = rng.standard_normal((5, 12)).astype(np.float32)
    np.testing.assert_allclose(model.predict_on_batch(five), np.asarray(model(five)), rtol=1e-6)
    model.fit(five, np.zeros((5, 3), np.float32), epochs=1, verbose=0)          # trained: new values
    np.testing.assert_allclose(model.predict_on_batch(x), np.asarray(model(x)), rtol=1e-6)


def test_predict_after_layers_are_added_or_removed(rng):
    keras = tw.keras
    model = _mlp(keras)
    x = rng.standard_normal((1, 12)).astype(np.float32)
    assert model.predict_on_batch(x).shape == (1, 3)
    model.add(keras.layers.Dense(2))
    assert model.predict_on_batch(x).shape == (1, 2)
    np.testing.assert_allclose(model.predict_on_batch(x), np.asarray(model(x)), rtol=1e-6)
    model.pop()
    assert model.predict_on_batch(x).shape == (1, 3)
    np.testing.assert_allclose(model.predict(x, verbose=0), np.asarray(model(x)), rtol=1e-6)
