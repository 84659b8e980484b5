"""Conversion of Python values, NumPy arrays and tensor-like objects to tensors.

Python floats become float32 and Python ints int32 (TensorFlow's defaults); NumPy
arrays keep their dtype unless one is asked for.
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import upcalls
from tensorweave.core.context import _eager_default, ctx
from tensorweave.core.tensor import EagerTensor, Tensor


def to_numpy(value, dtype=None):
    """A NumPy array for ``value`` with TF's default dtypes (or ``dtype``)."""
    if dtype is not None:
        dtype = _dt.as_dtype(dtype)
        if dtype.is_integer or dtype.is_bool:
            arr = np.asarray(value)
            if arr.dtype.kind == "f" and arr.size and not isinstance(value, (np.ndarray, np.generic)):
                # A Python float never becomes an integer (TF's rule: int32 tensor + 2.0 raises).
                raise TypeError(f"Cannot convert {_short(value)} to {dtype.name}: a Python float is not "
                                f"an integer. Hint: write an int, or tw.cast the tensor to a float dtype")
            if dtype.is_bool and arr.dtype.kind in "iuf" and arr.size and not isinstance(value, (np.ndarray, np.generic)):
                raise TypeError(f"Cannot convert {_short(value)} to bool: a Python number is not a bool. "
                                "Hint: write True/False, or compare (x != 0)")
            if arr.dtype.kind == "f" and arr.size and not np.all(np.isfinite(arr) & (arr == np.round(arr))):
                raise TypeError(f"Cannot convert {_short(value)} to {dtype.name}: the values are not integral.")
            if arr.dtype.kind in "iu" and dtype.is_integer and arr.size:
                info = np.iinfo(dtype.np_dtype)
                if arr.min() < info.min or arr.max() > info.max:
                    raise TypeError(f"Cannot convert {_short(value)} to {dtype.name}: values out of range.")
            return arr.astype(dtype.np_dtype, copy=False)
        if dtype is _dt.string:
            return np.asarray(value, dtype=object)
        try:
            return np.asarray(value, dtype=dtype.np_dtype)
        except (ValueError, TypeError):  # strings, ragged lists: TF's TypeError, not NumPy's message
            raise TypeError(f"Cannot convert {_short(value)} to a tensor of dtype {dtype.name}") from None
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    arr = np.asarray(value)
    k = arr.dtype.kind
    if k == "f" and arr.dtype == np.float64:
        return arr.astype(np.float32)
    if k == "i" and arr.dtype == np.int64:
        if arr.size == 0 or (arr.min() >= -2**31 and arr.max() < 2**31):
            return arr.astype(np.int32)
        return arr
    if k == "u" and not isinstance(value, (np.ndarray, np.generic)):
        # NumPy makes 2**63 uint64; TF refuses Python ints outside int64.
        raise ValueError(f"Cannot convert {_short(value)} to a tensor: an integer out of the int64 range. "
                         "Hint: pass a NumPy uint64 array, or tw.constant(value, dtype=tw.uint64)")
    if k == "S":
        # NumPy's fixed-width bytes drop trailing NUL bytes: keep the original bytes objects.
        return np.array(value, dtype=object)
    if k == "U":
        return arr.astype(object)
    if k == "O":
        raise TypeError(f"Cannot convert {_short(value)} to a tensor: mixed or non-numeric elements.")
    return arr


def _short(value):
    s = repr(value)
    return s if len(s) < 60 else s[:57] + "..."


def convert_to_tensor(value, dtype=None, name=None, dtype_hint=None):
    """Returns ``value`` as a tensor (eager now, or a constant node while building a graph).

    >>> import tensorweave as tw
    >>> tw.convert_to_tensor([1, 2]).dtype
    tw.int32
    """
    if isinstance(value, Tensor):
        if dtype is not None and value.dtype is not _dt.as_dtype(dtype):
            raise TypeError(f"Tensor conversion requested dtype {_dt.as_dtype(dtype).name} for a tensor "
                            f"of dtype {value.dtype.name}. Hint: use tw.cast.")
        return value
    conv = getattr(value, "_tw_tensor_", None)
    if conv is not None:
        return conv(dtype)
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) or hasattr(v, "_tw_tensor_") for v in _flat(value)):
        return upcalls.stack([convert_to_tensor(v, dtype=dtype, dtype_hint=dtype_hint) for v in value], name=name)
    if dtype is None and dtype_hint is not None and not isinstance(value, (np.ndarray, np.generic)):
        try:
            arr = to_numpy(value, dtype_hint)
        except TypeError:
            arr = to_numpy(value)
    else:
        arr = to_numpy(value, dtype)
    if not ctx.graph_stack and (_eager_default[0] or ctx.force_eager):
        return EagerTensor(arr)
    return upcalls.constant(arr, name=name)


def _flat(x):
    for v in x:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def convert_like(value, like, name=None):
    """Converts an operand for a binary op: non-tensors take ``like``'s dtype (Python scalars, arrays)."""
    if isinstance(value, Tensor):
        return value
    conv = getattr(value, "_tw_tensor_", None)
    if conv is not None:
        return conv(None)
    arr = to_numpy(value, like.dtype)
    if not ctx.graph_stack and (_eager_default[0] or ctx.force_eager):
        return EagerTensor(arr, like.dtype)
    return upcalls.constant(arr, name=name)
