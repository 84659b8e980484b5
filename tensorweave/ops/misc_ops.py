"""Top-level TF helpers: norm clipping, ``searchsorted``, ``histogram_fixed_width``, shape
helpers (``shape_n``, ``broadcast_static_shape``, ``broadcast_dynamic_shape``, ``ensure_shape``),
``identity_n``, ``parallel_stack``, ``realdiv``, ``scalar_mul``, ``is_tensor``.

>>> import tensorweave as tw
>>> tw.clip_by_norm(tw.constant([3.0, 4.0]), 1.0).numpy()
array([0.6, 0.8], dtype=float32)
>>> tw.searchsorted(tw.constant([1.0, 3.0, 5.0]), tw.constant([0.0, 3.0, 6.0])).numpy().tolist()
[0, 1, 3]
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op
from tensorweave.core.sbp import B, P, S
from tensorweave.core.shape import TensorShape, as_shape, broadcast_static, fmt
from tensorweave.core.tensor import Tensor
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import rules
from tensorweave.ops.arguments import int_argument
from tensorweave.ops.reduce_ops import reduce_sum

__all__ = ["clip_by_norm", "clip_by_global_norm", "searchsorted", "histogram_fixed_width", "shape_n",
           "broadcast_static_shape", "broadcast_dynamic_shape", "ensure_shape", "identity_n", "parallel_stack",
           "realdiv", "scalar_mul", "is_tensor"]

_ct = convert_to_tensor


def clip_by_norm(t, clip_norm, axes=None, name=None):
    """``t * clip_norm / max(norm(t), clip_norm)``, the L2 norm over ``axes`` (all by default)."""
    x = _ct(t)
    sq = reduce_sum(M.square(x), axis=axes, keepdims=True)
    norm = M.sqrt(M.where(sq > 0, sq, A.ones_like(sq)))   # no NaN gradient at 0
    norm = M.where(sq > 0, norm, A.zeros_like(norm))
    return M.divide(x * clip_norm, M.maximum(norm, clip_norm), name=name)


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """Scales every tensor by ``clip_norm / max(global_norm, clip_norm)``; returns
    ``(clipped_list, global_norm)`` (None entries stay None)."""
    from tensorweave.ops.decomposition_ops import global_norm
    ts = [None if t is None else _ct(t) for t in t_list]
    norm = global_norm(ts) if use_norm is None else _ct(use_norm)
    scale = M.divide(clip_norm, M.maximum(norm, clip_norm))
    return [None if t is None else t * M.cast(scale, t.dtype) for t in ts], norm


register_op("SearchSorted", infer=lambda i, a: (i[1].shape, a["out_type"]), grad=NOT_DIFFERENTIABLE)


def searchsorted(sorted_sequence, values, side="left", out_type=_dt.int32, name=None):
    """For each row, the insertion index of each value into the sorted row (``side`` "left" or
    "right"); leading dimensions of both inputs must match."""
    s, v = _ct(sorted_sequence), _ct(values)
    if s.dtype is not v.dtype:
        rules.same_dtype([s, v], "sorted_sequence and values")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    return execute(get_op("SearchSorted"), [s, v], {"side": side, "out_type": _dt.as_dtype(out_type)}, name)


register_op("HistogramFixedWidth", infer=lambda i, a: (TensorShape([a["nbins"]]), a["dtype"]),
            grad=NOT_DIFFERENTIABLE)


def histogram_fixed_width(values, value_range, nbins=100, dtype=_dt.int32, name=None):
    """Counts of ``values`` in ``nbins`` equal bins over ``value_range``; values outside go to
    the first or last bin (TF's rule)."""
    v = _ct(values)
    r = _ct(value_range, dtype=v.dtype) if not isinstance(value_range, Tensor) else value_range
    nbins = int_argument(nbins, "histogram_fixed_width", "nbins", 1)
    return execute(get_op("HistogramFixedWidth"), [v, r], {"nbins": nbins, "dtype": _dt.as_dtype(dtype)}, name)


def shape_n(input, out_type=_dt.int32, name=None):
    return [A.shape(t, out_type=out_type) for t in input]


def broadcast_static_shape(shape_x, shape_y):
    """The broadcast of two TensorShapes; incompatible shapes raise ValueError."""
    try:
        return broadcast_static(as_shape(shape_x), as_shape(shape_y))
    except ValueError:
        raise ValueError(f"Incompatible shapes for broadcasting: {fmt(shape_x)} and {fmt(shape_y)}") from None


def broadcast_dynamic_shape(shape_x, shape_y):
    """The broadcast of two 1-D shape tensors, as a 1-D int tensor."""
    x, y = _ct(shape_x), _ct(shape_y)
    return A.shape(M.add(A.zeros(x, _dt.int8), A.zeros(y, _dt.int8)), out_type=x.dtype)


def ensure_shape(x, shape, name=None):
    """``x`` unchanged if its shape is compatible with ``shape`` (None: any size), else an error."""
    t = _ct(x)
    want = as_shape(shape)
    if not t.shape.is_compatible_with(want):
        raise ValueError(f"ensure_shape: shape of tensor {fmt(t.shape)} is not compatible with expected shape "
                         f"{fmt(want)}")
    return A.identity(t, name=name)


def identity_n(input, name=None):
    return [A.identity(t) for t in input]


def parallel_stack(values, name="parallel_stack"):
    return A.stack(values, axis=0, name=name)


def realdiv(x, y, name=None):
    """``x / y`` for float tensors (no integer conversion, unlike ``divide``)."""
    return M._realdiv(x, y, name=name)


def scalar_mul(scalar, x, name=None):
    return M.multiply(scalar, x, name=name)


def is_tensor(x):
    return isinstance(x, Tensor) or hasattr(x, "_tw_tensor_")


# ---- SBP rules (core/sbp.py): searchsorted looks values up independently (batch axes of the sorted
# sequences split with them); a histogram of a split tensor is the sum of the ranks' histograms.
def _searchsorted_sbp(inputs, attrs):
    seq, values = inputs
    for i in range(values.rank):
        yield ([S(i), S(i)] if i < seq.rank - 1 else [B, S(i)]), [S(i)]


def _histogram_sbp(inputs, attrs):
    yield from (([S(i), B], [P]) for i in range(inputs[0].rank))


get_op("SearchSorted").sbp = sbp_rules.signatures(_searchsorted_sbp)
get_op("HistogramFixedWidth").sbp = sbp_rules.signatures(_histogram_sbp)
