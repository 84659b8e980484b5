"""Helpers shared by CPU kernels."""
import functools

import numpy as np

_LOW_PRECISION = None


def low_precision():
    global _LOW_PRECISION
    if _LOW_PRECISION is None:
        import ml_dtypes
        _LOW_PRECISION = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}
    return _LOW_PRECISION


def via_float32(fn):
    """Runs ``fn`` in float32 for float16/bfloat16 inputs (for routines without half support)."""
    @functools.wraps(fn)
    def kernel(*xs, **attrs):
        dt = xs[0].dtype
        if dt in low_precision():
            return np.asarray(fn(*(x.astype(np.float32) for x in xs), **attrs)).astype(dt)
        return fn(*xs, **attrs)
    return kernel


def quiet(fn):
    """Silences NumPy's floating-point warnings (log(-1) is nan, as in TensorFlow)."""
    @functools.wraps(fn)
    def kernel(*xs, **attrs):
        with np.errstate(all="ignore"):
            return fn(*xs, **attrs)
    return kernel


def same_dtype(out, like):
    """Casts a NumPy result back to the input dtype (NumPy promotes some ops, e.g. sums of int8)."""
    out = np.asarray(out)
    return out if out.dtype == like.dtype else out.astype(like.dtype)
