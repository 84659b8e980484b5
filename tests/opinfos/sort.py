"""OpInfos for sorting and scans (ops/sort_ops.py). References sort Python lists slice by
slice, with ties broken by position (the stable order TensorFlow's top_k also uses)."""
import numpy as np

import tensorweave as tw
from opinfo import FLOATS, INTS, NUMERIC, OpInfo, Sample, arr, noncontig

SORTABLE = FLOATS + INTS


def _per_slice(fn, axis, x, out_dtype=None):
    """Applies ``fn`` (list -> list) to every 1-D slice of ``x`` along ``axis``."""
    moved = np.moveaxis(x, axis, -1)
    rows = []
    for pos in np.ndindex(*moved.shape[:-1]):
        rows.append(fn([v for v in moved[pos].tolist()]))
    k = len(rows[0]) if rows else moved.shape[-1]
    out = np.array(rows, dtype=out_dtype or x.dtype).reshape(moved.shape[:-1] + (k,))
    return np.moveaxis(out, -1, axis)


def _order(v, descending):
    key = (lambda i: (-v[i], i)) if descending else (lambda i: (v[i], i))
    return sorted(range(len(v)), key=key)


def _ties(d, values):
    """Tied values for integer dtypes; floats get distinct ones (sorting is not differentiable at a tie)."""
    v = np.array(values, dtype=np.float64)
    if np.dtype(d).kind not in "iu":
        v = v + np.arange(v.size).reshape(v.shape) * 0.125
    return v.astype(d)


def _sort_samples(d, r):
    return [Sample((arr(r, (3, 5), d, -9, 9),), name="last"),
            Sample((arr(r, (4, 3), d, -9, 9),), {"axis": 0, "direction": "DESCENDING"}, name="axis0_desc"),
            Sample((_ties(d, [2, 1, 2, 0, 1]),), {"direction": "DESCENDING"}, name="ties"),
            Sample((arr(r, (2, 3, 4), d, -9, 9),), {"axis": 1}, name="middle"),
            Sample((arr(r, (0, 3), d),), name="empty"),
            Sample((noncontig(arr(r, (2, 4), d, -9, 9)),), name="noncontig")]


def _sort_ref(x, axis=-1, direction="ASCENDING"):
    desc = direction == "DESCENDING"
    return _per_slice(lambda v: [v[i] for i in _order(v, desc)], axis, x)


def _argsort_ref(x, axis=-1, direction="ASCENDING", stable=False):
    desc = direction == "DESCENDING"
    return _per_slice(lambda v: _order(v, desc), axis, x, np.int32).astype(np.int32)


def _argsort_samples(d, r):
    out = _sort_samples(d, r)
    out.append(Sample((np.array([[1, 1, 0, 1], [3, 3, 3, 3]], d),), {"stable": True}, name="ties_stable"))
    return out


def _top_k_samples(d, r):
    return [Sample((arr(r, (3, 5), d, -9, 9),), {"k": 2}, name="k2"),
            Sample((arr(r, (2, 2, 4), d, -9, 9),), {"k": 4}, name="all"),
            Sample((_ties(d, [1, 3, 1, 3, 2]),), {"k": 3}, name="ties"),
            Sample((arr(r, (4,), d, -9, 9),), name="default_k"),
            Sample((arr(r, (2, 3), d),), {"k": 0}, name="k0"),
            Sample((arr(r, (0, 3), d),), {"k": 2}, name="empty"),
            Sample((noncontig(arr(r, (2, 4), d, -9, 9)),), {"k": 2, "sorted": False}, name="noncontig")]


def _top_k_ref(x, k=1, sorted=True):
    idx = _per_slice(lambda v: _order(v, True)[:k], -1, x, np.int32)
    vals = _per_slice(lambda v: [v[i] for i in _order(v, True)[:k]], -1, x)
    return vals.reshape(x.shape[:-1] + (k,)), idx.reshape(x.shape[:-1] + (k,)).astype(np.int32)


def _scan_samples(low, high, away=False):
    def gen(d, r):
        def a(*s):
            v = arr(r, s, d, low, high)
            if away and np.dtype(d).kind not in "iu":  # cumprod's gradient divides by x
                v = np.where(np.abs(v.astype(np.float64)) < 0.4, 0.8, v).astype(d)
            return v
        return [Sample((a(3, 4),), name="axis0"),
                Sample((a(3, 4),), {"axis": 1, "exclusive": True}, name="exclusive"),
                Sample((a(2, 3, 2),), {"axis": -2, "reverse": True}, name="reverse"),
                Sample((a(2, 4),), {"axis": -1, "exclusive": True, "reverse": True}, name="both"),
                Sample((a(4),), name="vector"),
                Sample((a(0, 3),), {"axis": 1}, name="empty"),
                Sample((noncontig(a(2, 3)),), {"axis": 1}, name="noncontig")]
    return gen


def _scan_ref(op, start):
    def ref(x, axis=0, exclusive=False, reverse=False):
        def run(v):
            if reverse:
                v = v[::-1]
            acc, out = start, []
            for e in v:
                if exclusive:
                    out.append(acc)
                acc = op(acc, e)
                if not exclusive:
                    out.append(acc)
            return out[::-1] if reverse else out
        wide = np.int64 if x.dtype.kind in "iu" else np.float64
        return _per_slice(run, axis, x.astype(wide)).astype(x.dtype)
    return ref


OPS = [
    OpInfo("sort", tw.sort, _sort_ref, SORTABLE, _sort_samples, grad_order=2),
    OpInfo("argsort", tw.argsort, _argsort_ref, SORTABLE, _argsort_samples, grad=False),
    OpInfo("top_k", tw.math.top_k, _top_k_ref, SORTABLE, _top_k_samples, grad_order=2),
    OpInfo("cumsum", tw.cumsum, _scan_ref(lambda a, b: a + b, 0), NUMERIC, _scan_samples(-2, 2), grad_order=2,
           tol={tw.float16: (1e-2, 2e-2), tw.bfloat16: (5e-2, 1e-1)}),
    OpInfo("cumprod", tw.math.cumprod, _scan_ref(lambda a, b: a * b, 1), NUMERIC, _scan_samples(-2, 2, away=True),
           grad_order=2, tol={tw.float16: (1e-2, 2e-2), tw.bfloat16: (5e-2, 1e-1)}),
]
