"""TF1's variable scopes: ``variable_scope``, ``get_variable`` (sharing by name with ``reuse``),
partitioned variables and the TF1 initializer functions.

A graph keeps, beside its ops, a store of the variables ``get_variable`` made (full name ->
variable) and the stack of open variable scopes; both live on the graph object (eagerly: on
the global default graph), so separate graphs never share variables.

The rules are TF1's:

* ``get_variable("w")`` names the variable ``<variable scope>/w``; ``tf.name_scope`` does not
  change it (it names ops only). ``variable_scope("s")`` opens the variable scope ``s`` and a
  name scope ``s`` (``s_1`` the second time, for ops).
* ``reuse``: False/None - the name must be new; True - it must exist (shape and dtype must
  agree); ``AUTO_REUSE`` - either. Child scopes inherit ``reuse``.
* ``variable_scope(None, default_name="dense")`` picks a fresh scope name (``dense``,
  ``dense_1``...); re-entering a named scope restarts those counters inside it, so a second
  pass through ``with variable_scope("gen", reuse=True)`` finds the same ``gen/dense``.
* ``initializer`` (from the argument, else the scope's, else Glorot uniform for floats and zeros
  otherwise) is an initializer object, a name (``"zeros"``), or a value when ``shape`` is None.

>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     with tf.variable_scope("layer1"):
...         w = tf.get_variable("w", [2, 3], initializer=tf.zeros_initializer())
...     with tf.variable_scope("layer1", reuse=True):
...         w2 = tf.get_variable("w")
>>> w.name, w2 is w
('layer1/w:0', True)
"""
import contextlib
import enum
import math as _math

from tensorweave.core import dtypes as _dt
from tensorweave.core.context import building_graph, ctx
from tensorweave.core.graph import get_default_graph
from tensorweave.core.shape import TensorShape, fmt


class _ReuseMode(enum.Enum):
    AUTO_REUSE = 1


AUTO_REUSE = _ReuseMode.AUTO_REUSE


class VariableScope:
    """A variable scope's name and defaults (``tf.compat.v1.VariableScope``)."""

    def __init__(self, reuse, name="", initializer=None, regularizer=None, caching_device=None, partitioner=None,
                 custom_getter=None, name_scope="", dtype=_dt.float32, use_resource=None, constraint=None):
        self._name, self._reuse = name, reuse
        self._initializer, self._regularizer, self._partitioner = initializer, regularizer, partitioner
        self._custom_getter, self._dtype, self._constraint = custom_getter, dtype, constraint
        self._caching_device, self._use_resource = caching_device, use_resource
        self._name_scope = name_scope

    name = property(lambda self: self._name)
    original_name_scope = property(lambda self: self._name_scope)
    reuse = property(lambda self: self._reuse)
    initializer = property(lambda self: self._initializer)
    regularizer = property(lambda self: self._regularizer)
    partitioner = property(lambda self: self._partitioner)
    custom_getter = property(lambda self: self._custom_getter)
    dtype = property(lambda self: self._dtype)
    constraint = property(lambda self: self._constraint)
    caching_device = property(lambda self: self._caching_device)
    use_resource = property(lambda self: self._use_resource)

    def reuse_variables(self):
        """Variables made from now on in this scope are reused (``reuse=True``)."""
        self._reuse = True

    def set_initializer(self, initializer):
        self._initializer = initializer

    def set_regularizer(self, regularizer):
        self._regularizer = regularizer

    def set_partitioner(self, partitioner):
        self._partitioner = partitioner

    def set_dtype(self, dtype):
        self._dtype = _dt.as_dtype(dtype)

    def set_custom_getter(self, custom_getter):
        self._custom_getter = custom_getter

    def get_variable(self, var_store, name, *args, **kwargs):
        return get_variable(name, *args, **kwargs)

    def _prefixed(self, collection):
        prefix = self._name + "/" if self._name else ""
        return [v for v in get_default_graph().get_collection(collection) if v.name.startswith(prefix)]

    def global_variables(self):
        return self._prefixed("variables")

    def trainable_variables(self):
        return self._prefixed("trainable_variables")

    def local_variables(self):
        return self._prefixed("local_variables")

    def __repr__(self):
        return f"<VariableScope '{self._name}' reuse={self._reuse}>"


class _Store:
    """A graph's variables by full name, its open variable scopes and the default-name counters."""

    def __init__(self):
        self.variables = {}
        self.stack = [VariableScope(False)]
        self.counts = {}


def _store(graph=None):
    graph = graph if graph is not None else get_default_graph()
    while getattr(graph, "outer_graph", None) is not None:
        graph = graph.outer_graph    # a cond/while body shares its graph's scopes and variables, as in TF1
    s = graph.__dict__.get("_tf1_variable_store")
    if s is None:
        s = graph.__dict__["_tf1_variable_store"] = _Store()
    return s


def get_variable_scope():
    """The innermost open ``VariableScope``."""
    return _store().stack[-1]


def _unique_default_name(store, parent, base):
    full = f"{parent.name}/{base}" if parent.name else base
    if not store.counts.get(full):
        return base
    i = 1
    while store.counts.get(f"{full}_{i}"):
        i += 1
    return f"{base}_{i}"


@contextlib.contextmanager
def _absolute_name_scope(scope):
    """Ops (and variables) created inside are named under ``scope`` ("a/b/", or "" for the root)."""
    graph = building_graph()
    if graph is not None:
        with graph.name_scope(scope if scope else ""):
            yield scope
        return
    saved, ctx.name_stack = ctx.name_stack, scope.rstrip("/")
    try:
        yield scope
    finally:
        ctx.name_stack = saved


@contextlib.contextmanager
def variable_scope(name_or_scope, default_name=None, values=None, initializer=None, regularizer=None,
                   caching_device=None, partitioner=None, custom_getter=None, reuse=None, dtype=None,
                   use_resource=None, constraint=None, auxiliary_name_scope=True):
    """Opens a variable scope (and a name scope); yields its ``VariableScope`` (see the module doc)."""
    from tensorweave.core.graph import name_scope
    store = _store()
    parent = store.stack[-1]
    if name_or_scope is None and default_name is None:
        raise TypeError("If default_name is None then name_or_scope is required")
    if reuse not in (None, True, False, AUTO_REUSE):
        raise ValueError(f"reuse must be None, True, False or tf.AUTO_REUSE, got {reuse!r}")
    from_object = isinstance(name_or_scope, VariableScope)
    if from_object:
        base = name_or_scope
        full = base.name
        reuse = reuse if reuse is not None else base.reuse
        inherit = base
    else:
        if name_or_scope is not None and not isinstance(name_or_scope, str):
            raise TypeError(f"VariableScope: name_or_scope must be a string or VariableScope, got {name_or_scope!r}")
        short = name_or_scope if name_or_scope is not None else _unique_default_name(store, parent, default_name)
        full = f"{parent.name}/{short}" if parent.name else short
        reuse = (reuse or parent.reuse) if reuse is not AUTO_REUSE else AUTO_REUSE
        if parent.reuse is True:
            reuse = True
        inherit = parent
    saved_counts = dict(store.counts) if from_object else None
    store.counts[full] = store.counts.get(full, 0) + 1
    scope = VariableScope(
        reuse, full,
        initializer=initializer if initializer is not None else inherit.initializer,
        regularizer=regularizer if regularizer is not None else inherit.regularizer,
        caching_device=caching_device if caching_device is not None else inherit.caching_device,
        partitioner=partitioner if partitioner is not None else inherit.partitioner,
        custom_getter=custom_getter if custom_getter is not None else inherit.custom_getter,
        dtype=_dt.as_dtype(dtype) if dtype is not None else inherit.dtype,
        use_resource=use_resource, constraint=constraint if constraint is not None else inherit.constraint)
    with contextlib.ExitStack() as stack:
        if auxiliary_name_scope:
            if from_object:
                ns = stack.enter_context(_absolute_name_scope(name_or_scope.original_name_scope))
            else:
                short_ns = full.rsplit("/", 1)[-1]
                ns = stack.enter_context(name_scope(short_ns))
            scope._name_scope = ns
        else:
            scope._name_scope = name_or_scope.original_name_scope if from_object else (full + "/")
        store.stack.append(scope)
        try:
            yield scope
        finally:
            store.stack.pop()
            if from_object:
                store.counts = saved_counts
            else:
                # Leaving a named scope restarts the default-name counters inside it (TF1).
                for k in store.counts:
                    if k.startswith(full + "/"):
                        store.counts[k] = 0


def variable_op_scope(values, name_or_scope, default_name=None, **kwargs):
    """TF1's older spelling: ``variable_scope(name_or_scope, default_name, values)``."""
    return variable_scope(name_or_scope, default_name=default_name, values=values, **kwargs)


# ---- get_variable ---------------------------------------------------------------------------------
def _initial_value(name, shape, dtype, initializer):
    """A zero-argument callable giving the variable's initial value, and the shape it will have."""
    from tensorweave.core.tensor import Tensor
    from tensorweave.keras import initializers
    if isinstance(initializer, str):
        initializer = initializers.get(initializer)
    if initializer is None:
        initializer = initializers.get("glorot_uniform" if dtype.is_floating else "zeros")
    if callable(initializer) and not isinstance(initializer, Tensor) and not hasattr(initializer, "_is_variable"):
        if shape is None:
            raise ValueError(f"The shape of variable '{name}' must be known: pass shape= (or a value as the "
                             "initializer)")
        dims = TensorShape(shape).as_list()
        if any(d is None for d in dims):
            raise ValueError(f"Shape of a new variable ({name}) must be fully defined, but instead was {fmt(shape)}.")
        return (lambda: initializer(dims, dtype=dtype)), TensorShape(dims), dtype
    if shape is not None:
        raise ValueError(f"If initializer is a constant, do not specify shape (variable '{name}').")
    # A value sets the dtype itself (TF1 ignores the scope's dtype then).
    from tensorweave.core.convert import convert_to_tensor
    value = initializer if isinstance(initializer, Tensor) else convert_to_tensor(initializer)
    return (lambda: value), value.shape, value.dtype


def _make(full, shape, dtype, initializer, trainable, collections, validate_shape, constraint):
    from tensorweave.ops.variables import Variable
    init, shape, dtype = _initial_value(full, shape, dtype, initializer)
    scope, _, short = full.rpartition("/")
    if collections is None:
        collections = ["variables"] + (["trainable_variables"] if trainable else [])
    elif trainable and "trainable_variables" not in collections:
        collections = list(collections) + ["trainable_variables"]
    with _absolute_name_scope(scope + "/" if scope else ""):
        graph = building_graph()
        if graph is not None:
            with graph.control_dependencies(None):
                return Variable(init, trainable=trainable, name=short, dtype=dtype, collections=collections,
                                validate_shape=validate_shape, constraint=constraint)
        v = Variable(init, trainable=trainable, name=short, dtype=dtype, validate_shape=validate_shape,
                     constraint=constraint)
        for c in collections:
            get_default_graph().add_to_collection(c, v)
        return v


def get_variable(name, shape=None, dtype=None, initializer=None, regularizer=None, trainable=None,
                 collections=None, caching_device=None, partitioner=None, validate_shape=True, use_resource=None,
                 custom_getter=None, constraint=None, synchronization=None, aggregation=None):
    """The variable ``<scope>/name``: a new one, or (with ``reuse``) the existing one."""
    scope = get_variable_scope()
    getter = custom_getter if custom_getter is not None else scope.custom_getter
    kwargs = dict(shape=shape, dtype=dtype, initializer=initializer, regularizer=regularizer, trainable=trainable,
                  collections=collections, caching_device=caching_device, partitioner=partitioner,
                  validate_shape=validate_shape, use_resource=use_resource, constraint=constraint,
                  synchronization=synchronization, aggregation=aggregation)
    if getter is not None:
        return getter(_true_getter, name, **kwargs)
    return _true_getter(name, **kwargs)


def _true_getter(name, shape=None, dtype=None, initializer=None, regularizer=None, trainable=None,
                 collections=None, caching_device=None, partitioner=None, validate_shape=True, use_resource=None,
                 constraint=None, synchronization=None, aggregation=None, **_):
    store = _store()
    scope = store.stack[-1]
    full = f"{scope.name}/{name}" if scope.name else name
    dtype = _dt.as_dtype(dtype) if dtype is not None else scope.dtype
    trainable = True if trainable is None else bool(trainable)
    initializer = initializer if initializer is not None else scope.initializer
    partitioner = partitioner if partitioner is not None else scope.partitioner
    regularizer = regularizer if regularizer is not None else scope.regularizer
    constraint = constraint if constraint is not None else scope.constraint
    existing = store.variables.get(full)
    if existing is not None:
        if scope.reuse is False or scope.reuse is None:
            raise ValueError(f"Variable {full} already exists, disallowed. Did you mean to set reuse=True or "
                             "reuse=tf.AUTO_REUSE in VarScope?")
        if shape is not None and not TensorShape(shape).is_compatible_with(existing.shape):
            raise ValueError(f"Trying to share variable {full}, but specified shape {fmt(TensorShape(shape))} and "
                             f"found shape {fmt(existing.shape)}.")
        if dtype is not existing.dtype and dtype is not getattr(existing.dtype, "base_dtype", existing.dtype):
            raise ValueError(f"Trying to share variable {full}, but specified dtype {dtype.name} and found dtype "
                             f"{existing.dtype.name}.")
        return existing
    if scope.reuse is True:
        raise ValueError(f"Variable {full} does not exist, or was not created with tf.get_variable(). Did you mean "
                         "to set reuse=tf.AUTO_REUSE in VarScope?")
    if partitioner is not None:
        var = _partitioned(full, shape, dtype, initializer, partitioner, trainable, collections, validate_shape,
                           constraint)
    else:
        var = _make(full, shape, dtype, initializer, trainable, collections, validate_shape, constraint)
    store.variables[full] = var
    if regularizer is not None:
        with _absolute_name_scope(full + "/Regularizer/"):
            loss = regularizer(var if partitioner is None else var.as_tensor())
        if loss is not None:
            get_default_graph().add_to_collection("regularization_losses", loss)
    return var


def get_local_variable(name, shape=None, dtype=None, initializer=None, regularizer=None, trainable=False,
                       collections=None, **kwargs):
    """``get_variable`` into the LOCAL_VARIABLES collection (not trainable)."""
    collections = list(collections or []) + ["local_variables"]
    return get_variable(name, shape, dtype, initializer, regularizer, trainable=False, collections=collections,
                        **kwargs)


# ---- partitioned variables ------------------------------------------------------------------------
class PartitionedVariable:
    """A variable stored as shards along axis 0 (``name/part_0``, ``name/part_1``...); it converts to
    the whole tensor, and ``tf.nn.embedding_lookup`` reads it shard by shard."""

    def __init__(self, name, shape, dtype, parts):
        self._name, self._shape, self._dtype, self._parts = name, TensorShape(shape), dtype, list(parts)

    name = property(lambda self: self._name)
    dtype = property(lambda self: self._dtype)
    shape = property(lambda self: self._shape)

    def get_shape(self):
        return self._shape

    def __iter__(self):
        return iter(self._parts)

    def __len__(self):
        return len(self._parts)

    def _get_variable_list(self):
        return list(self._parts)

    def as_tensor(self):
        from tensorweave.ops.array_ops import concat
        if len(self._parts) == 1:
            return self._parts[0].value()
        return concat([p.value() for p in self._parts], 0)

    def _tw_tensor_(self, dtype=None):
        t = self.as_tensor()
        if dtype is not None and _dt.as_dtype(dtype) is not t.dtype:
            raise ValueError(f"PartitionedVariable {self._name} is {t.dtype.name}, not {_dt.as_dtype(dtype).name}")
        return t

    def __repr__(self):
        return f"<PartitionedVariable '{self._name}' shape={fmt(self._shape)} parts={len(self._parts)}>"


def _partitioned(full, shape, dtype, initializer, partitioner, trainable, collections, validate_shape, constraint):
    if shape is None:
        raise ValueError(f"A partitioned variable needs its shape (variable '{full}')")
    dims = TensorShape(shape).as_list()
    parts = list(partitioner(shape=TensorShape(dims), dtype=dtype))
    if len(parts) != len(dims) or any(p != 1 for p in parts[1:]):
        raise ValueError(f"Partitioner for '{full}' returned {parts}; only partitioning along axis 0 is supported")
    n = max(int(parts[0]), 1)
    sizes = [dims[0] // n + (1 if i < dims[0] % n else 0) for i in range(n)]
    from tensorweave.keras import initializers
    init = initializers.get(initializer) if isinstance(initializer, str) else initializer
    if init is not None and not callable(init):
        raise ValueError(f"A partitioned variable's initializer must be callable (variable '{full}')")
    vars_ = []
    for i, rows in enumerate(sizes):
        vars_.append(_make(f"{full}/part_{i}", [rows] + dims[1:], dtype, init, trainable, collections,
                           validate_shape, constraint))
    return PartitionedVariable(full, dims, dtype, vars_)


def fixed_size_partitioner(num_shards, axis=0):
    """A partitioner splitting axis ``axis`` into ``num_shards`` shards."""
    def partitioner(shape, dtype=None):
        parts = [1] * len(shape)
        parts[axis] = min(num_shards, shape[axis])
        return parts
    return partitioner


def min_max_variable_partitioner(max_partitions=1, axis=0, min_slice_size=256 << 10, bytes_per_string_element=16):
    """A partitioner making shards of at least ``min_slice_size`` bytes, at most ``max_partitions``."""
    def partitioner(shape, dtype):
        dims = TensorShape(shape).as_list()
        size = _dt.as_dtype(dtype).size if _dt.as_dtype(dtype) is not _dt.string else bytes_per_string_element
        total = _math.prod(dims) * size
        n = max(1, min(max_partitions, dims[axis], total // max(min_slice_size, 1)))
        parts = [1] * len(dims)
        parts[axis] = int(n)
        return parts
    return partitioner
