"""Keras under a distribution: MirroredStrategy / keras.distribution DataParallel and
ModelParallel fit equal one-device fit; weights are global with the layouts asked for."""
import warnings

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras
from tensorweave.core.sbp import B, S

RNG = np.random.default_rng(0)
X = RNG.standard_normal((24, 6)).astype(np.float32)
Y = (X[:, :3].sum(axis=1) > 0).astype(np.int64) + (X[:, 3] > 0.5)


SEEN = []


class _Record(keras.layers.Layer):
    """Passes its input through, remembering its layout (to check batches are really split)."""

    def call(self, x):
        if getattr(x, "is_global", False) or isinstance(x, tw.EagerTensor):   # (not the shape-only trace)
            SEEN.append(getattr(x, "sbp", "local"))
        return x


def _model():
    return keras.Sequential([keras.Input((6,)), _Record(), keras.layers.Dense(8, activation="relu", name="d1"),
                             keras.layers.Dense(3, name="d2")])


def _fit(scope, init):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with scope:
            model = _model()
            model.set_weights(init)
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy",
                          metrics=["accuracy"])
        hist = model.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        loss, acc = model.evaluate(X, Y, batch_size=8, verbose=0)
        pred = model.predict(X[:5], batch_size=4, verbose=0)
    return model, hist.history, (loss, acc), pred


@pytest.fixture(scope="module")
def one_device():
    keras.utils.set_random_seed(1)
    init = _model().get_weights()
    import contextlib
    return init, _fit(contextlib.nullcontext(), init)


def _same(got, want):
    model, hist, evals, pred = got
    _, w_hist, w_evals, w_pred = want
    for k in w_hist:
        np.testing.assert_allclose(hist[k], w_hist[k], rtol=2e-5, atol=1e-6, err_msg=k)
    np.testing.assert_allclose(evals, w_evals, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(pred, w_pred, rtol=2e-5, atol=1e-5)


def test_mirrored_strategy_fit_equals_one_device(one_device):
    init, want = one_device
    strategy = tw.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    SEEN.clear()
    got = _fit(strategy.scope(), init)
    _same(got, want)
    assert len(SEEN) == 3 * 2 + 3 + 2 and set(SEEN) == {(S(0),)}          # every batch of fit/evaluate/predict was split
    model = got[0]
    assert model.distribute_strategy is strategy and strategy.num_replicas_in_sync == 2
    assert all(v.is_global and v.sbp == (B,) for v in model.weights)
    assert all(v.is_global for v in model.optimizer.variables if v.shape.rank)


def test_keras_model_parallel_fit_equals_one_device(one_device):
    init, want = one_device
    mesh = keras.distribution.DeviceMesh((2, 2), ["batch", "model"], ["cpu:0", "cpu:1", "cpu:2", "cpu:3"])
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map["d1/kernel"] = (None, "model")
    layout_map["d1/bias"] = ("model",)
    layout_map["d2.*kernel"] = ("model", None)
    dist = keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    SEEN.clear()
    got = _fit(dist.scope(), init)
    _same(got, want)
    assert set(SEEN) == {(S(0), B)}                 # split over "batch", replicated over "model"
    sbps = {"/".join(v.path.split("/")[-2:]): v.sbp for v in got[0].weights}
    assert sbps == {"d1/kernel": (B, S(1)), "d1/bias": (B, S(0)), "d2/kernel": (B, S(0)), "d2/bias": (B, B)}


def test_set_distribution_data_parallel(one_device):
    init, want = one_device
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=["cpu:0", "cpu:1", "cpu:2"]))
    try:
        import contextlib
        got = _fit(contextlib.nullcontext(), init)
    finally:
        keras.distribution.set_distribution(None)
    _same(got, want)
    assert got[0].weights[0].placement.ranks == (0, 1, 2)


def test_a_model_made_outside_the_scope_is_an_error_with_a_hint():
    strategy = tw.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    model = _model()
    with strategy.scope():
        model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match=r"create \(and build\) the model inside `strategy.scope\(\)`"):
        model.fit(X, np.zeros((24, 3), np.float32), verbose=0)


def test_layout_map_and_mesh_errors():
    mesh = keras.distribution.DeviceMesh((2,), ["model"], ["cpu:0", "cpu:1"])
    lm = keras.distribution.LayoutMap(mesh)
    lm["dense"] = (None, "model")
    lm["kernel"] = ("model", None)
    with pytest.raises(ValueError, match="matches more than one key"):
        lm["dense/kernel"]
    assert lm["other/bias"] is None
    with pytest.raises(ValueError, match="are not axes of the mesh"):
        keras.distribution.TensorLayout(("batch",)).sbp(mesh, 1)
    with pytest.raises(ValueError, match="needs 4 devices"):
        keras.distribution.DeviceMesh((2, 2), ["a", "b"], ["cpu:0"])
    with pytest.raises(ValueError, match="is not of the form 'cpu:N'"):
        keras.distribution.DeviceMesh((1,), ["a"], ["tpu0"])
