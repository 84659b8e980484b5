"""Keras example "Simple MNIST convnet" (keras.io/examples/vision/mnist_convnet/).

Changes from the example: imports; MNIST from keras_corpus_data (2,000 train / 1,000 test images of the
MNIST test set) instead of keras.datasets.mnist; epochs 15 -> 3; seeding; prints and summary left out.
"""
import numpy as np
import tensorweave as tf  # noqa: F401
from tensorweave import keras
from tensorweave.keras import layers

from keras_corpus_data import mnist

TF_REFERENCE = {"test_accuracy": 0.766}   # TensorFlow 2.21 / Keras 3.15 (losses 2.150, 1.548, 0.916)
TOLERANCE = 0.05

keras.utils.set_random_seed(0)

# Model / data parameters
num_classes = 10
input_shape = (28, 28, 1)

# Load the data and split it between train and test sets
(x_train, y_train), (x_test, y_test) = mnist()

# Scale images to the [0, 1] range
x_train = x_train.astype("float32") / 255
x_test = x_test.astype("float32") / 255
# Make sure images have shape (28, 28, 1)
x_train = np.expand_dims(x_train, -1)
x_test = np.expand_dims(x_test, -1)

# convert class vectors to binary class matrices
y_train = keras.utils.to_categorical(y_train, num_classes)
y_test = keras.utils.to_categorical(y_test, num_classes)

model = keras.Sequential(
    [
        keras.Input(shape=input_shape),
        layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(num_classes, activation="softmax"),
    ]
)

batch_size = 128
epochs = 3

model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])

history = model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.1, verbose=0)

score = model.evaluate(x_test, y_test, verbose=0)

RESULT = {"losses": history.history["loss"], "test_accuracy": float(score[1])}
