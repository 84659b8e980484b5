"""The metric base class (Keras 3's ``keras.metrics.Metric``).

A metric is stateful: its state lives in non-trainable ``tw.Variable``\\ s made with
:meth:`Metric.add_variable`; ``update_state`` folds a batch into them with
``assign``/``assign_add`` written in tensorweave ops, and ``result`` computes the value from
them. So the same metric object works eagerly, inside a ``tw.function`` training step (the
updates become graph nodes run in program order) and in a TF1 graph (where ``update_state``
and ``reset_state`` return the op to run).

>>> import tensorweave as tw
>>> class Count(Metric):
...     def __init__(self, name="count", dtype=None):
...         super().__init__(name=name, dtype=dtype)
...         self.n = self.add_variable(shape=(), initializer="zeros", name="n")
...     def update_state(self, values):
...         self.n.assign_add(tw.cast(tw.size(values), self.dtype))
...     def result(self):
...         return tw.identity(self.n)
>>> m = Count()
>>> float(m([1, 2, 3])), float(m([4]))
(3.0, 4.0)
>>> m.reset_state(); float(m.result())
0.0
"""
import contextlib

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.sbp import B
from tensorweave.core.context import building_graph, init_scope
from tensorweave.keras import backend
from tensorweave.ops import array_ops as A
from tensorweave.ops.control_flow_ops import control_dependencies, group
from tensorweave.ops.variables import Variable


def tf1_graph():
    """The TF1 graph being built (where stateful ops need explicit ordering), else None.
    Eagerly and while tracing a ``tw.function`` (which runs stateful ops in program order)
    this is None."""
    g = building_graph()
    if g is None or g.is_function_graph:
        return None
    return g


def updates(*ops):
    """What ``update_state``/``reset_state`` return: the grouped assignments in a TF1 graph
    (so a Session can run them), None otherwise (as Keras 3)."""
    if tf1_graph() is None:
        return None
    return group(*[o for o in ops if o is not None])


def _initial_value(initializer, shape, dtype):
    if isinstance(initializer, str):
        key = initializer.lower()
        if key == "zeros":
            return np.zeros(shape, dtype.np_dtype)
        if key == "ones":
            return np.ones(shape, dtype.np_dtype)
        from tensorweave.keras import initializers
        initializer = initializers.get(initializer)
    if isinstance(initializer, (int, float, np.number, np.ndarray)):
        return np.broadcast_to(np.asarray(initializer, dtype.np_dtype), shape).copy()
    if callable(initializer):
        return lambda: initializer(shape, dtype)
    raise ValueError(f"add_variable: could not interpret initializer {initializer!r}")


class Metric:
    """Base class of the metrics.

    Subclasses create state in ``__init__`` with :meth:`add_variable` and implement
    ``update_state(*args, **kwargs)`` and ``result()``; :meth:`reset_state` zeroes every state
    variable (override it for other initial values). ``metric(*args)`` updates and returns
    the result. ``name`` may be changed (``compile`` names a metric after the string it was
    given). ``dtype`` (default ``keras.backend.floatx()``) is the dtype of the state and the result.
    """

    # Which way is better, for callbacks in "auto" mode (EarlyStopping, ModelCheckpoint).
    _direction = None

    def __init__(self, dtype=None, name=None):
        self.name = name or backend.snake_case(type(self).__name__)
        self._dtype = _dt.as_dtype(dtype or backend.floatx())
        self._variables = []

    @property
    def dtype(self):
        return self._dtype.name

    @property
    def variables(self):
        """The state variables, in creation order."""
        return list(self._variables)

    @property
    def trainable_variables(self):
        return []

    @property
    def non_trainable_variables(self):
        return self.variables

    def add_weight(self, shape=(), initializer="zeros", dtype=None, name=None, aggregation="sum"):
        """``add_variable`` with Keras 3's signature: a scalar by default
        (``self.count = self.add_weight(name="count", initializer="zeros")``)."""
        return self.add_variable(shape, initializer=initializer, dtype=dtype, aggregation=aggregation, name=name)

    def add_variable(self, shape=(), initializer="zeros", dtype=None, aggregation="sum", name=None):
        """A non-trainable state variable of ``shape``; ``initializer`` is "zeros", "ones", a
        number, an initializer name or a callable ``(shape, dtype)``. ``aggregation`` ("sum",
        "mean", "only_first_replica") says how replicas' values combine (kept for the
        distributed strategies)."""
        dtype = _dt.as_dtype(dtype or self._dtype)
        shape = [int(d) for d in shape]
        init = _initial_value(initializer, shape, dtype)
        # Created outside any function being traced and without the caller's control
        # dependencies, so a metric made inside a traced step still has one set of variables.
        with init_scope():
            g = building_graph()
            with g.control_dependencies(None) if g is not None else contextlib.nullcontext():
                from tensorweave.distribute.distribution import weight_layout
                layout = weight_layout(name or "variable", shape)
                # under a distribution, a replicated global variable (its updates are all-reduced)
                kw = {} if layout is None else {"placement": layout[0], "sbp": (B,) * layout[0].ndim}
                v = Variable(init, trainable=False, name=name or "variable", dtype=dtype, shape=shape, **kw)
        v.aggregation = aggregation
        self._variables.append(v)
        return v

    def reset_state(self):
        """Sets every state variable to zero."""
        return updates(*[v.assign(A.zeros(v.shape.as_list(), v.dtype), read_value=False) for v in self._variables])

    def update_state(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must implement update_state()")

    def result(self):
        raise NotImplementedError(f"{type(self).__name__} must implement result()")

    def __call__(self, *args, **kwargs):
        op = self.update_state(*args, **kwargs)
        if op is not None and tf1_graph() is not None:
            with control_dependencies([op]):
                return self.result()
        return self.result()

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}>"
