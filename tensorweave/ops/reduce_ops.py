"""Reductions: reduce_sum/mean/max/min/prod/any/all, logsumexp, argmax/argmin, moments.

``axis`` may be None (all axes), an int or a list; ``keepdims`` keeps reduced axes as 1.

>>> import tensorweave as tw
>>> x = tw.constant([[1.0, 2.0], [3.0, 4.0]])
>>> tw.reduce_sum(x, axis=1).numpy(), tw.reduce_max(x).numpy()
(array([3., 7.], dtype=float32), np.float32(4.0))
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op, set_traits
from tensorweave.core.shape import TensorShape
from tensorweave.core.tensor import EagerTensor, Tensor
from tensorweave.ops import math_ops as m
from tensorweave.ops import rules
from tensorweave.ops.arguments import axis_argument, int_argument
from tensorweave.ops.array_ops import broadcast_to, reshape, shape, size, stop_gradient

_ct = convert_to_tensor


def _axes(axis, rank):
    if axis is None:
        return None if rank is None else tuple(range(rank))
    if isinstance(axis, EagerTensor):
        axis = axis.numpy().tolist()
    if isinstance(axis, (int, np.integer)):
        axis = (int(axis),)
    axis = tuple(int(a) for a in axis)
    if rank is None:
        return axis
    return tuple(sorted({rules.normalize_axis(a, rank) for a in axis}))


def _infer_reduce(out_dtype=None, allowed=None):
    def infer(inputs, attrs):
        x = inputs[0]
        if allowed is not None and x.dtype not in allowed:
            raise TypeError(f"Unsupported dtype {x.dtype.name}; expected one of: {', '.join(d.name for d in allowed)}")
        r = x.shape.rank
        axes = attrs["axis"]
        d = out_dtype or x.dtype
        if r is None:
            return TensorShape(None), d
        axes = _axes(axes, r)
        dims = x.shape.as_list()
        if attrs["keepdims"]:
            return TensorShape([1 if i in axes else s for i, s in enumerate(dims)]), d
        return TensorShape([s for i, s in enumerate(dims) if i not in axes]), d
    return infer


def _restore(op, g):
    """Reshapes a reduction's gradient so it broadcasts against the input."""
    x = op.inputs[0]
    if op.attrs["keepdims"]:
        return g
    r = x.shape.rank
    axes = _axes(op.attrs["axis"], r)
    if axes is None:
        return g   # a full reduction of an input of unknown rank: the scalar broadcasts as it is
    if x.shape.is_fully_defined():
        kept = [1 if i in axes else d for i, d in enumerate(x.shape.as_list())]
        return reshape(g, kept)
    from tensorweave.ops.array_ops import expand_dims
    for a in axes:
        g = expand_dims(g, a)
    return g


def _sum_grad(op, g):
    return [broadcast_to(_restore(op, g), shape(op.inputs[0]))]


def _mean_grad(op, g):
    x, y = op.inputs[0], op.outputs[0]
    if x.shape.is_fully_defined() and y.shape.is_fully_defined():
        count = max(x.shape.num_elements() // max(y.shape.num_elements(), 1), 1)
    else:
        count = m.cast(size(x), g.dtype) / m.maximum(m.cast(size(y), g.dtype), 1)
    # Divide before broadcasting: the same quotient per element, on the small tensor.
    return [broadcast_to(_restore(op, g) / count, shape(x))]


def _minmax_grad(op, g):
    x = op.inputs[0]
    y = op.outputs[0]
    yb = _restore(op, y)
    mask = m.cast(m.equal(x, yb), g.dtype)
    count = execute(get_op("Sum"), [mask], {"axis": op.attrs["axis"], "keepdims": True})
    return [broadcast_to(_restore(op, g), shape(x)) * mask / count]


def _prod_grad(op, g):
    # d(prod)/dx_i is the product of the other elements. y / x_i would be 0/0 where x has
    # zeros, so multiply exclusive running products from both ends instead (as TF does).
    from tensorweave.ops.array_ops import concat, transpose
    from tensorweave.ops.sort_ops import cumprod
    x = op.inputs[0]
    gb = broadcast_to(_restore(op, g), shape(x))
    r = x.shape.rank
    if r is None:
        return [gb * broadcast_to(_restore(op, op.outputs[0]), shape(x)) / x]
    axes = list(_axes(op.attrs["axis"], r))
    if not axes:
        return [gb]
    perm = axes + [i for i in range(r) if i not in axes]
    xt = transpose(x, perm)
    k = len(axes)
    if x.shape.is_fully_defined():
        dims = xt.shape.as_list()
        flat_shape = [int(np.prod(dims[:k]))] + dims[k:]
    else:
        st = shape(xt)
        flat_shape = concat([reshape(reduce_prod(st[:k]), [1]), st[k:]], 0)
    flat = reshape(xt, flat_shape)
    others = (cumprod(flat, axis=0, exclusive=True) *
              cumprod(flat, axis=0, exclusive=True, reverse=True))
    others = transpose(reshape(others, shape(xt)), list(np.argsort(perm)))
    return [gb * others]


register_op("Sum", infer=_infer_reduce(), grad=_sum_grad)
register_op("Mean", infer=_infer_reduce(), grad=_mean_grad)
register_op("Max", infer=_infer_reduce(), grad=_minmax_grad)
register_op("Min", infer=_infer_reduce(), grad=_minmax_grad)
register_op("Prod", infer=_infer_reduce(), grad=_prod_grad)
register_op("Any", infer=_infer_reduce(allowed=(_dt.bool_,)), grad=NOT_DIFFERENTIABLE)
register_op("All", infer=_infer_reduce(allowed=(_dt.bool_,)), grad=NOT_DIFFERENTIABLE)


def _reducer(op_name, doc, allowed):
    opdef = get_op(op_name)

    def reduce(input_tensor, axis=None, keepdims=False, name=None):
        if isinstance(input_tensor, Tensor):
            x = input_tensor
        else:
            try:
                x = _ct(input_tensor)
            except (TypeError, ValueError):   # a RaggedTensor: reduced by rows
                from tensorweave.ops import composite_dispatch
                out = composite_dispatch.reduce(input_tensor, op_name, axis, keepdims)
                if out is NotImplemented:
                    raise
                return out
        if x._dtype not in allowed:  # checked here too: eager execution skips the shape rule
            raise TypeError(f"reduce_{op_name.lower()} does not support dtype {x.dtype.name}; expected one of: "
                            f"{rules.dtype_names(allowed)}")
        if axis is not None:
            axis = axis_argument(axis, f"reduce_{op_name.lower()}")
        return execute(opdef, (x,), {"axis": axis, "keepdims": bool(keepdims)}, name)
    reduce.__doc__ = doc
    reduce.__name__ = "reduce_" + op_name.lower()
    return reduce


_N, _B = rules.NUMERIC, rules.BOOL   # tuples, common dtypes first: a hit is an identity compare
reduce_sum = _reducer("Sum", "Sum of elements across ``axis``.", _N + rules.COMPLEX)
reduce_mean = _reducer("Mean", "Mean of elements across ``axis`` (integer inputs: integer mean).", _N + rules.COMPLEX)
reduce_max = _reducer("Max", "Maximum across ``axis``; the gradient is split evenly among ties.", _N)
reduce_min = _reducer("Min", "Minimum across ``axis``.", _N)
reduce_prod = _reducer("Prod", "Product across ``axis``.", _N)
reduce_any = _reducer("Any", "Logical or across ``axis``.", _B)
reduce_all = _reducer("All", "Logical and across ``axis``.", _B)


def _float_input(x, op_name):
    x = _ct(x)
    if not x.dtype.is_floating:
        raise TypeError(f"{op_name} needs a float tensor, got {x.dtype.name}. Hint: tw.cast it first")
    return x


def reduce_euclidean_norm(input_tensor, axis=None, keepdims=False, name=None):
    """``sqrt(sum(x**2))`` over ``axis``; integer inputs give the (truncated) integer norm, as TF.

    >>> import tensorweave as tw
    >>> tw.math.reduce_euclidean_norm(tw.constant([[3.0, 4.0]]), 1).numpy()
    array([5.], dtype=float32)
    """
    x = _ct(input_tensor)
    if x.dtype not in rules.NUMERIC:
        raise TypeError(f"reduce_euclidean_norm does not support dtype {x.dtype.name}")
    if x.dtype.is_integer:
        wide = m.cast(x, _dt.float64)
        return m.cast(m.sqrt(reduce_sum(wide * wide, axis=axis, keepdims=keepdims)), x.dtype, name=name)
    return m.sqrt(reduce_sum(m.square(x), axis=axis, keepdims=keepdims), name=name)


def reduce_logsumexp(input_tensor, axis=None, keepdims=False, name=None):
    """``log(sum(exp(x)))`` computed stably (shifted by the maximum)."""
    x = _float_input(input_tensor, "reduce_logsumexp")
    mx = stop_gradient(reduce_max(x, axis=axis, keepdims=True))
    # An all -inf slice would give inf - inf = nan; shift such slices by 0 instead.
    mx = m.where(m.is_finite(mx), mx, m.zeros_like(mx))
    out = m.add(m.log(reduce_sum(m.exp(x - mx), axis=axis, keepdims=True)), mx, name=name)
    if not keepdims:
        out = _squeeze_axes(out, axis, x.shape.rank)
    return out


def _squeeze_axes(t, axis, rank):
    from tensorweave.ops.array_ops import squeeze
    if axis is None:
        return reshape(t, [])
    return squeeze(t, axis=list(_axes(axis, rank)))


def reduce_variance(input_tensor, axis=None, keepdims=False, name=None):
    x = _float_input(input_tensor, "reduce_variance")
    mean = reduce_mean(x, axis=axis, keepdims=True)
    return reduce_mean(m.squared_difference(x, mean), axis=axis, keepdims=keepdims, name=name)


def reduce_std(input_tensor, axis=None, keepdims=False, name=None):
    return m.sqrt(reduce_variance(input_tensor, axis=axis, keepdims=keepdims), name=name)


def moments(x, axes, shift=None, keepdims=False, name=None):
    """Mean and variance of ``x`` over ``axes`` (as ``tf.nn.moments``; integer inputs give
    integer means and variances, as in TF)."""
    x = _ct(x)
    if x.dtype not in rules.NUMERIC:
        raise TypeError(f"moments needs a numeric tensor, got {x.dtype.name}")
    mean = reduce_mean(x, axis=axes, keepdims=True)
    # TF stops the gradient through `mean` here; that leaves first derivatives unchanged (the
    # dropped term sums to zero) but makes second derivatives wrong, so it is not done here.
    variance = reduce_mean(m.squared_difference(x, mean), axis=axes, keepdims=True)
    if not keepdims:
        mean = _squeeze_axes(mean, axes, x.shape.rank)
        variance = _squeeze_axes(variance, axes, x.shape.rank)
    return mean, variance


def count_nonzero(input, axis=None, keepdims=False, dtype=_dt.int64, name=None):
    x = _ct(input)
    nz = m.cast(m.not_equal(x, m.zeros_like(x) if x.dtype is not _dt.bool_ else False), dtype)
    return reduce_sum(nz, axis=axis, keepdims=keepdims, name=name)


def _infer_arg(inputs, attrs):
    x = inputs[0]
    if x.shape.rank is None:
        return TensorShape(None), attrs["output_type"]
    axis = rules.normalize_axis(attrs["axis"], x.shape.rank)
    return TensorShape([d for i, d in enumerate(x.shape.as_list()) if i != axis]), attrs["output_type"]


register_op("ArgMax", infer=_infer_arg, grad=NOT_DIFFERENTIABLE)
register_op("ArgMin", infer=_infer_arg, grad=NOT_DIFFERENTIABLE)


def argmax(input, axis=None, output_type=_dt.int64, name=None):
    """Index of the largest value along ``axis`` (default 0); ties pick the first."""
    return execute(get_op("ArgMax"), [_ct(input)], {"axis": 0 if axis is None else int_argument(axis, "argmax", "axis"),
                                                    "output_type": _dt.as_dtype(output_type)}, name)


def argmin(input, axis=None, output_type=_dt.int64, name=None):
    return execute(get_op("ArgMin"), [_ct(input)], {"axis": 0 if axis is None else int_argument(axis, "argmin", "axis"),
                                                    "output_type": _dt.as_dtype(output_type)}, name)


# The reduction each op computes (core/registry.py TRAITS): the SBP rule generator reads it.
for _name, _kind in (("Sum", "sum"), ("Max", "max"), ("Min", "min"), ("Prod", "prod")):
    set_traits(_name, reduction=_kind)


# SBP rules (core/sbp.py) of the reductions without the trait: Any/All are max/min over bools
# (P(max) is "or"), Mean is linear (P -> P) but a split reduced axis needs Sum / n
# (distribute/decompositions.py), ArgMax/ArgMin split only along kept axes.
get_op("Any").sbp = sbp_rules.reduction_rule("max")
get_op("All").sbp = sbp_rules.reduction_rule("min")
get_op("Mean").sbp = sbp_rules.reduction_rule("sum", split_reduced=False)
get_op("ArgMax").sbp = get_op("ArgMin").sbp = sbp_rules.reduction_rule(None, split_reduced=False)
