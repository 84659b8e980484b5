"""``keras.ops.nn``: activations, convolutions and pooling (channels-last by default), one-hot
encodings, cross-entropies, normalizations and attention, with Keras 3's names and arguments.

Integer inputs of activations are converted to ``floatx()`` first (as Keras' JAX backend does).

>>> from tensorweave import keras
>>> keras.ops.leaky_relu([-1.0, 2.0], negative_slope=0.1).numpy().tolist()
[-0.10000000149011612, 2.0]
>>> keras.ops.one_hot([0, 2], 3).numpy().tolist()
[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
"""
import warnings

import numpy as np

import tensorweave as tw
from tensorweave.keras.ops._dtypes import cast_to, floatx, is_float, promote, result_type, standardize, to_tensor
from tensorweave.keras.ops._symbolic import export


def _f(x):
    x = to_tensor(x)
    return cast_to(x, result_type(x.dtype, float))


def _epsilon():
    from tensorweave.keras import backend
    return backend.epsilon()


# ---- activations -------------------------------------------------------------------------------------
def relu(x):
    x = to_tensor(x)
    return tw.nn.relu(x) if x.dtype != tw.bool else x


def relu6(x):
    return tw.nn.relu6(_f(x))


def sigmoid(x):
    return tw.sigmoid(_f(x))


def sparse_sigmoid(x):
    x = _f(x)
    return tw.clip_by_value(0.5 * (x + 1), 0.0, 1.0)


def softplus(x):
    return tw.nn.softplus(_f(x))


def softsign(x):
    return tw.nn.softsign(_f(x))


def sparse_plus(x):
    x = _f(x)
    mid = 0.25 * tw.square(x + 1)
    return tw.where(tw.less_equal(x, -1.0), tw.zeros_like(x), tw.where(tw.less(x, 1.0), mid, x))


def silu(x):
    x = _f(x)
    return x * tw.sigmoid(x)


swish = silu


def squareplus(x, b=4):
    x = _f(x)
    return (x + tw.sqrt(tw.square(x) + cast_to(b, x.dtype))) / 2


def log_sigmoid(x):
    x = _f(x)
    return -tw.nn.softplus(-x)


def leaky_relu(x, negative_slope=0.2):
    return tw.nn.leaky_relu(_f(x), alpha=negative_slope)


def hard_sigmoid(x):
    x = _f(x)
    return tw.nn.relu6(x + 3.0) / 6.0


def hard_silu(x):
    x = _f(x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def elu(x, alpha=1.0):
    x = _f(x)
    if alpha == 1.0:
        return tw.nn.elu(x)
    return tw.where(tw.greater(x, 0.0), x, alpha * tw.math.expm1(tw.minimum(x, 0.0)))


def selu(x):
    return tw.nn.selu(_f(x))


def gelu(x, approximate=True):
    return tw.nn.gelu(_f(x), approximate=approximate)


def celu(x, alpha=1.0):
    x = _f(x)
    return tw.maximum(x, 0.0) + alpha * tw.math.expm1(tw.minimum(x, 0.0) / alpha)


def glu(x, axis=-1):
    x = _f(x)
    n = x.shape.as_list()[axis]
    if n is not None and n % 2:
        raise ValueError(f"glu: the size of axis {axis} must be even, got shape {x.shape}")
    a, b = tw.split(x, 2, axis=axis)
    return a * tw.sigmoid(b)


def hard_tanh(x):
    return tw.clip_by_value(_f(x), -1.0, 1.0)


def hard_shrink(x, threshold=0.5):
    x = _f(x)
    return tw.where(tw.greater(tw.abs(x), threshold), x, tw.zeros_like(x))


def soft_shrink(x, threshold=0.5):
    x = _f(x)
    return tw.where(tw.greater(x, threshold), x - threshold,
                    tw.where(tw.less(x, -threshold), x + threshold, tw.zeros_like(x)))


def tanh_shrink(x):
    x = _f(x)
    return x - tw.tanh(x)


def threshold(x, threshold, default_value):
    x = to_tensor(x)
    return tw.where(tw.greater(x, cast_to(threshold, x.dtype)), x, cast_to(default_value, x.dtype) + tw.zeros_like(x))


def softmax(x, axis=-1):
    x = _f(x)
    if isinstance(axis, (list, tuple)):
        m = tw.reduce_max(x, axis=list(axis), keepdims=True)
        e = tw.exp(x - tw.stop_gradient(m))
        return e / tw.reduce_sum(e, axis=list(axis), keepdims=True)
    return tw.nn.softmax(x, axis=axis)


def log_softmax(x, axis=-1):
    x = _f(x)
    if isinstance(axis, (list, tuple)):
        return x - tw.reduce_logsumexp(x, axis=list(axis), keepdims=True)
    return tw.nn.log_softmax(x, axis=axis)


def sparsemax(x, axis=-1):
    x = _f(x)
    r = x.shape.rank
    ax = axis % r
    z = tw.sort(x, axis=ax, direction="DESCENDING")
    n = x.shape.as_list()[ax]
    shape = [1] * r
    shape[ax] = n
    k = tw.reshape(tw.range(1, n + 1, dtype=x.dtype), shape)
    cs = tw.cumsum(z, axis=ax)
    support = tw.greater(1 + k * z, cs)
    kz = tw.reduce_sum(tw.cast(support, x.dtype), axis=ax, keepdims=True)
    tau = (tw.reduce_sum(tw.where(support, z, tw.zeros_like(z)), axis=ax, keepdims=True) - 1) / kz
    return tw.maximum(x - tau, 0.0)


# ---- convolution and pooling -------------------------------------------------------------------------
def _channels_first(data_format):
    from tensorweave.keras import backend
    df = data_format or getattr(backend, "image_data_format", lambda: "channels_last")()
    if df not in ("channels_last", "channels_first"):
        raise ValueError(f"data_format must be 'channels_last' or 'channels_first', got {data_format!r}")
    return df == "channels_first"


def _tf_format(nd, channels_first):
    spatial = "DHW"[3 - nd:] if nd > 1 else "W"
    return ("NC" + spatial) if channels_first else ("N" + spatial + "C")


def _spatial(x):
    r = x.shape.rank
    if r is None or r < 3:
        raise ValueError(f"expected an input of rank 3, 4 or 5 (batch, spatial..., channels), got shape {x.shape}")
    return r - 2


def _pad_str(padding):
    p = str(padding).lower()
    if p not in ("valid", "same"):
        raise ValueError(f"padding must be 'valid' or 'same', got {padding!r}")
    return p.upper()


def conv(inputs, kernel, strides=1, padding="valid", data_format=None, dilation_rate=1):
    x, k = promote(inputs, kernel)
    nd = _spatial(x)
    return tw.nn.convolution(x, k, strides=strides, padding=_pad_str(padding),
                             data_format=_tf_format(nd, _channels_first(data_format)), dilations=dilation_rate)


def depthwise_conv(inputs, kernel, strides=1, padding="valid", data_format=None, dilation_rate=1):
    x, k = promote(inputs, kernel)
    nd = _spatial(x)
    cf = _channels_first(data_format)
    if nd == 2:
        s = [1, strides, strides, 1] if np.ndim(strides) == 0 else [1, *strides, 1]
        if cf:
            s = [s[0], s[3], s[1], s[2]]
        return tw.nn.depthwise_conv2d(x, k, s, _pad_str(padding), data_format=_tf_format(2, cf),
                                      dilations=dilation_rate if np.ndim(dilation_rate) else [dilation_rate] * 2)
    if nd == 1:
        x2 = tw.expand_dims(x, 1 if not cf else 2)
        k2 = tw.expand_dims(k, 0)
        s = strides if np.ndim(strides) == 0 else strides[0]
        d = dilation_rate if np.ndim(dilation_rate) == 0 else dilation_rate[0]
        out = depthwise_conv(x2, k2, (1, s), padding, data_format, (1, d))
        return tw.squeeze(out, 1 if not cf else 2)
    raise ValueError(f"depthwise_conv supports 1-D and 2-D inputs, got shape {x.shape}")


def separable_conv(inputs, depthwise_kernel, pointwise_kernel, strides=1, padding="valid", data_format=None,
                   dilation_rate=1):
    dw = depthwise_conv(inputs, depthwise_kernel, strides, padding, data_format, dilation_rate)
    return conv(dw, pointwise_kernel, 1, "valid", data_format)


def _deconv_length(n, k, stride, padding, output_padding, dilation):
    k = (k - 1) * dilation + 1
    if output_padding is None:
        return n * stride + max(k - stride, 0) if padding == "valid" else n * stride
    pad = k // 2 if padding == "same" else 0
    return (n - 1) * stride + k - 2 * pad + output_padding


def _ints(v, nd):
    return [int(v)] * nd if np.ndim(v) == 0 else [int(a) for a in v]


def conv_transpose(inputs, kernel, strides=1, padding="valid", output_padding=None, data_format=None,
                   dilation_rate=1):
    x, k = promote(inputs, kernel)
    nd = _spatial(x)
    cf = _channels_first(data_format)
    padding = str(padding).lower()
    s, d = _ints(strides, nd), _ints(dilation_rate, nd)
    op = [None] * nd if output_padding is None else _ints(output_padding, nd)
    xs = x.shape.as_list()
    sp = xs[2:] if cf else xs[1:-1]
    ks = k.shape.as_list()
    out_sp = [_deconv_length(n, kk, st, padding, o, dd) for n, kk, st, o, dd in zip(sp, ks[:nd], s, op, d)]
    batch = tw.shape(x)[0]
    cout = ks[-2]
    dims = [cout] + out_sp if cf else out_sp + [cout]
    out_shape = tw.concat([tw.reshape(batch, [1]), tw.constant(dims, tw.int32)], 0)
    return tw.nn.conv_transpose(x, k, out_shape, s, padding.upper(), data_format=_tf_format(nd, cf), dilations=d)


def _pool(kind, inputs, pool_size, strides, padding, data_format):
    x = to_tensor(inputs)
    nd = _spatial(x)
    strides = pool_size if strides is None else strides
    cf = _channels_first(data_format)
    fn = tw.nn.max_pool if kind == "max" else tw.nn.avg_pool
    return fn(x, _ints(pool_size, nd), _ints(strides, nd), _pad_str(padding), data_format=_tf_format(nd, cf))


def max_pool(inputs, pool_size, strides=None, padding="valid", data_format=None):
    return _pool("max", inputs, pool_size, strides, padding, data_format)


def average_pool(inputs, pool_size, strides=None, padding="valid", data_format=None):
    return _pool("avg", inputs, pool_size, strides, padding, data_format)


def _adaptive(reduce, inputs, output_size, data_format):
    x = to_tensor(inputs)
    nd = _spatial(x)
    cf = _channels_first(data_format)
    if cf:
        x = tw.transpose(x, [0] + list(range(2, nd + 2)) + [1])
    sizes = _ints(output_size, nd)
    for i, out_n in enumerate(sizes):
        ax = 1 + i
        n = x.shape.as_list()[ax]
        parts = []
        for j in range(out_n):
            lo, hi = (j * n) // out_n, -((-(j + 1) * n) // out_n)
            sl = [slice(None)] * x.shape.rank
            sl[ax] = slice(lo, hi)
            parts.append(reduce(x[tuple(sl)], axis=ax, keepdims=True))
        x = tw.concat(parts, ax)
    if cf:
        x = tw.transpose(x, [0, nd + 1] + list(range(1, nd + 1)))
    return x


def adaptive_average_pool(inputs, output_size, data_format=None):
    return _adaptive(tw.reduce_mean, inputs, output_size, data_format)


def adaptive_max_pool(inputs, output_size, data_format=None):
    return _adaptive(tw.reduce_max, inputs, output_size, data_format)


def depth_to_space(x, block_size, data_format="channels_last"):
    x = to_tensor(x)
    cf = data_format == "channels_first"
    if cf:
        x = tw.transpose(x, [0, 2, 3, 1])
    b = int(block_size)
    _, h, w, c = x.shape.as_list()
    y = tw.reshape(x, [-1, h, w, b, b, c // (b * b)])
    y = tw.transpose(y, [0, 1, 3, 2, 4, 5])
    y = tw.reshape(y, [-1, h * b, w * b, c // (b * b)])
    return tw.transpose(y, [0, 3, 1, 2]) if cf else y


def space_to_depth(x, block_size, data_format="channels_last"):
    x = to_tensor(x)
    cf = data_format == "channels_first"
    if cf:
        x = tw.transpose(x, [0, 2, 3, 1])
    b = int(block_size)
    _, h, w, c = x.shape.as_list()
    y = tw.reshape(x, [-1, h // b, b, w // b, b, c])
    y = tw.transpose(y, [0, 1, 3, 2, 4, 5])
    y = tw.reshape(y, [-1, h // b, w // b, b * b * c])
    return tw.transpose(y, [0, 3, 1, 2]) if cf else y


def _patch_kernel(c, kh, kw, dtype):
    """An identity filter ``[kh, kw, c, c*kh*kw]`` whose output channel ``ch*kh*kw + i*kw + j`` copies input
    channel ``ch`` at window position ``(i, j)`` (PyTorch's unfold order)."""
    eye = np.zeros((kh, kw, c, c * kh * kw), dtype.np_dtype)
    for ch in range(c):
        for i in range(kh):
            for j in range(kw):
                eye[i, j, ch, ch * kh * kw + i * kw + j] = 1
    return tw.constant(eye)


def unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    """Sliding ``kernel_size`` patches of ``[N, C, H, W]`` as columns: ``[N, C*kh*kw, L]`` (PyTorch's unfold)."""
    x = _f(x)
    kh, kw = _ints(kernel_size, 2)
    ph, pw = _ints(padding, 2)
    n, c = x.shape.as_list()[:2]
    y = tw.transpose(x, [0, 2, 3, 1])
    if ph or pw:
        y = tw.pad(y, [[0, 0], [ph, ph], [pw, pw], [0, 0]])
    y = tw.nn.convolution(y, _patch_kernel(c, kh, kw, x.dtype), strides=_ints(stride, 2), padding="VALID",
                          dilations=_ints(dilation, 2))
    return tw.transpose(tw.reshape(y, [-1, y.shape.as_list()[1] * y.shape.as_list()[2], c * kh * kw]), [0, 2, 1])


def fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """The adjoint of :func:`unfold`: columns ``[N, C*kh*kw, L]`` summed back into ``[N, C, H, W]``."""
    x = _f(x)
    kh, kw = _ints(kernel_size, 2)
    ph, pw = _ints(padding, 2)
    (sh, sw), (dh, dw) = _ints(stride, 2), _ints(dilation, 2)
    oh, ow = _ints(output_size, 2)
    ck = x.shape.as_list()[1]
    c = ck // (kh * kw)
    rows = (oh + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    cols = (ow + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    y = tw.reshape(tw.transpose(x, [0, 2, 1]), [-1, rows, cols, ck])
    full = tw.concat([tw.shape(y)[:1], tw.constant([oh + 2 * ph, ow + 2 * pw, c], tw.int32)], 0)
    out = tw.nn.conv_transpose(y, _patch_kernel(c, kh, kw, x.dtype), full, [sh, sw], "VALID", dilations=[dh, dw])
    out = out[:, ph:ph + oh, pw:pw + ow, :]
    return tw.transpose(out, [0, 3, 1, 2])


# ---- encodings -----------------------------------------------------------------------------------------
def one_hot(x, num_classes, axis=-1, dtype=None, sparse=False):
    if sparse:
        raise ValueError("one_hot: sparse=True needs sparse tensors, which tensorweave does not have")
    idx = cast_to(x, "int32")
    return tw.one_hot(idx, int(num_classes), axis=axis, dtype=standardize(dtype) or floatx())


def multi_hot(inputs, num_classes=None, axis=-1, dtype=None, sparse=False, **kwargs):
    num_classes = kwargs.pop("num_tokens", num_classes)
    if num_classes is None:
        raise ValueError("multi_hot: num_classes is required")
    x = to_tensor(inputs)
    oh = one_hot(x, num_classes, axis=axis, dtype=dtype, sparse=sparse)
    return tw.reduce_max(oh, axis=1 if x.shape.rank > 1 else 0)


# ---- losses --------------------------------------------------------------------------------------------
def binary_crossentropy(target, output, from_logits=False):
    t, o = promote(target, output, extra=(float,))
    if from_logits:
        return tw.nn.sigmoid_cross_entropy_with_logits(labels=t, logits=o)
    eps = _epsilon()
    o = tw.clip_by_value(o, eps, 1.0 - eps)
    return -(t * tw.log(o) + (1 - t) * tw.log(1 - o))


def categorical_crossentropy(target, output, from_logits=False, axis=-1):
    t, o = promote(target, output, extra=(float,))
    if from_logits:
        return -tw.reduce_sum(t * tw.nn.log_softmax(o, axis=axis), axis=axis)
    o = o / tw.reduce_sum(o, axis=axis, keepdims=True)
    eps = _epsilon()
    o = tw.clip_by_value(o, eps, 1.0 - eps)
    return -tw.reduce_sum(t * tw.log(o), axis=axis)


def sparse_categorical_crossentropy(target, output, from_logits=False, axis=-1):
    o = _f(output)
    t = cast_to(target, "int32")
    if t.shape.rank == o.shape.rank and t.shape.as_list()[-1] == 1:
        t = tw.squeeze(t, -1)
    if axis != -1 and axis != o.shape.rank - 1:
        o = tw.transpose(o, [i for i in range(o.shape.rank) if i != axis % o.shape.rank] + [axis % o.shape.rank])
    if from_logits:
        logp = tw.nn.log_softmax(o, axis=-1)
    else:
        o = o / tw.reduce_sum(o, axis=-1, keepdims=True)
        eps = _epsilon()
        logp = tw.log(tw.clip_by_value(o, eps, 1.0 - eps))
    return -tw.reduce_sum(logp * tw.one_hot(t, o.shape.as_list()[-1], dtype=o.dtype), axis=-1)


def ctc_loss(target, output, target_length, output_length, mask_index=0):
    """CTC negative log-likelihood per sample: ``target`` ``[B, S]`` label ids, ``output`` ``[B, T, C]``
    logits, ``mask_index`` the blank class. The forward (alpha) recursion in log space over the
    static ``T`` steps, differentiable through autodiff."""
    logits = _f(output)
    logp = tw.nn.log_softmax(logits, axis=-1)
    tgt = cast_to(target, "int32")
    tl = cast_to(target_length, "int32")
    ol = cast_to(output_length, "int32")
    t_steps = logits.shape.as_list()[1]
    s = tgt.shape.as_list()[1]
    n_states = 2 * s + 1
    blank = tw.fill(tw.shape(tgt), tw.constant(int(mask_index)))
    ext = tw.reshape(tw.stack([blank, tgt], axis=2), [-1, 2 * s])
    ext = tw.concat([ext, blank[:, :1]], 1)                                      # [B, 2S+1]
    emit = tw.gather(logp, ext, axis=2, batch_dims=1)                           # [B, T, 2S+1]
    neg = tw.cast(-1e30, logp.dtype)
    prev2 = tw.concat([tw.fill(tw.shape(ext[:, :2]), tw.constant(-1)), ext[:, :-2]], 1)
    skip = tw.logical_and(tw.not_equal(ext, int(mask_index)), tw.not_equal(ext, prev2))
    state = tw.range(n_states)
    alpha = tw.where(tw.less(state, 2)[None, :], emit[:, 0], tw.zeros_like(emit[:, 0]) + neg)
    for t in range(1, t_steps):
        pad1 = tw.concat([tw.zeros_like(alpha[:, :1]) + neg, alpha[:, :-1]], 1)
        pad2 = tw.concat([tw.zeros_like(alpha[:, :2]) + neg, alpha[:, :-2]], 1)
        pad2 = tw.where(skip, pad2, tw.zeros_like(pad2) + neg)
        new = tw.reduce_logsumexp(tw.stack([alpha, pad1, pad2], 0), axis=0) + emit[:, t]
        alpha = tw.where(tw.less(t, ol)[:, None], new, alpha)
    last = 2 * tl                                                                  # the final blank
    ends = tw.logical_or(tw.equal(state[None, :], last[:, None]), tw.equal(state[None, :], last[:, None] - 1))
    return -tw.reduce_logsumexp(tw.where(ends, alpha, tw.zeros_like(alpha) + neg), axis=1)


def ctc_decode(inputs, sequence_lengths, strategy="greedy", beam_width=100, top_paths=1, merge_repeated=True,
               mask_index=0):
    """Greedy CTC decoding: ``(decoded [1, B, T]`` padded with -1, ``scores [B, 1])`` (eager: the decoded
    lengths depend on the values). The score is minus the sum of each step's largest logit, the value
    Keras passes on from TensorFlow's greedy decoder."""
    if strategy != "greedy":
        raise ValueError(f"ctc_decode: strategy={strategy!r} is not available in tensorweave; use 'greedy'")
    logits = _f(inputs)
    best = tw.argmax(logits, axis=-1, output_type=tw.int32).numpy()
    score = -tw.reduce_max(logits, axis=-1).numpy()
    lengths = np.asarray(to_tensor(sequence_lengths).numpy()).astype(int)
    b, t_steps = best.shape
    out = np.full((1, b, t_steps), -1, np.int32)
    logs = np.zeros((b, 1), score.dtype)
    for i in range(b):
        n = lengths[i]
        seq, prev = [], None
        for c in best[i, :n]:
            if not (merge_repeated and c == prev) and c != mask_index:
                seq.append(c)
            prev = c
        out[0, i, :len(seq)] = seq
        logs[i, 0] = score[i, :n].sum()
    return tw.constant(out), tw.constant(logs)


# ---- normalization ---------------------------------------------------------------------------------------
def moments(x, axes, keepdims=False, synchronized=False):
    x = to_tensor(x)
    low = x.dtype.name in ("float16", "bfloat16")
    xf = tw.cast(x, tw.float32) if low else _f(x)
    axes = [axes] if np.ndim(axes) == 0 else list(axes)
    mean = tw.reduce_mean(xf, axis=axes, keepdims=True)
    var = tw.reduce_mean(tw.square(xf - tw.stop_gradient(mean)), axis=axes, keepdims=True)
    if not keepdims:
        mean, var = tw.squeeze(mean, axes), tw.squeeze(var, axes)
    if low:
        mean, var = tw.cast(mean, x.dtype), tw.cast(var, x.dtype)
    return mean, var


def _along(v, x, axis):
    v = cast_to(v, x.dtype)
    r = x.shape.rank
    if v.shape.rank == 1 and r > 1:
        shape = [1] * r
        shape[axis % r] = -1
        v = tw.reshape(v, shape)
    return v


def batch_normalization(x, mean, variance, axis, offset=None, scale=None, epsilon=1e-3):
    x = _f(x)
    inv = tw.rsqrt(_along(variance, x, axis) + epsilon)
    if scale is not None:
        inv = inv * _along(scale, x, axis)
    out = (x - _along(mean, x, axis)) * inv
    if offset is not None:
        out = out + _along(offset, x, axis)
    return out


def normalize(x, axis=-1, order=2, epsilon=None):
    x = _f(x)
    eps = _epsilon() if epsilon is None else epsilon
    if order == 2:
        return tw.nn.l2_normalize(x, axis=axis, epsilon=eps * eps)
    norm = tw.norm(x, ord=order, axis=axis, keepdims=True)
    return x / tw.maximum(norm, eps)


def layer_normalization(x, gamma=None, beta=None, axis=-1, epsilon=None, **kwargs):
    """Keras 3's: ``rms_scaling=True`` (deprecated there) is ``x * rsqrt(var(x) + eps) * gamma``
    (the centred variance, an uncentred ``x``, ``beta`` ignored)."""
    rms_scaling = kwargs.pop("rms_scaling", False)
    if rms_scaling:     # Keras warns so too
        warnings.warn("layer_normalization(rms_scaling=True) is deprecated (as in Keras 3): it scales x by the "
                      "variance, not the root mean square; use keras.ops.rms_normalization for RMS normalization")
    x = _f(x)
    eps = _epsilon() if epsilon is None else epsilon
    axes = [axis] if np.ndim(axis) == 0 else list(axis)
    mean = tw.reduce_mean(x, axis=axes, keepdims=True)
    var = tw.reduce_mean(tw.square(x - mean), axis=axes, keepdims=True)
    out = (x if rms_scaling else x - mean) * tw.rsqrt(var + eps)
    if gamma is not None:
        out = out * cast_to(gamma, x.dtype)
    if beta is not None and not rms_scaling:
        out = out + cast_to(beta, x.dtype)
    return out


def rms_normalization(x, scale=None, axis=-1, epsilon=None):
    x = _f(x)
    eps = _epsilon() if epsilon is None else epsilon
    out = x * tw.rsqrt(tw.reduce_mean(tw.square(x), axis=axis, keepdims=True) + eps)
    return out if scale is None else out * cast_to(scale, x.dtype)


def psnr(x1, x2, max_val):
    a, b = promote(x1, x2, extra=(float,))
    mse = tw.reduce_mean(tw.square(a - b))
    ln10 = np.log(10.0)
    return 20 * tw.log(cast_to(max_val, a.dtype)) / ln10 - 10 * tw.log(mse) / ln10


# ---- attention -----------------------------------------------------------------------------------------
def dot_product_attention(query, key, value, bias=None, mask=None, scale=None, is_causal=False,
                          flash_attention=None, attn_logits_soft_cap=None):
    """Softmax attention over ``[batch, seq, heads, head_dim]`` tensors (Keras' layout); ``key``/``value``
    may have fewer heads than ``query`` (grouped-query attention)."""
    q, k, v = promote(query, key, value, extra=(float,))
    if flash_attention:
        raise ValueError("dot_product_attention: flash_attention is not available in tensorweave; pass None")
    h = q.shape.as_list()[-1]
    nq, nk = q.shape.as_list()[-2], k.shape.as_list()[-2]
    if nq != nk:
        rep = nq // nk
        k = tw.repeat(k, rep, axis=2)
        v = tw.repeat(v, rep, axis=2)
    s = (1.0 / np.sqrt(h)) if scale is None else float(scale)
    logits = tw.einsum("btnh,bsnh->bnts", q, k) * s
    if attn_logits_soft_cap is not None:
        c = float(attn_logits_soft_cap)
        logits = tw.tanh(logits / c) * c
    if bias is not None:
        logits = logits + cast_to(bias, logits.dtype)
    keep = None
    if mask is not None:
        keep = cast_to(mask, "bool")
    if is_causal:
        t, sl = q.shape.as_list()[1], k.shape.as_list()[1]
        causal = tw.constant(np.tril(np.ones((t, sl), bool)))
        keep = causal if keep is None else tw.logical_and(keep, causal)
    if keep is not None:
        big = float(np.finfo(logits.dtype.np_dtype).min) / 2 if is_float(logits.dtype) else -1e9
        logits = tw.where(keep, logits, tw.fill(tw.shape(logits), tw.cast(big, logits.dtype)))
    probs = tw.nn.softmax(logits, axis=-1)
    return tw.einsum("bnts,bsnh->btnh", probs, v)


export(globals(), skip={"floatx", "is_float", "promote", "result_type", "standardize", "cast_to", "to_tensor",
                        "export"})
