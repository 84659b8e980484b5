"""``tw.Variable``: mutable state that survives across steps and sessions.

>>> import tensorweave as tw
>>> v = tw.Variable([1.0, 2.0], name="v")
>>> _ = v.assign_add([1.0, 1.0])
>>> v.numpy()
array([2., 3.], dtype=float32)
"""
import contextlib
import contextvars
import functools
import inspect
import sys
import threading
import types
import weakref

import numpy as np

from tensorweave.core import derived
from tensorweave.core import dtypes as _dt
from tensorweave.core import errors, upcalls
from tensorweave.core.context import building_graph, ctx, init_scope
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.graph import get_default_graph
from tensorweave.core.registry import get_op
from tensorweave.core.shape import TensorShape, as_shape, fmt
from tensorweave.core.tensor import EagerTensor, Tensor
from tensorweave.ops import state_ops  # noqa: F401 - registers the variable ops

GLOBAL_VARIABLES = "variables"
TRAINABLE_VARIABLES = "trainable_variables"
LOCAL_VARIABLES = "local_variables"

_VAR_HANDLE = get_op("VarHandleOp")
_READ = get_op("ReadVariableOp")
_uid_lock = threading.Lock()
_uid = [0]


def _storage_refs(holder):
    return sys.getrefcount(holder._value)


# References to a stored array when only its owner holds it (measured, not assumed: the
# interpreter's own count of temporaries differs between Python versions).
_UNSHARED_REFS = _storage_refs(types.SimpleNamespace(_value=np.empty(0)))


def _next_uid():
    with _uid_lock:
        _uid[0] += 1
        return _uid[0]


_global_variable_factory = None   # the distribute package's: makes a global variable
# the creators of the open ``variable_creator_scope``s, outermost first (per thread and task)
_creators = contextvars.ContextVar("tensorweave_variable_creators", default=())


@contextlib.contextmanager
def variable_creator_scope(variable_creator):
    """TF's ``tf.variable_creator_scope``: inside, ``tw.Variable(...)`` calls
    ``variable_creator(next_creator, **kwargs)`` with the constructor's arguments by name; it may
    change them, call ``next_creator(**kwargs)`` (the enclosing scope's creator, at the bottom
    the ordinary constructor), or return a variable of its own (a distribution strategy placing
    it elsewhere). The innermost scope's creator is called first.

    >>> import tensorweave as tw
    >>> def frozen(next_creator, **kwargs):
    ...     kwargs["trainable"] = False
    ...     return next_creator(**kwargs)
    >>> with tw.variable_creator_scope(frozen):
    ...     v = tw.Variable(1.0, name="step")
    >>> v.trainable, v.name
    (False, 'step:0')
    """
    token = _creators.set(_creators.get() + (variable_creator,))
    try:
        yield
    finally:
        _creators.reset(token)


@functools.lru_cache(maxsize=None)
def _creator_signature():
    # what a creator receives: the constructor's arguments, and a global variable's placement/sbp
    sig = inspect.signature(Variable.__init__)
    extra = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None) for n in ("placement", "sbp")]
    return sig.replace(parameters=[*sig.parameters.values(), *extra])


class _VariableType(type):
    """Routes ``tw.Variable(...)`` through the open creator scopes (TF's variable creators)."""

    def __call__(cls, *args, **kwargs):
        creators = _creators.get()
        if not creators or cls is not Variable:
            return super().__call__(*args, **kwargs)
        bound = _creator_signature().bind(None, *args, **kwargs)
        bound.apply_defaults()
        named = dict(bound.arguments)
        del named["self"]
        for key in ("placement", "sbp"):       # a global variable's, passed on only when given
            if named[key] is None:
                del named[key]

        def make(**kw):
            # the constructor itself: variables it makes inside (a global variable's per-rank
            # shards) are its parts, not the user's variables, so the creators do not see them
            token = _creators.set(())
            try:
                return type.__call__(Variable, **kw)
            finally:
                _creators.reset(token)
        for creator in creators:
            make = functools.partial(creator, make)
        return make(**named)


def set_global_variable_factory(fn):
    """``fn()`` -> an uninitialized global variable, for ``Variable(..., placement=, sbp=)``."""
    global _global_variable_factory
    _global_variable_factory = fn


class Variable(metaclass=_VariableType):
    """A tensor-valued state cell; reads and assignments are ops (graph nodes or eager calls).

    Args follow ``tf.Variable``: ``initial_value`` (value, tensor or zero-argument callable),
    ``trainable``, ``name``, ``dtype``, ``shape`` (may contain None when
    ``validate_shape=False``), ``constraint``. With ``placement=`` and ``sbp=`` it is a global
    variable created per shard (``tensorweave/distribute/variables.py``).
    """

    _is_variable = True

    def __new__(cls, *args, placement=None, sbp=None, **kwargs):
        if placement is None and sbp is None:
            return object.__new__(cls)
        if _global_variable_factory is None:
            raise ValueError("Variable: placement=/sbp= need the distribute package, loaded on first use. "
                             "Hint: import tensorweave.distribute (tw.placement and tw.sbp load it)")
        return _global_variable_factory()

    def __init__(self, initial_value=None, trainable=True, name=None, dtype=None, shape=None,
                 validate_shape=True, constraint=None, collections=None, caching_device=None,
                 synchronization=None, aggregation=None, use_resource=None, import_scope=None):
        if initial_value is None:
            raise ValueError("Variable: initial_value must be given")
        self.trainable = bool(trainable)
        self.constraint = constraint
        self._value = None
        self._handles = weakref.WeakKeyDictionary()
        self._uid = _next_uid()
        self._eager_handle = None
        self._graph_read = None
        self._initializer_op = None
        base = (name or "Variable").rstrip("/").split(":")[0]
        graph = building_graph()
        if graph is not None and graph.is_function_graph:
            graph = None  # variables created while tracing a function are created once, eagerly
        if graph is None:
            with init_scope():
                self._init_eager(initial_value, dtype, shape, validate_shape, base)
        else:
            self._init_graph(graph, initial_value, dtype, shape, validate_shape, base, collections)

    @classmethod
    def _for_import(cls, graph, name, dtype, shape, trainable):
        """An uninitialized variable of ``graph`` whose nodes come from a saved graph
        (``import_meta_graph``): the loader sets its handle, initializer and read nodes."""
        self = cls.__new__(cls)
        self.trainable, self.constraint, self._value = bool(trainable), None, None
        self._handles = weakref.WeakKeyDictionary()
        self._uid = _next_uid()
        self._eager_handle = self._graph_read = self._initializer_op = self._init_value_tensor = None
        self._dtype, self._shape, self._graph, self._name, self._device = dtype, shape, graph, name + ":0", None
        return self

    # ---- construction ------------------------------------------------------------------
    def _initial_tensor(self, initial_value, dtype):
        if callable(initial_value):
            initial_value = initial_value()
        if isinstance(initial_value, Variable):
            initial_value = initial_value.read_value()
        return convert_to_tensor(initial_value, dtype=dtype) if not isinstance(initial_value, Tensor) or dtype is None \
            else _maybe_cast(initial_value, dtype)

    def _init_eager(self, initial_value, dtype, shape, validate_shape, base):
        init = self._initial_tensor(initial_value, dtype)
        if not isinstance(init, EagerTensor):
            init = _evaluate_initial_value(init, base)
        self._dtype = init.dtype
        self._shape = self._check_shape(init.shape, shape, validate_shape, base)
        self._name = (ctx.name_stack + "/" if ctx.name_stack else "") + base + ":0"
        self._value = np.array(init.numpy(), copy=True)
        derived.track(self._value)
        self._graph = None
        self._init_value_tensor = init
        self._device = ctx.device

    def _init_graph(self, graph, initial_value, dtype, shape, validate_shape, base, collections):
        with graph.name_scope(base) as scope:
            op_name = scope[:-1]
            with graph.control_dependencies(None), graph.name_scope("Initializer"):
                init = self._initial_tensor(initial_value, dtype)
            self._dtype = init.dtype
            self._shape = self._check_shape(init.shape, shape, validate_shape, base)
            self._graph = graph
            self._name = op_name + ":0"
            self._device = ctx.device
            handle = execute(_VAR_HANDLE, [], self._handle_attrs(), op_name + "/")
        self._handles[graph] = handle
        self._init_value_tensor = init
        with graph.name_scope(op_name + "/"):
            self._initializer_op = execute(get_op("AssignVariableOp"), [handle, init],
                                           self._attrs(), "Assign").op
            with graph.control_dependencies(None):
                self._graph_read = execute(_READ, [handle], self._attrs(), "Read/ReadVariableOp")
        if collections is None:
            collections = [GLOBAL_VARIABLES]
            if self.trainable:
                collections.append(TRAINABLE_VARIABLES)
        graph.add_to_collections(collections, self)

    def _check_shape(self, init_shape, shape, validate_shape, base):
        if shape is None:
            return init_shape if validate_shape else TensorShape(None)
        shape = as_shape(shape)
        if not shape.is_compatible_with(init_shape):
            raise ValueError(f"Variable '{base}': initial value has shape {fmt(init_shape)}, "
                             f"incompatible with shape={fmt(shape)}")
        return shape

    def _handle_attrs(self):
        return {"variable": self, "shared_name": self._name[:-2], "dtype": self._dtype, "shape": self._shape}

    def _attrs(self):
        return {"dtype": self._dtype, "shape": self._shape}

    # ---- storage (used by kernels) -------------------------------------------------------
    def _read(self):
        v = self._value
        if v is None:
            raise errors.FailedPreconditionError(
                f"Attempting to use uninitialized value {self._name[:-2]}. "
                "Hint: run tw.compat.v1.global_variables_initializer() (or v.initializer) first.")
        return v

    def _write(self, value):
        self._value = value
        derived.track(value)

    def _storage_for_update(self):
        """The stored array, for a kernel to update in place (copy-on-write).

        Reads hand out the stored array itself, so a value someone still holds (a read
        tensor, a fetched result, a NumPy view, an executor slot) is a reference to it;
        then the storage is copied first and the holders keep the value they read. The
        copy also makes the storage contiguous, writable and the owner of its memory.
        """
        v = self._read()
        if (_storage_refs(self) > _UNSHARED_REFS + 1 or v.base is not None or not v.flags.writeable
                or not v.flags.c_contiguous):
            v = self._value = np.array(v, order="C", copy=True)
            derived.track(v)
        else:
            derived.modified(v)     # e.g. Winograd's transformed filter (kernels/cpu/winograd.py)
        return v

    # ---- handles -------------------------------------------------------------------------------
    @property
    def handle(self):
        graph = building_graph()
        if graph is None:
            if self._eager_handle is None:
                self._eager_handle = EagerTensor(self, _dt.resource)
            return self._eager_handle
        return self.handle_in(graph)

    def handle_in(self, graph):
        h = self._handles.get(graph)
        if h is None:
            outer = getattr(graph, "outer_graph", None)
            if outer is not None:
                # A control-flow branch captures the enclosing graph's handle, so gradients
                # with respect to the variable flow out through the cond/while op.
                h = graph.capture(self.handle_in(outer))
                self._handles[graph] = h
                return h
            with graph.as_default(), graph.control_dependencies(None):
                h = execute(_VAR_HANDLE, [], self._handle_attrs(), self._name[:-2].split("/")[-1])
            self._handles[graph] = h
            if graph.is_function_graph:
                graph.variables.append(self)
        return h

    # ---- reading ---------------------------------------------------------------------------
    def read_value(self):
        """The current value, as a tensor (a fresh read node in graph mode)."""
        graph = building_graph()
        h = self.handle
        if ctx.tapes and self.trainable:
            for tape in ctx.tapes:
                if tape._watch_accessed:
                    tape._watch_handle(h)
        if graph is None:
            return execute(_READ, [h], self._attrs())
        return execute(_READ, [h], self._attrs(), "ReadVariableOp")

    def value(self):
        graph = building_graph()
        if graph is not None and graph is self._graph and not graph._control_deps and not ctx.tapes:
            return self._graph_read
        return self.read_value()

    def _tw_tensor_(self, dtype=None):
        t = self.value()
        if dtype is not None and _dt.as_dtype(dtype) is not self._dtype:
            raise TypeError(f"Variable '{self.name}' of dtype {self._dtype.name} used where "
                            f"{_dt.as_dtype(dtype).name} is required. Hint: tw.cast(v, ...)")
        return t

    def _graph_op(self):
        return self.value().op

    def numpy(self):
        return np.asarray(self._read())

    def __array__(self, dtype=None, copy=None):
        v = np.asarray(self._read())
        return v.astype(dtype) if dtype is not None else (v.copy() if copy else v)

    def eval(self, session=None):
        return self.value().eval(session=session)

    # ---- assignment --------------------------------------------------------------------------
    def _assign_op(self, op_name, value, read_value, name):
        if op_name == "AssignVariableOp" and isinstance(value, np.ndarray):
            value = np.array(value, copy=True)      # as TF: the variable does not alias the caller's array
        value = convert_to_tensor(value, dtype=self._dtype) if not isinstance(value, Tensor) else value
        if value.dtype is not self._dtype:
            raise TypeError(f"Cannot assign a {value.dtype.name} value to variable '{self.name}' of dtype "
                            f"{self._dtype.name}. Hint: tw.cast the value")
        out = execute(get_op(op_name), [self.handle, value], self._attrs(), name)
        if building_graph() is None:
            return self if read_value else None
        return out if read_value else out.op

    def assign(self, value, use_locking=False, name=None, read_value=True):
        """Sets the value; in graph mode returns a tensor whose evaluation performs the assignment."""
        if self.constraint is not None:
            value = self.constraint(convert_to_tensor(value, dtype=self._dtype))
        return self._assign_op("AssignVariableOp", value, read_value, name)

    def assign_add(self, delta, use_locking=False, name=None, read_value=True):
        return self._assign_op("AssignAddVariableOp", delta, read_value, name)

    def assign_sub(self, delta, use_locking=False, name=None, read_value=True):
        return self._assign_op("AssignSubVariableOp", delta, read_value, name)

    def sparse_read(self, indices, name=None):
        """Rows ``indices`` of the variable (its gradient is an IndexedSlices)."""
        h = self.handle
        if ctx.tapes and self.trainable:
            for tape in ctx.tapes:
                if tape._watch_accessed:
                    tape._watch_handle(h)
        idx = convert_to_tensor(indices, dtype_hint=_dt.int32)
        return execute(get_op("ResourceGather"), [h, idx], self._attrs(), name)

    def scatter_add(self, sparse_delta, use_locking=False, name=None):
        return execute(get_op("ResourceScatterAdd"),
                       [self.handle, convert_to_tensor(sparse_delta.indices),
                        convert_to_tensor(sparse_delta.values)], self._attrs(), name)

    def scatter_update(self, sparse_delta, use_locking=False, name=None):
        return execute(get_op("ResourceScatterUpdate"),
                       [self.handle, convert_to_tensor(sparse_delta.indices),
                        convert_to_tensor(sparse_delta.values)], self._attrs(), name)

    # ---- properties ----------------------------------------------------------------------------
    @property
    def name(self):
        return self._name

    @property
    def dtype(self):
        return self._dtype

    @property
    def shape(self):
        return self._shape

    def get_shape(self):
        return self._shape

    @property
    def device(self):
        from tensorweave.core.devices import canonical_device
        return canonical_device(self._device)

    @property
    def graph(self):
        return self._graph

    @property
    def op(self):
        return self.handle.op if building_graph() is not None else None

    @property
    def initializer(self):
        if self._initializer_op is None:
            raise RuntimeError("variable.initializer exists only for variables created in graph mode")
        return self._initializer_op

    @property
    def initial_value(self):
        return self._init_value_tensor

    def initialized_value(self):
        return self.read_value()

    def ref(self):
        return self

    def experimental_ref(self):
        return self

    def __hash__(self):
        return id(self)

    def __repr__(self):
        if self._value is not None and building_graph() is None:
            return (f"<tw.Variable '{self._name}' shape={self._shape} dtype={self._dtype.name}, "
                    f"numpy={np.array2string(np.asarray(self._value), separator=', ')}>")
        return f"<tw.Variable '{self._name}' shape={self._shape} dtype={self._dtype.name}>"

    def __iter__(self):
        return iter(self.value())

    def __len__(self):
        return len(self.value())

    def __bool__(self):
        return bool(self.value())

    def __float__(self):
        return float(self.numpy())

    def __int__(self):
        return int(self.numpy())

    def __getitem__(self, key):
        return self.value()[key]

    # ---- in-place operators (as in TF, v += x assigns) ---------------------------------------
    def __iadd__(self, other):
        out = self.assign_add(other)
        return self if building_graph() is None else out

    def __isub__(self, other):
        out = self.assign_sub(other)
        return self if building_graph() is None else out


def _evaluate_initial_value(t, base):
    """Computes an initial value built inside a traced function (it may use only constants)."""
    try:
        value = upcalls.run_fragment([t])[0]
    except errors.OpError as e:
        raise ValueError(f"Variable '{base}': the initial value {t.name} depends on the function's inputs, "
                         "so it cannot be computed once. Hint: pass a callable or a value that does not depend "
                         f"on the inputs ({e.message.splitlines()[0]})") from None
    return EagerTensor(value, t.dtype)


def _maybe_cast(t, dtype):
    dtype = _dt.as_dtype(dtype)
    if t.dtype is dtype:
        return t
    from tensorweave.ops.math_ops import cast
    return cast(t, dtype)


def global_variables(scope=None):
    return get_default_graph().get_collection(GLOBAL_VARIABLES, scope)


def trainable_variables(scope=None):
    return get_default_graph().get_collection(TRAINABLE_VARIABLES, scope)


def local_variables(scope=None):
    return get_default_graph().get_collection(LOCAL_VARIABLES, scope)


def variables_initializer(var_list, name="init"):
    from tensorweave.ops.control_flow_ops import group
    return group(*[v.initializer for v in var_list], name=name)


def global_variables_initializer():
    """An op that initializes every global variable of the default graph (TF1)."""
    return variables_initializer(global_variables())


def local_variables_initializer():
    return variables_initializer(local_variables(), name="init_local")
