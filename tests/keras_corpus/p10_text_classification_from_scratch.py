"""Keras example "Text classification from scratch" (keras.io/examples/nlp/text_classification_from_scratch/):
raw strings -> TextVectorization adapted on the text of a tf.data pipeline -> Embedding, two strided
Conv1D, GlobalMaxPooling1D, Dense -> a sentiment probability, trained on tf.data datasets.

Changes from the example: imports; data: rt-polarity sentences (keras_corpus_data, 4,000 sentences,
3,200 train / 800 val, as tf.data from_tensor_slices) instead of the IMDB folders through
text_dataset_from_directory; max_features 20,000 -> 5,000, sequence_length 500 -> 40,
embedding_dim 128 -> 64, Conv1D filters 128 -> 64; epochs 3 -> 4; the custom
standardisation (HTML tags) left at TextVectorization's default; seeding; the end-to-end export
model and test evaluation left out.
"""
import tensorweave as tf
from tensorweave import keras
from tensorweave.keras import layers

from keras_corpus_data import rt_polarity_texts

TF_REFERENCE = {"val_accuracy": 0.6725}   # TensorFlow 2.21 / Keras 3.15 (losses 0.694, 0.692, 0.608, 0.274)
TOLERANCE = 0.05

keras.utils.set_random_seed(0)
batch_size = 32
(train_text, train_labels), (val_text, val_labels) = rt_polarity_texts(n=4000)
raw_train_ds = tf.data.Dataset.from_tensor_slices((train_text, train_labels)).batch(batch_size)
raw_val_ds = tf.data.Dataset.from_tensor_slices((val_text, val_labels)).batch(batch_size)

# Model constants.
max_features = 5000
embedding_dim = 64
sequence_length = 40

# Now that we have our custom standardization, we can instantiate our text
# vectorization layer. We are using this layer to normalize, split, and map
# strings to integers, so we set our 'output_mode' to 'int'.
vectorize_layer = layers.TextVectorization(
    max_tokens=max_features,
    output_mode="int",
    output_sequence_length=sequence_length,
)

# Now that the vectorize_layer has been created, call `adapt` on a text-only
# dataset to create the vocabulary.
text_ds = raw_train_ds.map(lambda x, y: x)
# Let's call `adapt`:
vectorize_layer.adapt(text_ds)


def vectorize_text(text, label):
    text = tf.expand_dims(text, -1)
    return vectorize_layer(text), label


# Vectorize the data.
train_ds = raw_train_ds.map(vectorize_text)
val_ds = raw_val_ds.map(vectorize_text)

# A integer input for vocab indices.
inputs = keras.Input(shape=(None,), dtype="int64")

# Next, we add a layer to map those vocab indices into a space of dimensionality
# 'embedding_dim'.
x = layers.Embedding(max_features, embedding_dim)(inputs)
x = layers.Dropout(0.5)(x)

# Conv1D + global max pooling
x = layers.Conv1D(64, 7, padding="valid", activation="relu", strides=3)(x)
x = layers.Conv1D(64, 7, padding="valid", activation="relu", strides=3)(x)
x = layers.GlobalMaxPooling1D()(x)

# We add a vanilla hidden layer:
x = layers.Dense(64, activation="relu")(x)
x = layers.Dropout(0.5)(x)

# We project onto a single unit output layer, and squash it with a sigmoid:
predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)

model = keras.Model(inputs, predictions)

# Compile the model with binary crossentropy loss and an adam optimizer.
model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])

epochs = 4

# Fit the model using the train and test datasets.
history = model.fit(train_ds, validation_data=val_ds, epochs=epochs, verbose=0)

RESULT = {"losses": history.history["loss"], "val_accuracy": history.history["val_accuracy"][-1]}
