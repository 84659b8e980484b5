"""``tw.saved_model``: save a model's functions as graphs and load them without its Python code.

>>> import os, tempfile, numpy as np, tensorweave as tw
>>> import tensorweave.saved_model
>>> @tw.function(input_signature=[tw.TensorSpec([None, 2], tw.float32, name="x")])
... def double(x):
...     return x * 2.0
>>> path = os.path.join(tempfile.mkdtemp(), "double")
>>> tw.saved_model.save(double, path)
>>> loaded = tw.saved_model.load(path)
>>> loaded.signatures["serving_default"](x=np.ones((1, 2), np.float32))["output_0"].numpy().tolist()
[[2.0, 2.0]]

See :mod:`tensorweave.saving.saved_model` for the format and ``SECURITY.md`` for what loading
trusts.
"""
from tensorweave.saving.saved_model import (DEFAULT_SIGNATURE as SERVING_DEFAULT,  # noqa: F401
                                            Asset, LoadError, SaveError, SaveOptions, load, read_info, save)

DEFAULT_SERVING_SIGNATURE_DEF_KEY = SERVING_DEFAULT   # TensorFlow's name

__all__ = ["save", "load", "Asset", "SaveOptions", "LoadError", "SaveError", "read_info",
           "DEFAULT_SERVING_SIGNATURE_DEF_KEY"]
