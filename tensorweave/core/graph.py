"""Dataflow graphs: ``Graph``, ``Operation`` (a node) and ``SymbolicTensor`` (an edge).

>>> import tensorweave as tw
>>> g = tw.Graph()
>>> with g.as_default():
...     a = tw.constant(2.0, name="a")
...     b = tw.multiply(a, 3.0, name="b")
>>> b.name, b.op.type, [t.name for t in b.op.inputs]
('b:0', 'Mul', ['a:0', 'Const:0'])
>>> with tw.compat.v1.Session(graph=g) as sess:
...     float(sess.run(b))
6.0
"""
import contextlib
import re
import threading

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import upcalls
from tensorweave.core.context import _eager_default, ctx, get_default_session
from tensorweave.core.shape import as_shape, fmt
from tensorweave.core.tensor import Tensor

_VALID_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/>]*$")
# {id(tensor): TensorShape} while this thread plans a graph for concrete feed shapes
# (``refined_shapes``): the graph itself is never changed, other threads see its own shapes.
# ``_refining`` counts the refinements under way in all threads, so that ``shape`` costs one
# global read when there are none (a thread-local read costs ~10x that).
class _Refinement(threading.local):
    shapes = None


_refinement = _Refinement()
_refining = 0
_refining_lock = threading.Lock()


def _session_for(graph, session):
    """The Session that ``eval``/``run`` of a node of ``graph`` uses: ``session`` or the default one."""
    s = session or get_default_session()
    if s is None:
        raise ValueError("Cannot evaluate tensor using `eval()`: No default session is registered. "
                         "Hint: use `with sess.as_default():` or pass session=sess.")
    if s.graph is not graph:
        raise ValueError("Cannot use the given session to evaluate a tensor: the tensor's graph is "
                         "different from the session's graph.")
    return s


class SymbolicTensor(Tensor):
    """An output of a graph node; its value exists only when the graph runs."""

    __slots__ = ("op", "value_index", "_shape", "_dtype", "_keras_mask", "__weakref__")

    def __init__(self, op, value_index, shape, dtype):
        self.op = op
        self.value_index = value_index
        self._shape = as_shape(shape)
        self._dtype = dtype

    @property
    def dtype(self):
        return self._dtype

    @property
    def shape(self):
        if _refining:
            refined = _refinement.shapes
            if refined is not None:
                return refined.get(id(self), self._shape)
        return self._shape

    def set_shape(self, shape):
        try:
            self._shape = self._shape.merge_with(shape)
        except ValueError:
            raise ValueError(f"Tensor '{self.name}' has shape {fmt(self._shape)}, incompatible with "
                             f"set_shape({fmt(shape)})") from None

    @property
    def name(self):
        return f"{self.op.name}:{self.value_index}"

    @property
    def graph(self):
        return self.op.graph

    @property
    def device(self):
        return self.op.device

    def consumers(self):
        return [op for op in self.op.graph._ops if any(t is self for t in op.inputs)]

    def eval(self, feed_dict=None, session=None):
        """Runs the default (or given) Session to compute this tensor's value."""
        return _session_for(self.graph, session).run(self, feed_dict)

    def numpy(self):
        raise NotImplementedError(
            f"Tensor '{self.name}' is symbolic (a graph node); .numpy() needs a value. "
            "Hint: run it with a Session, or call the function eagerly.")

    def __array__(self, dtype=None, copy=None):
        raise TypeError(f"Cannot convert the symbolic tensor '{self.name}' to a NumPy array. "
                        "Hint: evaluate it with Session.run first.")

    def __bool__(self):
        raise TypeError(f"Using the symbolic tensor '{self.name}' as a Python bool is not allowed "
                        "in graph execution. Hint: use tw.cond for data-dependent control flow.")

    def __len__(self):
        d = self._shape[0] if self._shape.rank else None
        if d is None:
            raise TypeError(f"len() of tensor '{self.name}' with unknown first dimension {fmt(self._shape)}")
        return d

    def __iter__(self):
        n = len(self)
        return iter(upcalls.unstack(self, num=n))

    def __index__(self):
        raise TypeError(f"Symbolic tensor '{self.name}' cannot be used as a Python index.")

    def __repr__(self):
        return f"<tw.Tensor '{self.name}' shape={self._shape} dtype={self._dtype.name}>"

    __str__ = __repr__


class Operation:
    """A node of a graph: an op type, inputs, attrs, outputs, a device and where it was created."""

    __slots__ = ("graph", "name", "type", "opdef", "inputs", "outputs", "attrs", "device",
                 "control_inputs", "traceback", "_id", "_extra", "__weakref__")

    def __init__(self, graph, opdef, name, inputs, attrs, specs, device, control_inputs, traceback):
        self.graph = graph
        self.name = name
        self.type = opdef.name
        self.opdef = opdef
        self.inputs = tuple(inputs)
        self.attrs = attrs
        self.device = device
        self.control_inputs = control_inputs
        self.traceback = traceback
        self._id = len(graph._ops)
        self._extra = None
        self.outputs = [SymbolicTensor(self, i, s, d) for i, (s, d) in enumerate(specs)]

    def get_attr(self, name):
        try:
            return self.attrs[name]
        except KeyError:
            raise ValueError(f"Operation '{self.name}' ({self.type}) has no attr named '{name}'") from None

    def values(self):
        return tuple(self.outputs)

    @property
    def grad_fn(self):
        """The gradient ``gradient_override_map`` gave this op; None for its op type's own."""
        return _overridden_gradient if self._extra and "gradient_op_type" in self._extra else None

    @property
    def node_def(self):
        return {"name": self.name, "op": self.type, "input": [t.name for t in self.inputs] +
                ["^" + c.name for c in self.control_inputs], "device": self.device or "",
                "attr": {k: v for k, v in self.attrs.items() if not k.startswith("_")}}

    def run(self, feed_dict=None, session=None):
        _session_for(self.graph, session).run(self, feed_dict)

    def __repr__(self):
        return f"<tw.Operation '{self.name}' type={self.type}>"


# Writes TF1's GraphDef of a graph; the format lives above this layer (compat/v1_graph_def.py sets it).
graph_def_writer = [None]


class Graph:
    """A dataflow graph. ``with g.as_default():`` makes op calls add nodes to ``g``."""

    is_function_graph = False

    def __init__(self):
        self._ops = []
        self._by_name = {}
        self._names_in_use = {}
        self._name_stack = ""
        self._control_deps = []       # stack of lists of Operations
        self._collections = {}
        self._lock = threading.RLock()
        self._finalized = False
        self._version = 0             # bumped on every new op; executors cache plans by it
        self.seed = None
        self._last_stateful = None    # for automatic control dependencies (FuncGraph)
        self._variable_handles = {}
        self._left_out = {}           # node name -> why an imported graph lacks it (import_meta_graph)
        self._gradient_overrides = {}  # op type -> registered gradient name (gradient_override_map)

    # ---- context -------------------------------------------------------------------------
    @contextlib.contextmanager
    def as_default(self):
        ctx.graph_stack.append(self)
        try:
            yield self
        finally:
            ctx.graph_stack.pop()

    @property
    def finalized(self):
        return self._finalized

    def finalize(self):
        self._finalized = True

    @property
    def version(self):
        return self._version

    # ---- names -----------------------------------------------------------------------------
    def unique_name(self, name, mark_as_used=True):
        if self._name_stack:
            name = self._name_stack + "/" + name
        key = name.lower()
        i = self._names_in_use.get(key, 0)
        if mark_as_used:
            self._names_in_use[key] = i + 1
        if i > 0:
            base = key
            while True:
                candidate = f"{name}_{i}"
                if candidate.lower() not in self._names_in_use:
                    break
                i += 1
            if mark_as_used:
                self._names_in_use[candidate.lower()] = 1
                self._names_in_use[base] = i + 1
            return candidate
        return name

    @contextlib.contextmanager
    def name_scope(self, name):
        old = self._name_stack
        if name is None or name == "":
            new = ""
        elif name.endswith("/"):
            new = name[:-1]
        else:
            if not _VALID_NAME.match(name):
                raise ValueError(f"'{name}' is not a valid scope name")
            new = self.unique_name(name)
        self._name_stack = new
        try:
            yield (new + "/") if new else ""
        finally:
            self._name_stack = old

    def get_name_scope(self):
        return self._name_stack

    # ---- dependencies and devices ----------------------------------------------------------
    @contextlib.contextmanager
    def control_dependencies(self, control_inputs):
        if control_inputs is None:
            saved, self._control_deps = self._control_deps, []
            try:
                yield
            finally:
                self._control_deps = saved
            return
        ops = []
        for c in control_inputs:
            c = getattr(c, "op", c) if not isinstance(c, Operation) else c
            if hasattr(c, "_graph_op"):
                c = c._graph_op()
            if not isinstance(c, Operation):
                raise TypeError(f"Control input must be an Operation or Tensor, got {c!r}")
            if c.graph is not self:
                c = self._capture_control(c)
            ops.append(c)
        self._control_deps.append(ops)
        try:
            yield
        finally:
            self._control_deps.pop()

    def _capture_control(self, op):
        raise ValueError(f"Control input {op.name} is from a different graph")

    @contextlib.contextmanager
    def gradient_override_map(self, op_type_map):
        """TF1's ``with g.gradient_override_map({"Identity": "MyGrad"}):``: ops of those types made
        inside take the gradient registered with ``@tf.RegisterGradient("MyGrad")`` (looked up when
        gradients are computed)."""
        if not isinstance(op_type_map, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                        for k, v in op_type_map.items()):
            raise TypeError(f"gradient_override_map: op_type_map must map op type strings to gradient names, "
                            f"got {op_type_map!r}")
        saved = self._gradient_overrides
        self._gradient_overrides = {**saved, **op_type_map}
        try:
            yield
        finally:
            self._gradient_overrides = saved

    def device(self, device_name):
        """``with g.device("/cpu:1"):`` — the same scope as ``tw.device``."""
        from tensorweave.core.devices import device
        return device(device_name)

    # ---- nodes -----------------------------------------------------------------------------
    def _create_op(self, opdef, inputs, attrs, name, specs, traceback):
        if self._finalized:
            raise RuntimeError("Graph is finalized and cannot be modified.")
        with self._lock:
            if name and name.endswith("/") and name[:-1] not in self._by_name:
                # As in TF, a name ending in '/' (a name scope's) is taken as it is, not made unique.
                name = name[:-1]
                self._names_in_use.setdefault(name.lower(), 1)
            else:
                name = self.unique_name(name or opdef.name)
            control = []
            for deps in self._control_deps:
                for c in deps:
                    if c not in control and not any(t.op is c for t in inputs):
                        control.append(c)
            if self.is_function_graph and opdef.stateful:
                if self._last_stateful is not None and self._last_stateful not in control:
                    control.append(self._last_stateful)
            device = ctx.device
            op = Operation(self, opdef, name, inputs, attrs, specs, device, control, traceback)
            if ctx.device_functions:
                _apply_device_functions(op)
            if opdef.name in self._gradient_overrides:
                op._extra = {**(op._extra or {}), "gradient_op_type": self._gradient_overrides[opdef.name]}
            if self.is_function_graph and opdef.stateful:
                self._last_stateful = op
            self._ops.append(op)
            self._by_name[name] = op
            self._version += 1
        return op

    def get_operations(self):
        return list(self._ops)

    def get_operation_by_name(self, name):
        try:
            return self._by_name[name]
        except KeyError:
            why = self._left_out.get(name)
            raise KeyError(f"The name '{name}' refers to an Operation not in the graph."
                           + (f" It was left out when the graph was imported: {why}." if why else "")) from None

    def get_tensor_by_name(self, name):
        if ":" not in name:
            raise ValueError(f"The name '{name}' looks like an Operation name; tensor names end in ':N'.")
        op_name, idx = name.rsplit(":", 1)
        op = self.get_operation_by_name(op_name)
        try:
            return op.outputs[int(idx)]
        except IndexError:
            raise KeyError(f"The name '{name}' refers to a Tensor which does not exist: "
                           f"operation '{op_name}' has {len(op.outputs)} outputs.") from None

    def as_graph_def(self, from_version=None, add_shapes=False):
        """This graph as a ``tf.GraphDef`` (tensorweave's safe format; see ``tf.import_graph_def``)."""
        if graph_def_writer[0] is None:
            raise RuntimeError("Graph.as_graph_def: import tensorweave.compat.v1 first (it defines the GraphDef)")
        return graph_def_writer[0](self)

    def as_graph_element(self, obj):
        if isinstance(obj, str):
            return self.get_tensor_by_name(obj) if ":" in obj else self.get_operation_by_name(obj)
        return obj

    # ---- capture ---------------------------------------------------------------------------
    def capture(self, value):
        """Returns a tensor of this graph for ``value`` (eager tensors become constants)."""
        if isinstance(value, SymbolicTensor):
            if value.op.graph is self:
                return value
            return self._capture_outer(value)
        from tensorweave.core.tensor import EagerTensor
        if isinstance(value, EagerTensor):
            if value._dtype is _dt.resource:
                return self._capture_resource(value)
            with self.as_default():
                return upcalls.constant(value._value, dtype=value._dtype)
        raise TypeError(f"Cannot use {value!r} as a tensor of {self}")

    def _capture_outer(self, tensor):
        raise ValueError(
            f"Tensor '{tensor.name}' must be from the same graph as the other inputs: it belongs to a "
            "different graph. Hint: create all tensors of a computation inside one `with g.as_default()`.")

    def _capture_resource(self, handle):
        var = handle._value
        return var.handle_in(self)

    # ---- collections ---------------------------------------------------------------------
    def add_to_collection(self, name, value):
        self._collections.setdefault(name, []).append(value)

    def add_to_collections(self, names, value):
        for n in ([names] if isinstance(names, str) else names):
            self.add_to_collection(n, value)

    def get_collection(self, name, scope=None):
        items = list(self._collections.get(name, []))
        if scope is None:
            return items
        pat = re.compile(scope)
        return [i for i in items if pat.match(getattr(i, "name", ""))]

    def get_collection_ref(self, name):
        return self._collections.setdefault(name, [])

    def get_all_collection_keys(self):
        return list(self._collections)

    def __repr__(self):
        return f"<tw.Graph at {id(self):#x} with {len(self._ops)} ops>"


class FuncGraph(Graph):
    """A graph traced from a Python function; may capture tensors of an outer graph.

    Captured outer tensors become placeholders; ``captures`` pairs each outer tensor
    with its placeholder so the caller can feed it.
    """

    is_function_graph = True

    def __init__(self, name, outer_graph=None):
        super().__init__()
        self.name = name
        self.outer_graph = outer_graph
        self.captures = []            # [(outer tensor, inner placeholder)]
        self._capture_map = {}
        self.inputs = []
        self.outputs = []
        self.variables = []
        self.seed = outer_graph.seed if outer_graph is not None else None

    def _capture_outer(self, tensor):
        key = id(tensor)
        hit = self._capture_map.get(key)
        if hit is not None:
            return hit[1]
        with self.as_default(), self.control_dependencies(None):
            ph = upcalls.placeholder(tensor.dtype, shape=tensor.shape, name="capture")
        self._capture_map[key] = (tensor, ph)
        self.captures.append((tensor, ph))
        return ph

    def _capture_control(self, op):
        # A control dependency on an outer op is satisfied before the function runs.
        return None


def _overridden_gradient(op, *grads):
    from tensorweave.core.registry import NOT_DIFFERENTIABLE, named_gradient
    fn = named_gradient(op._extra["gradient_op_type"])
    if fn is NOT_DIFFERENTIABLE:
        return [None] * len(op.inputs)
    out = fn(op, *grads)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _apply_device_functions(op):
    """TF1 device functions (``tw.device(fn)``): each, outermost first, returns the op's device
    (None or "" leaves it); a device string opened inside the innermost function wins."""
    from tensorweave.core.devices import DeviceSpec
    for fn, _ in ctx.device_functions:
        d = fn(op)
        if d:
            d = d.to_string() if hasattr(d, "to_string") else str(d)
            op.device = DeviceSpec.from_string(op.device).merge_from(DeviceSpec.from_string(d)).to_string() \
                if op.device else d
    if ctx.device and ctx.device != ctx.device_functions[-1][1]:
        op.device = ctx.device


def get_default_graph():
    """The graph new ops go to: the innermost ``as_default`` graph, else this thread's default
    graph (made on first use).

    As in TensorFlow, the default graph is a property of the thread: another thread (a rank,
    a worker thread) starts with a default graph of its own, and uses another thread's graph only
    inside ``with g.as_default():``. So two threads building TF1 graphs never add nodes to one
    graph.

    >>> import threading
    >>> g = get_default_graph()
    >>> seen = []
    >>> t = threading.Thread(target=lambda: seen.append(get_default_graph())); t.start(); t.join()
    >>> seen[0] is g, get_default_graph() is g
    (False, True)
    """
    if ctx.graph_stack:
        return ctx.graph_stack[-1]
    g = ctx.default_graph
    if g is None:
        g = ctx.default_graph = Graph()
    return g


def reset_default_graph():
    """Clears this thread's default graph (``tf.compat.v1.reset_default_graph``): the next op goes
    to a new, empty one. Other threads keep theirs."""
    if ctx.graph_stack:
        raise AssertionError("Do not use reset_default_graph() inside a `with graph.as_default()` block.")
    ctx.default_graph = Graph()


@contextlib.contextmanager
def name_scope(name, default_name=None, values=None):
    """``with tw.name_scope("layer"):`` prefixes the names of ops (and, eagerly, variables) created inside."""
    name = name or default_name
    if ctx.graph_stack or not _eager_default[0] and not ctx.force_eager:
        with get_default_graph().name_scope(name) as scope:
            yield scope
        return
    old = ctx.name_stack
    ctx.name_stack = (old + "/" if old else "") + name if name else ""
    try:
        yield ctx.name_stack + "/" if ctx.name_stack else ""
    finally:
        ctx.name_stack = old


def is_symbolic(x):
    return isinstance(x, SymbolicTensor)


def get_static_value(tensor, partial=False):
    """The value of ``tensor`` if it is known without running anything (eager, or constant)."""
    return constant_value(tensor)


def constant_value(t):
    """The value of a graph tensor when it is known at construction time, else None."""
    from tensorweave.core.tensor import EagerTensor
    if isinstance(t, EagerTensor):
        return np.asarray(t._value)
    if not isinstance(t, SymbolicTensor):
        return None
    op = t.op
    if op.type == "Const":
        return op.attrs["value"]
    if op.type == "Shape" and op.inputs[0].shape.is_fully_defined():
        return np.array(op.inputs[0].shape.as_list(), dtype=op.attrs["out_type"].np_dtype)
    if op.type in ("Pack",):
        vals = [constant_value(i) for i in op.inputs]
        if all(v is not None for v in vals):
            return np.stack(vals, axis=op.attrs["axis"])
    if op.type == "Identity":
        return constant_value(op.inputs[0])
    if op.type == "Cast":
        v = constant_value(op.inputs[0])
        return None if v is None else v.astype(op.attrs["DstT"].np_dtype)
    return None


@contextlib.contextmanager
def refined_shapes(ops, feed_shapes):
    """In this thread, the graph tensors of ``ops`` (topologically ordered) show the shapes they
    take when the tensors in ``feed_shapes`` (``{tensor: shape}``) have those shapes: each op's
    shape rule runs again on the refined inputs (as TF's shape inference does with feeds), so
    a placeholder's ``None`` batch dimension becomes the fed one downstream. Ops whose rule
    cannot say more keep their graph shapes. Nothing of the graph is modified.

    >>> import numpy as np, tensorweave as tw
    >>> with tw.Graph().as_default():
    ...     x = tw.compat.v1.placeholder(tw.float32, [None, 4])
    ...     y = tw.reshape(tw.matmul(x, tw.ones((4, 3))), [-1])
    ...     with refined_shapes([y.op.inputs[0].op, y.op], {x: (5, 4)}):
    ...         print(y.shape)
    ...     print(y.shape)
    (15,)
    (None,)
    """
    shapes = {id(t): t._shape.merge_with(as_shape(s)) for t, s in feed_shapes.items()}
    global _refining
    previous = _refinement.shapes
    _refinement.shapes = shapes
    with _refining_lock:
        _refining += 1
    try:
        for op in ops:
            # an op may depend on a fed shape through a value (a Shape op's), not its inputs' shapes
            if not all(t._shape.is_fully_defined() for t in op.outputs):
                _refine_op(op, shapes)
        yield
    finally:
        _refinement.shapes = previous
        with _refining_lock:
            _refining -= 1


def _refine_op(op, shapes):
    try:
        specs = op.opdef.infer(list(op.inputs), op.attrs)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, NotImplementedError):
        return          # the rule cannot say more: the graph's shapes stand
    if isinstance(specs, tuple) and len(specs) == 2 and isinstance(specs[1], _dt.DType):
        specs = [specs]
    for out, spec in zip(op.outputs, specs):
        try:
            refined = out._shape.merge_with(as_shape(spec[0]))
        except ValueError:
            continue
        if refined != out._shape:
            shapes[id(out)] = refined
