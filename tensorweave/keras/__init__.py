"""Keras-style API (``tw.keras``): layers, models, losses, metrics, optimizers, callbacks.

>>> import numpy as np
>>> from tensorweave import keras
>>> model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(2, activation="softmax")])
>>> model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
>>> model.predict(np.zeros((3, 4)), verbose=0).shape
(3, 2)
"""
from tensorweave.keras import (activations, applications, backend, callbacks, datasets, distribution,  # noqa: F401,E501
                               initializers, layers, losses, metrics, models, ops, optimizers, regularizers,
                               utils)
from tensorweave.keras import random  # noqa: F401,E402 - keras.random (SeedGenerator and draws)
from tensorweave.keras.engine.input_layer import Input  # noqa: F401
from tensorweave.keras.engine.layer import Layer  # noqa: F401
from tensorweave.keras.engine.model import Model  # noqa: F401
from tensorweave.keras.engine.sequential import Sequential  # noqa: F401
from tensorweave.keras.engine import op_dispatch as _op_dispatch

_op_dispatch.install()   # tw ops on KerasTensors become layers, as in tf.keras
