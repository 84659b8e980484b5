"""OpInfos for reductions (ops/reduce_ops.py): axis None/int/list/negative, keepdims, empty
inputs where TensorFlow defines the result (sum 0, prod 1, max -inf or the lowest int,
min +inf or the highest, mean nan, any False, all True)."""
import ml_dtypes
import numpy as np

import tensorweave as tw
from opinfo import FLOATS, NUMERIC, OpInfo, Sample, arr, noncontig

LOW = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axis = [axis] if np.ndim(axis) == 0 else list(axis)
    return tuple(sorted(a % ndim for a in axis))


def _out_shape(x, axis, keepdims):
    ax = _axes(axis, x.ndim)
    if keepdims:
        return tuple(1 if i in ax else d for i, d in enumerate(x.shape))
    return tuple(d for i, d in enumerate(x.shape) if i not in ax)


def _slices(x, axis):
    """Yields (output index with keepdims, 1-D array of the reduced values)."""
    ax = _axes(axis, x.ndim)
    rest = [i for i in range(x.ndim) if i not in ax]
    n = int(np.prod([x.shape[i] for i in ax]))
    moved = np.transpose(x, rest + list(ax)).reshape([x.shape[i] for i in rest] + [n])
    for pos in np.ndindex(*[x.shape[i] for i in rest]):
        yield pos, moved[pos]


def _reduction(fn, out_dtype=None, empty=None):
    """A reference that applies ``fn`` (a function of a 1-D float64/int64/bool array) slice by slice."""
    def ref(x, axis=None, keepdims=False):
        wide = bool if x.dtype == np.bool_ else np.int64 if x.dtype.kind in "iu" else np.float64
        dt = out_dtype or x.dtype
        ax = _axes(axis, x.ndim)
        rest_shape = [x.shape[i] for i in range(x.ndim) if i not in ax]
        out = np.zeros(rest_shape, dtype=object)
        for pos, v in _slices(x, axis):
            out[pos] = fn(v.astype(wide), x.dtype) if v.size or empty is None else empty(x.dtype)
        return np.array(out.tolist(), dtype=np.float64 if dt in LOW else dt).astype(dt).reshape(
            _out_shape(x, axis, keepdims))
    return ref


def _lowest(d):
    return -np.inf if d.kind == "f" or d in LOW else np.iinfo(d).min


def _highest(d):
    return np.inf if d.kind == "f" or d in LOW else np.iinfo(d).max


def _int_mean(v, d):
    s = int(v.sum())
    q = abs(s) // v.size  # truncation toward zero, as TensorFlow's integer division
    return q if s >= 0 else -q


def _red_samples(low=-2.0, high=2.0, empty=True, int_empty=True, scalar=True):
    def gen(d, r):
        def a(*s):
            return arr(r, s, d, low, high)
        out = [Sample((a(3, 4),), name="all"),
               Sample((a(3, 4),), {"axis": 1}, name="axis1"),
               Sample((a(2, 3, 4),), {"axis": [0, 2]}, name="list"),
               Sample((a(2, 3, 4),), {"axis": -1, "keepdims": True}, name="neg_keep"),
               Sample((a(2, 3),), {"axis": None, "keepdims": True}, name="all_keep"),
               Sample((a(2, 3),), {"axis": [-2, 1]}, name="both_neg"),
               Sample((noncontig(a(2, 4)),), {"axis": 0}, name="noncontig")]
        if scalar:  # (the std of one value is 0, where sqrt has no derivative)
            out.append(Sample((a(),), name="scalar"))
        if empty and (int_empty or np.dtype(d).kind not in "iu"):  # an integer mean of nothing is undefined
            out += [Sample((a(0, 3),), {"axis": 0}, name="empty_reduced"),
                    Sample((a(0, 3),), {"axis": 1}, name="empty_kept"),
                    Sample((a(0, 3),), name="empty_all")]
        return out
    return gen


def _mean_ref(x, axis=None, keepdims=False):
    if x.dtype.kind in "iu":
        return _reduction(_int_mean)(x, axis, keepdims)
    with np.errstate(all="ignore"):
        return _reduction(lambda v, d: v.sum() / v.size if v.size else np.nan)(x, axis, keepdims)


def _arg_samples(d, r):
    return [Sample((arr(r, (3, 4), d, -3, 3),), name="default_axis"),
            Sample((arr(r, (3, 4), d, -3, 3),), {"axis": 1}, name="axis1"),
            Sample((arr(r, (2, 3, 4), d, -3, 3),), {"axis": -1, "output_type": tw.int32}, name="neg_int32"),
            Sample((np.array([1, 3, 3, 0, 3], d),), name="ties_first"),
            Sample((arr(r, (0, 3), d),), {"axis": 1}, name="empty_kept"),
            Sample((noncontig(arr(r, (2, 4), d)),), {"axis": 0}, name="noncontig")]


def _arg_ref(pick):
    def ref(x, axis=None, output_type=tw.int64):
        axis = 0 if axis is None else axis % x.ndim
        moved = np.moveaxis(x, axis, -1).astype(np.float64)
        out = np.zeros(moved.shape[:-1], dtype=output_type.np_dtype)
        for pos in np.ndindex(*moved.shape[:-1]):
            v = list(moved[pos])
            out[pos] = v.index(pick(v))  # first occurrence wins ties
        return out
    return ref


def _moments_samples(d, r):
    return [Sample((arr(r, (3, 4), d),), {"axes": [0]}, name="axis0"),
            Sample((arr(r, (2, 3, 4), d),), {"axes": [0, 1], "keepdims": True}, name="keep"),
            Sample((arr(r, (2, 3), d),), {"axes": [-1]}, name="neg"),
            Sample((noncontig(arr(r, (2, 4), d)),), {"axes": [0, 1]}, name="all")]


def _moments_ref(x, axes, keepdims=False):
    xf = x.astype(np.float64)
    m = xf.mean(axis=tuple(axes), keepdims=True)
    v = ((xf - m) ** 2).mean(axis=tuple(axes), keepdims=keepdims)
    if not keepdims:
        m = m.reshape(v.shape)
    return m.astype(x.dtype), v.astype(x.dtype)


def _var_ref(x, axis=None, keepdims=False):
    return _reduction(lambda v, d: ((v - v.mean()) ** 2).mean())(x, axis, keepdims)


def _std_ref(x, axis=None, keepdims=False):
    return _reduction(lambda v, d: np.sqrt(((v - v.mean()) ** 2).mean()))(x, axis, keepdims)


def _lse(v, d):
    m = v.max() if v.size else -np.inf
    if not np.isfinite(m):
        m = 0.0
    with np.errstate(divide="ignore"):  # log(0) = -inf for empty or all -inf slices
        return np.log(np.exp(v - m).sum()) + m


def _lse_samples(d, r):
    out = _red_samples(empty=False)(d, r)
    out.append(Sample((np.array([[1000.0, 1000.0], [-1000.0, -999.0]], d),), {"axis": 1}, name="large"))
    if d != np.float64:  # infinities have no finite-difference gradient
        out.append(Sample((np.array([[-np.inf, -np.inf], [0.0, -np.inf]], d),), {"axis": -1}, name="minus_inf"))
        out.append(Sample((arr(r, (0, 3), d),), {"axis": 0}, name="empty"))
    return out


def _count_samples(d, r):
    return [Sample((arr(r, (3, 4), d, -1, 1),), name="all"),
            Sample((arr(r, (3, 4), d, -1, 1),), {"axis": 1, "keepdims": True}, name="axis1"),
            Sample((arr(r, (2, 3), d, -1, 1),), {"axis": [-1], "dtype": tw.int32}, name="int32"),
            Sample((arr(r, (0, 3), d),), {"axis": 0}, name="empty")]


def _count_ref(x, axis=None, keepdims=False, dtype=tw.int64):
    return _reduction(lambda v, d: int(np.count_nonzero(v)), out_dtype=dtype.np_dtype, empty=lambda d: 0)(
        x, axis, keepdims)


def _prod_zero_samples(d, r):
    x = np.array([[1.5, 0.0, 2.0], [0.0, 0.0, -3.0], [0.5, 2.0, -1.0]], d)
    return [Sample((x,), {"axis": 1}, name="rows"), Sample((x,), name="all"),
            Sample((x.T.copy(),), {"axis": [0], "keepdims": True}, name="cols")]


def _bool_samples(d, r):
    return [s for s in _red_samples()(np.bool_, r)]


def _away_from_zero(gen):
    def g(d, r):
        out = gen(d, r)
        for s in out:
            a = s.args[0]
            if a.dtype.kind == "f" and a.size:
                s.args = (np.where(np.abs(a.astype(np.float64)) < 0.3, 0.5, a).astype(a.dtype),) + s.args[1:]
        return out
    return g


def _sum_fn(v, d):
    return v.sum()


def _prod_fn(v, d):
    return v.prod()


OPS = [
    OpInfo("reduce_sum", tw.reduce_sum, _reduction(_sum_fn, empty=lambda d: 0), NUMERIC, _red_samples(),
           grad_order=2, tol={tw.float16: (1e-2, 3e-2), tw.bfloat16: (5e-2, 1e-1)}),
    OpInfo("reduce_mean", tw.reduce_mean, _mean_ref, NUMERIC, _red_samples(int_empty=False), grad_order=2),
    OpInfo("reduce_max", tw.reduce_max, _reduction(lambda v, d: v.max(), empty=_lowest), NUMERIC, _red_samples(),
           grad_order=2),
    OpInfo("reduce_min", tw.reduce_min, _reduction(lambda v, d: v.min(), empty=_highest), NUMERIC, _red_samples(),
           grad_order=2),
    OpInfo("reduce_prod", tw.reduce_prod, _reduction(_prod_fn, empty=lambda d: 1), FLOATS + (tw.int32, tw.int64),
           _away_from_zero(_red_samples(-1.5, 1.5)), grad_order=2,
           tol={tw.float16: (1e-2, 3e-2), tw.bfloat16: (5e-2, 1e-1)}),
    OpInfo("reduce_prod_zeros", tw.reduce_prod, _reduction(_prod_fn), (tw.float32, tw.float64), _prod_zero_samples),
    OpInfo("reduce_any", tw.reduce_any, _reduction(lambda v, d: bool(v.any()), empty=lambda d: False), (tw.bool,),
           _red_samples(), grad=False),
    OpInfo("reduce_all", tw.reduce_all, _reduction(lambda v, d: bool(v.all()), empty=lambda d: True), (tw.bool,),
           _red_samples(), grad=False),
    OpInfo("reduce_logsumexp", tw.reduce_logsumexp, _reduction(_lse), FLOATS, _lse_samples, grad_order=2,
           tol={tw.float16: (1e-2, 2e-2), tw.bfloat16: (5e-2, 1e-1)}),
    OpInfo("reduce_variance", tw.math.reduce_variance, _var_ref, FLOATS, _red_samples(empty=False), grad_order=2,
           tol={tw.bfloat16: (5e-2, 1e-1)}),
    OpInfo("reduce_std", tw.math.reduce_std, _std_ref, FLOATS, _red_samples(empty=False, scalar=False), grad_order=2,
           tol={tw.bfloat16: (5e-2, 1e-1)}),
    OpInfo("argmax", tw.argmax, _arg_ref(max), NUMERIC, _arg_samples, grad=False),
    OpInfo("argmin", tw.argmin, _arg_ref(min), NUMERIC, _arg_samples, grad=False),
    OpInfo("moments", tw.nn.moments, _moments_ref, FLOATS, _moments_samples, grad_order=2,
           tol={tw.bfloat16: (5e-2, 1e-1)}),
    OpInfo("count_nonzero", tw.math.count_nonzero, _count_ref, NUMERIC + (tw.bool,), _count_samples, grad=False),
]
