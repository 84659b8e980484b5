"""Assertions (``tf.Assert``, ``tf.assert_equal``/``greater``/``less``/``rank``): they raise
``InvalidArgumentError`` at once when eager, and when the ``Assert`` op runs in a graph (its op is
returned; put it in ``control_dependencies`` or fetch it).

>>> import tensorweave as tw
>>> try:
...     tw.assert_less(tw.constant([1, 5]), 3, message="too big")
... except tw.errors.InvalidArgumentError as e:
...     print(str(e).splitlines()[0])
too big
"""
import numpy as np

from tensorweave.core import errors
from tensorweave.core.context import executing_eagerly
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.graph import constant_value, get_default_graph
from tensorweave.core.registry import get_op, register_kernel, register_op
from tensorweave.core.tensor import Tensor
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as R

__all__ = ["Assert", "assert_equal", "assert_greater", "assert_less", "assert_rank"]

# One Assert op for tw.Assert and compat.v1's tf.Assert (TF has one): its message prints every data
# entry in brackets, as TF's kernel does, in graphs and eagerly alike.
register_op("Assert", infer=lambda inputs, attrs: [], num_outputs=0, stateful=True)


def _summary(values, template, summarize):
    it = iter(values)
    parts = []
    for item in template:
        if item is None:
            v = np.asarray(next(it))
            flat = v.reshape(-1)
            n = summarize if summarize and summarize > 0 else flat.size
            parts.append(str(flat[:n].tolist()) if v.ndim else str(v.item()))
        else:
            parts.append(str(item))
    return " ".join(parts)


def _message(data, summarize):
    parts = []
    for d in data:
        a = np.asarray(d)
        if a.dtype.kind in "SO" and a.ndim == 0:
            v = a.item()
            parts.append(v.decode() if isinstance(v, bytes) else str(v))
        else:
            flat = a.reshape(-1)
            n = summarize if summarize is not None and summarize >= 0 else flat.size
            shown = " ".join(f"{v:g}" if a.dtype.kind == "f" else str(v) for v in flat[:n].tolist())
            parts.append(shown + (" ..." if flat.size > n else ""))
    return "assertion failed: " + " ".join(f"[{p}]" for p in parts)


@register_kernel("Assert", "CPU")
def _assert(condition, *data, summarize):
    if not bool(np.all(condition)):
        raise errors.InvalidArgumentError(_message(data, summarize))
    return ()


def Assert(condition, data, summarize=None, name=None):  # noqa: N802 - TF's name
    """Raises ``InvalidArgumentError`` with ``data`` printed when ``condition`` (a bool scalar) is
    False: at once eagerly (returns None), when the op runs in a graph (returns the op; a condition
    and data that are constants and fail raise while the graph is built, as TF1)."""
    data = [convert_to_tensor(d) for d in data]
    cond = convert_to_tensor(condition)
    if executing_eagerly():
        _assert(cond.numpy(), *[d.numpy() for d in data], summarize=summarize)
        return None
    static = constant_value(cond)
    if static is not None and not bool(np.all(static)) and all(constant_value(d) is not None for d in data):
        _assert(static, *[constant_value(d) for d in data], summarize=summarize)
    return execute(get_op("Assert"), [cond] + data, {"summarize": 3 if summarize is None else summarize},
                   name or "Assert")


def label(t):
    """How an assertion names a tensor: its graph name, else "tensor"."""
    return getattr(t, "name", None) or "tensor"


def rank_check(x, ok, describe, data=None, summarize=None, message=None, name=None, default_name="assert_rank"):
    """The rank assertions' shared rule: ``ok(rank)`` checked now when the rank is static (a
    ``ValueError``, and nothing to run: None eagerly, a no-op in a graph), else an Assert on
    ``ok(tw.rank(x))`` that raises when it runs."""
    from tensorweave.ops.array_ops import rank as _rank, shape as _shape
    from tensorweave.ops.control_flow_ops import no_op
    x = convert_to_tensor(x)
    if x.shape.rank is not None:
        if not ok(x.shape.rank):   # TF's wording and spacing
            raise ValueError(f"{message + '.  ' if message else ''}Tensor {label(x)} must have {describe}.  "
                             f"Received rank {x.shape.rank}, shape {x.shape}")
        return None if executing_eagerly() else no_op(name=name or default_name)
    data = data if data is not None else ([message] if message else []) + [
        f"Tensor {label(x)} must have {describe}. Received shape: ", _shape(x)]
    with get_default_graph().name_scope(name or default_name):
        return Assert(R.reduce_all(ok(_rank(x))), data, summarize=summarize)


def _compare(x, y, fn, what, message, summarize, name):
    x = convert_to_tensor(x)
    y = convert_to_tensor(y, dtype=x.dtype) if not isinstance(y, Tensor) else y
    cond = R.reduce_all(fn(x, y))
    msg = message or f"Condition x {what} y did not hold element-wise:"
    if executing_eagerly():
        if not bool(cond.numpy()):
            raise errors.InvalidArgumentError("\n".join([
                msg, f"x (shape={x.shape}) = {_summary([x.numpy()], [None], summarize or 3)}",
                f"y (shape={y.shape}) = {_summary([y.numpy()], [None], summarize or 3)}"]))
        return None
    return Assert(cond, [msg, "x =", x, "y =", y], summarize, name)


def assert_equal(x, y, message=None, summarize=None, name=None):
    """Asserts ``x == y`` element-wise (broadcast)."""
    return _compare(x, y, M.equal, "==", message, summarize, name)


def assert_greater(x, y, message=None, summarize=None, name=None):
    """Asserts ``x > y`` element-wise (broadcast)."""
    return _compare(x, y, M.greater, ">", message, summarize, name)


def assert_less(x, y, message=None, summarize=None, name=None):
    """Asserts ``x < y`` element-wise (broadcast)."""
    return _compare(x, y, M.less, "<", message, summarize, name)


def assert_rank(x, rank, message=None, name=None):
    """Asserts that ``x`` has rank ``rank`` (checked statically when the rank is known: a ValueError,
    as TF)."""
    want = int(rank)
    return rank_check(x, lambda r: M.equal(r, want) if isinstance(r, Tensor) else r == want, f"rank {want}",
                      message=message, name=name)
