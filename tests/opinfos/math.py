"""OpInfos for elementwise math (ops/math_ops.py)."""
import numpy as np
import scipy.special

import tensorweave as tw
from opinfo import (ALL, FLOATS, INTS, NUMERIC, SIGNED_INTS, OpInfo, Sample, arr, as_bf16_safe,
                    binary_samples, noncontig, unary_samples)


def _same(fn):
    """Reference that keeps the input dtype (NumPy may promote ints)."""
    return lambda *a, **k: np.asarray(fn(*a, **k)).astype(np.asarray(a[0]).dtype)


def _cmp(fn):
    return lambda x, y: fn(x, y)


def _float_unary(name, op, ref, low=-2.0, high=2.0, kinks=(), order=2, **kw):
    return OpInfo(name, op, as_bf16_safe(_same(ref)), FLOATS, unary_samples(low, high, kinks), grad_order=order, **kw)


def _int_div_samples(dtype, rng):
    a = arr(rng, (3, 4), dtype, -9, 9)
    b = arr(rng, (3, 4), dtype, 1, 5)
    if np.dtype(dtype).kind == "i":
        b = b * np.where(rng.random((3, 4)) > 0.5, 1, -1).astype(dtype)
    return [Sample((a, b), name="nonzero"), Sample((a[:0], b[0]), name="empty")]


def _zero_divisor_samples(dtype, rng):
    """Divisors with zeros, numerators with a NaN and an inf where the type has them."""
    a = arr(rng, (3, 4), dtype, -9, 9)
    b = arr(rng, (3, 4), dtype, 1, 5)
    b[:, 1] = 0
    if np.dtype(dtype).kind == "f":
        a[0, 1], a[1, 1], a[2, 2] = np.nan, np.inf, np.inf
    return [Sample((a, b), name="zeros"), Sample((a, b[0]), name="broadcast"), Sample((a[:, 1], b[0, 1]), name="scalar"),
            Sample((a[1, 0].copy(), b[1, 1].copy()), name="scalars_zero"),
            Sample((a[1, 0].copy(), b[1, 0].copy()), name="scalars")]


def _div_no_nan_ref(x, y):
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype.kind in "iu":
        x, y = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(all="ignore"):
        return np.where(y == 0, np.zeros((), x.dtype), as_bf16_safe(np.true_divide)(x, y)).astype(x.dtype)


def _sigmoid(x):
    return scipy.special.expit(x)


def _gelu(x, approximate=False):
    if approximate:
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + scipy.special.erf(x / np.sqrt(2)))


def _selu(x):
    return 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(np.minimum(x, 0)))


def _where_samples(dtype, rng):
    c = rng.random((3, 4)) > 0.5
    return [Sample((c, arr(rng, (3, 4), dtype), arr(rng, (3, 4), dtype)), name="same"),
            Sample((c[:, :1], arr(rng, (3, 4), dtype), arr(rng, (4,), dtype)), name="broadcast"),
            Sample((np.array(True), arr(rng, (), dtype), arr(rng, (2,), dtype)), name="scalar")]


def _cast_samples(dtype, rng):
    return [Sample((arr(rng, (3, 4), dtype, -3, 3), tw.float32)),
            Sample((arr(rng, (2,), dtype, 0, 3), tw.int32)),
            Sample((noncontig(arr(rng, (2, 3), dtype, -3, 3)), tw.float64))]


def _matmul_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -2, 2)  # noqa: E731
    return [Sample((a(3, 4), a(4, 5)), name="2d"),
            Sample((a(4, 3), a(4, 5)), {"transpose_a": True}, name="ta"),
            Sample((a(3, 4), a(5, 4)), {"transpose_b": True}, name="tb"),
            Sample((a(4, 3), a(5, 4)), {"transpose_a": True, "transpose_b": True}, name="tab"),
            Sample((a(2, 3, 4), a(2, 4, 2)), name="batched"),
            Sample((a(2, 1, 3, 4), a(3, 4, 2)), name="broadcast"),
            Sample((a(0, 4), a(4, 3)), name="empty"),
            Sample((noncontig(a(3, 4)), a(4, 2)), name="noncontig")]


def _matmul_ref(a, b, transpose_a=False, transpose_b=False):
    if transpose_a:
        a = np.swapaxes(a, -1, -2)
    if transpose_b:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


OPS = [
    OpInfo("add", tw.add, np.add, NUMERIC, binary_samples(), grad_order=2),
    OpInfo("subtract", tw.subtract, np.subtract, NUMERIC, binary_samples(), grad_order=2),
    OpInfo("multiply", tw.multiply, np.multiply, NUMERIC, binary_samples(), grad_order=2),
    OpInfo("divide", tw.divide, as_bf16_safe(np.true_divide), FLOATS, binary_samples(low2=0.5, high2=2.0), grad_order=2),
    OpInfo("divide_int", tw.divide, np.true_divide, (tw.int32, tw.int64), _int_div_samples, grad=False),
    OpInfo("div_no_nan", tw.div_no_nan, as_bf16_safe(np.true_divide), FLOATS, binary_samples(low2=0.5, high2=2.0),
           grad_order=2),
    OpInfo("div_no_nan_zeros", tw.div_no_nan, _div_no_nan_ref, FLOATS, _zero_divisor_samples, grad=False),
    OpInfo("div_no_nan_int", tw.div_no_nan, _div_no_nan_ref, (tw.int32, tw.int64), _zero_divisor_samples,
           grad=False),
    OpInfo("floordiv", tw.floordiv, np.floor_divide, SIGNED_INTS + (tw.float32, tw.float64), _int_div_samples, grad=False),
    OpInfo("floormod", tw.floormod, np.mod, SIGNED_INTS + (tw.float32, tw.float64), _int_div_samples, grad=False),
    OpInfo("pow", tw.pow, as_bf16_safe(np.power), FLOATS, binary_samples(0.5, 2.0, -2.0, 2.0), grad_order=2),
    OpInfo("maximum", tw.maximum, np.maximum, NUMERIC, binary_samples()),
    OpInfo("minimum", tw.minimum, np.minimum, NUMERIC, binary_samples()),
    OpInfo("squared_difference", tw.squared_difference, lambda x, y: (x - y) * (x - y), FLOATS + SIGNED_INTS,
           binary_samples(), grad_order=2),
    OpInfo("negative", tw.negative, np.negative, FLOATS + SIGNED_INTS, unary_samples(), grad_order=2),
    OpInfo("abs", tw.abs, np.abs, FLOATS + SIGNED_INTS, unary_samples(kinks=(0,))),
    OpInfo("sign", tw.sign, np.sign, FLOATS + SIGNED_INTS, unary_samples(kinks=(0,))),
    _float_unary("exp", tw.exp, np.exp),
    _float_unary("log", tw.log, np.log, 0.2, 3.0),
    _float_unary("log1p", tw.log1p, np.log1p, -0.5, 3.0),
    _float_unary("expm1", tw.expm1, np.expm1),
    _float_unary("sqrt", tw.sqrt, np.sqrt, 0.2, 3.0),
    _float_unary("rsqrt", tw.rsqrt, lambda x: 1 / np.sqrt(x), 0.2, 3.0),
    OpInfo("square", tw.square, np.square, FLOATS + SIGNED_INTS, unary_samples(), grad_order=2),
    _float_unary("reciprocal", tw.reciprocal, np.reciprocal, 0.3, 3.0),
    _float_unary("sin", tw.sin, np.sin),
    _float_unary("cos", tw.cos, np.cos),
    _float_unary("tan", tw.tan, np.tan, -1.0, 1.0),
    _float_unary("atan", tw.atan, np.arctan),
    _float_unary("tanh", tw.tanh, np.tanh),
    _float_unary("sigmoid", tw.sigmoid, _sigmoid),
    _float_unary("erf", tw.erf, scipy.special.erf),
    _float_unary("relu", tw.nn.relu if hasattr(tw, "nn") else None, lambda x: np.maximum(x, 0), kinks=(0,), order=1),
    _float_unary("relu6", tw.nn.relu6 if hasattr(tw, "nn") else None, lambda x: np.clip(x, 0, 6), -3, 8, kinks=(0, 6), order=1),
    _float_unary("elu", tw.nn.elu if hasattr(tw, "nn") else None, lambda x: np.where(x > 0, x, np.expm1(x)), kinks=(0,), order=1),
    _float_unary("selu", tw.nn.selu if hasattr(tw, "nn") else None, _selu, kinks=(0,), order=1),
    _float_unary("softsign", tw.nn.softsign if hasattr(tw, "nn") else None, lambda x: x / (1 + np.abs(x)),
                 kinks=(0,), order=1),
    _float_unary("softplus", tw.nn.softplus if hasattr(tw, "nn") else None, lambda x: np.logaddexp(0, x)),
    _float_unary("leaky_relu", (lambda x: tw.nn.leaky_relu(x, alpha=0.1)) if hasattr(tw, "nn") else None,
                 lambda x: np.where(x > 0, x, 0.1 * x), kinks=(0,), order=1),
    _float_unary("gelu", tw.nn.gelu if hasattr(tw, "nn") else None, _gelu),
    _float_unary("gelu_tanh", (lambda x: tw.nn.gelu(x, approximate=True)) if hasattr(tw, "nn") else None,
                 lambda x: _gelu(x, True)),
    _float_unary("floor", tw.floor, np.floor, kinks=(-2, -1, 0, 1, 2)),
    _float_unary("ceil", tw.ceil, np.ceil, kinks=(-2, -1, 0, 1, 2)),
    _float_unary("round", tw.round, np.round, kinks=(-1.5, -0.5, 0.5, 1.5)),
    OpInfo("clip_by_value", lambda x: tw.clip_by_value(x, -1.0, 1.5) if x.dtype.is_floating else tw.clip_by_value(x, -1, 1),
           lambda x: np.clip(x, -1, 1).astype(x.dtype) if x.dtype.kind in "iu" else np.clip(x, -1, 1.5).astype(x.dtype),
           FLOATS + SIGNED_INTS, unary_samples(kinks=(-1, 1.5))),
    OpInfo("where", tw.where, np.where, NUMERIC, _where_samples),
    OpInfo("cast", tw.cast, lambda x, d: x.astype(d.np_dtype), (tw.float32, tw.float64, tw.int32), _cast_samples,
           grad_args=(0,)),
    OpInfo("matmul", tw.matmul, _matmul_ref, (tw.float16, tw.float32, tw.float64, tw.int32, tw.int64),
           _matmul_samples, grad_order=2, tol={tw.float16: (2e-2, 5e-2)}),
    OpInfo("add_n", lambda a, b, c: tw.add_n([a, b, c]), lambda a, b, c: a + b + c, NUMERIC,
           lambda d, r: [Sample((arr(r, (3, 2), d), arr(r, (3, 2), d), arr(r, (3, 2), d)))]),
]
for _n, _f, _r in [("less", tw.less, np.less), ("less_equal", tw.less_equal, np.less_equal),
                   ("greater", tw.greater, np.greater), ("greater_equal", tw.greater_equal, np.greater_equal),
                   ("equal", tw.equal, np.equal), ("not_equal", tw.not_equal, np.not_equal)]:
    OPS.append(OpInfo(_n, _f, _r, NUMERIC, binary_samples(-2, 2), grad=False))
for _n, _f, _r in [("logical_and", tw.logical_and, np.logical_and), ("logical_or", tw.logical_or, np.logical_or),
                   ("logical_xor", tw.logical_xor, np.logical_xor)]:
    OPS.append(OpInfo(_n, _f, _r, (tw.bool,), binary_samples(), grad=False))
OPS += [
    OpInfo("logical_not", tw.logical_not, np.logical_not, (tw.bool,), unary_samples(), grad=False),
    OpInfo("is_nan", tw.is_nan, np.isnan, FLOATS,
           lambda d, r: [Sample((np.array([1.0, np.nan, np.inf, -np.inf], dtype=d),))], grad=False),
    OpInfo("is_inf", tw.is_inf, np.isinf, FLOATS,
           lambda d, r: [Sample((np.array([1.0, np.nan, np.inf, -np.inf, 0.0], dtype=d),))], grad=False),
    OpInfo("is_finite", tw.is_finite, np.isfinite, FLOATS,
           lambda d, r: [Sample((np.array([1.0, np.nan, np.inf, -np.inf], dtype=d),))], grad=False),
]
OPS = [o for o in OPS if o.op is not None]
