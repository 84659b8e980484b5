"""``Model.predict`` of one in-memory batch with nothing to report (issue 18, pred22): the array goes
to the predict function as it is, without the data handler and the callback list, and gives the
bits of the batched loop."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.keras.engine import data_adapter


def _model():
    keras = tw.keras
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])
    model.compile(optimizer="adam", loss="mse")
    return model


class _Counting(tw.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches = 0

    def on_predict_batch_end(self, batch, logs=None):
        self.batches += 1


@pytest.mark.parametrize("rows,dtype", [(1, np.float32), (32, np.float32), (5, np.float64)])
def test_one_quiet_batch_skips_the_data_handler_and_gives_the_loops_bits(monkeypatch, rows, dtype):
    model = _model()
    x = np.random.default_rng(rows).standard_normal((rows, 12)).astype(dtype)
    counting = _Counting()
    looped = model.predict(x, verbose=0, callbacks=[counting])           # a callback: the batched loop
    assert counting.batches == 1

    def no_handler(*args, **kwargs):
        raise AssertionError("the data handler was built")
    monkeypatch.setattr(data_adapter, "DataHandler", no_handler)
    direct = model.predict(x, verbose=0)
    assert direct.dtype == np.float32 and direct.shape == (rows, 3)
    np.testing.assert_array_equal(direct, looped)
    np.testing.assert_array_equal(direct, model.predict_on_batch(x.astype(np.float32)))


@pytest.mark.parametrize("kwargs,rows", [
    ({"verbose": 0}, 33),                       # more than one batch (32 by default)
    ({"verbose": 0, "batch_size": 4}, 5),       # more than one batch of the given size
    ({"verbose": 1}, 1),                        # a progress bar to show
    ({"verbose": "auto"}, 1),
    ({"verbose": 0, "steps": 1}, 1),
    ({"verbose": 0, "callbacks": [_Counting()]}, 1),
])
def test_anything_else_goes_through_the_data_handler(monkeypatch, kwargs, rows):
    model = _model()
    x = np.ones((rows, 12), np.float32)
    expected = model.predict(x, **kwargs)
    built = []
    real = data_adapter.DataHandler
    monkeypatch.setattr(data_adapter, "DataHandler", lambda *args, **kw: (built.append(1), real(*args, **kw))[1])
    np.testing.assert_array_equal(model.predict(x, **kwargs), expected)
    assert built == [1]


def test_a_bad_batch_size_is_refused_before_any_path():
    with pytest.raises(ValueError, match="batch_size"):
        _model().predict(np.ones((1, 12), np.float32), verbose=0, batch_size=0)
