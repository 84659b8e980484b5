"""The op-test table: what every op must satisfy, checked by ``test_op_table.py``.

Each :class:`OpInfo` names a tensorweave function, a NumPy reference, the dtypes to try,
and a sample generator. The generic test checks, for every sample:

* forward values (and dtype) against the reference, with per-dtype tolerances;
* eager == graph (Session with fed placeholders) == ``tw.function``;
* float64 gradients against central finite differences (first order, and second order
  when ``grad_order >= 2``), through ``GradientTape`` and through ``tw.gradients``.

A sample's ``args`` are NumPy arrays (fed as tensors) or plain Python values (passed as
they are, e.g. ``axis``); ``kwargs`` are passed as they are.
"""
import dataclasses
from typing import Callable, Sequence

import ml_dtypes
import numpy as np

import tensorweave as tw

FLOATS = (tw.float16, tw.bfloat16, tw.float32, tw.float64)
INTS = (tw.int8, tw.uint8, tw.int16, tw.int32, tw.int64)
SIGNED_INTS = (tw.int8, tw.int16, tw.int32, tw.int64)
NUMERIC = FLOATS + INTS
ALL = NUMERIC + (tw.bool,)

TOL = {
    tw.float16: (1e-2, 1e-2), tw.bfloat16: (5e-2, 5e-2), tw.float32: (1e-5, 1e-5),
    tw.float64: (1e-10, 1e-10),
}


@dataclasses.dataclass
class Sample:
    args: tuple
    kwargs: dict = dataclasses.field(default_factory=dict)
    name: str = ""


@dataclasses.dataclass
class OpInfo:
    name: str
    op: Callable                     # tensorweave function
    ref: Callable                    # NumPy reference (same call signature)
    dtypes: Sequence = FLOATS
    samples: Callable = None         # (np_dtype, rng) -> [Sample]
    grad: bool = True                # check float64 gradients
    grad_order: int = 1
    grad_args: Sequence = None       # indices of array args to differentiate (default: all float ones)
    tol: dict = None                 # dtype -> (rtol, atol) overrides
    eps: float = 1e-6                # finite-difference step
    grad_tol: float = 1e-6
    graph: bool = True               # check graph mode and tw.function
    out_dtype: Callable = None       # (input dtype) -> expected output dtype (default: reference's)

    def tolerance(self, dtype):
        t = dict(TOL)
        if self.tol:
            t.update(self.tol)
        return t.get(dtype, (0, 0))


def arr(rng, shape, dtype, low=-2.0, high=2.0):
    """A random array of ``dtype`` (ints in [low, high], floats uniform)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    if dtype.kind in "iu":
        lo = max(int(low), 0) if dtype.kind == "u" else int(low)
        return rng.integers(lo, int(high) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def noncontig(a):
    """A non-contiguous view with the same values as ``a`` (a strided slice of a larger array)."""
    a = np.asarray(a)
    if a.ndim == 0:
        return a
    big = np.repeat(a, 2, axis=-1)
    v = big[..., ::2]
    assert not v.flags.c_contiguous or a.shape[-1] <= 1
    return v


def away_from(a, points, margin=0.1):
    """Moves values of float array ``a`` at least ``margin`` away from each of ``points`` (kinks)."""
    a = np.array(a)
    if a.dtype.kind != "f":
        return a
    for p in points:
        close = np.abs(a.astype(np.float64) - p) < margin
        a[close] = (p + margin * 2 * np.where(a[close] >= p, 1, -1)).astype(a.dtype)
    return a


def unary_samples(low=-2.0, high=2.0, kinks=()):
    def gen(dtype, rng):
        def a(shape):
            return away_from(arr(rng, shape, dtype, low, high), kinks)
        return [Sample((a((3, 4)),), name="matrix"), Sample((a(()),), name="scalar"),
                Sample((a((0, 3)),), name="empty"), Sample((noncontig(a((2, 5))),), name="noncontig")]
    return gen


def binary_samples(low=-2.0, high=2.0, low2=None, high2=None, kinks=()):
    def gen(dtype, rng):
        lo2 = low if low2 is None else low2
        hi2 = high if high2 is None else high2

        def a(shape):
            return away_from(arr(rng, shape, dtype, low, high), kinks)

        def b(shape):
            return away_from(arr(rng, shape, dtype, lo2, hi2), kinks)
        return [Sample((a((3, 4)), b((3, 4))), name="same"),
                Sample((a((2, 3, 4)), b((4,))), name="broadcast"),
                Sample((a((3, 1)), b((1, 4))), name="outer"),
                Sample((a(()), b((2,))), name="scalar"),
                Sample((a((0, 4)), b((4,))), name="empty"),
                Sample((noncontig(a((2, 3))), b((2, 3))), name="noncontig")]
    return gen


def as_bf16_safe(fn):
    """Runs a NumPy reference in float32 for bfloat16/float16 inputs, casting back."""
    def ref(*args, **kwargs):
        dts = [a.dtype for a in args if isinstance(a, np.ndarray)]
        low = [d for d in dts if d in (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16))]
        if not low:
            return fn(*args, **kwargs)
        conv = [a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == low[0] else a for a in args]
        out = fn(*conv, **kwargs)
        return np.asarray(out).astype(low[0]) if np.asarray(out).dtype == np.float32 else out
    return ref
