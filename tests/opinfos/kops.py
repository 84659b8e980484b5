"""OpInfos for the TF2/Keras names of issue 16's second ops pass (keras.activations, tf.nn,
tf.linalg and top-level tf names); each reference is written from the op's definition in NumPy."""
import numpy as np
import scipy.special as scipy_special

import tensorweave as tw
from tensorweave.keras import activations
from opinfo import FLOATS, OpInfo, Sample, arr, as_bf16_safe, away_from, unary_samples
from opinfos.nn import ref_conv_transpose

HALF_TOL = {tw.float16: (2e-2, 2e-2), tw.bfloat16: (5e-2, 5e-2)}


def _same(fn):
    return as_bf16_safe(lambda *a, **k: np.asarray(fn(*a, **k)).astype(np.asarray(a[0]).dtype))


def _mish(x):
    x = x.astype(np.float64)
    return x * np.tanh(np.logaddexp(0.0, x))


OPS = [
    OpInfo("keras.activations.mish", activations.mish, _same(_mish), FLOATS, unary_samples(-4, 4), grad_order=2,
           tol=HALF_TOL),
]


# ---- tf.nn ----------------------------------------------------------------------------------------
F = (tw.float32, tw.float64)


def _f64(a):
    return np.asarray(a, np.float64)


def _crelu(x, axis=-1):
    return np.concatenate([np.maximum(x, 0), np.maximum(-x, 0)], axis=axis).astype(x.dtype)


def _crelu_samples(d, r):
    a = away_from(arr(r, (3, 4), d), [0.0])
    return [Sample((a,), name="matrix"), Sample((a,), {"axis": 0}, name="axis0"),
            Sample((away_from(arr(r, (2, 0, 3), d), [0.0]),), name="empty")]


def _d2s(x, block_size, data_format="NHWC"):
    n, h, w, c = x.shape
    b = block_size
    out = np.zeros((n, h * b, w * b, c // (b * b)), x.dtype)
    for i, j, k in np.ndindex(b, b, c // (b * b)):
        out[:, i::b, j::b, k] = x[:, :, :, (i * b + j) * (c // (b * b)) + k]
    return out


def _s2d(x, block_size, data_format="NHWC"):
    n, h, w, c = x.shape
    b = block_size
    out = np.zeros((n, h // b, w // b, c * b * b), x.dtype)
    for i, j, k in np.ndindex(b, b, c):
        out[:, :, :, (i * b + j) * c + k] = x[:, i::b, j::b, k]
    return out


def _s2b(x, block_shape, paddings):
    """out[(i * bw + j) * n + b, y, x] = padded[b, y * bh + i, x * bw + j] (any number of block dims)."""
    m = len(block_shape)
    xp = np.pad(x, [(0, 0)] + [tuple(p) for p in paddings] + [(0, 0)] * (x.ndim - 1 - m))
    n = x.shape[0]
    outs = []
    for offs in np.ndindex(*block_shape):
        idx = (slice(None),) + tuple(slice(o, None, b) for o, b in zip(offs, block_shape))
        outs.append(xp[idx])
    return np.concatenate(outs, 0).reshape((n * int(np.prod(block_shape)),) + outs[0].shape[1:])


def _b2s(x, block_shape, crops):
    m = len(block_shape)
    prod = int(np.prod(block_shape))
    n = x.shape[0] // prod
    spatial = [x.shape[1 + i] * block_shape[i] for i in range(m)]
    out = np.zeros((n,) + tuple(spatial) + x.shape[1 + m:], x.dtype)
    for k, offs in enumerate(np.ndindex(*block_shape)):
        idx = (slice(None),) + tuple(slice(o, None, b) for o, b in zip(offs, block_shape))
        out[idx] = x[k * n:(k + 1) * n]
    crop = (slice(None),) + tuple(slice(c[0], s - c[1]) for c, s in zip(crops, spatial))
    return out[crop]


def _s2b_samples(d, r):
    return [Sample((arr(r, (2, 5, 6, 3), d), [2, 3], [[1, 0], [0, 0]]), name="2d"),
            Sample((arr(r, (2, 6, 2), d), [3], [[1, 2]]), name="1d")]


def _b2s_samples(d, r):
    return [Sample((arr(r, (12, 2, 2, 1), d), [2, 3], [[1, 0], [0, 2]]), name="2d"),
            Sample((arr(r, (6, 3, 2), d), [3], [[1, 2]]), name="1d")]


def _lrn(x, depth_radius=5, bias=1.0, alpha=1.0, beta=0.5):
    x64 = _f64(x)
    out = np.zeros_like(x64)
    d = x.shape[-1]
    for k in range(d):
        lo, hi = max(0, k - depth_radius), min(d, k + depth_radius + 1)
        out[..., k] = x64[..., k] / (bias + alpha * np.sum(x64[..., lo:hi] ** 2, -1)) ** beta
    return out.astype(x.dtype)


def _lrn_samples(d, r):
    return [Sample((arr(r, (2, 2, 3, 7), d),), {"depth_radius": 2, "bias": 1.5, "alpha": 0.3, "beta": 0.75},
                   name="radius2"),
            Sample((arr(r, (1, 2, 2, 4), d),), name="defaults")]


def _window_max(x, kh, kw, sh, sw, rh, rw, padding, add=None):
    """Max over each (dilated) window of NHWC ``x`` (plus ``add[i, j]``), padding never chosen; also the
    flat argmax index (y * w + x) * c + ch of the first maximum."""
    n, h, w, c = x.shape
    if padding == "SAME":
        oh, ow = -(-h // sh), -(-w // sw)
        top = max((oh - 1) * sh + (kh - 1) * rh + 1 - h, 0) // 2
        left = max((ow - 1) * sw + (kw - 1) * rw + 1 - w, 0) // 2
    else:
        oh, ow = (h - (kh - 1) * rh - 1) // sh + 1, (w - (kw - 1) * rw - 1) // sw + 1
        top = left = 0
    out = np.full((n, oh, ow, c), -np.inf)
    arg = np.zeros((n, oh, ow, c), np.int64)
    for b, y, xx, ch in np.ndindex(n, oh, ow, c):
        for i, j in np.ndindex(kh, kw):
            yy, xj = y * sh + i * rh - top, xx * sw + j * rw - left
            if 0 <= yy < h and 0 <= xj < w:
                v = float(x[b, yy, xj, ch]) + (0.0 if add is None else float(add[i, j, ch]))
                if v > out[b, y, xx, ch]:
                    out[b, y, xx, ch], arg[b, y, xx, ch] = v, (yy * w + xj) * c + ch
    return out, arg


def _mpwa(x, ksize, strides, padding, include_batch_in_index=False):
    k, s = (ksize, ksize) if np.isscalar(ksize) else ksize, (strides, strides) if np.isscalar(strides) else strides
    out, arg = _window_max(_f64(x), k[0], k[1], s[0], s[1], 1, 1, padding)
    if include_batch_in_index:
        arg = arg + np.arange(x.shape[0]).reshape(-1, 1, 1, 1) * int(np.prod(x.shape[1:]))
    return out.astype(x.dtype), arg


def _mpwa_samples(d, r):
    return [Sample((arr(r, (2, 5, 6, 3), d), 2, 2, "VALID"), name="valid"),
            Sample((arr(r, (1, 5, 5, 2), d), [3, 3], [2, 2], "SAME"), name="same"),
            Sample((arr(r, (2, 3, 4, 1), d), [2, 2], [1, 2], "SAME"), {"include_batch_in_index": True},
                   name="batch_index")]


def _dilation(x, filters, strides, padding, data_format="NHWC", dilations=None):
    s = strides[1:3]
    rt = (1, 1) if dilations is None else dilations[1:3]
    kh, kw, _ = filters.shape
    out, _ = _window_max(_f64(x), kh, kw, s[0], s[1], rt[0], rt[1], padding, add=_f64(filters))
    return out.astype(x.dtype)


def _erosion(x, filters, strides, padding, data_format="NHWC", dilations=None):
    return (-_dilation(-_f64(x), _f64(filters)[::-1, ::-1], strides, padding, data_format, dilations)).astype(x.dtype)


def _morph_samples(d, r):
    return [Sample((arr(r, (2, 5, 6, 2), d), arr(r, (2, 3, 2), d), [1, 1, 1, 1], "SAME", "NHWC", [1, 1, 1, 1]),
                   name="same"),
            Sample((arr(r, (1, 6, 6, 1), d), arr(r, (2, 2, 1), d), [1, 2, 1, 1], "VALID", "NHWC", [1, 2, 2, 1]),
                   name="strided_dilated")]


def _weighted_moments(x, axes, w, keepdims=False):
    x64, w64 = _f64(x), np.broadcast_to(_f64(w), x.shape)
    ws = w64.sum(tuple(axes), keepdims=True)
    mean = (w64 * x64).sum(tuple(axes), keepdims=True) / ws
    var = (w64 * (x64 - mean) ** 2).sum(tuple(axes), keepdims=True) / ws
    if not keepdims:
        mean, var = mean.squeeze(tuple(axes)), var.squeeze(tuple(axes))
    return mean.astype(x.dtype), var.astype(x.dtype)


def _wm_samples(d, r):
    return [Sample((arr(r, (3, 4), d), [1], arr(r, (3, 1), d, 0.5, 2)), name="rows"),
            Sample((arr(r, (2, 3), d), [0, 1], arr(r, (3,), d, 0.5, 2)), {"keepdims": True}, name="all")]


def _moments_via_ss(x, axes, shift=None):
    c, m, v, s = tw.nn.sufficient_statistics(x, axes, shift)
    return tw.nn.normalize_moments(c, m, v, s)


def _moments_ref(x, axes, shift=None):
    x64 = _f64(x)
    return x64.mean(tuple(axes)).astype(x.dtype), x64.var(tuple(axes)).astype(x.dtype)


def _ss_samples(d, r):
    return [Sample((arr(r, (3, 4), d), [1]), name="axis1"), Sample((arr(r, (2, 3), d), [0, 1], 0.5), name="shift")]


def _avg_loss(loss, sample_weight=None, global_batch_size=None):
    lw = _f64(loss) * (1.0 if sample_weight is None else _f64(sample_weight))
    n = loss.shape[0] if global_batch_size is None else global_batch_size
    return np.asarray(lw.sum() / n).astype(loss.dtype)


def _avg_loss_samples(d, r):
    return [Sample((arr(r, (5,), d),), name="plain"), Sample((arr(r, (3, 2), d), arr(r, (3, 2), d)), name="weights"),
            Sample((arr(r, (4,), d),), {"global_batch_size": 8}, name="global")]


def _max_k(x, k, reduction_dimension=-1):
    idx = np.argsort(-x, axis=reduction_dimension, kind="stable")
    idx = np.take(idx, np.arange(k), axis=reduction_dimension)
    return np.take_along_axis(x, idx, reduction_dimension), idx.astype(np.int32)


def _min_k(x, k, reduction_dimension=-1):
    idx = np.argsort(x, axis=reduction_dimension, kind="stable")
    idx = np.take(idx, np.arange(k), axis=reduction_dimension)
    return np.take_along_axis(x, idx, reduction_dimension), idx.astype(np.int32)


def _k_samples(d, r):
    def distinct(shape):
        return (r.permutation(int(np.prod(shape))).reshape(shape) * 0.25).astype(d)
    return [Sample((distinct((3, 5)), 2), name="last"), Sample((distinct((4, 3)), 1), {"reduction_dimension": 0},
                                                              name="axis0")]


def _bn_global(x, mean, var, beta, gamma, eps, scale_after):
    y = (_f64(x) - mean) / np.sqrt(_f64(var) + eps)
    return (y * (gamma if scale_after else 1.0) + beta).astype(x.dtype)


def _bn_samples(d, r):
    c = 4
    return [Sample((arr(r, (3, c), d), arr(r, (c,), d), arr(r, (c,), d, 0.5, 2), arr(r, (c,), d), arr(r, (c,), d),
                    1e-3, s), name=f"scale_{s}") for s in (True, False)]


def _depthwise_ref(x, f, sh, sw, padding):
    """Plain loops: out[b, y, x, c * m + k] = sum_ij in[b, y*sh + i - top, x*sw + j - left, c] f[i, j, c, k]."""
    n, h, w, c = x.shape
    kh, kw, _, mult = f.shape
    if padding == "SAME":
        oh, ow = -(-h // sh), -(-w // sw)
        top, left = max((oh - 1) * sh + kh - h, 0) // 2, max((ow - 1) * sw + kw - w, 0) // 2
    else:
        oh, ow, top, left = (h - kh) // sh + 1, (w - kw) // sw + 1, 0, 0
    return oh, ow, top, left


def _dw_input(input_sizes, f, dy, strides, padding):
    n, h, w, c = input_sizes
    kh, kw, _, mult = f.shape
    sh, sw = strides[1], strides[2]
    oh, ow, top, left = _depthwise_ref(np.zeros(input_sizes), f, sh, sw, padding)
    dx = np.zeros(input_sizes)
    for b, y, xx, ch, k in np.ndindex(n, oh, ow, c, mult):
        for i, j in np.ndindex(kh, kw):
            yy, xj = y * sh + i - top, xx * sw + j - left
            if 0 <= yy < h and 0 <= xj < w:
                dx[b, yy, xj, ch] += float(dy[b, y, xx, ch * mult + k]) * float(f[i, j, ch, k])
    return dx.astype(dy.dtype)


def _dw_filter(x, filter_sizes, dy, strides, padding):
    n, h, w, c = x.shape
    kh, kw, _, mult = filter_sizes
    sh, sw = strides[1], strides[2]
    oh, ow, top, left = _depthwise_ref(x, np.zeros(filter_sizes), sh, sw, padding)
    df = np.zeros(filter_sizes)
    for b, y, xx, ch, k in np.ndindex(n, oh, ow, c, mult):
        for i, j in np.ndindex(kh, kw):
            yy, xj = y * sh + i - top, xx * sw + j - left
            if 0 <= yy < h and 0 <= xj < w:
                df[i, j, ch, k] += float(dy[b, y, xx, ch * mult + k]) * float(x[b, yy, xj, ch])
    return df.astype(dy.dtype)


def _dw_input_samples(d, r):
    return [Sample(([2, 5, 6, 3], arr(r, (2, 2, 3, 2), d), arr(r, (2, 3, 3, 6), d), [1, 2, 2, 1], "SAME"), name="same"),
            Sample(([1, 4, 5, 2], arr(r, (3, 2, 2, 1), d), arr(r, (1, 2, 4, 2), d), [1, 1, 1, 1], "VALID"),
                   name="valid")]


def _dw_filter_samples(d, r):
    return [Sample((arr(r, (2, 5, 6, 3), d), [2, 2, 3, 2], arr(r, (2, 3, 3, 6), d), [1, 2, 2, 1], "SAME"), name="same"),
            Sample((arr(r, (1, 4, 5, 2), d), [3, 2, 2, 1], arr(r, (1, 2, 4, 2), d), [1, 1, 1, 1], "VALID"),
                   name="valid")]


def _atrous_t(value, filters, output_shape, rate, padding):
    return ref_conv_transpose(value, filters, output_shape, 1, padding, None, [rate, rate])


def _atrous_t_samples(d, r):
    return [Sample((arr(r, (1, 5, 6, 2), d), arr(r, (3, 3, 3, 2), d), [1, 5, 6, 3], 2, "SAME"), name="same"),
            Sample((arr(r, (2, 1, 2, 2), d), arr(r, (3, 3, 3, 2), d), [2, 5, 6, 3], 2, "VALID"), name="valid")]


OPS += [
    OpInfo("nn.crelu", tw.nn.crelu, _crelu, FLOATS, _crelu_samples, grad_order=2),
    OpInfo("nn.depth_to_space", tw.nn.depth_to_space, _d2s, F,
           lambda d, r: [Sample((arr(r, (2, 3, 2, 8), d), 2), name="b2"), Sample((arr(r, (1, 1, 2, 9), d), 3), name="b3")]),
    OpInfo("nn.space_to_depth", tw.nn.space_to_depth, _s2d, F,
           lambda d, r: [Sample((arr(r, (2, 4, 6, 3), d), 2), name="b2"), Sample((arr(r, (1, 3, 3, 1), d), 3), name="b3")]),
    OpInfo("space_to_batch_nd", tw.space_to_batch_nd, _s2b, F + (tw.int32,), _s2b_samples),
    OpInfo("batch_to_space", tw.batch_to_space, _b2s, F + (tw.int32,), _b2s_samples),
    OpInfo("nn.local_response_normalization", tw.nn.local_response_normalization, _lrn, F, _lrn_samples,
           tol={tw.float32: (1e-5, 1e-6)}),
    OpInfo("nn.max_pool_with_argmax", tw.nn.max_pool_with_argmax, _mpwa, F, _mpwa_samples),
    OpInfo("nn.dilation2d", tw.nn.dilation2d, _dilation, F, _morph_samples),
    OpInfo("nn.erosion2d", tw.nn.erosion2d, _erosion, F, _morph_samples),
    OpInfo("nn.weighted_moments", tw.nn.weighted_moments, _weighted_moments, F, _wm_samples, grad_order=2),
    OpInfo("nn.sufficient_statistics+normalize_moments", _moments_via_ss, _moments_ref, F, _ss_samples,
           grad_order=2),
    OpInfo("nn.compute_average_loss", tw.nn.compute_average_loss, _avg_loss, F, _avg_loss_samples),
    OpInfo("nn.approx_max_k", tw.nn.approx_max_k, _max_k, F + (tw.int32,), _k_samples),
    OpInfo("nn.approx_min_k", tw.nn.approx_min_k, _min_k, F + (tw.int32,), _k_samples),
    OpInfo("nn.batch_norm_with_global_normalization", tw.nn.batch_norm_with_global_normalization, _bn_global, F,
           _bn_samples, grad_order=2),
    OpInfo("nn.depthwise_conv2d_backprop_input", tw.nn.depthwise_conv2d_backprop_input, _dw_input, F,
           _dw_input_samples, tol={tw.float32: (1e-4, 1e-4)}),
    OpInfo("nn.depthwise_conv2d_backprop_filter", tw.nn.depthwise_conv2d_backprop_filter, _dw_filter, F,
           _dw_filter_samples, tol={tw.float32: (1e-4, 1e-4)}),
    OpInfo("nn.atrous_conv2d_transpose", tw.nn.atrous_conv2d_transpose, _atrous_t, F, _atrous_t_samples,
           tol={tw.float32: (1e-4, 1e-4)}),
]


# ---- tf.linalg.LinearOperator* (functions of the operators' parameters) ---------------------------
LO = tw.linalg


def _spd(d, r, n=3):
    a = arr(r, (n, n), d)
    return (a @ a.T + n * np.eye(n)).astype(d)


def _lo_samples(*shapes, spd=False):
    def gen(d, r):
        args = [(_spd(d, r, s[0]) if spd and i == 0 else arr(r, s, d, 0.5, 2.0)) for i, s in enumerate(shapes)]
        return [Sample(tuple(args), name="x")]
    return gen


def _toeplitz(col, row):
    n = len(col)
    return np.array([[col[i - j] if i >= j else row[j - i] for j in range(n)] for i in range(n)], col.dtype)


def _householder(v):
    v64 = _f64(v)
    return (np.eye(len(v)) - 2 * np.outer(v64, v64) / (v64 @ v64)).astype(v.dtype)


def _circulant_real(spectrum):
    c = np.fft.ifft(_f64(spectrum))
    n = len(c)
    return np.real(np.array([[c[(i - j) % n] for j in range(n)] for i in range(n)])).astype(spectrum.dtype)


def _tridiag(diags, x):
    sup, main, sub = _f64(diags)
    t = np.diag(main) + np.diag(sup[:-1], 1) + np.diag(sub[1:], -1)
    return (t @ _f64(x)).astype(x.dtype)


OPS += [
    OpInfo("linalg.LinearOperatorDiag.solve", lambda d, x: LO.LinearOperatorDiag(d).solve(x),
           lambda d, x: (_f64(x) / _f64(d)[:, None]).astype(x.dtype), F, _lo_samples((3,), (3, 2)), grad_order=2),
    OpInfo("linalg.LinearOperatorLowRankUpdate.solve",
           lambda a, u, x: LO.LinearOperatorLowRankUpdate(LO.LinearOperatorFullMatrix(a), u).solve(x),
           lambda a, u, x: np.linalg.solve(_f64(a) + _f64(u) @ _f64(u).T, _f64(x)).astype(x.dtype), F,
           _lo_samples((3, 3), (3, 1), (3, 2), spd=True), tol={tw.float32: (1e-4, 1e-5)}),
    OpInfo("linalg.LinearOperatorKronecker.to_dense",
           lambda a, b: LO.LinearOperatorKronecker([LO.LinearOperatorFullMatrix(a),
                                                    LO.LinearOperatorFullMatrix(b)]).to_dense(),
           lambda a, b: np.kron(a, b), F, _lo_samples((2, 3), (3, 2)), grad_order=2),
    OpInfo("linalg.LinearOperatorToeplitz.to_dense", lambda c, r: LO.LinearOperatorToeplitz(c, r).to_dense(),
           _toeplitz, F, _lo_samples((4,), (4,))),
    OpInfo("linalg.LinearOperatorHouseholder.to_dense", lambda v: LO.LinearOperatorHouseholder(v).to_dense(),
           _householder, F, _lo_samples((3,)), tol={tw.float32: (1e-5, 1e-6)}),
    OpInfo("linalg.LinearOperatorCirculant.to_dense",
           lambda s: LO.LinearOperatorCirculant(s, input_output_dtype=tw.as_dtype(s.dtype)).to_dense(),
           _circulant_real, F, _lo_samples((4,)), grad=False),
    OpInfo("linalg.LinearOperatorTridiag.matmul", lambda d, x: LO.LinearOperatorTridiag(d).matmul(x), _tridiag, F,
           _lo_samples((3, 4), (4, 2)), grad_order=2),
    OpInfo("linalg.LinearOperatorBlockLowerTriangular.log_abs_determinant",
           lambda a, b, c: LO.LinearOperatorBlockLowerTriangular(
               [[LO.LinearOperatorFullMatrix(a)], [LO.LinearOperatorFullMatrix(b), LO.LinearOperatorFullMatrix(c)]]
           ).log_abs_determinant(),
           lambda a, b, c: np.asarray(np.linalg.slogdet(_f64(a))[1] + np.linalg.slogdet(_f64(c))[1]).astype(a.dtype),
           F, lambda d, r: [Sample((_spd(d, r, 2), arr(r, (1, 2), d), _spd(d, r, 1)), name="x")],
           tol={tw.float32: (1e-5, 1e-5)}),
]


# ---- tf.linalg matrix functions and factorizations ---------------------------------------------------
def _expm_ref(a):
    a64 = _f64(a)
    out, term = np.eye(a.shape[-1]), np.eye(a.shape[-1])
    for k in range(1, 40):          # the Taylor series: the inputs are small
        term = term @ a64 / k
        out = out + term
    return out.astype(a.dtype)


def _expm_samples(d, r):
    return [Sample((arr(r, (3, 3), d, -0.8, 0.8),), name="3x3"), Sample((arr(r, (2, 2), d, -0.5, 0.5),), name="2x2")]


def _sqrtm_ref(a):
    w, v = np.linalg.eigh(_f64(a))
    return (v @ np.diag(np.sqrt(w)) @ v.T).astype(a.dtype)


def _spd_samples(d, r):
    return [Sample((_spd(d, r, 3),), name="3x3"), Sample((_spd(d, r, 2),), name="2x2")]


def _lu_ref(a):
    """Doolittle elimination with partial pivoting, written out."""
    u = _f64(a).copy()
    n = u.shape[0]
    perm = np.arange(n)
    low = np.zeros((n, n))
    for c in range(n):
        p = c + int(np.argmax(np.abs(u[c:, c])))
        u[[c, p]], low[[c, p]], perm[[c, p]] = u[[p, c]], low[[p, c]], perm[[p, c]]
        for rr in range(c + 1, n):
            low[rr, c] = u[rr, c] / u[c, c]
            u[rr] -= low[rr, c] * u[c]
    return (np.triu(u) + low).astype(a.dtype), perm.astype(np.int32)


def _general_samples(d, r):
    return [Sample(((arr(r, (3, 3), d) + 3 * np.eye(3)).astype(d),), name="3x3"),
            Sample((arr(r, (4, 4), d),), name="4x4")]


def _lu_solve_op(a, rhs):
    return tw.linalg.lu_solve(*tw.linalg.lu(a), rhs)


def _tri_dense(diags):
    sup, main, sub = _f64(diags)
    return np.diag(main) + np.diag(sup[:-1], 1) + np.diag(sub[1:], -1)


def _tri_solve_ref(diags, rhs):
    return np.linalg.solve(_tri_dense(diags), _f64(rhs)).astype(rhs.dtype)


def _tri_samples(d, r):
    dg = arr(r, (3, 4), d, 0.5, 1.0)
    dg[1] += 3.0                      # diagonally dominant
    return [Sample((dg, arr(r, (4, 2), d)), name="x")]


def _banded_ref(bands, rhs, lower=True):
    k, n = bands.shape
    dense = np.zeros((n, n))
    for rr in range(k):
        off = rr if lower else k - 1 - rr
        for j in range(n):
            if lower and j >= off:
                dense[j, j - off] = bands[rr, j]
            if not lower and j + off < n:
                dense[j, j + off] = bands[rr, j]
    return np.linalg.solve(dense, _f64(rhs)).astype(rhs.dtype)


def _banded_samples(d, r):
    lo = arr(r, (2, 4), d, 0.5, 1.0)
    lo[0] += 2.0
    up = arr(r, (3, 4), d, 0.5, 1.0)
    up[2] += 2.0
    return [Sample((lo, arr(r, (4, 2), d)), name="lower"), Sample((up, arr(r, (4, 1), d)), {"lower": False},
                                                                   name="upper")]


def _eigh_tri_ref(alpha, beta):
    t = np.diag(_f64(alpha)) + np.diag(_f64(beta), 1) + np.diag(_f64(beta), -1)
    return np.linalg.eigvalsh(t).astype(alpha.dtype)


OPS += [
    OpInfo("linalg.expm", tw.linalg.expm, _expm_ref, F, _expm_samples, grad_order=2, tol={tw.float32: (1e-5, 1e-5)}),
    OpInfo("linalg.sqrtm", tw.linalg.sqrtm, _sqrtm_ref, F, _spd_samples, tol={tw.float32: (1e-4, 1e-5)}),
    OpInfo("linalg.lu", tw.linalg.lu, _lu_ref, F, _general_samples, tol={tw.float32: (1e-4, 1e-5)}),
    OpInfo("linalg.lu_solve", _lu_solve_op, lambda a, b: np.linalg.solve(_f64(a), _f64(b)).astype(a.dtype), F,
           lambda d, r: [Sample(((arr(r, (3, 3), d) + 3 * np.eye(3)).astype(d), arr(r, (3, 2), d)), name="x")],
           tol={tw.float32: (1e-4, 1e-5)}),
    OpInfo("linalg.lu_reconstruct", lambda a: tw.linalg.lu_reconstruct(*tw.linalg.lu(a)), lambda a: a, F,
           _general_samples, tol={tw.float32: (1e-5, 1e-5)}),
    OpInfo("linalg.lu_matrix_inverse", lambda a: tw.linalg.lu_matrix_inverse(*tw.linalg.lu(a)),
           lambda a: np.linalg.inv(_f64(a)).astype(a.dtype), F,
           lambda d, r: [Sample(((arr(r, (3, 3), d) + 3 * np.eye(3)).astype(d),), name="3x3")],
           tol={tw.float32: (1e-4, 1e-5)}),
    OpInfo("linalg.tridiagonal_matmul", tw.linalg.tridiagonal_matmul,
           lambda dg, x: (_tri_dense(dg) @ _f64(x)).astype(x.dtype), F, _tri_samples, grad_order=2),
    OpInfo("linalg.tridiagonal_solve", tw.linalg.tridiagonal_solve, _tri_solve_ref, F, _tri_samples,
           tol={tw.float32: (1e-5, 1e-5)}),
    OpInfo("linalg.banded_triangular_solve", tw.linalg.banded_triangular_solve, _banded_ref, F, _banded_samples,
           tol={tw.float32: (1e-5, 1e-5)}),
    OpInfo("linalg.eigh_tridiagonal", tw.linalg.eigh_tridiagonal, _eigh_tri_ref, F,
           lambda d, r: [Sample((arr(r, (4,), d), arr(r, (3,), d, 0.5, 1.5)), name="x")],
           tol={tw.float32: (1e-5, 1e-5)}),
]


def _logm_ref(a):
    w, v = np.linalg.eigh(_f64(a))
    return (v @ np.diag(np.log(w)) @ v.T).astype(a.dtype)


def _eig_parts(a):
    e = tw.linalg.eigvals(a)
    return tw.math.real(e), tw.math.imag(e)


def _eig_parts_ref(a):
    e = np.linalg.eigvals(_f64(a))     # the same LAPACK routine (geev): the same order
    return e.real.astype(a.dtype), e.imag.astype(a.dtype)


# Complex-valued results are compared through their real and imaginary parts (float references).
OPS += [
    OpInfo("linalg.logm", lambda a: tw.math.real(tw.linalg.logm(tw.cast(a, tw.complex64 if a.dtype == tw.float32 else tw.complex128))), _logm_ref, F,
           _spd_samples, grad=False, tol={tw.float32: (1e-4, 1e-5)}),
    OpInfo("linalg.eigvals", _eig_parts, _eig_parts_ref, F, _general_samples, grad=False,
           tol={tw.float32: (1e-4, 1e-5)}),
]


# ---- top-level tf names -------------------------------------------------------------------------------
def _scan_ref(x):
    return np.cumprod(_f64(x), axis=0).astype(x.dtype)


def _stitch_ref(a, b):
    out = np.zeros((3,) + a.shape[1:], a.dtype)
    out[[0, 1]] = a
    out[[1, 2]] = b            # later entries win
    return out


def _partition_ref(x):
    p = np.array([1, 0, 1, 2])
    return [x[p == i] for i in range(3)]


OPS += [
    OpInfo("map_fn", lambda x: tw.map_fn(lambda e: tw.sin(e) * e, x),
           lambda x: (np.sin(_f64(x)) * _f64(x)).astype(x.dtype), F,
           lambda d, r: [Sample((arr(r, (3, 2), d),), name="rows")], grad_order=2),
    OpInfo("scan", lambda x: tw.scan(lambda a, e: a * e, x), _scan_ref, F,
           lambda d, r: [Sample((arr(r, (4, 2), d),), name="rows")], grad_order=2),
    OpInfo("foldl+foldr", lambda x: (tw.foldl(lambda a, e: a * e + 1.0, x, initializer=tw.constant(0.5, x.dtype)),
                                     tw.foldr(lambda a, e: a - e, x)),
           lambda x: (_fold_ref(x), np.asarray(_f64(x)[-1] - _f64(x)[:-1].sum()).astype(x.dtype)), F,
           lambda d, r: [Sample((arr(r, (4,), d),), name="vector")], grad_order=2),
    OpInfo("dynamic_partition", lambda x: tw.dynamic_partition(x, [1, 0, 1, 2], 3), _partition_ref, F + (tw.int32,),
           lambda d, r: [Sample((arr(r, (4, 2), d),), name="rows")]),
    OpInfo("dynamic_stitch", lambda a, b: tw.dynamic_stitch([[0, 1], [1, 2]], [a, b]), _stitch_ref, F + (tw.int32,),
           lambda d, r: [Sample((arr(r, (2, 3), d), arr(r, (2, 3), d)), name="rows")]),
    OpInfo("histogram_fixed_width_bins", lambda v: tw.histogram_fixed_width_bins(v, [-1.0, 1.0], nbins=7),
           lambda v: np.clip(np.floor((_f64(v) + 1.0) / 2.0 * 7), 0, 6).astype(np.int32), F,
           lambda d, r: [Sample((arr(r, (10,), d, -1.5, 1.5),), name="x")], grad=False),
    OpInfo("bitcast", lambda x: tw.bitcast(x, tw.uint8), lambda x: np.ascontiguousarray(x).view(np.uint8).reshape(
        x.shape + (x.dtype.itemsize,)), F + (tw.int32,), lambda d, r: [Sample((arr(r, (2, 3), d),), name="x")],
           grad=False),
]


def _fold_ref(x):
    acc = 0.5
    for e in _f64(x):
        acc = acc * e + 1.0
    return np.asarray(acc).astype(x.dtype)


OPS += [
    OpInfo("math.erfcinv", tw.math.erfcinv,
           lambda x: (-scipy_special.ndtri(_f64(x) / 2.0) / np.sqrt(2.0)).astype(x.dtype), F,
           lambda d, r: [Sample((arr(r, (3, 4), d, 0.1, 1.9),), name="matrix")], grad_order=2,
           tol={tw.float32: (1e-5, 1e-5)}),
]
