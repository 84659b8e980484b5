"""Top-level TF2 framework names: ``tf.double``/``tf.half``, ``tf.timestamp``, ``tf.get_logger``,
``tf.inside_function``, ``tf.get_current_name_scope``, ``tf.is_symbolic_tensor``, ``tf.hessians``,
``tf.grad_pass_through``, ``tf.recompute_grad``, ``tf.guarantee_const``, ``tf.no_gradient``,
``tf.RegisterGradient`` and the enums ``tf.UnconnectedGradients``, ``tf.AggregationMethod``,
``tf.VariableAggregation``, ``tf.VariableSynchronization``.

>>> import tensorweave as tw
>>> tw.double is tw.float64, tw.half is tw.float16
(True, True)
>>> @tw.function
... def f():
...     return tw.inside_function()
>>> f(), tw.inside_function()
(True, False)
"""
import enum
import logging
import time

from tensorweave.core import dtypes as _dt
from tensorweave.core import graph as _graph
from tensorweave.core.context import ctx as _ctx
from tensorweave.core.context import executing_eagerly
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import SymbolicTensor
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op
from tensorweave.ops import array_ops as _A

__all__ = ["double", "half", "timestamp", "get_logger", "inside_function", "get_current_name_scope",
           "is_symbolic_tensor", "hessians", "grad_pass_through", "recompute_grad", "guarantee_const",
           "no_gradient", "RegisterGradient", "UnconnectedGradients", "AggregationMethod", "VariableAggregation",
           "VariableSynchronization", "reverse_sequence"]

double = _dt.float64
half = _dt.float16


def timestamp(name=None):
    """The current time in seconds since the epoch, a float64 scalar (read when the op runs)."""
    if not executing_eagerly():
        import numpy as np
        from tensorweave.ops.script_ops import numpy_function
        return numpy_function(lambda: np.float64(time.time()), [], _dt.float64, name=name or "Timestamp")
    return convert_to_tensor(time.time(), dtype=_dt.float64)


def get_logger():
    """The ``logging.Logger`` of tensorweave (TF's is named ``tensorflow``)."""
    return logging.getLogger("tensorweave")


def inside_function():
    """True while a ``tw.function`` is being traced."""
    for g in reversed(getattr(_ctx, "graph_stack", []) or []):
        if getattr(g, "is_function_graph", False):
            return True
    return False


def get_current_name_scope():
    """The current name scope (``""`` at the top), as ``tf.get_current_name_scope``."""
    if not executing_eagerly():
        return _graph.get_default_graph().get_name_scope()
    return _ctx.name_stack or ""


def is_symbolic_tensor(tensor):
    """True for a graph (symbolic) tensor, False for eager values and everything else."""
    return isinstance(tensor, SymbolicTensor)


def hessians(ys, xs, name="hessians", colocate_gradients_with_ops=False, gate_gradients=False,
             aggregation_method=None):
    """For each ``x`` in ``xs``, the Hessian of ``sum(ys)``: shape ``x.shape + x.shape`` (graph mode, as TF)."""
    from tensorweave.autodiff.gradients import gradients
    xs = list(xs) if isinstance(xs, (list, tuple)) else [xs]
    out = []
    for x, g in zip(xs, gradients(ys, xs)):
        n = x.shape.num_elements()
        if n is None:
            raise ValueError("hessians: the shape of each x must be fully known")
        flat = _A.reshape(g, [-1])
        rows = [gradients(flat[i], x)[0] for i in range(n)]
        out.append(_A.reshape(_A.stack(rows), x.shape.as_list() + x.shape.as_list()))
    return out


def grad_pass_through(f):
    """``f`` whose gradient is the identity (straight-through): ``y = f(x)`` forward, ``dy/dx = 1``."""
    from tensorweave.autodiff.custom_gradient import custom_gradient

    @custom_gradient
    def wrapped(*args):
        return f(*args), lambda *dy: dy if len(args) > 1 else dy[0]

    return wrapped


def recompute_grad(f):
    """``f`` unchanged in values and gradients. (TF recomputes ``f``'s activations in the backward pass
    to save memory; the tape here keeps them.)"""
    return f


def guarantee_const(input, name=None):
    """``input`` (a promise that it is constant; an identity here)."""
    return _A.identity(input, name=name)


def no_gradient(op_type):
    """Declares that op ``op_type`` has no gradient (its inputs get None)."""
    if not isinstance(op_type, str):
        raise TypeError(f"no_gradient: op_type must be a string, got {op_type!r}")
    get_op(op_type).grad = NOT_DIFFERENTIABLE


class RegisterGradient:
    """Decorator ``@tw.RegisterGradient("OpType")``: ``fn(op, *grads) -> input grads`` becomes the
    gradient of ``OpType``; a name that is no op type registers a gradient for TF1's
    ``graph.gradient_override_map({"OpType": name})``."""

    def __init__(self, op_type):
        if not isinstance(op_type, str):
            raise TypeError(f"RegisterGradient: op_type must be a string, got {op_type!r}")
        self._op_type = op_type

    def __call__(self, fn):
        def grad(op, *gs):
            out = fn(op, *gs)
            return list(out) if isinstance(out, (list, tuple)) else [out]
        from tensorweave.core.registry import register_named_gradient, registered_ops
        if self._op_type in registered_ops():
            get_op(self._op_type).grad = grad
        else:
            register_named_gradient(self._op_type, grad)
        return fn


class UnconnectedGradients(str, enum.Enum):
    """What ``gradients`` returns for unconnected sources: ``NONE`` (None) or ``ZERO`` (zeros)."""
    NONE = "none"
    ZERO = "zero"


class AggregationMethod:
    """How ``gradients`` sums the gradients of a tensor used several times (all one sum here)."""
    ADD_N = 0
    DEFAULT = ADD_N
    EXPERIMENTAL_TREE = 1
    EXPERIMENTAL_ACCUMULATE_N = 2


class VariableAggregation(enum.Enum):
    """How a distributed variable's replicas' updates combine."""
    NONE = 0
    SUM = 1
    MEAN = 2
    ONLY_FIRST_REPLICA = 3


class VariableSynchronization(enum.Enum):
    """When a distributed variable's replicas synchronise."""
    AUTO = 0
    NONE = 1
    ON_WRITE = 2
    ON_READ = 3


def reverse_sequence(input, seq_lengths, seq_axis=None, batch_axis=None, name=None):
    """Reverses the first ``seq_lengths[b]`` entries along ``seq_axis`` of each batch entry ``b``
    (``batch_axis``, default 0)."""
    from tensorweave.compat.v1_rnn import reverse_sequence as _reverse   # one implementation (TF1's names too)
    return _reverse(input, seq_lengths, seq_axis=seq_axis, batch_axis=batch_axis, name=name)
