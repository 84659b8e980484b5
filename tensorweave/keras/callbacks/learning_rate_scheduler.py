"""``LearningRateScheduler``: sets the learning rate at the start of each epoch from a function.

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.utils.set_random_seed(0)
>>> model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
>>> model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
>>> def schedule(epoch, lr):
...     return lr if epoch < 2 else lr * 0.5
>>> seen = []
>>> record = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(logs["learning_rate"]))
>>> _ = model.fit(np.ones((8, 3)), np.ones((8, 1)), epochs=4, verbose=0,
...               callbacks=[keras.callbacks.LearningRateScheduler(schedule), record])
>>> [round(lr, 4) for lr in seen]
[0.1, 0.1, 0.05, 0.025]
"""
import inspect
import numbers

import numpy as np

from tensorweave.keras.callbacks._utils import check_settable, get_learning_rate, print_msg, set_learning_rate
from tensorweave.keras.callbacks.callback import Callback


def _takes_lr(fn):
    """Whether ``fn`` accepts (epoch, lr), the Keras 2+ form, rather than the old (epoch)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


class LearningRateScheduler(Callback):
    """At each epoch start sets the rate to ``schedule(epoch, lr)`` (epoch 0-based, ``lr`` the
    current rate); a ``schedule(epoch)`` of one argument works too.

    Args (Keras 3): ``schedule``; ``verbose`` (1 prints "Epoch N: LearningRateScheduler
    setting learning rate to X."). The rate in use is added to each epoch's logs as
    ``learning_rate``.
    """

    def __init__(self, schedule, verbose=0):
        super().__init__()
        self.schedule = schedule
        self.verbose = verbose

    def on_train_begin(self, logs=None):
        check_settable(self.model, "LearningRateScheduler")

    def on_epoch_begin(self, epoch, logs=None):
        if _takes_lr(self.schedule):
            lr = self.schedule(epoch, get_learning_rate(self.model, "LearningRateScheduler"))
        else:
            lr = self.schedule(epoch)
        if isinstance(lr, np.ndarray) and lr.ndim == 0:
            lr = lr[()]
        if not isinstance(lr, numbers.Real) or isinstance(lr, bool):
            raise ValueError(f"The output of the `schedule` function should be a float. Got: {lr}")
        set_learning_rate(self.model, float(lr), "LearningRateScheduler")
        if self.verbose > 0:
            print_msg(f"\nEpoch {epoch + 1}: LearningRateScheduler setting learning rate to {lr}.")

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = get_learning_rate(self.model, "LearningRateScheduler")
