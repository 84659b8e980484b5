"""Shared shape/dtype inference rules for op definitions."""
from tensorweave.core import dtypes as _dt
from tensorweave.core.shape import TensorShape, broadcast_static, fmt


def same_dtype(inputs, what="inputs"):
    d0 = inputs[0].dtype
    for i, t in enumerate(inputs[1:], 1):
        if t.dtype is not d0:
            raise TypeError(f"Mixed dtypes: input 0 is {d0.name} but input {i} is {t.dtype.name} "
                            f"(tensorweave never converts between tensor dtypes). "
                            f"Hint: use tw.cast(x, tw.{d0.name}) on one of the {what}")
    return d0


def dtype_names(allowed):
    """``allowed``'s names in the canonical dtype order (sets have none of their own)."""
    return ", ".join(d.name for d in _dt.ALL if d in allowed)


def check_dtype(t, allowed, op_name, what="input"):
    if t.dtype not in allowed:
        names = dtype_names(allowed)
        raise TypeError(f"{op_name} does not support dtype {t.dtype.name} for its {what}; expected one of: {names}")


def unsupported_message(dtype, allowed):
    """The message for a dtype an op has no kernel for (TF has none either: no implicit casts)."""
    return (f"Unsupported dtype {dtype.name}; expected one of: {dtype_names(allowed)}. "
            "Hint: tw.cast the input to one of them first")


def unary(allowed=None):
    def infer(inputs, attrs):
        if allowed is not None and inputs[0].dtype not in allowed:
            raise TypeError(unsupported_message(inputs[0].dtype, allowed))
        return inputs[0].shape, inputs[0].dtype
    return infer


def binary(out_dtype=None, allowed=None):
    def infer(inputs, attrs):
        d = same_dtype(inputs)
        if allowed is not None and d not in allowed:
            raise TypeError(unsupported_message(d, allowed))
        try:
            shape = broadcast_static(inputs[0].shape, inputs[1].shape)
        except ValueError:
            raise ValueError(f"Incompatible shapes for broadcasting: {fmt(inputs[0].shape)} vs. "
                             f"{fmt(inputs[1].shape)}. Hint: shapes broadcast when, from the right, each pair "
                             "of dimensions is equal or one of them is 1") from None
        return shape, (out_dtype or d)
    return infer


# Dtype sets of the kernels (TensorFlow's CPU kernels have the same ones). Tuples with the common
# dtypes first: the eager wrappers test membership on every call, and a tuple hit is an identity
# compare where a set would call DType.__hash__ (Python code).
FLOAT = (_dt.float32, _dt.float64, _dt.float16, _dt.bfloat16)
_SIGNED_INTS = (_dt.int32, _dt.int64, _dt.int8, _dt.int16)
INTEGER = _SIGNED_INTS + (_dt.uint8, _dt.uint16, _dt.uint32, _dt.uint64)
NUMERIC = (_dt.float32, _dt.int32, _dt.int64, _dt.float64) + tuple(d for d in FLOAT + INTEGER
                                                                   if d not in (_dt.float32, _dt.int32,
                                                                                _dt.int64, _dt.float64))
SIGNED = FLOAT + _SIGNED_INTS    # Neg, Abs, Sign: no unsigned kernels
BOOL = (_dt.bool_,)
MATMUL = FLOAT + (_dt.int32, _dt.int64)
COMPLEX = (_dt.complex64, _dt.complex128)
ARITHMETIC = NUMERIC + COMPLEX   # AddV2, Sub, Mul, AddN: complex kernels too


def normalize_axis(axis, rank, op_name="op"):
    if rank is None:
        return axis
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} is out of range for a tensor of rank {rank}")
    return axis % rank if rank else 0


def shape_of(value):
    """A TensorShape from a constant shape value (array/list), or unknown."""
    if value is None:
        return None
    return TensorShape([int(d) if int(d) >= 0 else None for d in list(value)])
