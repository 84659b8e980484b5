"""A reusable test of one Keras layer: ``layer_test(cls, kwargs, input_shape, ...)``.

For a layer class, its constructor arguments and an input shape (a list of shapes for
multi-input layers) it checks, in order:

1. build and eager call; output dtype, and output shape against ``compute_output_shape`` and
   ``expected_output_shape``; trainable / non-trainable weight counts;
2. the symbolic call on ``keras.Input`` gives the same shape (batch None), and a functional
   ``Model`` wrapping the layer computes the eager output;
3. ``get_config()`` is JSON-serialisable and ``deserialize``/``from_config`` of the JSON round trip
   gives a layer with the same config that, after ``set_weights``, computes the same output;
4. a call inside ``tw.function`` equals the eager call;
5. float64 gradients with respect to the (float) inputs and every trainable weight equal central
   finite differences (on a sample of coordinates, to stay fast);
6. optionally, an input of the wrong shape raises an error naming the layer.

Every check is skipped only by an explicit argument, so a new layer gets all of them by default.
Returns the eager layer and output for layer-specific follow-up checks.
"""
import json

import numpy as np

import tensorweave as tw
from tensorweave import keras


def _is_int(dtype):
    return np.issubdtype(np.dtype(dtype), np.integer)


def _make_inputs(shapes, dtype, rng, int_range, input_data):
    if input_data is not None:
        return input_data
    out = []
    for s in shapes:
        if _is_int(dtype):
            out.append(rng.integers(int_range[0], int_range[1], size=s).astype(dtype))
        else:
            out.append(rng.standard_normal(s).astype(dtype))
    return out


def _np(t):
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


def _close(a, b, what, rtol, atol):
    a, b = _np(a), _np(b)
    assert a.shape == b.shape, f"{what}: shapes {a.shape} != {b.shape}"
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=what)


def _shape_matches(got, expected):
    got, expected = tuple(got), tuple(expected)
    return len(got) == len(expected) and all(e is None or g is None or g == e for g, e in zip(got, expected))


def _as_shape(s):
    return tuple(s.as_list()) if hasattr(s, "as_list") else tuple(s)


def layer_test(layer_cls, kwargs=None, input_shape=None, input_dtype="float32", input_data=None,
               expected_output_shape=None, expected_output_dtype=None, expected_num_trainable_weights=None,
               expected_num_non_trainable_weights=None, call_kwargs=None, deterministic=True,
               check_gradients=True, check_input_gradients=True, check_function=True, check_functional=True,
               check_config=True, supports_masking=None, bad_input_shape=None, int_range=(0, 10),
               grad_points=6, expect_sparse_gradients=(), seed=0, rtol=1e-5, atol=1e-6, grad_call_kwargs=None):
    """Runs the checks in the module docstring; returns ``(layer, output)``."""
    kwargs = dict(kwargs or {})
    call_kwargs = dict(call_kwargs or {})
    multi = isinstance(input_shape, list)
    shapes = [tuple(s) for s in input_shape] if multi else [tuple(input_shape)]
    rng = np.random.default_rng(seed)
    xs = _make_inputs(shapes, input_dtype, rng, int_range, input_data)
    x_in = list(xs) if multi else xs[0]
    name = layer_cls.__name__

    # 1. build, eager call, shapes, dtypes, weight counts
    layer = layer_cls(**kwargs)
    out = layer(x_in, **call_kwargs)
    assert isinstance(out, tw.Tensor), f"{name} returned {type(out)}"
    want_dtype = tw.as_dtype(expected_output_dtype or layer.compute_dtype)
    assert out.dtype == want_dtype, f"{name}: output dtype {out.dtype.name}, expected {want_dtype.name}"
    out_shape = _as_shape(out.shape)
    computed = _as_shape(layer.compute_output_shape(list(shapes) if multi else shapes[0]))
    assert computed == out_shape, f"{name}: compute_output_shape {computed} != eager output shape {out_shape}"
    if expected_output_shape is not None:
        assert _shape_matches(out_shape, expected_output_shape), \
            f"{name}: output shape {out_shape}, expected {tuple(expected_output_shape)}"
    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights, \
            f"{name}: {len(layer.trainable_weights)} trainable weights, expected {expected_num_trainable_weights}"
    if expected_num_non_trainable_weights is not None:
        assert len(layer.non_trainable_weights) == expected_num_non_trainable_weights, \
            f"{name}: {len(layer.non_trainable_weights)} non-trainable weights, expected " \
            f"{expected_num_non_trainable_weights}"
    assert len(layer.weights) == len(layer.trainable_weights) + len(layer.non_trainable_weights)
    assert layer.count_params() == sum(int(np.prod(w.shape.as_list())) for w in layer.weights)
    if supports_masking is not None:
        assert layer.supports_masking == supports_masking, f"{name}: supports_masking={layer.supports_masking}"

    def run(lyr, data):
        return lyr(list(data) if multi else data[0], **call_kwargs)

    # 2. symbolic call and functional model
    if check_functional:
        inputs = [keras.Input(shape=s[1:], dtype=input_dtype) for s in shapes]
        sym = layer(inputs if multi else inputs[0], **call_kwargs)
        sym_shape = tuple(sym.shape)
        assert sym_shape[0] is None, f"{name}: symbolic output batch dimension is {sym_shape[0]}, expected None"
        # the static shape must survive an unknown batch size: later layers build from it
        assert sym_shape[1:] == out_shape[1:], \
            f"{name}: symbolic output shape {sym_shape} does not match eager {out_shape}"
        batchless = _as_shape(layer.compute_output_shape([(None,) + s[1:] for s in shapes] if multi
                                                         else (None,) + shapes[0][1:]))
        assert batchless == sym_shape, \
            f"{name}: compute_output_shape with batch None {batchless} != symbolic {sym_shape}"
        assert tw.as_dtype(sym.dtype) == want_dtype, f"{name}: symbolic dtype {sym.dtype}"
        model = keras.Model(inputs if multi else inputs[0], sym)
        if deterministic:
            _close(model(x_in), out, f"{name}: functional model output", rtol, atol)

    # 3. config round trip (through JSON, as a saved model would)
    if check_config:
        config = layer.get_config()
        text = json.dumps({"class_name": name, "config": config})
        restored = keras.layers.deserialize(json.loads(text), custom_objects={name: layer_cls})
        assert type(restored) is layer_cls
        again = json.loads(json.dumps(restored.get_config()))
        assert again == json.loads(text)["config"], f"{name}: config changes in a round trip:\n{config}\n{again}"
        run(restored, xs)  # builds it
        restored.set_weights(layer.get_weights())
        out2 = run(restored, xs)
        if deterministic:
            _close(out2, out, f"{name}: output after from_config + set_weights", rtol, atol)
        assert [w.shape.as_list() for w in restored.weights] == [w.shape.as_list() for w in layer.weights]

    # 4. tw.function == eager
    if check_function:
        fn = tw.function(lambda *a: run(layer, a))
        traced = fn(*[tw.constant(a) for a in xs])
        assert _as_shape(traced.shape) == out_shape
        if deterministic:
            _close(traced, run(layer, xs), f"{name}: tw.function output", rtol, atol)

    # 5. float64 gradients vs finite differences
    if check_gradients:
        check_layer_gradients(layer_cls, kwargs, shapes, multi, input_dtype, xs, grad_call_kwargs
                              if grad_call_kwargs is not None else call_kwargs, check_input_gradients,
                              grad_points, expect_sparse_gradients, seed)

    # 6. a wrong input shape names the layer
    if bad_input_shape is not None:
        bad = rng.standard_normal(bad_input_shape).astype(input_dtype)
        try:
            layer(bad, **call_kwargs)
        except (ValueError, TypeError) as e:
            assert layer.name in str(e), f"{name}: error does not name the layer: {e}"
        else:
            raise AssertionError(f"{name}: input of shape {bad_input_shape} was accepted")
    return layer, out


def check_layer_gradients(layer_cls, kwargs, shapes, multi, input_dtype, xs, call_kwargs, check_inputs=True,
                          points=6, expect_sparse=(), seed=0, eps=1e-6, rtol=1e-5, atol=1e-7):
    """Gradients of ``sum(layer(x) * r)`` (r random) in float64 against central differences."""
    name = layer_cls.__name__
    rng = np.random.default_rng(seed + 1)
    layer = layer_cls(**{**kwargs, "dtype": "float64"})
    float_in = not _is_int(input_dtype)
    data = [np.asarray(a, np.float64) if float_in else a for a in xs]

    def call(arrays):
        ts = [tw.constant(a) for a in arrays]
        return layer(list(ts) if multi else ts[0], **call_kwargs), ts

    out, _ = call(data)
    assert out.dtype == tw.float64, f"{name}(dtype='float64') gives {out.dtype.name}"
    proj = rng.standard_normal(_as_shape(out.shape))

    def loss_value(arrays):
        y, _ = call(arrays)
        return float(np.sum(_np(y) * proj))

    with tw.GradientTape(persistent=True) as tape:
        ts = [tw.constant(a) for a in data]
        if float_in and check_inputs:
            for t in ts:
                tape.watch(t)
        y = layer(list(ts) if multi else ts[0], **call_kwargs)
        loss = tw.reduce_sum(y * tw.constant(proj))
    weights = layer.trainable_weights
    wgrads = tape.gradient(loss, weights)
    for w, g in zip(weights, wgrads):
        assert g is not None, f"{name}: no gradient for weight {w.name}"
        if getattr(w, "_keras_name", None) in expect_sparse:
            assert isinstance(g, tw.IndexedSlices), f"{name}: gradient of {w.name} is {type(g).__name__}, " \
                                                    f"expected IndexedSlices"
        _check_fd(f"{name} weight {w.name}", np.asarray(g), w.numpy(), rng, points, eps, rtol, atol,
                  lambda value, w=w: _with_value(w, value, lambda: loss_value(data)))
    if float_in and check_inputs:
        igrads = tape.gradient(loss, ts)
        for i, (a, g) in enumerate(zip(data, igrads)):
            assert g is not None, f"{name}: no gradient for input {i}"

            def at(value, i=i):
                arrays = list(data)
                arrays[i] = value
                return loss_value(arrays)
            _check_fd(f"{name} input {i}", _np(g), a, rng, points, eps, rtol, atol, at)


def _with_value(var, value, fn):
    old = var.numpy()
    var.assign(value)
    try:
        return fn()
    finally:
        var.assign(old)


def _check_fd(what, grad, base, rng, points, eps, rtol, atol, loss_at):
    base = np.asarray(base, np.float64)
    assert grad.shape == base.shape, f"{what}: gradient shape {grad.shape} != {base.shape}"
    flat = rng.choice(base.size, size=min(points, base.size), replace=False)
    for k in flat:
        idx = tuple(int(i) for i in np.unravel_index(k, base.shape))
        plus, minus = base.copy(), base.copy()
        plus[idx] += eps
        minus[idx] -= eps
        fd = (loss_at(plus) - loss_at(minus)) / (2 * eps)
        tol = atol + rtol * max(abs(fd), abs(grad[idx]), 1.0)
        assert abs(fd - grad[idx]) <= tol, \
            f"{what}: gradient at {idx} is {float(grad[idx])!r}, finite differences give {fd!r}"
