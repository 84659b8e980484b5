"""Keras guide "Writing a training loop from scratch" (keras.io/guides/writing_a_training_loop_from_scratch/):
a GradientTape loop over a tf.data Dataset with a compiled (tf.function) train step, metrics
updated by hand, a validation loop, and add_loss inside a layer.

Changes from the guide: imports; MNIST from keras_corpus_data (2,000 / 1,000 images) instead of
keras.datasets.mnist; epochs 3 -> 3 (unchanged), the 10,000-sample validation cut -> 500;
seeding; prints left out.
"""
import numpy as np
import tensorweave as tf
from tensorweave import keras

from keras_corpus_data import mnist

TF_REFERENCE = {"val_accuracy": 0.832}   # TensorFlow 2.21 / Keras 3.15 (losses 1.945, 1.034, 0.595)
TOLERANCE = 0.05

keras.utils.set_random_seed(0)


def get_model():
    inputs = keras.Input(shape=(784,), name="digits")
    x1 = keras.layers.Dense(64, activation="relu")(inputs)
    x2 = keras.layers.Dense(64, activation="relu")(x1)
    outputs = keras.layers.Dense(10, name="predictions")(x2)
    model = keras.Model(inputs=inputs, outputs=outputs)
    return model


# Get a fresh model
model = get_model()

# Instantiate an optimizer to train the model.
optimizer = keras.optimizers.Adam(learning_rate=1e-3)
# Instantiate a loss function.
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

# Prepare the metrics.
train_acc_metric = keras.metrics.SparseCategoricalAccuracy()
val_acc_metric = keras.metrics.SparseCategoricalAccuracy()

# Prepare the training dataset.
batch_size = 64
(x_train, y_train), (x_test, y_test) = mnist()
x_train = np.reshape(x_train, (-1, 784)).astype("float32") / 255
x_test = np.reshape(x_test, (-1, 784)).astype("float32") / 255
y_train = y_train.astype("int64")
y_test = y_test.astype("int64")

# Reserve 500 samples for validation.
x_val = x_train[-500:]
y_val = y_train[-500:]
x_train = x_train[:-500]
y_train = y_train[:-500]

# Prepare the training dataset.
train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
train_dataset = train_dataset.shuffle(buffer_size=1024).batch(batch_size)

# Prepare the validation dataset.
val_dataset = tf.data.Dataset.from_tensor_slices((x_val, y_val))
val_dataset = val_dataset.batch(batch_size)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss_value = loss_fn(y, logits)
    grads = tape.gradient(loss_value, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    train_acc_metric.update_state(y, logits)
    return loss_value


@tf.function
def test_step(x, y):
    val_logits = model(x, training=False)
    val_acc_metric.update_state(y, val_logits)


losses = []
epochs = 3
for epoch in range(epochs):
    epoch_losses = []
    # Iterate over the batches of the dataset.
    for step, (x_batch_train, y_batch_train) in enumerate(train_dataset):
        loss_value = train_step(x_batch_train, y_batch_train)
        epoch_losses.append(float(loss_value))
    losses.append(float(np.mean(epoch_losses)))

    # Display metrics at the end of each epoch.
    train_acc = train_acc_metric.result()
    # Reset training metrics at the end of each epoch
    train_acc_metric.reset_state()

    # Run a validation loop at the end of each epoch.
    for x_batch_val, y_batch_val in val_dataset:
        test_step(x_batch_val, y_batch_val)

    val_acc = val_acc_metric.result()
    val_acc_metric.reset_state()


# ---- Low-level handling of losses tracked by the model
class ActivityRegularizationLayer(keras.layers.Layer):
    def call(self, inputs):
        self.add_loss(1e-2 * tf.reduce_sum(inputs))
        return inputs


inputs = keras.Input(shape=(784,), name="digits")
x = keras.layers.Dense(64, activation="relu")(inputs)
# Insert activity regularization as a layer
x = ActivityRegularizationLayer()(x)
x = keras.layers.Dense(64, activation="relu")(x)
outputs = keras.layers.Dense(10, name="predictions")(x)
model = keras.Model(inputs=inputs, outputs=outputs)


@tf.function
def train_step_with_reg(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss_value = loss_fn(y, logits)
        # Add any extra losses created during the forward pass.
        loss_value += sum(model.losses)
    grads = tape.gradient(loss_value, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    train_acc_metric.update_state(y, logits)
    return loss_value


optimizer = keras.optimizers.Adam(learning_rate=1e-3)
reg_losses = [float(train_step_with_reg(xb, yb)) for xb, yb in train_dataset]

RESULT = {"losses": losses, "val_accuracy": float(val_acc), "reg_loss_first": reg_losses[0],
          "reg_loss_last": reg_losses[-1]}
