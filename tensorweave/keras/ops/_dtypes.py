"""Keras 3's dtype rules for ``keras.ops``: promotion like NumPy/JAX, and conversion of Python values.

Unlike ``tw.add`` (which refuses mixed dtypes, as TensorFlow does), ``keras.ops.add(int8, uint8)``
gives int16 and ``keras.ops.add(int32, float16)`` gives float16. Python scalars are *weak*: they
take the other operand's dtype (``int8 + 1`` stays int8) except that a Python float makes an
integer result ``floatx()``. Alone, a Python int is int32 and a Python float ``floatx()``.

>>> from tensorweave.keras.ops._dtypes import result_type
>>> result_type("int8", "uint8"), result_type("int32", "float16"), result_type("int8", float)
('int16', 'float16', 'float32')
"""
import builtins

import numpy as np

import tensorweave as tw
from tensorweave.core.tensor import Tensor

_FLOAT_ORDER = ("bfloat16", "float16", "float32", "float64")


def floatx():
    from tensorweave.keras import backend
    return backend.floatx()


def _name(d):
    return tw.as_dtype(d).name


def _join_strong(names):
    floats = [n for n in names if n in _FLOAT_ORDER]
    if floats:
        if "float64" in floats:
            return "float64"
        if "float32" in floats or ("float16" in floats and "bfloat16" in floats):
            return "float32"
        return floats[0]
    ints = [n for n in names if n != "bool"]
    if not ints:
        return "bool"
    signed = max((int(n[3:]) for n in ints if n.startswith("int")), default=0)
    unsigned = max((int(n[4:]) for n in ints if n.startswith("uint")), default=0)
    if not signed:
        return f"uint{unsigned}"
    if not unsigned:
        return f"int{signed}"
    # a signed type wide enough for both (uint32 with int8 needs int64)
    return f"int{builtins.min(builtins.max(signed, 2 * unsigned), 64)}"


def _kind(x):
    """'bool', 'int', 'float' for a weak Python scalar; else the dtype name."""
    if isinstance(x, bool):
        return "weak_bool"
    if isinstance(x, int):
        return "weak_int"
    if isinstance(x, float):
        return "weak_float"
    if x is bool:
        return "weak_bool"
    if x is int:
        return "weak_int"
    if x is float:
        return "weak_float"
    if isinstance(x, (Tensor, tw.Variable)) or hasattr(x, "dtype"):
        return _name(x.dtype)
    if isinstance(x, (list, tuple)):
        return _name(to_tensor(x).dtype)
    return _name(x)


def result_type(*values):
    """The dtype name Keras 3 gives an op on ``values`` (dtypes, tensors, arrays, Python scalars
    or the types ``int``/``float``/``bool``)."""
    kinds = [_kind(v) for v in values if v is not None]
    strong = [k for k in kinds if not k.startswith("weak_")]
    weak = {k[5:] for k in kinds if k.startswith("weak_")}
    if not strong:
        return floatx() if "float" in weak else "int32" if "int" in weak else "bool"
    out = _join_strong(strong)
    if "float" in weak and out not in _FLOAT_ORDER:
        return floatx()
    if "int" in weak and out == "bool":
        return "int32"
    return out


def to_tensor(x, dtype=None):
    """``x`` as a tensor with Keras' defaults: NumPy values keep their dtype, Python ints are
    int32 and Python floats ``floatx()``."""
    if dtype is not None:
        dtype = tw.as_dtype(dtype)
    if isinstance(x, tw.Variable):
        x = x.value() if hasattr(x, "value") else tw.identity(x)
    if isinstance(x, Tensor):
        return x if dtype is None or x.dtype == dtype else tw.cast(x, dtype)
    if dtype is not None:
        arr = np.asarray(x)
        if arr.dtype.kind == "f" and not dtype.is_floating:
            return tw.cast(tw.constant(arr), dtype)
        return tw.constant(arr.astype(dtype.np_dtype))
    if isinstance(x, (np.ndarray, np.generic)):
        return tw.constant(x)
    arr = np.asarray(x)
    if arr.dtype.kind == "f":
        arr = arr.astype(floatx())
    elif arr.dtype.kind == "i":
        arr = arr.astype(np.int32) if arr.size == 0 or (arr.min() >= -2**31 and arr.max() < 2**31) else arr
    elif arr.dtype.kind == "O":
        raise TypeError(f"Cannot convert {x!r:.60} to a tensor: mixed or non-numeric elements")
    return tw.constant(arr)


def cast_to(x, dtype):
    """Tensor ``x`` (or a weak Python scalar) as ``dtype``."""
    dtype = tw.as_dtype(dtype)
    if isinstance(x, (Tensor, tw.Variable)):
        x = to_tensor(x)
        return x if x.dtype == dtype else tw.cast(x, dtype)
    return to_tensor(x, dtype)


def promote(*xs, extra=()):
    """Tensors for ``xs`` cast to their common Keras dtype (``extra`` joins the promotion, e.g.
    ``float`` for ops whose result is always floating)."""
    dt = result_type(*xs, *extra)
    return [cast_to(x, dt) for x in xs]


def is_float(dtype):
    return _name(dtype) in _FLOAT_ORDER


def standardize(dtype):
    if dtype is None:
        return None
    if dtype is float:
        return floatx()
    if dtype is int:
        return "int32"
    if dtype is bool:
        return "bool"
    return _name(dtype)


