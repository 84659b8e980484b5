"""Small models shared by the adversarial tests (built once per process)."""
import os
import shutil
import tempfile

import numpy as np

import tensorweave as tw
import tensorweave.saved_model as sm
from tensorweave import keras

_BASE = {}


def base_dir():
    if "d" not in _BASE:
        _BASE["d"] = tempfile.mkdtemp(prefix="tw-adversarial-")
    return _BASE["d"]


def saved_model(value=2.0, path=None):
    """A SavedModel computing ``x * w + 1.5`` with ``w = value`` (a variable)."""
    w = tw.Variable(np.float32(value), name="w")

    @tw.function(input_signature=[tw.TensorSpec([None], tw.float32, name="x")])
    def f(x):
        return {"y": x * w + 1.5}
    path = path or os.path.join(base_dir(), f"sm-{value}")
    sm.save(f, path)
    return path


def copy_saved_model(tmp_path, name="copy"):
    src = os.path.join(base_dir(), "sm-template")
    if not os.path.exists(src):
        saved_model(2.0, src)
    dst = str(tmp_path / name)
    shutil.copytree(src, dst)
    return dst


def keras_file(tmp_path):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(2)])
    path = str(tmp_path / "m.keras")
    model.save(path)
    return path
