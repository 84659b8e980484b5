"""Keras example "Bidirectional LSTM on IMDB" (keras.io/examples/nlp/bidirectional_lstm_imdb/).

Changes from the example: imports; data: rt-polarity sentences (keras_corpus_data, 1,920 train / 480 test,
5,000-word vocabulary, padded to 40) instead of keras.datasets.imdb (20,000 words, 200 long);
epochs 2 -> 2 (unchanged), batch size 32; seeding; summary left out.
"""
import numpy as np
import tensorweave as tf  # noqa: F401
from tensorweave import keras
from tensorweave.keras import layers

from keras_corpus_data import rt_polarity_sequences

TF_REFERENCE = {"val_accuracy": 0.6667}   # TensorFlow 2.21 / Keras 3.15 (losses 0.686, 0.413)
TOLERANCE = 0.05

keras.utils.set_random_seed(0)
max_features = 5000  # Only consider the top 5k words
maxlen = 40  # Only consider the first 40 words of each sentence

# Input for variable-length sequences of integers
inputs = keras.Input(shape=(None,), dtype="int32")
# Embed each integer in a 128-dimensional vector
x = layers.Embedding(max_features, 128)(inputs)
# Add 2 bidirectional LSTMs
x = layers.Bidirectional(layers.LSTM(64, return_sequences=True))(x)
x = layers.Bidirectional(layers.LSTM(64))(x)
# Add a classifier
outputs = layers.Dense(1, activation="sigmoid")(x)
model = keras.Model(inputs, outputs)

(x_train, y_train), (x_val, y_val) = rt_polarity_sequences(num_words=max_features, maxlen=maxlen, n=2400)
x_train = keras.utils.pad_sequences(x_train, maxlen=maxlen)
x_val = keras.utils.pad_sequences(x_val, maxlen=maxlen)

model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=32, epochs=2, validation_data=(x_val, y_val), verbose=0)

RESULT = {"losses": history.history["loss"], "val_accuracy": history.history["val_accuracy"][-1]}
