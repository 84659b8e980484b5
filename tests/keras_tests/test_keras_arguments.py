"""Keras arguments are validated where they are given, with Keras' messages (issue 17, defect 10).

The messages of layers and Input are Keras 3.15's; Keras does not check fit's arguments (batch_size=0
trains on one batch, validation_split=2.0 on nothing), so ours say what is expected.
"""
import numpy as np
import pytest

from tensorweave import keras


@pytest.fixture
def model():
    keras.backend.clear_session()
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    m.compile("sgd", "sparse_categorical_crossentropy")
    return m


X = np.ones((10, 4), np.float32)
Y = np.arange(10) % 3


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, r"invalid value for `batch_size`, expected a positive integer. Received: batch_size=0"),
    ({"batch_size": -1}, r"`batch_size`.*Received: batch_size=-1"),
    ({"batch_size": 2.5}, r"`batch_size`.*Received: batch_size=2.5 \(of type float\)"),
    ({"epochs": "2"}, r"invalid value for `epochs`, expected an integer >= 0. Received: epochs='2' \(of type str\)"),
    ({"epochs": -1}, r"`epochs`.*epochs=-1"),
    ({"validation_split": 2.0}, r"`validation_split` must be a float in \[0, 1\).*validation_split=2.0"),
    ({"validation_split": -0.1}, r"validation_split=-0.1"),
    ({"steps_per_epoch": 0}, r"`steps_per_epoch`.*steps_per_epoch=0"),
    ({"class_weight": {0: 1.0, 5: 2.0}}, r"`class_weight` has key\(s\) \[5\] that are not classes of the model's "
                                         r"output, which has 3 classes \(0 to 2\)"),
    ({"class_weight": {"a": 1.0}}, r"`class_weight` keys must be class indices"),
    ({"class_weight": {0: -1.0}}, r"`class_weight\[0\]` must be a finite number >= 0"),
])
def test_fit_arguments(model, kwargs, message):
    with pytest.raises(ValueError, match=message):
        model.fit(X, Y, verbose=0, **kwargs)


def test_evaluate_and_predict_arguments(model):
    with pytest.raises(ValueError, match=r"`batch_size`.*batch_size=-3"):
        model.evaluate(X, Y, batch_size=-3, verbose=0)
    with pytest.raises(ValueError, match=r"`batch_size`.*batch_size=0"):
        model.predict(X, batch_size=0, verbose=0)
    with pytest.raises(ValueError, match=r"`steps`.*steps=0"):
        model.predict(X, steps=0, verbose=0)


def test_valid_class_weight_and_split_still_train(model):
    hist = model.fit(X, Y, class_weight={0: 1.0, 2: 3.0}, validation_split=0.2, epochs=2, verbose=0)
    assert len(hist.history["val_loss"]) == 2


@pytest.mark.parametrize("make, message", [
    (lambda: keras.layers.Dense(2.5), r"invalid value for `units`, expected a positive integer. Received: units=2.5"),
    (lambda: keras.layers.Dense("3"), r"Received: units='3'"),
    (lambda: keras.layers.Dense(0), r"Received: units=0"),
    (lambda: keras.layers.LSTM(1.5), r"`units`.*units=1.5"),
    (lambda: keras.layers.Conv2D(2.5, 3), r"`filters`.*filters=2.5"),
    (lambda: keras.layers.Embedding(10.5, 3), r"`input_dim` and `output_dim` should be positive"),
    (lambda: keras.layers.MultiHeadAttention(num_heads=2, key_dim="4"), r"`key_dim`.*key_dim='4'"),
    (lambda: keras.Input(shape=(-2,)), r"Cannot convert '\(-2,\)' to a shape. Negative dimensions are not allowed."),
    (lambda: keras.Input(shape=(2.5,)), r"Cannot convert '\(2.5,\)' to a shape. Found invalid dimension '2.5'"),
    (lambda: keras.Sequential([keras.Input((4,)), keras.layers.Reshape((3, 3))]),
     r"The total size of the tensor must be unchanged. Received: input_shape=\(4,\), target_shape=\(3, 3\)"),
    (lambda: keras.Sequential([keras.Input((4,)), keras.layers.Reshape((3, -1))]),
     r"cannot by divided by the specified dimensions in target_shape. Received: input_shape=\(4,\)"),
    (lambda: keras.layers.Reshape((2, -1, -1)), r"at most one -1"),
    (lambda: keras.layers.Dense(2, dtype="object"), r"Cannot convert 'object' to a mixed precision DTypePolicy"),
    (lambda: keras.layers.Dense(2, dtype="floaty"), r"Cannot convert 'floaty' to a mixed precision DTypePolicy"),
])
def test_layer_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_valid_reshape_and_input_still_build():
    model = keras.Sequential([keras.Input((6,)), keras.layers.Reshape((3, -1)), keras.layers.Reshape((6,))])
    assert model.output_shape == (None, 6) and keras.layers.Reshape((2, 3)).target_shape == (2, 3)
    assert keras.Input(shape=(np.int64(3), None)).shape == (None, 3, None)
    assert keras.layers.Dense(np.int32(4)).units == 4
