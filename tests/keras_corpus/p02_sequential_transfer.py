"""Keras guides "The Sequential model" (keras.io/guides/sequential_model/) and "Transfer learning
& fine-tuning" (keras.io/guides/transfer_learning/): a Sequential convnet built with add(), feature
extraction through ``layer.output``, then the freeze / train the head / unfreeze / fine-tune recipe
with a base model called in inference mode (``training=False``).

Changes from the guides: imports; data: MNIST from keras_corpus_data (2,000 / 1,000 images) instead of
random images and cats-vs-dogs; the base model is a Sequential MLP with BatchNormalization
(no keras.applications download), pre-trained here for three epochs on digits 0-4 with a Dense head that
pop() removes, and transferred to digits 5-9; epochs 20 -> 3 (head) and 10 -> 1 (fine-tuning);
seeding; prints left out.
"""
import numpy as np
import tensorweave as tf  # noqa: F401
from tensorweave import keras
from tensorweave.keras import layers

from keras_corpus_data import mnist

TF_REFERENCE = {"fine_tuned_accuracy": 0.8025}   # TensorFlow 2.21 / Keras 3.15 (head_accuracy 0.3416, not checked: BN statistics barely moved)
TOLERANCE = 0.05

keras.utils.set_random_seed(0)
(x_train, y_train), (x_test, y_test) = mnist()
x_train = x_train.reshape(-1, 784).astype("float32") / 255
x_test = x_test.reshape(-1, 784).astype("float32") / 255

# "The Sequential model": incremental building with add() and feature extraction
model = keras.Sequential()
model.add(keras.Input(shape=(784,)))
model.add(layers.Dense(128, activation="relu"))
model.add(layers.BatchNormalization())
model.add(layers.Dense(64, activation="relu"))
# (corpus) pre-train the base on digits 0-4, as ImageNet weights would be
model.add(layers.Dense(10))
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
low = y_train < 5
model.fit(x_train[low], y_train[low], epochs=3, batch_size=64, verbose=0)
model.pop()
high, high_test = y_train >= 5, y_test >= 5
x_train, y_train, x_test, y_test = x_train[high], y_train[high] - 5, x_test[high_test], y_test[high_test] - 5

feature_extractor = keras.Model(
    inputs=model.inputs,
    outputs=[layer.output for layer in model.layers],
)
features = feature_extractor(x_train[:4])
assert len(features) == 3 and tuple(features[-1].shape) == (4, 64)

# "Transfer learning & fine-tuning": the typical workflow
base_model = model
base_model.trainable = False
inputs = keras.Input(shape=(784,))
# We make sure that the base_model is running in inference mode here,
# by passing `training=False`. This is important for fine-tuning, as you will
# learn in a few paragraphs.
x = base_model(inputs, training=False)
x = keras.layers.Dropout(0.2)(x)  # Regularize with dropout
outputs = keras.layers.Dense(5)(x)
model = keras.Model(inputs, outputs)
assert len(model.trainable_weights) == 2 and len(model.non_trainable_weights) == 8

model.compile(
    optimizer=keras.optimizers.Adam(),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=[keras.metrics.SparseCategoricalAccuracy()],
)
head = model.fit(x_train, y_train, epochs=3, batch_size=64, verbose=0)
head_accuracy = model.evaluate(x_test, y_test, verbose=0)[1]

# Unfreeze the base model
base_model.trainable = True
# It's important to recompile your model after you make any changes
# to the `trainable` attribute of any inner layer, so that your changes
# are take into account
model.compile(
    optimizer=keras.optimizers.Adam(1e-3),  # Low learning rate
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=[keras.metrics.SparseCategoricalAccuracy()],
)
tuned = model.fit(x_train, y_train, epochs=1, batch_size=64, verbose=0)
fine_tuned_accuracy = model.evaluate(x_test, y_test, verbose=0)[1]

RESULT = {"losses": head.history["loss"] + tuned.history["loss"], "head_accuracy": float(head_accuracy),
          "fine_tuned_accuracy": float(fine_tuned_accuracy)}
