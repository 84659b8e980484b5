"""Neural-network ops (``tw.nn``): softmax and losses, bias_add, convolution, pooling,
normalization and embeddings, with TensorFlow's names, signatures and semantics.

Primitives (with kernels, shape rules and gradients here): ``Softmax``, ``LogSoftmax``, the
two softmax cross-entropies, ``BiasAdd``, ``Conv{1,2,3}D`` with their input and filter
backprops (each differentiable through the others, so second order works), ``MaxPool`` and
``AvgPool`` (N-d) with their gradients. Everything else is composed of primitives.

>>> import tensorweave as tw
>>> x = tw.ones([1, 4, 4, 1])
>>> tw.nn.conv2d(x, tw.ones([3, 3, 1, 1]), strides=1, padding="SAME").numpy()[0, :, :, 0]
array([[4., 6., 6., 4.],
       [6., 9., 9., 6.],
       [6., 9., 9., 6.],
       [4., 6., 6., 4.]], dtype=float32)
"""
import math

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules
from tensorweave.core.convert import convert_like, convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.graph import SymbolicTensor, constant_value
from tensorweave.core.registry import get_op, register_op
from tensorweave.core.sbp import B, P, S, Signature
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.core.tensor import Tensor
from tensorweave.ops import math_ops as m
from tensorweave.ops import rules, softmax_grad_ops
from tensorweave.ops.arguments import int_argument
from tensorweave.ops.batch_norm_ops import batch_norm_training
from tensorweave.ops.array_ops import (expand_dims, gather, identity, reshape, shape, size, stack,
                                       zeros_like)
from tensorweave.ops.reduce_ops import reduce_mean, reduce_sum

__all__ = [
    "softmax", "log_softmax", "softmax_cross_entropy_with_logits", "softmax_cross_entropy_with_logits_v2",
    "sparse_softmax_cross_entropy_with_logits", "sigmoid_cross_entropy_with_logits",
    "weighted_cross_entropy_with_logits", "log_poisson_loss", "l2_loss", "l2_normalize",
    "bias_add", "xw_plus_b",
    "conv1d", "conv2d", "conv3d", "convolution", "depthwise_conv2d", "separable_conv2d", "atrous_conv2d",
    "conv1d_transpose", "conv2d_transpose", "conv3d_transpose", "conv_transpose",
    "conv2d_backprop_input", "conv2d_backprop_filter",
    "max_pool", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool", "avg_pool1d", "avg_pool2d",
    "avg_pool3d", "pool",
    "batch_normalization", "fused_batch_norm", "embedding_lookup",
]

_ct = convert_to_tensor
_FLOAT = rules.FLOAT


def _float_input(t, op, what="input"):
    if t.dtype not in _FLOAT:
        raise TypeError(f"{op} does not support dtype {t.dtype.name} for its {what}; expected one of: "
                        f"{rules.dtype_names(_FLOAT)}")
    return t.dtype


def _same_float(ts, op, what="inputs"):
    rules.same_dtype(ts, what)
    return _float_input(ts[0], op)


def _like(value, x):
    return value if isinstance(value, Tensor) else convert_like(value, x)


def _dense(g):
    """Gradients may arrive as IndexedSlices; primitives take dense tensors."""
    return g if isinstance(g, Tensor) else _ct(g)


# ---- softmax ------------------------------------------------------------------------------------
def _infer_softmax(inputs, attrs):
    x = inputs[0]
    _float_input(x, "Softmax")
    r = x.shape.rank
    if r == 0:
        raise ValueError("softmax needs a tensor of rank >= 1, got a scalar")
    rules.normalize_axis(attrs["axis"], r)
    return x.shape, x.dtype


def _softmax_grad(op, g):
    y, g = op.outputs[0], _dense(g)
    axis = op.attrs["axis"]
    if softmax_grad_ops.FUSED:      # one op, one pass per row (softmax_grad_ops)
        return [execute(get_op("SoftmaxGrad"), [y, g], {"axis": axis, "scale": 1.0})]
    return [y * (g - reduce_sum(g * y, axis=axis, keepdims=True))]


def _log_softmax_grad(op, g):
    axis, g = op.attrs["axis"], _dense(g)
    return [g - m.exp(op.outputs[0]) * reduce_sum(g, axis=axis, keepdims=True)]


register_op("Softmax", infer=_infer_softmax, grad=_softmax_grad)
register_op("LogSoftmax", infer=_infer_softmax, grad=_log_softmax_grad)


def softmax(logits, axis=None, name=None):
    """``exp(logits) / reduce_sum(exp(logits), axis)``, computed stably (default axis: -1).

    >>> import tensorweave as tw
    >>> tw.nn.softmax([0.0, 0.0]).numpy()
    array([0.5, 0.5], dtype=float32)
    """
    axis = -1 if axis is None else int_argument(axis, "softmax", "axis")
    return execute(get_op("Softmax"), [_ct(logits)], {"axis": axis}, name)


def log_softmax(logits, axis=None, name=None):
    """``logits - log(reduce_sum(exp(logits), axis))``, computed stably (default axis: -1).

    >>> import tensorweave as tw
    >>> round(float(tw.nn.log_softmax([1.0, 1.0])[0]), 4)
    -0.6931
    """
    axis = -1 if axis is None else int_argument(axis, "log_softmax", "axis")
    return execute(get_op("LogSoftmax"), [_ct(logits)], {"axis": axis}, name)


# ---- cross-entropies ----------------------------------------------------------------------------
def _infer_xent(inputs, attrs):
    logits, labels = inputs
    d = _same_float([logits, labels], "softmax_cross_entropy_with_logits", "logits and labels")
    if not logits.shape.is_compatible_with(labels.shape):
        raise ValueError(f"logits and labels must have the same shape, got logits {fmt(logits.shape)} "
                         f"and labels {fmt(labels.shape)}")
    s = logits.shape.merge_with(labels.shape)
    if s.rank is None:
        return TensorShape(None), d
    if s.rank == 0:
        raise ValueError("logits must have rank >= 1, got a scalar")
    axis = rules.normalize_axis(attrs["axis"], s.rank)
    dims = s.as_list()
    del dims[axis]
    return TensorShape(dims), d


def _xent_grad(op, g):
    logits, labels = op.inputs
    axis = op.attrs["axis"]
    ge = expand_dims(_dense(g), axis)
    return [ge * (softmax(logits, axis) - labels), -ge * log_softmax(logits, axis)]


register_op("SoftmaxCrossEntropyWithLogits", infer=_infer_xent, grad=_xent_grad)


def softmax_cross_entropy_with_logits(labels, logits, axis=-1, name=None):
    """Cross-entropy between ``labels`` (a distribution over ``axis``) and ``softmax(logits)``.

    As TF2: the gradient flows into ``labels`` too (wrap them in ``tw.stop_gradient`` if not wanted).

    >>> import tensorweave as tw
    >>> tw.nn.softmax_cross_entropy_with_logits([[0.0, 1.0]], [[0.0, 0.0]]).numpy().round(4)
    array([0.6931], dtype=float32)
    """
    logits = _ct(logits)
    labels = _like(labels, logits)
    return execute(get_op("SoftmaxCrossEntropyWithLogits"), [logits, labels], {"axis": int(axis)}, name)


softmax_cross_entropy_with_logits_v2 = softmax_cross_entropy_with_logits


def _infer_sparse_xent(inputs, attrs):
    logits, labels = inputs
    d = _float_input(logits, "sparse_softmax_cross_entropy_with_logits", "logits")
    rules.check_dtype(labels, (_dt.int32, _dt.int64), "sparse_softmax_cross_entropy_with_logits", "labels")
    lr, yr = logits.shape.rank, labels.shape.rank
    if lr == 0:
        raise ValueError("logits must have rank >= 1 (the last dimension holds the classes), got a scalar")
    if lr is not None and yr is not None:
        if yr != lr - 1:
            raise ValueError(f"Rank mismatch: rank of labels (received {yr}) should equal rank of logits minus 1 "
                             f"(received {lr}); labels {fmt(labels.shape)}, logits {fmt(logits.shape)}")
        if not TensorShape(logits.shape.as_list()[:-1]).is_compatible_with(labels.shape):
            raise ValueError(f"labels shape {fmt(labels.shape)} must equal logits shape {fmt(logits.shape)} "
                             "without its last dimension")
    if lr is None:
        return labels.shape, d
    out = TensorShape(logits.shape.as_list()[:-1])
    return (out if yr is None else out.merge_with(labels.shape)), d


def _sparse_xent_grad(op, g):
    logits, labels = op.inputs
    return [expand_dims(_dense(g), -1) * execute(get_op("SparseSoftmaxCrossEntropyGrad"), [logits, labels]), None]


def _sparse_xent_grad_grad(op, g):
    # The op is softmax(logits) - one_hot(labels); only the softmax depends on logits.
    p, g = softmax(op.inputs[0]), _dense(g)
    return [p * (g - reduce_sum(g * p, axis=-1, keepdims=True)), None]


register_op("SparseSoftmaxCrossEntropyWithLogits", infer=_infer_sparse_xent, grad=_sparse_xent_grad)
register_op("SparseSoftmaxCrossEntropyGrad", infer=lambda i, a: (i[0].shape, _infer_sparse_xent(i, a)[1]),
            grad=_sparse_xent_grad_grad)


def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """Cross-entropy of ``softmax(logits)`` against integer class ``labels`` (``[...]``, logits ``[..., classes]``).

    A label outside ``[0, classes)`` raises ``InvalidArgumentError`` when the op runs.

    >>> import tensorweave as tw
    >>> tw.nn.sparse_softmax_cross_entropy_with_logits([1], [[0.0, 0.0]]).numpy().round(4)
    array([0.6931], dtype=float32)
    """
    if labels is None or logits is None:
        raise ValueError("sparse_softmax_cross_entropy_with_logits needs both labels= and logits=")
    logits = _ct(logits)
    labels = _ct(labels, dtype_hint=_dt.int32)
    return execute(get_op("SparseSoftmaxCrossEntropyWithLogits"), [logits, labels], {}, name)


def _logits_labels(labels, logits, op):
    if labels is None or logits is None:
        raise ValueError(f"{op} needs both labels= and logits=")
    logits = _ct(logits)
    labels = _like(labels, logits)
    _same_float([logits, labels], op, "logits and labels")
    if not logits.shape.is_compatible_with(labels.shape):
        raise ValueError(f"{op}: logits and labels must have the same shape ({fmt(logits.shape)} vs "
                         f"{fmt(labels.shape)})")
    return labels, logits


def _softplus_neg_abs(x):
    """``(max(x, 0), log1p(exp(-|x|)))`` with branches chosen by ``where`` so that the gradient
    at exactly 0 is the true one (``abs`` would give 0 there)."""
    cond = x >= 0
    zeros = zeros_like(x)
    return m.where(cond, x, zeros), m.log1p(m.exp(m.where(cond, -x, x)))


def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """``labels * -log(sigmoid(logits)) + (1 - labels) * -log(1 - sigmoid(logits))``, stably:
    ``max(x, 0) - x * z + log(1 + exp(-|x|))``.

    >>> import tensorweave as tw
    >>> tw.nn.sigmoid_cross_entropy_with_logits(labels=[1.0], logits=[0.0]).numpy().round(4)
    array([0.6931], dtype=float32)
    """
    labels, logits = _logits_labels(labels, logits, "sigmoid_cross_entropy_with_logits")
    relu_logits, softplus_neg_abs = _softplus_neg_abs(logits)
    return m.add(relu_logits - logits * labels, softplus_neg_abs, name=name)


def weighted_cross_entropy_with_logits(labels, logits, pos_weight, name=None):
    """Sigmoid cross-entropy with the positive term weighted by ``pos_weight``:
    ``(1 - z) * x + (1 + (q - 1) * z) * log(1 + exp(-x))``, computed stably.

    >>> import tensorweave as tw
    >>> tw.nn.weighted_cross_entropy_with_logits([1.0], [0.0], 2.0).numpy().round(4)
    array([1.3863], dtype=float32)
    """
    labels, logits = _logits_labels(labels, logits, "weighted_cross_entropy_with_logits")
    q = _like(pos_weight, logits)
    log_weight = 1 + (q - 1) * labels
    relu_neg, softplus_neg_abs = _softplus_neg_abs(-logits)
    # log(1 + exp(-x)) = max(-x, 0) + log1p(exp(-|x|))
    return m.add((1 - labels) * logits, log_weight * (softplus_neg_abs + relu_neg), name=name)


def log_poisson_loss(targets, log_input, compute_full_loss=False, name=None):
    """Negative log-likelihood of ``targets`` under a Poisson with log-rate ``log_input``:
    ``exp(c) - z * c`` (plus the Stirling term for ``z > 1`` when ``compute_full_loss``).

    >>> import tensorweave as tw
    >>> tw.nn.log_poisson_loss([2.0], [0.0]).numpy()
    array([1.], dtype=float32)
    """
    c = _ct(log_input)
    z = _like(targets, c)
    result = m.exp(c) - c * z
    if not compute_full_loss:
        return identity(result, name=name) if name else result
    ones = m.ones_like(z)
    small = m.logical_and(z >= 0, z <= 1)
    zs = m.where(small, ones, z)  # keeps log() finite in the unselected branch (and its gradient)
    stirling = zs * m.log(zs) - zs + 0.5 * m.log(2 * math.pi * zs)
    return m.add(result, m.where(small, zeros_like(z), stirling), name=name)


def l2_loss(t, name=None):
    """``sum(t ** 2) / 2``.

    >>> import tensorweave as tw
    >>> float(tw.nn.l2_loss([1.0, 2.0]))
    2.5
    """
    t = _ct(t)
    return m.multiply(reduce_sum(m.square(t)), _like(0.5, t), name=name)


def l2_normalize(x, axis=None, epsilon=1e-12, name=None, dim=None):
    """``x / sqrt(max(sum(x ** 2, axis), epsilon))``.

    >>> import tensorweave as tw
    >>> tw.nn.l2_normalize([3.0, 4.0]).numpy()
    array([0.6, 0.8], dtype=float32)
    """
    if axis is None:
        axis = dim
    x = _ct(x)
    sq = reduce_sum(m.square(x), axis=axis, keepdims=True)
    return m.multiply(x, m.rsqrt(m.maximum(sq, _like(epsilon, sq))), name=name)


# ---- bias_add -----------------------------------------------------------------------------------
def _bias_axis(rank, data_format):
    return 1 if data_format.startswith("NC") and rank >= 2 else rank - 1


def _infer_bias_add(inputs, attrs):
    v, b = inputs
    d = rules.same_dtype([v, b], "value and bias")
    if d not in rules.NUMERIC:
        raise TypeError(f"bias_add does not support dtype {d.name}")
    if b.shape.rank not in (None, 1):
        raise ValueError(f"bias must be 1-D, got shape {fmt(b.shape)}")
    r = v.shape.rank
    if r is None:
        return v.shape, d
    if r < 2:
        raise ValueError(f"bias_add needs a value of rank >= 2, got shape {fmt(v.shape)}")
    axis = _bias_axis(r, attrs["data_format"])
    c, n = v.shape[axis], b.shape[0] if b.shape.rank == 1 else None
    if c is not None and n is not None and c != n:
        raise ValueError(f"Must provide as many biases as the channel dimension of the input tensor: bias shape "
                         f"{fmt(b.shape)} vs. value shape {fmt(v.shape)} (data_format {attrs['data_format']}: "
                         f"channels are dimension {axis}, of size {c})")
    dims = v.shape.as_list()
    if dims[axis] is None:
        dims[axis] = n
    return TensorShape(dims), d


def _infer_bias_add_grad(inputs, attrs):
    g = inputs[0]
    r = g.shape.rank
    if r is None:
        return TensorShape([None]), g.dtype
    return TensorShape([g.shape[_bias_axis(r, attrs["data_format"])]]), g.dtype


register_op("BiasAdd", infer=_infer_bias_add,
            grad=lambda op, g: [g, execute(get_op("BiasAddGrad"), [_dense(g)], op.attrs)])
register_op("BiasAddGrad", infer=_infer_bias_add_grad,
            grad=lambda op, g: [execute(get_op("BiasAdd"), [zeros_like(op.inputs[0]), _dense(g)], op.attrs)])


def bias_add(value, bias, data_format=None, name=None):
    """Adds the 1-D ``bias`` along the channel dimension of ``value`` (the last, or dimension 1
    for channels-first formats such as ``"NCHW"``).

    >>> import tensorweave as tw
    >>> tw.nn.bias_add(tw.zeros([2, 3]), [1.0, 2.0, 3.0]).numpy()[0]
    array([1., 2., 3.], dtype=float32)
    """
    v = _ct(value)
    b = _like(bias, v)
    df = "NHWC" if data_format is None else str(data_format).upper()
    if not (df.startswith("N") and (df.startswith("NC") or df.endswith("C"))):
        raise ValueError(f"bias_add: data_format must be channels-last (e.g. 'NHWC') or channels-first "
                         f"(e.g. 'NCHW'), got {data_format!r}")
    return execute(get_op("BiasAdd"), [v, b], {"data_format": "NCHW" if df.startswith("NC") else "NHWC"}, name)


def xw_plus_b(x, weights, biases, name=None):
    """``matmul(x, weights) + biases``."""
    return bias_add(m.matmul(x, weights), biases, name=name)


# ---- ReLU gradient ------------------------------------------------------------------------------
def _infer_relu_grad(inputs, attrs):
    g, y = inputs
    d = rules.same_dtype([g, y], "gradients and features")
    if not g.shape.is_compatible_with(y.shape):
        raise ValueError(f"ReluGrad: gradients {fmt(g.shape)} and features {fmt(y.shape)} must have the same shape")
    return g.shape.merge_with(y.shape), d


def _relu_grad_grad(op, g):
    # Linear in the gradients, piecewise constant in the features (TF's _ReluGradGrad).
    return [relu_grad(_dense(g), op.inputs[1]), zeros_like(op.inputs[1])]


register_op("ReluGrad", infer=_infer_relu_grad, grad=_relu_grad_grad)


def relu_grad(gradients, features, name=None):
    """TF's ``ReluGrad``: ``gradients`` where ``features > 0``, else 0, in one pass. ``Relu``'s
    gradient calls it with the ReLU's output as ``features`` (positive exactly where the input is).

    >>> import tensorweave as tw
    >>> from tensorweave.ops.nn_ops import relu_grad
    >>> relu_grad([1.0, 2.0, 3.0], [-1.0, 0.0, 5.0]).numpy()
    array([0., 0., 3.], dtype=float32)
    """
    g = _ct(gradients)
    return execute(get_op("ReluGrad"), [g, _like(features, g)], {}, name)


# ---- convolution: geometry and argument normalization -------------------------------------------
def spatial_geometry(sizes, ksize, strides, dilations, padding):
    """Per spatial dimension ``(output size, padding before, padding after)`` of a window op.

    ``padding`` is ``"SAME"`` (output ``ceil(n / stride)``, the padding split with the extra
    element after, as TensorFlow), ``"VALID"`` or explicit ``((before, after), ...)``. Unknown
    (``None``) sizes give ``None``. Shared by the shape rules and the kernels.

    >>> spatial_geometry([5], [3], [2], [1], "SAME")
    [(3, 1, 1)]
    """
    geo = []
    for i, (n, kz, s, d) in enumerate(zip(sizes, ksize, strides, dilations)):
        if padding == "SAME":
            if n is None:
                geo.append((None, None, None))
                continue
            out = -(-n // s)
            if kz is None:
                geo.append((out, None, None))
                continue
            total = max((out - 1) * s + (kz - 1) * d + 1 - n, 0)
            geo.append((out, total // 2, total - total // 2))
            continue
        b, a = (0, 0) if padding == "VALID" else padding[i]
        if n is None or kz is None:
            geo.append((None, b, a))
            continue
        eff = (kz - 1) * d + 1
        span = n + b + a
        if span < eff:
            raise ValueError(f"Computed output size would be negative: the window (size {kz}, dilation {d}, "
                             f"effective size {eff}) is larger than spatial dimension {i} of the input "
                             f"(size {n}, padded to {span}). Hint: use padding='SAME' or a smaller window")
        geo.append(((span - eff) // s + 1, b, a))
    return geo


_FORMATS = {1: ("NWC", "NCW"), 2: ("NHWC", "NCHW"), 3: ("NDHWC", "NCDHW")}
_LAYOUT = {1: "width", 2: "height, width", 3: "depth, height, width"}


def _data_format(data_format, nd, op):
    valid = _FORMATS[nd]
    if data_format is None:
        return valid[0]
    df = str(data_format).upper()
    if df not in valid:
        raise ValueError(f"{op}: data_format must be {valid[0]!r} or {valid[1]!r} for {nd}-D spatial data, "
                         f"got {data_format!r}")
    return df


def _spatial_ints(value, nd, data_format, what, op, default=1):
    """An int or a list of 1, ``nd`` or ``nd + 2`` ints (TF's forms) as a tuple of ``nd`` ints."""
    if value is None:
        v = [default]
    elif isinstance(value, (int, np.integer)):
        v = [int(value)]
    else:
        v = [int(a) for a in (value.numpy() if hasattr(value, "numpy") else value)]
    if len(v) == 1:
        v = v * nd
    elif len(v) == nd + 2:
        cf = data_format.startswith("NC")
        outer = (v[0], v[1]) if cf else (v[0], v[-1])
        if outer != (1, 1):
            raise ValueError(f"{op}: {what} in the batch and channel dimensions must be 1, got {list(v)} "
                             f"(data_format {data_format})")
        v = v[2:] if cf else v[1:-1]
    elif len(v) != nd:
        raise ValueError(f"{op}: {what} must be an int or a list of 1, {nd} or {nd + 2} ints, got {value!r}")
    if any(a < 1 for a in v):
        raise ValueError(f"{op}: {what} must be positive, got {value!r}")
    return tuple(v)


def _padding(padding, nd, data_format, op, allow_explicit=True):
    if isinstance(padding, str):
        p = padding.upper()
        if p not in ("SAME", "VALID"):
            raise ValueError(f"{op}: padding must be 'SAME', 'VALID' or a list of [before, after] pairs, "
                             f"got {padding!r}")
        return p
    if not allow_explicit:
        raise ValueError(f"{op}: padding must be 'SAME' or 'VALID', got {padding!r}")
    try:
        pairs = [tuple(int(a) for a in p) for p in padding]
    except TypeError:
        raise ValueError(f"{op}: padding must be 'SAME', 'VALID' or a list of [before, after] pairs, "
                         f"got {padding!r}") from None
    if any(len(p) != 2 for p in pairs) or len(pairs) not in (nd, nd + 2):
        raise ValueError(f"{op}: explicit padding must be {nd + 2} (or {nd} spatial) [before, after] pairs, "
                         f"got {padding!r}")
    if len(pairs) == nd + 2:
        cf = data_format.startswith("NC")
        outer = (pairs[0], pairs[1]) if cf else (pairs[0], pairs[-1])
        if outer != ((0, 0), (0, 0)):
            raise ValueError(f"{op}: explicit padding in the batch and channel dimensions must be 0, got "
                             f"{padding!r}")
        pairs = pairs[2:] if cf else pairs[1:-1]
    if any(a < 0 for p in pairs for a in p):
        raise ValueError(f"{op}: explicit padding must be non-negative, got {padding!r}")
    return tuple(pairs)


def _split(dims, cf):
    return (dims[0], dims[2:], dims[1]) if cf else (dims[0], dims[1:-1], dims[-1])


def _join(n, spatial, c, cf):
    return [n, c] + list(spatial) if cf else [n] + list(spatial) + [c]


_FILTER_LAYOUT = {1: "[filter_width, in_channels, out_channels]",
                  2: "[filter_height, filter_width, in_channels, out_channels]",
                  3: "[filter_depth, filter_height, filter_width, in_channels, out_channels]"}


def _layout(nd, cf, what):
    if what == "filter":
        return _FILTER_LAYOUT[nd]
    sp = ", ".join("in_" + s for s in _LAYOUT[nd].split(", "))
    return f"[batch, channels, {sp}]" if cf else f"[batch, {sp}, channels]"


def _dims(t, nd, what, op, cf):
    r = t.shape.rank
    if r is None:
        return [None] * (nd + 2)
    if r != nd + 2:
        raise ValueError(f"{op}: {what} must be {nd + 2}-D {_layout(nd, cf, what)}, got shape {fmt(t.shape)}")
    return t.shape.as_list()


def _static_dims(t, rank, what, op):
    """Static value of a 1-D shape tensor (``input_sizes`` ...), partially known when it is ``shape(x)``."""
    rules.check_dtype(t, (_dt.int32, _dt.int64), op, what)
    v = constant_value(t)
    if v is not None:
        v = [int(a) for a in np.asarray(v).reshape(-1)]
    elif isinstance(t, SymbolicTensor) and t.op.type == "Shape" and t.op.inputs[0].shape.rank is not None:
        v = t.op.inputs[0].shape.as_list()
    elif t.shape.rank == 1 and t.shape[0] is not None:
        v = [None] * t.shape[0]
    else:
        return [None] * rank
    if len(v) != rank:
        raise ValueError(f"{op}: {what} must have {rank} elements, got {v}")
    return v


def _conv_output(op, nd, xdims, fdims, attrs, shapes):
    """(batch, spatial output sizes, out channels) of a convolution; checks the channel counts."""
    cf = attrs["data_format"].startswith("NC")
    n, sp, c = _split(xdims, cf)
    ks, cg, o = fdims[:nd], fdims[nd], fdims[nd + 1]
    if c is not None and cg is not None:
        if cg == 0 or c % cg:
            raise ValueError(
                f"input depth must be evenly divisible by filter depth: {c} vs {cg}. The input's channel "
                f"dimension ({attrs['data_format']}) must equal the filter's in_channels (dimension {nd}) or, "
                f"for a grouped convolution, be a multiple of it; {shapes}")
        groups = c // cg
        if o is not None and o % groups:
            raise ValueError(f"grouped convolution with {groups} groups (input channels {c} / filter in_channels "
                             f"{cg}) needs out_channels divisible by {groups}, got {o}; {shapes}")
    geo = spatial_geometry(sp, ks, attrs["strides"], attrs["dilations"], attrs["padding"])
    return n, [g[0] for g in geo], o


def _conv_shapes(xname, x, f):
    return f"{xname} shape {fmt(x) if isinstance(x, (list, TensorShape)) else fmt(x.shape)}, filter shape {fmt(f.shape)}"


_CONV_OPS = {}


def _register_conv(nd):
    fwd, bpi, bpf = f"Conv{nd}D", f"Conv{nd}DBackpropInput", f"Conv{nd}DBackpropFilter"

    def infer_fwd(inputs, attrs):
        x, f = inputs
        d = _same_float([x, f], fwd, "input and filter")
        cf = attrs["data_format"].startswith("NC")
        xd, fd = _dims(x, nd, "input", fwd, cf), _dims(f, nd, "filter", fwd, cf)
        n, sp, o = _conv_output(fwd, nd, xd, fd, attrs, _conv_shapes("input", x, f))
        return TensorShape(_join(n, sp, o, cf)), d

    def infer_bpi(inputs, attrs):
        sizes, f, dy = inputs
        d = _same_float([f, dy], bpi, "filter and out_backprop")
        cf = attrs["data_format"].startswith("NC")
        xd = _static_dims(sizes, nd + 2, "input_sizes", bpi)
        fd, dyd = _dims(f, nd, "filter", bpi, cf), _dims(dy, nd, "out_backprop", bpi, cf)
        n, sp, o = _conv_output(bpi, nd, xd, fd, attrs, _conv_shapes("input_sizes", xd, f))
        _check_out_backprop(bpi, _join(n, sp, o, cf), dy, xd, f)
        if xd[0] is None:
            xd[0] = dyd[0]
        return TensorShape(xd), d

    def infer_bpf(inputs, attrs):
        x, sizes, dy = inputs
        d = _same_float([x, dy], bpf, "input and out_backprop")
        cf = attrs["data_format"].startswith("NC")
        xd, dyd = _dims(x, nd, "input", bpf, cf), _dims(dy, nd, "out_backprop", bpf, cf)
        fd = _static_dims(sizes, nd + 2, "filter_sizes", bpf)
        n, sp, o = _conv_output(bpf, nd, xd, fd, attrs, f"input shape {fmt(x.shape)}, filter_sizes {fd}")
        _check_out_backprop(bpf, _join(n, sp, o, cf), dy, fmt(x.shape), fd)
        if fd[-1] is None:
            fd[-1] = _split(dyd, cf)[2]
        return TensorShape(fd), d

    def grad_fwd(op, g):
        x, f = op.inputs
        g = _dense(g)
        return [execute(get_op(bpi), [shape(x), f, g], op.attrs),
                execute(get_op(bpf), [x, shape(f), g], op.attrs)]

    def grad_bpi(op, g):
        _, f, dy = op.inputs
        g = _dense(g)
        return [None, execute(get_op(bpf), [g, shape(f), dy], op.attrs), execute(get_op(fwd), [g, f], op.attrs)]

    def grad_bpf(op, g):
        x, _, dy = op.inputs
        g = _dense(g)
        return [execute(get_op(bpi), [shape(x), g, dy], op.attrs), None, execute(get_op(fwd), [x, g], op.attrs)]

    register_op(fwd, infer=infer_fwd, grad=grad_fwd, heavy=True)
    register_op(bpi, infer=infer_bpi, grad=grad_bpi, heavy=True)
    register_op(bpf, infer=infer_bpf, grad=grad_bpf, heavy=True)
    _CONV_OPS[nd] = (get_op(fwd), get_op(bpi), get_op(bpf))


def _check_out_backprop(op, expected, dy, xdesc, fdesc):
    if dy.shape.rank is None:
        return
    if not TensorShape(expected).is_compatible_with(dy.shape):
        raise ValueError(f"{op}: out_backprop has shape {fmt(dy.shape)} but the convolution of an input of "
                         f"shape {xdesc if isinstance(xdesc, str) else fmt(xdesc)} with a filter of shape "
                         f"{fdesc if isinstance(fdesc, list) else fmt(fdesc.shape)} gives {fmt(expected)}")


for _nd in (1, 2, 3):
    _register_conv(_nd)


def _conv_attrs(nd, strides, padding, data_format, dilations, op):
    df = _data_format(data_format, nd, op)
    return {"strides": _spatial_ints(strides, nd, df, "strides", op),
            "dilations": _spatial_ints(dilations, nd, df, "dilations", op),
            "padding": _padding(padding, nd, df, op),
            "data_format": df}


def _conv(nd, input, filters, strides, padding, data_format, dilations, name, op):
    if filters is None:
        raise ValueError(f"{op}: filters must be given")
    if padding is None:
        raise ValueError(f"{op}: padding must be given ('SAME', 'VALID' or explicit pairs)")
    x = _ct(input)
    f = _like(filters, x)
    attrs = _conv_attrs(nd, strides, padding, data_format, dilations, op)
    return execute(_CONV_OPS[nd][0], [x, f], attrs, name)


def conv1d(input, filters, stride, padding, data_format="NWC", dilations=None, name=None):
    """1-D convolution of ``input`` (``[batch, in_width, in_channels]``, or ``NCW``) with ``filters``
    (``[filter_width, in_channels, out_channels]``).

    >>> import tensorweave as tw
    >>> tw.nn.conv1d(tw.ones([1, 5, 1]), tw.ones([3, 1, 1]), stride=1, padding="VALID").shape
    TensorShape([1, 3, 1])
    """
    return _conv(1, input, filters, stride, padding, data_format, dilations, name, "conv1d")


def conv2d(input, filters=None, strides=None, padding=None, data_format="NHWC", dilations=None, name=None,
           filter=None):
    """2-D convolution (cross-correlation, as TF) of ``input`` (``NHWC`` or ``NCHW``) with ``filters``
    ``[filter_height, filter_width, in_channels, out_channels]``.

    ``strides`` and ``dilations``: an int or a list of 1, 2 or 4 ints; ``padding``: ``"SAME"``,
    ``"VALID"`` or explicit ``[[0, 0], [top, bottom], [left, right], [0, 0]]``. An input with
    ``k * in_channels`` channels makes a grouped convolution with ``k`` groups.

    >>> import tensorweave as tw
    >>> tw.nn.conv2d(tw.ones([2, 8, 8, 3]), tw.ones([3, 3, 3, 16]), strides=2, padding="SAME").shape
    TensorShape([2, 4, 4, 16])
    """
    if filters is None:
        filters = filter
    if strides is None:
        raise ValueError("conv2d: strides must be given")
    return _conv(2, input, filters, strides, padding, data_format, dilations, name, "conv2d")


def conv3d(input, filters, strides, padding, data_format="NDHWC", dilations=None, name=None):
    """3-D convolution of ``input`` (``NDHWC`` or ``NCDHW``) with ``filters``
    ``[depth, height, width, in_channels, out_channels]``.

    >>> import tensorweave as tw
    >>> tw.nn.conv3d(tw.ones([1, 4, 4, 4, 2]), tw.ones([2, 2, 2, 2, 3]), [1, 1, 1, 1, 1], "VALID").shape
    TensorShape([1, 3, 3, 3, 3])
    """
    return _conv(3, input, filters, strides, padding, data_format, dilations, name, "conv3d")


def _nd_of(x, f, op, data_format=None):
    r = f.shape.rank if f.shape.rank is not None else x.shape.rank
    if r is None:
        raise ValueError(f"{op}: the rank of the input or of the filter must be known")
    nd = r - 2
    if nd not in (1, 2, 3):
        raise ValueError(f"{op}: supports 1-D, 2-D and 3-D convolutions (filters of rank 3 to 5), "
                         f"got filter shape {fmt(f.shape)} and input shape {fmt(x.shape)}")
    return nd


def convolution(input, filters, strides=None, padding="VALID", data_format=None, dilations=None, name=None):
    """N-D convolution (N = 1, 2, 3 from the filter's rank) with TF's ``tf.nn.convolution`` arguments.

    >>> import tensorweave as tw
    >>> tw.nn.convolution(tw.ones([1, 5, 5, 1]), tw.ones([2, 2, 1, 1])).shape
    TensorShape([1, 4, 4, 1])
    """
    x = _ct(input)
    f = _like(filters, x)
    nd = _nd_of(x, f, "convolution")
    return _conv(nd, x, f, strides, padding, data_format, dilations, name, "convolution")


def _sizes_tensor(value, what):
    if isinstance(value, Tensor):
        return value
    if isinstance(value, TensorShape):
        value = value.as_list()
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value):
        return stack([v if isinstance(v, Tensor) else _ct(int(v), dtype=_dt.int32) for v in value])
    try:
        return _ct(np.asarray(value, dtype=np.int32).reshape(-1))
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a list of ints or a 1-D int tensor, got {value!r}") from None


def conv_transpose(input, filters, output_shape, strides, padding="SAME", data_format=None, dilations=None,
                   name=None):
    """Transposed convolution (the gradient of ``convolution`` with respect to its input).

    ``filters`` is ``[*window, output_channels, input_channels]``; ``output_shape`` is the full
    shape of the result (batch and channels included).

    >>> import tensorweave as tw
    >>> tw.nn.conv_transpose(tw.ones([1, 2, 2, 1]), tw.ones([3, 3, 1, 1]), [1, 4, 4, 1], 2).shape
    TensorShape([1, 4, 4, 1])
    """
    x = _ct(input)
    f = _like(filters, x)
    nd = _nd_of(x, f, "conv_transpose")
    return _conv_transpose(nd, x, f, output_shape, strides, padding, data_format, dilations, name,
                           "conv_transpose")


def _conv_transpose(nd, input, filters, output_shape, strides, padding, data_format, dilations, name, op):
    dy = _ct(input)
    f = _like(filters, dy)
    sizes = _sizes_tensor(output_shape, f"{op}: output_shape")
    attrs = _conv_attrs(nd, strides, padding, data_format, dilations, op)
    return execute(_CONV_OPS[nd][1], [sizes, f, dy], attrs, name)


def conv1d_transpose(input, filters, output_shape, strides, padding="SAME", data_format="NWC", dilations=None,
                     name=None):
    """Transposed 1-D convolution; ``filters`` is ``[width, output_channels, input_channels]``."""
    return _conv_transpose(1, input, filters, output_shape, strides, padding, data_format, dilations, name,
                           "conv1d_transpose")


def conv2d_transpose(input, filters, output_shape, strides, padding="SAME", data_format="NHWC", dilations=None,
                     name=None):
    """Transposed 2-D convolution ("deconvolution"): the gradient of ``conv2d`` with respect to its
    input, for an input of shape ``output_shape``. ``filters`` is
    ``[height, width, output_channels, input_channels]``.

    >>> import tensorweave as tw
    >>> y = tw.nn.conv2d_transpose(tw.ones([1, 2, 2, 1]), tw.ones([2, 2, 1, 1]), [1, 4, 4, 1], 2, "VALID")
    >>> y.numpy()[0, :, :, 0].tolist()[0]
    [1.0, 1.0, 1.0, 1.0]
    """
    return _conv_transpose(2, input, filters, output_shape, strides, padding, data_format, dilations, name,
                           "conv2d_transpose")


def conv3d_transpose(input, filters, output_shape, strides, padding="SAME", data_format="NDHWC", dilations=None,
                     name=None):
    """Transposed 3-D convolution; ``filters`` is ``[d, h, w, output_channels, input_channels]``."""
    return _conv_transpose(3, input, filters, output_shape, strides, padding, data_format, dilations, name,
                           "conv3d_transpose")


def conv2d_backprop_input(input_sizes, filter=None, out_backprop=None, strides=None, padding=None,
                          use_cudnn_on_gpu=True, data_format="NHWC", dilations=None, name=None, filters=None):
    """Gradient of ``conv2d`` with respect to an input of shape ``input_sizes`` (TF1's op)."""
    return _conv_transpose(2, out_backprop, filter if filters is None else filters, input_sizes, strides,
                           padding, data_format, dilations, name, "conv2d_backprop_input")


def conv2d_backprop_filter(input, filter_sizes, out_backprop, strides, padding, use_cudnn_on_gpu=True,
                           data_format="NHWC", dilations=None, name=None):
    """Gradient of ``conv2d`` with respect to a filter of shape ``filter_sizes`` (TF1's op)."""
    x = _ct(input)
    dy = _like(out_backprop, x)
    sizes = _sizes_tensor(filter_sizes, "conv2d_backprop_filter: filter_sizes")
    attrs = _conv_attrs(2, strides, padding, data_format, dilations, "conv2d_backprop_filter")
    return execute(_CONV_OPS[2][2], [x, sizes, dy], attrs, name)


def depthwise_conv2d(input, filter, strides, padding, data_format=None, dilations=None, name=None):
    """Depthwise 2-D convolution: ``filter`` ``[h, w, in_channels, channel_multiplier]`` convolves each
    input channel separately; output channel ``c * channel_multiplier + k`` comes from input channel ``c``.

    Runs as a grouped ``Conv2D`` with one group per input channel.

    >>> import tensorweave as tw
    >>> tw.nn.depthwise_conv2d(tw.ones([1, 5, 5, 3]), tw.ones([3, 3, 3, 2]), [1, 1, 1, 1], "SAME").shape
    TensorShape([1, 5, 5, 6])
    """
    x = _ct(input)
    f = _like(filter, x)
    df = _data_format(data_format, 2, "depthwise_conv2d")
    if f.shape.rank not in (None, 4):
        raise ValueError(f"depthwise_conv2d: filter must be 4-D [filter_height, filter_width, in_channels, "
                         f"channel_multiplier], got shape {fmt(f.shape)}")
    if x.shape.rank not in (None, 4):
        raise ValueError(f"depthwise_conv2d: input must be 4-D ({df}), got shape {fmt(x.shape)}")
    cx = None if x.shape.rank is None else x.shape[1 if df == "NCHW" else 3]
    cf = None if f.shape.rank is None else f.shape[2]
    if cx is not None and cf is not None and cx != cf:
        raise ValueError(f"depthwise_conv2d: the input has {cx} channels but the filter expects in_channels={cf} "
                         f"(its third dimension); input shape {fmt(x.shape)} ({df}), filter shape {fmt(f.shape)}")
    if f.shape.is_fully_defined():
        kh, kw, c, mult = f.shape.as_list()
        fg = reshape(f, [kh, kw, 1, c * mult])
    else:
        s = shape(f)
        fg = reshape(f, [s[0], s[1], 1, -1])
    return _conv(2, x, fg, strides, padding, df, dilations, name, "depthwise_conv2d")


def separable_conv2d(input, depthwise_filter, pointwise_filter, strides, padding, data_format=None,
                     dilations=None, name=None):
    """A depthwise convolution followed by a 1x1 (pointwise) convolution."""
    dw = depthwise_conv2d(input, depthwise_filter, strides, padding, data_format, dilations)
    return conv2d(dw, pointwise_filter, 1, "VALID", data_format or "NHWC", name=name)


def atrous_conv2d(value, filters, rate, padding, name=None):
    """2-D convolution with holes: ``conv2d`` with ``dilations=rate`` (NHWC)."""
    return conv2d(value, filters, 1, padding, dilations=rate, name=name)


# ---- pooling ------------------------------------------------------------------------------------
def _pool_output(op, x, attrs):
    nd = len(attrs["ksize"])
    cf = attrs["data_format"].startswith("NC")
    r = x.shape.rank
    if r is None:
        return None
    if r != nd + 2:
        raise ValueError(f"{op}: input must be {nd + 2}-D {_layout(nd, cf, 'input')} for a {nd}-D window, "
                         f"got shape {fmt(x.shape)}")
    n, sp, c = _split(x.shape.as_list(), cf)
    geo = spatial_geometry(sp, attrs["ksize"], attrs["strides"], (1,) * nd, attrs["padding"])
    return _join(n, [g[0] for g in geo], c, cf)


def _infer_pool(kind):
    allowed = rules.NUMERIC if kind == "MaxPool" else _FLOAT

    def infer(inputs, attrs):
        x = inputs[0]
        rules.check_dtype(x, allowed, kind.replace("Pool", "_pool").lower())
        out = _pool_output(kind, x, attrs)
        return TensorShape(out), x.dtype
    return infer


def _infer_max_pool_grad(inputs, attrs):
    x, g = inputs
    d = _same_float([x, g], "MaxPoolGrad")
    out = _pool_output("MaxPoolGrad", x, attrs)
    if out is not None and not TensorShape(out).is_compatible_with(g.shape):
        raise ValueError(f"MaxPoolGrad: grad has shape {fmt(g.shape)}, the pooling output is {fmt(out)}")
    return x.shape, d


def _infer_max_pool_grad_grad(inputs, attrs):
    x, gg = inputs
    d = _same_float([x, gg], "MaxPoolGradGrad")
    if not x.shape.is_compatible_with(gg.shape):
        raise ValueError(f"MaxPoolGradGrad: grad has shape {fmt(gg.shape)}, the input {fmt(x.shape)}")
    return TensorShape(_pool_output("MaxPoolGradGrad", x, attrs)), d


def _infer_avg_pool_grad(inputs, attrs):
    sizes, g = inputs
    d = _float_input(g, "AvgPoolGrad", "grad")
    nd = len(attrs["ksize"])
    xd = _static_dims(sizes, nd + 2, "orig_input_shape", "AvgPoolGrad")
    return TensorShape(xd), d


register_op("MaxPool", infer=_infer_pool("MaxPool"), heavy=True,
            grad=lambda op, g: [execute(get_op("MaxPoolGrad"), [op.inputs[0], _dense(g)], op.attrs)])
register_op("MaxPoolGrad", infer=_infer_max_pool_grad, heavy=True,
            grad=lambda op, g: [None, execute(get_op("MaxPoolGradGrad"), [op.inputs[0], _dense(g)], op.attrs)])
register_op("MaxPoolGradGrad", infer=_infer_max_pool_grad_grad, heavy=True,
            grad=lambda op, g: [None, execute(get_op("MaxPoolGrad"), [op.inputs[0], _dense(g)], op.attrs)])
register_op("AvgPool", infer=_infer_pool("AvgPool"), heavy=True,
            grad=lambda op, g: [execute(get_op("AvgPoolGrad"), [shape(op.inputs[0]), _dense(g)], op.attrs)])
register_op("AvgPoolGrad", infer=_infer_avg_pool_grad, heavy=True,
            grad=lambda op, g: [None, execute(get_op("AvgPool"), [_dense(g)], op.attrs)])


def _pool(kind, input, ksize, strides, padding, data_format, name, nd, op):
    x = _ct(input)
    if nd is None:
        r = x.shape.rank
        if r is None or r - 2 not in (1, 2, 3):
            raise ValueError(f"{op}: input must have rank 3, 4 or 5 (batch, spatial dimensions, channels), "
                             f"got shape {fmt(x.shape)}")
        nd = r - 2
    df = _data_format(data_format, nd, op)
    if strides is None:
        raise ValueError(f"{op}: strides must be given")
    attrs = {"ksize": _spatial_ints(ksize, nd, df, "ksize", op),
             "strides": _spatial_ints(strides, nd, df, "strides", op),
             "padding": _padding(padding, nd, df, op, allow_explicit=False),
             "data_format": df}
    return execute(get_op(kind), [x], attrs, name)


def max_pool(input, ksize, strides, padding, data_format=None, name=None):
    """Max pooling over 1, 2 or 3 spatial dimensions (from the input's rank).

    ``ksize``/``strides``: an int or a list of 1, N or N+2 ints. With ``"SAME"`` padding the padded
    positions never win. The gradient goes to each window's first maximum (as TensorFlow).

    >>> import tensorweave as tw
    >>> x = tw.constant([[1.0, 5.0, 2.0, 0.0]])[..., None]  # [batch, width, channels]
    >>> tw.nn.max_pool(x, 2, 2, "VALID").numpy().ravel()
    array([5., 2.], dtype=float32)
    """
    return _pool("MaxPool", input, ksize, strides, padding, data_format, name, None, "max_pool")


def max_pool1d(input, ksize, strides, padding, data_format="NWC", name=None):
    """Max pooling over the width of ``[batch, width, channels]`` (or ``NCW``)."""
    return _pool("MaxPool", input, ksize, strides, padding, data_format, name, 1, "max_pool1d")


def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):
    """Max pooling over height and width of ``NHWC`` (or ``NCHW``) data.

    >>> import tensorweave as tw
    >>> tw.nn.max_pool2d(tw.ones([1, 5, 5, 2]), ksize=3, strides=2, padding="SAME").shape
    TensorShape([1, 3, 3, 2])
    """
    return _pool("MaxPool", input, ksize, strides, padding, data_format, name, 2, "max_pool2d")


def max_pool3d(input, ksize, strides, padding, data_format="NDHWC", name=None):
    return _pool("MaxPool", input, ksize, strides, padding, data_format, name, 3, "max_pool3d")


def avg_pool(input, ksize, strides, padding, data_format=None, name=None):
    """Average pooling over 1, 2 or 3 spatial dimensions. With ``"SAME"`` padding each window
    averages only its real (unpadded) elements, as TensorFlow."""
    return _pool("AvgPool", input, ksize, strides, padding, data_format, name, None, "avg_pool")


def avg_pool1d(input, ksize, strides, padding, data_format="NWC", name=None):
    return _pool("AvgPool", input, ksize, strides, padding, data_format, name, 1, "avg_pool1d")


def avg_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):
    """Average pooling over height and width.

    >>> import tensorweave as tw
    >>> float(tw.nn.avg_pool2d(tw.ones([1, 3, 3, 1]), 2, 2, "SAME")[0, 1, 1, 0])
    1.0
    """
    return _pool("AvgPool", input, ksize, strides, padding, data_format, name, 2, "avg_pool2d")


def avg_pool3d(input, ksize, strides, padding, data_format="NDHWC", name=None):
    return _pool("AvgPool", input, ksize, strides, padding, data_format, name, 3, "avg_pool3d")


def pool(input, window_shape, pooling_type, strides=None, padding="VALID", data_format=None, dilations=None,
         name=None):
    """``tf.nn.pool``: ``pooling_type`` ``"MAX"`` or ``"AVG"`` over ``len(window_shape)`` spatial dimensions."""
    nd = len(window_shape)
    if dilations is not None and any(int(d) != 1 for d in np.ravel(dilations)):
        raise NotImplementedError("pool: dilated pooling is not supported")
    kind = {"MAX": "MaxPool", "AVG": "AvgPool"}.get(str(pooling_type).upper())
    if kind is None:
        raise ValueError(f"pool: pooling_type must be 'MAX' or 'AVG', got {pooling_type!r}")
    return _pool(kind, input, list(window_shape), 1 if strides is None else strides, padding, data_format, name,
                 nd, "pool")


# ---- normalization ------------------------------------------------------------------------------
def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None):
    """``scale * (x - mean) / sqrt(variance + variance_epsilon) + offset`` (``offset``/``scale`` may be None).

    >>> import tensorweave as tw
    >>> tw.nn.batch_normalization(tw.constant([1.0, 3.0]), 2.0, 1.0, 0.0, 1.0, 0.0).numpy()
    array([-1.,  1.], dtype=float32)
    """
    x = _ct(x)
    mean, variance = _like(mean, x), _like(variance, x)
    inv = m.rsqrt(variance + _like(variance_epsilon, variance))
    if scale is not None:
        inv = inv * _like(scale, inv)
    shift = -mean * inv if offset is None else _like(offset, inv) - mean * inv
    return m.add(x * m.cast(inv, x.dtype), m.cast(shift, x.dtype), name=name)


def fused_batch_norm(x, scale, offset, mean=None, variance=None, epsilon=0.001, data_format="NHWC",
                     is_training=True, name=None, exponential_avg_factor=1.0):
    """Batch normalization of 4-D (or 5-D) ``x`` over all dimensions but channels.

    Returns ``(y, batch_mean, batch_variance)``. Training: statistics of this batch normalize ``x``
    and the returned variance is the unbiased (n / (n - 1)) estimate; with
    ``exponential_avg_factor`` f < 1 the returned statistics are ``(1 - f) * mean + f * batch``.
    Inference: ``mean``/``variance`` normalize and are returned. float16/bfloat16 ``x`` is
    normalized in float32 (``scale``, ``offset`` and statistics are float32).

    >>> import tensorweave as tw
    >>> y, mu, var = tw.nn.fused_batch_norm(tw.constant([[[[1.0], [3.0]]]]), [1.0], [0.0], epsilon=0.0)
    >>> y.numpy().ravel().tolist(), float(mu[0]), float(var[0])
    ([-1.0, 1.0], 2.0, 2.0)
    """
    x = _ct(x)
    low = x.dtype in (_dt.float16, _dt.bfloat16)
    _float_input(x, "fused_batch_norm", "x")
    xw = m.cast(x, _dt.float32) if low else x
    r = xw.shape.rank
    if r not in (4, 5):
        raise ValueError(f"fused_batch_norm: x must be 4-D or 5-D, got shape {fmt(x.shape)}")
    df = str(data_format).upper()
    if df not in ("NHWC", "NCHW", "NDHWC", "NCDHW"):
        raise ValueError(f"fused_batch_norm: data_format must be NHWC, NCHW, NDHWC or NCDHW, got {data_format!r}")
    cf = df.startswith("NC")
    caxis = 1 if cf else r - 1
    axes = [i for i in range(r) if i != caxis]
    scale, offset = _like(scale, xw), _like(offset, xw)
    for what, t in (("scale", scale), ("offset", offset)):
        if t.shape.rank not in (None, 1) or (t.shape.rank == 1 and None not in (t.shape[0], xw.shape[caxis])
                                             and t.shape[0] != xw.shape[caxis]):
            raise ValueError(f"fused_batch_norm: {what} must be 1-D with one value per channel "
                             f"({xw.shape[caxis]}), got shape {fmt(t.shape)}; x shape {fmt(x.shape)} ({df})")

    def per_channel(v):  # a [C] vector broadcast against x
        return reshape(v, [-1] + [1] * (r - 2)) if cf else v

    if is_training:
        # one fused op: two passes over x (statistics, normalise), two over dy and x backward
        y, batch_mean, batch_var = batch_norm_training(x, scale, offset, epsilon, "NCHW" if cf else "NHWC")
        count = None
        if all(xw.shape[i] is not None for i in axes):
            count = math.prod(xw.shape[i] for i in axes)
        if count is not None:
            unbiased = batch_var * (count / max(count - 1, 1))
        else:
            n = m.cast(size(xw), xw.dtype) / m.cast(shape(xw)[caxis], xw.dtype)
            unbiased = batch_var * (n / m.maximum(n - 1, 1))
        if exponential_avg_factor != 1.0:
            if mean is None or variance is None:
                raise ValueError("fused_batch_norm: exponential_avg_factor != 1 needs the running mean and variance")
            f = float(exponential_avg_factor)
            batch_mean = (1 - f) * _like(mean, xw) + f * batch_mean
            unbiased = (1 - f) * _like(variance, xw) + f * unbiased
        out_mean, out_var = batch_mean, unbiased
    else:
        if mean is None or variance is None:
            raise ValueError("fused_batch_norm: inference (is_training=False) needs mean and variance")
        out_mean, out_var = _like(mean, xw), _like(variance, xw)
        y = batch_normalization(xw, per_channel(out_mean), per_channel(out_var), per_channel(offset),
                                per_channel(scale), epsilon)
    if low and not is_training:
        y = m.cast(y, x.dtype)
    return y, out_mean, out_var


# ---- embeddings ---------------------------------------------------------------------------------
def _rows(p, ids):
    # A variable's sparse_read has an IndexedSlices gradient (only the rows looked up).
    if hasattr(p, "sparse_read"):
        return p.sparse_read(ids)
    return gather(p, ids)


def _num_rows(p):
    s = p.shape
    if s.rank is not None and s[0] is not None:
        return s[0]
    t = p.value() if hasattr(p, "value") else p
    return shape(t)[0]


def _clip_rows(x, max_norm, ids_rank):
    # TF clips each looked-up embedding (the dimensions after the ids') to L2 norm <= max_norm.
    r = x.shape.rank
    axes = list(range(ids_rank, r))
    norm2 = reduce_sum(m.square(x), axis=axes, keepdims=True)
    mx = _like(max_norm, x)
    scale = m.where(norm2 > mx * mx, mx * m.rsqrt(m.maximum(norm2, _like(1e-30, x))), m.ones_like(norm2))
    return x * scale


def embedding_lookup(params, ids, max_norm=None, name=None, partition_strategy="div"):
    """Rows ``ids`` of ``params`` (a tensor, a ``tw.Variable``, or a list of shards of either).

    A variable is read with ``sparse_read``, so its gradient is an ``IndexedSlices``. With a
    list of shards, ``partition_strategy`` says which shard holds id ``i``: ``"div"`` (TF2's
    default: contiguous blocks) or ``"mod"`` (shard ``i % n``, row ``i // n``; TF1's default).

    >>> import tensorweave as tw
    >>> tw.nn.embedding_lookup(tw.constant([[0.0, 1.0], [2.0, 3.0]]), [1, 1]).numpy()
    array([[2., 3.],
           [2., 3.]], dtype=float32)
    """
    if isinstance(params, (list, tuple)):
        shards = list(params)
        if not shards:
            raise ValueError("embedding_lookup: params must not be empty")
    else:
        shards = [params]
    shards = [p if hasattr(p, "sparse_read") or isinstance(p, Tensor) else _ct(p) for p in shards]
    ids = _ct(ids, dtype_hint=_dt.int32)
    rules.check_dtype(ids, (_dt.int32, _dt.int64), "embedding_lookup", "ids")
    if len(shards) == 1:
        out = _rows(shards[0], ids)
    else:
        out = _sharded_lookup(shards, ids, partition_strategy)
    if max_norm is not None:
        out = _clip_rows(out, max_norm, ids.shape.rank if ids.shape.rank is not None else 0)
    return identity(out, name=name) if name else out


def _sharded_lookup(shards, ids, strategy):
    n = len(shards)
    if strategy == "mod":
        shard_of, local = m.floormod(ids, n), m.floordiv(ids, n)
    elif strategy == "div":
        counts = [_num_rows(p) for p in shards]
        if all(isinstance(c, int) for c in counts):
            total = sum(counts)
        else:
            total = m.add_n([c if isinstance(c, Tensor) else _ct(c) for c in counts])
        total = m.cast(_like(total, ids) if not isinstance(total, Tensor) else total, ids.dtype)
        per = m.floordiv(total, n)
        extras = total - per * n
        shard_of = m.maximum(m.floordiv(ids, per + 1), m.floordiv(ids - extras, m.maximum(per, 1)))
        local = m.where(shard_of < extras, m.floormod(ids, per + 1), m.floormod(ids - extras, m.maximum(per, 1)))
    else:
        raise ValueError(f"embedding_lookup: partition_strategy must be 'div' or 'mod', got {strategy!r}")
    out = None
    for i, p in enumerate(shards):
        mine = m.equal(shard_of, i)
        rows = _rows(p, m.where(mine, local, zeros_like(local)))
        extra = rows.shape.rank - ids.shape.rank if rows.shape.rank is not None and ids.shape.rank is not None else 1
        mask = mine
        for _ in range(extra):
            mask = expand_dims(mask, -1)
        part = m.where(mask, rows, zeros_like(rows))
        out = part if out is None else out + part
    return out



# ---- SBP rules (core/sbp.py) ---------------------------------------------------------------------
# Softmax-like ops split along every axis but the class axis; a split class axis needs a global
# max and sum: distribute/decompositions.py writes them with reductions (stable log-sum-exp).
def _but_axis(n_in, n_out, drop_in_out=()):
    """S(i) on the inputs -> S(i) on the outputs for every axis but attr ``axis`` (outputs in
    ``drop_in_out`` lose that axis)."""
    def fn(inputs, attrs):
        rank = inputs[0].rank
        axis = attrs.get("axis", -1) % rank
        for i in range(rank):
            if i != axis:
                yield [S(i)] * n_in, [S(i - (i > axis)) if k in drop_in_out else S(i) for k in range(n_out)]
    return fn


def _xent_sbp(inputs, attrs):
    """Rows split with the labels'; the loss is linear in the labels (-sum labels * log_softmax)."""
    yield from _but_axis(2, 1, drop_in_out=(0,))(inputs, attrs)
    yield [B, P], [P]


def _sparse_xent_sbp(inputs, attrs):
    """Rows (every axis of labels) split with the logits'; the class axis never."""
    for i in range(inputs[1].rank):
        yield [S(i), S(i)], [S(i)]


def _channel_axis(rank, data_format):
    return 1 if data_format.startswith("NC") else rank - 1


def _bias_add_sbp(inputs, attrs):
    x = inputs[0]
    c = _channel_axis(x.rank, attrs["data_format"])
    for i in range(x.rank):
        yield ([S(i), S(0)] if i == c else [S(i), B]), [S(i)]
    yield [P, P], [P]


def _bias_add_grad_sbp(inputs, attrs):
    g = inputs[0]
    c = _channel_axis(g.rank, attrs["data_format"])
    for i in range(g.rank):
        yield [S(i)], [S(0) if i == c else P]
    yield [P], [P]


def _conv_layout(x, f, attrs):
    """(channel axis of x, filter in-channel axis, out-channel axis, whether channels can split:
    not for grouped convolutions)."""
    nd = f.rank - 2
    c = _channel_axis(x.rank, attrs["data_format"])
    return c, nd, nd + 1, _groups_of_one(x.shape[c], f.shape[nd], attrs)


def _conv_sbp(inputs, attrs):
    """Batch split; the filter's out channels split -> the output's channels; in channels split
    in both -> partial sums; convolution is bilinear: P x B and B x P -> P."""
    x, f = inputs
    c, fi, fo, single = _conv_layout(x, f, attrs)
    yield Signature([S(0), B], [S(0)], _empty(0))
    if single:
        yield Signature([B, S(fo)], [S(c)], _empty(0))
        yield Signature([S(c), S(fi)], [P], _empty(0))
    yield [P, B], [P]
    yield [B, P], [P]


def _groups_of_one(x_channels, filter_in, attrs):
    """Whether a convolution's channels may split (not grouped); a gradient op knows x's or the
    filter's shape only from its output shape (attr ``_out_shapes``, given by the planner)."""
    return x_channels is not None and x_channels == filter_in


def _conv_bpi_sbp(inputs, attrs):
    _, f, dy = inputs
    c, fi, fo = _channel_axis(dy.rank, attrs["data_format"]), f.rank - 2, f.rank - 1
    out = (attrs.get("_out_shapes") or [None])[0]
    single = out is not None and _groups_of_one(out[c], f.shape[fi], attrs)
    yield Signature([B, B, S(0)], [S(0)], _empty(1, sbp_rules.shape_input_hook(0)))
    if single:
        yield Signature([B, S(fo), S(c)], [P], _empty(1))
        yield Signature([B, S(fi), B], [S(c)], _empty(1, sbp_rules.shape_input_hook(0)))
    yield [B, P, B], [P]
    yield [B, B, P], [P]


def _conv_bpf_sbp(inputs, attrs):
    x, _, dy = inputs
    nd = dy.rank - 2
    c = _channel_axis(x.rank, attrs["data_format"])
    out = (attrs.get("_out_shapes") or [None])[0]
    yield Signature([S(0), B, S(0)], [P], _empty(0))
    if out is not None and _groups_of_one(x.shape[c], out[nd], attrs):
        yield Signature([S(c), B, B], [S(nd)], _empty(0, sbp_rules.shape_input_hook(1)))
        yield Signature([B, B, S(c)], [S(nd + 1)], _empty(0, sbp_rules.shape_input_hook(1)))
    yield [P, B, B], [P]
    yield [B, B, P], [P]


def _pool_sbp(linear, sizes_input=False):
    """Pooling works per example and per channel: batch and channel splits pass through."""
    def fn(inputs, attrs):
        x = inputs[-1]
        last = len(inputs) - 1       # a float input (zeros of its dtype for an empty shard)
        for a in (0, _channel_axis(x.rank, attrs["data_format"])):
            if sizes_input:
                yield Signature([B, S(a)], [S(a)], _empty(last, sbp_rules.shape_input_hook(0)))
            else:
                yield Signature([S(a)] * len(inputs), [S(a)], _empty(last))
        if linear:
            yield [B] * (len(inputs) - 1) + [P], [P]
    return fn


_sig, _empty = sbp_rules.signatures, sbp_rules.zeros_if_empty
get_op("Softmax").sbp = get_op("LogSoftmax").sbp = _sig(_but_axis(1, 1))
get_op("SoftmaxCrossEntropyWithLogits").sbp = _sig(_xent_sbp)
get_op("SparseSoftmaxCrossEntropyWithLogits").sbp = _sig(_sparse_xent_sbp)
get_op("SparseSoftmaxCrossEntropyGrad").sbp = _sig(lambda inputs, attrs: ([[S(i), S(i)], [S(i)]]
                                                                          for i in range(inputs[1].rank)))
get_op("BiasAdd").sbp = _sig(_bias_add_sbp)
get_op("BiasAddGrad").sbp = _sig(_bias_add_grad_sbp)
get_op("ReluGrad").sbp = sbp_rules.elementwise_rule("first")
for _fwd, _bpi, _bpf in _CONV_OPS.values():
    _fwd.sbp, _bpi.sbp, _bpf.sbp = _sig(_conv_sbp), _sig(_conv_bpi_sbp), _sig(_conv_bpf_sbp)
get_op("MaxPool").sbp = _sig(_pool_sbp(False))
get_op("MaxPoolGrad").sbp = get_op("MaxPoolGradGrad").sbp = _sig(_pool_sbp(True))   # linear in the gradient
get_op("AvgPool").sbp = _sig(_pool_sbp(True))
get_op("AvgPoolGrad").sbp = _sig(_pool_sbp(True, sizes_input=True))
