"""TF1 framework-level names: behaviour switches (``disable_v2_behavior``...), ``make_template``
(variable sharing by a function object), ``hessians``, ``colocate_with``, ``op_scope``,
``tables_initializer``, ``timestamp``, the ``AggregationMethod``/``UnconnectedGradients``
constants and small queries.

tensorweave's variables are always resource variables and its control flow is functional
(TF's "v2" forms), so ``resource_variables_enabled()`` and ``control_flow_v2_enabled()`` are
True and their ``enable_*`` switches have nothing to change.

>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     dense = tf.make_template("dense", lambda x: x * tf.get_variable("w", [], initializer=tf.ones_initializer()))
...     y1, y2 = dense(tf.constant(2.0)), dense(tf.constant(3.0))   # the second call reuses dense/w
...     [v.name for v in tf.global_variables()]
['dense/w:0']
"""
import contextlib
import enum
import logging

import numpy as np

from tensorweave.core import context
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import get_default_graph, name_scope
from tensorweave.ops import array_ops, control_flow_ops

__all__ = ["disable_v2_behavior", "enable_v2_behavior", "executing_eagerly_outside_functions",
           "resource_variables_enabled", "enable_resource_variables", "control_flow_v2_enabled",
           "enable_control_flow_v2", "get_logger", "no_regularizer", "op_scope", "make_template", "tables_initializer",
           "initialize_all_tables", "colocate_with", "VERSION", "AggregationMethod", "UnconnectedGradients",
           "dimension_value", "hessians", "timestamp", "VariableSynchronization", "VariableAggregation",
           "is_symbolic_tensor", "grad_pass_through", "recompute_grad"]

VERSION = __import__("tensorweave").__version__


def disable_v2_behavior():
    """TF1 mode for the rest of the program: ops build graphs run by sessions."""
    context.disable_eager_execution()


def enable_v2_behavior():
    """TF2 mode: ops run eagerly."""
    context.enable_eager_execution()


def executing_eagerly_outside_functions():
    """Whether the outermost context (outside any ``tw.function`` being traced) executes eagerly."""
    with context.init_scope():
        return context.executing_eagerly()


def resource_variables_enabled():
    return True


def enable_resource_variables():
    """Variables are resource variables already (always)."""


def control_flow_v2_enabled():
    return True


def enable_control_flow_v2():
    """Control flow is functional (``If``/``While`` ops over sub-graphs) already (always)."""


def get_logger():
    """The ``logging`` logger of tensorweave."""
    return logging.getLogger("tensorweave")


def no_regularizer(_):
    """A regularizer that adds nothing (returns None), to exempt a variable from a scope's regularizer."""
    return None


def op_scope(values, name, default_name=None):
    """TF1's oldest spelling of ``name_scope(name, default_name, values)``."""
    return name_scope(name if name is not None else default_name)


class AggregationMethod:
    """How ``tf.gradients`` sums the gradients reaching one tensor (all give the same sum here)."""
    ADD_N = 0
    DEFAULT = ADD_N
    EXPERIMENTAL_TREE = 1
    EXPERIMENTAL_ACCUMULATE_N = 2


class UnconnectedGradients(str, enum.Enum):
    """What ``tf.gradients`` returns for an ``x`` that ``ys`` do not depend on."""
    NONE = "none"
    ZERO = "zero"


def dimension_value(dimension):
    """The int (or None) of a ``TensorShape`` dimension, whichever form it has."""
    return getattr(dimension, "value", dimension)


# ---- make_template ----------------------------------------------------------------------------------
class Template:
    """``func_`` wrapped so that every call runs in one variable scope: the first call creates the
    variables (``get_variable``), later calls reuse them."""

    def __init__(self, name, func, create_scope_now=False, unique_name=None, custom_getter=None, kwargs=None):
        if not name:
            raise ValueError("make_template: name_ cannot be empty")
        self._name, self._func, self._kwargs = name, func, kwargs or {}
        self._unique_name, self._custom_getter = unique_name, custom_getter
        self._scope, self._created = None, False
        if create_scope_now:
            self._enter_first(lambda: None)

    def _enter_first(self, body):
        from tensorweave.compat.v1_variable_scope import variable_scope
        with variable_scope(self._unique_name, default_name=self._name, custom_getter=self._custom_getter) as vs:
            self._scope = vs
            return body()

    def __call__(self, *args, **kwargs):
        from tensorweave.compat.v1_variable_scope import variable_scope
        call = lambda: self._func(*args, **dict(self._kwargs, **kwargs))  # noqa: E731
        if self._scope is None:
            result = self._enter_first(call)
        else:
            with variable_scope(self._scope, reuse=self._created or None, custom_getter=self._custom_getter):
                result = call()
        self._created = True
        return result

    @property
    def name(self):
        return self._name

    @property
    def variable_scope(self):
        return self._scope

    @property
    def variable_scope_name(self):
        return self._scope.name if self._scope is not None else None

    def _collection(self, key):
        if self._scope is None:
            return []
        return get_default_graph().get_collection(key, self._scope.name + "/")

    @property
    def variables(self):
        return self._collection("variables") + self._collection("local_variables")

    @property
    def global_variables(self):
        return self._collection("variables")

    @property
    def trainable_variables(self):
        return self._collection("trainable_variables")

    @property
    def local_variables(self):
        return self._collection("local_variables")


def make_template(name_, func_, create_scope_now_=False, unique_name_=None, custom_getter_=None, **kwargs):
    """A callable sharing ``func_``'s variables between calls (see :class:`Template`); extra
    ``kwargs`` are passed to every call."""
    return Template(name_, func_, create_scope_now_, unique_name_, custom_getter_, kwargs)


# ---- ops --------------------------------------------------------------------------------------------
def tables_initializer(name="init_all_tables"):
    """One op running every initializer of the ``TABLE_INITIALIZERS`` collection (a no-op when empty)."""
    inits = get_default_graph().get_collection("table_initializer") if not context.executing_eagerly() else []
    return control_flow_ops.group(*inits, name=name) if inits else control_flow_ops.no_op(name=name)


def initialize_all_tables(name="init_all_tables"):
    """TF1's old name of :func:`tables_initializer`."""
    return tables_initializer(name=name)


@contextlib.contextmanager
def colocate_with(op, ignore_existing=False):
    """Places the ops built inside on ``op``'s device (a tensor, operation or variable)."""
    from tensorweave.core.devices import device
    target = getattr(op, "op", op) if not getattr(op, "_is_variable", False) else op
    dev = getattr(target, "device", None) or None
    if dev is None:
        yield
        return
    with device(dev):
        yield


def hessians(ys, xs, name="hessians", colocate_gradients_with_ops=False, gate_gradients=False,
             aggregation_method=None):
    """For each ``x`` of ``xs``, the Hessian of ``sum(ys)``: shape ``x.shape + x.shape`` (each
    ``x`` needs a static shape)."""
    from tensorweave.autodiff.gradients import gradients
    xs = list(xs) if isinstance(xs, (list, tuple)) else [xs]
    out = []
    with name_scope(name):
        for x in xs:
            shape = x.shape.as_list() if x.shape.rank is not None else None
            if shape is None or None in shape:
                raise ValueError(f"tf.hessians: {getattr(x, 'name', x)} needs a fully defined shape, got {x.shape}")
            (g,) = gradients(ys, [x])
            if g is None:
                out.append(None)
                continue
            flat = array_ops.reshape(g, [-1])
            rows = []
            for j in range(int(np.prod(shape))):
                (h,) = gradients(flat[j], [x])
                rows.append(h if h is not None else array_ops.zeros_like(x))
            out.append(array_ops.reshape(array_ops.stack(rows), shape + shape))
    return out


def timestamp(name=None):
    """The current time in seconds since the epoch (float64), taken when the op runs."""
    import time

    from tensorweave.core import dtypes
    from tensorweave.ops.script_ops import numpy_function
    if context.executing_eagerly():
        return convert_to_tensor(np.float64(time.time()))
    return numpy_function(lambda: np.float64(time.time()), [], dtypes.float64, name=name or "Timestamp")


# ---- variable enums, gradient helpers --------------------------------------------------------------
class VariableSynchronization(enum.Enum):
    """When a distributed variable is aggregated (single-process here: every choice behaves as ``AUTO``)."""
    AUTO = 0
    NONE = 1
    ON_WRITE = 2
    ON_READ = 3


class VariableAggregation(enum.Enum):
    """How replicas' updates of a variable combine (single-process here: one replica)."""
    NONE = 0
    SUM = 1
    MEAN = 2
    ONLY_FIRST_REPLICA = 3
    ONLY_FIRST_TOWER = 3


def is_symbolic_tensor(tensor):
    """Whether ``tensor`` is a graph tensor (not an eager value)."""
    from tensorweave.core.graph import SymbolicTensor
    return isinstance(tensor, SymbolicTensor)


def grad_pass_through(f):
    """``f`` whose gradient is the identity: ``y = f(x)`` forward, ``dy/dx = 1`` backward (for a
    non-differentiable ``f`` such as a rounding or an assignment)."""
    from tensorweave.autodiff.custom_gradient import custom_gradient

    @custom_gradient
    def through(x):
        return f(x), lambda dy: dy
    return through


def recompute_grad(f):
    """``f`` with the same values and gradients; its intermediate results are recomputed for the
    gradient instead of being kept (a memory/compute trade, as TF's)."""
    from tensorweave.autodiff.custom_gradient import custom_gradient
    from tensorweave.autodiff.tape import GradientTape

    @custom_gradient
    def recomputed(*args):
        out = f(*args)

        def grad(*dys, variables=None):
            xs = [convert_to_tensor(a) for a in args]
            with GradientTape() as tape:
                for x in xs:
                    tape.watch(x)
                y = f(*xs)
            watched = list(variables or [])
            grads = tape.gradient(y, xs + watched, output_gradients=list(dys) if len(dys) > 1 else dys[0])
            if variables:
                return grads[:len(xs)], grads[len(xs):]
            return grads[:len(xs)] if len(xs) > 1 else grads[0]
        return out, grad
    return recomputed
