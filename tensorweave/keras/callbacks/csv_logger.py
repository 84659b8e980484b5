"""``CSVLogger``: streams each epoch's logs to a CSV file.

>>> import os, tempfile
>>> import numpy as np
>>> from tensorweave import keras
>>> keras.utils.set_random_seed(0)
>>> model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
>>> model.compile(optimizer="sgd", loss="mse")
>>> path = os.path.join(tempfile.mkdtemp(), "training.log")
>>> _ = model.fit(np.ones((8, 3)), np.ones((8, 1)), epochs=2, callbacks=[keras.callbacks.CSVLogger(path)],
...               verbose=0)
>>> [line.split(",")[0] for line in open(path).read().splitlines()]
['epoch', '0', '1']
"""
import collections.abc
import csv
import os

import numpy as np

from tensorweave.keras.callbacks.callback import Callback


def _cell(value):
    # Keras' rendering: strings as they are, 1-D iterables as a quoted "[a, b]", numbers by csv.
    if isinstance(value, str):
        return value
    if isinstance(value, collections.abc.Iterable) and not (isinstance(value, np.ndarray) and value.ndim == 0):
        return f'"[{", ".join(map(str, value))}]"'
    return value


class CSVLogger(Callback):
    """Writes one row per epoch: ``epoch`` (0-based), then the logged values in sorted key order.

    Args (Keras 3): ``filename``; ``separator`` (default ","); ``append`` (True: continue an
    existing file, writing the header only if it is empty; False: overwrite).

    The columns are fixed by the first epoch's logs; a key missing from a later epoch's logs
    is written as "NA".
    """

    def __init__(self, filename, separator=",", append=False):
        super().__init__()
        self.sep = separator
        self.filename = os.fspath(filename)
        self.append = append
        self.writer = None
        self.keys = None
        self.append_header = True
        self.csv_file = None

    def on_train_begin(self, logs=None):
        mode = "w"
        if self.append:
            if os.path.exists(self.filename):
                with open(self.filename, "r", newline="") as f:
                    self.append_header = not f.readline()
            mode = "a"
        if self.csv_file is not None and not self.csv_file.closed:
            self.csv_file.close()
        # newline="" lets the csv module choose the line endings (it writes "\r\n" by default,
        # as Keras' files have).
        self.csv_file = open(self.filename, mode, newline="")
        self.writer = None
        self.keys = None

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self.keys is None:
            self.keys = sorted(logs)
            for name in getattr(self.model, "metrics_names", None) or []:
                if name.startswith("val_") and name not in self.keys:
                    self.keys.append(name)
        if self.writer is None:
            sep = self.sep

            class _Dialect(csv.excel):
                delimiter = sep
            self.writer = csv.DictWriter(self.csv_file, fieldnames=["epoch"] + self.keys, dialect=_Dialect)
            if self.append_header:
                self.writer.writeheader()
        row = {"epoch": epoch}
        row.update((key, _cell(logs.get(key, "NA"))) for key in self.keys)
        self.writer.writerow(row)
        self.csv_file.flush()

    def on_train_end(self, logs=None):
        if self.csv_file is not None and not self.csv_file.closed:
            self.csv_file.close()
        self.writer = None
