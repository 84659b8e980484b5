"""OpInfos for array ops (ops/array_ops.py) and indexing ops (ops/indexing_ops.py).

References are written with plain NumPy indexing and loops, not with the functions the
kernels call, so a kernel cannot agree with itself by construction. Shape-like arguments
given as Python lists are graph constants (static output shapes); given as NumPy arrays
they become placeholders in the graph test (shapes known only at run time).
"""
import numpy as np

import tensorweave as tw
from opinfo import ALL, FLOATS, NUMERIC, OpInfo, Sample, arr, noncontig

I32 = np.int32


def _wide(dtype):
    """Accumulation dtype of a reference: int64 for integers, float64 otherwise (incl. bfloat16)."""
    return np.int64 if np.dtype(dtype).kind in "iu" else np.float64


def _a(rng, dtype, *shape, low=-2.0, high=2.0):
    return arr(rng, shape, dtype, low, high)


# ---- existing array ops ----------------------------------------------------------------------
def _reshape_samples(d, r):
    return [Sample((_a(r, d, 3, 4), [2, 6]), name="2d"),
            Sample((_a(r, d, 3, 4), [-1]), name="flatten"),
            Sample((_a(r, d, 3, 4), [4, -1, 1]), name="infer"),
            Sample((_a(r, d, 3, 4), np.array([6, 2], I32)), name="dynamic"),
            Sample((_a(r, d), [1, 1]), name="scalar"),
            Sample((_a(r, d, 1, 1), []), name="to_scalar"),
            Sample((_a(r, d, 0, 3), [3, 0]), name="empty"),
            Sample((noncontig(_a(r, d, 2, 5)), [5, 2]), name="noncontig")]


def _transpose_samples(d, r):
    return [Sample((_a(r, d, 2, 3, 4), [2, 0, 1]), name="perm"),
            Sample((_a(r, d, 2, 3, 4),), name="reverse"),
            Sample((_a(r, d),), name="scalar"),
            Sample((_a(r, d, 0, 3), [1, 0]), name="empty"),
            Sample((noncontig(_a(r, d, 3, 4)), [1, 0]), name="noncontig")]


def _transpose_ref(x, perm=None):
    return np.array(x.transpose(perm))


def _concat_samples(d, r):
    return [Sample((_a(r, d, 2, 3), _a(r, d, 1, 3), 0), name="axis0"),
            Sample((_a(r, d, 2, 3), _a(r, d, 2, 1), -1), name="neg_axis"),
            Sample((_a(r, d, 2, 0), _a(r, d, 2, 2), 1), name="empty"),
            Sample((noncontig(_a(r, d, 2, 3)), _a(r, d, 2, 3), 1), name="noncontig")]


def _concat_ref(a, b, axis):
    out = np.empty(tuple(x + y if i == axis % a.ndim else x for i, (x, y) in enumerate(zip(a.shape, b.shape))),
                   dtype=a.dtype)
    n = a.shape[axis]
    idx = [slice(None)] * a.ndim
    idx[axis] = slice(0, n)
    out[tuple(idx)] = a
    idx[axis] = slice(n, None)
    out[tuple(idx)] = b
    return out


def _stack_samples(d, r):
    return [Sample((_a(r, d, 2, 3), _a(r, d, 2, 3), 0), name="axis0"),
            Sample((_a(r, d, 2, 3), _a(r, d, 2, 3), 2), name="last"),
            Sample((_a(r, d, 2, 3), _a(r, d, 2, 3), -2), name="neg"),
            Sample((_a(r, d), _a(r, d), 0), name="scalars"),
            Sample((_a(r, d, 0, 2), _a(r, d, 0, 2), 1), name="empty")]


def _stack_ref(a, b, axis):
    axis = axis % (a.ndim + 1)
    return np.concatenate([np.expand_dims(a, axis), np.expand_dims(b, axis)], axis)


def _unstack_samples(d, r):
    return [Sample((_a(r, d, 3, 2),), {"axis": 0}, name="axis0"),
            Sample((_a(r, d, 2, 3, 2),), {"axis": -2}, name="middle"),
            Sample((_a(r, d, 0, 2),), {"axis": 1}, name="empty"),
            Sample((noncontig(_a(r, d, 2, 3)),), {"axis": 1}, name="noncontig")]


def _unstack_ref(x, axis=0):
    return [x[(slice(None),) * (axis % x.ndim) + (i,)] for i in range(x.shape[axis])]


def _split_samples(d, r):
    return [Sample((_a(r, d, 6, 2), 3), name="even"),
            Sample((_a(r, d, 6, 2), [1, 2, 3]), name="sizes"),
            Sample((_a(r, d, 2, 5), [2, -1]), {"axis": 1}, name="minus1"),
            Sample((_a(r, d, 2, 4), [4, 0]), {"axis": -1}, name="empty_part"),
            Sample((_a(r, d, 0, 4), 2), {"axis": 1}, name="empty")]


def _split_ref(x, spec, axis=0):
    n = x.shape[axis]
    sizes = [n // spec] * spec if isinstance(spec, int) else list(spec)
    if -1 in sizes:
        sizes[sizes.index(-1)] = n - (sum(sizes) + 1)
    out, start = [], 0
    for s in sizes:
        out.append(x[(slice(None),) * (axis % x.ndim) + (slice(start, start + s),)])
        start += s
    return out


_KEYS = [((1,), (3, 4)), ((slice(None, None, -1),), (3, 4)), ((Ellipsis, 0), (2, 3, 4)),
         ((None, slice(1, 3)), (4, 2)), ((slice(None), None, 2), (3, 4)), ((-1, slice(-1, None, -2)), (3, 5)),
         ((slice(1, None, 2), Ellipsis, slice(None, -1)), (5, 2, 3)), ((), ()), ((Ellipsis, None), ()),
         ((slice(5, 10),), (3, 2)), ((slice(None), 1), (0, 3))]


def _getitem_samples(d, r):
    out = [Sample((_a(r, d, *shape),), {"key": key}, name=f"key{i}") for i, (key, shape) in enumerate(_KEYS)]
    out.append(Sample((noncontig(_a(r, d, 3, 4)),), {"key": (slice(None, None, -2), 1)}, name="noncontig"))
    return out


def _getitem(x, key):
    return x[key]


def _gather_samples(d, r):
    return [Sample((_a(r, d, 5, 3), np.array([4, 0, 2, 0], I32)), name="rows"),
            Sample((_a(r, d, 5, 3), np.array([[1, 2], [3, 3]], I32)), name="2d_indices"),
            Sample((_a(r, d, 4, 3), np.array([2, 0], np.int64)), {"axis": 1}, name="axis1"),
            Sample((_a(r, d, 2, 3, 4), np.array([3, 1, 1], I32)), {"axis": -1}, name="neg_axis"),
            Sample((_a(r, d, 2, 4, 3), np.array([[1, 0], [3, 3]], I32)), {"axis": 1, "batch_dims": 1}, name="batch"),
            Sample((_a(r, d, 3), np.array(2, I32)), name="scalar_index"),
            Sample((_a(r, d, 3, 2), np.zeros((0,), I32)), name="empty"),
            Sample((noncontig(_a(r, d, 3, 4)), np.array([1, 1], I32)), name="noncontig")]


def _gather_ref(p, i, axis=0, batch_dims=0):
    axis %= p.ndim
    if batch_dims:
        return np.stack([_gather_ref(p[b], i[b], axis - 1) for b in range(p.shape[0])])
    pm = np.moveaxis(p, axis, 0)
    out = np.array([pm[k] for k in i.reshape(-1)], dtype=p.dtype).reshape(i.shape + pm.shape[1:])
    # out is indices dims + params dims without `axis`; params' leading dims go back in front
    return np.moveaxis(out, list(range(i.ndim, i.ndim + axis)), list(range(axis)))


def _expand_samples(d, r):
    return [Sample((_a(r, d, 2, 3), 0)), Sample((_a(r, d, 2, 3), -1)), Sample((_a(r, d, 2, 3), 1)),
            Sample((_a(r, d), 0), name="scalar"), Sample((_a(r, d, 0, 2), 2), name="empty")]


def _squeeze_samples(d, r):
    return [Sample((_a(r, d, 1, 3, 1),), name="all"),
            Sample((_a(r, d, 1, 3, 1),), {"axis": [0]}, name="one"),
            Sample((_a(r, d, 1, 3, 1),), {"axis": -1}, name="neg"),
            Sample((_a(r, d, 1, 1),), name="to_scalar"),
            Sample((_a(r, d, 0, 1),), {"axis": 1}, name="empty")]


def _squeeze_ref(x, axis=None):
    if axis is None:
        return x.reshape([s for s in x.shape if s != 1])
    axis = [a % x.ndim for a in (axis if isinstance(axis, list) else [axis])]
    return x.reshape([s for i, s in enumerate(x.shape) if i not in axis])


def _broadcast_samples(d, r):
    return [Sample((_a(r, d, 3, 1), [2, 3, 4]), name="expand"),
            Sample((_a(r, d), [2, 2]), name="scalar"),
            Sample((_a(r, d, 2, 3), [2, 3]), name="same"),
            Sample((_a(r, d, 1, 3), np.array([2, 3], I32)), name="dynamic"),
            Sample((_a(r, d, 1, 2), [0, 2]), name="empty")]


def _broadcast_ref(x, shape):
    shape = [int(s) for s in shape]
    return x * np.ones(shape, dtype=x.dtype) if x.dtype != np.bool_ else np.logical_and(x, np.ones(shape, bool))


def _fill_samples(d, r):
    return [Sample(([2, 3], _a(r, d)), name="2d"), Sample(([], _a(r, d)), name="scalar"),
            Sample((np.array([0, 2], I32), _a(r, d)), name="empty_dynamic")]


def _fill_ref(dims, v):
    out = np.empty([int(s) for s in dims], dtype=v.dtype)
    out[...] = v
    return out


def _const_samples(d, r):
    return [Sample(([2, 3],), {"dtype": tw.as_dtype(d)}), Sample(([],), {"dtype": tw.as_dtype(d)}, name="scalar"),
            Sample(([0, 4],), {"dtype": tw.as_dtype(d)}, name="empty")]


def _like_samples(d, r):
    return [Sample((_a(r, d, 2, 3),)), Sample((_a(r, d),), name="scalar"), Sample((_a(r, d, 0, 3),), name="empty"),
            Sample((noncontig(_a(r, d, 2, 3)),), name="noncontig")]


def _shape_samples(d, r):
    return [Sample((_a(r, d, 2, 3),), {"out_type": tw.int32}), Sample((_a(r, d, 0, 4, 1),), {"out_type": tw.int64}),
            Sample((_a(r, d),), {"out_type": tw.int32}, name="scalar")]


def _useg_samples(d, r):
    return [Sample((_a(r, d, 4, 3), np.array([0, 2, 0, 1], I32), 3), name="rows"),
            Sample((_a(r, d, 2, 2), np.array([[1, 1], [0, 4]], I32), 5), name="2d_ids"),
            Sample((_a(r, d, 0, 3), np.zeros((0,), I32), 2), name="empty"),
            Sample((_a(r, d, 3), np.array([1, 1, 1], np.int64), 2), name="int64"),
            Sample((_a(r, d, 3, 2), np.array([0, -1, 1], I32), 2), name="negative_id_dropped")]


def _useg_ref(data, ids, n):
    out = np.zeros((n,) + data.shape[ids.ndim:], dtype=_wide(data.dtype))
    for pos in np.ndindex(*ids.shape):
        if ids[pos] >= 0:
            out[ids[pos]] += data[pos]
    return out.astype(data.dtype)


# ---- indexing ops ----------------------------------------------------------------------------
def _gather_nd_samples(d, r):
    return [Sample((_a(r, d, 3, 4), np.array([[0, 1], [2, 3], [0, 1]], I32)), name="elements"),
            Sample((_a(r, d, 3, 4), np.array([[2], [0]], np.int64)), name="rows"),
            Sample((_a(r, d, 3, 2, 2), np.array([[[1, 0]], [[2, 1]]], I32)), name="nested"),
            Sample((_a(r, d, 2, 3, 2), np.array([[1], [0]], I32)), {"batch_dims": 1}, name="batch"),
            Sample((_a(r, d, 2, 3), np.zeros((0, 2), I32)), name="empty"),
            Sample((_a(r, d, 2, 3), np.zeros((2, 0), I32)), name="depth0"),
            Sample((noncontig(_a(r, d, 3, 4)), np.array([1, 2], I32)), name="noncontig_scalar_out")]


def _gather_nd_ref(p, idx, batch_dims=0):
    if batch_dims:
        return np.stack([_gather_nd_ref(p[b], idx[b]) for b in range(p.shape[0])])
    m = idx.shape[-1]
    rows = [p[tuple(int(v) for v in vec)] for vec in idx.reshape(int(np.prod(idx.shape[:-1])), m)]
    return np.array(rows, dtype=p.dtype).reshape(idx.shape[:-1] + p.shape[m:])


def _scatter_nd_samples(d, r):
    return [Sample((np.array([[1], [3], [1]], I32), _a(r, d, 3), [5]), name="dups"),
            Sample((np.array([[0, 1], [2, 0]], I32), _a(r, d, 2, 4), [3, 2, 4]), name="slices"),
            Sample((np.array([[1]], np.int64), _a(r, d, 1, 2), np.array([3, 2], np.int64)), name="dynamic"),
            Sample((np.zeros((0, 1), I32), _a(r, d, 0, 2), [2, 2]), name="empty")]


def _scatter_nd_ref(idx, upd, shape):
    out = np.zeros([int(s) for s in shape], dtype=_wide(upd.dtype))
    m = idx.shape[-1]
    for vec, u in zip(idx.reshape(-1, m), upd.reshape((-1,) + out.shape[m:])):
        out[tuple(vec)] += u
    return out.astype(upd.dtype)


def _tscatter_samples(dup):
    def gen(d, r):
        i1 = np.array([[1], [3], [1]] if dup else [[1], [3], [0]], I32)
        return [Sample((_a(r, d, 4, 2), i1, _a(r, d, 3, 2)), name="rows"),
                Sample((_a(r, d, 2, 3), np.array([[1, 2], [0, 0]], np.int64), _a(r, d, 2)), name="elements"),
                Sample((_a(r, d, 2, 3), np.zeros((0, 2), I32), _a(r, d, 0)), name="empty"),
                Sample((noncontig(_a(r, d, 2, 3)), np.array([[1]], I32), _a(r, d, 1, 3)), name="noncontig")]
    return gen


def _tscatter_ref(mode):
    def ref(t, idx, upd):
        out = t.astype(_wide(t.dtype) if t.dtype != np.bool_ else bool)
        m = idx.shape[-1]
        for vec, u in zip(idx.reshape(-1, m), upd.reshape((-1,) + t.shape[m:])):
            k = tuple(vec)
            out[k] = out[k] + u if mode == "add" else out[k] - u if mode == "sub" else u
        return out.astype(t.dtype)
    return ref


def _one_hot_samples(d, r):
    dt = tw.as_dtype(d)
    on, off = np.array(3, d), np.array(-1 if dt.is_floating or not dt.is_unsigned else 0, d)
    return [Sample((np.array([0, 2, -1, 5], I32), 4), {"dtype": dt}, name="vector"),
            Sample((np.array([[1, 0], [2, 2]], np.int64), 3, on, off), {"axis": 0}, name="axis0_values"),
            Sample((np.array([[1, 0]], np.uint8), 3, on, off), {"axis": 1}, name="middle"),
            Sample((np.array(1, I32), 3), {"dtype": dt}, name="scalar"),
            Sample((np.zeros((0,), I32), 2), {"dtype": dt}, name="empty")]


def _one_hot_ref(i, depth, on=None, off=None, axis=-1, dtype=None):
    dt = dtype.np_dtype if dtype is not None else on.dtype
    on = np.asarray(1 if on is None else on, dt)
    off = np.asarray(0 if off is None else off, dt)
    out = np.empty(i.shape + (depth,), dtype=dt)
    for pos in np.ndindex(*i.shape):
        for c in range(depth):
            out[pos + (c,)] = on if i[pos] == c else off
    return np.moveaxis(out, -1, axis)


def _one_hot_op(i, depth, on=None, off=None, axis=-1, dtype=None):
    return tw.one_hot(i, depth, on, off, axis=axis, dtype=dtype)


def _pad_samples(d, r):
    return [Sample((_a(r, d, 2, 3), [[1, 0], [2, 1]]), name="2d"),
            Sample((_a(r, d, 2, 3), [[0, 0], [1, 1]], np.array(5, d)), name="value"),
            Sample((_a(r, d, 3), np.array([[2, 1]], np.int64)), name="dynamic"),
            Sample((_a(r, d), np.zeros((0, 2), I32)), name="scalar"),
            Sample((_a(r, d, 0, 2), [[1, 1], [0, 0]]), name="empty"),
            Sample((noncontig(_a(r, d, 2, 3)), [[0, 1], [1, 0]]), name="noncontig")]


def _pad_ref(x, p, c=None):
    p = np.asarray(p)
    out = np.full(tuple(s + a + b for s, (a, b) in zip(x.shape, p)), 0 if c is None else c, dtype=x.dtype)
    out[tuple(slice(a, a + s) for s, (a, _) in zip(x.shape, p))] = x
    return out


def _pad_op(x, p, c=None):
    return tw.pad(x, p) if c is None else tw.pad(x, p, constant_values=c)


def _mirror_samples(d, r):
    return [Sample((_a(r, d, 3, 4), [[2, 1], [3, 0]]), name="2d"),
            Sample((_a(r, d, 4), np.array([[1, 2]], I32)), name="dynamic"),
            Sample((_a(r, d, 3, 2), [[0, 0], [1, 1]]), name="one_axis"),
            Sample((noncontig(_a(r, d, 3, 4)), [[1, 1], [1, 1]]), name="noncontig")]


def _mirror_ref(mode):
    def ref(x, p):
        p = np.asarray(p)
        idx = []
        for n, (a, b) in zip(x.shape, p):
            j = np.arange(-a, n + b)
            if mode == "REFLECT":
                j = np.where(j < 0, -j, np.where(j >= n, 2 * (n - 1) - j, j))
            else:
                j = np.where(j < 0, -j - 1, np.where(j >= n, 2 * n - 1 - j, j))
            idx.append(j)
        return x[np.ix_(*idx)]
    return ref


def _mirror_op(mode):
    return lambda x, p: tw.pad(x, p, mode=mode.lower() if mode == "SYMMETRIC" else mode)


def _tile_samples(d, r):
    return [Sample((_a(r, d, 2, 3), [2, 1]), name="2d"),
            Sample((_a(r, d, 2, 1, 2), [1, 3, 2]), name="3d"),
            Sample((_a(r, d, 3), np.array([2], I32)), name="dynamic"),
            Sample((_a(r, d), []), name="scalar"),
            Sample((_a(r, d, 2, 2), [0, 2]), name="zero_multiple"),
            Sample((noncontig(_a(r, d, 2, 3)), [1, 2]), name="noncontig")]


def _tile_ref(x, m):
    m = [int(v) for v in m]
    return x[np.ix_(*[np.arange(n * k) % max(n, 1) for n, k in zip(x.shape, m)])] if x.ndim else x.copy()


def _reverse_samples(d, r):
    return [Sample((_a(r, d, 2, 3), [1])), Sample((_a(r, d, 2, 3, 2), [0, -1]), name="two"),
            Sample((_a(r, d, 3), []), name="none"), Sample((_a(r, d, 0, 3), [0, 1]), name="empty"),
            Sample((noncontig(_a(r, d, 2, 3)), [-1]), name="noncontig")]


def _reverse_ref(x, axes):
    key = [slice(None)] * x.ndim
    for a in axes:
        key[a] = slice(None, None, -1)
    return x[tuple(key)]


def _range_samples(d, r):
    dt = tw.as_dtype(d)
    if dt.is_floating:
        return [Sample((), {"start": 1.0, "limit": 2.0, "delta": 0.25, "dtype": dt}, name="float"),
                Sample((), {"start": 3.0, "limit": -1.0, "delta": -1.5, "dtype": dt}, name="negative"),
                Sample((), {"start": 2.0, "limit": 2.0, "delta": 1.0, "dtype": dt}, name="empty")]
    return [Sample((), {"start": 5, "dtype": dt}, name="limit_only"),
            Sample((), {"start": 2, "limit": 11, "delta": 3, "dtype": dt}, name="step"),
            Sample((), {"start": 4, "limit": -3, "delta": -2, "dtype": dt}, name="negative"),
            Sample((), {"start": 3, "limit": 3, "dtype": dt}, name="empty")]


def _range_ref(start, limit=None, delta=1, dtype=None):
    if limit is None:
        start, limit = 0, start
    vals = []
    v = start
    while (v < limit) if delta > 0 else (v > limit):
        vals.append(v)
        v = start + len(vals) * delta
    return np.array(vals, dtype=dtype.np_dtype)


def _slice_samples(d, r):
    return [Sample((_a(r, d, 3, 4), [1, 0], [2, 3]), name="2d"),
            Sample((_a(r, d, 3, 4), [1, 1], [-1, 2]), name="minus1"),
            Sample((_a(r, d, 2, 3, 2), np.array([0, 1, 1], I32), np.array([2, -1, 1], I32)), name="dynamic"),
            Sample((_a(r, d, 3, 4), [2, 4], [1, 0]), name="empty"),
            Sample((_a(r, d), [], []), name="scalar"),
            Sample((noncontig(_a(r, d, 3, 4)), [0, 2], [3, 2]), name="noncontig")]


def _slice_ref(x, b, s):
    return x[tuple(slice(int(bb), x.shape[i] if int(ss) == -1 else int(bb) + int(ss))
                   for i, (bb, ss) in enumerate(zip(b, s)))]


def _bmask_samples(d, r):
    return [Sample((_a(r, d, 4, 2), np.array([True, False, True, True])), name="rows"),
            Sample((_a(r, d, 2, 3, 2), np.array([[True, False, True], [False, False, True]])), name="2d_mask"),
            Sample((_a(r, d, 2, 3), np.array([False, True, True])), {"axis": 1}, name="axis1"),
            Sample((_a(r, d, 3), np.zeros(3, bool)), name="none_true"),
            Sample((noncontig(_a(r, d, 2, 3)), np.array([[True, False, True], [True, True, False]])), name="noncontig")]


def _bmask_ref(x, mask, axis=0):
    return x[(slice(None),) * axis + (mask,)]


def _seqmask_samples(d, r):
    return [Sample((np.array([1, 3, 0], I32), 4), name="maxlen"),
            Sample((np.array([[2, 0], [1, 3]], np.int64),), name="auto"),
            Sample((np.array([2, 5], I32), 3), name="clipped"),
            Sample((np.array(2, I32), 3), name="scalar")]


def _seqmask_ref(dtype):
    def ref(lens, maxlen=None):
        n = int(lens.max()) if maxlen is None else maxlen
        return (np.arange(n) < lens[..., None]).astype(dtype.np_dtype)
    return ref


def _eye_samples(d, r):
    dt = tw.as_dtype(d)
    return [Sample((3,), {"dtype": dt}, name="square"), Sample((2, 4), {"dtype": dt}, name="wide"),
            Sample((3, 2), {"batch_shape": [2], "dtype": dt}, name="batch"), Sample((0,), {"dtype": dt}, name="empty")]


def _eye_ref(n, m=None, batch_shape=(), dtype=None):
    m = n if m is None else m
    e = (np.arange(n)[:, None] == np.arange(m)[None, :]).astype(dtype.np_dtype)
    return np.broadcast_to(e, tuple(batch_shape) + e.shape)


def _eye_op(n, m=None, batch_shape=None, dtype=tw.float32):
    return tw.eye(n, m, batch_shape=batch_shape, dtype=dtype)


def _eye_dyn_op(n, m=None, batch_shape=None, dtype=tw.float32):
    # Symbolic sizes take the run-time path of tw.eye.
    return tw.eye(tw.identity(n), None if m is None else tw.identity(m), batch_shape=batch_shape, dtype=dtype)


def _eye_dyn_samples(d, r):
    dt = tw.as_dtype(d)
    return [Sample((np.array(3, I32),), {"dtype": dt}), Sample((np.array(2, I32), np.array(3, I32)), {"dtype": dt}),
            Sample((np.array(2, I32),), {"batch_shape": [2], "dtype": dt})]


def _linspace_samples(d, r):
    return [Sample((_a(r, d), _a(r, d), 5), name="scalars"),
            Sample((_a(r, d, 2), _a(r, d, 2), 3), {"axis": 1}, name="vectors_axis1"),
            Sample((_a(r, d, 2), _a(r, d), 4), name="broadcast"),
            Sample((_a(r, d), _a(r, d), 1), name="one"),
            Sample((_a(r, d), _a(r, d), 0), name="empty")]


def _linspace_ref(a, b, n, axis=0):
    out = np.linspace(a.astype(np.float64), b.astype(np.float64), n, axis=axis)
    return out.astype(a.dtype)


def _meshgrid_samples(d, r):
    return [Sample((_a(r, d, 3), _a(r, d, 2)), name="xy"),
            Sample((_a(r, d, 3), _a(r, d, 2), _a(r, d, 2)), {"indexing": "ij"}, name="ij3"),
            Sample((_a(r, d, 2), _a(r, d, 3), _a(r, d, 1)), name="xy3"),
            Sample((_a(r, d, 0), _a(r, d, 2)), name="empty")]


def _meshgrid_ref(*xs, indexing="xy"):
    n = len(xs)
    shape = [len(x) for x in xs]
    if indexing == "xy" and n > 1:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, x in enumerate(xs):
        ax = i if not (indexing == "xy" and i < 2 and n > 1) else 1 - i
        o = np.empty(shape, dtype=x.dtype)
        for pos in np.ndindex(*shape):
            o[pos] = x[pos[ax]]
        out.append(o)
    return out


def _repeat_samples(d, r):
    return [Sample((_a(r, d, 2, 3), 2), name="flat"),
            Sample((_a(r, d, 3, 2), [2, 0, 1]), {"axis": 0}, name="counts"),
            Sample((_a(r, d, 2, 3), np.array([1, 3, 2], I32)), {"axis": -1}, name="dynamic"),
            Sample((_a(r, d, 2, 2), [3]), {"axis": 1}, name="broadcast_count"),
            Sample((_a(r, d, 0, 2), 2), {"axis": 0}, name="empty"),
            Sample((noncontig(_a(r, d, 2, 3)), 2), {"axis": 1}, name="noncontig")]


def _repeat_ref(x, rep, axis=None):
    if axis is None:
        x, axis = x.reshape(-1), 0
    n = x.shape[axis]
    rep = np.broadcast_to(np.asarray(rep).reshape(-1), (n,))
    take = [i for i in range(n) for _ in range(int(rep[i]))]
    return np.moveaxis(np.array([np.moveaxis(x, axis, 0)[i] for i in take], dtype=x.dtype).reshape(
        (len(take),) + np.moveaxis(x, axis, 0).shape[1:]), 0, axis)


def _roll_samples(d, r):
    return [Sample((_a(r, d, 5), 2, 0), name="1d"),
            Sample((_a(r, d, 3, 4), [1, -3], [0, 1]), name="two_axes"),
            Sample((_a(r, d, 3, 4), np.array([1, 2], I32), [1, 1]), name="same_axis_dynamic"),
            Sample((_a(r, d, 0, 3), 1, 1), name="empty"),
            Sample((noncontig(_a(r, d, 2, 3)), -7, -1), name="noncontig")]


def _roll_ref(x, shift, axis):
    shifts = np.atleast_1d(np.asarray(shift)).tolist()
    axes = np.atleast_1d(np.asarray(axis)).tolist()
    out = x
    for s, a in zip(shifts, axes):
        n = out.shape[a]
        if n:
            out = np.take(out, [(j - s) % n for j in range(n)], axis=a)
    return out


def _unravel_samples(d, r):
    return [Sample((np.array([1, 5, 0], d), np.array([2, 3], d)), name="vector"),
            Sample((np.array(7, d), np.array([2, 2, 2], d)), name="scalar"),
            Sample((np.array([[3, 1]], d), np.array([4], d)), name="1d_dims"),
            Sample((np.zeros((0,), d), np.array([2, 3], d)), name="empty")]


def _unravel_ref(i, dims):
    out = np.zeros((len(dims),) + i.shape, dtype=i.dtype)
    for pos in np.ndindex(*i.shape):
        v = int(i[pos])
        for k in range(len(dims) - 1, -1, -1):
            out[(k,) + pos] = v % dims[k]
            v //= dims[k]
    return out


OPS = [
    # existing ops (ops/array_ops.py)
    OpInfo("reshape", tw.reshape, lambda x, s: np.reshape(x.copy(), [int(v) for v in s]), ALL, _reshape_samples,
           grad_order=2),
    OpInfo("transpose", tw.transpose, _transpose_ref, ALL, _transpose_samples, grad_order=2),
    OpInfo("concat", lambda a, b, axis: tw.concat([a, b], axis), _concat_ref, ALL, _concat_samples, grad_order=2),
    OpInfo("stack", lambda a, b, axis: tw.stack([a, b], axis), _stack_ref, ALL, _stack_samples, grad_order=2),
    OpInfo("unstack", tw.unstack, _unstack_ref, ALL, _unstack_samples, grad_order=2),
    OpInfo("split", tw.split, _split_ref, ALL, _split_samples, grad_order=2),
    OpInfo("getitem", _getitem, _getitem, ALL, _getitem_samples, grad_order=2),
    OpInfo("gather", tw.gather, _gather_ref, ALL, _gather_samples, grad_order=2),
    OpInfo("expand_dims", tw.expand_dims, np.expand_dims, ALL, _expand_samples, grad_order=2),
    OpInfo("squeeze", tw.squeeze, _squeeze_ref, ALL, _squeeze_samples, grad_order=2),
    OpInfo("broadcast_to", tw.broadcast_to, _broadcast_ref, ALL, _broadcast_samples, grad_order=2),
    OpInfo("fill", tw.fill, _fill_ref, ALL, _fill_samples, grad_order=2),
    OpInfo("zeros", tw.zeros, lambda s, dtype: np.zeros(s, dtype.np_dtype), ALL, _const_samples, grad=False),
    OpInfo("ones", tw.ones, lambda s, dtype: np.ones(s, dtype.np_dtype), ALL, _const_samples, grad=False),
    OpInfo("zeros_like", tw.zeros_like, lambda x: np.zeros(x.shape, x.dtype), ALL, _like_samples, grad=False),
    OpInfo("ones_like", tw.ones_like, lambda x: np.ones(x.shape, x.dtype), ALL, _like_samples, grad=False),
    OpInfo("identity", tw.identity, lambda x: x.copy(), ALL, _like_samples, grad_order=2),
    # stop_gradient's forward is checked here; tests/test_indexing.py checks its gradient is None
    OpInfo("stop_gradient", tw.stop_gradient, lambda x: x.copy(), ALL, _like_samples, grad=False),
    OpInfo("shape", tw.shape, lambda x, out_type: np.array(x.shape, out_type.np_dtype), ALL, _shape_samples,
           grad=False),
    OpInfo("size", tw.size, lambda x, out_type: np.array(x.size, out_type.np_dtype), ALL, _shape_samples,
           grad=False),
    OpInfo("rank", tw.rank, lambda x: np.array(x.ndim, np.int32), ALL, _like_samples, grad=False),
    OpInfo("unsorted_segment_sum", tw.unsorted_segment_sum, _useg_ref, NUMERIC, _useg_samples, grad_order=2),
    # indexing ops (ops/indexing_ops.py)
    OpInfo("gather_nd", tw.gather_nd, _gather_nd_ref, ALL, _gather_nd_samples, grad_order=2),
    OpInfo("scatter_nd", tw.scatter_nd, _scatter_nd_ref, NUMERIC, _scatter_nd_samples, grad_order=2),
    OpInfo("tensor_scatter_nd_add", tw.tensor_scatter_nd_add, _tscatter_ref("add"), NUMERIC, _tscatter_samples(True),
           grad_order=2),
    OpInfo("tensor_scatter_nd_sub", tw.tensor_scatter_nd_sub, _tscatter_ref("sub"), FLOATS + (tw.int32, tw.int64),
           _tscatter_samples(True), grad_order=2),
    OpInfo("tensor_scatter_nd_update", tw.tensor_scatter_nd_update, _tscatter_ref("update"), ALL,
           _tscatter_samples(False), grad_order=2),
    OpInfo("one_hot", _one_hot_op, _one_hot_ref, NUMERIC, _one_hot_samples, grad_order=2),
    OpInfo("pad", _pad_op, _pad_ref, ALL, _pad_samples, grad_order=2),
    OpInfo("pad_reflect", _mirror_op("REFLECT"), _mirror_ref("REFLECT"), NUMERIC, _mirror_samples, grad_order=2),
    OpInfo("pad_symmetric", _mirror_op("SYMMETRIC"), _mirror_ref("SYMMETRIC"), NUMERIC, _mirror_samples,
           grad_order=2),
    OpInfo("tile", tw.tile, _tile_ref, ALL, _tile_samples, grad_order=2),
    OpInfo("reverse", tw.reverse, _reverse_ref, ALL, _reverse_samples, grad_order=2),
    OpInfo("range", tw.range, _range_ref, FLOATS + (tw.int32, tw.int64), _range_samples, grad=False),
    OpInfo("slice", tw.slice, _slice_ref, ALL, _slice_samples, grad_order=2),
    OpInfo("boolean_mask", tw.boolean_mask, _bmask_ref, ALL, _bmask_samples, grad_order=2),
    OpInfo("sequence_mask", lambda lens, maxlen=None: tw.sequence_mask(lens, maxlen), _seqmask_ref(tw.bool),
           (tw.int32,), _seqmask_samples, grad=False),
    OpInfo("sequence_mask_float", lambda lens, maxlen=None: tw.sequence_mask(lens, maxlen, dtype=tw.float32),
           _seqmask_ref(tw.float32), (tw.int32,), _seqmask_samples, grad=False),
    OpInfo("eye", _eye_op, _eye_ref, NUMERIC + (tw.bool,), _eye_samples, grad=False),
    OpInfo("eye_dynamic", _eye_dyn_op, _eye_ref, (tw.float32, tw.int32), _eye_dyn_samples, grad=False,
           out_dtype=lambda d: d),
    OpInfo("linspace", tw.linspace, _linspace_ref, FLOATS, _linspace_samples, grad_order=2,
           tol={tw.float16: (1e-2, 2e-2), tw.bfloat16: (5e-2, 8e-2), tw.float32: (1e-5, 1e-6)}),
    OpInfo("meshgrid", tw.meshgrid, _meshgrid_ref, ALL, _meshgrid_samples, grad_order=2),
    OpInfo("repeat", tw.repeat, _repeat_ref, ALL, _repeat_samples, grad_order=2),
    OpInfo("roll", tw.roll, _roll_ref, ALL, _roll_samples, grad_order=2),
    OpInfo("unravel_index", tw.unravel_index, _unravel_ref, (tw.int32, tw.int64), _unravel_samples, grad=False),
]
