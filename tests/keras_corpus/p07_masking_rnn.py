"""Keras guide "Understanding masking & padding" (keras.io/guides/understanding_masking_and_padding/):
pad_sequences, Embedding(mask_zero=True) feeding an LSTM, a Masking-free functional model, a custom
layer that passes the mask on (supports_masking) and one that consumes it (TemporalSoftmax), then the
trained version of the guide's LSTM model.

Changes from the guide: imports (keras.ops calls written as tf ops: ops.exp -> tf.exp, ops.sum ->
tf.reduce_sum, ops.expand_dims -> tf.expand_dims, ops.cast -> tf.cast); the guide does not train, so
a synthetic task is added (does a padded sequence of token ids contain token 7?), 3 epochs, seeding.
"""
import numpy as np
import tensorweave as tf
from tensorweave import keras
from tensorweave.keras import layers

TF_REFERENCE = {"accuracy": 1.0}   # TensorFlow 2.21 / Keras 3.15 (losses 0.437, 0.0175, 0.0011)
TOLERANCE = 0.05

keras.utils.set_random_seed(0)

raw_inputs = [
    [711, 632, 71],
    [73, 8, 3215, 55, 927],
    [83, 91, 1, 645, 1253, 927],
]
padded_inputs = keras.utils.pad_sequences(raw_inputs, padding="post")
assert padded_inputs.tolist() == [[711, 632, 71, 0, 0, 0], [73, 8, 3215, 55, 927, 0], [83, 91, 1, 645, 1253, 927]]

embedding = layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True)
masked_output = embedding(padded_inputs)
assert np.asarray(masked_output._keras_mask).tolist() == (padded_inputs != 0).tolist()

# Mask propagation in the Functional API and Sequential API
model = keras.Sequential([layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True), layers.LSTM(32)])
inputs = keras.Input(shape=(None,), dtype="int32")
x = layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True)(inputs)
outputs = layers.LSTM(32)(x)
model = keras.Model(inputs, outputs)


class MyLayer(layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.embedding = layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True)
        self.lstm = layers.LSTM(32)

    def call(self, inputs):
        x = self.embedding(inputs)
        # Note that you could also prepare a `mask` tensor manually.
        # It only needs to be a boolean tensor
        # with the right shape, i.e. (batch_size, timesteps).
        mask = self.embedding.compute_mask(inputs)
        output = self.lstm(x, mask=mask)  # The layer will ignore the masked values
        return output


layer = MyLayer()
x = np.random.random((32, 10)) * 100
x = x.astype("int32")
assert tuple(layer(x).shape) == (32, 32)


class MyActivation(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Signal that the layer is safe for mask propagation
        self.supports_masking = True

    def call(self, inputs):
        return tf.nn.relu(inputs)


class TemporalSoftmax(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        assert mask is not None
        broadcast_float_mask = tf.expand_dims(tf.cast(mask, "float32"), -1)
        inputs_exp = tf.exp(inputs) * broadcast_float_mask
        inputs_sum = tf.reduce_sum(inputs_exp * broadcast_float_mask, axis=-1, keepdims=True)
        return inputs_exp / inputs_sum


inputs = keras.Input(shape=(None,), dtype="int32")
x = layers.Embedding(input_dim=10, output_dim=32, mask_zero=True)(inputs)
x = MyActivation()(x)  # Will pass the mask along
x = layers.Dense(1)(x)
outputs = TemporalSoftmax()(x)
model = keras.Model(inputs, outputs)
y = model(np.random.randint(0, 10, size=(32, 100)))

# (corpus) train the guide's Embedding + LSTM model on padded sequences
rng = np.random.default_rng(0)
lengths = rng.integers(3, 16, size=1200)
seqs = [list(rng.integers(1, 50, size=n)) for n in lengths]
labels = np.array([7 in s for s in seqs], np.float32)
padded = keras.utils.pad_sequences(seqs, maxlen=16, padding="post")
inputs = keras.Input(shape=(None,), dtype="int32")
x = layers.Embedding(input_dim=50, output_dim=16, mask_zero=True)(inputs)
x = layers.LSTM(32)(x)
outputs = layers.Dense(1, activation="sigmoid")(x)
model = keras.Model(inputs, outputs)
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy", metrics=["accuracy"])
history = model.fit(padded[:1000], labels[:1000], epochs=3, batch_size=32, verbose=0)
_, accuracy = model.evaluate(padded[1000:], labels[1000:], verbose=0)

RESULT = {"losses": history.history["loss"], "accuracy": float(accuracy)}
