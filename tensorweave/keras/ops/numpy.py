"""``keras.ops.numpy``: Keras 3's NumPy-style ops, composed from tensorweave ops.

Dtypes follow Keras 3 (``_dtypes.result_type``): mixed operands are promoted, integer inputs of
"float" functions (``sqrt``, ``mean``, ``divide``...) give ``floatx()``. Every op runs eagerly,
inside ``tw.function``, and on ``keras.Input`` tensors (as a layer of a functional model).

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.ops.add(np.array([1, 2], "int8"), np.array([3, 4], "uint8")).dtype
tw.int16
>>> keras.ops.mean(np.array([1, 2], "int32")).numpy()
np.float32(1.5)
"""
import builtins

import numpy as np

import tensorweave as tw
from tensorweave.core.tensor import EagerTensor, Tensor
from tensorweave.keras.ops._dtypes import cast_to, floatx, is_float, promote, result_type, standardize, to_tensor
from tensorweave.keras.ops._symbolic import export
from tensorweave.ops import sort_ops as _sort
from tensorweave.ops.array_ops import getitem as _getitem

_t = to_tensor


def _rank(x):
    r = x.shape.rank
    if r is None:
        raise ValueError("keras.ops: this op needs the rank of its input to be known statically")
    return r


def _axes(axis, rank):
    if axis is None:
        return None
    if isinstance(axis, (list, tuple)):
        return [int(a) % builtins.max(rank, 1) for a in axis]
    return int(axis) % builtins.max(rank, 1)


def _static(x):
    """The Python value of an eager tensor or array (for shape-like arguments)."""
    if isinstance(x, EagerTensor):
        return x.numpy().tolist()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return x


def _float_t(x):
    x = _t(x)
    return cast_to(x, result_type(x.dtype, float))


# ---- elementwise, floating results -------------------------------------------------------------------
def _float_unary(fn, name):
    def op(x):
        return fn(_float_t(x))
    op.__name__ = name
    op.__doc__ = f"Elementwise ``{name}``; integer inputs give ``floatx()``."
    return op


def _arcsin(x):
    return tw.atan(x / tw.sqrt((1 - x) * (1 + x)))


def _arcsinh(x):
    a = tw.abs(x)
    return tw.sign(x) * tw.log(a + tw.sqrt(a * a + 1))


def _cbrt(x):
    return tw.sign(x) * tw.pow(tw.abs(x), tw.cast(1 / 3, x.dtype))


def _sinc(x):
    zero = tw.equal(x, 0)
    safe = tw.where(zero, tw.ones_like(x), x) * np.pi
    return tw.where(zero, tw.ones_like(x), tw.sin(safe) / safe)


exp = _float_unary(tw.exp, "exp")
exp2 = _float_unary(lambda x: tw.exp(x * np.log(2.0)), "exp2")
expm1 = _float_unary(tw.math.expm1, "expm1")
log = _float_unary(tw.log, "log")
log1p = _float_unary(tw.log1p, "log1p")
log2 = _float_unary(lambda x: tw.log(x) / np.log(2.0), "log2")
log10 = _float_unary(lambda x: tw.log(x) / np.log(10.0), "log10")
sqrt = _float_unary(tw.sqrt, "sqrt")
cbrt = _float_unary(_cbrt, "cbrt")
sin = _float_unary(tw.sin, "sin")
cos = _float_unary(tw.cos, "cos")
tan = _float_unary(tw.tan, "tan")
arctan = _float_unary(tw.atan, "arctan")
arcsin = _float_unary(_arcsin, "arcsin")
arccos = _float_unary(lambda x: np.pi / 2 - _arcsin(x), "arccos")
sinh = _float_unary(lambda x: (tw.exp(x) - tw.exp(-x)) / 2, "sinh")
cosh = _float_unary(lambda x: (tw.exp(x) + tw.exp(-x)) / 2, "cosh")
tanh = _float_unary(tw.tanh, "tanh")
arcsinh = _float_unary(_arcsinh, "arcsinh")
arccosh = _float_unary(lambda x: tw.log(x + tw.sqrt((x - 1) * (x + 1))), "arccosh")
arctanh = _float_unary(lambda x: 0.5 * (tw.log1p(x) - tw.log1p(-x)), "arctanh")
deg2rad = _float_unary(lambda x: x * (np.pi / 180), "deg2rad")
rad2deg = _float_unary(lambda x: x * (180 / np.pi), "rad2deg")
sinc = _float_unary(_sinc, "sinc")
reciprocal = _float_unary(tw.reciprocal, "reciprocal")
fabs = _float_unary(tw.abs, "fabs")


def _float_or_same(fn, name):
    """Identity-like rounding: float inputs are rounded, integers come back as floatx (Keras)."""
    def op(x):
        x = _t(x)
        return fn(_float_t(x)) if is_float(x.dtype) else cast_to(x, floatx())
    op.__name__ = name
    return op


floor = _float_or_same(tw.floor, "floor")
ceil = _float_or_same(tw.ceil, "ceil")


# ---- elementwise, same dtype ----------------------------------------------------------------------------
def abs(x):
    x = _t(x)
    return x if x.dtype.name.startswith("uint") or x.dtype == tw.bool else tw.abs(x)


absolute = abs


def negative(x):
    x = _t(x)
    if x.dtype.is_unsigned:  # tw.negative has no unsigned kernel (as TF); Keras wraps like NumPy
        return tw.subtract(tw.zeros_like(x), x)
    return tw.negative(x)


def sign(x):
    return tw.sign(_t(x))


def square(x):
    x = _t(x)
    if x.dtype == tw.bool:
        x = tw.cast(x, tw.int32)
    return tw.square(x)


def round(x, decimals=0):
    x = _t(x)
    if not is_float(x.dtype):
        if decimals >= 0:
            return x
        f = 10 ** (-decimals)
        return tw.cast(tw.round(tw.cast(x, tw.float64) / f) * f, x.dtype)
    if decimals == 0:
        return tw.round(x)
    f = 10.0 ** decimals
    return tw.round(x * f) / f


def trunc(x):
    x = _t(x)
    if not is_float(x.dtype):
        return x
    return tw.where(x < 0, tw.ceil(x), tw.floor(x))


def conj(x):
    x = _t(x)
    return tw.math.conj(x) if x.dtype.is_complex else tw.identity(x)


conjugate = conj


def copy(x):
    return tw.identity(_t(x))


def real(x):
    x = _t(x)
    return tw.math.real(x) if x.dtype.is_complex else tw.identity(x)


def imag(x):
    x = _t(x)
    return tw.math.imag(x) if x.dtype.is_complex else tw.zeros_like(x)


def angle(x):
    x = _t(x)
    if x.dtype.is_complex:
        return tw.math.angle(x)
    x = _float_t(x)
    return tw.where(x < 0, tw.ones_like(x) * np.pi, tw.zeros_like(x))


def signbit(x):
    x = _t(x)
    if not is_float(x.dtype):
        return tw.less(x, tw.zeros_like(x)) if x.dtype != tw.bool else tw.zeros_like(x)
    neg_zero = tw.logical_and(tw.equal(x, 0), tw.less(tw.reciprocal(x), 0))
    return tw.logical_or(tw.less(x, 0), neg_zero)


def isnan(x):
    x = _t(x)
    return tw.is_nan(x) if is_float(x.dtype) else tw.zeros_like(x, dtype=tw.bool)


def isinf(x):
    x = _t(x)
    return tw.is_inf(x) if is_float(x.dtype) else tw.zeros_like(x, dtype=tw.bool)


def isfinite(x):
    x = _t(x)
    return tw.is_finite(x) if is_float(x.dtype) else tw.ones_like(x, dtype=tw.bool)


def isposinf(x):
    x = _t(x)
    return tw.logical_and(isinf(x), tw.greater(x, tw.zeros_like(x)))


def isneginf(x):
    x = _t(x)
    return tw.logical_and(isinf(x), tw.less(x, tw.zeros_like(x)))


def isreal(x):
    x = _t(x)
    if x.dtype.is_complex:
        return tw.equal(tw.math.imag(x), 0)
    return tw.ones_like(x, dtype=tw.bool)


def nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    x = _t(x)
    if not is_float(x.dtype):
        return x
    big = float(np.finfo(x.dtype.np_dtype).max)
    x = tw.where(tw.is_nan(x), tw.fill(tw.shape(x), tw.cast(nan, x.dtype)), x)
    x = tw.where(isposinf(x), tw.fill(tw.shape(x), tw.cast(big if posinf is None else posinf, x.dtype)), x)
    return tw.where(isneginf(x), tw.fill(tw.shape(x), tw.cast(-big if neginf is None else neginf, x.dtype)), x)


def logical_not(x):
    return tw.logical_not(cast_to(x, "bool"))


# ---- binary elementwise ----------------------------------------------------------------------------------
def _binary(fn, name, floating=False):
    def op(x1, x2):
        a, b = promote(x1, x2, extra=(float,) if floating else ())
        return fn(a, b)
    op.__name__ = name
    return op


def _bool_arith(fn, logical):
    def op(a, b):
        if a.dtype == tw.bool:
            return logical(a, b)
        return fn(a, b)
    return op


add = _binary(_bool_arith(tw.add, tw.logical_or), "add")
subtract = _binary(tw.subtract, "subtract")
multiply = _binary(_bool_arith(tw.multiply, tw.logical_and), "multiply")
divide = _binary(tw.divide, "divide", floating=True)
true_divide = divide
divide_no_nan = _binary(tw.div_no_nan, "divide_no_nan", floating=True)
maximum = _binary(tw.maximum, "maximum")
minimum = _binary(tw.minimum, "minimum")
mod = _binary(tw.math.floormod, "mod")
equal = _binary(tw.equal, "equal")
not_equal = _binary(tw.not_equal, "not_equal")
less = _binary(tw.less, "less")
less_equal = _binary(tw.less_equal, "less_equal")
greater = _binary(tw.greater, "greater")
greater_equal = _binary(tw.greater_equal, "greater_equal")


def floor_divide(x1, x2):
    a, b = promote(x1, x2)
    if is_float(a.dtype):
        return tw.floor(a / b)
    return tw.math.floordiv(a, b)


def power(x1, x2):
    a, b = promote(x1, x2)
    return tw.pow(a, b)


def fmod(x1, x2):
    a, b = promote(x1, x2)
    if is_float(a.dtype):
        return a - trunc(a / b) * b
    r = tw.math.floormod(a, b)  # C's remainder takes the dividend's sign
    fix = tw.logical_and(tw.not_equal(r, 0), tw.not_equal(tw.less(a, 0), tw.less(b, 0)))
    return tw.where(fix, r - b, r)


def fmax(x1, x2):
    a, b = promote(x1, x2)
    if not is_float(a.dtype):
        return tw.maximum(a, b)
    return tw.where(tw.is_nan(a), b, tw.where(tw.is_nan(b), a, tw.maximum(a, b)))


def fmin(x1, x2):
    a, b = promote(x1, x2)
    if not is_float(a.dtype):
        return tw.minimum(a, b)
    return tw.where(tw.is_nan(a), b, tw.where(tw.is_nan(b), a, tw.minimum(a, b)))


def arctan2(x1, x2):
    y, x = promote(x1, x2, extra=(float,))
    safe_x = tw.where(tw.equal(x, 0), tw.ones_like(x), x)
    base = tw.atan(y / safe_x)
    pi = tw.ones_like(base) * np.pi
    neg_y = signbit(y)
    out = tw.where(tw.less(x, 0), tw.where(neg_y, base - pi, base + pi), base)
    half = tw.where(neg_y, -pi / 2, pi / 2)
    zero_x = tw.equal(x, 0)
    return tw.where(zero_x, tw.where(tw.equal(y, 0), tw.where(signbit(x), tw.where(neg_y, -pi, pi),
                                                                  y * 0), half), out)


def hypot(x1, x2):
    a, b = promote(x1, x2, extra=(float,))
    return tw.sqrt(a * a + b * b)


def logaddexp(x1, x2):
    a, b = promote(x1, x2, extra=(float,))
    m = tw.maximum(a, b)
    return m + tw.log1p(tw.exp(-tw.abs(a - b)))


def logaddexp2(x1, x2):
    a, b = promote(x1, x2, extra=(float,))
    ln2 = np.log(2.0)
    return logaddexp(a * ln2, b * ln2) / ln2


def heaviside(x1, x2):
    a, b = promote(x1, x2, extra=(float,))
    return tw.where(tw.less(a, 0), tw.zeros_like(a), tw.where(tw.greater(a, 0), tw.ones_like(a), b + tw.zeros_like(a)))


def ldexp(x1, x2):
    x2 = _t(x2)
    if is_float(x2.dtype):
        raise TypeError(f"ldexp: the exponent must be an integer tensor, got {x2.dtype.name}")
    a = _float_t(x1)
    return a * tw.pow(tw.cast(2.0, a.dtype), tw.cast(x2, a.dtype))


def logical_and(x1, x2):
    return tw.logical_and(cast_to(x1, "bool"), cast_to(x2, "bool"))


def logical_or(x1, x2):
    return tw.logical_or(cast_to(x1, "bool"), cast_to(x2, "bool"))


def logical_xor(x1, x2):
    return tw.not_equal(cast_to(x1, "bool"), cast_to(x2, "bool"))


def isclose(x1, x2, rtol=1e-5, atol=1e-8, equal_nan=False):
    a, b = promote(x1, x2)
    if not is_float(a.dtype):
        return tw.equal(a, b)
    close = tw.less_equal(tw.abs(a - b), atol + rtol * tw.abs(b))
    close = tw.logical_or(close, tw.equal(a, b))  # equal infinities
    if equal_nan:
        close = tw.logical_or(close, tw.logical_and(tw.is_nan(a), tw.is_nan(b)))
    return close


def allclose(x1, x2, rtol=1e-5, atol=1e-8, equal_nan=False):
    return tw.reduce_all(isclose(x1, x2, rtol, atol, equal_nan))


def clip(x, x_min, x_max):
    x = _t(x)
    dt = result_type(x, x_min, x_max)
    if x.dtype == tw.bool:
        dt = "int32"
    x = cast_to(x, dt)
    return tw.minimum(tw.maximum(x, cast_to(x_min, dt)), cast_to(x_max, dt))


def where(condition, x1=None, x2=None):
    c = cast_to(condition, "bool")
    if x1 is None and x2 is None:
        return nonzero(c)
    if x1 is None or x2 is None:
        raise ValueError("where: give both x1 and x2, or neither")
    a, b = promote(x1, x2)
    return tw.where(c, a, b)


def select(condlist, choicelist, default=0):
    conds = [cast_to(c, "bool") for c in condlist]
    choices = promote(*choicelist, default)
    out = choices[-1]
    for c, v in zip(reversed(conds), reversed(choices[:-1])):
        out = tw.where(c, v + tw.zeros_like(out), out + tw.zeros_like(v))
    return out


# ---- reductions -----------------------------------------------------------------------------------------
def _sum_dtype(d):
    name = tw.as_dtype(d).name
    if name in ("bool", "int8", "int16"):
        return "int32"
    if name in ("uint8", "uint16"):
        return "uint32"
    return name


def sum(x, axis=None, keepdims=False):
    x = _t(x)
    x = cast_to(x, _sum_dtype(x.dtype))
    return tw.reduce_sum(x, axis=_axes(axis, _rank(x)), keepdims=keepdims)


def prod(x, axis=None, keepdims=False, dtype=None):
    x = _t(x)
    x = cast_to(x, standardize(dtype) or _sum_dtype(x.dtype))
    return tw.reduce_prod(x, axis=_axes(axis, _rank(x)), keepdims=keepdims)


def mean(x, axis=None, keepdims=False):
    x = _float_t(x)
    return tw.reduce_mean(x, axis=_axes(axis, _rank(x)), keepdims=keepdims)


def var(x, axis=None, keepdims=False):
    x = _float_t(x)
    return tw.reduce_variance(x, axis=_axes(axis, _rank(x)), keepdims=keepdims)


def std(x, axis=None, keepdims=False):
    x = _float_t(x)
    return tw.reduce_std(x, axis=_axes(axis, _rank(x)), keepdims=keepdims)


def _minmax(reduce, name, fill):
    def op(x, axis=None, keepdims=False, initial=None):
        x = _t(x)
        was_bool = x.dtype == tw.bool
        if was_bool:
            x = tw.cast(x, tw.int32)
        out = reduce(x, axis=_axes(axis, _rank(x)), keepdims=keepdims)
        if initial is not None:
            out = fill(out, cast_to(initial, out.dtype))
        return tw.cast(out, tw.bool) if was_bool else out
    op.__name__ = name
    return op


max = _minmax(tw.reduce_max, "max", tw.maximum)
min = _minmax(tw.reduce_min, "min", tw.minimum)
amax, amin = max, min


def all(x, axis=None, keepdims=False):
    x = cast_to(x, "bool")
    return tw.reduce_all(x, axis=_axes(axis, _rank(x)), keepdims=keepdims)


def any(x, axis=None, keepdims=False):
    x = cast_to(x, "bool")
    return tw.reduce_any(x, axis=_axes(axis, _rank(x)), keepdims=keepdims)


def ptp(x, axis=None, keepdims=False):
    return subtract(max(x, axis, keepdims), min(x, axis, keepdims))


def _arg(fn, x, axis, keepdims):
    x = _t(x)
    if x.dtype == tw.bool:
        x = tw.cast(x, tw.int32)
    if axis is None:
        out = fn(tw.reshape(x, [-1]), axis=0, output_type=tw.int32)
        if keepdims:
            out = tw.reshape(out, [1] * _rank(x))
        return out
    out = fn(x, axis=_axes(axis, _rank(x)), output_type=tw.int32)
    return tw.expand_dims(out, axis) if keepdims else out


def argmax(x, axis=None, keepdims=False):
    return _arg(tw.argmax, x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
    return _arg(tw.argmin, x, axis, keepdims)


def count_nonzero(x, axis=None):
    x = _t(x)
    return tw.reduce_sum(tw.cast(tw.not_equal(x, tw.zeros_like(x)), tw.int32), axis=_axes(axis, _rank(x)))


def average(x, axis=None, weights=None):
    if weights is None:
        return mean(x, axis)
    x, w = promote(x, weights, extra=(float,))
    if _rank(w) == 1 and _rank(x) > 1 and axis is not None:
        shape = [1] * _rank(x)
        shape[_axes(axis, _rank(x))] = -1
        w = tw.reshape(w, shape)
    ax = _axes(axis, _rank(x))
    return tw.reduce_sum(x * w, axis=ax) / tw.reduce_sum(w + tw.zeros_like(x), axis=ax)


def _cum(fn, x, axis, dtype, bool_to):
    x = _t(x)
    if dtype is not None:
        x = cast_to(x, standardize(dtype))
    elif x.dtype == tw.bool:
        x = tw.cast(x, bool_to)
    if axis is None:
        x, axis = tw.reshape(x, [-1]), 0
    return fn(x, axis=_axes(axis, _rank(x)))


def cumsum(x, axis=None, dtype=None):
    return _cum(tw.cumsum, x, axis, dtype, tw.int32)


def cumprod(x, axis=None, dtype=None):
    return _cum(tw.cumprod, x, axis, dtype, tw.int32)


def _move_last(x, axis):
    """``x`` with ``axis`` moved last (flattened first when ``axis`` is None)."""
    if axis is None:
        return tw.reshape(x, [-1]), None
    r = _rank(x)
    axes = [axis] if isinstance(axis, int) else list(axis)
    axes = [a % r for a in axes]
    rest = [i for i in builtins.range(r) if i not in axes]
    y = tw.transpose(x, rest + axes)
    if len(axes) > 1:
        keep = [x.shape.as_list()[i] for i in rest]
        y = tw.reshape(y, [-1 if d is None else d for d in keep] + [-1]) if keep else tw.reshape(y, [-1])
    return y, axes


def _keep(out, x, axes, keepdims, extra_front=0):
    if not keepdims:
        return out
    r = _rank(x)
    for a in sorted(axes if axes is not None else builtins.range(r)):
        out = tw.expand_dims(out, a + extra_front)
    return out


def _positions(pos, method):
    """Indices to read and the weight of the upper one, for a quantile at (fractional) ``pos``."""
    lo, hi = tw.floor(pos), tw.ceil(pos)
    if method == "lower":
        return lo, lo, None
    if method == "higher":
        return hi, hi, None
    if method == "nearest":
        return tw.round(pos), tw.round(pos), None
    if method == "midpoint":
        return lo, hi, 0.5
    if method == "linear":
        return lo, hi, pos - lo
    raise ValueError(f"quantile: method must be one of 'linear', 'lower', 'higher', 'midpoint', 'nearest', "
                     f"got {method!r}")


def _quantile(x, q, axis, method, keepdims, skip_nan):
    x = _float_t(x)
    qs = cast_to(q, x.dtype)
    y, axes = _move_last(x, axis)
    n = y.shape.as_list()[-1]
    if n is None:
        raise ValueError("quantile: the size of the reduced axes must be known statically")
    if skip_nan:  # NaNs sort last and do not count
        nan = tw.is_nan(y)
        count = tw.reduce_sum(tw.cast(tw.logical_not(nan), x.dtype), axis=-1, keepdims=True)
        y = tw.where(nan, tw.fill(tw.shape(y), tw.cast(np.inf, x.dtype)), y)
    else:
        count = tw.fill(tw.concat([tw.shape(y)[:-1], [1]], 0), tw.cast(n, x.dtype))
    y = tw.sort(y, axis=-1)
    if skip_nan:  # all-NaN slices read zeros (their result is set to NaN below), not inf - inf
        y = tw.where(tw.equal(count + tw.zeros_like(y), 0.0), tw.zeros_like(y), y)
    pos = tw.maximum(count - 1, 0.0) * tw.reshape(qs, [-1])           # [..., nq]
    lo, hi, w = _positions(pos, method)
    read = [_sort._take(y, tw.cast(i, tw.int32), y.shape.rank - 1) for i in (lo, hi)]
    out = read[0] if w is None else read[0] + (read[1] - read[0]) * w
    if skip_nan:
        out = tw.where(tw.equal(count + tw.zeros_like(out), 0.0), tw.fill(tw.shape(out), tw.cast(np.nan, x.dtype)),
                       out)
    r = out.shape.rank
    out = tw.transpose(out, [r - 1] + list(builtins.range(r - 1)))   # [nq, ...]
    if qs.shape.rank == 0:
        out = tw.reshape(out, tw.shape(out)[1:]) if r > 1 else tw.reshape(out, [])
        return _keep(out, x, axes, keepdims)
    out = tw.reshape(out, tw.concat([tw.shape(qs), tw.shape(out)[1:]], 0))
    return _keep(out, x, axes, keepdims, extra_front=qs.shape.rank)


def quantile(x, q, axis=None, method="linear", keepdims=False):
    return _quantile(x, q, axis, method, keepdims, skip_nan=False)


def percentile(x, q, axis=None, method="linear", keepdims=False):
    return quantile(x, divide(q, 100.0) if not isinstance(q, (int, float)) else q / 100.0, axis, method, keepdims)


def median(x, axis=None, keepdims=False):
    return quantile(x, 0.5, axis=axis, keepdims=keepdims)


def _nan_fill(x, value):
    x = _t(x)
    if not is_float(x.dtype):
        return x
    return tw.where(tw.is_nan(x), tw.fill(tw.shape(x), tw.cast(value, x.dtype)), x)


def nansum(x, axis=None, keepdims=False):
    return sum(_nan_fill(x, 0), axis, keepdims)


def nanprod(x, axis=None, keepdims=False):
    return prod(_nan_fill(x, 1), axis, keepdims)


def nanmax(x, axis=None, keepdims=False):
    return max(_nan_fill(x, -np.inf), axis, keepdims)


def nanmin(x, axis=None, keepdims=False):
    return min(_nan_fill(x, np.inf), axis, keepdims)


def _nan_count(x, axis, keepdims):
    x = _float_t(x)
    return tw.reduce_sum(tw.cast(tw.logical_not(tw.is_nan(x)), x.dtype), axis=_axes(axis, _rank(x)),
                         keepdims=keepdims)


def nanmean(x, axis=None, keepdims=False):
    x = _float_t(x)
    return sum(_nan_fill(x, 0), axis, keepdims) / _nan_count(x, axis, keepdims)


def nanvar(x, axis=None, keepdims=False):
    x = _float_t(x)
    m = nanmean(x, axis, keepdims=True)
    return nanmean(square(x - m), axis, keepdims)


def nanstd(x, axis=None, keepdims=False):
    return tw.sqrt(nanvar(x, axis, keepdims))


def nancumsum(x, axis=None, dtype=None):
    return cumsum(_nan_fill(x, 0), axis, dtype)


def nancumprod(x, axis=None, dtype=None):
    return cumprod(_nan_fill(x, 1), axis, dtype)


def nanargmax(x, axis=None, keepdims=False):
    return argmax(_nan_fill(x, -np.inf), axis, keepdims)


def nanargmin(x, axis=None, keepdims=False):
    return argmin(_nan_fill(x, np.inf), axis, keepdims)


def nanquantile(x, q, axis=None, method="linear", keepdims=False):
    return _quantile(x, q, axis, method, keepdims, skip_nan=True)


def nanpercentile(x, q, axis=None, method="linear", keepdims=False):
    return nanquantile(x, np.asarray(_static(q)) / 100.0, axis, method, keepdims)


def nanmedian(x, axis=None, keepdims=False):
    return nanquantile(x, 0.5, axis, keepdims=keepdims)


# ---- creation ----------------------------------------------------------------------------------------
def _shape_arg(shape):
    shape = _static(shape)
    return [int(shape)] if np.ndim(shape) == 0 else [int(s) for s in shape]


def zeros(shape, dtype=None):
    return tw.zeros(_shape_arg(shape), dtype=standardize(dtype) or floatx())


def ones(shape, dtype=None):
    return tw.ones(_shape_arg(shape), dtype=standardize(dtype) or floatx())


empty = zeros


def full(shape, fill_value, dtype=None):
    dt = standardize(dtype) or (floatx() if not isinstance(fill_value, (Tensor, np.ndarray, np.generic))
                                else result_type(fill_value))
    return tw.broadcast_to(cast_to(fill_value, dt), _shape_arg(shape))


def _like(x, dtype):
    x = _t(x)
    return x, standardize(dtype) or x.dtype.name


def zeros_like(x, dtype=None):
    x, dt = _like(x, dtype)
    return tw.zeros_like(x, dtype=dt)


def ones_like(x, dtype=None):
    x, dt = _like(x, dtype)
    return tw.ones_like(x, dtype=dt)


empty_like = zeros_like


def full_like(x, fill_value, dtype=None):
    x, dt = _like(x, dtype)
    return tw.zeros_like(x, dtype=dt) + cast_to(fill_value, dt)


def array(x, dtype=None):
    return _t(x, standardize(dtype))


def arange(start, stop=None, step=None, dtype=None):
    step = 1 if step is None else step
    if stop is None:
        start, stop = 0, start
    dt = standardize(dtype) or result_type(*[_static(v) for v in (start, stop, step)])
    if dt in ("bool", "int8", "int16", "uint8", "uint16"):
        return tw.cast(tw.range(start, stop, step, dtype="int32"), dt)
    wide = "float32" if dt in ("float16", "bfloat16") else dt
    return cast_to(tw.range(cast_to(start, wide), cast_to(stop, wide), cast_to(step, wide), dtype=wide), dt)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    dt = standardize(dtype) or result_type(start, stop, float)
    a, b = cast_to(start, "float64"), cast_to(stop, "float64")
    div = (num - 1) if endpoint else num
    steps = tw.range(0, num, 1, dtype="float64")
    step = (b - a) / builtins.max(div, 1)
    shape = [num] + [1] * a.shape.rank
    out = tw.expand_dims(a, 0) + tw.reshape(steps, shape) * tw.expand_dims(step, 0)
    if endpoint and num > 1:
        out = tw.concat([out[:-1], tw.expand_dims(b, 0)], 0)
    if axis != 0:
        out = moveaxis(out, 0, axis)
    out = cast_to(out, dt) if is_float(dt) else tw.cast(tw.floor(out), dt)
    return (out, cast_to(step, dt)) if retstep else out


def logspace(start, stop, num=50, endpoint=True, base=10, dtype=None, axis=0):
    dt = standardize(dtype) or result_type(start, stop, float)
    e = linspace(start, stop, num, endpoint, dtype="float64", axis=axis)
    return cast_to(tw.pow(cast_to(base, "float64") + tw.zeros_like(e), e), dt)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    dt = standardize(dtype) or result_type(start, stop, float)
    a, b = cast_to(start, "float64"), cast_to(stop, "float64")
    e = linspace(tw.log(tw.abs(a)), tw.log(tw.abs(b)), num, endpoint, dtype="float64", axis=axis)
    return cast_to(tw.sign(a) * tw.exp(e), dt)


def eye(N, M=None, k=0, dtype=None):
    M = N if M is None else M
    dt = standardize(dtype) or floatx()
    return tw.constant(np.eye(int(N), int(M), int(k), dtype=tw.as_dtype(dt).np_dtype))


def identity(n, dtype=None):
    return eye(n, dtype=dtype)


def tri(N, M=None, k=0, dtype=None):
    M = N if M is None else M
    dt = standardize(dtype) or floatx()
    return tw.constant(np.tri(int(N), int(M), int(k), dtype=tw.as_dtype(dt).np_dtype))


def _window(fn, name):
    def op(x, *args):
        return tw.constant(fn(int(_static(x)), *args).astype(floatx()))
    op.__name__ = name
    return op


bartlett = _window(np.bartlett, "bartlett")
blackman = _window(np.blackman, "blackman")
hamming = _window(np.hamming, "hamming")
hanning = _window(np.hanning, "hanning")
kaiser = _window(np.kaiser, "kaiser")


def _tri_mask(x, k, lower):
    x = _t(x)
    n, m = x.shape.as_list()[-2:]
    mask = np.tri(n, m, k, dtype=bool)
    return tw.where(tw.constant(mask if lower else ~mask), x, tw.zeros_like(x))


def tril(x, k=0):
    return _tri_mask(x, int(k), True)


def triu(x, k=0):
    return _tri_mask(x, int(k) - 1, False)


def vander(x, N=None, increasing=False):
    x = _t(x)
    n = x.shape.as_list()[0] if N is None else int(N)
    powers = np.arange(n) if increasing else np.arange(n)[::-1]
    return tw.pow(tw.expand_dims(x, 1), tw.constant(powers.astype(x.dtype.np_dtype)))


def meshgrid(*x, indexing="xy"):
    xs = [_t(a) for a in x]
    return tw.meshgrid(*xs, indexing=indexing)


# ---- shapes -------------------------------------------------------------------------------------------
def reshape(x, newshape):
    return tw.reshape(_t(x), _shape_arg(newshape) if not isinstance(newshape, Tensor) or
                      isinstance(newshape, EagerTensor) else newshape)


def ravel(x):
    return tw.reshape(_t(x), [-1])


def transpose(x, axes=None):
    x = _t(x)
    return tw.transpose(x, None if axes is None else [int(a) for a in axes])


def swapaxes(x, axis1, axis2):
    x = _t(x)
    perm = list(builtins.range(_rank(x)))
    a, b = int(axis1) % len(perm), int(axis2) % len(perm)
    perm[a], perm[b] = perm[b], perm[a]
    return tw.transpose(x, perm)


def moveaxis(x, source, destination):
    x = _t(x)
    r = _rank(x)
    src = [int(source)] if np.ndim(source) == 0 else [int(s) for s in source]
    dst = [int(destination)] if np.ndim(destination) == 0 else [int(d) for d in destination]
    src, dst = [s % r for s in src], [d % r for d in dst]
    order = [i for i in builtins.range(r) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return tw.transpose(x, order)


def expand_dims(x, axis):
    x = _t(x)
    axes = [axis] if np.ndim(axis) == 0 else list(axis)
    out_rank = _rank(x) + len(axes)
    for a in sorted(int(a) % out_rank for a in axes):
        x = tw.expand_dims(x, a)
    return x


def squeeze(x, axis=None):
    x = _t(x)
    if axis is None:
        return tw.squeeze(x)
    axes = [axis] if np.ndim(axis) == 0 else list(axis)
    return tw.squeeze(x, axis=[int(a) for a in axes])


def broadcast_to(x, shape):
    return tw.broadcast_to(_t(x), _shape_arg(shape))


def ndim(x):
    return _rank(_t(x))


def size(x):
    x = _t(x)
    dims = x.shape.as_list()
    if None in dims:
        return tw.size(x)
    return int(np.prod(dims, dtype=np.int64))


def concatenate(xs, axis=0):
    ts = promote(*xs)
    if axis is None:
        return tw.concat([tw.reshape(t, [-1]) for t in ts], 0)
    return tw.concat(ts, int(axis))


def append(x1, x2, axis=None):
    return concatenate([x1, x2], axis)


def stack(x, axis=0):
    return tw.stack(promote(*x), axis=int(axis))


def _at_least(x, n):
    x = _t(x)
    while _rank(x) < n:
        x = tw.expand_dims(x, 0 if _rank(x) == 0 or n == 2 else _rank(x))
    return x


def hstack(xs):
    ts = [_at_least(t, 1) for t in promote(*xs)]
    return tw.concat(ts, 0 if _rank(ts[0]) == 1 else 1)


def vstack(xs):
    ts = [_at_least(t, 2) for t in promote(*xs)]
    return tw.concat(ts, 0)


def dstack(xs):
    out = []
    for t in promote(*xs):
        if _rank(t) == 0:
            t = tw.reshape(t, [1, 1, 1])
        elif _rank(t) == 1:
            t = tw.reshape(t, [1, -1, 1])
        elif _rank(t) == 2:
            t = tw.expand_dims(t, 2)
        out.append(t)
    return tw.concat(out, 2)


def _split_sizes(n, indices_or_sections, strict):
    if np.ndim(indices_or_sections) == 0:
        k = int(indices_or_sections)
        if strict and n % k:
            raise ValueError(f"split: an axis of size {n} does not split into {k} equal sections. Hint: use "
                             "array_split for unequal sections")
        base, extra = divmod(n, k)
        return [base + 1] * extra + [base] * (k - extra)
    bounds = [0] + [builtins.min(builtins.max(int(i), 0), n) for i in indices_or_sections] + [n]
    return [builtins.max(b - a, 0) for a, b in zip(bounds[:-1], bounds[1:])]


def split(x, indices_or_sections, axis=0):
    x = _t(x)
    ax = int(axis) % _rank(x)
    n = x.shape.as_list()[ax]
    if n is None:
        return tw.split(x, int(indices_or_sections), axis=ax)
    return tw.split(x, _split_sizes(n, _static(indices_or_sections), True), axis=ax)


def array_split(x, indices_or_sections, axis=0):
    x = _t(x)
    ax = int(axis) % _rank(x)
    return tw.split(x, _split_sizes(x.shape.as_list()[ax], _static(indices_or_sections), False), axis=ax)


def hsplit(x, indices_or_sections):
    return split(x, indices_or_sections, axis=0 if _rank(_t(x)) == 1 else 1)


def vsplit(x, indices_or_sections):
    return split(x, indices_or_sections, axis=0)


def dsplit(x, indices_or_sections):
    return split(x, indices_or_sections, axis=2)


def unstack(x, num=None, axis=0):
    return tw.unstack(_t(x), num=num, axis=axis)


def tile(x, repeats):
    x = _t(x)
    reps = _shape_arg(repeats)
    r = _rank(x)
    if len(reps) < r:
        reps = [1] * (r - len(reps)) + reps
    while _rank(x) < len(reps):
        x = tw.expand_dims(x, 0)
    return tw.tile(x, reps)


def repeat(x, repeats, axis=None):
    x = _t(x)
    if axis is None:
        x, axis = tw.reshape(x, [-1]), 0
    return tw.repeat(x, _static(repeats), axis=int(axis))


def flip(x, axis=None):
    x = _t(x)
    axes = list(builtins.range(_rank(x))) if axis is None else \
        [int(axis)] if np.ndim(axis) == 0 else [int(a) for a in axis]
    return tw.reverse(x, axes)


def fliplr(x):
    return flip(x, 1)


def flipud(x):
    return flip(x, 0)


def roll(x, shift, axis=None):
    x = _t(x)
    if axis is None:
        return tw.reshape(tw.roll(tw.reshape(x, [-1]), shift, 0), tw.shape(x))
    return tw.roll(x, shift, axis)


def rot90(array, k=1, axes=(0, 1)):
    x = _t(array)
    a, b = [int(v) % _rank(x) for v in axes]
    k = int(k) % 4
    if k == 0:
        return x
    if k == 2:
        return flip(x, [a, b])
    y = swapaxes(x, a, b)
    return flip(y, a) if k == 1 else flip(y, b)


def pad(x, pad_width, mode="constant", constant_values=None):
    x = _t(x)
    r = _rank(x)
    pw = np.asarray(_static(pad_width), dtype=np.int64)
    pw = np.broadcast_to(pw.reshape((-1, 2)) if pw.ndim else pw, (r, 2)) if pw.size in (1, 2) else pw.reshape(r, 2)
    mode = mode.lower()
    if mode not in ("constant", "reflect", "symmetric"):
        raise ValueError(f"pad: mode must be 'constant', 'reflect' or 'symmetric', got {mode!r}")
    if constant_values is not None and mode != "constant":
        raise ValueError("pad: constant_values is only valid with mode='constant'")
    value = 0 if constant_values is None else constant_values
    return tw.pad(x, pw.tolist(), mode=mode.upper(), constant_values=cast_to(value, x.dtype))


def diagonal(x, offset=0, axis1=0, axis2=1):
    x = _t(x)
    r = _rank(x)
    a, b = int(axis1) % r, int(axis2) % r
    y = moveaxis(x, [a, b], [r - 2, r - 1])
    n, m = y.shape.as_list()[-2:]
    k = int(offset)
    rows = np.arange(builtins.max(0, -k), builtins.min(n, m - k))
    if rows.size == 0:
        return tw.zeros(y.shape.as_list()[:-2] + [0], dtype=x.dtype)
    flat = tw.reshape(y, tw.concat([tw.shape(y)[:-2], [n * m]], 0))
    return tw.gather(flat, tw.constant((rows * m + rows + k).astype(np.int32)), axis=-1)


def trace(x, offset=0, axis1=0, axis2=1):
    x = _t(x)
    return sum(diagonal(x, offset, axis1, axis2), axis=-1)


def diag(x, k=0):
    x = _t(x)
    if _rank(x) == 1:
        n = x.shape.as_list()[0] + builtins.abs(int(k))
        rows = np.arange(x.shape.as_list()[0])
        r, c = (rows, rows + k) if k >= 0 else (rows - k, rows)
        idx = np.stack([r, c], 1).astype(np.int32)
        return tw.scatter_nd(tw.constant(idx), x, [n, n])
    if _rank(x) == 2:
        return diagonal(x, k)
    raise ValueError(f"diag: input must be 1-D or 2-D, got shape {x.shape}")


def diagflat(x, k=0):
    return diag(ravel(x), k)


def take(x, indices, axis=None):
    x = _t(x)
    idx = _t(indices)
    if idx.dtype not in (tw.int32, tw.int64):
        idx = tw.cast(idx, tw.int32)
    if axis is None:
        x, axis = tw.reshape(x, [-1]), 0
    ax = int(axis) % _rank(x)
    n = x.shape.as_list()[ax]
    if n is not None:  # NumPy-style negative indices
        idx = tw.where(tw.less(idx, 0), idx + n, idx)
    return tw.gather(x, idx, axis=ax)


def take_along_axis(x, indices, axis=None):
    x = _t(x)
    idx = _t(indices)
    if idx.dtype not in (tw.int32, tw.int64):
        idx = tw.cast(idx, tw.int32)
    if axis is None:
        x, axis = tw.reshape(x, [-1]), 0
    r = _rank(x)
    ax = int(axis) % r
    xs, ish = x.shape.as_list(), idx.shape.as_list()
    out_shape = [builtins.max(a, b) if i != ax else b for i, (a, b) in enumerate(zip(xs, ish))]
    n = xs[ax]
    if n is not None:
        idx = tw.where(tw.less(idx, 0), idx + n, idx)
    xb = tw.broadcast_to(x, [d if i != ax else xs[ax] for i, d in enumerate(out_shape)])
    idx = tw.broadcast_to(idx, out_shape)
    return _sort._take(xb, idx, ax)


def get_item(x, key):
    return _getitem(_t(x), key)


def sort(x, axis=-1):
    x = _t(x)
    if x.dtype == tw.bool:
        return tw.cast(tw.sort(tw.cast(x, tw.int32), axis=axis), tw.bool)
    if axis is None:
        return tw.sort(tw.reshape(x, [-1]))
    return tw.sort(x, axis=axis)


def argsort(x, axis=-1):
    x = _t(x)
    if x.dtype == tw.bool:
        x = tw.cast(x, tw.int32)
    if axis is None:
        return tw.argsort(tw.reshape(x, [-1]))
    return tw.argsort(x, axis=axis)


def argpartition(x, kth, axis=-1):
    """Indices that partition ``x`` around its ``kth`` element; a full (stable) sort satisfies
    the contract, so the order inside each part may differ from NumPy's."""
    return argsort(x, axis)


def nonzero(x):
    x = _t(x)
    coords = tw.where(tw.not_equal(x, tw.zeros_like(x)))
    return tuple(tw.cast(c, tw.int32) for c in tw.unstack(coords, num=_rank(x), axis=1))


def searchsorted(sorted_sequence, values, side="left"):
    seq, v = promote(sorted_sequence, values)
    if _rank(seq) != 1:
        raise ValueError(f"searchsorted: sorted_sequence must be 1-D, got shape {seq.shape}")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    cmp = tw.less if side == "left" else tw.less_equal
    return tw.reduce_sum(tw.cast(cmp(seq, tw.expand_dims(v, -1)), tw.int32), axis=-1)


def digitize(x, bins):
    return searchsorted(bins, x, side="right")


def isin(x1, x2, assume_unique=False, invert=False):
    a, b = promote(x1, x2)
    hit = tw.reduce_any(tw.equal(tw.expand_dims(a, -1), tw.reshape(b, [-1])), axis=-1)
    return tw.logical_not(hit) if invert else hit


def bincount(x, weights=None, minlength=0, sparse=False):
    x = _t(x)
    if sparse:
        raise ValueError("bincount: sparse=True needs sparse tensors, which tensorweave does not have")
    if not isinstance(x, EagerTensor) and not minlength:
        raise ValueError("bincount inside a graph needs minlength (the number of bins)")
    n = int(minlength)
    if isinstance(x, EagerTensor) and x.shape.num_elements():
        n = builtins.max(n, int(x.numpy().max()) + 1)
    if weights is None:
        w = tw.ones_like(x, dtype=tw.int32)
    else:
        w = _t(weights)
    if _rank(x) == 2:
        return tw.stack([tw.unsorted_segment_sum(w[i], x[i], n) for i in builtins.range(x.shape.as_list()[0])])
    return tw.unsorted_segment_sum(w, x, n)


def unique(x, sorted=True, return_index=False, return_inverse=False, return_counts=False, axis=None, size=None,
           fill_value=None):
    """NumPy's ``unique`` (eager: its output size depends on the values, unless ``size`` is given)."""
    x = _t(x)
    if not isinstance(x, EagerTensor):
        raise ValueError("unique inside tw.function needs a static size; call it eagerly")
    res = np.unique(x.numpy(), return_index=True, return_inverse=True, return_counts=True, axis=axis)
    vals, index, inverse, counts = res
    if size is not None:
        pad_n = int(size) - vals.shape[0]
        fill = vals.min() if fill_value is None and vals.size else (fill_value or 0)
        vals = np.concatenate([vals[:size], np.full((builtins.max(pad_n, 0),) + vals.shape[1:], fill, vals.dtype)])
        index = np.concatenate([index[:size], np.zeros(builtins.max(pad_n, 0), index.dtype)])
        counts = np.concatenate([counts[:size], np.zeros(builtins.max(pad_n, 0), counts.dtype)])
    out = [tw.constant(vals)]
    if return_index:
        out.append(tw.constant(index.astype(np.int32)))
    if return_inverse:
        out.append(tw.constant(inverse.reshape(x.shape.as_list() if axis is None else -1).astype(np.int32)))
    if return_counts:
        out.append(tw.constant(counts.astype(np.int32)))
    return out[0] if len(out) == 1 else tuple(out)


def histogram(x, bins=10, range=None):
    x = _t(x)
    if _rank(x) != 1:
        raise ValueError(f"histogram: input must be 1-D, got shape {x.shape}")
    xf = cast_to(x, "float64")
    if range is None:
        lo, hi = tw.reduce_min(xf), tw.reduce_max(xf)
    else:
        lo, hi = tw.constant(float(range[0]), tw.float64), tw.constant(float(range[1]), tw.float64)
    edges = lo + (hi - lo) * tw.range(0, bins + 1, 1, dtype="float64") / bins
    idx = tw.cast(tw.floor((xf - lo) / (hi - lo) * bins), tw.int32)
    idx = tw.where(tw.equal(xf, hi), idx - 1, idx)  # the last bin is closed
    inside = tw.logical_and(tw.greater_equal(xf, lo), tw.less_equal(xf, hi))
    idx = tw.where(inside, idx, tw.fill(tw.shape(idx), bins))
    counts = tw.unsorted_segment_sum(tw.ones_like(idx), idx, bins + 1)[:bins]
    return counts, edges


def unravel_index(indices, shape):
    out = tw.unravel_index(cast_to(indices, "int32"), _shape_arg(shape))
    return tuple(tw.unstack(out, axis=0))


# ---- products -----------------------------------------------------------------------------------------
def matmul(x1, x2):
    a, b = promote(x1, x2)
    if a.dtype == tw.bool:
        a, b = tw.cast(a, tw.int32), tw.cast(b, tw.int32)
    ra, rb = _rank(a), _rank(b)
    if ra == 1 and rb == 1:
        return tw.reduce_sum(a * b)
    if ra == 1:
        return tw.squeeze(tw.matmul(tw.expand_dims(a, 0), b), -2)
    if rb == 1:
        return tw.squeeze(tw.matmul(a, tw.expand_dims(b, -1)), -1)
    return tw.matmul(a, b)


def dot(x1, x2):
    a, b = promote(x1, x2)
    ra, rb = _rank(a), _rank(b)
    if ra == 0 or rb == 0:
        return a * b
    if rb <= 2:
        return matmul(a, b)
    return tw.tensordot(a, b, [[ra - 1], [rb - 2]])


def vdot(x1, x2):
    a, b = promote(x1, x2)
    return tw.reduce_sum(tw.reshape(a, [-1]) * tw.reshape(b, [-1]))


def inner(x1, x2):
    a, b = promote(x1, x2)
    if _rank(a) == 0 or _rank(b) == 0:
        return a * b
    return tw.tensordot(a, b, [[_rank(a) - 1], [_rank(b) - 1]])


def outer(x1, x2):
    a, b = promote(x1, x2)
    return tw.reshape(a, [-1, 1]) * tw.reshape(b, [1, -1])


def tensordot(x1, x2, axes=2):
    a, b = promote(x1, x2)
    return tw.tensordot(a, b, _static(axes))


def einsum(subscripts, *operands, **kwargs):
    ts = promote(*operands)
    if ts and ts[0].dtype == tw.bool:
        ts = [tw.cast(t, tw.int32) for t in ts]
    if ts and ts[0].dtype.name in ("int8", "int16", "uint8", "uint16"):
        ts = [tw.cast(t, tw.int32) for t in ts]
    return tw.einsum(subscripts, *ts)


def kron(x1, x2):
    a, b = promote(x1, x2)
    ra, rb = _rank(a), _rank(b)
    r = builtins.max(ra, rb)
    a = tw.reshape(a, [1] * (r - ra) + a.shape.as_list())
    b = tw.reshape(b, [1] * (r - rb) + b.shape.as_list())
    sa, sb = a.shape.as_list(), b.shape.as_list()
    a2 = tw.reshape(a, [d for s in sa for d in (s, 1)])
    b2 = tw.reshape(b, [d for s in sb for d in (1, s)])
    return tw.reshape(a2 * b2, [p * q for p, q in zip(sa, sb)])


def cross(x1, x2, axisa=-1, axisb=-1, axisc=-1, axis=None):
    a, b = promote(x1, x2)
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = moveaxis(a, axisa, -1), moveaxis(b, axisb, -1)
    if a.shape.as_list()[-1] == 2:
        a = tw.pad(a, [[0, 0]] * (_rank(a) - 1) + [[0, 1]])
    if b.shape.as_list()[-1] == 2:
        b = tw.pad(b, [[0, 0]] * (_rank(b) - 1) + [[0, 1]])
    out = tw.linalg.cross(a + tw.zeros_like(b), b + tw.zeros_like(a))
    return moveaxis(out, -1, axisc)


def correlate(x1, x2, mode="valid"):
    a, b = promote(x1, x2, extra=(float,))
    n, m = a.shape.as_list()[0], b.shape.as_list()[0]
    if mode == "valid":
        pad_a = 0
    elif mode == "same":
        pad_a = m // 2
    elif mode == "full":
        pad_a = m - 1
    else:
        raise ValueError(f"correlate: mode must be 'valid', 'same' or 'full', got {mode!r}")
    if n < m:
        return flip(correlate(b, a, mode), 0)
    ap = tw.pad(a, [[pad_a, pad_a if mode == "full" else m - 1 - pad_a]]) if mode != "valid" else a
    length = ap.shape.as_list()[0] - m + 1
    rows = np.arange(length)[:, None] + np.arange(m)[None, :]
    windows = tw.gather(ap, tw.constant(rows.astype(np.int32)))
    return tw.reduce_sum(windows * b, axis=-1)


def diff(a, n=1, axis=-1):
    x = _t(a)
    ax = int(axis) % _rank(x)
    for _ in builtins.range(int(n)):
        size = x.shape.as_list()[ax]
        hi = [slice(None)] * ax + [slice(1, size)]
        lo = [slice(None)] * ax + [slice(0, size - 1)]
        x = (tw.not_equal if x.dtype == tw.bool else tw.subtract)(x[tuple(hi)], x[tuple(lo)])
    return x


def trapezoid(y, x=None, dx=1.0, axis=-1):
    y = _float_t(y)
    ax = int(axis) % _rank(y)
    size = y.shape.as_list()[ax]
    hi = tuple([slice(None)] * ax + [slice(1, size)])
    lo = tuple([slice(None)] * ax + [slice(0, size - 1)])
    if x is None:
        d = cast_to(dx, y.dtype)
    else:
        d = diff(cast_to(x, y.dtype), axis=ax if _rank(_t(x)) > 1 else -1)
        if _rank(d) == 1 and _rank(y) > 1:
            shape = [1] * _rank(y)
            shape[ax] = -1
            d = tw.reshape(d, shape)
    return tw.reduce_sum(d * (y[hi] + y[lo]) / 2, axis=ax)


def corrcoef(x):
    x = _float_t(x)
    x = x - tw.reduce_mean(x, axis=1, keepdims=True)
    cov = tw.matmul(x, x, transpose_b=True)
    d = tw.sqrt(tw.linalg.diag_part(cov))
    return tw.clip_by_value(cov / tw.expand_dims(d, 1) / tw.expand_dims(d, 0), -1.0, 1.0)


# ---- bitwise (integers and bools; composed from integer arithmetic) ----------------------------------
def _bits(x):
    x = _t(x)
    if is_float(x.dtype):
        raise TypeError(f"bitwise ops need integer or bool tensors, got {x.dtype.name}")
    return x


def _bitwise(x, y, combine, name):
    a, b = promote(_bits(x), _bits(y))
    if a.dtype == tw.bool:
        return {"and": tw.logical_and, "or": tw.logical_or, "xor": tw.not_equal}[name](a, b)
    if isinstance(a, EagerTensor) and isinstance(b, EagerTensor):
        fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[name]
        return tw.constant(fn(a.numpy(), b.numpy()))
    return combine(a, b)


def _bit_loop(a, b, keep):
    """Bitwise combination built bit by bit from floordiv/floormod (graph mode)."""
    nbits = a.dtype.size * 8
    wide = tw.int64
    a64, b64 = tw.cast(a, wide), tw.cast(b, wide)
    # two's complement: map to [0, 2**nbits)
    m = 2 ** nbits if nbits < 64 else None
    if m is not None:
        a64 = tw.math.floormod(a64, m)
        b64 = tw.math.floormod(b64, m)
    out = tw.zeros_like(a64)
    for i in builtins.range(nbits if nbits < 64 else 63):
        p = 2 ** i
        ba = tw.math.floormod(tw.math.floordiv(a64, p), 2)
        bb = tw.math.floormod(tw.math.floordiv(b64, p), 2)
        out = out + keep(ba, bb) * p
    if m is not None and a.dtype.name.startswith("int"):
        out = tw.where(tw.greater_equal(out, m // 2), out - m, out)
    return tw.cast(out, a.dtype)


def bitwise_and(x, y):
    return _bitwise(x, y, lambda a, b: _bit_loop(a, b, lambda p, q: p * q), "and")


def bitwise_or(x, y):
    return _bitwise(x, y, lambda a, b: _bit_loop(a, b, lambda p, q: p + q - p * q), "or")


def bitwise_xor(x, y):
    return _bitwise(x, y, lambda a, b: _bit_loop(a, b, lambda p, q: tw.math.floormod(p + q, 2)), "xor")


def bitwise_invert(x):
    x = _bits(x)
    if x.dtype == tw.bool:
        return tw.logical_not(x)
    if x.dtype.name.startswith("uint"):
        return tw.cast(tw.constant(np.iinfo(x.dtype.np_dtype).max, tw.int64) - tw.cast(x, tw.int64), x.dtype)
    return -x - 1


bitwise_not = bitwise_invert


def left_shift(x, y):
    a, b = promote(_bits(x), _bits(y))
    return a * tw.pow(tw.ones_like(a) * 2, b)


def right_shift(x, y):
    a, b = promote(_bits(x), _bits(y))
    return tw.math.floordiv(a, tw.pow(tw.ones_like(a) * 2, b))


bitwise_left_shift, bitwise_right_shift = left_shift, right_shift


def gcd(x1, x2):
    a, b = promote(_bits(x1), _bits(x2))
    if isinstance(a, EagerTensor) and isinstance(b, EagerTensor):
        return tw.constant(np.gcd(a.numpy(), b.numpy()))
    a, b = tw.abs(a), tw.abs(b)
    bits = a.dtype.size * 8
    # Euclid with a fixed number of steps (enough for the dtype's range: Fibonacci bound)
    for _ in builtins.range(int(bits * 1.5) + 2):
        safe = tw.where(tw.equal(b, 0), tw.ones_like(b), b)
        a, b = tw.where(tw.equal(b, 0), a, b), tw.where(tw.equal(b, 0), b, tw.math.floormod(a, safe))
    return a


def lcm(x1, x2):
    a, b = promote(_bits(x1), _bits(x2))
    g = gcd(a, b)
    safe = tw.where(tw.equal(g, 0), tw.ones_like(g), g)
    return tw.abs(tw.math.floordiv(a, safe) * b)


def nextafter(x1, x2):
    a, b = promote(x1, x2, extra=(float,))
    if isinstance(a, EagerTensor) and isinstance(b, EagerTensor):
        return tw.constant(np.nextafter(a.numpy(), b.numpy()))
    raise NotImplementedError("nextafter runs eagerly only")


def i0(x):
    x = _float_t(x)
    # power series of the modified Bessel function I0 (converges for all x; 30 terms reach float64
    # precision up to |x| ~ 20)
    q = x * x / 4
    term = tw.ones_like(x)
    out = tw.ones_like(x)
    for k in builtins.range(1, 40):
        term = term * q / (k * k)
        out = out + term
    return out


def vectorize(pyfunc, *, excluded=None, signature=None):
    """A function mapping ``pyfunc`` over the leading axis of its inputs (``vectorized_map``)."""
    from tensorweave.keras.ops.core import vectorized_map

    def fn(*args):
        if _rank(_t(args[0])) == 0:
            return pyfunc(*args)
        return vectorized_map(lambda a: fn(*a), tuple(_t(a) for a in args))
    return fn


def view(x, dtype=None):
    x = _t(x)
    if dtype is None:
        return x
    if isinstance(x, EagerTensor):
        return tw.constant(x.numpy().view(tw.as_dtype(standardize(dtype)).np_dtype))
    raise NotImplementedError("view (a bit-level reinterpretation) runs eagerly only")


export(globals(), skip={"floatx", "is_float", "promote", "result_type", "standardize", "cast_to", "to_tensor",
                        "export", "EagerTensor", "Tensor"})
