"""The dense layers of the canned DNNs (TF1's ``tf.layers.dense``: Glorot-uniform kernel, zero bias)."""
import math

from tensorweave.core.graph import name_scope
from tensorweave.ops import array_ops as _a
from tensorweave.ops import math_ops as _m
from tensorweave.ops import random_ops as _rand
from tensorweave.ops.variables import Variable


def glorot_uniform(shape, dtype="float32"):
    limit = math.sqrt(6.0 / (shape[0] + shape[1]))
    return _rand.random_uniform(shape, -limit, limit, dtype=dtype)


def dense(x, units, activation=None, name="dense"):
    """``activation(x @ kernel + bias)`` with variables ``<name>/kernel`` and ``<name>/bias``."""
    n_in = x.shape[-1]
    if n_in is None:
        raise ValueError(f"dense layer {name!r}: the input's last dimension must be known, got shape {x.shape}")
    with name_scope(name):
        kernel = Variable(lambda: glorot_uniform([n_in, units]), name="kernel")
        bias = Variable(lambda: _a.zeros([units]), name="bias")
        y = _m.add(_m.matmul(x, kernel), bias)
        return activation(y) if activation is not None else y
