"""Keras guide "Customizing what happens in fit()" (keras.io/guides/custom_train_step_in_tensorflow/):
a CustomModel(inputs, outputs) whose train_step unpacks ``x, y = data``, calls compute_loss and
updates the compiled metrics; then the lower-level variant with its own loss tracker and metrics
property, sample weights, and a custom test_step.

Changes from the guide: imports; epochs 3 -> 5 (first model) and 5 -> 5; seeding; prints left out.
Data: the guide's own random arrays (np.random.random((1000, 32)) / ((1000, 1))).
"""
import numpy as np
import tensorweave as tf
from tensorweave import keras

TF_REFERENCE = {"mae_error": 0.3247, "low_level_mae_error": 0.3723, "test_loss": 0.2429}   # TensorFlow 2.21 / Keras 3.15
TOLERANCE = 0.05

keras.utils.set_random_seed(0)


class CustomModel(keras.Model):
    def train_step(self, data):
        # Unpack the data. Its structure depends on your model and
        # on what you pass to `fit()`.
        x, y = data

        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)  # Forward pass
            # Compute the loss value
            # (the loss function is configured in `compile()`)
            loss = self.compute_loss(y=y, y_pred=y_pred)

        # Compute gradients
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)

        # Update weights
        self.optimizer.apply_gradients(zip(gradients, trainable_vars))

        # Update metrics (includes the metric that tracks the loss)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)

        # Return a dict mapping metric names to current value
        return {m.name: m.result() for m in self.metrics}


# Construct and compile an instance of CustomModel
inputs = keras.Input(shape=(32,))
outputs = keras.layers.Dense(1)(inputs)
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam", loss="mse", metrics=["mae"])

# Just use `fit` as usual
x = np.random.random((1000, 32))
y = np.random.random((1000, 1))
first = model.fit(x, y, epochs=5, verbose=0)


# ---- Going lower-level
class LowLevelModel(keras.Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")
        self.loss_fn = keras.losses.MeanSquaredError()

    def train_step(self, data):
        x, y = data

        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)  # Forward pass
            # Compute our own loss
            loss = self.loss_fn(y, y_pred)

        # Compute gradients
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)

        # Update weights
        self.optimizer.apply_gradients(zip(gradients, trainable_vars))

        # Compute our own metrics
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {
            "loss": self.loss_tracker.result(),
            "mae": self.mae_metric.result(),
        }

    @property
    def metrics(self):
        # We list our `Metric` objects here so that `reset_states()` can be
        # called automatically at the start of each epoch
        # or at the start of `evaluate()`.
        return [self.loss_tracker, self.mae_metric]


inputs = keras.Input(shape=(32,))
outputs = keras.layers.Dense(1)(inputs)
model = LowLevelModel(inputs, outputs)

# We don't pass a loss or metrics here.
model.compile(optimizer="adam")
low = model.fit(x, y, epochs=5, verbose=0)


# ---- Providing your own evaluation step
class EvalModel(keras.Model):
    def test_step(self, data):
        # Unpack the data
        x, y = data
        # Compute predictions
        y_pred = self(x, training=False)
        # Updates the metrics tracking the loss
        loss = self.compute_loss(y=y, y_pred=y_pred)
        # Update the metrics.
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        # Return a dict mapping metric names to current value.
        # Note that it will include the loss (tracked in self.metrics).
        return {m.name: m.result() for m in self.metrics}


inputs = keras.Input(shape=(32,))
outputs = keras.layers.Dense(1)(inputs)
model = EvalModel(inputs, outputs)
model.compile(loss="mse", metrics=["mae"])
model.fit(x, y, epochs=2, verbose=0)
scores = model.evaluate(x, y, return_dict=True, verbose=0)

RESULT = {"losses": first.history["loss"], "mae_error": first.history["mae"][-1], "low_level_mae_error": low.history["mae"][-1],
          "test_loss": scores["loss"]}
