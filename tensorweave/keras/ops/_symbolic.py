"""``keras.ops`` on ``keras.Input`` tensors: an op whose arguments hold KerasTensors becomes a small
layer of the functional model (as Keras 3 records an ``Operation``), so ``keras.ops.mean(x, axis=1)``
works between layers.

>>> from tensorweave import keras
>>> x = keras.Input(shape=(3,))
>>> keras.ops.sum(x, axis=1).shape
(None,)
"""
import functools
import inspect

from tensorweave.core import nest
from tensorweave.keras.engine.keras_tensor import KerasTensor


def _symbolic_call(fn, args, kwargs):
    from tensorweave.keras.layers.core import OpLambda
    flat = nest.flatten((args, kwargs))
    slots = [i for i, v in enumerate(flat) if isinstance(v, KerasTensor)]

    def apply(*tensors):
        values = list(flat)
        for i, t in zip(slots, tensors):
            values[i] = t
        a, k = nest.pack_sequence_as((args, kwargs), values)
        return fn(*a, **k)
    apply.__name__ = fn.__name__
    apply.__qualname__ = fn.__qualname__
    apply.__module__ = fn.__module__
    return OpLambda(apply, name=fn.__name__)(*[flat[i] for i in slots])


def keras_op(fn):
    """``fn`` that also accepts KerasTensors (recorded as an op layer)."""
    @functools.wraps(fn)
    def op(*args, **kwargs):
        if any(isinstance(v, KerasTensor) for v in nest.flatten((args, kwargs))):
            return _symbolic_call(fn, args, kwargs)
        return fn(*args, **kwargs)
    op._keras_op = True
    return op


def export(namespace, skip=(), extra=()):
    """Wraps the public functions of a ``keras.ops`` module (given its ``globals()``) with
    :func:`keras_op` and sets its ``__all__``; aliases share one wrapper. ``extra`` names functions
    imported from a private helper module that this module exports."""
    wrapped, names = {}, []
    module = namespace["__name__"]
    for name, value in list(namespace.items()):
        if name.startswith("_") or name in skip or not inspect.isfunction(value) \
                or not value.__module__.startswith("tensorweave.keras.ops"):
            continue
        if value.__module__ != module and name not in extra and not getattr(value, "_keras_op", False):
            continue
        if id(value) not in wrapped:
            wrapped[id(value)] = value if getattr(value, "_keras_op", False) else keras_op(value)
        namespace[name] = wrapped[id(value)]
        names.append(name)
    namespace["__all__"] = sorted(names)
