"""Segment reductions (``tf.math.segment_*``, ``unsorted_segment_*``), ``bincount`` and
``unique``. ``unsorted_segment_sum`` lives in ``array_ops``; the others build on it.

>>> import tensorweave as tw
>>> tw.math.unsorted_segment_max(tw.constant([1.0, 5.0, 3.0]), [0, 0, 2], 3).numpy().tolist()
[5.0, -3.4028234663852886e+38, 3.0]
>>> tw.math.segment_mean(tw.constant([1.0, 3.0, 6.0]), [0, 0, 1]).numpy().tolist()
[2.0, 6.0]
"""
import collections

from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op
from tensorweave.core.sbp import B, Partial, S
from tensorweave.core.shape import TensorShape
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import rules
from tensorweave.ops.array_ops import _infer_useg, gather, unsorted_segment_sum
from tensorweave.ops.reduce_ops import reduce_max

__all__ = ["unsorted_segment_max", "unsorted_segment_min", "unsorted_segment_prod", "unsorted_segment_mean",
           "unsorted_segment_sqrt_n", "segment_sum", "segment_mean", "segment_max", "segment_min", "segment_prod",
           "bincount", "unique", "unique_with_counts"]

_ct = convert_to_tensor


def _gathered(t, ids):
    """``t``'s rows for each entry's segment (zeros for dropped, negative ids)."""
    vals = gather(t, M.maximum(ids, 0))
    keep = ids >= 0
    for _ in range((vals.shape.rank or 1) - (ids.shape.rank or 1)):
        keep = A.expand_dims(keep, -1)
    return M.where(keep, vals, A.zeros_like(vals))


def _extreme_grad(op, g):
    # As TF: the gradient is shared among the entries equal to their segment's result.
    data, ids, n = op.inputs
    chosen = M.cast(M.equal(data, gather(op.outputs[0], M.maximum(ids, 0))), data.dtype)
    count = unsorted_segment_sum(chosen, ids, n)
    return [chosen * _gathered(M.div_no_nan(g, count), ids), None, None]


def _prod_grad(op, g):
    # Exact with zeros: an entry's gradient is the product of the other entries of its segment.
    data, ids, n = op.inputs
    zero = M.equal(data, 0)
    zeros_in = unsorted_segment_sum(M.cast(zero, data.dtype), ids, n)
    nonzero_prod = unsorted_segment_prod(M.where(zero, A.ones_like(data), data), ids, n)
    zc, npd, gg = _gathered(zeros_in, ids), _gathered(nonzero_prod, ids), _gathered(g, ids)
    at_nonzero = M.where(M.equal(zc, 0), M.div_no_nan(npd, data), A.zeros_like(data))
    at_zero = M.where(M.equal(zc, 1), npd, A.zeros_like(data))
    return [gg * M.where(zero, at_zero, at_nonzero), None, None]


register_op("UnsortedSegmentMax", infer=_infer_useg, grad=_extreme_grad)
register_op("UnsortedSegmentMin", infer=_infer_useg, grad=_extreme_grad)
register_op("UnsortedSegmentProd", infer=_infer_useg, grad=_prod_grad)


def _useg(op_name, data, segment_ids, num_segments, name):
    d = _ct(data)
    if d.dtype not in rules.NUMERIC:
        raise TypeError(f"{op_name} does not support dtype {d.dtype.name}")
    return execute(get_op(op_name), [d, _ct(segment_ids, dtype_hint=_dt.int32),
                                     _ct(num_segments, dtype_hint=_dt.int32)], {}, name)


def unsorted_segment_max(data, segment_ids, num_segments, name=None):
    """Maximum of each segment; an empty segment gets the dtype's lowest value (as TF)."""
    return _useg("UnsortedSegmentMax", data, segment_ids, num_segments, name)


def unsorted_segment_min(data, segment_ids, num_segments, name=None):
    """Minimum of each segment; an empty segment gets the dtype's largest value (as TF)."""
    return _useg("UnsortedSegmentMin", data, segment_ids, num_segments, name)


def unsorted_segment_prod(data, segment_ids, num_segments, name=None):
    """Product of each segment; an empty segment gets 1."""
    return _useg("UnsortedSegmentProd", data, segment_ids, num_segments, name)


def _counts(data, ids, n):
    ones = A.ones_like(ids, dtype=data.dtype) if ids.dtype is not data.dtype else A.ones_like(ids)
    c = unsorted_segment_sum(ones, ids, n)
    for _ in range((data.shape.rank or 1) - (ids.shape.rank or 1)):
        c = A.expand_dims(c, -1)
    return c


def unsorted_segment_mean(data, segment_ids, num_segments, name=None):
    """Mean of each segment (0 for an empty one)."""
    d, ids = _ct(data), _ct(segment_ids, dtype_hint=_dt.int32)
    return M.divide(unsorted_segment_sum(d, ids, num_segments), M.maximum(_counts(d, ids, num_segments), 1),
                    name=name)


def unsorted_segment_sqrt_n(data, segment_ids, num_segments, name=None):
    """Sum of each segment over the square root of its size (0 for an empty one)."""
    d, ids = _ct(data), _ct(segment_ids, dtype_hint=_dt.int32)
    return M.divide(unsorted_segment_sum(d, ids, num_segments),
                    M.sqrt(M.maximum(_counts(d, ids, num_segments), 1)), name=name)


# ---- sorted segments: as the unsorted ones, with max(ids) + 1 segments and zeros where empty ------
def _sorted(fn, data, segment_ids, name, empty_zero=False):
    d, ids = _ct(data), _ct(segment_ids, dtype_hint=_dt.int32)
    n = M.add(reduce_max(ids), 1) if ids.shape.num_elements() != 0 else A.constant(0, ids.dtype)
    out = fn(d, ids, n)
    if empty_zero:  # TF's segment_max/min give 0 for an empty segment (the unsorted ones do not)
        out = M.where(_counts(d, ids, n) > 0, out, A.zeros_like(out))
    return A.identity(out, name=name) if name else out


def segment_sum(data, segment_ids, name=None):
    """Sum of each segment of sorted ``segment_ids``."""
    return _sorted(unsorted_segment_sum, data, segment_ids, name)


def segment_mean(data, segment_ids, name=None):
    return _sorted(unsorted_segment_mean, data, segment_ids, name)


def segment_max(data, segment_ids, name=None):
    return _sorted(unsorted_segment_max, data, segment_ids, name, empty_zero=True)


def segment_min(data, segment_ids, name=None):
    return _sorted(unsorted_segment_min, data, segment_ids, name, empty_zero=True)


def segment_prod(data, segment_ids, name=None):
    return _sorted(unsorted_segment_prod, data, segment_ids, name)


# ---- bincount, unique -------------------------------------------------------------------------
register_op("Bincount", infer=lambda i, a: (TensorShape([None]), i[1].dtype if len(i) > 1 else a["dtype"]),
            grad=NOT_DIFFERENTIABLE)


def bincount(arr, weights=None, minlength=None, maxlength=None, dtype=_dt.int32, name=None, axis=None):
    """Counts of each value in the non-negative int tensor ``arr`` (weighted sums with
    ``weights``); the result has ``max(arr) + 1`` entries, at least ``minlength``, at most
    ``maxlength``.

    >>> import tensorweave as tw
    >>> tw.math.bincount(tw.constant([1, 1, 3])).numpy().tolist()
    [0, 2, 0, 1]
    """
    if axis is not None:
        raise NotImplementedError("bincount: axis is not supported; flatten the input first")
    a = _ct(arr)
    if not a.dtype.is_integer:
        raise TypeError(f"bincount: arr must be an integer tensor, got {a.dtype.name}")
    inputs = [a] if weights is None else [a, _ct(weights)]
    attrs = {"minlength": -1 if minlength is None else int(minlength),
             "maxlength": -1 if maxlength is None else int(maxlength), "dtype": _dt.as_dtype(dtype)}
    return execute(get_op("Bincount"), inputs, attrs, name)


Unique = collections.namedtuple("Unique", ["y", "idx"])
UniqueWithCounts = collections.namedtuple("UniqueWithCounts", ["y", "idx", "count"])
register_op("UniqueV2", infer=lambda i, a: [(TensorShape([None]), i[0].dtype), (i[0].shape, a["out_idx"]),
                                            (TensorShape([None]), a["out_idx"])],
            num_outputs=3, grad=NOT_DIFFERENTIABLE)


def _unique(x, out_idx, name):
    x = _ct(x)
    if x.shape.rank not in (None, 1):
        raise ValueError(f"unique: x must be 1-D, got rank {x.shape.rank}")
    return execute(get_op("UniqueV2"), [x], {"out_idx": _dt.as_dtype(out_idx)}, name)


def unique(x, out_idx=_dt.int32, name=None):
    """The distinct values of 1-D ``x`` in order of first appearance, and each entry's index
    into them.

    >>> import tensorweave as tw
    >>> y, idx = tw.unique(tw.constant([3, 1, 3]))
    >>> y.numpy().tolist(), idx.numpy().tolist()
    ([3, 1], [0, 1, 0])
    """
    y, idx, _ = _unique(x, out_idx, name)
    return Unique(y, idx)


def unique_with_counts(x, out_idx=_dt.int32, name=None):
    """As :func:`unique`, with how often each distinct value occurs."""
    return UniqueWithCounts(*_unique(x, out_idx, name))


# ---- SBP rules (core/sbp.py): rows split with their segment ids give partial max/min/prod (an
# empty segment is the kind's identity on a rank); a split trailing axis stays split. Bincount and
# unique have data-dependent output lengths: their inputs are boxed to B.
def _useg_sbp(kind):
    def fn(inputs, attrs):
        data, ids = inputs[0], inputs[1]
        others = [B] * (len(inputs) - 2)
        for k in range(ids.rank):
            yield [S(k), S(k)] + others, [Partial(kind)]
        for a in range(ids.rank, data.rank):
            yield [S(a), B] + others, [S(a - ids.rank + 1)]
    return sbp_rules.signatures(fn)


for _name, _kind in (("UnsortedSegmentMax", "max"), ("UnsortedSegmentMin", "min"), ("UnsortedSegmentProd", "prod")):
    get_op(_name).sbp = _useg_sbp(_kind)
get_op("Bincount").sbp = get_op("UniqueV2").sbp = sbp_rules.BOXES_TO_B
