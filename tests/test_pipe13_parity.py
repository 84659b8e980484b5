"""More Keras fit parity on global tensors (the issue's evidence beyond the MLP): an embedding
model with dropout (MirroredStrategy; ModelParallel with the table split by rows on a 2x2 mesh)
and batch normalization with Adam on 3 ranks (uneven batches) equal one-device fit."""
import contextlib
import warnings

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras

RNG = np.random.default_rng(0)
IDS = RNG.integers(0, 20, (24, 5)).astype(np.int32)
IDS_Y = (IDS.sum(1) % 3).astype(np.int64)
X = RNG.standard_normal((30, 6)).astype(np.float32)
Y = (X[:, :3].sum(axis=1) > 0).astype(np.int64) + (X[:, 3] > 0.5)


def _embedding_model():
    return keras.Sequential([keras.Input((5,), dtype="int32"), keras.layers.Embedding(20, 8, name="emb"),
                             keras.layers.Flatten(), keras.layers.Dropout(0.3, seed=3), keras.layers.Dense(3, name="d2")])


def _bn_model():
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu", name="d1"),
                             keras.layers.BatchNormalization(name="bn"), keras.layers.Dense(3, name="d2")])


def _fit(make, init, scope, x, y, batch_size, optimizer):
    keras.utils.set_random_seed(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with scope:
            model = make()
            model.set_weights(init)
            model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
        hist = model.fit(x, y, batch_size=batch_size, epochs=2, shuffle=False, verbose=0).history["loss"]
        return hist, model.get_weights(), model.evaluate(x, y, batch_size=7, verbose=0)


def _same(got, want):
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(got[2], want[2], rtol=2e-5)


def _mesh_model_parallel():
    mesh = keras.distribution.DeviceMesh((2, 2), ["batch", "model"], ["cpu:0", "cpu:1", "cpu:2", "cpu:3"])
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map["emb.*embeddings"] = ("model", None)           # the table split by rows
    layout_map["d2.*kernel"] = ("model", None)
    return keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")


@pytest.mark.parametrize("kind", ["mirrored", "model_parallel"])
def test_embedding_and_dropout_fit_equals_one_device(kind):
    # regression (mirrored): the functional shape-only trace read a global table with sparse_read
    keras.utils.set_random_seed(1)
    init = _embedding_model().get_weights()
    want = _fit(_embedding_model, init, contextlib.nullcontext(), IDS, IDS_Y, 8, "adam")
    dist = tw.distribute.MirroredStrategy(["cpu:0", "cpu:1"]) if kind == "mirrored" else _mesh_model_parallel()
    got = _fit(_embedding_model, init, dist.scope(), IDS, IDS_Y, 8, "adam")
    _same(got, want)


def test_batch_norm_with_adam_on_three_ranks_uneven_batches_equals_one_device():
    keras.utils.set_random_seed(1)
    init = _bn_model().get_weights()
    want = _fit(_bn_model, init, contextlib.nullcontext(), X, Y, 10, "adam")       # 10 rows over 3 ranks: 4, 3, 3
    got = _fit(_bn_model, init, tw.distribute.MirroredStrategy(["cpu:0", "cpu:1", "cpu:2"]).scope(), X, Y, 10, "adam")
    _same(got, want)
