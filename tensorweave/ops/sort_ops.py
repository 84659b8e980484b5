"""Sorting and scans: sort, argsort, top_k, cumsum, cumprod.

Sorting is stable: equal elements keep their order (for ``DESCENDING`` too, as in ``top_k``).
Gradients of sorted values flow back to the positions the values came from.

>>> import tensorweave as tw
>>> x = tw.constant([3.0, 1.0, 2.0])
>>> tw.sort(x).numpy().tolist(), tw.argsort(x, direction="DESCENDING").numpy().tolist()
([1.0, 2.0, 3.0], [0, 2, 1])
>>> tw.cumsum(x, exclusive=True).numpy().tolist()
[0.0, 3.0, 4.0]
"""
import collections

from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op
from tensorweave.core.sbp import B, P, S
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.ops import math_ops as M
from tensorweave.ops import rules
from tensorweave.ops.arguments import int_argument
from tensorweave.ops.array_ops import ones_like, zeros_like

__all__ = ["sort", "argsort", "top_k", "cumsum", "cumprod", "cumulative_logsumexp"]

_ct = convert_to_tensor
_SORTABLE = _dt.FLOATING + _dt.INTEGER


def _check_rank(x, op_name):
    if x.shape.rank == 0:
        raise ValueError(f"{op_name} needs a tensor of rank >= 1, got a scalar")


def _axis_attr(x, axis, op_name):
    if x.dtype not in _SORTABLE:  # checked here too: eager execution skips the shape rule
        raise TypeError(f"{op_name} does not support dtype {x.dtype.name}; expected a float or integer tensor")
    _check_rank(x, op_name)
    axis = int_argument(axis, op_name, "axis")
    return rules.normalize_axis(axis, x.shape.rank) if x.shape.rank is not None else axis


# ---- take along an axis (the differentiable half of sort/top_k) -------------------------------
def _infer_take(inputs, attrs):
    x, idx = inputs
    rules.check_dtype(idx, (_dt.int32, _dt.int64), "TakeAlongAxis", "indices")
    return idx.shape, x.dtype


register_op("TakeAlongAxis", infer=_infer_take,
            grad=lambda op, g: [_take_grad(g, op.inputs[1], op.inputs[0], op.attrs["axis"]), None])
register_op("TakeAlongAxisGrad", infer=lambda i, a: (i[2].shape, i[0].dtype),
            grad=lambda op, g: [_take(g, op.inputs[1], op.attrs["axis"]), None, None])


# _ct(g): a gather downstream makes the incoming gradient an IndexedSlices, which kernels cannot read.
def _take(x, indices, axis):
    return execute(get_op("TakeAlongAxis"), [_ct(x), indices], {"axis": axis})


def _take_grad(g, indices, x, axis):
    return execute(get_op("TakeAlongAxisGrad"), [_ct(g), indices, x], {"axis": axis})


# ---- sort / argsort / top_k ----------------------------------------------------------------
def _infer_argsort(inputs, attrs):
    x = inputs[0]
    rules.check_dtype(x, _SORTABLE, "ArgSort")
    _check_rank(x, "argsort")
    if x.shape.rank is not None:
        rules.normalize_axis(attrs["axis"], x.shape.rank)
    return x.shape, _dt.int32


register_op("ArgSort", infer=_infer_argsort, grad=NOT_DIFFERENTIABLE)


def _direction(direction):
    d = str(direction).upper()
    if d not in ("ASCENDING", "DESCENDING"):
        raise ValueError(f"direction must be 'ASCENDING' or 'DESCENDING', got {direction!r}")
    return d


def argsort(values, axis=-1, direction="ASCENDING", stable=False, name=None):
    """Indices (int32) that sort ``values`` along ``axis``. The sort is always stable (ties
    keep their order), so ``stable=True`` costs nothing extra.

    >>> import tensorweave as tw
    >>> tw.argsort(tw.constant([2, 1, 2, 0])).numpy().tolist()
    [3, 1, 0, 2]
    """
    x = _ct(values)
    d = _direction(direction)
    return execute(get_op("ArgSort"), [x], {"axis": _axis_attr(x, axis, "argsort"), "direction": d}, name)


def sort(values, axis=-1, direction="ASCENDING", name=None):
    """``values`` sorted along ``axis``; the gradient goes back to each value's source position.

    >>> import tensorweave as tw
    >>> tw.sort(tw.constant([[3, 1, 2]]), direction="DESCENDING").numpy().tolist()
    [[3, 2, 1]]
    """
    x = _ct(values)
    ax = _axis_attr(x, axis, "sort")
    idx = execute(get_op("ArgSort"), [x], {"axis": ax, "direction": _direction(direction)})
    return execute(get_op("TakeAlongAxis"), [x, idx], {"axis": ax}, name)


def _infer_top_k(inputs, attrs):
    x = inputs[0]
    rules.check_dtype(x, _SORTABLE, "TopKV2")
    _check_rank(x, "top_k")
    k = attrs["k"]
    if k < 0:
        raise ValueError(f"top_k: k must be non-negative, got {k}")
    if x.shape.rank is None:
        return [(TensorShape(None), x.dtype), (TensorShape(None), _dt.int32)]
    dims = x.shape.as_list()
    if dims[-1] is not None and k > dims[-1]:
        raise ValueError(f"top_k: k = {k} is larger than the last dimension of the input {fmt(x.shape)}")
    s = TensorShape(dims[:-1] + [k])
    return [(s, x.dtype), (s, _dt.int32)]


def _top_k_grad(op, g_values, g_indices):
    x, idx = op.inputs[0], op.outputs[1]
    return [_take_grad(g_values, idx, x, -1 if x.shape.rank is None else x.shape.rank - 1)]


register_op("TopKV2", infer=_infer_top_k, num_outputs=2, grad=_top_k_grad)
TopKV2 = collections.namedtuple("TopKV2", ["values", "indices"])


def top_k(input, k=1, sorted=True, name=None):
    """The ``k`` largest entries along the last axis and their indices (int32). Ties pick the
    lower index first; the results are always in descending order (``sorted`` is accepted for
    TensorFlow compatibility).

    >>> import tensorweave as tw
    >>> v, i = tw.math.top_k(tw.constant([1.0, 5.0, 3.0, 5.0]), k=2)
    >>> v.numpy().tolist(), i.numpy().tolist()
    ([5.0, 5.0], [1, 3])
    """
    x = _ct(input)
    _axis_attr(x, -1, "top_k")
    k = int_argument(k, "top_k", "k", 0)
    values, indices = execute(get_op("TopKV2"), [x], {"k": k, "sorted": bool(sorted)}, name)
    return TopKV2(values, indices)


# ---- cumulative sums and products ------------------------------------------------------------
def _infer_cum(op_name):
    def infer(inputs, attrs):
        x = inputs[0]
        rules.check_dtype(x, _SORTABLE, op_name)
        _check_rank(x, op_name.lower())
        if x.shape.rank is not None:
            rules.normalize_axis(attrs["axis"], x.shape.rank)
        return x.shape, x.dtype
    return infer


def _cumsum_grad(op, g):
    a = op.attrs
    return [cumsum(g, a["axis"], exclusive=a["exclusive"], reverse=not a["reverse"])]


def _cumprod_grad(op, g):
    # d/dx_k of sum_i g_i prod_{j in S(i)} x_j sums, over the i whose window S(i) holds k, the
    # product of the window without x_k. With x' = x where its zeros are 1, y' = cumprod(x') and
    # nz_i = the zeros in S(i), that product is y_i / x_k where x_k != 0 (0 once the window has a
    # zero) and y'_i where x_k is the window's only zero: exact with zeros (TF divides by x, so
    # [2, 0, 3, 4] gets [1, 0, 0, 0] where the gradient is [1, 32, 0, 0]).
    x, y = op.inputs[0], op.outputs[0]
    a = op.attrs
    axis, exclusive, reverse = a["axis"], a["exclusive"], a["reverse"]
    zero = M.equal(x, 0)
    ones = ones_like(x)
    safe_x = M.where(zero, ones, x)
    nonzero_y = cumprod(safe_x, axis, exclusive=exclusive, reverse=reverse)
    zeros_in = cumsum(M.cast(zero, x.dtype), axis, exclusive=exclusive, reverse=reverse)
    back = lambda t: cumsum(t, axis, exclusive=exclusive, reverse=not reverse)  # noqa: E731
    at_nonzero = M.divide(back(y * g), safe_x)
    at_zero = back(M.where(M.equal(zeros_in, 1), nonzero_y * g, zeros_like(g)))
    return [M.where(zero, at_zero, at_nonzero)]


register_op("Cumsum", infer=_infer_cum("Cumsum"), grad=_cumsum_grad)
register_op("Cumprod", infer=_infer_cum("Cumprod"), grad=_cumprod_grad)


def _cum(op_name, x, axis, exclusive, reverse, name):
    x = _ct(x)
    attrs = {"axis": _axis_attr(x, axis, op_name.lower()), "exclusive": bool(exclusive), "reverse": bool(reverse)}
    return execute(get_op(op_name), [x], attrs, name)


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    """Running sum along ``axis``; ``exclusive`` leaves out the current element, ``reverse``
    runs from the end.

    >>> import tensorweave as tw
    >>> tw.cumsum(tw.constant([1, 2, 3]), reverse=True).numpy().tolist()
    [6, 5, 3]
    """
    return _cum("Cumsum", x, axis, exclusive, reverse, name)


def cumprod(x, axis=0, exclusive=False, reverse=False, name=None):
    """Running product along ``axis`` (options as :func:`cumsum`). Its gradient is exact where
    ``x`` has zeros (TensorFlow's divides by ``x``).

    >>> import tensorweave as tw
    >>> tw.math.cumprod(tw.constant([1.0, 2.0, 3.0]), exclusive=True).numpy().tolist()
    [1.0, 1.0, 2.0]
    """
    return _cum("Cumprod", x, axis, exclusive, reverse, name)


def cumulative_logsumexp(x, axis=0, exclusive=False, reverse=False, name=None):
    """``log(cumsum(exp(x)))`` without overflow (options as :func:`cumsum`; an exclusive first
    entry is ``-inf``).

    >>> import tensorweave as tw
    >>> tw.math.cumulative_logsumexp(tw.constant([0.0, 0.0])).numpy()
    array([0.       , 0.6931472], dtype=float32)
    """
    from tensorweave.ops.array_ops import stop_gradient
    from tensorweave.ops.reduce_ops import reduce_max
    x = _ct(x)
    if x.dtype not in rules.FLOAT:
        raise TypeError(f"cumulative_logsumexp needs a float tensor, got {x.dtype.name}")
    top = stop_gradient(reduce_max(x, axis=axis, keepdims=True))
    top = M.where(M.is_finite(top), top, zeros_like(top))
    return M.add(M.log(cumsum(M.exp(x - top), axis, exclusive=exclusive, reverse=reverse)), top, name=name)


# ---- SBP rules (core/sbp.py): sorting, top-k and scans work along one axis; a split of any other
# axis passes through (top_k's is the last). Cumsum and take_along_axis are linear in the values:
# P passes, and a split of their own axis gives P (sbp_rules.embed_hook).
def _other_axes(n_in, n_out, linear=False, axis_of=lambda inputs, attrs: attrs["axis"]):
    def fn(inputs, attrs):
        x = inputs[0]
        axis = axis_of(inputs, attrs) % max(x.rank, 1)
        for i in range(x.rank):
            if i != axis:
                yield [S(i)] * n_in, [S(i)] * n_out
        if linear:
            yield [P] + [B] * (n_in - 1), [P] * n_out
            if n_out == 1 and x.rank:   # the scanned/gathered axis split: each rank's piece embedded in zeros
                yield from sbp_rules.linear_cut_rule(lambda inputs, attrs: [axis])(inputs, attrs)
    return sbp_rules.signatures(fn, n_out)


get_op("Cumsum").sbp = _other_axes(1, 1, linear=True)
get_op("Cumprod").sbp = _other_axes(1, 1)
get_op("ArgSort").sbp = _other_axes(1, 1)
get_op("TopKV2").sbp = _other_axes(1, 2, axis_of=lambda inputs, attrs: -1)
get_op("TakeAlongAxis").sbp = _other_axes(2, 1, linear=True)
get_op("TakeAlongAxisGrad").sbp = _other_axes(3, 1, linear=True)
