"""CPU kernels for ``ops/math_ops.py``."""
import numpy as np
import scipy.special

from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu import gemm, split_passes
from tensorweave.kernels.cpu.util import quiet, via_float32
from tensorweave.ops.math_ops import mul_no_nan_into

# (large float passes split by rows over the intra-op threads, same bits: split_passes.py)
k("AddV2")(split_passes.binary(np.add))
k("Sub")(split_passes.binary(np.subtract))
k("Mul")(split_passes.binary(np.multiply))
k("RealDiv")(quiet(np.true_divide))
k("Maximum")(split_passes.binary(np.maximum))
k("Minimum")(split_passes.binary(np.minimum))
k("Neg")(np.negative)
k("Abs")(np.abs)
k("Sign")(np.sign)
k("Exp")(quiet(np.exp))
k("Log")(quiet(np.log))
k("Log1p")(quiet(np.log1p))
k("Expm1")(quiet(np.expm1))
k("Sqrt")(quiet(np.sqrt))
k("Square")(np.square)
k("Sin")(quiet(np.sin))
k("Cos")(quiet(np.cos))
k("Tan")(quiet(np.tan))
k("Atan")(np.arctan)
k("Tanh")(np.tanh)
k("Floor")(np.floor)
k("Ceil")(np.ceil)
k("Round")(np.round)
k("Rint")(np.rint)
k("LogicalAnd")(np.logical_and)
k("LogicalOr")(np.logical_or)
k("LogicalNot")(np.logical_not)
k("Less")(np.less)
k("LessEqual")(np.less_equal)
k("Greater")(np.greater)
k("GreaterEqual")(np.greater_equal)
k("Equal")(np.equal)
k("NotEqual")(np.not_equal)
k("IsNan")(np.isnan)
k("IsFinite")(np.isfinite)
k("IsInf")(np.isinf)
k("SelectV2")(np.where)
k("Where")(lambda c: np.argwhere(c).astype(np.int64))


@quiet
def _div_no_nan_quiet(x, y):
    if np.ndim(x) == 0 and np.ndim(y) == 0:   # a metric's result: scalars, 3x faster than np.where
        return np.true_divide(x, y) if y != 0 else np.zeros((), np.result_type(x, y))
    q = np.true_divide(x, y)
    return np.where(y == 0, q.dtype.type(0), q)


@k("DivNoNan")
def _div_no_nan(x, y):
    """``x / y``, 0 where ``y == 0``. Two float scalars with ``1 <= |y| < inf`` (a metric's count,
    a batch size) divide outside the error-state context: such a division cannot overflow, divide
    by zero or make 0/0 (a nan or inf ``x`` raises no flag), so there is nothing to silence but an
    underflow, which NumPy ignores by default; the context was most of a metric result's cost in
    a training step (47 µs of the calling thread at load 10, 8 µs hot; issue 18 mlp22)."""
    t = type(x)
    if t is type(y) and (t in _FLOAT_SCALARS or (t is np.ndarray and x.ndim == 0 and y.ndim == 0 and x.dtype == y.dtype
                                                 and x.dtype in _FLOAT_SCALARS)) and 1.0 <= abs(float(y)) < _INF:
        return np.true_divide(x, y)
    return _div_no_nan_quiet(x, y)


_INF = float("inf")
#: the scalar types (variables' reads after ``assign_add`` are NumPy scalars) and dtypes of the fast path
_FLOAT_SCALARS = (np.float32, np.float64)


k("MulNoNan")(quiet(mul_no_nan_into))


def _x_is_zero_gives_zero(fn):
    @quiet
    def kernel(x, y):
        return np.where(x == 0, np.zeros((), np.result_type(x, y)), fn(x, y))
    return kernel


k("Xlogy")(_x_is_zero_gives_zero(lambda x, y: x * np.log(y)))
k("Xdivy")(_x_is_zero_gives_zero(np.true_divide))
k("Xlog1py")(_x_is_zero_gives_zero(lambda x, y: x * np.log1p(y)))
k("Atan2")(via_float32(np.arctan2))


def _check_int_divisor(x, y):
    if x.dtype.kind in "iu" and np.any(y == 0):
        raise ZeroDivisionError("Integer division by zero")


@k("TruncateDiv")
@quiet
def _truncatediv(x, y):
    _check_int_divisor(x, y)
    if x.dtype.kind == "f":
        return np.trunc(np.true_divide(x, y)).astype(x.dtype, copy=False)
    q = np.floor_divide(x, y)
    # floor and truncation differ by one where the remainder is nonzero and the signs differ
    return q + ((np.mod(x, y) != 0) & ((x < 0) != (y < 0))).astype(q.dtype)


@k("TruncateMod")
@quiet
def _truncatemod(x, y):
    _check_int_divisor(x, y)
    return np.fmod(x, y)


@k("FloorDiv")
@quiet
def _floordiv(x, y):
    if x.dtype.kind in "iu" and np.any(y == 0):
        raise ZeroDivisionError("Integer division by zero")
    return np.floor_divide(x, y)


@k("FloorMod")
@quiet
def _floormod(x, y):
    if x.dtype.kind in "iu" and np.any(y == 0):
        raise ZeroDivisionError("Integer division by zero")
    return np.mod(x, y)


@k("Pow")
@quiet
def _pow(x, y):
    if x.dtype.kind in "iu" and np.any(y < 0):
        raise ValueError("Integers to negative integer powers are not allowed")
    return np.power(x, y)


@k("SquaredDifference")
def _sqdiff(x, y):
    d = np.subtract(x, y)
    return np.multiply(d, d)


@k("Rsqrt")
@quiet
def _rsqrt(x):
    return np.reciprocal(np.sqrt(x))


@k("Reciprocal")
@quiet
def _reciprocal(x):
    if x.dtype.kind in "iu":
        return (1 // x).astype(x.dtype)
    return np.reciprocal(x)


@k("Sigmoid")
def _sigmoid(x):
    return via_float32(scipy.special.expit)(x).astype(x.dtype, copy=False)


k("Erf")(via_float32(lambda x: scipy.special.erf(x).astype(x.dtype, copy=False)))


_relu = split_passes.relu
k("Relu")(_relu)


@k("Relu6")
def _relu6(x):
    return np.minimum(np.maximum(x, np.zeros((), x.dtype)), np.asarray(6, x.dtype))


@k("LeakyRelu")
def _leaky(x, alpha):
    return np.where(x > 0, x, x * np.asarray(alpha, x.dtype))


@k("Elu")
def _elu(x):
    with np.errstate(over="ignore"):
        return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


_SELU_A, _SELU_S = 1.6732632423543772, 1.0507009873554805


@k("Selu")
def _selu(x):
    return (np.asarray(_SELU_S, x.dtype) * np.where(x > 0, x, np.asarray(_SELU_A, x.dtype) *
                                                   np.expm1(np.minimum(x, 0)))).astype(x.dtype, copy=False)


@k("Softplus")
def _softplus(x):
    # log(1 + e^x) = max(x, 0) + log1p(e^-|x|), stable for large |x|
    return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))).astype(x.dtype, copy=False)


@k("Softsign")
def _softsign(x):
    return x / (1 + np.abs(x))


@k("Gelu")
@via_float32
def _gelu(x, approximate):
    if approximate:
        c = np.sqrt(2 / np.pi).astype(x.dtype)
        return (0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x ** 3)))).astype(x.dtype, copy=False)
    return (0.5 * x * (1 + scipy.special.erf(x / np.sqrt(2)))).astype(x.dtype, copy=False)


@k("Cast")
def _cast(x, DstT):
    return np.asarray(x).astype(DstT.np_dtype)


k("AddN")(split_passes.add_n)     # (split by rows when large, same bits: split_passes.py)


@k("MatMul")
def _matmul(a, b, transpose_a, transpose_b):
    # (.T of a 2-D operand: the same view as np.swapaxes, a fifth of its Python)
    if transpose_a:
        a = a.T if a.ndim == 2 else np.swapaxes(a, -1, -2)
    if transpose_b:
        b = b.T if b.ndim == 2 else np.swapaxes(b, -1, -2)
    return gemm.matmul(a, b)
