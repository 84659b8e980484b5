"""One op call, several interpreters: run a kernel now (eager), add a node (graph), or
(distribute package) plan a global op; see :class:`Interpreter`.

Every public op function ends in :func:`execute`. In eager mode it looks up the kernel
for the current device type and runs it on the input values; shape/dtype inference is
skipped on this hot path (the wrappers check dtypes) and only runs to explain a kernel
failure. In graph mode it runs the op's ``infer`` rule, so mistakes surface at
construction, and adds an :class:`Operation`. Active gradient tapes record either way.
"""
import contextlib
import threading

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.context import _eager_default, ctx
from tensorweave.core.graph import SymbolicTensor, get_default_graph
from tensorweave.core.registry import get_op
from tensorweave.core.shape import fmt
from tensorweave.core.tensor import EagerTensor, Tensor

_NO_ATTRS = {}

# A hook around every eager kernel call, ``hook(kernel, op_type, device, inputs, attrs)``, or
# None. ``tw.profiler`` sets it (so registered kernels are never swapped); one global read per
# eager op when unset.
_eager_hook = None


def set_eager_hook(hook):
    """Installs (or with None removes) the eager kernel hook; returns the previous one."""
    global _eager_hook
    old, _eager_hook = _eager_hook, hook
    return old


class Interpreter:
    """What an op call means: ``execute(opdef, inputs, attrs, name)`` -> output tensor(s).

    :data:`EAGER` runs the kernel now, :data:`GRAPH` adds a node to the graph being built;
    the distribute package adds a global interpreter (per-op SBP planning and boxing on
    global tensors). :func:`interpreter_scope` installs one for the current thread; without
    one, :func:`execute` picks graph or eager as TensorFlow does.
    """

    name = "interpreter"

    def execute(self, opdef, inputs, attrs, name):
        raise NotImplementedError

    def __repr__(self):
        return f"<{self.name} interpreter>"


class EagerInterpreter(Interpreter):
    """Runs the kernel now, whatever graph this thread is building (the body is inlined in
    :func:`execute`, the hot path; this re-enters it with no graph and no interpreter set)."""
    name = "eager"

    def execute(self, opdef, inputs, attrs, name):
        saved = ctx.graph_stack, ctx.interpreter, ctx.force_eager
        ctx.graph_stack, ctx.interpreter, ctx.force_eager = [], None, True
        try:
            return execute(opdef, inputs, attrs, name)
        finally:
            ctx.graph_stack, ctx.interpreter, ctx.force_eager = saved


class GraphInterpreter(Interpreter):
    name = "graph"

    def execute(self, opdef, inputs, attrs, name):
        return _build(opdef, inputs, attrs, name)


EAGER = EagerInterpreter()
GRAPH = GraphInterpreter()

# Interpreter scopes open on any thread, plus one once global tensors exist: while it is 0,
# execute() skips the thread-local read and the input scan (a global read costs ~10 ns, the
# thread-local one ~45 ns of a ~1.25 us eager op).
_scopes_lock = threading.Lock()
_scoped = 0              # a plain global (the cheapest read)
_global_interpreter = None   # the distribute package's, for ops with a global tensor input


def set_global_interpreter(interpreter):
    """Sends op calls with a global-tensor input (``t.is_global``) to ``interpreter`` (the
    distribute package calls this when it makes its first global tensor)."""
    global _global_interpreter, _scoped
    with _scopes_lock:
        if _global_interpreter is None:
            _scoped += 1
        _global_interpreter = interpreter


def _has_global(inputs):
    for t in inputs:
        if getattr(t, "is_global", False):
            return True
    return False


def current_interpreter(inputs=()):
    """The interpreter an op call on this thread (with these inputs) goes to now."""
    if ctx.interpreter is not None:
        return ctx.interpreter
    if _global_interpreter is not None and _has_global(inputs):
        return _global_interpreter
    return GRAPH if ctx.graph_stack or not (_eager_default[0] or ctx.force_eager) else EAGER


@contextlib.contextmanager
def interpreter_scope(interpreter):
    """Op calls on this thread inside go to ``interpreter``.

    >>> import tensorweave as tw
    >>> class Counting(EagerInterpreter):
    ...     calls = 0
    ...     def execute(self, opdef, inputs, attrs, name):
    ...         Counting.calls += 1
    ...         return super().execute(opdef, inputs, attrs, name)
    >>> with interpreter_scope(Counting()):
    ...     y = tw.constant(2.0) * 3.0
    >>> float(y), Counting.calls > 0
    (6.0, True)
    """
    old, ctx.interpreter = ctx.interpreter, interpreter
    global _scoped
    with _scopes_lock:
        _scoped += 1
    try:
        yield interpreter
    finally:
        ctx.interpreter = old
        with _scopes_lock:
            _scoped -= 1


def execute(opdef, inputs, attrs=_NO_ATTRS, name=None):
    """Runs or adds op ``opdef`` on ``inputs`` (Tensors) with ``attrs``; returns its output(s).

    Dispatches to the thread's interpreter (:func:`current_interpreter`). The eager one's
    body is inlined here, the hot path: a call more would cost ~0.1 us of a ~1.3 us op."""
    if ctx.graph_stack or not (_eager_default[0] or ctx.force_eager) or (
            _scoped and (ctx.interpreter is not None or _has_global(inputs))):
        return current_interpreter(inputs).execute(opdef, inputs, attrs, name)
    device = ctx.device
    try:
        if device is None:
            kernel = opdef.kernels["CPU"]
        else:
            kernel, device = _device_kernel(opdef, device)
        if attrs and any(k[0] == "_" for k in attrs):
            attrs = {k: v for k, v in attrs.items() if k[0] != "_"}  # graph-only metadata, as in plans
        if _eager_hook is None:
            out = kernel(*[t._value for t in inputs], **attrs)
        else:
            out = _eager_hook(kernel, opdef.name, device, [t._value for t in inputs], attrs)
    except Exception as e:  # noqa: BLE001 - re-raised with the op's context
        raise _eager_error(opdef, inputs, attrs, name, e) from e
    n = opdef.num_outputs
    if n == 1:
        result = EagerTensor(out, None, device)
        if ctx.tapes:
            _record_eager(opdef, inputs, (result,), attrs)
        return result
    result = tuple(EagerTensor(o, None, device) for o in out)
    if ctx.tapes:
        _record_eager(opdef, inputs, result, attrs)
    return result


def raw_op(op_name, inputs, attrs=None, name=None):
    """Calls any registered op by name: ``tw.raw_op("AddV2", [x, y])``."""
    from tensorweave.core.convert import convert_to_tensor
    return execute(get_op(op_name), [convert_to_tensor(i) for i in inputs], attrs or {}, name)


def _device_kernel(opdef, device):
    """(kernel, placed device name) for an eager op under ``tw.device(device)``."""
    from tensorweave.core.devices import kernel_for
    return kernel_for(opdef, device)


# ---- graph building -----------------------------------------------------------------------
def _build(opdef, inputs, attrs, name):
    graph = get_default_graph()
    inputs = [t if type(t) is SymbolicTensor and t.op.graph is graph else graph.capture(t)
              for t in inputs]
    site = errors.user_frame()
    try:
        specs = opdef.infer(inputs, attrs)
    except (ValueError, TypeError, IndexError) as e:
        node = graph.unique_name(name or opdef.name, mark_as_used=False)
        raise errors.InvalidArgumentError(
            _describe(str(e), opdef.name, f"node '{node}'", inputs, site)) from None
    if isinstance(specs, tuple) and len(specs) == 2 and isinstance(specs[1], _dt.DType):
        specs = [specs]
    op = graph._create_op(opdef, inputs, dict(attrs), name, specs, site)
    outs = op.outputs
    if ctx.tapes:
        _record_graph(op)
    if opdef.num_outputs == 1:
        return outs[0]
    if opdef.num_outputs == 0:
        return op  # ops run for their effect (NoOp, PrintV2) are used as control inputs
    return tuple(outs)


# ---- errors -----------------------------------------------------------------------------
def _describe(message, op_type, where, inputs, site, hint=None):
    shapes = ", ".join(fmt(t.shape) if isinstance(t, Tensor) else type(t).__name__ for t in inputs)
    dts = ", ".join(t.dtype.name if isinstance(t, Tensor) else "?" for t in inputs)
    msg = message.rstrip(".")
    text = (f"{msg} for {where} (op: '{op_type}') with input shapes: [{shapes}] "
            f"and dtypes: [{dts}].")
    if site:
        text += f"\n  Created at: {site}"
    if hint and "Hint:" not in msg:
        text += f"\n  Hint: {hint}"
    return text


def invalid_input(opdef, inputs, exc, name=None):
    """The InvalidArgumentError for inputs a wrapper rejected before dispatch (e.g. mixed dtypes)."""
    site = errors.user_frame()
    if ctx.graph_stack or not (_eager_default[0] or ctx.force_eager):
        node = get_default_graph().unique_name(name or opdef.name, mark_as_used=False)
        where = f"node '{node}'"
    else:
        where = f"'{name or opdef.name}' (eager)"
    return errors.InvalidArgumentError(_describe(str(exc), opdef.name, where, inputs, site))


def _eager_error(opdef, inputs, attrs, name, exc):
    site = errors.user_frame()
    where = f"'{name or opdef.name}' (eager)"
    sym = [t for t in inputs if isinstance(t, SymbolicTensor)]
    if sym:
        return errors.InvalidArgumentError(
            f"Op '{opdef.name}' got the symbolic tensor '{sym[0].name}' while executing eagerly. "
            "Hint: build the graph inside `with graph.as_default():` or use tw.function.")
    if "CPU" not in opdef.kernels and ctx.device is None:
        try:
            opdef.kernel("CPU")
        except errors.NotFoundError as e:
            return e
    if isinstance(exc, errors.OpError):
        return type(exc)(_describe(exc.message, opdef.name, where, inputs, site))
    try:  # let the shape rule explain the failure when it can
        opdef.infer(inputs, attrs)
    except (ValueError, TypeError, IndexError) as e:
        return errors.InvalidArgumentError(_describe(str(e), opdef.name, where, inputs, site))
    except Exception:  # noqa: BLE001 - fall back to the kernel's own message
        pass
    return errors.InvalidArgumentError(
        _describe(f"{type(exc).__name__}: {exc}", opdef.name, where, inputs, site))


# ---- tape recording ----------------------------------------------------------------------
class EagerOp:
    """What the tape remembers of one eager op call (looks like an Operation to gradient rules)."""

    __slots__ = ("opdef", "type", "inputs", "outputs", "attrs", "grad_fn")

    def __init__(self, opdef, inputs, outputs, attrs, grad_fn=None):
        self.opdef = opdef
        self.type = opdef.name
        self.inputs = tuple(inputs)
        self.outputs = outputs
        self.attrs = attrs
        self.grad_fn = grad_fn

    def get_attr(self, name):
        return self.attrs[name]

    name = property(lambda self: self.type)


def _record_eager(opdef, inputs, outputs, attrs):
    rec = None
    for tape in ctx.tapes:
        if tape._should_record(inputs):
            if rec is None:
                rec = EagerOp(opdef, inputs, outputs, attrs)
            tape._record(rec)


def _record_graph(op):
    for tape in ctx.tapes:
        if tape._should_record(op.inputs):
            tape._record(op)


def record_custom(op_like):
    """Records a custom op record (``tw.custom_gradient``, function calls) on active tapes."""
    for tape in ctx.tapes:
        if tape._should_record(op_like.inputs):
            tape._record(op_like)
