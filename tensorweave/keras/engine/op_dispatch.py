"""TensorFlow-style ops applied to KerasTensors become layers of the functional model, as in
tf.keras (its ``TFOpLambda``): ``tw.reduce_sum(keras.Input((3,)), axis=1)`` is a KerasTensor.

Once ``tensorweave.keras`` is imported, the public op functions of ``tw``, ``tw.math``, ``tw.nn``,
``tw.linalg`` (and the other op namespaces already loaded) record the op as a layer call when
converting an argument hits a KerasTensor (which raises :class:`SymbolicTensorError`). The
ordinary path pays nothing: the namespaces' :func:`~tensorweave.core.signatures.checked`
wrappers hand that error to :func:`_on_failure` (no second wrapping frame); only op functions
exported without one get a wrapper of their own.

>>> import tensorweave as tw
>>> from tensorweave import keras
>>> x = keras.Input((3,))
>>> model = keras.Model(x, tw.reduce_sum(x, axis=1))
>>> model(tw.ones([2, 3])).numpy().tolist()
[3.0, 3.0]
"""
import functools
import inspect
import sys
import types

from tensorweave.core import signatures
from tensorweave.keras import backend
from tensorweave.keras.engine.keras_tensor import SymbolicTensorError, any_symbolic
from tensorweave.keras.engine.layer import Layer

# Ops that take tensors and return tensors; control flow, Python functions, logging, variables
# and random generators are left alone (their arguments are functions, shapes or seeds).
_OP_MODULES = ("array_ops", "math_ops", "reduce_ops", "indexing_ops", "sort_ops", "linalg_ops", "nn_ops",
               "image_ops", "signal_ops", "special_math_ops", "bitwise_ops", "string_ops")
_NAMESPACES = ("tensorweave", "tensorweave.math", "tensorweave.nn", "tensorweave.linalg", "tensorweave.image",
               "tensorweave.signal", "tensorweave.bitwise", "tensorweave.strings")


class TFOpLambda(Layer):
    """One call of a tensorweave op on KerasTensors, replayed by the functional model with the
    same (non-tensor) arguments."""

    def __init__(self, fn, name=None, **kwargs):
        super().__init__(name=name or backend.unique_name(backend.snake_case(fn.__name__.strip("_") or "op")), **kwargs)
        self.fn = fn
        self.built = True

    def _convert_input(self, x):
        return x   # the op converts its own arguments (axis=1 stays a Python int)

    def call(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def _call_with_context(self, args, kwargs):
        # every keyword (``mask=``, ``training=``) belongs to the op, not to the layer protocol
        import tensorweave as tw
        with tw.name_scope(self.name):
            return self.fn(*args, **kwargs)

    def get_config(self):
        return {**super().get_config(), "function": f"{self.fn.__module__}.{self.fn.__name__}"}


_wrapped = {}


def _as_layer(fn, args, kwargs):
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
        args, kwargs = bound.args, bound.kwargs   # the first argument positional, as layers take it
    except (TypeError, ValueError):
        pass
    return TFOpLambda(fn)(*args, **kwargs)


def _on_failure(fn, args, kwargs, exc):
    """The :mod:`signatures` failure handler: an op function called on KerasTensors is a layer call."""
    if isinstance(exc, SymbolicTensorError) and _is_op(fn) and any_symbolic((args, kwargs)):
        return _as_layer(fn, args, kwargs)
    return signatures.RERAISE


def _wrap(fn):
    wrapper = _wrapped.get(fn)
    if wrapper is not None:
        return wrapper

    @functools.wraps(fn)
    def op(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SymbolicTensorError:
            if not any_symbolic((args, kwargs)):
                raise
        return _as_layer(fn, args, kwargs)
    op._keras_symbolic_op = fn
    _wrapped[fn] = op
    _wrapped[op] = op
    return op


def _is_op(fn):
    module = getattr(fn, "__module__", "") or ""
    return (isinstance(fn, types.FunctionType) and module.startswith("tensorweave.ops.")
            and module.rsplit(".", 1)[-1] in _OP_MODULES)


def install():
    """Makes the op functions of the loaded namespaces layer calls on KerasTensors (idempotent)."""
    signatures.set_failure_handler(_on_failure)
    for name in _NAMESPACES:
        module = sys.modules.get(name)
        if module is None:
            continue
        for attr, value in list(vars(module).items()):
            if getattr(value, "_tw_failure_handled", False):
                continue   # its checked wrapper already hands a SymbolicTensorError to _on_failure
            if not attr.startswith("_") and _is_op(value) and not hasattr(value, "_keras_symbolic_op"):
                setattr(module, attr, _wrap(value))
