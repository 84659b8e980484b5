"""Keras guide "The Functional API" (keras.io/guides/functional_api/): the MNIST MLP, then the
multi-input, multi-output ticket model with dict losses and loss weights.

Changes from the guide: imports (``import tensorweave as tf`` / ``from tensorweave import keras``);
MNIST from keras_corpus_data (2,000 train / 1,000 test images of the MNIST test set, instead of
keras.datasets.mnist); epochs 2 -> 3; ticket data 1280 -> 256 samples, body length 100 -> 20;
seeding (keras.utils.set_random_seed(0)); the summaries and prints left out; RESULT collects the numbers.
"""
import numpy as np
import tensorweave as tf  # noqa: F401
from tensorweave import keras
from tensorweave.keras import layers

from keras_corpus_data import mnist

TF_REFERENCE = {"test_accuracy": 0.789, "ticket_loss_last": 1.2691}   # TensorFlow 2.21 / Keras 3.15 (run_with_tf.py)
TOLERANCE = 0.05

keras.utils.set_random_seed(0)
inputs = keras.Input(shape=(784,))
x = layers.Dense(64, activation="relu")(inputs)
x = layers.Dense(64, activation="relu")(x)
outputs = layers.Dense(10)(x)
model = keras.Model(inputs=inputs, outputs=outputs, name="mnist_model")

(x_train, y_train), (x_test, y_test) = mnist()
x_train = x_train.reshape(len(x_train), 784).astype("float32") / 255
x_test = x_test.reshape(len(x_test), 784).astype("float32") / 255

model.compile(
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=keras.optimizers.RMSprop(),
    metrics=["accuracy"],
)
history = model.fit(x_train, y_train, batch_size=64, epochs=3, validation_split=0.2, verbose=0)
test_scores = model.evaluate(x_test, y_test, verbose=0)

# ---- "Manipulate complex graph topologies": models with multiple inputs and outputs
num_tags = 12  # Number of unique issue tags
num_words = 10000  # Size of vocabulary obtained when preprocessing text data
num_departments = 4  # Number of departments for predictions

title_input = keras.Input(shape=(None,), name="title")  # Variable-length sequence of ints
body_input = keras.Input(shape=(None,), name="body")  # Variable-length sequence of ints
tags_input = keras.Input(shape=(num_tags,), name="tags")  # Binary vectors of size `num_tags`

title_features = layers.Embedding(num_words, 64)(title_input)
body_features = layers.Embedding(num_words, 64)(body_input)
title_features = layers.LSTM(128)(title_features)
body_features = layers.LSTM(32)(body_features)
x = layers.concatenate([title_features, body_features, tags_input])
priority_pred = layers.Dense(1, name="priority")(x)
department_pred = layers.Dense(num_departments, name="department")(x)

model = keras.Model(
    inputs=[title_input, body_input, tags_input],
    outputs={"priority": priority_pred, "department": department_pred},
)
model.compile(
    optimizer=keras.optimizers.RMSprop(1e-3),
    loss={
        "priority": keras.losses.BinaryCrossentropy(from_logits=True),
        "department": keras.losses.CategoricalCrossentropy(from_logits=True),
    },
    loss_weights={"priority": 1.0, "department": 0.2},
)
title_data = np.random.randint(num_words, size=(256, 10))
body_data = np.random.randint(num_words, size=(256, 20))
tags_data = np.random.randint(2, size=(256, num_tags)).astype("float32")
priority_targets = np.random.random(size=(256, 1))
dept_targets = np.random.randint(2, size=(256, num_departments))
ticket = model.fit(
    {"title": title_data, "body": body_data, "tags": tags_data},
    {"priority": priority_targets, "department": dept_targets},
    epochs=2,
    batch_size=32,
    verbose=0,
)

RESULT = {"losses": history.history["loss"], "test_accuracy": float(test_scores[1]),
          "ticket_loss_first": ticket.history["loss"][0], "ticket_loss_last": ticket.history["loss"][-1]}
