"""``LambdaCallback``: a callback made of plain functions, one per hook.

>>> import numpy as np
>>> from tensorweave import keras
>>> model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
>>> model.compile(optimizer="sgd", loss="mse")
>>> printer = keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs: print("starting", epoch),
...                                          on_train_end=lambda logs: print("done"))
>>> _ = model.fit(np.ones((4, 3)), np.ones((4, 1)), epochs=2, callbacks=[printer], verbose=0)
starting 0
starting 1
done
"""
from tensorweave.keras.callbacks.callback import _HOOKS, Callback

# TF2's names for the training-batch hooks.
_ALIASES = {"on_batch_begin": "on_train_batch_begin", "on_batch_end": "on_train_batch_end"}


class LambdaCallback(Callback):
    """Calls the given functions at the matching moments of fit/evaluate/predict.

    The hooks take the same arguments as the :class:`Callback` methods: ``on_epoch_begin``
    and ``on_epoch_end`` take ``(epoch, logs)``; ``on_train_begin`` and ``on_train_end``
    take ``(logs)``; ``on_train_batch_begin`` and ``on_train_batch_end`` take
    ``(batch, logs)``. Any other hook (``on_test_begin``, ``on_predict_batch_end``, ...,
    and TF2's ``on_batch_begin``/``on_batch_end`` for the training batches) can be passed
    by keyword.
    """

    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_train_begin=None, on_train_end=None,
                 on_train_batch_begin=None, on_train_batch_end=None, **kwargs):
        super().__init__()
        hooks = dict(on_epoch_begin=on_epoch_begin, on_epoch_end=on_epoch_end, on_train_begin=on_train_begin,
                     on_train_end=on_train_end, on_train_batch_begin=on_train_batch_begin,
                     on_train_batch_end=on_train_batch_end)
        for name, fn in kwargs.items():
            target = _ALIASES.get(name, name)
            if target not in _HOOKS:
                raise TypeError(f"LambdaCallback got an unexpected keyword argument '{name}'; the hooks are: "
                                f"{', '.join(_HOOKS + list(_ALIASES))}")
            if hooks.get(target) is not None and fn is not None:
                raise TypeError(f"LambdaCallback got both '{name}' and '{target}', which are the same hook")
            hooks[target] = fn if fn is not None else hooks.get(target)
        for name, fn in hooks.items():
            if fn is not None:
                # An instance attribute shadows the class's no-op method (CallbackList looks
                # hooks up by name).
                setattr(self, name, _with_logs(fn, 2 if ("epoch" in name or "batch" in name) else 1))


def _with_logs(fn, arity):
    """``fn`` called with its full argument list: the loops may leave ``logs`` out, and a
    user's ``lambda epoch, logs: ...`` expects it (an empty dict, as Keras passes)."""
    def hook(*args, logs=None):
        args = list(args)
        if len(args) == arity:
            logs = args.pop()
        return fn(*args, logs if logs is not None else {})
    hook.__wrapped__ = fn
    return hook
