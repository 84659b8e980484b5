"""OpInfos for the TF names added for issue 19: x*log(y)-style ops, atan2, truncating division,
special functions, segment reductions, bincount, unique, scatter max/min, strided_slice,
bitwise ops, euclidean norm and cumulative logsumexp."""
import numpy as np
import scipy.special

import tensorweave as tw
from opinfo import (FLOATS, INTS, SIGNED_INTS, OpInfo, Sample, arr, as_bf16_safe, binary_samples, noncontig,
                    unary_samples)

F = (tw.float32, tw.float64)
HALF_TOL = {tw.float16: (2e-2, 2e-2), tw.bfloat16: (5e-2, 5e-2)}


def _same(fn):
    return as_bf16_safe(lambda *a: np.asarray(fn(*a)).astype(np.asarray(a[0]).dtype))


def _x_zero(fn):
    def ref(x, y):
        with np.errstate(all="ignore"):
            return np.where(x == 0, 0, fn(x.astype(np.float64), y.astype(np.float64))).astype(x.dtype)
    return ref


def _xy_samples(low2):
    def gen(d, r):
        x = arr(r, (3, 4), d, -2, 2)
        x[0, :2] = 0   # the x == 0 rule
        y = arr(r, (3, 4), d, low2, 2.5)
        return [Sample((x, y), name="zeros"), Sample((arr(r, (2, 3), d, 0.5, 2), arr(r, (3,), d, low2, 2.5)),
                                                     name="broadcast")]
    return gen


def _truncdiv_ref(x, y):
    q = np.trunc(x.astype(np.float64) / y.astype(np.float64))
    return q.astype(x.dtype)


def _truncmod_ref(x, y):
    return np.fmod(x, y).astype(x.dtype)


def _int_div_samples(d, r):
    a = arr(r, (3, 4), d, -9, 9)
    b = arr(r, (3, 4), d, 1, 4) * np.where(r.random((3, 4)) > 0.5, 1, -1).astype(d)
    return [Sample((a, b), name="signs"), Sample((a[:0], b[0]), name="empty")]


def _seg_samples(d, r):
    ids = np.array([0, 0, 2, 1, 2, -1], np.int32)
    return [Sample((arr(r, (6,), d, 0.5, 2), ids, 3), name="vector"),
            Sample((arr(r, (6, 2), d, 0.5, 2), ids, 3), name="rows")]


def _empty_seg_samples(d, r):
    # Empty segments get the dtype's extreme values: a forward check only (a loss over them
    # is too large for finite differences to see the other entries).
    return [Sample((arr(r, (4,), d, 0.5, 2), np.array([0, 0, 3, -1], np.int32), 5), name="empty_segments")]


def _seg_ref(ufunc, empty, mean=False, sqrt_n=False):
    def ref(data, ids, n):
        out = np.full((n,) + data.shape[1:], empty, np.float64)
        cnt = np.zeros(n)
        for i, s in enumerate(ids):
            if s >= 0:
                out[s] = ufunc(out[s], data[i].astype(np.float64))
                cnt[s] += 1
        shape = (n,) + (1,) * (data.ndim - 1)
        if mean:
            out = out / np.maximum(cnt, 1).reshape(shape)
        if sqrt_n:
            out = out / np.sqrt(np.maximum(cnt, 1)).reshape(shape)
        return out.astype(data.dtype)
    return ref


def _extreme_ref(np_fn, which):
    def ref(data, ids, n):
        info = np.finfo(data.dtype) if data.dtype.kind == "f" else np.iinfo(data.dtype)
        out = np.full((n,) + data.shape[1:], info.min if which == "max" else info.max, data.dtype)
        for i, s in enumerate(ids):
            if s >= 0:
                out[s] = np_fn(out[s], data[i])
        return out
    return ref


def _sorted_seg_samples(d, r):
    return [Sample((arr(r, (5,), d, 0.5, 2), np.array([0, 0, 1, 3, 3], np.int32)), name="gap"),
            Sample((arr(r, (4, 2), d, 0.5, 2), np.array([0, 1, 1, 1], np.int32)), name="rows")]


def _sorted_ref(kind):
    def ref(data, ids):
        n = int(ids.max()) + 1
        out = np.zeros((n,) + data.shape[1:], np.float64)
        for s in range(n):
            rows = data[ids == s].astype(np.float64)
            if len(rows):
                out[s] = {"sum": rows.sum(0), "mean": rows.mean(0), "max": rows.max(0), "min": rows.min(0),
                          "prod": rows.prod(0)}[kind]
            elif kind == "prod":
                out[s] = 1   # TF: an empty segment's product is 1, its sum/mean/max/min 0
        return out.astype(data.dtype)
    return ref


def _bincount_samples(d, r):
    return [Sample((np.array([1, 1, 3, 0, 5], np.int32),), name="plain"),
            Sample((np.array([1, 1, 3], np.int32),), {"minlength": 6}, name="minlength"),
            Sample((np.array([1, 1, 3], np.int32),), {"maxlength": 2}, name="maxlength"),
            Sample((np.array([1, 1, 3], np.int32), arr(r, (3,), d)), name="weights")]


def _bincount_ref(a, weights=None, minlength=None, maxlength=None):
    a2 = a if maxlength is None else a[a < maxlength]
    w = None if weights is None else (weights if maxlength is None else weights[a < maxlength])
    out = np.bincount(a2, weights=w, minlength=minlength or 0)
    if maxlength is not None:
        out = out[:maxlength]
    return out.astype(weights.dtype if weights is not None else np.int32)


def _unique_ref(x):
    order, seen = [], {}
    idx = []
    for v in x.tolist():
        if v not in seen:
            seen[v] = len(order)
            order.append(v)
        idx.append(seen[v])
    counts = [idx.count(i) for i in range(len(order))]
    return np.array(order, x.dtype), np.array(idx, np.int32), np.array(counts, np.int32)


def _scatter_samples(d, r):
    return [Sample((arr(r, (5,), d), np.array([[0], [3], [0]], np.int32), arr(r, (3,), d)), name="vector"),
            Sample((arr(r, (3, 2), d), np.array([[1], [2]], np.int32), arr(r, (2, 2), d)), name="rows")]


def _scatter_ref(fn):
    def ref(t, idx, upd):
        out = t.copy()
        for k, i in enumerate(idx[:, 0]):
            out[i] = fn(out[i], upd[k])
        return out
    return ref


def _strided_samples(d, r):
    x = arr(r, (4, 5), d)
    return [Sample((x, [1, 0], [4, 5], [2, 2]), name="strides"),
            Sample((x, [0, 1], [0, 4], [1, 1]), {"begin_mask": 1, "end_mask": 1}, name="masks"),
            Sample((x, [2, 0], [3, 5], [1, 1]), {"shrink_axis_mask": 1}, name="shrink"),
            Sample((noncontig(x), [3, 4], [0, 0], [-1, -2]), name="negative")]


def _strided_ref(x, begin, end, strides, begin_mask=0, end_mask=0, shrink_axis_mask=0):
    key = []
    for i, (b, e, s) in enumerate(zip(begin, end, strides)):
        if shrink_axis_mask >> i & 1:
            key.append(b)
        else:
            key.append(slice(None if begin_mask >> i & 1 else b, None if end_mask >> i & 1 else e, s))
    return np.array(x[tuple(key)])


def _bitwise_samples(d, r):
    lo = 0 if np.dtype(d).kind == "u" else -100
    return [Sample((arr(r, (3, 4), d, lo, 100), arr(r, (3, 4), d, lo, 100)), name="same"),
            Sample((arr(r, (2, 3), d, lo, 100), arr(r, (3,), d, lo, 100)), name="broadcast")]


def _shift_samples(d, r):
    lo = 0 if np.dtype(d).kind == "u" else -100
    return [Sample((arr(r, (3, 4), d, lo, 100), arr(r, (3, 4), d, 0, 6)), name="in_range")]


def _cum_lse_ref(x, axis=0, exclusive=False, reverse=False):
    v = np.flip(x, axis) if reverse else x
    c = np.logaddexp.accumulate(v.astype(np.float64), axis=axis)
    if exclusive:
        c = np.moveaxis(c, axis, 0)
        c = np.concatenate([np.full((1,) + c.shape[1:], -np.inf), c[:-1]], 0)
        c = np.moveaxis(c, 0, axis)
    c = np.flip(c, axis) if reverse else c
    return c.astype(x.dtype)


def _cum_lse_samples(d, r):
    return [Sample((arr(r, (3, 4), d),), name="axis0"), Sample((arr(r, (3, 4), d),), {"axis": 1, "reverse": True},
                                                                name="reverse")]


def _norm_samples(d, r):
    return [Sample((arr(r, (3, 4), d, 0.5, 2),), {"axis": 1}, name="axis1"),
            Sample((arr(r, (2, 3), d, 0.5, 2),), name="all"),
            Sample((arr(r, (2, 3), d, 0.5, 2),), {"axis": 0, "keepdims": True}, name="keepdims")]


def _norm_ref(x, axis=None, keepdims=False):
    out = np.sqrt(np.sum(np.square(x.astype(np.float64)), axis=axis, keepdims=keepdims))
    return out.astype(x.dtype) if x.dtype.kind == "f" else np.floor(out).astype(x.dtype)


OPS = [
    OpInfo("xlogy", tw.math.xlogy, _x_zero(lambda x, y: x * np.log(y)), FLOATS, _xy_samples(0.3), grad_order=2,
           tol=HALF_TOL),
    OpInfo("xdivy", tw.math.xdivy, _x_zero(np.true_divide), FLOATS, _xy_samples(0.3), grad_order=2, tol=HALF_TOL),
    OpInfo("xlog1py", tw.math.xlog1py, _x_zero(lambda x, y: x * np.log1p(y)), FLOATS, _xy_samples(-0.5),
           grad_order=2, tol=HALF_TOL),
    OpInfo("atan2", tw.math.atan2, _same(np.arctan2), FLOATS, binary_samples(0.2, 2.0, 0.2, 2.0), grad_order=2,
           tol=HALF_TOL),
    OpInfo("multiply_no_nan", tw.math.multiply_no_nan, _same(lambda x, y: np.where(y == 0, 0, x * y)), FLOATS,
           binary_samples(), grad_order=2),
    OpInfo("truncatediv", tw.truncatediv, _truncdiv_ref, SIGNED_INTS + F, _int_div_samples, grad=False),
    OpInfo("truncatemod", tw.truncatemod, _truncmod_ref, SIGNED_INTS + F, _int_div_samples, grad=False),
    OpInfo("rint", tw.math.rint, _same(np.rint), FLOATS, unary_samples(kinks=(-1.5, -0.5, 0.5, 1.5)), grad=False),
    OpInfo("asin", tw.math.asin, _same(np.arcsin), FLOATS, unary_samples(-0.8, 0.8), grad_order=2, tol=HALF_TOL),
    OpInfo("acos", tw.math.acos, _same(np.arccos), FLOATS, unary_samples(-0.8, 0.8), grad_order=2, tol=HALF_TOL),
    OpInfo("sinh", tw.math.sinh, _same(np.sinh), FLOATS, unary_samples(), grad_order=2, tol=HALF_TOL),
    OpInfo("cosh", tw.math.cosh, _same(np.cosh), FLOATS, unary_samples(), grad_order=2, tol=HALF_TOL),
    OpInfo("asinh", tw.math.asinh, _same(np.arcsinh), FLOATS, unary_samples(), grad_order=2, tol=HALF_TOL),
    OpInfo("acosh", tw.math.acosh, _same(np.arccosh), FLOATS, unary_samples(1.2, 3.0), grad_order=2, tol=HALF_TOL),
    OpInfo("atanh", tw.math.atanh, _same(np.arctanh), FLOATS, unary_samples(-0.8, 0.8), grad_order=2, tol=HALF_TOL),
    OpInfo("lgamma", tw.math.lgamma, _same(scipy.special.gammaln), FLOATS, unary_samples(0.3, 4.0), grad_order=2,
           tol=HALF_TOL),
    OpInfo("digamma", tw.math.digamma, _same(scipy.special.digamma), FLOATS, unary_samples(0.3, 4.0),
           tol=HALF_TOL),
    OpInfo("erfc", tw.math.erfc, _same(scipy.special.erfc), FLOATS, unary_samples(), grad_order=2, tol=HALF_TOL),
    OpInfo("log_sigmoid", tw.math.log_sigmoid, _same(lambda x: -np.logaddexp(0, -x)), FLOATS, unary_samples(),
           grad_order=2, tol=HALF_TOL),
    OpInfo("reduce_euclidean_norm", tw.math.reduce_euclidean_norm, _norm_ref, F + (tw.int32,), _norm_samples,
           grad_order=2),
    OpInfo("cumulative_logsumexp", tw.math.cumulative_logsumexp, _cum_lse_ref, F, _cum_lse_samples, grad_order=2),
    OpInfo("cumulative_logsumexp_exclusive", tw.math.cumulative_logsumexp, _cum_lse_ref, F,
           lambda d, r: [Sample((arr(r, (4,), d),), {"exclusive": True}, name="exclusive")], grad=False),
    OpInfo("unsorted_segment_max", tw.math.unsorted_segment_max, _extreme_ref(np.maximum, "max"), F + (tw.int32,),
           _seg_samples, grad_args=(0,)),
    OpInfo("unsorted_segment_min", tw.math.unsorted_segment_min, _extreme_ref(np.minimum, "min"), F + (tw.int32,),
           _seg_samples, grad_args=(0,)),
    OpInfo("unsorted_segment_max_empty", tw.math.unsorted_segment_max, _extreme_ref(np.maximum, "max"),
           F + (tw.int32,), _empty_seg_samples, grad=False),
    OpInfo("unsorted_segment_min_empty", tw.math.unsorted_segment_min, _extreme_ref(np.minimum, "min"),
           F + (tw.int32,), _empty_seg_samples, grad=False),
    OpInfo("unsorted_segment_prod", tw.math.unsorted_segment_prod, _seg_ref(np.multiply, 1.0), F + (tw.int32,),
           _seg_samples, grad_args=(0,), grad_order=2),
    OpInfo("unsorted_segment_mean", tw.math.unsorted_segment_mean, _seg_ref(np.add, 0.0, mean=True), F,
           _seg_samples, grad_args=(0,), grad_order=2),
    OpInfo("unsorted_segment_sqrt_n", tw.math.unsorted_segment_sqrt_n, _seg_ref(np.add, 0.0, sqrt_n=True), F,
           _seg_samples, grad_args=(0,), grad_order=2),
    *[OpInfo(f"segment_{k}", getattr(tw.math, f"segment_{k}"), _sorted_ref(k), F, _sorted_seg_samples,
             grad_args=(0,), grad_order=1) for k in ("sum", "mean", "max", "min", "prod")],
    OpInfo("bincount", tw.math.bincount, _bincount_ref, F, _bincount_samples, grad=False, graph=False),
    OpInfo("unique_with_counts", lambda x: tuple(tw.unique_with_counts(x)), _unique_ref, INTS + F,
           lambda d, r: [Sample((np.array([3, 1, 3, 2, 1, 1], d),), name="repeats"),
                         Sample((np.array([], d),), name="empty")], grad=False),
    OpInfo("tensor_scatter_nd_max", tw.tensor_scatter_nd_max, _scatter_ref(np.maximum), F + (tw.int32,),
           _scatter_samples, grad_args=(0, 2)),
    OpInfo("tensor_scatter_nd_min", tw.tensor_scatter_nd_min, _scatter_ref(np.minimum), F + (tw.int32,),
           _scatter_samples, grad_args=(0, 2)),
    OpInfo("strided_slice", tw.strided_slice, _strided_ref, FLOATS + (tw.int32,), _strided_samples, grad_order=2),
    *[OpInfo(f"bitwise_{n}", getattr(tw.bitwise, n), f, INTS, _bitwise_samples, grad=False)
      for n, f in (("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or), ("bitwise_xor", np.bitwise_xor))],
    OpInfo("bitwise_invert", tw.bitwise.invert, np.invert, INTS, unary_samples(0, 100), grad=False),
    OpInfo("left_shift", tw.bitwise.left_shift, np.left_shift, INTS, _shift_samples, grad=False),
    OpInfo("right_shift", tw.bitwise.right_shift, np.right_shift, INTS, _shift_samples, grad=False),
]


def _ab_samples(a_lo, a_hi, x_lo, x_hi):
    def gen(d, r):
        return [Sample((arr(r, (3, 4), d, a_lo, a_hi), arr(r, (3, 4), d, x_lo, x_hi)), name="same"),
                Sample((arr(r, (4,), d, a_lo, a_hi), arr(r, (2, 4), d, x_lo, x_hi)), name="broadcast")]
    return gen


def _bessel_samples(d, r):
    x = arr(r, (3, 4), d, -3, 3)
    return [Sample((np.where(np.abs(x) < 0.2, 0.5, x).astype(d),), name="matrix"),
            Sample((np.array([0.0, 1.0], d),), name="zero")]


OPS += [
    OpInfo("erfinv", tw.math.erfinv, _same(scipy.special.erfinv), F, unary_samples(-0.9, 0.9), grad_order=2),
    OpInfo("ndtri", tw.math.ndtri, _same(scipy.special.ndtri), F, unary_samples(0.05, 0.95), grad_order=2),
    OpInfo("bessel_i0", tw.math.bessel_i0, _same(scipy.special.i0), F, _bessel_samples, grad_order=2),
    OpInfo("bessel_i0e", tw.math.bessel_i0e, _same(scipy.special.i0e), F, _bessel_samples),
    OpInfo("bessel_i1", tw.math.bessel_i1, _same(scipy.special.i1), F, _bessel_samples, grad_order=2),
    OpInfo("bessel_i1e", tw.math.bessel_i1e, _same(scipy.special.i1e), F, _bessel_samples),
    OpInfo("polygamma", tw.math.polygamma, _same(lambda n, x: scipy.special.polygamma(n, x)), F,
           lambda d, r: [Sample((np.array([0.0, 1.0, 2.0], d), arr(r, (3,), d, 0.5, 3)), name="orders")],
           grad_args=(1,)),
    OpInfo("zeta", tw.math.zeta, _same(scipy.special.zeta), F, _ab_samples(1.5, 4.0, 0.5, 3.0), grad_args=(1,)),
    OpInfo("igamma", tw.math.igamma, _same(scipy.special.gammainc), F, _ab_samples(0.5, 3.0, 0.2, 3.0),
           grad_args=(1,)),
    OpInfo("igammac", tw.math.igammac, _same(scipy.special.gammaincc), F, _ab_samples(0.5, 3.0, 0.2, 3.0),
           grad_args=(1,)),
    OpInfo("lbeta", tw.math.lbeta, lambda x: (np.sum(scipy.special.gammaln(x), -1)
                                              - scipy.special.gammaln(np.sum(x, -1))).astype(x.dtype), F,
           lambda d, r: [Sample((arr(r, (3, 4), d, 0.5, 3),), name="rows")], grad_order=2),
    OpInfo("polyval", lambda x: tw.math.polyval([2.0, -1.0, 0.5], x), lambda x: np.polyval([2.0, -1.0, 0.5], x)
           .astype(x.dtype), F, unary_samples(), grad_order=2),
    OpInfo("reciprocal_no_nan", tw.math.reciprocal_no_nan,
           lambda x: np.where(x == 0, 0, 1 / np.where(x == 0, 1, x)).astype(x.dtype), F,
           lambda d, r: [Sample((np.array([0.0, 2.0, -0.5], d),), name="zero")], grad=False),
    OpInfo("zero_fraction", tw.math.zero_fraction, lambda x: np.float32(np.mean(x == 0)), F + (tw.int32,),
           lambda d, r: [Sample((np.array([0, 1, 0, 3], d),), name="half")], grad=False),
    OpInfo("invert_permutation", tw.math.invert_permutation, lambda x: np.argsort(x).astype(x.dtype),
           (tw.int32, tw.int64), lambda d, r: [Sample((np.array([3, 0, 2, 1], d),), name="perm")], grad=False),
    OpInfo("matvec", tw.linalg.matvec, lambda a, b: np.einsum("...ij,...j->...i", a, b), F,
           lambda d, r: [Sample((arr(r, (3, 4), d), arr(r, (4,), d)), name="plain"),
                         Sample((arr(r, (2, 3, 4), d), arr(r, (2, 4), d)), name="batch")], grad_order=2),
    OpInfo("global_norm", lambda a, b: tw.linalg.global_norm([a, b]),
           lambda a, b: np.sqrt(np.sum(a.astype(np.float64) ** 2) + np.sum(b.astype(np.float64) ** 2)).astype(a.dtype),
           F, lambda d, r: [Sample((arr(r, (3, 4), d, 0.5, 2), arr(r, (2,), d, 0.5, 2)), name="two")], grad_order=2),
]


def _clip_norm_ref(x, c, axes=None):
    n = np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=None if axes is None else tuple(axes), keepdims=True))
    return (x * c / np.maximum(n, c)).astype(x.dtype)


def _searchsorted_samples(d, r):
    s = np.sort(arr(r, (2, 5), d, -3, 3), axis=-1)
    return [Sample((s, arr(r, (2, 4), d, -4, 4)), name="rows"),
            Sample((s[0], arr(r, (6,), d, -4, 4)), {"side": "right"}, name="right")]


OPS += [
    OpInfo("clip_by_norm", tw.clip_by_norm, _clip_norm_ref, F,
           lambda d, r: [Sample((arr(r, (3, 4), d), 1.0), name="clipped"), Sample((arr(r, (3, 4), d), 50.0), name="kept"),
                         Sample((arr(r, (3, 4), d), 1.0), {"axes": [1]}, name="rows")], grad_args=(0,), grad_order=2),
    OpInfo("searchsorted", tw.searchsorted,
           lambda s, v, side="left": (np.searchsorted(s, v, side=side) if s.ndim == 1 else
                                      np.stack([np.searchsorted(a, b, side=side) for a, b in zip(s, v)])).astype(np.int32),
           F + (tw.int32,), _searchsorted_samples, grad=False),
    OpInfo("histogram_fixed_width", lambda v: tw.histogram_fixed_width(v, [-1.0, 1.0], nbins=4),
           lambda v: np.bincount(np.clip(np.floor((v.astype(np.float64) + 1) / 2 * 4), 0, 3).astype(int),
                                 minlength=4).astype(np.int32), F, lambda d, r: [Sample((arr(r, (20,), d),), name="v")],
           grad=False, graph=False),
]
