"""Execution context: eager vs graph building, device scope, active gradient tapes.

State is per thread (like TensorFlow's): each thread has its own graph stack, device
scope and tapes; the eager/graph default is process-wide. A thread also runs under a
``Runtime`` (one per rank, ``runtime/runtime.py``): the one it entered with
``Runtime.as_default()`` (a rank's thread and the runtime's pool threads enter theirs), else
the process's default; :func:`current_runtime` gives it to the lower layers (eager random
state, the intra-op pool), which know it only by those attributes.
"""
import contextlib
import threading


class _State(threading.local):
    def __init__(self):
        self.graph_stack = []      # graphs being built (innermost last)
        self.default_graph = None  # this thread's default graph (core/graph.py, made on first use)
        self.device = None         # device string of the innermost `tw.device` scope
        self.device_functions = []  # TF1 device functions [(fn, ctx.device when entered)], outermost first
        self.tapes = []            # active GradientTapes that record
        self.name_stack = ""       # eager-mode name scope (kept for naming variables)
        self.force_eager = False   # set while a kernel runs Python ops (py_function) in TF1 mode
        self.interpreter = None    # an Interpreter (core/dispatch.py) installed by interpreter_scope
        self.sessions = []         # default Sessions (``sess.as_default()``, innermost last)
        self.runtime = None        # the Runtime this thread runs under (None: the process default)


ctx = _State()
_eager_default = [True]
_default_runtime = [None]      # the process's default Runtime, set by runtime/runtime.py at import


def current_runtime():
    """The calling thread's ``Runtime``: the innermost ``Runtime.as_default()``, else the process's
    default (``runtime.default_runtime()``)."""
    rt = ctx.runtime
    return _default_runtime[0] if rt is None else rt


def set_default_runtime(runtime):
    """Installs the process's default Runtime (``runtime/runtime.py`` does, once, at import)."""
    _default_runtime[0] = runtime


def executing_eagerly():
    """True when ops run at once (no graph is being built)."""
    return not ctx.graph_stack and (_eager_default[0] or ctx.force_eager)


def get_default_session():
    """The innermost ``Session.as_default()`` of this thread, or None (``Tensor.eval`` uses it)."""
    return ctx.sessions[-1] if ctx.sessions else None


def enable_eager_execution():
    _eager_default[0] = True


def disable_eager_execution():
    """TF1 mode: ops add nodes to the default graph; run them with a Session."""
    _eager_default[0] = False


def building_graph():
    """The graph that op calls add nodes to, or None when executing eagerly."""
    if ctx.graph_stack:
        return ctx.graph_stack[-1]
    if not (_eager_default[0] or ctx.force_eager):
        from tensorweave.core.graph import get_default_graph
        return get_default_graph()
    return None


@contextlib.contextmanager
def init_scope():
    """Leaves every graph being built: code inside runs eagerly (used to create variables once).

    In TF1 mode (eager disabled) the innermost graph that is not a function's stays in effect, as in
    TensorFlow (so an optimizer's slots land in the graph being built, also inside another
    ``Graph.as_default()``).
    """
    saved_graphs, saved_tapes = ctx.graph_stack, ctx.tapes
    keep = [g for g in saved_graphs if not getattr(g, "is_function_graph", False)][-1:]
    ctx.graph_stack, ctx.tapes = keep, []
    try:
        yield
    finally:
        ctx.graph_stack, ctx.tapes = saved_graphs, saved_tapes


@contextlib.contextmanager
def eager_mode():
    """Runs the body eagerly on this thread, whatever graph is being built and with no tapes
    (kernels that call back into Python, like py_function, use it)."""
    saved = ctx.graph_stack, ctx.tapes, ctx.force_eager
    ctx.graph_stack, ctx.tapes, ctx.force_eager = [], [], True
    try:
        yield
    finally:
        ctx.graph_stack, ctx.tapes, ctx.force_eager = saved
