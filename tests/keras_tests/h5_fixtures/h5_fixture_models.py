"""The two architectures of the HDF5 fixtures, written against any Keras module (ours, Keras 3,
tf-keras), with their fixed inputs and targets."""
import numpy as np


def build(keras, kind):
    L = keras.layers
    if kind == "seq_cnn":
        return keras.Sequential([keras.Input((8, 8, 1)), L.Conv2D(4, 3, activation="relu"), L.MaxPooling2D(),
                                 L.BatchNormalization(), L.Flatten(), L.Dropout(0.1), L.Dense(3, activation="softmax")])
    if kind == "func_text":
        a = keras.Input((6,), dtype="int32", name="tok")
        b = keras.Input((3,), name="num")
        e = L.Embedding(20, 4)(a)
        h = L.LSTM(5)(e)
        h2 = L.Bidirectional(L.GRU(2))(e)
        c = L.Concatenate()([h, h2, b])
        return keras.Model([a, b], L.Dense(2, name="head")(c))
    raise ValueError(kind)


def inputs(kind):
    rng = np.random.default_rng(1)
    if kind == "seq_cnn":
        return rng.random((4, 8, 8, 1)).astype("float32")
    return [rng.integers(0, 20, (4, 6)).astype("int32"), rng.random((4, 3)).astype("float32")]


def targets(kind):
    return np.random.default_rng(2).random((4, 3 if kind == "seq_cnn" else 2)).astype("float32")
