"""Keras guide "Writing your own callbacks" (keras.io/guides/writing_your_own_callbacks/): a
callback logging every hook, LossAndErrorPrintingCallback, EarlyStoppingAtMinLoss (get/set_weights,
stop_training) and a CustomLearningRateScheduler that sets ``model.optimizer.learning_rate``.

Changes from the guide: imports; MNIST from keras_corpus_data (1,000 train / 1,000 test images) instead of
keras.datasets.mnist (the guide also keeps 1,000); the prints are collected in lists instead; seeding;
epochs 30 -> 8 and 15 -> 8.
"""
import numpy as np
import tensorweave as tf  # noqa: F401
from tensorweave import keras

from keras_corpus_data import mnist

TF_REFERENCE = {"mean_absolute_error": 1.3557}   # TensorFlow 2.21 / Keras 3.15 (early stop after 4 epochs)
TOLERANCE = 0.1

keras.utils.set_random_seed(0)


# Define the Keras model to add callbacks to
def get_model():
    model = keras.Sequential()
    model.add(keras.layers.Dense(1))
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=0.1),
        loss="mean_squared_error",
        metrics=["mean_absolute_error"],
    )
    return model


# Load example MNIST data and pre-process it
(x_train, y_train), (x_test, y_test) = mnist(1000, 1000)
x_train = x_train.reshape(-1, 784).astype("float32") / 255.0
x_test = x_test.reshape(-1, 784).astype("float32") / 255.0

hooks = []


class CustomCallback(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        hooks.append(("train_begin", sorted(logs or {})))

    def on_epoch_end(self, epoch, logs=None):
        hooks.append(("epoch_end", sorted(logs)))

    def on_test_batch_end(self, batch, logs=None):
        hooks.append(("test_batch_end", sorted(logs)))

    def on_predict_batch_end(self, batch, logs=None):
        hooks.append(("predict_batch_end", sorted(logs)))


model = get_model()
model.fit(x_train, y_train, batch_size=128, epochs=1, verbose=0, validation_split=0.5,
          callbacks=[CustomCallback()])
res = model.evaluate(x_test, y_test, batch_size=128, verbose=0, callbacks=[CustomCallback()])
res = model.predict(x_test, batch_size=128, callbacks=[CustomCallback()], verbose=0)
assert ("epoch_end", ["loss", "mean_absolute_error", "val_loss", "val_mean_absolute_error"]) in hooks

printed = []


class LossAndErrorPrintingCallback(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        printed.append(("batch", batch, logs["loss"]))

    def on_epoch_end(self, epoch, logs=None):
        printed.append(("epoch", epoch, logs["loss"], logs["mean_absolute_error"]))


class EarlyStoppingAtMinLoss(keras.callbacks.Callback):
    """Stop training when the loss is at its min, i.e. the loss stops decreasing."""

    def __init__(self, patience=0):
        super().__init__()
        self.patience = patience
        # best_weights to store the weights at which the minimum loss occurs.
        self.best_weights = None

    def on_train_begin(self, logs=None):
        # The number of epoch it has waited when loss is no longer minimum.
        self.wait = 0
        # The epoch the training stops at.
        self.stopped_epoch = 0
        # Initialize the best as infinity.
        self.best = np.inf

    def on_epoch_end(self, epoch, logs=None):
        current = logs.get("loss")
        if np.less(current, self.best):
            self.best = current
            self.wait = 0
            # Record the best weights if current results is better (less).
            self.best_weights = self.model.get_weights()
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.stopped_epoch = epoch
                self.model.stop_training = True
                self.model.set_weights(self.best_weights)


model = get_model()
history = model.fit(x_train, y_train, batch_size=64, epochs=8, verbose=0,
                    callbacks=[LossAndErrorPrintingCallback(), EarlyStoppingAtMinLoss()])


class CustomLearningRateScheduler(keras.callbacks.Callback):
    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def on_epoch_begin(self, epoch, logs=None):
        if not hasattr(self.model.optimizer, "learning_rate"):
            raise ValueError('Optimizer must have a "learning_rate" attribute.')
        # Get the current learning rate from model's optimizer.
        lr = self.model.optimizer.learning_rate
        # Call schedule function to get the scheduled learning rate.
        scheduled_lr = self.schedule(epoch, lr)
        # Set the value back to the optimizer before this epoch starts
        self.model.optimizer.learning_rate = scheduled_lr


LR_SCHEDULE = [
    # (epoch to start, learning rate) tuples
    (3, 0.05),
    (6, 0.01),
    (9, 0.005),
    (12, 0.001),
]


def lr_schedule(epoch, lr):
    """Helper function to retrieve the scheduled learning rate based on epoch."""
    if epoch < LR_SCHEDULE[0][0] or epoch > LR_SCHEDULE[-1][0]:
        return lr
    for i in range(len(LR_SCHEDULE)):
        if epoch == LR_SCHEDULE[i][0]:
            return LR_SCHEDULE[i][1]
    return lr


model = get_model()
scheduled = model.fit(x_train, y_train, batch_size=64, epochs=8, verbose=0,
                      callbacks=[LossAndErrorPrintingCallback(), CustomLearningRateScheduler(lr_schedule)])
assert abs(float(np.asarray(model.optimizer.learning_rate)) - 0.01) < 1e-6

RESULT = {"losses": scheduled.history["loss"], "mean_absolute_error": scheduled.history["mean_absolute_error"][-1],
          "early_stopped_epochs": len(history.history["loss"])}
