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

from tensorweave.core import context
from tensorweave.core.graph import get_default_graph, name_scope
from tensorweave.ops import control_flow_ops
from tensorweave.framework_extras import no_gradient as NoGradient  # noqa: E402,N812 - TF1's names for it
from tensorweave.framework_extras import no_gradient as NotDifferentiable  # noqa: E402,N812
from tensorweave.framework_extras import (AggregationMethod, UnconnectedGradients,  # noqa: F401 - TF2's, the same in TF1
                                         VariableSynchronization, get_logger, grad_pass_through, hessians,
                                         is_symbolic_tensor, recompute_grad, timestamp)

__all__ = ["disable_v2_behavior", "enable_v2_behavior", "executing_eagerly_outside_functions",
           "resource_variables_enabled", "enable_resource_variables", "control_flow_v2_enabled",
           "enable_control_flow_v2", "get_logger", "no_regularizer", "op_scope", "make_template", "tables_initializer",
           "initialize_all_tables", "colocate_with", "VERSION", "AggregationMethod", "UnconnectedGradients",
           "dimension_value", "hessians", "timestamp", "VariableSynchronization", "VariableAggregation",
           "is_symbolic_tensor", "grad_pass_through", "recompute_grad", "NoGradient", "NotDifferentiable"]

VERSION = __import__("tensorweave").__version__


class VariableAggregation(enum.Enum):
    """TF1's enum: TF2's values plus the old name ``ONLY_FIRST_TOWER`` (single process: one replica)."""
    NONE = 0
    SUM = 1
    MEAN = 2
    ONLY_FIRST_REPLICA = 3
    ONLY_FIRST_TOWER = 3


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


def no_regularizer(_):
    """A regularizer that adds nothing (returns None), to exempt a variable from a scope's regularizer."""
    return None


def op_scope(values, name, default_name=None):
    """TF1's oldest spelling of ``name_scope(name, default_name, values)``."""
    return name_scope(name if name is not None else default_name)


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


