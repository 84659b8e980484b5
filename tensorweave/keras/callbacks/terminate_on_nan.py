"""``TerminateOnNaN``: stops training as soon as a batch's loss is NaN or infinite.

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.utils.set_random_seed(0)
>>> model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
>>> model.compile(optimizer="sgd", loss="mse")
>>> x = np.ones((8, 3))
>>> x[5, 0] = np.nan  # a bad sample, in batch 2
>>> history = model.fit(x, np.ones((8, 1)), batch_size=2, epochs=5, shuffle=False, verbose=0,
...                     callbacks=[keras.callbacks.TerminateOnNaN()])
Batch 2: Invalid loss, terminating training
>>> len(history.history["loss"])
1
"""
import numpy as np

from tensorweave.keras.callbacks._utils import print_msg
from tensorweave.keras.callbacks.callback import Callback


class TerminateOnNaN(Callback):
    """Sets ``model.stop_training`` when the ``loss`` in a training batch's logs is NaN or
    inf (the epoch then ends, and ``on_train_end`` runs for every callback).

    Args: ``raise_error`` (Keras 3.11+): raise a ``RuntimeError`` instead, so that no
    ``on_train_end`` runs (a ``BackupAndRestore`` backup is then kept).
    """

    def __init__(self, raise_error=False):
        super().__init__()
        self.raise_error = raise_error

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None or np.isfinite(loss):
            return
        if self.raise_error:
            raise RuntimeError(f"NaN or Inf loss encountered at batch {batch}. Loss value: {loss}. "
                               "Terminating training immediately.")
        print_msg(f"Batch {batch}: Invalid loss, terminating training")
        self.model.stop_training = True
