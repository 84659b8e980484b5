"""``keras.ops``: Keras 3's backend-agnostic ops (NumPy-style, nn, linalg, math, image, core).

Each op takes tensors, NumPy arrays or Python values, follows Keras 3's dtype promotion
(``keras.ops.add(int8, uint8)`` is int16; ``keras.ops.sqrt`` of integers is ``floatx()``), runs
eagerly or inside ``tw.function``, and, called on ``keras.Input`` tensors, becomes a layer of a
functional model.

>>> from tensorweave import keras
>>> x = keras.ops.arange(6)
>>> keras.ops.reshape(x, (2, 3)).numpy().tolist()
[[0, 1, 2], [3, 4, 5]]
>>> keras.ops.softmax(keras.ops.zeros((2,))).numpy().tolist()
[0.5, 0.5]
"""
from tensorweave.keras.ops import core, image, linalg, math, nn, numpy  # noqa: F401
from tensorweave.keras.ops.core import *  # noqa: F401,F403
from tensorweave.keras.ops.linalg import *  # noqa: F401,F403
from tensorweave.keras.ops.math import *  # noqa: F401,F403
from tensorweave.keras.ops.nn import *  # noqa: F401,F403
from tensorweave.keras.ops.numpy import *  # noqa: F401,F403
