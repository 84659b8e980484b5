"""TF1's run-time checks: ``tf.Assert`` and ``tf.assert_equal``/``assert_less``/``assert_rank``/...,
``tf.check_numerics`` and ``tf.add_check_numerics_ops``.

As in TF1: eagerly (or when both sides are constants) a failing check raises
``InvalidArgumentError`` at once; in a graph it is an ``Assert`` op that raises when it runs
(put it in ``control_dependencies``) and a passing eager check returns None. Static facts (dtype,
rank when known) raise ``TypeError``/``ValueError`` while the graph is built.

>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     x = tf.placeholder(tf.float32, [2])
...     with tf.control_dependencies([tf.assert_positive(x, message="x must be > 0")]):
...         y = tf.sqrt(x)
>>> with tf.Session(graph=g) as sess:
...     sess.run(y, {x: [4.0, 9.0]}).tolist()
...     try:
...         sess.run(y, {x: [4.0, -1.0]})
...     except tf.errors.InvalidArgumentError as e:
...         print(str(e).splitlines()[0])
[2.0, 3.0]
assertion failed: [x must be > 0] [Condition x > 0 did not hold element-wise:] [x (Placeholder:0) = ] [4 -1]
"""
import collections.abc

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.context import executing_eagerly
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import get_default_graph
from tensorweave.core.tensor import Tensor
from tensorweave.ops import array_ops, check_ops, control_flow_ops, math_ops, reduce_ops
from tensorweave.ops.check_ops import Assert  # noqa: F401 - TF has one Assert (TF1's and TF2's)

__all__ = ["Assert", "assert_equal", "assert_none_equal", "assert_less", "assert_less_equal", "assert_greater",
           "assert_greater_equal", "assert_near", "assert_positive", "assert_negative", "assert_non_negative",
           "assert_non_positive", "assert_integer", "assert_type", "assert_rank", "assert_rank_at_least",
           "assert_rank_in", "assert_scalar", "assert_same_float_dtype", "assert_proper_iterable",
           "is_numeric_tensor", "check_numerics", "verify_tensor_all_finite", "add_check_numerics_ops"]

_label = check_ops.label


def _check(condition, x, y, data, summarize, message, name, text, default_name):
    """The Assert of an element-wise ``condition`` with TF1's default data."""
    if data is None:
        data = ([message] if message else []) + [f"Condition {text} did not hold element-wise:",
                                                 f"x ({_label(x)}) = ", x]
        if y is not None:
            data += [f"y ({_label(y)}) = ", y]
    elif message:
        data = [message] + list(data)
    with get_default_graph().name_scope(name or default_name) if not executing_eagerly() else _null():
        return Assert(reduce_ops.reduce_all(condition), data, summarize=summarize)


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _binary(op, text, default_name):
    def check(x, y, data=None, summarize=None, message=None, name=None):
        x, y = convert_to_tensor(x), convert_to_tensor(y)
        if y.dtype is not x.dtype:
            y = convert_to_tensor(y, dtype=x.dtype) if not isinstance(y, Tensor) else y
        return _check(op(x, y), x, y, data, summarize, message, name, text, default_name)
    check.__name__ = check.__qualname__ = default_name
    check.__doc__ = f"Asserts ``{text}`` element-wise (TF1's ``tf.{default_name}``)."
    return check


assert_equal = _binary(math_ops.equal, "x == y", "assert_equal")
assert_none_equal = _binary(math_ops.not_equal, "x != y", "assert_none_equal")
assert_less = _binary(math_ops.less, "x < y", "assert_less")
assert_less_equal = _binary(math_ops.less_equal, "x <= y", "assert_less_equal")
assert_greater = _binary(math_ops.greater, "x > y", "assert_greater")
assert_greater_equal = _binary(math_ops.greater_equal, "x >= y", "assert_greater_equal")


def _against_zero(op, text, default_name):
    def check(x, data=None, summarize=None, message=None, name=None):
        x = convert_to_tensor(x)
        zero = array_ops.zeros([], x.dtype)
        return _check(op(x, zero), x, None, data, summarize, message, name, text, default_name)
    check.__name__ = check.__qualname__ = default_name
    check.__doc__ = f"Asserts ``{text}`` element-wise (TF1's ``tf.{default_name}``)."
    return check


assert_positive = _against_zero(math_ops.greater, "x > 0", "assert_positive")
assert_negative = _against_zero(math_ops.less, "x < 0", "assert_negative")
assert_non_negative = _against_zero(math_ops.greater_equal, "x >= 0", "assert_non_negative")
assert_non_positive = _against_zero(math_ops.less_equal, "x <= 0", "assert_non_positive")


def assert_near(x, y, rtol=None, atol=None, data=None, summarize=None, message=None, name=None):
    """Asserts ``|x - y| <= atol + rtol * |y|`` element-wise; the tolerances default to 10 ulps
    of the dtype's epsilon (TF1's defaults)."""
    x, y = convert_to_tensor(x), convert_to_tensor(y)
    eps = float(np.finfo(x.dtype.np_dtype).eps) if x.dtype.is_floating else 0.0
    rtol = 10 * eps if rtol is None else rtol
    atol = 10 * eps if atol is None else atol
    tol = math_ops.add(math_ops.cast(atol, x.dtype), math_ops.multiply(math_ops.cast(rtol, x.dtype), math_ops.abs(y)))
    cond = math_ops.less_equal(math_ops.abs(math_ops.subtract(x, y)), tol)
    return _check(cond, x, y, data, summarize, message, name, "x and y within tolerance", "assert_near")


def _static_ok(name):
    return None if executing_eagerly() else control_flow_ops.no_op(name=name)


def assert_integer(x, message=None, name=None):
    """Raises ``TypeError`` unless ``x`` has an integer dtype."""
    x = convert_to_tensor(x)
    if not x.dtype.is_integer:
        raise TypeError(f"{message + ' ' if message else ''}Expected {_label(x)} to be of integer type, "
                        f"got {x.dtype.name}")
    return _static_ok(name or "assert_integer")


def assert_type(tensor, tf_type, message=None, name=None):
    """Raises ``TypeError`` unless ``tensor``'s dtype is ``tf_type``."""
    t = tensor if getattr(tensor, "_is_variable", False) else convert_to_tensor(tensor)
    want = _dt.as_dtype(tf_type)
    if t.dtype is not want:
        raise TypeError(f"{message + ' ' if message else ''}{_label(t)} must be of type {want.name}; "
                        f"got {t.dtype.name}")
    return _static_ok(name or "assert_type")


_rank_check = check_ops.rank_check


def assert_rank(x, rank, data=None, summarize=None, message=None, name=None):
    """Asserts that ``x`` has rank ``rank`` (``ValueError`` when the rank is known statically)."""
    return _rank_check(x, lambda r: math_ops.equal(r, rank) if isinstance(r, Tensor) else r == rank,
                       f"rank {rank}", data, summarize, message, name, "assert_rank")


def assert_rank_at_least(x, rank, data=None, summarize=None, message=None, name=None):
    return _rank_check(x, lambda r: math_ops.greater_equal(r, rank) if isinstance(r, Tensor) else r >= rank,
                       f"rank at least {rank}", data, summarize, message, name, "assert_rank_at_least")


def assert_rank_in(x, ranks, data=None, summarize=None, message=None, name=None):
    ranks = tuple(int(r) for r in ranks)

    def ok(r):
        if isinstance(r, Tensor):
            return reduce_ops.reduce_any(math_ops.equal(r, convert_to_tensor(list(ranks), dtype=r.dtype)))
        return r in ranks
    return _rank_check(x, ok, f"rank in {list(ranks)}", data, summarize, message, name, "assert_rank_in")


def assert_scalar(tensor, name=None, message=None):
    """``tensor`` itself when it is a scalar; ``ValueError`` otherwise."""
    t = convert_to_tensor(tensor)
    if t.shape.rank is None or t.shape.rank != 0:
        raise ValueError(f"{message + ' ' if message else ''}Expected scalar shape for {_label(t)}, "
                         f"saw shape: {t.shape}.")
    return t


def assert_same_float_dtype(tensors=None, dtype=None):
    """The common floating dtype of ``tensors`` (and ``dtype``); ``ValueError`` if they differ or
    are not floating (``float32`` when there is nothing to check)."""
    found = _dt.as_dtype(dtype) if dtype is not None else None
    if found is not None and not found.is_floating:
        raise ValueError(f"Expected floating point type, got {found.name}.")
    for t in tensors or []:
        d = t.dtype
        if found is None:
            if not d.is_floating:
                raise ValueError(f"Expected floating point type, got {d.name}.")
            found = d
        elif d is not found:
            raise ValueError(f"Tensor conversion requested dtype {found.name} for {_label(t)} of dtype {d.name}")
    return found or _dt.float32


def assert_proper_iterable(values):
    """``TypeError`` if ``values`` is a tensor, an array, a string or not iterable (a common
    mistake: passing one tensor where a list of them is meant)."""
    if isinstance(values, (Tensor, np.ndarray, str, bytes)) or getattr(values, "_is_variable", False) \
            or type(values).__name__ == "SparseTensor":
        raise TypeError(f"Expected argument 'values' to be a 'proper' iterable. Found: {type(values)}")
    if not isinstance(values, collections.abc.Iterable):
        raise TypeError(f"Expected argument 'values' to be iterable. Found: {type(values)}")


def is_numeric_tensor(tensor):
    """Whether ``tensor`` is a tensor of a numeric dtype (not bool, string or resource)."""
    return isinstance(tensor, Tensor) and (tensor.dtype.is_floating or tensor.dtype.is_integer
                                           or tensor.dtype.is_complex)


def check_numerics(tensor, message, name=None):
    """``tensor``, raising ``InvalidArgumentError`` (with ``message``) when it has NaN or Inf values;
    the gradient passes through."""
    t = convert_to_tensor(tensor)
    if not t.dtype.is_floating:
        raise TypeError(f"check_numerics: {_label(t)} must be floating point, got {t.dtype.name}")
    if executing_eagerly():
        v = t.numpy()
        if not np.all(np.isfinite(v)):
            what = "NaN" if np.any(np.isnan(v)) else "Inf"
            raise errors.InvalidArgumentError(f"{message} : Tensor had {what} values")
        return t
    with get_default_graph().name_scope(name or "CheckNumerics"):
        finite = reduce_ops.reduce_all(math_ops.is_finite(t))
        check = Assert(finite, [f"{message} : Tensor had NaN or Inf values"], summarize=0)
        with control_flow_ops.control_dependencies([check]):
            return array_ops.identity(t)


def verify_tensor_all_finite(t=None, msg=None, name=None, x=None, message=None):
    """TF1's ``check_numerics`` spelling (``t``/``x`` and ``msg``/``message``)."""
    if (t is None) == (x is None):
        raise ValueError("verify_tensor_all_finite: give exactly one of t and x")
    return check_numerics(t if t is not None else x, msg if msg is not None else message, name=name)


def add_check_numerics_ops():
    """One op that checks every floating-point output of the default graph for NaN/Inf
    (``tf.add_check_numerics_ops``: run it with the train op to find where NaNs start)."""
    graph = get_default_graph()
    outputs = [t for op in list(graph.get_operations()) for t in op.outputs
               if t.dtype.is_floating and op.type not in ("Assert", "NoOp")]
    checks = [check_numerics(t, f"{t.name}").op for t in outputs]
    return control_flow_ops.group(*checks, name="CheckNumerics_all") if checks else control_flow_ops.no_op()
