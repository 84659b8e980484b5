"""Complex numbers: ``complex``, ``real``, ``imag``, ``conj``, ``angle`` and the modulus.

Gradients follow TensorFlow's convention for a real loss ``L`` of a complex ``z``: the
gradient is ``dL/dRe(z) + i dL/dIm(z)``, so ``real``'s gradient of ``g`` is ``complex(g, 0)`` and
``imag``'s is ``complex(0, g)``.

>>> import tensorweave as tw
>>> z = tw.complex(tw.constant([3.0]), tw.constant([4.0]))
>>> z.dtype, tw.math.real(z).numpy().tolist(), complex_abs(z).numpy().tolist()
(tw.complex64, [3.0], [5.0])
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core import sbp_rules
from tensorweave.core.registry import get_op, register_op
from tensorweave.ops import rules

__all__ = ["complex", "real", "imag", "conj", "angle", "complex_abs"]

_COMPLEX = (_dt.complex64, _dt.complex128)
_PAIR = {_dt.float32: _dt.complex64, _dt.float64: _dt.complex128}


def _infer_complex(inputs, attrs):
    d = rules.same_dtype(inputs)
    if d not in _PAIR:
        raise TypeError(f"complex needs float32 or float64 parts, got {d.name}")
    return rules.binary()(inputs, attrs)[0], _PAIR[d]


def _infer_part(inputs, attrs):
    x = inputs[0]
    if not x.dtype.is_complex and not x.dtype.is_floating:
        raise TypeError(f"expected a complex (or float) tensor, got {x.dtype.name}")
    return x.shape, x.dtype.real_dtype


def _complex_grad(op, g):
    from tensorweave.ops.array_ops import sum_to_like
    x, y = op.inputs
    return [sum_to_like(real(g), x), sum_to_like(imag(g), y)]


# SBP: elementwise; complex, real, imag and conj are real-linear, so partial sums pass through
_LINEAR, _EW = sbp_rules.elementwise_rule("all"), sbp_rules.elementwise_rule()
register_op("Complex", infer=_infer_complex, grad=_complex_grad, sbp=_LINEAR)
register_op("Real", infer=_infer_part, grad=lambda op, g: [_like_input(op, g, 0.0)], sbp=_LINEAR)
register_op("Imag", infer=_infer_part, grad=lambda op, g: [_like_input(op, g, 1.0)], sbp=_LINEAR)
register_op("Conj", infer=rules.unary(), grad=lambda op, g: [conj(g)], sbp=_LINEAR)
register_op("ComplexAbs", infer=_infer_part, grad=lambda op, g: [_abs_grad(op, g)], sbp=_EW)
register_op("Angle", infer=_infer_part, grad=lambda op, g: [_angle_grad(op, g)], sbp=_EW)


def _like_input(op, g, part):
    """The gradient of real (part=0) or imag (part=1) for the input's dtype."""
    from tensorweave.ops.array_ops import zeros_like
    if not op.inputs[0].dtype.is_complex:
        return g if part == 0.0 else zeros_like(g)
    z = zeros_like(g)
    return complex(g, z) if part == 0.0 else complex(z, g)


def _abs_grad(op, g):
    # d|z| = Re(conj(z) dz)/|z|: the gradient is g * z / |z| (0 where z == 0, as in TF).
    from tensorweave.ops.math_ops import div_no_nan
    z, r = op.inputs[0], op.outputs[0]
    if not z.dtype.is_complex:
        from tensorweave.ops.math_ops import sign
        return g * sign(z)
    scale = div_no_nan(g, r)
    return complex(scale, scale * 0) * z


def _angle_grad(op, g):
    # angle = atan2(y, x): d/dx = -y/r^2, d/dy = x/r^2.
    from tensorweave.ops.math_ops import div_no_nan
    z = op.inputs[0]
    if not z.dtype.is_complex:
        return g * 0
    x, y = real(z), imag(z)
    r2 = x * x + y * y
    return complex(div_no_nan(-g * y, r2), div_no_nan(g * x, r2))


def complex(real, imag, name=None):  # noqa: A001 - TF's name
    """A complex tensor from float parts (float32 -> complex64, float64 -> complex128)."""
    parts = [convert_to_tensor(real), convert_to_tensor(imag)]
    _infer_complex(parts, {})  # eager execution skips the shape rule
    return execute(get_op("Complex"), parts, {}, name)


def _part(op_name):
    def fn(input, name=None):  # noqa: A002 - TF's argument name
        x = convert_to_tensor(input)
        _infer_part([x], {})  # eager execution skips the shape rule
        return execute(get_op(op_name), [x], {}, name)
    fn.__name__ = op_name.lower()
    return fn


real = _part("Real")
imag = _part("Imag")
complex_abs = _part("ComplexAbs")
angle = _part("Angle")


def conj(x, name=None):
    """The complex conjugate (the identity for real tensors, as in TF)."""
    x = convert_to_tensor(x)
    if not x.dtype.is_complex:
        return x
    return execute(get_op("Conj"), [x], {}, name)
