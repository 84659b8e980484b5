"""CPU kernels for ``ops/random_ops.py`` on NumPy's Philox generator.

A stateful random kernel gets ``state``: a seed key plus the streams made from it (see
``random_ops._SeedState``); it asks for its CPU stream with :func:`cpu_stream`, so the
op's sequence continues from run to run. Stateless kernels build a fresh stream from
their ``seed`` input on every call, so equal seeds give equal values.

>>> import numpy as np
>>> a = stateless_stream(np.array([1, 2])).random(2)
>>> b = stateless_stream(np.array([1, 2])).random(2)
>>> bool((a == b).all())
True
"""
import numpy as np

from tensorweave.core.philox import philox
from tensorweave.core.registry import register_kernel as k

# First word of a stateless key, so that stateless_uniform(seed=[a, b]) and a stateful op
# whose derived seeds happen to be (a, b) draw from unrelated streams.
STATELESS_TAG = 0x57A7E1E55


def cpu_stream(state):
    return state.stream("CPU", philox)


def _dims(shape):
    dims = tuple(int(d) for d in np.asarray(shape).reshape(-1))
    if any(d < 0 for d in dims):
        raise ValueError(f"shape must not have negative dimensions, got {list(dims)}")
    return dims


def _half_bits(np_dtype):
    """Significant bits of a half-precision float type (None for other types)."""
    return {"float16": 11, "bfloat16": 8}.get(np_dtype.name)


# ---- samplers shared by stateful and stateless kernels ----------------------------------------
def uniform01(gen, dims, np_dtype):
    """Uniform values in [0, 1) of ``np_dtype``."""
    np_dtype = np.dtype(np_dtype)
    if np_dtype in (np.float32, np.float64):
        return gen.random(dims, dtype=np_dtype)
    bits = _half_bits(np_dtype)
    if bits is None:
        raise TypeError(f"uniform: unsupported dtype {np_dtype}")
    # Rounding a float32 draw to a half type can give exactly 1.0; a grid of 2**bits
    # points is exactly representable, so the result stays in [0, 1).
    return (gen.integers(0, 1 << bits, size=dims) / float(1 << bits)).astype(np_dtype)


def standard_normal(gen, dims, np_dtype):
    np_dtype = np.dtype(np_dtype)
    if np_dtype in (np.float32, np.float64):
        return gen.standard_normal(dims, dtype=np_dtype)
    return gen.standard_normal(dims, dtype=np.float32).astype(np_dtype)


def truncated_normal(gen, dims, np_dtype):
    """Standard normal values, re-drawn while their magnitude exceeds 2 (TF's rule)."""
    np_dtype = np.dtype(np_dtype)
    work = np_dtype if np_dtype in (np.float32, np.float64) else np.dtype(np.float32)
    out = gen.standard_normal(dims, dtype=work)
    bad = np.abs(out) > 2
    while bad.any():
        out[bad] = gen.standard_normal(int(bad.sum()), dtype=work)
        bad = np.abs(out) > 2
    return out if work == np_dtype else out.astype(np_dtype)


def uniform_int(gen, dims, minval, maxval):
    lo, hi = np.asarray(minval), np.asarray(maxval)
    if lo.ndim or hi.ndim:
        raise ValueError(f"minval and maxval must be scalars, got shapes {list(lo.shape)} and {list(hi.shape)}")
    if not lo < hi:
        raise ValueError(f"Need minval < maxval: {lo} >= {hi}")
    return gen.integers(lo, hi, size=dims, dtype=lo.dtype)


def full_range_int(gen, dims, np_dtype):
    info = np.iinfo(np_dtype)
    return gen.integers(info.min, info.max, size=dims, dtype=np_dtype, endpoint=True)


def multinomial(gen, logits, num_samples, np_dtype):
    """``num_samples`` class indices per row of ``logits`` (inverse CDF of the softmax)."""
    n = int(num_samples)
    if n < 0:
        raise ValueError(f"num_samples should be nonnegative, got {n}")
    logits = np.asarray(logits, dtype=np.float64)
    b, c = logits.shape
    out = np.empty((b, n), dtype=np_dtype)
    if b == 0 or n == 0:
        return out
    if c == 0:
        raise ValueError("num_classes should be positive, got 0")
    with np.errstate(invalid="ignore"):
        top = logits.max(axis=1, keepdims=True)
        weights = np.exp(logits - top)     # -inf logits get weight 0: never drawn
    cdf = np.cumsum(weights, axis=1)
    total = cdf[:, -1]
    bad = ~(np.isfinite(total) & (total > 0))
    if bad.any():
        raise ValueError(f"logits row {int(np.argmax(bad))} has no finite maximum (all -inf, +inf or NaN)")
    # The last class with weight > 0 per row: u * total can round up to total, and the
    # clamp must not land on a class that cannot be drawn.
    last = c - 1 - np.argmax(weights[:, ::-1] > 0, axis=1)
    u = gen.random((b, n)) * total[:, None]
    for i in range(b):
        out[i] = np.minimum(np.searchsorted(cdf[i], u[i], side="right"), last[i])
    return out


def stateless_stream(seed):
    s = np.asarray(seed).reshape(-1)
    if s.shape != (2,):
        raise ValueError(f"seed must have shape [2], got {list(np.shape(seed))}")
    return philox((STATELESS_TAG,) + tuple(int(w) % 2**64 for w in s))


# ---- stateful kernels ------------------------------------------------------------------------
@k("RandomUniform")
def _random_uniform(shape, dtype, state, **seeds):
    return uniform01(cpu_stream(state), _dims(shape), dtype.np_dtype)


@k("RandomUniformInt")
def _random_uniform_int(shape, minval, maxval, state, **seeds):
    return uniform_int(cpu_stream(state), _dims(shape), minval, maxval)


@k("RandomStandardNormal")
def _random_normal(shape, dtype, state, **seeds):
    return standard_normal(cpu_stream(state), _dims(shape), dtype.np_dtype)


@k("TruncatedNormal")
def _truncated_normal(shape, dtype, state, **seeds):
    return truncated_normal(cpu_stream(state), _dims(shape), dtype.np_dtype)


@k("Multinomial")
def _multinomial(logits, num_samples, output_dtype, state, **seeds):
    return multinomial(cpu_stream(state), logits, num_samples, output_dtype.np_dtype)


@k("RandomShuffle")
def _random_shuffle(value, state, **seeds):
    value = np.asarray(value)
    if value.ndim == 0:
        return value.copy()
    return value[cpu_stream(state).permutation(value.shape[0])]


# ---- stateless kernels -----------------------------------------------------------------------
@k("StatelessRandomUniform")
def _stateless_uniform(shape, seed, dtype):
    return uniform01(stateless_stream(seed), _dims(shape), dtype.np_dtype)


@k("StatelessRandomUniformInt")
def _stateless_uniform_int(shape, seed, minval, maxval):
    return uniform_int(stateless_stream(seed), _dims(shape), minval, maxval)


@k("StatelessRandomUniformFullInt")
def _stateless_uniform_full_int(shape, seed, dtype):
    return full_range_int(stateless_stream(seed), _dims(shape), dtype.np_dtype)


@k("StatelessRandomNormal")
def _stateless_normal(shape, seed, dtype):
    return standard_normal(stateless_stream(seed), _dims(shape), dtype.np_dtype)


@k("StatelessTruncatedNormal")
def _stateless_truncated_normal(shape, seed, dtype):
    return truncated_normal(stateless_stream(seed), _dims(shape), dtype.np_dtype)


@k("StatelessMultinomial")
def _stateless_multinomial(logits, num_samples, seed, output_dtype):
    return multinomial(stateless_stream(seed), logits, num_samples, output_dtype.np_dtype)
