"""Elementwise math: arithmetic, unary functions, activations, comparisons, logic, casts, matmul.

Binary ops broadcast like NumPy. Both operands must have the same dtype; a Python
scalar or NumPy array operand takes the tensor's dtype.

>>> import tensorweave as tw
>>> x = tw.constant([1.0, 4.0])
>>> tw.sqrt(x).numpy(), (x + 1).numpy()
(array([1., 2.], dtype=float32), array([2., 5.], dtype=float32))
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules
from tensorweave.core.sbp import B, BOXES_TO_B, P, Partial, Signature
from tensorweave.core.convert import convert_like, convert_to_tensor
from tensorweave.core.dispatch import execute, invalid_input
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op, set_traits
from tensorweave.core.shape import TensorShape, broadcast_static, fmt
from tensorweave.core.tensor import EagerTensor, Tensor
from tensorweave.ops import composite_dispatch, rules
from tensorweave.ops.array_ops import ones_like, sum_to_like, zeros_like

_ct = convert_to_tensor


def _operands(x, y, opdef=None, name=None):
    """Both operands as tensors; a Python value takes the other operand's dtype and raises
    where it does not fit (``int32 tensor + 2.0``: TF's rule, no implicit promotion)."""
    try:
        if isinstance(x, Tensor):
            return x, convert_like(y, x)
        if isinstance(y, Tensor):
            return convert_like(x, y), y
        x = _ct(x)
        return x, convert_like(y, x)
    except TypeError as e:
        # Only conversion's own TypeError gets the op's context: subclasses keep their type (a
        # KerasTensor's SymbolicTensorError is what turns tw.add(keras_input, 1.0) into a layer).
        if opdef is None or type(e) is not TypeError:
            raise
        raise invalid_input(opdef, [x, y], e, name) from None


def _check_same_dtype(opdef, x, y, name):
    try:
        rules.same_dtype([x, y])
    except TypeError as e:
        raise invalid_input(opdef, [x, y], e, name) from None


def _check_allowed(opdef, inputs, allowed, name):
    """Eager calls skip the shape rule, so the wrappers check the kernel dtypes themselves."""
    if inputs[0]._dtype not in allowed:
        raise invalid_input(opdef, inputs, TypeError(rules.unsupported_message(inputs[0].dtype, allowed)),
                            name)


def _binary_op(opdef, allowed=None):
    def op(x, y, name=None):
        try:
            x, y = _operands(x, y, opdef, name)
        except (TypeError, ValueError):   # a RaggedTensor operand: the op on its flat values
            out = composite_dispatch.binary(x, y, lambda a, b: op(a, b, name=name))
            if out is NotImplemented:
                raise
            return out
        if x._dtype is not y._dtype:
            _check_same_dtype(opdef, x, y, name)
        if allowed is not None and x._dtype not in allowed:   # inline: a call costs ~5% of an eager add
            _check_allowed(opdef, (x, y), allowed, name)
        return execute(opdef, (x, y), {}, name)
    op.__name__ = opdef.name
    return op


def _unary_op(opdef, allowed=None):
    def op(x, name=None):
        if not isinstance(x, Tensor):
            try:
                x = _ct(x)
            except (TypeError, ValueError):   # a RaggedTensor or SparseTensor: map over its values
                out = composite_dispatch.unary(x, lambda v: op(v, name=name), opdef.name)
                if out is NotImplemented:
                    raise
                return out
        if allowed is not None and x._dtype not in allowed:
            _check_allowed(opdef, (x,), allowed, name)
        return execute(opdef, (x,), {}, name)
    op.__name__ = opdef.name
    return op


# ---- complex gradients ---------------------------------------------------------------------------
class _Conjugated:
    """An op seen with its (complex) inputs and outputs conjugated."""

    def __init__(self, op):
        from tensorweave.ops.complex_ops import conj
        self._op = op
        self.inputs = [conj(t) if t.dtype.is_complex else t for t in op.inputs]
        self.outputs = [conj(t) if t.dtype.is_complex else t for t in op.outputs]

    def __getattr__(self, name):
        return getattr(self._op, name)


def _c(grad):
    """``grad`` extended to complex inputs. With TF's convention for complex gradients of a real loss
    (``dL/dRe + i dL/dIm``), the gradient of a holomorphic op is ``g * conj(f'(z))``; for the functions
    here (real Taylor coefficients) that is the real formula evaluated at the conjugated inputs and
    outputs."""
    def cgrad(op, *gs):
        if op.inputs[0].dtype.is_complex:
            return grad(_Conjugated(op), *gs)
        return grad(op, *gs)
    return cgrad


# ---- binary arithmetic -------------------------------------------------------------------------
def _grads(op, gx, gy):
    x, y = op.inputs
    return [None if gx is None else sum_to_like(gx, x), None if gy is None else sum_to_like(gy, y)]


N = rules.NUMERIC
NC = rules.ARITHMETIC
register_op("AddV2", infer=rules.binary(allowed=NC), grad=lambda op, g: _grads(op, g, g))
register_op("Sub", infer=rules.binary(allowed=NC), grad=lambda op, g: _grads(op, g, -g))
FC = rules.FLOAT + rules.COMPLEX
register_op("Mul", infer=rules.binary(allowed=NC),
            grad=_c(lambda op, g: _grads(op, g * op.inputs[1], op.inputs[0] * g)))
register_op("RealDiv", infer=rules.binary(allowed=FC),
            grad=_c(lambda op, g: _grads(op, multiply_no_nan(1 / op.inputs[1], g),
                                         multiply_no_nan(-op.inputs[0] / (op.inputs[1] * op.inputs[1]), g))))
register_op("MulNoNan", infer=rules.binary(allowed=FC),
            grad=_c(lambda op, g: _grads(op, multiply_no_nan(g, op.inputs[1]), multiply_no_nan(op.inputs[0], g))))
register_op("DivNoNan", infer=rules.binary(allowed=FC),
            grad=_c(lambda op, g: _grads(op, div_no_nan(g, op.inputs[1]),
                                         g * div_no_nan(div_no_nan(-op.inputs[0], op.inputs[1]), op.inputs[1]))))
register_op("FloorDiv", infer=rules.binary(allowed=N), grad=NOT_DIFFERENTIABLE)
register_op("FloorMod", infer=rules.binary(allowed=N),
            grad=lambda op, g: _grads(op, g, -g * floor(op.inputs[0] / op.inputs[1]))
            if op.inputs[0].dtype.is_floating else [None, None])
register_op("Maximum", infer=rules.binary(allowed=N),
            grad=lambda op, g: _select_grads(op, g, greater_equal(op.inputs[0], op.inputs[1])))
register_op("Minimum", infer=rules.binary(allowed=N),
            grad=lambda op, g: _select_grads(op, g, less_equal(op.inputs[0], op.inputs[1])))
register_op("SquaredDifference", infer=rules.binary(allowed=N),
            grad=lambda op, g: _sqdiff_grad(op, g))


# x * log(y), x / y, x * log1p(y), 0 where x is 0 (whatever y is). d/dx is log(y), 1/y, log1p(y)
# except where x and that function's singular y meet (0 there); TF gives 0 wherever x is 0,
# which is not the derivative (xlogy(x, 2) has slope log 2 at x = 0).
def _dx_factor(fn, x, y, singular):
    return fn(cast(logical_or(not_equal(x, 0), not_equal(y, singular)), x.dtype), y)


register_op("Xlogy", infer=rules.binary(allowed=rules.FLOAT),
            grad=lambda op, g: _grads(op, _dx_factor(xlogy, *op.inputs, 0) * g,
                                      xdivy(op.inputs[0], op.inputs[1]) * g))
register_op("Xdivy", infer=rules.binary(allowed=rules.FLOAT),
            grad=lambda op, g: _grads(op, _dx_factor(xdivy, *op.inputs, 0) * g,
                                      xdivy(-op.inputs[0], op.inputs[1] * op.inputs[1]) * g))
register_op("Xlog1py", infer=rules.binary(allowed=rules.FLOAT),
            grad=lambda op, g: _grads(op, _dx_factor(xlog1py, *op.inputs, -1) * g,
                                      xdivy(op.inputs[0], op.inputs[1] + 1) * g))
register_op("Atan2", infer=rules.binary(allowed=rules.FLOAT), grad=lambda op, g: _atan2_grad(op, g))
# C-style integer division and remainder (rounding toward zero); floats too, as TF.
register_op("TruncateDiv", infer=rules.binary(allowed=N), grad=NOT_DIFFERENTIABLE)
register_op("TruncateMod", infer=rules.binary(allowed=N), grad=NOT_DIFFERENTIABLE)


def _atan2_grad(op, g):
    y, x = op.inputs
    inv = g / (x * x + y * y)
    return _grads(op, x * inv, -y * inv)


def _select_grads(op, g, mask):
    z = zeros_like(g)
    return _grads(op, where(mask, g, z), where(mask, z, g))


def _sqdiff_grad(op, g):
    d = g * (2 * (op.inputs[0] - op.inputs[1]))
    return _grads(op, d, -d)


def _pow_grad(op, g):
    x, y = op.inputs
    z = op.outputs[0]
    gx = g * y * pow(x, y - 1)
    if not x.dtype.is_floating:
        return _grads(op, gx, None)
    safe_log = log(where(x > 0, x, ones_like(x)))
    gy = g * z * where(x > 0, safe_log, zeros_like(x))
    return _grads(op, gx, gy)


register_op("Pow", infer=rules.binary(allowed=N), grad=_pow_grad)

add = _binary_op(get_op("AddV2"), NC)
subtract = _binary_op(get_op("Sub"), NC)
multiply = _binary_op(get_op("Mul"), NC)
_realdiv = _binary_op(get_op("RealDiv"), FC)
_div_no_nan = _binary_op(get_op("DivNoNan"), FC)
floordiv = _binary_op(get_op("FloorDiv"), N)
floormod = _binary_op(get_op("FloorMod"), N)
pow = _binary_op(get_op("Pow"), N)
maximum = _binary_op(get_op("Maximum"), N)
minimum = _binary_op(get_op("Minimum"), N)
squared_difference = _binary_op(get_op("SquaredDifference"), N)
_mul_no_nan = _binary_op(get_op("MulNoNan"), FC)
mod = floormod
xlogy = _binary_op(get_op("Xlogy"), rules.FLOAT)
xdivy = _binary_op(get_op("Xdivy"), rules.FLOAT)
xlog1py = _binary_op(get_op("Xlog1py"), rules.FLOAT)
atan2 = _binary_op(get_op("Atan2"), rules.FLOAT)
truncatediv = _binary_op(get_op("TruncateDiv"), N)
truncatemod = _binary_op(get_op("TruncateMod"), N)


def multiply_no_nan(x, y, name=None):
    """``x * y``, and 0 where ``y`` is 0 even for an infinite or NaN ``x``.

    >>> import tensorweave as tw
    >>> tw.math.multiply_no_nan([float("inf"), 2.0], [0.0, 3.0]).numpy()
    array([0., 6.], dtype=float32)
    """
    return _mul_no_nan(x, y, name=name)


def _division_operands(x, y):
    """Integer operands of one dtype converted to float64 (float32 from 16 bits or less), as
    TensorFlow's ``truediv``."""
    x, y = _operands(x, y)
    if x.dtype.is_integer and y.dtype is x.dtype:
        target = _dt.float64 if x.dtype.size > 2 else _dt.float32
        x, y = cast(x, target), cast(y, target)
    return x, y


def divide(x, y, name=None):
    """``x / y``; integer inputs are converted to float64 first (TensorFlow's ``truediv``)."""
    try:
        x, y = _division_operands(x, y)
    except (TypeError, ValueError):   # a RaggedTensor operand
        out = composite_dispatch.binary(x, y, lambda a, b: divide(a, b, name=name))
        if out is NotImplemented:
            raise
        return out
    return _realdiv(x, y, name=name)


truediv = divide


def div_no_nan(x, y, name=None):
    """``x / y``, and 0 where ``y`` is 0 (even for a NaN ``x``); integers as in :func:`divide`.
    One op (``DivNoNan``): a Keras metric's result is one node instead of four.

    >>> import tensorweave as tw
    >>> tw.math.div_no_nan([1.0, 2.0], [0.0, 4.0]).numpy()
    array([0. , 0.5], dtype=float32)
    """
    return _div_no_nan(*_division_operands(x, y), name=name)


def add_n(inputs, name=None):
    """Sums a list of same-shape tensors of one dtype (mixed dtypes raise, as in TF).

    >>> import tensorweave as tw
    >>> tw.add_n([tw.constant([1, 2]), tw.constant([3, 4])]).numpy()
    array([4, 6], dtype=int32)
    """
    inputs = [_ct(t) for t in inputs]
    if not inputs:
        raise ValueError("add_n: inputs must be a non-empty list of tensors")
    opdef = get_op("AddN")
    if any(t._dtype is not inputs[0]._dtype for t in inputs):
        try:
            rules.same_dtype(inputs)
        except TypeError as e:
            raise invalid_input(opdef, inputs, e, name) from None
    _check_allowed(opdef, inputs, NC, name)
    if len(inputs) == 1:
        return inputs[0]
    return execute(opdef, inputs, {}, name)


def _infer_addn(inputs, attrs):
    d = rules.same_dtype(inputs)
    if d not in NC:
        raise TypeError(rules.unsupported_message(d, NC))
    s = inputs[0].shape
    for t in inputs[1:]:
        if not s.is_compatible_with(t.shape):
            raise ValueError(f"AddN inputs must have equal shapes, got {', '.join(fmt(t.shape) for t in inputs)}")
        s = s.merge_with(t.shape)
    return s, d


register_op("AddN", infer=_infer_addn, grad=lambda op, g: [g] * len(op.inputs))


# ---- unary ---------------------------------------------------------------------------------------
def _u(name, grad, allowed=N):
    register_op(name, infer=rules.unary(allowed), grad=grad, sbp=sbp_rules.elementwise_rule())
    return _unary_op(get_op(name), allowed)


F = rules.FLOAT
SC = rules.SIGNED + rules.COMPLEX
negative = _u("Neg", lambda op, g: [-g], SC)
_abs = _u("Abs", lambda op, g: [g * sign(op.inputs[0])], rules.SIGNED)
sign = _u("Sign", lambda op, g: [zeros_like(g)], SC)
# The analytic functions take complex inputs too (TF's kernels do); _c conjugates their gradients.
exp = _u("Exp", _c(lambda op, g: [g * op.outputs[0]]), FC)
log = _u("Log", _c(lambda op, g: [g / op.inputs[0]]), FC)
log1p = _u("Log1p", _c(lambda op, g: [g / (1 + op.inputs[0])]), FC)
expm1 = _u("Expm1", _c(lambda op, g: [g * (op.outputs[0] + 1)]), FC)
# Sqrt, Rsqrt, Reciprocal and RealDiv: a zero incoming gradient gives a zero gradient even where
# the local derivative is inf or NaN, so where(x > 0, sqrt(x), 0) has no NaN gradient (as in TF).
sqrt = _u("Sqrt", _c(lambda op, g: [multiply_no_nan(0.5 / op.outputs[0], g)]), FC)
rsqrt = _u("Rsqrt", _c(lambda op, g: [multiply_no_nan(-0.5 * op.outputs[0] / op.inputs[0], g)]), FC)
square = _u("Square", _c(lambda op, g: [g * 2 * op.inputs[0]]), N + rules.COMPLEX)
reciprocal = _u("Reciprocal", _c(lambda op, g: [multiply_no_nan(-op.outputs[0] * op.outputs[0], g)]), FC)
sin = _u("Sin", _c(lambda op, g: [g * cos(op.inputs[0])]), FC)
cos = _u("Cos", _c(lambda op, g: [-g * sin(op.inputs[0])]), FC)
tan = _u("Tan", _c(lambda op, g: [g * (1 + op.outputs[0] * op.outputs[0])]), FC)
tanh = _u("Tanh", _c(lambda op, g: [g * (1 - op.outputs[0] * op.outputs[0])]), FC)


def abs(x, name=None):
    """``|x|``; complex inputs give their (real) modulus, as TF's ``tf.abs``.

    >>> import tensorweave as tw
    >>> tw.abs(tw.constant([3 + 4j])).numpy()
    array([5.])
    """
    if not isinstance(x, Tensor):
        try:
            x = _ct(x)
        except (TypeError, ValueError):
            out = composite_dispatch.unary(x, lambda v: abs(v, name=name), "Abs")
            if out is NotImplemented:
                raise
            return out
    if x._dtype in rules.COMPLEX:
        from tensorweave.ops.complex_ops import complex_abs
        return complex_abs(x, name=name)
    return _abs(x, name=name)
sigmoid = _u("Sigmoid", lambda op, g: [g * op.outputs[0] * (1 - op.outputs[0])], F)
erf = _u("Erf", lambda op, g: [g * (2 / np.sqrt(np.pi)) * exp(-square(op.inputs[0]))], F)
# ReluGrad (ops/nn_ops.py, looked up by name when the gradient is built): one pass, where a
# where(y > 0, g, zeros_like(g)) would make a bool mask and a zero tensor per ReLU per step.
relu = _u("Relu", lambda op, g: [execute(get_op("ReluGrad"), [g if isinstance(g, Tensor) else _ct(g),
                                                                 op.outputs[0]], {})])
relu6 = _u("Relu6", lambda op, g: [where(logical_and(op.inputs[0] > 0, op.inputs[0] < 6), g, zeros_like(g))])
elu = _u("Elu", lambda op, g: [where(op.inputs[0] > 0, g, g * (op.outputs[0] + 1))], F)
selu = _u("Selu", lambda op, g: [where(op.inputs[0] > 0, g * 1.0507009873554805,
                                       g * (op.outputs[0] + 1.7580993408473766))], F)
softplus = _u("Softplus", lambda op, g: [g * sigmoid(op.inputs[0])], F)
softsign = _u("Softsign", lambda op, g: [g / square(1 + abs(op.inputs[0]))], F)
# Piecewise constant: no gradient (None, as TF: the input is unconnected through them).
floor = _u("Floor", NOT_DIFFERENTIABLE, F)
ceil = _u("Ceil", NOT_DIFFERENTIABLE, F)
round = _u("Round", NOT_DIFFERENTIABLE)
rint = _u("Rint", NOT_DIFFERENTIABLE, F)
atan = _u("Atan", lambda op, g: [g / (1 + square(op.inputs[0]))], F)


def _leaky_grad(op, g):
    return [where(op.inputs[0] > 0, g, g * op.attrs["alpha"])]


register_op("LeakyRelu", infer=rules.unary(F), grad=_leaky_grad)


def leaky_relu(features, alpha=0.2, name=None):
    x, opdef = _ct(features), get_op("LeakyRelu")
    _check_allowed(opdef, (x,), F, name)
    return execute(opdef, [x], {"alpha": float(alpha)}, name)


def _gelu_grad(op, g):
    x = op.inputs[0]
    if op.attrs["approximate"]:
        c = np.sqrt(2 / np.pi)
        inner = c * (x + 0.044715 * x * x * x)
        t = tanh(inner)
        d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)
        return [g * d]
    cdf = 0.5 * (1 + erf(x * (1 / np.sqrt(2))))
    pdf = exp(-0.5 * x * x) * (1 / np.sqrt(2 * np.pi))
    return [g * (cdf + x * pdf)]


register_op("Gelu", infer=rules.unary(F), grad=_gelu_grad)


def gelu(features, approximate=False, name=None):
    x, opdef = _ct(features), get_op("Gelu")
    _check_allowed(opdef, (x,), F, name)
    return execute(opdef, [x], {"approximate": bool(approximate)}, name)


def silu(features, beta=1.0, name=None):
    x = _ct(features)
    return multiply(x, sigmoid(x * beta) if beta != 1.0 else sigmoid(x), name=name)


swish = silu


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    """Clips ``t`` elementwise to [min, max]; the gradient flows only inside the range."""
    t = _ct(t)
    return minimum(maximum(t, clip_value_min), clip_value_max, name=name)


# ---- comparisons and logic ---------------------------------------------------------------------
# Ordering has no bool kernels in TF; equality works on every dtype.
for _name in ("Less", "LessEqual", "Greater", "GreaterEqual"):
    register_op(_name, infer=rules.binary(out_dtype=_dt.bool_, allowed=N), grad=NOT_DIFFERENTIABLE)
for _name in ("Equal", "NotEqual"):
    register_op(_name, infer=rules.binary(out_dtype=_dt.bool_), grad=NOT_DIFFERENTIABLE)
for _name in ("LogicalAnd", "LogicalOr"):
    register_op(_name, infer=rules.binary(allowed=rules.BOOL), grad=NOT_DIFFERENTIABLE)
register_op("LogicalNot", infer=rules.unary(rules.BOOL), grad=NOT_DIFFERENTIABLE)
register_op("IsNan", infer=lambda i, a: (i[0].shape, _dt.bool_), grad=NOT_DIFFERENTIABLE)
register_op("IsFinite", infer=lambda i, a: (i[0].shape, _dt.bool_), grad=NOT_DIFFERENTIABLE)
register_op("IsInf", infer=lambda i, a: (i[0].shape, _dt.bool_), grad=NOT_DIFFERENTIABLE)

less = _binary_op(get_op("Less"), N)
less_equal = _binary_op(get_op("LessEqual"), N)
greater = _binary_op(get_op("Greater"), N)
greater_equal = _binary_op(get_op("GreaterEqual"), N)
equal = _binary_op(get_op("Equal"))
not_equal = _binary_op(get_op("NotEqual"))
logical_and = _binary_op(get_op("LogicalAnd"), rules.BOOL)
logical_or = _binary_op(get_op("LogicalOr"), rules.BOOL)
logical_not = _unary_op(get_op("LogicalNot"), rules.BOOL)
is_nan = _unary_op(get_op("IsNan"), F)
is_finite = _unary_op(get_op("IsFinite"), F)
is_inf = _unary_op(get_op("IsInf"), F)
isnan, isfinite = is_nan, is_finite


def logical_xor(x, y, name="LogicalXor"):
    return logical_and(logical_or(x, y), logical_not(logical_and(x, y)), name=name)


# ---- where -------------------------------------------------------------------------------------
def _infer_select(inputs, attrs):
    c, x, y = inputs
    if c.dtype is not _dt.bool_:
        raise TypeError(f"where: condition must be bool, got {c.dtype.name}")
    d = rules.same_dtype([x, y], "branches")
    try:
        s = broadcast_static(broadcast_static(c.shape, x.shape), y.shape)
    except ValueError:
        raise ValueError(f"where: condition {fmt(c.shape)}, x {fmt(x.shape)} and y {fmt(y.shape)} "
                         "do not broadcast together") from None
    return s, d


def _select_grad(op, g):
    c, x, y = op.inputs
    z = zeros_like(g)
    return [None, sum_to_like(where(c, g, z), x), sum_to_like(where(c, z, g), y)]


register_op("SelectV2", infer=_infer_select, grad=_select_grad)
register_op("Where", infer=lambda i, a: (TensorShape([None, i[0].shape.rank]), _dt.int64),
            grad=NOT_DIFFERENTIABLE)


def where(condition, x=None, y=None, name=None):
    """``x`` where ``condition`` is true, else ``y`` (broadcasting); with one argument, the
    coordinates of true elements."""
    c = _ct(condition)
    if x is None and y is None:
        return execute(get_op("Where"), [c], {}, name)
    if x is None or y is None:
        raise ValueError("where: give both x and y, or neither")
    x, y = _operands(x, y, get_op("SelectV2"), name)
    if x._dtype is not y._dtype:
        _check_same_dtype(get_op("SelectV2"), x, y, name)
    return execute(get_op("SelectV2"), [c, x, y], {}, name)


# ---- cast ---------------------------------------------------------------------------------
def _cast_grad(op, g):
    src = op.inputs[0].dtype
    if src.is_floating and op.attrs["DstT"].is_floating:
        return [cast(g, src)]
    return [None]


register_op("Cast", infer=lambda i, a: (i[0].shape, a["DstT"]), grad=_cast_grad)


def cast(x, dtype, name=None):
    """Converts ``x`` to ``dtype`` (float to int truncates toward zero)."""
    dtype = _dt.as_dtype(dtype)
    if composite_dispatch.kind(x) is not None:
        return composite_dispatch.unary(x, lambda v: cast(v, dtype, name=name))
    x = _ct(x) if isinstance(x, Tensor) or hasattr(x, "_tw_tensor_") else _ct(x, dtype_hint=dtype)
    if x.dtype is dtype:
        return x
    return execute(get_op("Cast"), [x], {"DstT": dtype}, name)


def saturate_cast(value, dtype, name=None):
    dtype = _dt.as_dtype(dtype)
    x = _ct(value)
    if not x.dtype.is_bool and not dtype.is_bool:
        # TF's rule: clamp to the target's range where it is narrower, the bounds in the input's dtype
        bound = int if x.dtype.is_integer else float
        if x.dtype.min < dtype.min:
            x = maximum(x, _ct(bound(dtype.min), dtype=x.dtype))
        if x.dtype.max > dtype.max:
            x = minimum(x, _ct(bound(dtype.max), dtype=x.dtype))
    return cast(x, dtype, name=name)


# ---- matmul -------------------------------------------------------------------------------
def _infer_matmul(inputs, attrs):
    a, b = inputs
    d = rules.same_dtype([a, b])
    if d not in _MATMUL_DTYPES:
        raise TypeError(rules.unsupported_message(d, _MATMUL_DTYPES))
    ra, rb = a.shape.rank, b.shape.rank
    if ra is None or rb is None:
        return TensorShape(None), d
    if ra < 2 or rb < 2:
        raise ValueError(f"MatMul needs inputs of rank >= 2, got shapes {fmt(a.shape)} and {fmt(b.shape)}. "
                         "Hint: use tw.expand_dims, or tw.tensordot for vectors")
    sa, sb = a.shape.as_list(), b.shape.as_list()
    m, ka = (sa[-1], sa[-2]) if attrs["transpose_a"] else (sa[-2], sa[-1])
    kb, n = (sb[-1], sb[-2]) if attrs["transpose_b"] else (sb[-2], sb[-1])
    if ka is not None and kb is not None and ka != kb:
        raise ValueError(f"Dimensions must be equal, but are {ka} and {kb} (inner dimensions of the "
                         f"matrix product; transpose_a={attrs['transpose_a']}, transpose_b={attrs['transpose_b']})")
    try:
        batch = broadcast_static(sa[:-2], sb[:-2])
    except ValueError:
        raise ValueError(f"MatMul batch dimensions {fmt(sa[:-2])} and {fmt(sb[:-2])} do not broadcast") from None
    return TensorShape(batch.as_list() + [m, n]), d


def _matmul_grad(op, g):
    a, b = op.inputs
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
    if not ta and not tb:
        ga, gb = matmul(g, b, transpose_b=True), matmul(a, g, transpose_a=True)
    elif not ta and tb:
        ga, gb = matmul(g, b), matmul(g, a, transpose_a=True)
    elif ta and not tb:
        ga, gb = matmul(b, g, transpose_b=True), matmul(a, g)
    else:
        ga, gb = matmul(b, g, transpose_a=True, transpose_b=True), matmul(g, a, transpose_a=True, transpose_b=True)
    return [sum_to_like(ga, a), sum_to_like(gb, b)]


_MATMUL_DTYPES = rules.MATMUL + rules.COMPLEX
register_op("MatMul", infer=_infer_matmul, grad=_c(_matmul_grad), heavy=True)
_MATMUL = get_op("MatMul")


def _rank_below_2(t):
    if type(t) is EagerTensor:
        return t._value.ndim < 2
    r = t.shape.rank
    return r is not None and r < 2


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False, name=None):
    """Matrix product of the last two dimensions, batched and broadcast over the leading ones.

    >>> import tensorweave as tw
    >>> tw.matmul(tw.ones([2, 3]), tw.ones([3, 4])).shape
    TensorShape([2, 4])
    """
    if (transpose_a and adjoint_a) or (transpose_b and adjoint_b):
        side = "a" if transpose_a and adjoint_a else "b"
        raise ValueError(f"matmul: only one of `transpose_{side}` and `adjoint_{side}` can be True "
                         "(for real tensors they mean the same)")
    a, b = _operands(a, b, _MATMUL, name)
    if a._dtype is not b._dtype:
        _check_same_dtype(_MATMUL, a, b, name)
    if a._dtype not in rules.MATMUL:
        _check_allowed(_MATMUL, (a, b), _MATMUL_DTYPES, name)
        if a._dtype in rules.COMPLEX:   # the adjoint of a complex matrix is its conjugate transpose
            from tensorweave.ops.complex_ops import conj
            a = conj(a) if adjoint_a else a
            b = conj(b) if adjoint_b else b
    if ((a._value.ndim < 2 or b._value.ndim < 2) if type(a) is EagerTensor and type(b) is EagerTensor
            else (_rank_below_2(a) or _rank_below_2(b))):   # inlined for eager calls (hot path)
        raise invalid_input(_MATMUL, (a, b), ValueError(  # eager calls skip the shape rule
            "MatMul needs inputs of rank >= 2. Hint: use tw.expand_dims, or tw.tensordot for vectors"), name)
    return execute(_MATMUL, (a, b), {"transpose_a": bool(transpose_a or adjoint_a),
                                     "transpose_b": bool(transpose_b or adjoint_b)}, name)


# ---- traits (core/registry.py TRAITS), read by the graph passes and the SBP rule generators --------
def _relu_into(x, out=None):
    """The in-place Relu where its CPU kernel does not take ``out=`` (it does: a vector loop,
    ``fused_loop_kernels.inplace_kernel``)."""
    return np.maximum(x, np.zeros((), x.dtype), out=out)


#: the fused loops' Relu: NumPy's ``maximum(x, 0)`` bits (``-0.0`` gives ``0.0``, a NaN itself, a signalling
#: one too; numba's ``np.maximum`` kept ``-0.0``). The zero test first: so a loop storing where it loads stays
#: a vector loop (10 µs for 65,536 float32 in place; ``nn_loops.relu_value``'s order, the NaN test first, 41:
#: masked stores, as ``np.maximum`` was; AMD EPYC Zen 4, session 26)
_RELU_EXPR = "(T(0) if {0} + T(0) <= T(0) else ({0} if {0} != {0} else {0} + T(0)))"


def mul_no_nan_into(x, y, out=None):
    """``MulNoNan`` (``x * y``, 0 where ``y`` is 0) into ``out``, which may be ``x`` or ``y``
    itself. The plain product, patched only where ``y`` has zeros (usually nowhere): one compare
    instead of ``np.where``'s extra array (the sqrt/rsqrt/reciprocal/division gradients run it)."""
    zero = np.equal(y, 0)              # before the product: out may be y
    product = np.multiply(x, y, out=out)
    if not zero.any():
        return product
    if out is None:
        return np.where(zero, np.zeros((), product.dtype), product)
    np.copyto(out, np.zeros((), out.dtype), where=zero)
    return out


for _name, _n, _into, _expr in [
        ("AddV2", 2, np.add, "({0} + {1})"), ("Sub", 2, np.subtract, "({0} - {1})"),
        ("Mul", 2, np.multiply, "({0} * {1})"), ("RealDiv", 2, np.true_divide, "({0} / {1})"),
        ("MulNoNan", 2, mul_no_nan_into, "(T(0) if {1} == T(0) else {0} * {1})"),
        ("Maximum", 2, np.maximum, "np.maximum({0}, {1})"), ("Minimum", 2, np.minimum, "np.minimum({0}, {1})"),
        ("SquaredDifference", 2, None, "(({0} - {1}) * ({0} - {1}))"),
        ("Neg", 1, np.negative, "(-{0})"), ("Square", 1, np.square, "({0} * {0})"),
        ("Sqrt", 1, np.sqrt, "np.sqrt({0})"), ("Rsqrt", 1, None, "(T(1) / np.sqrt({0}))"),
        ("Exp", 1, np.exp, "np.exp({0})"), ("Log", 1, np.log, "np.log({0})"), ("Tanh", 1, np.tanh, "np.tanh({0})"),
        ("Abs", 1, np.abs, "np.abs({0})"), ("Relu", 1, _relu_into, _RELU_EXPR),
        ("Sigmoid", 1, None, "(T(1) / (T(1) + np.exp(-{0})))")]:
    set_traits(_name, elementwise=_n, expr=_expr, **({"inplace": _into} if _into is not None else {}))
# MulNoNan is linear in x only: with a NaN x, parts of y summing to 0 give NaN, the whole y 0
for _name, _linear in (("AddV2", "all"), ("Sub", "all"), ("Neg", "all"), ("Mul", "each"), ("RealDiv", "first"),
                       ("MulNoNan", "first")):
    set_traits(_name, linear=_linear)
    get_op(_name).sbp = sbp_rules.elementwise_rule(_linear)
get_op("MatMul").sbp = sbp_rules.matmul_rule


# ---- SBP rules (core/sbp.py) of the ops not made by _u: elementwise ones split any axis (broadcast
# inputs get B); MulNoNan/DivNoNan are linear in x for a fixed y (0 where y == 0 on every rank)
for _name, _linear in [("MulNoNan", "first"), ("DivNoNan", "first"), ("AddN", "all"), ("LeakyRelu", None),
                       ("Gelu", None)] + [(n, None) for n in (
                           "FloorDiv", "FloorMod", "Maximum", "Minimum", "SquaredDifference", "Xlogy", "Xdivy",
                           "Xlog1py", "Atan2", "TruncateDiv", "TruncateMod", "Pow", "Less", "LessEqual", "Greater",
                           "GreaterEqual", "Equal", "NotEqual", "LogicalAnd", "LogicalOr", "LogicalNot", "IsNan",
                           "IsFinite", "IsInf")]:
    get_op(_name).sbp = sbp_rules.elementwise_rule(_linear)


def _select_sbp(inputs, attrs):
    """where(c, x, y): elementwise; partial sums in both branches give a partial sum; a partial
    max (min) in one branch, the other the same kind or ``B``, gives it (the condition is the same
    on every rank, so the max over ranks of the chosen shares is the chosen max)."""
    sigs = sbp_rules.elementwise_rule()(inputs, attrs) + [Signature([B, P, P], [P])]
    for kind in (sbp_rules.PMAX, sbp_rules.PMIN):
        sigs += [Signature([B, kind, kind], [kind]), Signature([B, kind, B], [kind]), Signature([B, B, kind], [kind])]
    return sigs


def _cast_sbp(inputs, attrs):
    """Elementwise; partial values stay partial between float dtypes (a sum of rounded shares
    is the rounded sum within the new dtype's precision), never through ints or bool."""
    sigs = sbp_rules.elementwise_rule()(inputs, attrs)
    src, dst = inputs[0].dtype, attrs["DstT"]
    if src is not None and src.is_floating and dst.is_floating:
        sigs.append(Signature([P], [P]))
    # monotone (rounding to nearest is): a partial max/min passes from floats or ints to floats
    # (not to ints: they wrap, and -inf has no int value)
    if src is not None and (src.is_floating or src.is_integer) and dst.is_floating:
        sigs += [Signature([k], [k]) for k in (sbp_rules.PMAX, sbp_rules.PMIN)]
    return sigs


# monotone on all the reals (floats): a partial max/min passes through (sbp_rules.monotone_signatures)
for _name in ("Relu", "Relu6", "Exp", "Expm1", "Tanh", "Sigmoid", "Softplus", "Softsign", "Elu", "Selu", "Floor",
              "Ceil", "Round", "Sign", "Atan", "Erf"):
    get_op(_name).sbp = sbp_rules.elementwise_rule(monotone="up")
get_op("Neg").sbp = sbp_rules.elementwise_rule("all", monotone="down")
get_op("LeakyRelu").sbp = sbp_rules.elementwise_rule(
    monotone=lambda attrs: "up" if attrs.get("alpha", 0.2) >= 0 else None)
get_op("AddV2").sbp = sbp_rules.elementwise_rule("all", monotone=("up", "up"))      # x + b
get_op("Mul").sbp = sbp_rules.elementwise_rule("each", monotone=sbp_rules.mul_direction)      # x * b, sign known
get_op("RealDiv").sbp = sbp_rules.elementwise_rule("first", monotone=sbp_rules.div_direction)  # x / b, sign known
get_op("Sub").sbp = sbp_rules.elementwise_rule("all", monotone=("up", "down"))      # x - b, b - x


def _max_min_sbp(kind):
    """maximum/minimum: monotone in each input with the other B, and ``P(max)`` on both sides of
    ``maximum`` (the max over ranks of ``max(a_r, b_r)`` is ``max(max a, max b)``; min alike)."""
    rule = sbp_rules.elementwise_rule(monotone=("up", "up"))
    both = Signature([Partial(kind)] * 2, [Partial(kind)])

    def sbp(inputs, attrs):
        sigs = rule(inputs, attrs)
        return sigs + [both] if sbp_rules.monotone_signatures(inputs, ("up", "up")) else sigs
    return sbp


get_op("Maximum").sbp = _max_min_sbp("max")
get_op("Minimum").sbp = _max_min_sbp("min")
get_op("SelectV2").sbp = _select_sbp
get_op("Cast").sbp = _cast_sbp
get_op("Where").sbp = BOXES_TO_B       # coordinates of the true elements: a data-dependent length
