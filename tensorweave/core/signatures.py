"""Clear errors for a wrong call of a public op function (unknown or missing arguments).

Python's own message for ``tw.reduce_sum(x, reduction_indices=1)`` names the function's
internal ``__qualname__`` (``_reducer.<locals>.reduce()``) and nothing else. The public
namespaces (``tw``, ``tw.nn``, ``tw.math``, ``compat.v1``...) therefore export their op functions
through :func:`checked`, which turns a TypeError raised *by the call's binding* (not from
inside the function) into one that names the op, lists what it accepts, suggests the closest
argument, and points at the user's source line. A successful call costs one extra frame, the
only one: other layers that must see a failed op call (``tensorweave.keras`` turns an op on a
KerasTensor into a layer) register a :func:`set_failure_handler` here instead of wrapping again.

>>> import tensorweave as tw
>>> try:
...     tw.reduce_sum([1.0], reduction_indices=0)
... except TypeError as e:
...     print(str(e).splitlines()[0])
reduce_sum() got an unexpected keyword argument 'reduction_indices'
"""
import difflib
import functools
import inspect
import types

from tensorweave.core import errors

# Keyword -> hint for names another API uses (registered by the compat layers, e.g. TF1's).
_KEYWORD_HINTS = {}
_wrapped = {}

# ``handler(fn, args, kwargs, exc)`` for a TypeError raised inside a checked function: returns
# the call's result instead, or :data:`RERAISE`. One for all (set by ``tensorweave.keras``).
RERAISE = object()
_failure_handler = None


def set_failure_handler(handler):
    """Installs the handler of TypeErrors raised inside checked op functions; returns the old one."""
    global _failure_handler
    old, _failure_handler = _failure_handler, handler
    return old


def register_keyword_hint(keyword, hint):
    """Adds the hint shown when ``keyword`` is passed to a function that does not take it."""
    _KEYWORD_HINTS[keyword] = hint


def explain(name, fn, exc):
    """The message for the binding error ``exc`` of a call of ``fn`` (public name ``name``)."""
    msg = str(exc)
    # Python names the function by its __qualname__ (``_reducer.<locals>.reduce``): use the public name.
    qual = getattr(fn, "__qualname__", name)
    if msg.startswith(qual + "()"):
        msg = name + msg[len(qual):]
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    lines = [msg]
    if params:
        lines.append(f"  {name} takes ({', '.join(str(p) for p in params.values())})")
    site = errors.user_frame()
    if site:
        lines.append(f"  Called at: {site}")
    bad = msg.rsplit("'", 2)[-2] if msg.count("'") >= 2 and "keyword argument" in msg else None
    if bad is not None:
        hint = _KEYWORD_HINTS.get(bad)
        close = difflib.get_close_matches(bad, list(params), n=1)
        if hint:
            lines.append(f"  Hint: {hint}")
        elif close:
            lines.append(f"  Hint: did you mean '{close[0]}'?")
    return "\n".join(lines)


def checked(fn, name=None):
    """``fn`` with binding errors explained (see the module doc); the same wrapper for the same ``fn``."""
    if not isinstance(fn, types.FunctionType) or getattr(fn, "_tw_checked", False):
        return fn
    key = (fn, name)
    w = _wrapped.get(key)
    if w is not None:
        return w
    public = name or fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TypeError as e:
            # Only the binding's own error: its traceback ends in this frame (nothing ran in fn).
            if e.__traceback__ is not None and e.__traceback__.tb_next is None:
                raise TypeError(explain(public, fn, e)) from None
            if _failure_handler is not None:
                result = _failure_handler(fn, args, kwargs, e)
                if result is not RERAISE:
                    return result
            raise
    call.__name__ = call.__qualname__ = public
    call._tw_checked = True
    call._tw_failure_handled = True   # (not v1_aliases' checked calls: they have no handler)
    _wrapped[key] = call
    return call


def check_namespace(namespace, packages=("tensorweave.ops.", "tensorweave.compat.")):
    """Replaces the op functions (defined under ``packages``) in a module's ``namespace`` dict
    by their :func:`checked` wrappers; called at the end of each public namespace module."""
    for k, v in list(namespace.items()):
        if (not k.startswith("_") and isinstance(v, types.FunctionType)
                and (v.__module__ or "").startswith(packages)):
            namespace[k] = checked(v, k)
