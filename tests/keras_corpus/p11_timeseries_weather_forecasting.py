"""Keras example "Timeseries forecasting for weather prediction"
(keras.io/examples/timeseries/timeseries_weather_forecasting/): features normalised with the
training split's mean and std, windows made by keras.utils.timeseries_dataset_from_array (past
``past`` steps, every ``step``-th one, to predict the target ``future`` steps ahead), an LSTM
regressor trained with MSE, a ModelCheckpoint and EarlyStopping on val_loss.

Changes from the example: imports; data: a synthetic 4-feature hourly series (keras_corpus_data.
sine_weather, 2,000 rows) instead of the Jena climate CSV (420,551 rows, 7 features), hence
past 720 -> 48, future 72 -> 6, step 6 -> 2, batch size 256 -> 64, LSTM(32) -> LSTM(16); epochs
10 -> 4; the checkpoint writes `.weights.h5` into a temporary folder; seeding; plots left out.
"""
import os
import tempfile

import tensorweave as tf  # noqa: F401
from tensorweave import keras

from keras_corpus_data import sine_weather

TF_REFERENCE = {"val_loss": 0.3325}   # TensorFlow 2.21 / Keras 3.15 (losses 1.122, 0.833, 0.597, 0.407)
TOLERANCE = 0.05

keras.utils.set_random_seed(0)
features = sine_weather(n=2000)
split_fraction = 0.715
train_split = int(split_fraction * int(features.shape[0]))
step = 2

past = 48
future = 6
learning_rate = 0.001
batch_size = 64
epochs = 4


def normalize(data, train_split):
    data_mean = data[:train_split].mean(axis=0)
    data_std = data[:train_split].std(axis=0)
    return (data - data_mean) / data_std


features = normalize(features, train_split)
train_data = features[0: train_split - 1]
val_data = features[train_split:]

start = past + future
end = start + train_split

x_train = train_data
y_train = features[start:end][:, [1]]

sequence_length = int(past / step)

dataset_train = keras.utils.timeseries_dataset_from_array(
    x_train,
    y_train,
    sequence_length=sequence_length,
    sampling_rate=step,
    batch_size=batch_size,
)

x_end = len(val_data) - past - future

label_start = train_split + past + future

x_val = val_data[:x_end]
y_val = features[label_start:][:, [1]]

dataset_val = keras.utils.timeseries_dataset_from_array(
    x_val,
    y_val,
    sequence_length=sequence_length,
    sampling_rate=step,
    batch_size=batch_size,
)

for batch in dataset_train.take(1):
    inputs, targets = batch

inputs = keras.layers.Input(shape=(inputs.shape[1], inputs.shape[2]))
lstm_out = keras.layers.LSTM(16)(inputs)
outputs = keras.layers.Dense(1)(lstm_out)

model = keras.Model(inputs=inputs, outputs=outputs)
model.compile(optimizer=keras.optimizers.Adam(learning_rate=learning_rate), loss="mse")

path_checkpoint = os.path.join(tempfile.mkdtemp(), "model_checkpoint.weights.h5")
es_callback = keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=0, patience=5)

modelckpt_callback = keras.callbacks.ModelCheckpoint(
    monitor="val_loss",
    filepath=path_checkpoint,
    verbose=0,
    save_weights_only=True,
    save_best_only=True,
)

history = model.fit(
    dataset_train,
    epochs=epochs,
    validation_data=dataset_val,
    callbacks=[es_callback, modelckpt_callback],
    verbose=0,
)
model.load_weights(path_checkpoint)

RESULT = {"losses": history.history["loss"], "val_loss": min(history.history["val_loss"])}
