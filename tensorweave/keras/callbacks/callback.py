"""``Callback`` (hooks called by fit/evaluate/predict) and ``CallbackList`` (calls them all).

>>> from tensorweave.keras.callbacks import Callback, CallbackList
>>> class Count(Callback):
...     n = 0
...     def on_epoch_end(self, epoch, logs=None):
...         Count.n += 1
>>> cl = CallbackList([Count()])
>>> cl.on_epoch_end(0, {}); Count.n
1
"""


class Callback:
    def __init__(self):
        self.model = None
        self.params = {}

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None): pass
    def on_train_end(self, logs=None): pass
    def on_epoch_begin(self, epoch, logs=None): pass
    def on_epoch_end(self, epoch, logs=None): pass
    def on_train_batch_begin(self, batch, logs=None):
        self.on_batch_begin(batch, logs=logs)

    def on_train_batch_end(self, batch, logs=None):
        self.on_batch_end(batch, logs=logs)
    def on_test_begin(self, logs=None): pass
    def on_test_end(self, logs=None): pass
    def on_test_batch_begin(self, batch, logs=None): pass
    def on_test_batch_end(self, batch, logs=None): pass
    def on_predict_begin(self, logs=None): pass
    def on_predict_end(self, logs=None): pass
    def on_predict_batch_begin(self, batch, logs=None): pass
    def on_predict_batch_end(self, batch, logs=None): pass

    # TF2's names for the training-batch hooks: as in Keras 3, the loops call
    # on_train_batch_*, whose default forwards here, so a callback written with
    # on_batch_end still runs.
    def on_batch_begin(self, batch, logs=None): pass
    def on_batch_end(self, batch, logs=None): pass


_HOOKS = ["on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end", "on_train_batch_begin",
          "on_train_batch_end", "on_test_begin", "on_test_end", "on_test_batch_begin", "on_test_batch_end",
          "on_predict_begin", "on_predict_end", "on_predict_batch_begin", "on_predict_batch_end"]


class CallbackList:
    """A list of callbacks called in order (History first, the progress bar last)."""

    def __init__(self, callbacks=None, add_history=False, add_progbar=False, model=None, verbose=1, epochs=1,
                 steps=None):
        from tensorweave.keras.callbacks.history import History
        from tensorweave.keras.callbacks.progbar_logger import ProgbarLogger
        self.callbacks = list(callbacks or [])
        # Keras 3's order: the user's callbacks, then History, then the progress bar, so
        # History and the bar see what callbacks add to the logs (e.g. learning_rate).
        if add_history and not any(isinstance(c, History) for c in self.callbacks):
            self.callbacks.append(History())
        if add_progbar and not any(isinstance(c, ProgbarLogger) for c in self.callbacks):
            self.callbacks.append(ProgbarLogger())
        self.model = model
        self.params = {"verbose": verbose, "epochs": epochs, "steps": steps}
        if model is not None:
            self.set_model(model)
        self.set_params(self.params)

    def set_model(self, model):
        self.model = model
        for c in self.callbacks:
            c.set_model(model)

    def set_params(self, params):
        self.params = params
        for c in self.callbacks:
            c.set_params(params)

    def append(self, c):
        self.callbacks.append(c)

    def __iter__(self):
        return iter(self.callbacks)

    def _call(self, hook, *args):
        # Every hook gets a logs dict, {} when the loop has none (as Keras passes), so user
        # hooks written as `def on_epoch_begin(self, epoch, logs)` work.
        n = 2 if ("epoch" in hook or "batch" in hook) else 1
        args = args + (None,) * (n - len(args))
        if args[-1] is None:
            args = args[:-1] + ({},)
        for c in self.callbacks:
            getattr(c, hook)(*args)


def _make(hook):
    def method(self, *args):
        self._call(hook, *args)
    method.__name__ = hook
    return method


for _h in _HOOKS:
    setattr(CallbackList, _h, _make(_h))
