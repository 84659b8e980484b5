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
from tensorweave.core.registry import get_op, register_kernel, register_op
from tensorweave.core.tensor import Tensor
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as R

__all__ = ["Assert", "assert_equal", "assert_greater", "assert_less", "assert_rank"]

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


@register_kernel("Assert", "CPU")
def _assert(condition, *data, template, summarize):
    if not bool(np.all(condition)):
        raise errors.InvalidArgumentError("assertion failed: " + _summary(data, template, summarize)
                                          if template else "assertion failed")
    return ()


def Assert(condition, data, summarize=None, name=None):  # noqa: N802 - TF's name
    """Raises ``InvalidArgumentError`` (with ``data`` printed) when ``condition`` is false; returns the
    op in a graph (None eagerly, as TF)."""
    cond = convert_to_tensor(condition)
    template, tensors = [], []
    for x in data:
        if isinstance(x, Tensor) or hasattr(x, "_tw_tensor_"):
            template.append(None)
            tensors.append(convert_to_tensor(x))
        else:
            template.append(x)
    attrs = {"template": tuple(template), "summarize": 3 if summarize is None else summarize}
    if executing_eagerly():
        _assert(cond.numpy(), *[t.numpy() for t in tensors], **attrs)
        return None
    return execute(get_op("Assert"), [cond] + tensors, attrs, name or "Assert")


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
    x = convert_to_tensor(x)
    want = int(rank)
    if x.shape.rank is not None:
        if x.shape.rank != want:
            raise ValueError(f"{message + ' ' if message else ''}Tensor must have rank {want}. Received rank "
                             f"{x.shape.rank}, shape {x.shape}")
        return None
    from tensorweave.ops.array_ops import rank as _rank
    return Assert(M.equal(_rank(x), want), [message or f"Tensor must have rank {want}"], name=name)
