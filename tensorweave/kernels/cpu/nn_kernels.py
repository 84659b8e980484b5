"""CPU kernels for ``ops/nn_ops.py``: softmax and cross-entropies, bias_add, convolution, pooling.

Convolution is one GEMM over an im2col buffer: ``as_strided`` gives a read-only view of every
window (``[N, *out, *k, C]``) and one reshape materializes it as the GEMM's left operand. The
input gradient scatters the GEMM's result back window offset by window offset ("col2im":
``prod(ksize)`` vectorized additions, never a loop over pixels). Grouped convolution (and so
depthwise convolution) runs as a batched matmul over the groups.

Kernels work channels-last; channels-first inputs are moved with views. Half-precision
inputs are computed in float32 and rounded once at the end (as TensorFlow accumulates).

Kernels raise ``ValueError``/``TypeError`` on inputs the op's shape rule rejects; the
dispatcher then asks that rule for the explanatory message, so checks here stay terse.
"""
import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tensorweave.core import errors
from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu.util import low_precision, quiet
from tensorweave.ops.nn_ops import spatial_geometry


# ---- helpers ------------------------------------------------------------------------------------
def _is_float(a):
    return a.dtype.kind == "f" or a.dtype in low_precision()


def _floats(*arrays):
    """Rejects non-float or mixed dtypes (NumPy would silently promote them)."""
    d = arrays[0].dtype
    for a in arrays:
        if not _is_float(a) or a.dtype != d:
            raise TypeError("expected floating inputs of one dtype")
    return d


def _work(a):
    """``a`` in its computation dtype: float32 for float16/bfloat16."""
    return a.astype(np.float32) if a.dtype in low_precision() else a


def _channels_first(data_format):
    return data_format.startswith("NC")


def _to_last(x, cf):
    return np.moveaxis(x, 1, -1) if cf else x


def _from_last(y, cf):
    return np.ascontiguousarray(np.moveaxis(y, -1, 1)) if cf else y


def _pad(x, pads, value=0):
    if not any(b or a for b, a in pads):
        return x
    return np.pad(x, [(0, 0)] + [tuple(p) for p in pads] + [(0, 0)], constant_values=value)


def _windows(xp, out, ksize, strides, dilations):
    """Read-only view ``[N, *out, *ksize, C]`` of every window of ``xp`` (``[N, *S, C]``)."""
    s = xp.strides
    nd = len(out)
    shape = (xp.shape[0],) + tuple(out) + tuple(ksize) + (xp.shape[-1],)
    st = ((s[0],) + tuple(s[1 + i] * strides[i] for i in range(nd))
          + tuple(s[1 + i] * dilations[i] for i in range(nd)) + (s[-1],))
    return as_strided(xp, shape, st, writeable=False)


def _group_windows(xp, out, ksize, strides, dilations, groups):
    """Read-only view ``[G, N, *out, *ksize, C/G]``: the windows with groups leading."""
    s = xp.strides
    nd = len(out)
    cg = xp.shape[-1] // groups
    shape = (groups, xp.shape[0]) + tuple(out) + tuple(ksize) + (cg,)
    st = ((cg * s[-1], s[0]) + tuple(s[1 + i] * strides[i] for i in range(nd))
          + tuple(s[1 + i] * dilations[i] for i in range(nd)) + (s[-1],))
    return as_strided(xp, shape, st, writeable=False)


def _offset_slices(offs, dilations, strides, out):
    """The padded-input positions that window offset ``offs`` touches, for every output."""
    return (slice(None),) + tuple(slice(o * d, o * d + s * (n - 1) + 1, s)
                                  for o, d, s, n in zip(offs, dilations, strides, out)) + (slice(None),)


def _geometry(sizes, ksize, strides, dilations, padding):
    geo = spatial_geometry(sizes, ksize, strides, dilations, padding)
    return tuple(g[0] for g in geo), [(g[1], g[2]) for g in geo]


def _crop(xp, pads, sizes):
    return xp[(slice(None),) + tuple(slice(b, b + n) for (b, _), n in zip(pads, sizes)) + (slice(None),)]


def _groups(c, cg, o):
    if cg <= 0 or c % cg or o % (c // cg):
        raise ValueError("input depth must be evenly divisible by filter depth")
    return c // cg


# ---- softmax and cross-entropies ----------------------------------------------------------------
def _log_softmax_np(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, np.zeros((), x.dtype))  # all -inf slices: no shift
    shifted = x - m
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _softmax_np(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, np.zeros((), x.dtype))
    e = np.exp(x - m)
    e /= np.sum(e, axis=axis, keepdims=True)
    return e


@k("Softmax")
@quiet
def _softmax(x, axis):
    dt = _floats(x)
    if x.size == 0:
        return x.copy()
    return _softmax_np(_work(x), axis).astype(dt, copy=False)


@k("LogSoftmax")
@quiet
def _log_softmax(x, axis):
    dt = _floats(x)
    if x.size == 0:
        return x.copy()
    return _log_softmax_np(_work(x), axis).astype(dt, copy=False)


@k("SoftmaxCrossEntropyWithLogits")
@quiet
def _softmax_xent(logits, labels, axis):
    dt = _floats(logits, labels)
    if logits.shape != labels.shape:
        raise ValueError("logits and labels must have the same shape")
    if logits.size == 0:
        axis %= logits.ndim
        return np.zeros(logits.shape[:axis] + logits.shape[axis + 1:], dt)
    logp = _log_softmax_np(_work(logits), axis)
    lab = _work(labels)
    # 0 * log(0): a class masked with a -inf logit and label 0 adds nothing (not nan).
    terms = np.where(lab == 0, np.zeros((), lab.dtype), lab * logp)
    return (0 - np.sum(terms, axis=axis)).astype(dt, copy=False)


def _check_labels(labels, n):
    if labels.dtype.kind not in "iu":
        raise TypeError("labels must be integers")
    if labels.size and (labels.min() < 0 or labels.max() >= n):
        bad = labels[(labels < 0) | (labels >= n)].ravel()[0]
        raise errors.InvalidArgumentError(
            f"Received a label value of {bad} which is outside the valid range of [0, {n}). "
            f"Label values: {' '.join(map(str, labels.ravel()[:20]))}{' ...' if labels.size > 20 else ''}")


@k("SparseSoftmaxCrossEntropyWithLogits")
@quiet
def _sparse_xent(logits, labels):
    dt = _floats(logits)
    if logits.ndim != labels.ndim + 1 or logits.shape[:-1] != labels.shape:
        raise ValueError("labels must have the shape of logits without the last dimension")
    _check_labels(labels, logits.shape[-1])
    if logits.size == 0:
        return np.zeros(labels.shape, dt)
    logp = _log_softmax_np(_work(logits), -1)
    return (-np.take_along_axis(logp, labels[..., None].astype(np.intp), -1)[..., 0]).astype(dt, copy=False)


@k("SparseSoftmaxCrossEntropyGrad")
@quiet
def _sparse_xent_grad(logits, labels):
    dt = _floats(logits)
    _check_labels(labels, logits.shape[-1])
    if logits.size == 0:
        return logits.copy()
    p = _softmax_np(_work(logits), -1)
    if p.size:
        idx = labels[..., None].astype(np.intp)
        np.put_along_axis(p, idx, np.take_along_axis(p, idx, -1) - 1, -1)
    return p.astype(dt, copy=False)


# ---- bias_add -----------------------------------------------------------------------------------
def _bias_axis(ndim, data_format):
    return 1 if _channels_first(data_format) and ndim >= 2 else ndim - 1


@k("BiasAdd")
def _bias_add(value, bias, data_format):
    if value.dtype != bias.dtype or value.dtype == np.bool_:
        raise TypeError("value and bias must have the same dtype")
    if value.ndim < 2 or bias.ndim != 1:
        raise ValueError("bias_add needs value of rank >= 2 and a 1-D bias")
    axis = _bias_axis(value.ndim, data_format)
    if value.shape[axis] != bias.shape[0]:
        raise ValueError("bias size must equal the channel dimension")
    shape = [1] * value.ndim
    shape[axis] = bias.shape[0]
    return np.add(value, bias.reshape(shape))


@k("BiasAddGrad")
def _bias_add_grad(g, data_format):
    axis = _bias_axis(g.ndim, data_format)
    axes = tuple(i for i in range(g.ndim) if i != axis)
    return np.sum(_work(g), axis=axes).astype(g.dtype, copy=False)


# ---- convolution --------------------------------------------------------------------------------
def _check_conv_ranks(x, f, nd):
    if x.ndim != nd + 2 or f.ndim != nd + 2:
        raise ValueError("wrong rank")


def conv_forward(x, f, strides, dilations, padding, data_format):
    """N-d (grouped) convolution; ``f`` is ``[*ksize, C/groups, O]``."""
    nd = len(strides)
    dt = _floats(x, f)
    _check_conv_ranks(x, f, nd)
    cf = _channels_first(data_format)
    x, f = _work(_to_last(x, cf)), _work(f)
    n, sizes, c = x.shape[0], x.shape[1:-1], x.shape[-1]
    ksize, cg, o = f.shape[:nd], f.shape[-2], f.shape[-1]
    g = _groups(c, cg, o)
    out, pads = _geometry(sizes, ksize, strides, dilations, padding)
    xp = _pad(x, pads)
    kk, m = math.prod(ksize), n * math.prod(out)
    if g == 1:
        cols = _windows(xp, out, ksize, strides, dilations).reshape(m, kk * c)
        y = cols @ f.reshape(kk * c, o)
    elif cg == 1:
        # Depthwise: GEMMs with an inner dimension of prod(ksize) are slow; a multiply-add per
        # window offset over the whole tensor is ~3x faster.
        # Multiplier before channel, so that NumPy's inner loops run over the channels.
        fr = np.ascontiguousarray(f.reshape(kk, c, o // c).transpose(0, 2, 1))
        y = np.zeros((n,) + out + (o // c, c), x.dtype)
        for i, offs in enumerate(np.ndindex(*ksize)):
            y += xp[_offset_slices(offs, dilations, strides, out)][..., None, :] * fr[i]
        y = y.swapaxes(-1, -2)
    else:
        og = o // g
        cols = _group_windows(xp, out, ksize, strides, dilations, g).reshape(g, m, kk * cg)
        fg = f.reshape(kk, cg, g, og).transpose(2, 0, 1, 3).reshape(g, kk * cg, og)
        y = np.matmul(cols, fg).transpose(1, 0, 2)
    y = y.reshape((n,) + out + (o,))
    return _from_last(y, cf).astype(dt, copy=False)


def conv_backprop_input(input_sizes, f, dy, strides, dilations, padding, data_format):
    """Gradient of :func:`conv_forward` with respect to its input (a transposed convolution)."""
    nd = len(strides)
    dt = _floats(f, dy)
    sizes_all = tuple(int(v) for v in np.asarray(input_sizes).reshape(-1))
    if len(sizes_all) != nd + 2 or f.ndim != nd + 2 or dy.ndim != nd + 2:
        raise ValueError("wrong rank")
    cf = _channels_first(data_format)
    if cf:
        sizes_all = (sizes_all[0],) + sizes_all[2:] + (sizes_all[1],)
    n, sizes, c = sizes_all[0], sizes_all[1:-1], sizes_all[-1]
    dy, f = _work(_to_last(dy, cf)), _work(f)
    ksize, cg, o = f.shape[:nd], f.shape[-2], f.shape[-1]
    g = _groups(c, cg, o)
    out, pads = _geometry(sizes, ksize, strides, dilations, padding)
    if dy.shape != (n,) + out + (o,):
        raise ValueError("out_backprop does not match the convolution's output shape")
    kk, m = math.prod(ksize), n * math.prod(out)
    padded = tuple(s + b + a for s, (b, a) in zip(sizes, pads))
    if g > 1 and cg == 1:  # depthwise: see conv_forward
        fr = np.ascontiguousarray(f.reshape(kk, c, o // c).transpose(0, 2, 1))
        dyr = np.ascontiguousarray(dy.reshape((n,) + out + (c, o // c)).swapaxes(-1, -2))
        dxp = np.zeros((n,) + padded + (c,), dy.dtype)
        for i, offs in enumerate(np.ndindex(*ksize)):
            target = dxp[_offset_slices(offs, dilations, strides, out)]
            for j in range(o // c):
                target += dyr[..., j, :] * fr[i, j]
        return _from_last(_crop(dxp, pads, sizes), cf).astype(dt, copy=False)
    if g == 1:
        dcols = dy.reshape(m, o) @ f.reshape(kk * c, o).T
    else:
        og = o // g
        dyg = dy.reshape(m, g, og).transpose(1, 0, 2)
        fg = f.reshape(kk, cg, g, og).transpose(2, 0, 1, 3).reshape(g, kk * cg, og)
        dcols = np.matmul(dyg, fg.transpose(0, 2, 1)).reshape(g, m, kk, cg).transpose(1, 2, 0, 3)
    dcols = dcols.reshape((n,) + out + (kk, c))
    dxp = np.zeros((n,) + padded + (c,), dcols.dtype)
    for i, offs in enumerate(np.ndindex(*ksize)):
        dxp[_offset_slices(offs, dilations, strides, out)] += dcols[..., i, :]
    return _from_last(_crop(dxp, pads, sizes), cf).astype(dt, copy=False)


def conv_backprop_filter(x, filter_sizes, dy, strides, dilations, padding, data_format):
    """Gradient of :func:`conv_forward` with respect to its filter."""
    nd = len(strides)
    dt = _floats(x, dy)
    fsizes = tuple(int(v) for v in np.asarray(filter_sizes).reshape(-1))
    if len(fsizes) != nd + 2 or x.ndim != nd + 2 or dy.ndim != nd + 2:
        raise ValueError("wrong rank")
    cf = _channels_first(data_format)
    x, dy = _work(_to_last(x, cf)), _work(_to_last(dy, cf))
    n, sizes, c = x.shape[0], x.shape[1:-1], x.shape[-1]
    ksize, cg, o = fsizes[:nd], fsizes[-2], fsizes[-1]
    g = _groups(c, cg, o)
    out, pads = _geometry(sizes, ksize, strides, dilations, padding)
    if dy.shape != (n,) + out + (o,):
        raise ValueError("out_backprop does not match the convolution's output shape")
    xp = _pad(x, pads)
    kk, m = math.prod(ksize), n * math.prod(out)
    if g == 1:
        cols = _windows(xp, out, ksize, strides, dilations).reshape(m, kk * c)
        df = cols.T @ dy.reshape(m, o)
    elif cg == 1:  # depthwise: see conv_forward
        dyr = np.ascontiguousarray(dy.reshape(m, c, o // c).transpose(2, 0, 1))  # (multiplier, m, c)
        df = np.empty((kk, c, o // c), dy.dtype)
        for i, offs in enumerate(np.ndindex(*ksize)):
            xs = np.ascontiguousarray(xp[_offset_slices(offs, dilations, strides, out)]).reshape(m, c)
            for j in range(o // c):
                df[i, :, j] = np.einsum("mc,mc->c", xs, dyr[j])
    else:
        og = o // g
        cols = _group_windows(xp, out, ksize, strides, dilations, g).reshape(g, m, kk * cg)
        dyg = dy.reshape(m, g, og).transpose(1, 0, 2)
        df = np.matmul(cols.transpose(0, 2, 1), dyg).reshape(g, kk, cg, og).transpose(1, 2, 0, 3)
    return df.reshape(fsizes).astype(dt, copy=False)


for _nd in (1, 2, 3):
    k(f"Conv{_nd}D")(conv_forward)
    k(f"Conv{_nd}DBackpropInput")(conv_backprop_input)
    k(f"Conv{_nd}DBackpropFilter")(conv_backprop_filter)


# ---- pooling ------------------------------------------------------------------------------------
def _lowest(dtype):
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return -np.inf


def _pool_setup(x, ksize, strides, padding, data_format):
    nd = len(ksize)
    if x.ndim != nd + 2:
        raise ValueError("wrong rank")
    if not isinstance(padding, str):
        raise ValueError("pooling supports only SAME and VALID padding")
    cf = _channels_first(data_format)
    x = _to_last(x, cf)
    out, pads = _geometry(x.shape[1:-1], ksize, strides, (1,) * nd, padding)
    return x, cf, out, pads


def _argmax_windows(x, ksize, strides, out, pads):
    """Index (raster order inside the window) of each window's first maximum: ``[N, *out, C]``."""
    xp = _pad(x, pads, _lowest(x.dtype))
    w = _windows(xp, out, ksize, strides, (1,) * len(ksize))
    flat = w.reshape(w.shape[:1 + len(out)] + (-1, w.shape[-1]))
    return np.argmax(flat, axis=-2), xp.shape


@k("MaxPool")
def _max_pool(x, ksize, strides, padding, data_format):
    if not (_is_float(x) or x.dtype.kind in "iu"):
        raise TypeError("max_pool needs a numeric input")
    x, cf, out, pads = _pool_setup(x, ksize, strides, padding, data_format)
    nd = len(ksize)
    xp = _pad(x, pads, _lowest(x.dtype))
    w = _windows(xp, out, ksize, strides, (1,) * nd)
    return _from_last(np.max(w, axis=tuple(range(1 + nd, 1 + 2 * nd))), cf)


@k("MaxPoolGrad")
def _max_pool_grad(x, g, ksize, strides, padding, data_format):
    dt = _floats(x, g)
    x, cf, out, pads = _pool_setup(x, ksize, strides, padding, data_format)
    g = _work(_to_last(g, cf))
    if g.shape != (x.shape[0],) + out + (x.shape[-1],):
        raise ValueError("grad does not match the pooling output shape")
    idx, padded = _argmax_windows(x, ksize, strides, out, pads)
    dxp = np.zeros(padded, g.dtype)
    zero = np.zeros((), g.dtype)
    for i, offs in enumerate(np.ndindex(*ksize)):
        dxp[_offset_slices(offs, (1,) * len(ksize), strides, out)] += np.where(idx == i, g, zero)
    return _from_last(_crop(dxp, pads, x.shape[1:-1]), cf).astype(dt, copy=False)


@k("MaxPoolGradGrad")
def _max_pool_grad_grad(x, gg, ksize, strides, padding, data_format):
    """Picks ``gg`` (shaped like ``x``) at each window's argmax: ``[N, *out, C]``."""
    dt = _floats(x, gg)
    x, cf, out, pads = _pool_setup(x, ksize, strides, padding, data_format)
    gg = _to_last(gg, cf)
    if gg.shape != x.shape:
        raise ValueError("grad must have the input's shape")
    idx, _ = _argmax_windows(x, ksize, strides, out, pads)
    w = _windows(_pad(gg, pads), out, ksize, strides, (1,) * len(ksize))
    flat = w.reshape(w.shape[:1 + len(out)] + (-1, w.shape[-1]))
    picked = np.take_along_axis(flat, idx[..., None, :], axis=-2)[..., 0, :]
    return _from_last(picked, cf).astype(dt, copy=False)


def _valid_counts(sizes, out, pads, ksize, strides):
    """How many real (unpadded) elements each window covers: ``[*out]`` (TF's SAME average)."""
    counts = np.ones((), np.int64)
    for n, o, (b, _), kz, s in zip(sizes, out, pads, ksize, strides):
        start = np.arange(o) * s - b
        c = np.minimum(start + kz, n) - np.maximum(start, 0)
        counts = np.multiply.outer(counts, c)
    return counts


@k("AvgPool")
def _avg_pool(x, ksize, strides, padding, data_format):
    dt = _floats(x)
    x, cf, out, pads = _pool_setup(x, ksize, strides, padding, data_format)
    nd = len(ksize)
    xw = _work(x)
    w = _windows(_pad(xw, pads), out, ksize, strides, (1,) * nd)
    s = np.sum(w, axis=tuple(range(1 + nd, 1 + 2 * nd)))
    counts = _valid_counts(x.shape[1:-1], out, pads, ksize, strides)
    y = s / counts[..., None].astype(xw.dtype)
    return _from_last(y, cf).astype(dt, copy=False)


@k("AvgPoolGrad")
def _avg_pool_grad(orig_input_shape, g, ksize, strides, padding, data_format):
    dt = _floats(g)
    nd = len(ksize)
    shape = tuple(int(v) for v in np.asarray(orig_input_shape).reshape(-1))
    if len(shape) != nd + 2 or g.ndim != nd + 2:
        raise ValueError("wrong rank")
    cf = _channels_first(data_format)
    if cf:
        shape = (shape[0],) + shape[2:] + (shape[1],)
    sizes = shape[1:-1]
    out, pads = _geometry(sizes, ksize, strides, (1,) * nd, padding)
    g = _work(_to_last(g, cf))
    if g.shape != (shape[0],) + out + (shape[-1],):
        raise ValueError("grad does not match the pooling output shape")
    gs = g / _valid_counts(sizes, out, pads, ksize, strides)[..., None].astype(g.dtype)
    padded = tuple(s + b + a for s, (b, a) in zip(sizes, pads))
    dxp = np.zeros((shape[0],) + padded + (shape[-1],), g.dtype)
    for offs in np.ndindex(*ksize):
        dxp[_offset_slices(offs, (1,) * nd, strides, out)] += gs
    return _from_last(_crop(dxp, pads, sizes), cf).astype(dt, copy=False)
