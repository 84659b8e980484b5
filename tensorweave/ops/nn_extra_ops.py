"""More of ``tf.nn``, each composed of primitives (so gradients, graphs and ``tw.function`` come for
free): ``crelu``, ``depth_to_space``/``space_to_depth``, ``space_to_batch``/``batch_to_space``,
local response normalization, moments from sufficient statistics, ``compute_average_loss``,
``max_pool_with_argmax``, morphological ``dilation2d``/``erosion2d``, ``approx_max_k``,
``batch_norm_with_global_normalization`` and the depthwise backprops.

Window ops here (argmax pooling, dilation) gather each window offset with a strided slice of the
input padded by ``-inf`` (TF's rule: padding never wins a maximum) and reduce over the offsets.

>>> import tensorweave as tw
>>> tw.nn.crelu(tw.constant([-1.0, 2.0])).numpy()
array([0., 2., 1., 0.], dtype=float32)
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.shape import fmt
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import nn_ops as N
from tensorweave.ops import reduce_ops as R
from tensorweave.ops import indexing_ops as I
from tensorweave.ops.indexing_ops import pad
from tensorweave.ops.sort_ops import cumsum, top_k

__all__ = ["crelu", "depth_to_space", "space_to_depth", "space_to_batch", "space_to_batch_nd", "batch_to_space",
           "required_space_to_batch_paddings", "local_response_normalization", "lrn", "sufficient_statistics",
           "normalize_moments", "weighted_moments", "compute_average_loss", "scale_regularization_loss",
           "max_pool_with_argmax", "dilation2d", "erosion2d", "approx_max_k", "approx_min_k", "approx_top_k",
           "batch_norm_with_global_normalization", "depthwise_conv2d_backprop_input",
           "depthwise_conv2d_backprop_filter", "atrous_conv2d_transpose"]

_ct = convert_to_tensor


def crelu(features, name=None, axis=-1):
    """``concat([relu(x), relu(-x)], axis)``: both signs of the input as separate channels."""
    x = _ct(features)
    return A.concat([M.relu(x), M.relu(-x)], axis, name=name)


def _block(block_size, op):
    b = int(block_size)
    if b < 2:
        raise ValueError(f"{op}: block_size must be at least 2, got {block_size}")
    return b


def _nhwc(x, data_format, op):
    if x.shape.rank != 4:
        raise ValueError(f"{op}: input must be 4-D, got shape {fmt(x.shape)}")
    if data_format not in ("NHWC", "NCHW"):
        raise ValueError(f"{op}: data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
    return A.transpose(x, [0, 2, 3, 1]) if data_format == "NCHW" else x


def _back(y, data_format):
    return A.transpose(y, [0, 3, 1, 2]) if data_format == "NCHW" else y


def depth_to_space(input, block_size, data_format="NHWC", name=None):
    """Moves depth into ``block_size x block_size`` spatial blocks: ``[n, h, w, c]`` ->
    ``[n, h * b, w * b, c / b**2]`` (depth index ``(i * b + j) * c' + k`` goes to block offset ``(i, j)``)."""
    b = _block(block_size, "depth_to_space")
    x = _nhwc(_ct(input), data_format, "depth_to_space")
    _, h, w, c = x.shape.as_list()
    if c is not None and c % (b * b):
        raise ValueError(f"depth_to_space: the depth {c} must be divisible by block_size**2 = {b * b}; "
                         f"input shape {fmt(x.shape)}")
    s = A.shape(x)
    y = A.reshape(x, A.stack([s[0], s[1], s[2], b, b, s[3] // (b * b)]))
    y = A.transpose(y, [0, 1, 3, 2, 4, 5])
    y = A.reshape(y, A.stack([s[0], s[1] * b, s[2] * b, s[3] // (b * b)]), name=name)
    return _back(y, data_format)


def space_to_depth(input, block_size, data_format="NHWC", name=None):
    """The inverse of :func:`depth_to_space`: each ``b x b`` block becomes ``b**2`` times the depth."""
    b = _block(block_size, "space_to_depth")
    x = _nhwc(_ct(input), data_format, "space_to_depth")
    _, h, w, c = x.shape.as_list()
    if (h is not None and h % b) or (w is not None and w % b):
        raise ValueError(f"space_to_depth: height {h} and width {w} must be divisible by block_size {b}; "
                         f"input shape {fmt(x.shape)}")
    s = A.shape(x)
    y = A.reshape(x, A.stack([s[0], s[1] // b, b, s[2] // b, b, s[3]]))
    y = A.transpose(y, [0, 1, 3, 2, 4, 5])
    y = A.reshape(y, A.stack([s[0], s[1] // b, s[2] // b, s[3] * b * b]), name=name)
    return _back(y, data_format)


def _static_ints(v, what, op):
    from tensorweave.core.graph import constant_value
    c = constant_value(_ct(v)) if not isinstance(v, (list, tuple, np.ndarray)) else np.asarray(v)
    if c is None:
        raise ValueError(f"{op}: {what} must be known when the graph is built")
    return np.asarray(c, np.int64)


def space_to_batch_nd(input, block_shape, paddings, name=None):
    """Zero-pads the ``M = len(block_shape)`` spatial dimensions after the batch, splits each into
    blocks and moves the block offsets into the batch: ``[n, h, w, c]`` -> ``[n * bh * bw, h' / bh,
    w' / bw, c]``, batch index ``(i * bw + j) * n + b`` for block offset ``(i, j)``."""
    x = _ct(input)
    bs = _static_ints(block_shape, "block_shape", "space_to_batch_nd").reshape(-1)
    pads = _static_ints(paddings, "paddings", "space_to_batch_nd").reshape(-1, 2)
    m = len(bs)
    if pads.shape[0] != m:
        raise ValueError(f"space_to_batch_nd: paddings must be [{m}, 2] for block_shape {bs.tolist()}, "
                         f"got {pads.tolist()}")
    if (bs < 1).any() or (pads < 0).any():
        raise ValueError(f"space_to_batch_nd: block_shape must be >= 1 and paddings >= 0, got {bs.tolist()}, "
                         f"{pads.tolist()}")
    rank = x.shape.rank
    dims = x.shape.as_list()
    for i in range(m):
        n = dims[1 + i]
        if n is not None and (n + pads[i].sum()) % bs[i]:
            raise ValueError(f"space_to_batch_nd: padded spatial dimension {i + 1} ({n} + {pads[i].tolist()}) "
                             f"is not divisible by block_shape[{i}] = {bs[i]}; input shape {fmt(x.shape)}")
    xp = pad(x, [[0, 0]] + pads.tolist() + [[0, 0]] * (rank - 1 - m))
    s = A.shape(xp)
    rest = [s[1 + m + k] for k in range(rank - 1 - m)]
    split = [s[0]]
    for i in range(m):
        split += [s[1 + i] // int(bs[i]), int(bs[i])]
    y = A.reshape(xp, A.stack(split + rest))
    # [n, h1, b1, h2, b2, ..., rest] -> [b1, b2, ..., n, h1, h2, ..., rest]
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + list(range(1 + 2 * m, 1 + 2 * m + len(rest)))
    y = A.transpose(y, perm)
    out = [s[0] * int(np.prod(bs))] + [s[1 + i] // int(bs[i]) for i in range(m)] + rest
    return A.reshape(y, A.stack(out), name=name)


def space_to_batch(input, block_shape, paddings, name=None):
    """TF2's ``tf.space_to_batch`` (= :func:`space_to_batch_nd`)."""
    return space_to_batch_nd(input, block_shape, paddings, name=name)


def batch_to_space(input, block_shape, crops, name=None):
    """The inverse of :func:`space_to_batch_nd`: moves batch blocks back into the spatial dimensions
    and removes ``crops`` from their ends."""
    x = _ct(input)
    bs = _static_ints(block_shape, "block_shape", "batch_to_space").reshape(-1)
    cr = _static_ints(crops, "crops", "batch_to_space").reshape(-1, 2)
    m = len(bs)
    if cr.shape[0] != m or (bs < 1).any() or (cr < 0).any():
        raise ValueError(f"batch_to_space: crops must be [{m}, 2] of values >= 0 and block_shape >= 1, got "
                         f"block_shape {bs.tolist()}, crops {cr.tolist()}")
    prod = int(np.prod(bs))
    n = x.shape.as_list()[0]
    if n is not None and n % prod:
        raise ValueError(f"batch_to_space: the batch {n} must be divisible by prod(block_shape) = {prod}; "
                         f"input shape {fmt(x.shape)}")
    rank = x.shape.rank
    s = A.shape(x)
    rest = [s[1 + m + k] for k in range(rank - 1 - m)]
    y = A.reshape(x, A.stack([int(b) for b in bs] + [s[0] // prod] + [s[1 + i] for i in range(m)] + rest))
    # [b1, ..., bm, n, h1, ..., hm, rest] -> [n, h1, b1, ..., hm, bm, rest]
    perm = [m]
    for i in range(m):
        perm += [m + 1 + i, i]
    perm += list(range(2 * m + 1, 2 * m + 1 + len(rest)))
    y = A.transpose(y, perm)
    y = A.reshape(y, A.stack([s[0] // prod] + [s[1 + i] * int(bs[i]) for i in range(m)] + rest))
    begin = [0] + [int(c[0]) for c in cr] + [0] * len(rest)
    ys = A.shape(y)
    size = [-1] + [ys[1 + i] - int(cr[i][0]) - int(cr[i][1]) for i in range(m)] + [-1] * len(rest)
    return I.slice(y, begin, A.stack(size), name=name)


def required_space_to_batch_paddings(input_shape, block_shape, base_paddings=None, name=None):
    """``(paddings, crops)`` that make ``input_shape`` (plus ``base_paddings``) divisible by
    ``block_shape``: the extra padding goes at the end, and crops remove exactly it."""
    shp = _static_ints(input_shape, "input_shape", "required_space_to_batch_paddings").reshape(-1)
    bs = _static_ints(block_shape, "block_shape", "required_space_to_batch_paddings").reshape(-1)
    base = (np.zeros((len(bs), 2), np.int64) if base_paddings is None else
            _static_ints(base_paddings, "base_paddings", "required_space_to_batch_paddings").reshape(-1, 2))
    full = shp + base[:, 0] + base[:, 1]
    extra = (bs - full % bs) % bs
    paddings = np.stack([base[:, 0], base[:, 1] + extra], 1)
    crops = np.stack([np.zeros_like(extra), extra], 1)
    return (A.constant(paddings.astype(np.int32), name=name), A.constant(crops.astype(np.int32)))


def local_response_normalization(input, depth_radius=5, bias=1.0, alpha=1.0, beta=0.5, name=None):
    """``x / (bias + alpha * sum(x[..., d - r:d + r + 1] ** 2)) ** beta`` over the last axis of a
    4-D input (TF's LRN; the window is clipped at the ends)."""
    x = _ct(input)
    if x.shape.rank != 4:
        raise ValueError(f"local_response_normalization: input must be 4-D, got shape {fmt(x.shape)}")
    if not x.dtype.is_floating:
        raise TypeError(f"local_response_normalization: input must be float, got {x.dtype.name}")
    r = int(depth_radius)
    sq = M.square(x)
    # a cumulative sum padded by one zero: window sums are differences of two entries
    c = A.concat([A.zeros_like(sq[..., :1]), cumsum(sq, axis=-1)], -1)
    d = x.shape.as_list()[-1]
    if d is None:
        raise ValueError("local_response_normalization: the depth must be known when the graph is built")
    hi = [min(i + r + 1, d) for i in range(d)]
    lo = [max(i - r, 0) for i in range(d)]
    window = A.gather(c, hi, axis=3) - A.gather(c, lo, axis=3)
    scale = M.cast(bias, x.dtype) + M.cast(alpha, x.dtype) * window
    return M.multiply(x, M.pow(scale, M.cast(-beta, x.dtype)), name=name)


lrn = local_response_normalization


def sufficient_statistics(x, axes, shift=None, keepdims=False, name=None):
    """``(count, sum(x - shift), sum((x - shift)**2), shift)`` over ``axes``: what
    :func:`normalize_moments` turns into a mean and a variance."""
    x = _ct(x)
    axes = [int(a) for a in np.ravel(axes)]
    s = A.shape(x)
    count = M.cast(R.reduce_prod(A.gather(s, axes)), x.dtype)
    if shift is not None:
        shift = M.cast(_ct(shift), x.dtype)
        d = x - shift
    else:
        d = x
    m_ss = R.reduce_sum(d, axes, keepdims=keepdims)
    v_ss = R.reduce_sum(M.square(d), axes, keepdims=keepdims)
    return count, m_ss, v_ss, shift


def normalize_moments(counts, mean_ss, variance_ss, shift, name=None):
    """``(mean, variance)`` from :func:`sufficient_statistics`."""
    mean_ss = _ct(mean_ss)
    divisor = M.reciprocal(M.cast(counts, mean_ss.dtype))
    shifted = mean_ss * divisor
    mean = shifted + M.cast(shift, mean_ss.dtype) if shift is not None else shifted
    variance = M.subtract(M.cast(variance_ss, mean_ss.dtype) * divisor, M.square(shifted), name=name)
    return mean, variance


def weighted_moments(x, axes, frequency_weights, keepdims=False, name=None):
    """Mean and variance of ``x`` over ``axes`` with each element counted ``frequency_weights`` times
    (broadcast against ``x``); a zero total weight gives 0 (TF's ``div_no_nan``)."""
    x = _ct(x)
    w = M.cast(_ct(frequency_weights), x.dtype)
    axes = [int(a) for a in np.ravel(axes)]
    wsum = R.reduce_sum(w * A.ones_like(x), axes, keepdims=True)
    mean = M.div_no_nan(R.reduce_sum(w * x, axes, keepdims=True), wsum)
    var = M.div_no_nan(R.reduce_sum(w * M.square(x - mean), axes, keepdims=True), wsum)
    if not keepdims:
        mean, var = A.squeeze(mean, axes), A.squeeze(var, axes)
    return mean, var


def _num_replicas():
    return 1   # the single-device runtime; a replica context (distribute) overrides the batch size


def compute_average_loss(per_example_loss, sample_weight=None, global_batch_size=None):
    """``sum(per_example_loss * sample_weight) / global_batch_size`` (default: the first dimension
    times the replicas): the loss to minimise per replica so that summed gradients are the average."""
    loss = _ct(per_example_loss)
    if loss.shape.rank == 0:
        raise ValueError("compute_average_loss: Invalid value passed for `per_example_loss`. Expected a tensor "
                         "with at least rank 1.")
    dtype = loss.dtype
    if sample_weight is not None:
        w = M.cast(_ct(sample_weight), dtype)
        loss = M.cast(loss * A.broadcast_to(w, A.shape(loss)) if w.shape.rank else loss * w, dtype)
    if global_batch_size is None:
        global_batch_size = A.shape(loss)[0] * _num_replicas()
    else:
        g = _ct(global_batch_size)
        if g.shape.rank not in (0, None) or not g.dtype.is_integer:
            raise ValueError(f"compute_average_loss: global_batch_size must be an integer scalar, got "
                             f"{g.dtype.name} of shape {fmt(g.shape)}")
        global_batch_size = g
    return M.div_no_nan(R.reduce_sum(loss), M.cast(global_batch_size, dtype))


def scale_regularization_loss(regularization_loss):
    """The regularization loss (a tensor or a list, summed) divided by the number of replicas."""
    if isinstance(regularization_loss, (list, tuple)):
        regularization_loss = M.add_n(list(regularization_loss))
    loss = _ct(regularization_loss)
    return M.divide(loss, M.cast(_num_replicas(), loss.dtype))


# ---- window ops over -inf padded offsets -------------------------------------------------------
def _ints4(v, op, what):
    v = [int(a) for a in np.ravel(v)]
    if len(v) == 1:
        return [1, v[0], v[0], 1]
    if len(v) == 2:
        return [1, v[0], v[1], 1]
    if len(v) != 4:
        raise ValueError(f"{op}: {what} must have 1, 2 or 4 elements, got {v}")
    return v


def _offsets(x, kh, kw, sh, sw, rh, rw, padding, op):
    """``(windows, (oh, ow), (top, left))``: ``windows[k]`` is the input at window offset ``k`` (row-major
    over ``kh x kw``) for every output position, padding filled with the dtype's lowest value."""
    if x.shape.rank != 4:
        raise ValueError(f"{op}: input must be 4-D NHWC, got shape {fmt(x.shape)}")
    h, w = x.shape.as_list()[1:3]
    if h is None or w is None:
        raise ValueError(f"{op}: the height and width must be known when the graph is built")
    geo = N.spatial_geometry([h, w], [kh, kw], [sh, sw], [rh, rw], str(padding).upper())
    (oh, top, bottom), (ow, left, right) = geo
    low = -np.inf if x.dtype.is_floating else x.dtype.min
    xp = pad(x, [[0, 0], [top, bottom], [left, right], [0, 0]], constant_values=low)
    wins = []
    for i in range(kh):
        for j in range(kw):
            wins.append(xp[:, i * rh:i * rh + (oh - 1) * sh + 1:sh, j * rw:j * rw + (ow - 1) * sw + 1:sw, :])
    return wins, (oh, ow), (top, left)


def max_pool_with_argmax(input, ksize, strides, padding, data_format="NHWC", output_dtype=_dt.int64,
                         include_batch_in_index=False, name=None):
    """``(max_pool, argmax)``: each maximum's flat index ``(y * width + x) * channels + c`` in the input
    (plus ``b * height * width * channels`` with ``include_batch_in_index``); ties go to the first
    window position in row-major order."""
    if data_format != "NHWC":
        raise ValueError(f"max_pool_with_argmax: only data_format='NHWC' is supported (as TF), got {data_format!r}")
    x = _ct(input)
    _, kh, kw, _ = _ints4(ksize, "max_pool_with_argmax", "ksize")
    _, sh, sw, _ = _ints4(strides, "max_pool_with_argmax", "strides")
    wins, (oh, ow), (top, left) = _offsets(x, kh, kw, sh, sw, 1, 1, padding, "max_pool_with_argmax")
    stacked = A.stack(wins, axis=3)                                  # [n, oh, ow, k, c]
    values = N.max_pool2d(x, [kh, kw], [sh, sw], str(padding).upper(), name=name)
    k = M.cast(R.argmax(stacked, axis=3), _dt.int64)                 # first maximum
    n, h, w, c = [A.shape(x, out_type=_dt.int64)[i] for i in range(4)]
    oy = A.reshape(I.range(oh, dtype=_dt.int64) * sh - top, [1, oh, 1, 1])
    ox = A.reshape(I.range(ow, dtype=_dt.int64) * sw - left, [1, 1, ow, 1])
    y = oy + k // kw
    xx = ox + k % kw
    ch = A.reshape(I.range(c, dtype=_dt.int64), [1, 1, 1, -1])
    idx = (y * w + xx) * c + ch
    if include_batch_in_index:
        idx = idx + A.reshape(I.range(n, dtype=_dt.int64), [-1, 1, 1, 1]) * (h * w * c)
    return values, M.cast(idx, output_dtype)


def dilation2d(input, filters, strides, padding, data_format="NHWC", dilations=None, name=None):
    """Grayscale morphological dilation: ``out[b, y, x, c] = max_{i, j} input[b, y*sh + i*rh - top,
    x*sw + j*rw - left, c] + filters[i, j, c]``."""
    if data_format != "NHWC":
        raise ValueError(f"dilation2d: only data_format='NHWC' is supported, got {data_format!r}")
    x = _ct(input)
    f = M.cast(_ct(filters), x.dtype) if not isinstance(filters, type(x)) else filters
    if f.shape.rank != 3:
        raise ValueError(f"dilation2d: filters must be 3-D [height, width, depth], got shape {fmt(f.shape)}")
    kh, kw, fc = f.shape.as_list()
    if x.shape.rank == 4 and x.shape.as_list()[3] is not None and x.shape.as_list()[3] != fc:
        raise ValueError(f"dilation2d: the input depth {x.shape.as_list()[3]} must equal the filter depth {fc}")
    _, sh, sw, _ = _ints4(strides, "dilation2d", "strides")
    _, rh, rw, _ = _ints4([1] if dilations is None else dilations, "dilation2d", "dilations")
    wins, _, _ = _offsets(x, kh, kw, sh, sw, rh, rw, padding, "dilation2d")
    terms = [wins[i * kw + j] + f[i, j] for i in range(kh) for j in range(kw)]
    return R.reduce_max(A.stack(terms, axis=0), axis=0, name=name)


def erosion2d(value, filters, strides, padding, data_format="NHWC", dilations=None, name=None):
    """Grayscale morphological erosion: ``-dilation2d(-value, reverse(filters))``, with ``filters``
    reversed in both spatial dimensions (TF's definition)."""
    f = _ct(filters)
    return M.negative(dilation2d(M.negative(_ct(value)), I.reverse(f, [0, 1]), strides, padding, data_format,
                                 dilations), name=name)


def approx_max_k(operand, k, reduction_dimension=-1, recall_target=0.95, reduction_input_size_override=-1,
                 aggregate_to_topk=True, name=None):
    """``(values, indices)`` of the ``k`` largest entries along ``reduction_dimension``, computed
    exactly (recall 1, which meets any ``recall_target``; TF's CPU kernel is exact too)."""
    x = _ct(operand)
    rank = x.shape.rank
    dim = reduction_dimension % rank
    if dim != rank - 1:
        perm = [i for i in range(rank) if i != dim] + [dim]
        v, i = top_k(A.transpose(x, perm), k)
        inv = np.argsort(perm).tolist()
        return A.transpose(v, inv, name=name), A.transpose(i, inv)
    return top_k(x, k, name=name)


def approx_min_k(operand, k, reduction_dimension=-1, recall_target=0.95, reduction_input_size_override=-1,
                 aggregate_to_topk=True, name=None):
    """``(values, indices)`` of the ``k`` smallest entries along ``reduction_dimension``, ascending."""
    v, i = approx_max_k(M.negative(_ct(operand)), k, reduction_dimension)
    return M.negative(v, name=name), i


def approx_top_k(input, k, reduction_dimension=-1, recall_target=0.95, is_max_k=True,
                 reduction_input_size_override=-1, aggregate_to_topk=True, name=None):
    """``tf.approx_top_k``: :func:`approx_max_k` (or :func:`approx_min_k` when not ``is_max_k``)."""
    fn = approx_max_k if is_max_k else approx_min_k
    return fn(input, k, reduction_dimension, recall_target, reduction_input_size_override, aggregate_to_topk,
              name=name)


def batch_norm_with_global_normalization(input, mean, variance, beta, gamma, variance_epsilon,
                                         scale_after_normalization, name=None):
    """TF's old batch normalization: ``gamma`` applies only with ``scale_after_normalization``."""
    return N.batch_normalization(input, mean, variance, beta, gamma if scale_after_normalization else None,
                                 variance_epsilon, name=name)


def _depthwise_filter_groups(filter_sizes):
    kh, kw, c, mult = (int(v) for v in filter_sizes)
    return kh, kw, c, mult


def depthwise_conv2d_backprop_input(input_sizes, filter, out_backprop, strides, padding, data_format="NHWC",
                                    dilations=None, name=None):
    """The gradient of ``depthwise_conv2d`` with respect to its input (of shape ``input_sizes``)."""
    f = _ct(filter)
    kh, kw, c, mult = f.shape.as_list()
    return N.conv2d_backprop_input(input_sizes, A.reshape(f, [kh, kw, 1, c * mult]), out_backprop, strides,
                                   padding, data_format=data_format, dilations=dilations, name=name)


def depthwise_conv2d_backprop_filter(input, filter_sizes, out_backprop, strides, padding, data_format="NHWC",
                                     dilations=None, name=None):
    """The gradient of ``depthwise_conv2d`` with respect to its filter (of shape ``filter_sizes``)."""
    kh, kw, c, mult = _depthwise_filter_groups(_static_ints(filter_sizes, "filter_sizes",
                                                            "depthwise_conv2d_backprop_filter"))
    g = N.conv2d_backprop_filter(input, [kh, kw, 1, c * mult], out_backprop, strides, padding,
                                 data_format=data_format, dilations=dilations)
    return A.reshape(g, [kh, kw, c, mult], name=name)


def atrous_conv2d_transpose(value, filters, output_shape, rate, padding, name=None):
    """The transpose of :func:`tw.nn.atrous_conv2d`: ``conv2d_transpose`` with ``dilations=rate``."""
    if int(rate) < 1:
        raise ValueError(f"atrous_conv2d_transpose: rate must be >= 1, got {rate}")
    return N.conv2d_transpose(value, filters, output_shape, 1, padding, dilations=int(rate), name=name)
