"""Validation of Python-valued op arguments (shapes, axes): a bad one raises an error naming the
op, the argument and the user's line, never a NumPy or Python internal error.

>>> import tensorweave as tw
>>> try:
...     tw.zeros((2.5, 2))
... except tw.errors.InvalidArgumentError as e:
...     print(str(e).splitlines()[0])
zeros: argument `shape` must hold integers, got (2.5, 2)
"""
import functools
import numbers
import operator
import os

import numpy as np

from tensorweave.core import errors
from tensorweave.core.tensor import EagerTensor

_MAX_ELEMENTS = 2 ** 63 - 1


def argument_error(op, arg, message, hint=None, cls=errors.InvalidArgumentError):
    """The error for a bad Python argument ``arg`` of ``op``, located at the user's line."""
    text = f"{op}: argument `{arg}` {message}"
    site = errors.user_frame()
    if site:
        text += f"\n  Created at: {site}"
    if hint:
        text += f"\n  Hint: {hint}"
    return cls(text)


def _short(value):
    s = repr(value)
    return s if len(s) < 60 else s[:57] + "..."


@functools.lru_cache(maxsize=1)
def _physical_memory():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def shape_argument(value, op, arg="shape", allow_unknown=False, dtype=None):
    """A Python shape (list, tuple, TensorShape dims, NumPy ints) as a list of ints, checked:
    integers only (``2.5`` and ``2.0`` raise, as in TF), none negative (``-1`` is "unknown" where
    ``allow_unknown``), at most 2**63 - 1 elements, and, with ``dtype``, no more bytes than the
    machine has (ResourceExhaustedError, TF's out-of-memory error)."""
    if type(value) in (tuple, list) and all(type(d) is int and d >= 0 for d in value):
        n = 1
        for d in value:
            n *= d
        if n < 2 ** 26:
            return list(value)   # the common case: too few elements to overflow or exhaust memory
    items = value.as_list() if hasattr(value, "as_list") else value
    if isinstance(items, np.ndarray):
        items = items.tolist() if items.ndim else [items.item()]
    elif isinstance(items, numbers.Integral):
        items = [items]
    try:
        dims = [operator.index(d) if not isinstance(d, bool) and d is not None else d for d in items]
    except TypeError:
        dims = None
    if dims is None or not isinstance(items, (list, tuple)) or any(isinstance(d, bool) for d in dims):
        raise argument_error(op, arg, f"must hold integers, got {_short(value)}",
                             "a shape is a list of ints such as [2, 3]")
    unknown = [d for d in dims if d is None or d < 0]
    if unknown and not (allow_unknown and all(d is None or d == -1 for d in unknown)):
        what = "negative" if any(d is not None for d in unknown) else "unknown (None)"
        raise argument_error(op, arg, f"must not have {what} dimensions, got {_short(value)}")
    known = [d for d in dims if d is not None and d >= 0]
    n = 1
    for d in known:
        n *= d
    if n > _MAX_ELEMENTS:
        raise argument_error(op, arg, f"{_short(value)} would have more than 2**63 - 1 elements")
    if dtype is not None and not unknown:
        nbytes = n * np.dtype(dtype).itemsize
        memory = _physical_memory()
        if memory is not None and nbytes > memory:
            raise argument_error(op, arg, f"{_short(value)} of {np.dtype(dtype).name} needs {nbytes:.3g} bytes, "
                                 f"more than this machine's memory ({memory:.3g} bytes)",
                                 cls=errors.ResourceExhaustedError)
    return dims


def shape_array(dims):
    """The 1-D int32 array of checked ``dims`` (int64 where a dimension does not fit int32)."""
    wide = any(d is not None and not -2 ** 31 <= d < 2 ** 31 for d in dims)
    return np.asarray([-1 if d is None else d for d in dims], np.int64 if wide else np.int32)


def axis_argument(axis, op, arg="axis"):
    """``None``, one int or a list of ints (an int tensor's values too) as a tuple of ints."""
    if axis is None:
        return None
    if isinstance(axis, EagerTensor):
        if not axis.dtype.is_integer:
            raise argument_error(op, arg, f"must be an int32 or int64 tensor, got {axis.dtype.name}")
        axis = axis.numpy().tolist()
    if isinstance(axis, np.ndarray):
        items = axis.reshape(-1).tolist()
    else:
        items = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    try:
        if any(isinstance(a, bool) for a in items):
            raise TypeError
        return tuple(operator.index(a) for a in items)
    except TypeError:
        raise argument_error(op, arg, f"must be an int or a list of ints, got {_short(axis)}") from None


def int_argument(value, op, arg, minimum=None):
    """An int argument (an int, a NumPy integer or an integer scalar tensor): ``1.5`` raises
    instead of becoming 1; below ``minimum`` raises too."""
    try:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError
        v = operator.index(value)
    except TypeError:
        raise argument_error(op, arg, f"must be an int, got {_short(value)}") from None
    if minimum is not None and v < minimum:
        raise argument_error(op, arg, f"must be >= {minimum}, got {v}")
    return v
