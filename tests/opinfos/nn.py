"""OpInfos for ``tw.nn`` (ops/nn_ops.py).

The convolution and pooling references are deliberately naive: explicit loops over output
positions and window offsets with bounds checks, in float64, sharing no code with the
im2col kernels they check.
"""
import numpy as np
import scipy.special

import tensorweave as tw
from opinfo import FLOATS, OpInfo, Sample, arr, noncontig

F32_64 = (tw.float32, tw.float64)
CONV_TOL = {tw.float32: (1e-4, 1e-4), tw.float16: (1e-2, 2e-2), tw.bfloat16: (5e-2, 1e-1)}


def _f64(a):
    return np.asarray(a).astype(np.float64)


def _back(out, like):
    return np.asarray(out).astype(np.asarray(like).dtype)


# ---- references: geometry -----------------------------------------------------------------------
def _ints(v, nd, cf):
    """strides/dilations/ksize in any TF form -> a list of nd ints."""
    if v is None:
        return [1] * nd
    if np.isscalar(v):
        return [int(v)] * nd
    v = [int(a) for a in v]
    if len(v) == 1:
        return v * nd
    if len(v) == nd + 2:
        return v[2:] if cf else v[1:-1]
    return v


def _pads(sizes, ksize, strides, dilations, padding, cf):
    """[(pad_before, out_size)] per spatial dim, from TF's documented formulas."""
    res = []
    nd = len(sizes)
    if not isinstance(padding, str):
        pp = [list(p) for p in padding]
        if len(pp) == nd + 2:
            pp = pp[2:] if cf else pp[1:-1]
    for i, (n, k, s, d) in enumerate(zip(sizes, ksize, strides, dilations)):
        eff = (k - 1) * d + 1
        if isinstance(padding, str) and padding.upper() == "SAME":
            out = int(np.ceil(n / s))
            before = max((out - 1) * s + eff - n, 0) // 2
        elif isinstance(padding, str):
            out, before = (n - eff) // s + 1, 0
        else:
            before = pp[i][0]
            out = (n + pp[i][0] + pp[i][1] - eff) // s + 1
        res.append((before, out))
    return res


def _last(x, cf):
    return np.moveaxis(x, 1, -1) if cf else x


def _first(y, cf):
    return np.moveaxis(y, -1, 1) if cf else y


def _cf(data_format, nd):
    return data_format is not None and data_format.upper().startswith("NC")


# ---- references: convolution ----------------------------------------------------------------------
def ref_conv(x, f, strides=1, padding="VALID", data_format=None, dilations=None):
    nd = f.ndim - 2
    cf = _cf(data_format, nd)
    xl = _last(_f64(x), cf)
    ff = _f64(f)
    n, sizes, c = xl.shape[0], xl.shape[1:-1], xl.shape[-1]
    ksize, cg, o = ff.shape[:nd], ff.shape[-2], ff.shape[-1]
    groups = c // cg
    og = o // groups
    st, dl = _ints(strides, nd, cf), _ints(dilations, nd, cf)
    geo = _pads(sizes, ksize, st, dl, padding, cf)
    out = np.zeros((n,) + tuple(g[1] for g in geo) + (o,))
    for opos in np.ndindex(*[g[1] for g in geo]):
        acc = np.zeros((n, o))
        for kpos in np.ndindex(*ksize):
            ipos = [op * s - g[0] + kp * d for op, s, g, kp, d in zip(opos, st, geo, kpos, dl)]
            if all(0 <= ip < sz for ip, sz in zip(ipos, sizes)):
                xv = xl[(slice(None),) + tuple(ipos)]
                for gi in range(groups):
                    acc[:, gi * og:(gi + 1) * og] += xv[:, gi * cg:(gi + 1) * cg] @ ff[kpos][:, gi * og:(gi + 1) * og]
        out[(slice(None),) + opos] = acc
    return _back(_first(out, cf), x)


def ref_conv_transpose(dy, f, output_shape, strides=1, padding="SAME", data_format=None, dilations=None):
    """Scatter form: every output position of the forward convolution adds f @ dy into its window."""
    nd = f.ndim - 2
    cf = _cf(data_format, nd)
    dyl = _last(_f64(dy), cf)
    ff = _f64(f)
    shp = list(output_shape)
    if cf:
        shp = [shp[0]] + shp[2:] + [shp[1]]
    sizes = shp[1:-1]
    st, dl = _ints(strides, nd, cf), _ints(dilations, nd, cf)
    geo = _pads(sizes, ff.shape[:nd], st, dl, padding, cf)
    dx = np.zeros(shp)
    for opos in np.ndindex(*dyl.shape[1:-1]):
        for kpos in np.ndindex(*ff.shape[:nd]):
            ipos = [op * s - g[0] + kp * d for op, s, g, kp, d in zip(opos, st, geo, kpos, dl)]
            if all(0 <= ip < sz for ip, sz in zip(ipos, sizes)):
                dx[(slice(None),) + tuple(ipos)] += dyl[(slice(None),) + opos] @ ff[kpos].T
    return _back(_first(dx, cf), dy)


def ref_conv_backprop_filter(x, filter_sizes, dy, strides=1, padding="VALID", data_format=None, dilations=None):
    nd = len(filter_sizes) - 2
    cf = _cf(data_format, nd)
    xl, dyl = _last(_f64(x), cf), _last(_f64(dy), cf)
    sizes = xl.shape[1:-1]
    st, dl = _ints(strides, nd, cf), _ints(dilations, nd, cf)
    geo = _pads(sizes, filter_sizes[:nd], st, dl, padding, cf)
    df = np.zeros(filter_sizes)
    for opos in np.ndindex(*dyl.shape[1:-1]):
        for kpos in np.ndindex(*filter_sizes[:nd]):
            ipos = [op * s - g[0] + kp * d for op, s, g, kp, d in zip(opos, st, geo, kpos, dl)]
            if all(0 <= ip < sz for ip, sz in zip(ipos, sizes)):
                df[kpos] += xl[(slice(None),) + tuple(ipos)].T @ dyl[(slice(None),) + opos]
    return _back(df, x)


def ref_depthwise(x, f, strides, padding, data_format=None, dilations=None):
    cf = _cf(data_format, 2)
    xl = _last(_f64(x), cf)
    ff = _f64(f)
    n, (h, w), c = xl.shape[0], xl.shape[1:3], xl.shape[3]
    kh, kw, _, mult = ff.shape
    st, dl = _ints(strides, 2, cf), _ints(dilations, 2, cf)
    geo = _pads((h, w), (kh, kw), st, dl, padding, cf)
    out = np.zeros((n, geo[0][1], geo[1][1], c * mult))
    for oh in range(geo[0][1]):
        for ow in range(geo[1][1]):
            for i in range(kh):
                for j in range(kw):
                    ih, iw = oh * st[0] - geo[0][0] + i * dl[0], ow * st[1] - geo[1][0] + j * dl[1]
                    if 0 <= ih < h and 0 <= iw < w:
                        for ch in range(c):
                            out[:, oh, ow, ch * mult:(ch + 1) * mult] += xl[:, ih, iw, ch:ch + 1] * ff[i, j, ch]
    return _back(_first(out, cf), x)


# ---- references: pooling ----------------------------------------------------------------------------
def ref_pool(kind, nd=None, default_format=None):
    def ref(x, ksize, strides, padding, data_format=default_format):
        d = nd or x.ndim - 2
        cf = _cf(data_format, d)
        xl = _last(_f64(x), cf)
        sizes = xl.shape[1:-1]
        ks, st = _ints(ksize, d, cf), _ints(strides, d, cf)
        geo = _pads(sizes, ks, st, [1] * d, padding, cf)
        out = np.zeros((xl.shape[0],) + tuple(g[1] for g in geo) + (xl.shape[-1],))
        for opos in np.ndindex(*[g[1] for g in geo]):
            vals = []
            for kpos in np.ndindex(*ks):
                ipos = [op * s - g[0] + kp for op, s, g, kp in zip(opos, st, geo, kpos)]
                if all(0 <= ip < sz for ip, sz in zip(ipos, sizes)):
                    vals.append(xl[(slice(None),) + tuple(ipos)])
            out[(slice(None),) + opos] = np.max(vals, axis=0) if kind == "max" else np.mean(vals, axis=0)
        return _back(_first(out, cf), x)
    return ref


# ---- samples ------------------------------------------------------------------------------------
def _conv2d_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -1, 1)  # noqa: E731
    return [
        Sample((a(2, 5, 5, 3), a(3, 3, 3, 4)), {"strides": 1, "padding": "SAME"}, "same"),
        Sample((a(1, 7, 6, 2), a(3, 2, 2, 3)), {"strides": 2, "padding": "VALID"}, "valid_stride2_batch1"),
        Sample((a(1, 7, 7, 2), a(2, 3, 2, 2)), {"strides": 1, "padding": "SAME", "dilations": 2}, "dilation2"),
        Sample((a(1, 6, 7, 2), a(2, 2, 2, 2)), {"strides": 2, "padding": "SAME", "dilations": [1, 2]},
               "stride2_dilation2"),
        Sample((a(2, 3, 6, 5), a(3, 3, 3, 2)), {"strides": [1, 1, 2, 2], "padding": "VALID",
                                                "data_format": "NCHW"}, "nchw"),
        Sample((a(1, 2, 5, 4), a(2, 3, 2, 3)), {"strides": [1, 2], "padding": "SAME", "data_format": "NCHW"},
               "nchw_same"),
        Sample((a(1, 4, 5, 2), a(2, 2, 2, 3)), {"strides": [1, 2], "padding": [[0, 0], [1, 0], [2, 1], [0, 0]]},
               "explicit_padding"),
        Sample((a(1, 4, 4, 4), a(2, 2, 2, 4)), {"strides": 1, "padding": "VALID"}, "grouped"),
        Sample((noncontig(a(1, 5, 4, 2)), a(3, 3, 2, 2)), {"strides": 2, "padding": "SAME"}, "noncontig"),
    ]


def _conv1d_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -1, 1)  # noqa: E731
    return [Sample((a(2, 7, 3), a(3, 3, 2)), {"stride": 1, "padding": "SAME"}, "same"),
            Sample((a(1, 8, 2), a(2, 2, 3)), {"stride": 2, "padding": "VALID", "dilations": 2}, "s2_d2"),
            Sample((a(2, 3, 6), a(3, 3, 2)), {"stride": 2, "padding": "SAME", "data_format": "NCW"}, "ncw"),
            Sample((noncontig(a(1, 5, 2)), a(2, 2, 2)), {"stride": 1, "padding": [[1, 2]]}, "noncontig_explicit")]


def _conv3d_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -1, 1)  # noqa: E731
    return [Sample((a(1, 3, 4, 3, 2), a(2, 2, 2, 2, 2)), {"strides": 1, "padding": "SAME"}, "same"),
            Sample((a(1, 2, 4, 4, 3), a(2, 3, 2, 2, 2)), {"strides": [1, 1, 2, 1, 1], "padding": "VALID",
                                                          "data_format": "NCDHW"}, "ncdhw")]


def _convolution_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -1, 1)  # noqa: E731
    return [Sample((a(1, 6, 2), a(3, 2, 2)), {"padding": "VALID"}, "1d"),
            Sample((a(1, 5, 5, 2), a(2, 2, 2, 3)), {"strides": 2, "padding": "SAME", "dilations": 1}, "2d")]


def _transpose_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -1, 1)  # noqa: E731
    return [
        Sample((a(2, 3, 3, 4), a(3, 3, 2, 4)), {"output_shape": [2, 5, 6, 2], "strides": 2, "padding": "SAME"},
               "same_s2"),
        Sample((a(1, 3, 2, 3), a(2, 3, 2, 3)), {"output_shape": [1, 7, 6, 2], "strides": [2, 2],
                                                "padding": "VALID"}, "valid_s2_odd"),
        Sample((a(1, 3, 5, 5), a(2, 2, 2, 3)), {"output_shape": [1, 2, 5, 5], "strides": 1, "padding": "SAME",
                                                "data_format": "NCHW", "dilations": 2}, "nchw_dilation2"),
    ]


def _backprop_filter_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -1, 1)  # noqa: E731
    return [
        Sample((a(2, 5, 5, 3), [3, 3, 3, 2], a(2, 3, 3, 2)), {"strides": 2, "padding": "SAME"}, "same_s2"),
        Sample((a(1, 2, 6, 5), [2, 3, 2, 3], a(1, 3, 5, 3)), {"strides": 1, "padding": "VALID",
                                                              "data_format": "NCHW"}, "nchw"),
        Sample((a(1, 6, 6, 2), [2, 2, 2, 2], a(1, 6, 6, 2)), {"strides": 1, "padding": "SAME", "dilations": 2},
               "dilation2"),
    ]


def _depthwise_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -1, 1)  # noqa: E731
    return [Sample((a(2, 5, 5, 3), a(3, 3, 3, 2)), {"strides": [1, 1, 1, 1], "padding": "SAME"}, "same"),
            Sample((a(1, 7, 6, 2), a(3, 2, 2, 1)), {"strides": [1, 2, 2, 1], "padding": "VALID"}, "valid_s2"),
            Sample((a(1, 2, 6, 6), a(2, 2, 2, 2)), {"strides": [1, 1, 1, 1], "padding": "SAME",
                                                    "data_format": "NCHW", "dilations": [2, 2]}, "nchw_d2"),
            Sample((noncontig(a(1, 5, 4, 2)), a(2, 2, 2, 1)), {"strides": 1, "padding": "VALID"}, "noncontig")]


def _distinct(rng, shape, dtype):
    """Distinct values 0.05 apart: no ties in a max-pool window, so gradients are smooth."""
    n = int(np.prod(shape))
    return ((rng.permutation(n) - n / 2) * 0.05).reshape(shape).astype(dtype)


def _pool2d_samples(dtype, rng):
    a = lambda *s: _distinct(rng, s, dtype)  # noqa: E731
    return [Sample((a(2, 4, 4, 3), 2, 2, "VALID"), name="k2s2_valid"),
            Sample((a(1, 5, 6, 2), 3, 2, "SAME"), name="k3s2_same_odd"),
            Sample((a(1, 5, 5, 2), [1, 3, 2, 1], [1, 1, 2, 1], "SAME"), name="overlap_list"),
            Sample((a(1, 2, 5, 5), 2, 1, "VALID"), {"data_format": "NCHW"}, name="nchw"),
            Sample((a(1, 2, 5, 4), [3, 2], [2, 2], "SAME"), {"data_format": "NCHW"}, name="nchw_same"),
            Sample((noncontig(a(1, 4, 5, 2)), 2, 2, "SAME"), name="noncontig")]


def _pool1d_samples(dtype, rng):
    a = lambda *s: _distinct(rng, s, dtype)  # noqa: E731
    return [Sample((a(2, 7, 3), 3, 2, "SAME"), name="same"),
            Sample((a(1, 6, 2), 2, 2, "VALID"), name="valid"),
            Sample((a(1, 2, 7), [3], [1], "SAME"), {"data_format": "NCW"}, name="ncw")]


def _pool_generic_samples(dtype, rng):
    a = lambda *s: _distinct(rng, s, dtype)  # noqa: E731
    return [Sample((a(1, 5, 2), 2, 2, "SAME"), name="1d"),
            Sample((a(1, 4, 5, 2), [2, 2], [1, 2], "VALID"), name="2d"),
            Sample((a(1, 3, 4, 3, 2), 2, 2, "SAME"), name="3d")]


def _softmax_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -3, 3)  # noqa: E731
    return [Sample((a(3, 4),), name="matrix"), Sample((a(2, 3, 4), 1), name="axis1"),
            Sample((a(4, 2), 0), name="axis0"), Sample((a(5),), name="vector"),
            Sample((a(0, 3),), name="empty"), Sample((noncontig(a(2, 5)),), name="noncontig"),
            Sample((np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1002.0, -1001.0]], dtype),), name="large")]


def _xent_samples(dtype, rng):
    def dist(*s):
        return scipy.special.softmax(rng.uniform(-2, 2, s), axis=-1).astype(dtype)
    a = lambda *s: arr(rng, s, dtype, -3, 3)  # noqa: E731
    return [Sample((dist(3, 4), a(3, 4)), name="matrix"),
            # contiguous: test_op_table's finite differences assume C-ordered copies of the args
            Sample((np.ascontiguousarray(np.moveaxis(dist(2, 5, 3), -1, 1)), a(2, 3, 5)), {"axis": 1}, name="axis1"),
            Sample((dist(4), a(4)), name="vector"),
            Sample((noncontig(dist(2, 5)), a(2, 5)), name="noncontig"),
            Sample((np.eye(3, dtype=dtype), np.array([[100.0, -100.0, 0.0]] * 3, dtype)), name="large")]


def _sparse_xent_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -3, 3)  # noqa: E731
    return [Sample((rng.integers(0, 4, (3,)).astype(np.int32), a(3, 4)), name="matrix"),
            Sample((rng.integers(0, 3, (2, 2)).astype(np.int64), a(2, 2, 3)), name="rank3_int64"),
            Sample((np.array([0, 2], np.int32), np.array([[100.0, -100.0, 0.0]] * 2, dtype)), name="large"),
            Sample((np.zeros((0,), np.int32), a(0, 4)), name="empty")]


def _sigmoid_xent_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -3, 3)  # noqa: E731
    z = lambda *s: rng.uniform(0, 1, s).astype(dtype)  # noqa: E731
    return [Sample((z(3, 4), a(3, 4)), name="matrix"),
            Sample((z(5), np.array([0.0, -50.0, 50.0, 0.0, 1.0], dtype)), name="zero_and_large"),
            Sample((z(2, 3), noncontig(a(2, 3))), name="noncontig")]


def _weighted_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -3, 3)  # noqa: E731
    z = lambda *s: rng.uniform(0, 1, s).astype(dtype)  # noqa: E731
    return [Sample((z(3, 4), a(3, 4), 2.5), name="matrix"),
            Sample((z(4), np.array([0.0, -40.0, 40.0, 0.5], dtype), 0.5), name="zero_and_large")]


def _bias_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -2, 2)  # noqa: E731
    return [Sample((a(3, 4), a(4)), name="rank2"), Sample((a(2, 3, 3, 4), a(4)), name="nhwc"),
            Sample((a(2, 3, 2, 2), a(3)), {"data_format": "NCHW"}, name="nchw"),
            Sample((a(1, 2, 5), a(2)), {"data_format": "NCW"}, name="ncw"),
            Sample((noncontig(a(2, 3)), a(3)), name="noncontig")]


def _bn_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -2, 2)  # noqa: E731
    pos = lambda *s: arr(rng, s, dtype, 0.5, 2)  # noqa: E731
    return [Sample((a(4, 3), a(3), pos(3), a(3), pos(3)), {"variance_epsilon": 1e-3}, name="matrix"),
            Sample((a(2, 2, 2, 3), a(3), pos(3), None, None), {"variance_epsilon": 0.01}, name="no_offset_scale"),
            Sample((noncontig(a(2, 3)), a(3), pos(3), a(3), pos(3)), {"variance_epsilon": 1e-3}, name="noncontig")]


def _fbn_samples(dtype, rng):
    stat = np.float32 if dtype in (np.float16, tw.bfloat16.np_dtype) else dtype
    a = lambda *s: arr(rng, s, dtype, -2, 2)  # noqa: E731
    v = lambda *s: arr(rng, s, stat, 0.5, 2)  # noqa: E731
    return [Sample((a(2, 3, 3, 2), v(2), v(2)), {"epsilon": 1e-3}, name="train_nhwc"),
            Sample((a(2, 3, 2, 3), v(3), v(3)), {"data_format": "NCHW", "epsilon": 1e-2}, name="train_nchw"),
            Sample((a(1, 2, 2, 2), v(2), v(2), v(2), v(2)), {"is_training": False}, name="inference"),
            Sample((a(2, 2, 2, 2), v(2), v(2), v(2), v(2)), {"exponential_avg_factor": 0.3}, name="running_avg")]


def ref_fbn(x, scale, offset, mean=None, variance=None, epsilon=0.001, data_format="NHWC", is_training=True,
            exponential_avg_factor=1.0):
    cf = data_format == "NCHW"
    xl = _last(_f64(x), cf)
    if is_training:
        bm = xl.reshape(-1, xl.shape[-1]).mean(0)
        bv = xl.reshape(-1, xl.shape[-1]).var(0)
        y = (xl - bm) / np.sqrt(bv + epsilon) * _f64(scale) + _f64(offset)
        n = xl.size // xl.shape[-1]
        rm, rv = bm, bv * n / (n - 1)
        if exponential_avg_factor != 1.0:
            f = exponential_avg_factor
            rm, rv = (1 - f) * _f64(mean) + f * rm, (1 - f) * _f64(variance) + f * rv
    else:
        y = (xl - _f64(mean)) / np.sqrt(_f64(variance) + epsilon) * _f64(scale) + _f64(offset)
        rm, rv = _f64(mean), _f64(variance)
    return _back(_first(y, cf), x), _back(rm, scale), _back(rv, scale)


def ref_bn(x, mean, variance, offset, scale, variance_epsilon):
    y = (_f64(x) - _f64(mean)) / np.sqrt(_f64(variance) + variance_epsilon)
    if scale is not None:
        y = y * _f64(scale)
    if offset is not None:
        y = y + _f64(offset)
    return _back(y, x)


def ref_bias_add(x, b, data_format=None):
    shape = [1] * x.ndim
    axis = 1 if data_format and data_format.startswith("NC") else x.ndim - 1
    shape[axis] = -1
    return _back(_f64(x) + _f64(b).reshape(shape), x)


def _embedding_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -2, 2)  # noqa: E731
    return [Sample((a(5, 3), np.array([4, 0, 4, 2], np.int32)), name="vector_ids"),
            Sample((a(4, 2, 2), np.array([[1, 3], [3, 3]], np.int64)), name="matrix_ids"),
            Sample((noncontig(a(3, 4)), np.array([2], np.int32)), name="noncontig")]


def _shard_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -2, 2)  # noqa: E731
    return [Sample((a(3, 2), a(2, 2), np.array([0, 1, 2, 3, 4, 3], np.int32)), name="uneven"),
            Sample((a(2, 3), a(2, 3), np.array([[3, 0], [1, 2]], np.int32)), name="even")]


def ref_shards(strategy):
    def ref(p0, p1, ids):
        if strategy == "div":
            full = np.concatenate([p0, p1])
        else:
            n = len(p0) + len(p1)
            full = np.stack([(p0, p1)[i % 2][i // 2] for i in range(n)])
        return full[ids]
    return ref


def ref_max_norm(p, ids, max_norm):
    e = _f64(p)[ids]
    emb_axes = tuple(range(ids.ndim, e.ndim))  # each looked-up embedding is clipped as a whole
    norm = np.sqrt(np.sum(e * e, axis=emb_axes, keepdims=True))
    return _back(e * np.minimum(1, max_norm / norm), p)


def _poisson_samples(dtype, rng):
    z = np.array([0.0, 0.5, 2.0, 3.5, 7.0, 4.0], dtype)
    c = arr(rng, (6,), dtype, -1, 2)
    return [Sample((z, c), name="partial"), Sample((z, c), {"compute_full_loss": True}, name="full")]


def ref_poisson(z, c, compute_full_loss=False):
    z, c64 = _f64(z), _f64(c)
    out = np.exp(c64) - z * c64
    if compute_full_loss:
        zs = np.where(z <= 1, 1.0, z)
        out = out + np.where(z <= 1, 0.0, zs * np.log(zs) - zs + 0.5 * np.log(2 * np.pi * zs))
    return _back(out, c)


def _l2n_samples(dtype, rng):
    a = lambda *s: arr(rng, s, dtype, -2, 2)  # noqa: E731
    return [Sample((a(3, 4),), {"axis": 1}, name="axis1"), Sample((a(3, 4),), name="all"),
            Sample((a(2, 3, 2),), {"axis": [0, 2]}, name="axes"), Sample((noncontig(a(2, 3)), 0), name="noncontig")]


def ref_l2n(x, axis=None, epsilon=1e-12):
    xf = _f64(x)
    ax = tuple(axis) if isinstance(axis, list) else axis
    return _back(xf / np.sqrt(np.maximum(np.sum(xf * xf, axis=ax, keepdims=True), epsilon)), x)


def _same_dtype(fn):
    return lambda x, *a, **k: _back(fn(_f64(x), *a, **k), x)


def _pair(fn):
    return lambda y, x, *a, **k: _back(fn(_f64(y), _f64(x), *a, **k), x)


def _softplus(x):
    return np.logaddexp(0, x)


OPS = [
    # softmax family
    OpInfo("nn.softmax", tw.nn.softmax, _same_dtype(lambda x, axis=-1: scipy.special.softmax(x, axis=axis)),
           FLOATS, _softmax_samples, grad_order=2),
    OpInfo("nn.log_softmax", tw.nn.log_softmax,
           _same_dtype(lambda x, axis=-1: scipy.special.log_softmax(x, axis=axis)), FLOATS, _softmax_samples,
           grad_order=2, tol={tw.float16: (1e-2, 2e-2), tw.bfloat16: (5e-2, 1e-1)}),
    OpInfo("nn.softmax_cross_entropy_with_logits", tw.nn.softmax_cross_entropy_with_logits,
           _pair(lambda y, x, axis=-1: -np.sum(y * scipy.special.log_softmax(x, axis=axis), axis=axis)),
           FLOATS, _xent_samples, grad_order=2, tol={tw.float16: (1e-2, 3e-2), tw.bfloat16: (5e-2, 2e-1)}),
    OpInfo("nn.sparse_softmax_cross_entropy_with_logits",
           lambda y, x: tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x),
           lambda y, x: _back(-np.take_along_axis(scipy.special.log_softmax(_f64(x), -1), y[..., None], -1)[..., 0],
                              x),
           FLOATS, _sparse_xent_samples, grad_order=2, tol={tw.float16: (1e-2, 3e-2), tw.bfloat16: (5e-2, 2e-1)}),
    OpInfo("nn.sigmoid_cross_entropy_with_logits",
           lambda z, x: tw.nn.sigmoid_cross_entropy_with_logits(labels=z, logits=x),
           _pair(lambda z, x: _softplus(x) - x * z), FLOATS, _sigmoid_xent_samples, grad_order=2,
           tol={tw.float16: (1e-2, 3e-2), tw.bfloat16: (5e-2, 2e-1)}),
    OpInfo("nn.weighted_cross_entropy_with_logits", tw.nn.weighted_cross_entropy_with_logits,
           _pair(lambda z, x, q: (1 - z) * x + (1 + (q - 1) * z) * _softplus(-x)), FLOATS, _weighted_samples,
           grad_order=2, tol={tw.float16: (1e-2, 3e-2), tw.bfloat16: (5e-2, 2e-1)}),
    OpInfo("nn.log_poisson_loss", tw.nn.log_poisson_loss, ref_poisson, FLOATS, _poisson_samples, grad_order=2,
           grad_args=(1,), tol={tw.float16: (1e-2, 3e-2), tw.bfloat16: (5e-2, 2e-1)}),
    OpInfo("nn.l2_loss", tw.nn.l2_loss, _same_dtype(lambda x: np.sum(x * x) / 2), FLOATS,
           lambda d, r: [Sample((arr(r, (3, 4), d),)), Sample((noncontig(arr(r, (2, 3), d)),), name="noncontig")],
           grad_order=2, tol={tw.float16: (1e-2, 3e-2), tw.bfloat16: (5e-2, 2e-1)}),
    OpInfo("nn.l2_normalize", tw.nn.l2_normalize, ref_l2n, FLOATS, _l2n_samples, grad_order=2),
    OpInfo("nn.bias_add", tw.nn.bias_add, ref_bias_add, FLOATS + (tw.int32,), _bias_samples, grad_order=2),
    # convolution
    OpInfo("nn.conv2d", tw.nn.conv2d, ref_conv, FLOATS, _conv2d_samples, grad_order=2, tol=CONV_TOL),
    OpInfo("nn.conv1d", tw.nn.conv1d,
           lambda x, f, stride, padding, data_format=None, dilations=None:
           ref_conv(x, f, stride, padding, data_format, dilations),
           FLOATS, _conv1d_samples, grad_order=2, tol=CONV_TOL),
    OpInfo("nn.conv3d", tw.nn.conv3d, ref_conv, F32_64, _conv3d_samples, tol=CONV_TOL),
    OpInfo("nn.convolution", tw.nn.convolution, ref_conv, F32_64, _convolution_samples, tol=CONV_TOL),
    OpInfo("nn.conv2d_transpose", tw.nn.conv2d_transpose, ref_conv_transpose, FLOATS, _transpose_samples,
           grad_order=2, tol=CONV_TOL),
    OpInfo("nn.conv2d_backprop_filter", tw.nn.conv2d_backprop_filter, ref_conv_backprop_filter, FLOATS,
           _backprop_filter_samples, grad_order=2, tol=CONV_TOL),
    OpInfo("nn.depthwise_conv2d", tw.nn.depthwise_conv2d, ref_depthwise, FLOATS, _depthwise_samples,
           grad_order=2, tol=CONV_TOL),
    # pooling
    OpInfo("nn.max_pool2d", tw.nn.max_pool2d, ref_pool("max", 2), FLOATS, _pool2d_samples, grad_order=2),
    OpInfo("nn.avg_pool2d", tw.nn.avg_pool2d, ref_pool("avg", 2), FLOATS, _pool2d_samples, grad_order=2,
           tol=CONV_TOL),
    OpInfo("nn.max_pool1d", tw.nn.max_pool1d, ref_pool("max", 1), FLOATS, _pool1d_samples),
    OpInfo("nn.avg_pool1d", tw.nn.avg_pool1d, ref_pool("avg", 1), FLOATS, _pool1d_samples, tol=CONV_TOL),
    OpInfo("nn.max_pool", tw.nn.max_pool, ref_pool("max"), F32_64 + (tw.int32,), _pool_generic_samples),
    OpInfo("nn.avg_pool", tw.nn.avg_pool, ref_pool("avg"), F32_64, _pool_generic_samples),
    # normalization
    OpInfo("nn.batch_normalization", tw.nn.batch_normalization, ref_bn, FLOATS, _bn_samples, grad_order=2,
           tol={tw.float16: (2e-2, 3e-2), tw.bfloat16: (5e-2, 2e-1)}),
    OpInfo("nn.fused_batch_norm", tw.nn.fused_batch_norm, ref_fbn, FLOATS, _fbn_samples, grad_order=2,
           tol={tw.float32: (1e-5, 1e-5), tw.float16: (1e-2, 2e-2), tw.bfloat16: (5e-2, 1e-1)}),
    # embeddings
    OpInfo("nn.embedding_lookup", tw.nn.embedding_lookup, lambda p, ids: p[ids], FLOATS, _embedding_samples),
    OpInfo("nn.embedding_lookup_div", lambda p0, p1, ids: tw.nn.embedding_lookup([p0, p1], ids),
           ref_shards("div"), F32_64, _shard_samples),
    OpInfo("nn.embedding_lookup_mod",
           lambda p0, p1, ids: tw.nn.embedding_lookup([p0, p1], ids, partition_strategy="mod"),
           ref_shards("mod"), F32_64, _shard_samples),
    OpInfo("nn.embedding_lookup_max_norm", lambda p, ids: tw.nn.embedding_lookup(p, ids, max_norm=1.5),
           lambda p, ids: ref_max_norm(p, ids, 1.5), F32_64, _embedding_samples, grad_order=2),
]
