"""``ProgbarLogger``: the progress output of fit/evaluate/predict (Keras' format)."""
import sys

from tensorweave.keras.callbacks.callback import Callback
from tensorweave.keras.utils.progbar import Progbar


class ProgbarLogger(Callback):
    def __init__(self, stream=None):
        super().__init__()
        self.stream = stream
        self.progbar = None
        self.seen = 0
        self.target = None
        self._train = False

    def set_params(self, params):
        super().set_params(params)
        self.verbose = params.get("verbose", 1)
        self.epochs = params.get("epochs", 1)
        self.target = params.get("steps")

    def _new_bar(self):
        self.seen = 0
        self.progbar = Progbar(self.target, verbose=self.verbose, unit_name="step",
                               stream=self.stream if self.stream is not None else sys.stdout)

    def on_train_begin(self, logs=None):
        self._train = True

    def on_train_end(self, logs=None):
        self._train = False

    def on_epoch_begin(self, epoch, logs=None):
        self._new_bar()
        if self.verbose and self.epochs > 1:
            out = self.stream if self.stream is not None else sys.stdout
            out.write(f"Epoch {epoch + 1}/{self.epochs}\n")
            out.flush()

    def on_train_batch_end(self, batch, logs=None):
        self._update(batch, logs)

    def on_test_begin(self, logs=None):
        if not self._train:
            self._new_bar()

    def on_test_batch_end(self, batch, logs=None):
        if not self._train:
            self._update(batch, logs)

    def on_test_end(self, logs=None):
        if not self._train:
            self._finalize(logs)

    def on_predict_begin(self, logs=None):
        self._new_bar()

    def on_predict_batch_end(self, batch, logs=None):
        self._update(batch, None)

    def on_predict_end(self, logs=None):
        self._finalize(None)

    def on_epoch_end(self, epoch, logs=None):
        self._finalize(logs)

    def _update(self, batch, logs):
        self.seen = batch + 1
        if self.verbose == 1:
            self.progbar.update(self.seen, sorted((logs or {}).items()), finalize=False)

    def _finalize(self, logs):
        if self.progbar is None or not self.verbose:
            return
        if self.target is None:
            self.target = self.seen
            self.progbar.target = self.seen
        self.progbar.update(self.target, sorted((logs or {}).items()), finalize=True)
