"""Layer converters: one function per Keras layer class, emitting ONNX nodes for one layer call.

A converter receives the :class:`~tensorweave.onnx._graph.Graph`, the layer, the Values of the
call's inputs (its first argument, flattened), the call's keyword arguments (KerasTensors
replaced by Values) and the static shapes and dtypes of its outputs; it returns one Value per
output. Converters are looked up by the layer's class (walking the MRO), but only when the
layer does not override ``call``: a subclass with a different computation must not be
exported as its parent's.
"""
import numpy as np

from tensorweave.onnx._graph import Value, identity_perm

_REGISTRY = {}


class UnsupportedLayerError(NotImplementedError):
    """A layer (or a configuration of it) that ``tw.onnx.export`` cannot convert."""


def converter(*classes, mask_aware=False):
    """Registers ``fn`` for ``classes``. ``mask_aware`` converters handle a Keras mask on their
    inputs themselves (and set the outputs' masks); for the others the exporter passes the mask
    through layers that support masking and refuses layers whose ``call`` would use it."""
    def wrap(fn):
        for cls in classes:
            _REGISTRY[cls] = (fn, mask_aware)
        return fn
    return wrap


def lookup(layer):
    """``(converter, mask_aware)`` for ``layer``, or None."""
    for klass in type(layer).__mro__:
        entry = _REGISTRY.get(klass)
        if entry is not None:
            # a subclass that redefines call computes something else
            return entry if type(layer).call is klass.call else None
    return None


def supported_layers():
    """The names of the Keras layer classes that have a converter."""
    return sorted({cls.__name__ for cls in _REGISTRY})


def unsupported(layer, why, hint=None):
    msg = f"tw.onnx.export cannot convert layer '{layer.name}' ({type(layer).__name__}): {why}"
    if hint:
        msg += f". Hint: {hint}"
    return UnsupportedLayerError(msg)


# ---- activations ------------------------------------------------------------------------------
def activation_name(fn):
    """The Keras name of an activation function, or None for a custom one."""
    from tensorweave.keras import activations
    try:
        name = activations.serialize(fn)
    except ValueError:
        return None
    return name if name in _ACTIVATIONS and activations.get(name) is fn else None


def _gelu(g, x, dtype, hint):
    if g.opset >= 20:
        return g.op("Gelu", [x], hint, approximate="none")
    # 0.5 * x * (1 + erf(x / sqrt(2))): Gelu is an ONNX op only from opset 20
    scaled = g.op("Mul", [x, g.const(np.asarray(1 / np.sqrt(2), dtype), "inv_sqrt2")], f"{hint}_scaled")
    erf1 = g.op("Add", [g.op("Erf", [scaled], f"{hint}_erf"), g.const(np.asarray(1, dtype), "one")], f"{hint}_erf1")
    return g.op("Mul", [g.op("Mul", [x, g.const(np.asarray(0.5, dtype), "half")], f"{hint}_half"), erf1], hint)


_ACTIVATIONS = {
    "linear": lambda g, x, dt, axis, hint: x,
    "relu": lambda g, x, dt, axis, hint: g.op("Relu", [x], hint),
    "sigmoid": lambda g, x, dt, axis, hint: g.op("Sigmoid", [x], hint),
    "tanh": lambda g, x, dt, axis, hint: g.op("Tanh", [x], hint),
    "softmax": lambda g, x, dt, axis, hint: g.op("Softmax", [x], hint, axis=axis),
    "log_softmax": lambda g, x, dt, axis, hint: g.op("LogSoftmax", [x], hint, axis=axis),
    "elu": lambda g, x, dt, axis, hint: g.op("Elu", [x], hint, alpha=1.0),
    "selu": lambda g, x, dt, axis, hint: g.op("Selu", [x], hint),
    "gelu": lambda g, x, dt, axis, hint: _gelu(g, x, dt, hint),
    "softplus": lambda g, x, dt, axis, hint: g.op("Softplus", [x], hint),
    "softsign": lambda g, x, dt, axis, hint: g.op("Softsign", [x], hint),
    "swish": lambda g, x, dt, axis, hint: g.op("Mul", [x, g.op("Sigmoid", [x], f"{hint}_sig")], hint),
    "silu": lambda g, x, dt, axis, hint: g.op("Mul", [x, g.op("Sigmoid", [x], f"{hint}_sig")], hint),
    "relu6": lambda g, x, dt, axis, hint: g.op(
        "Clip", [x, g.const(np.asarray(0, dt), "zero"), g.const(np.asarray(6, dt), "six")], hint),
    "leaky_relu": lambda g, x, dt, axis, hint: g.op("LeakyRelu", [x], hint, alpha=0.2),
    # Keras 3's hard_sigmoid is clip(x / 6 + 0.5, 0, 1)
    "hard_sigmoid": lambda g, x, dt, axis, hint: g.op("HardSigmoid", [x], hint, alpha=1.0 / 6.0, beta=0.5),
    "exponential": lambda g, x, dt, axis, hint: g.op("Exp", [x], hint),
}


def emit_activation(g, name, x, dtype, hint, axis=-1):
    """Applies the activation called ``name`` to the ONNX tensor ``x`` (``axis``: softmax's)."""
    return _ACTIVATIONS[name](g, x, np.dtype(dtype), axis, hint)


def apply_activation(g, layer, fn, value, hint=None):
    """``fn(value)`` for a layer's ``activation`` argument; works in any layout."""
    name = activation_name(fn)
    if name is None:
        raise unsupported(layer, f"its activation {getattr(fn, '__name__', fn)!r} has no ONNX equivalent",
                          f"use one of {sorted(_ACTIVATIONS)}")
    if name == "linear":
        return value
    out = emit_activation(g, name, value.name, value.dtype, hint or f"{layer.name}/{name}",
                          axis=value.onnx_axis(-1))
    return Value(out, value.shape, value.dtype, value.perm)


# ---- small shared helpers -----------------------------------------------------------------------
def weight(layer, var, dtype):
    return np.asarray(var.numpy()).astype(dtype, copy=False)


def last_axis_last(g, value):
    """``value`` in a layout whose last axis is Keras' last axis (a MatMul contracts it); the other
    axes may stay in any order."""
    if value.perm[-1] == value.rank - 1:
        return value.name, value.perm
    return g.keras(value), identity_perm(value.rank)


def out_value(name, spec, perm=None):
    shape, dtype = spec
    return Value(name, shape, dtype, perm)


def drop_axes_perm(perm, dropped_keras_axes):
    """The perm of a tensor after reducing ``dropped_keras_axes`` without keepdims."""
    dropped = set(dropped_keras_axes)
    kept = [a for a in perm if a not in dropped]
    order = sorted(kept)
    return tuple(order.index(a) for a in kept)


# ---- core layers ----------------------------------------------------------------------------------
def _dense(g, layer, inputs, kwargs, outs):
    x = inputs[0]
    name, perm = last_axis_last(g, x)
    y = g.op("MatMul", [name, g.const(weight(layer, layer.kernel, x.dtype), f"{layer.name}/kernel")],
             f"{layer.name}/matmul")
    if layer.use_bias:
        bias = g.const(weight(layer, layer.bias, x.dtype), f"{layer.name}/bias")
        y = g.op("Add", [y, bias], f"{layer.name}/bias_add")
    return [apply_activation(g, layer, layer.activation, out_value(y, outs[0], perm))]


def _activation(g, layer, inputs, kwargs, outs):
    return [apply_activation(g, layer, layer.activation, inputs[0])]


def _identity(g, layer, inputs, kwargs, outs):
    # inference: Dropout is the identity (Keras scales while training, not at predict time)
    if kwargs.get("training") is True:
        raise unsupported(layer, "it is called with training=True, which makes it random at inference",
                          "call it without training=True to export")
    x = inputs[0]
    return [Value(x.name, x.shape, x.dtype, x.perm)]


def _flatten(g, layer, inputs, kwargs, outs):
    x = inputs[0]
    if layer.data_format == "channels_first" and x.rank > 2:
        # Keras flattens channels-first tensors in channels-last order
        name = g.layout(x, (0,) + tuple(range(2, x.rank)) + (1,))
    else:
        name = g.keras(x)
    return [out_value(g.op("Reshape", [name, g.ints([0, -1])], f"{layer.name}/reshape"), outs[0])]


def _reshape(g, layer, inputs, kwargs, outs):
    x = inputs[0]
    # 0 copies the (dynamic) batch size from the input
    shape = [0] + [int(d) for d in layer.target_shape]
    return [out_value(g.op("Reshape", [g.keras(x), g.ints(shape)], f"{layer.name}/reshape"), outs[0])]


def _permute(g, layer, inputs, kwargs, outs):
    # no node at all: the output is the same ONNX tensor read with other Keras axes
    x = inputs[0]
    dims = (0,) + tuple(layer.dims)
    perm = tuple(dims.index(a) for a in x.perm)
    return [Value(x.name, outs[0][0], x.dtype, perm)]


# ---- convolutions and pooling ---------------------------------------------------------------------
def channels_first_perm(rank, data_format):
    """The perm that puts a Keras tensor of ``rank`` dims into ONNX's (N, C, spatial...) order."""
    if data_format == "channels_first":
        return identity_perm(rank)
    return (0, rank - 1) + tuple(range(1, rank - 1))


def _spatial(shape, data_format):
    return list(shape[1:-1]) if data_format == "channels_last" else list(shape[2:])


def same_pads(sizes, kernel, strides, dilations):
    """TensorFlow's "same" padding as ONNX pads (all begins, then all ends); the odd element goes at
    the end. None when it depends on a spatial size that is unknown (a stride over 1)."""
    begins, ends = [], []
    for n, k, s, d in zip(sizes, kernel, strides, dilations):
        eff = (k - 1) * d + 1
        if n is None:
            if s != 1:
                return None
            total = eff - 1  # with stride 1 the padding is the same for every size
        else:
            out = -(-n // s)
            total = max((out - 1) * s + eff - n, 0)
        begins.append(total // 2)
        ends.append(total - total // 2)
    return begins + ends


def _pad_attrs(layer, x, kernel, strides, dilations, padding):
    rank = len(kernel)
    if padding == "valid":
        return {"pads": [0] * (2 * rank)}
    if padding == "causal":
        return {"pads": [(kernel[0] - 1) * dilations[0], 0]}
    pads = same_pads(_spatial(x.shape, layer.data_format), kernel, strides, dilations)
    if pads is None:
        # unknown sizes and strides: the runtime pads (SAME_UPPER puts the odd element at the end, as TF;
        # Keras allows no dilation with strides, which ONNX Runtime's SAME_UPPER would refuse)
        return {"auto_pad": "SAME_UPPER"}
    return {"pads": pads}


def _finish_conv(g, layer, y, x, outs, perm):
    return [apply_activation(g, layer, layer.activation, out_value(y, outs[0], perm))]


def _conv_weights(layer, kernel, dtype):
    """Keras' ``kernel_size + (in, out)`` as ONNX's ``(out, in) + kernel_size`` (the same move for
    a transposed convolution, whose Keras kernel is ``kernel_size + (out, in)`` and ONNX's
    ``(in, out) + kernel_size``)."""
    k = weight(layer, kernel, dtype)
    r = k.ndim - 2
    return np.ascontiguousarray(k.transpose((r + 1, r) + tuple(range(r))))


def _conv(g, layer, inputs, kwargs, outs):
    x = inputs[0]
    r = layer.rank
    perm = channels_first_perm(r + 2, layer.data_format)
    w = g.const(_conv_weights(layer, layer.kernel, x.dtype), f"{layer.name}/kernel")
    ins = [g.layout(x, perm), w]
    if layer.use_bias:
        ins.append(g.const(weight(layer, layer.bias, x.dtype), f"{layer.name}/bias"))
    attrs = _pad_attrs(layer, x, layer.kernel_size, layer.strides, layer.dilation_rate, layer.padding)
    y = g.op("Conv", ins, f"{layer.name}/conv", kernel_shape=list(layer.kernel_size), strides=list(layer.strides),
             dilations=list(layer.dilation_rate), group=int(layer.groups), **attrs)
    return _finish_conv(g, layer, y, x, outs, perm)


def _conv_transpose(g, layer, inputs, kwargs, outs):
    x = inputs[0]
    r = layer.rank
    perm = channels_first_perm(r + 2, layer.data_format)
    sizes_in = _spatial(x.shape, layer.data_format)
    sizes_out = _spatial(outs[0][0], layer.data_format)
    if None in sizes_in or None in sizes_out:
        raise unsupported(layer, f"a transposed convolution needs known spatial sizes to fix its padding; the input "
                          f"shape is {x.shape}", "give keras.Input fixed spatial dimensions")
    begins, ends, output_padding = [], [], []
    for n, out, k, s, d in zip(sizes_in, sizes_out, layer.kernel_size, layer.strides, layer.dilation_rate):
        eff = (k - 1) * d + 1
        # the forward convolution this op is the gradient of pads total // 2 before (TF's rule);
        # ONNX crops pads from the full result and adds output_padding at the end
        total = (n - 1) * s + eff - out
        if layer.padding == "valid" or total <= 0:
            begins.append(0)
            ends.append(0)
            output_padding.append(max(-total, 0))
        else:
            begins.append(total // 2)
            ends.append(total - total // 2)
            output_padding.append(0)
    w = g.const(_conv_weights(layer, layer.kernel, x.dtype), f"{layer.name}/kernel")
    ins = [g.layout(x, perm), w]
    if layer.use_bias:
        ins.append(g.const(weight(layer, layer.bias, x.dtype), f"{layer.name}/bias"))
    y = g.op("ConvTranspose", ins, f"{layer.name}/conv_transpose", kernel_shape=list(layer.kernel_size),
             strides=list(layer.strides), dilations=list(layer.dilation_rate), pads=begins + ends,
             output_padding=output_padding if any(output_padding) else None)
    return _finish_conv(g, layer, y, x, outs, perm)


def _depthwise_weights(layer, kernel, dtype):
    # (kh, kw, C, M) -> (C * M, 1, kh, kw): output channel c * M + m reads input channel c only,
    # which is what ONNX's grouped Conv with group = C computes
    k = weight(layer, kernel, dtype)
    kh, kw, c, m = k.shape
    return np.ascontiguousarray(k.reshape(kh, kw, c * m).transpose(2, 0, 1).reshape(c * m, 1, kh, kw)), c


def _depthwise(g, layer, inputs, kwargs, outs):
    x = inputs[0]
    perm = channels_first_perm(4, layer.data_format)
    w, c = _depthwise_weights(layer, layer.kernel, x.dtype)
    ins = [g.layout(x, perm), g.const(w, f"{layer.name}/kernel")]
    if layer.use_bias:
        ins.append(g.const(weight(layer, layer.bias, x.dtype), f"{layer.name}/bias"))
    attrs = _pad_attrs(layer, x, layer.kernel_size, layer.strides, layer.dilation_rate, layer.padding)
    y = g.op("Conv", ins, f"{layer.name}/depthwise", kernel_shape=list(layer.kernel_size),
             strides=list(layer.strides), dilations=list(layer.dilation_rate), group=c, **attrs)
    return _finish_conv(g, layer, y, x, outs, perm)


def _separable(g, layer, inputs, kwargs, outs):
    x = inputs[0]
    perm = channels_first_perm(4, layer.data_format)
    w, c = _depthwise_weights(layer, layer.depthwise_kernel, x.dtype)
    attrs = _pad_attrs(layer, x, layer.kernel_size, layer.strides, layer.dilation_rate, layer.padding)
    dw = g.op("Conv", [g.layout(x, perm), g.const(w, f"{layer.name}/depthwise_kernel")], f"{layer.name}/depthwise",
              kernel_shape=list(layer.kernel_size), strides=list(layer.strides),
              dilations=list(layer.dilation_rate), group=c, **attrs)
    ins = [dw, g.const(_conv_weights(layer, layer.pointwise_kernel, x.dtype), f"{layer.name}/pointwise_kernel")]
    if layer.use_bias:
        ins.append(g.const(weight(layer, layer.bias, x.dtype), f"{layer.name}/bias"))
    y = g.op("Conv", ins, f"{layer.name}/pointwise", kernel_shape=[1, 1])
    return _finish_conv(g, layer, y, x, outs, perm)


def _pool(g, layer, inputs, kwargs, outs):
    x = inputs[0]
    r = layer.rank
    perm = channels_first_perm(r + 2, layer.data_format)
    attrs = _pad_attrs(layer, x, layer.pool_size, layer.strides, (1,) * r, layer.padding)
    if layer.pool_mode == "max":
        y = g.op("MaxPool", [g.layout(x, perm)], f"{layer.name}/max_pool", kernel_shape=list(layer.pool_size),
                 strides=list(layer.strides), **attrs)
    else:
        # TF averages only the real elements of a padded window: count_include_pad=0
        y = g.op("AveragePool", [g.layout(x, perm)], f"{layer.name}/avg_pool", kernel_shape=list(layer.pool_size),
                 strides=list(layer.strides), count_include_pad=0, **attrs)
    return [out_value(y, outs[0], perm)]


def _global_pool(g, layer, inputs, kwargs, outs):
    x = inputs[0]
    axes = layer._spatial_axes
    from tensorweave.keras.layers.pooling import _GlobalMax
    op = "ReduceMax" if isinstance(layer, _GlobalMax) else "ReduceMean"
    mask = x.mask
    if mask is not None and op == "ReduceMean" and layer.rank == 1:
        return [_masked_average_1d(g, layer, x, mask, outs)]
    y = g.reduce(op, x.name, [x.onnx_axis(a) for a in axes], layer.keepdims, f"{layer.name}/{op}")
    perm = x.perm if layer.keepdims else drop_axes_perm(x.perm, axes)
    return [out_value(y, outs[0], perm)]


def _masked_average_1d(g, layer, x, mask, outs):
    """GlobalAveragePooling1D over the unmasked steps only (Keras' masked mean; an all-masked row
    gives 0)."""
    steps = layer._spatial_axes[0]
    feature_axis = 2 if layer.data_format == "channels_last" else 1
    xs = g.keras(x)
    w = g.unsqueeze(g.op("Cast", [mask.name], f"{layer.name}/mask_f", to=_onnx_type(x.dtype)), [feature_axis],
                    f"{layer.name}/mask_w")
    total = g.reduce("ReduceSum", g.op("Mul", [xs, w], f"{layer.name}/masked"), [steps], layer.keepdims,
                     f"{layer.name}/total")
    count = g.reduce("ReduceSum", w, [steps], layer.keepdims, f"{layer.name}/count")
    # counts are whole numbers: max(count, 1) leaves them alone except 0, where total is 0 too
    count = g.op("Max", [count, g.const(np.asarray(1, x.dtype), "one")], f"{layer.name}/count1")
    return out_value(g.op("Div", [total, count], f"{layer.name}/mean"), outs[0])


def _onnx_type(dtype):
    from tensorweave.onnx._graph import onnx_dtype
    return onnx_dtype(dtype)


# ---- normalization --------------------------------------------------------------------------------
def _batch_norm(g, layer, inputs, kwargs, outs):
    if kwargs.get("training") is True:
        raise unsupported(layer, "it is called with training=True (batch statistics); ONNX export is for inference")
    x = inputs[0]
    axis = layer._axes[0]
    c = x.shape[axis]
    dt = x.dtype
    mean = layer.moving_mean.numpy().astype(np.float64)
    var = layer.moving_variance.numpy().astype(np.float64)
    gamma = layer.gamma.numpy().astype(np.float64) if layer.gamma is not None else np.ones(c)
    beta = layer.beta.numpy().astype(np.float64) if layer.beta is not None else np.zeros(c)
    onnx_axis = x.onnx_axis(axis)
    if onnx_axis == 1 and x.rank >= 2 and g.opset >= 14:
        # ONNX's own op (channels at axis 1, which a preceding convolution's layout gives). Before
        # opset 14 the op tells inference from training only by its number of outputs, which not
        # every runtime gets right (ONNX's reference evaluator runs it in training mode)
        y = g.op("BatchNormalization", [x.name, g.const(gamma.astype(dt), f"{layer.name}/gamma"),
                                        g.const(beta.astype(dt), f"{layer.name}/beta"),
                                        g.const(mean.astype(dt), f"{layer.name}/moving_mean"),
                                        g.const(var.astype(dt), f"{layer.name}/moving_variance")],
                 f"{layer.name}/batch_norm", epsilon=float(layer.epsilon))
    else:
        # elsewhere: the same affine map folded into one scale and one shift
        scale = gamma / np.sqrt(var + layer.epsilon)
        shift = beta - mean * scale
        shape = [1] * x.rank
        shape[onnx_axis] = c
        shape = shape[onnx_axis:]  # broadcasting aligns from the right
        scale = g.const(scale.reshape(shape).astype(dt), f"{layer.name}/scale")
        shift = g.const(shift.reshape(shape).astype(dt), f"{layer.name}/shift")
        y = g.op("Add", [g.op("Mul", [x.name, scale], f"{layer.name}/scale"), shift], f"{layer.name}/shift")
    out = Value(y, x.shape, dt, x.perm, mask=x.mask)
    return [out]


def _layer_norm(g, layer, inputs, kwargs, outs):
    x = inputs[0]
    axes = list(layer._axes)
    dt = x.dtype
    gamma = weight(layer, layer.gamma, dt) if layer.gamma is not None else None
    beta = weight(layer, layer.beta, dt) if layer.beta is not None else None
    xs = g.keras(x)
    trailing = axes == list(range(x.rank - len(axes), x.rank))
    if g.opset >= 17 and trailing and not layer.rms_scaling:
        norm_shape = [x.shape[a] for a in axes]
        scale = gamma if gamma is not None else np.ones(norm_shape, dt)
        ins = [xs, g.const(scale, f"{layer.name}/gamma")]
        if beta is not None:
            ins.append(g.const(beta, f"{layer.name}/beta"))
        y = g.op("LayerNormalization", ins, f"{layer.name}/layer_norm", axis=axes[0], epsilon=float(layer.epsilon))
        return [Value(y, x.shape, dt, mask=x.mask)]
    # other axes, rms_scaling, or opsets before 17: spelled out with reductions
    bshape = [x.shape[a] if a in axes else 1 for a in range(x.rank)]
    eps = g.const(np.asarray(layer.epsilon, dt), f"{layer.name}/epsilon")
    mean = g.reduce("ReduceMean", xs, axes, True, f"{layer.name}/mean")
    d = g.op("Sub", [xs, mean], f"{layer.name}/centred")
    var = g.reduce("ReduceMean", g.op("Mul", [d, d], f"{layer.name}/sq"), axes, True, f"{layer.name}/var")
    std = g.op("Sqrt", [g.op("Add", [var, eps], f"{layer.name}/var_eps")], f"{layer.name}/std")
    # rms_scaling (Keras 3): the centred variance, but x itself divided by it
    y = g.op("Div", [xs if layer.rms_scaling else d, std], f"{layer.name}/normed")
    if gamma is not None:
        y = g.op("Mul", [y, g.const(gamma.reshape(bshape), f"{layer.name}/gamma")], f"{layer.name}/scaled")
    if beta is not None:
        y = g.op("Add", [y, g.const(beta.reshape(bshape), f"{layer.name}/beta")], f"{layer.name}/shifted")
    return [Value(y, x.shape, dt, mask=x.mask)]


# ---- embedding ------------------------------------------------------------------------------------
def _embedding(g, layer, inputs, kwargs, outs):
    ids = inputs[0]
    name = g.keras(ids)
    if ids.dtype.kind not in "iu":
        # a float keras.Input holding ids (Keras casts them the same way)
        name = g.op("Cast", [name], f"{layer.name}/ids", to=_onnx_type(np.int64))
        id_dtype = np.dtype(np.int64)
    else:
        id_dtype = ids.dtype
    out_dtype = outs[0][1]
    table = g.const(weight(layer, layer.embeddings, out_dtype), f"{layer.name}/embeddings")
    y = g.op("Gather", [table, name], f"{layer.name}/gather", axis=0)
    mask = None
    if layer.mask_zero:
        eq = g.op("Equal", [name, g.const(np.asarray(0, id_dtype), "zero_id")], f"{layer.name}/is_pad")
        mask = Value(g.op("Not", [eq], f"{layer.name}/mask"), ids.shape, np.bool_)
    return [Value(y, outs[0][0], out_dtype, mask=mask)]


# ---- merges -----------------------------------------------------------------------------------------
def _common_layout(g, values):
    """The inputs' ONNX names in one shared layout (the first input's, when all ranks agree); inputs of
    lower rank get trailing size-1 axes, as Keras broadcasts them."""
    ranks = {v.rank for v in values}
    if len(ranks) == 1:
        perm = values[0].perm
        return [g.layout(v, perm) for v in values], perm
    top = max(ranks)
    names = []
    for v in values:
        name = g.keras(v)
        if v.rank < top:
            name = g.unsqueeze(name, list(range(v.rank, top)), f"{v.name}_expanded")
        names.append(name)
    return names, identity_perm(top)


def _and_masks(g, layer, values):
    masks = [v.mask for v in values if v.mask is not None]
    if not masks:
        return None
    out = masks[0].name
    for m in masks[1:]:
        out = g.op("And", [out, m.name], f"{layer.name}/mask")
    return Value(out, masks[0].shape, np.bool_)


def _elementwise(op_type, variadic):
    def convert(g, layer, inputs, kwargs, outs):
        names, perm = _common_layout(g, inputs)
        if variadic:
            y = g.op(op_type, names, f"{layer.name}/{op_type}")
        else:
            y = names[0]
            for other in names[1:]:
                y = g.op(op_type, [y, other], f"{layer.name}/{op_type}")
        out = out_value(y, outs[0], perm)
        out.mask = _and_masks(g, layer, inputs)
        return [out]
    return convert


def _average(g, layer, inputs, kwargs, outs):
    names, perm = _common_layout(g, inputs)
    y = names[0]
    for i, other in enumerate(names[1:]):
        y = g.op("Add", [y, other], f"{layer.name}/sum{i}")
    # Keras divides the sum (not ONNX's Mean, which may round differently)
    y = g.op("Div", [y, g.const(np.asarray(len(names), inputs[0].dtype), f"{layer.name}/n")], f"{layer.name}/mean")
    out = out_value(y, outs[0], perm)
    out.mask = _and_masks(g, layer, inputs)
    return [out]


def _concatenate(g, layer, inputs, kwargs, outs):
    perm = inputs[0].perm
    names = [g.layout(v, perm) for v in inputs]
    rank = inputs[0].rank
    axis = layer.axis % rank
    y = g.op("Concat", names, f"{layer.name}/concat", axis=perm.index(axis))
    out = out_value(y, outs[0], perm)
    masks = [v.mask for v in inputs]
    if any(m is not None for m in masks):
        if axis == rank - 1:
            # Keras: any-of over the concatenated features, so an unmasked input unmasks everything
            if all(m is not None for m in masks):
                y = masks[0].name
                for m in masks[1:]:
                    y = g.op("Or", [y, m.name], f"{layer.name}/mask")
                out.mask = Value(y, masks[0].shape, np.bool_)
        elif all(m is not None and m.rank == rank - 1 for m in masks):
            out.mask = Value(g.op("Concat", [m.name for m in masks], f"{layer.name}/mask", axis=axis),
                             outs[0][0][:-1], np.bool_)
        else:
            raise unsupported(layer, "it joins masked and unmasked sequences along a non-feature axis")
    return [out]


def _dot(g, layer, inputs, kwargs, outs):
    x1, x2 = inputs
    a1, a2 = layer._axes_for(list(x1.shape), list(x2.shape))
    n1, n2 = g.keras(x1), g.keras(x2)
    if layer.normalize:
        n1, n2 = (_l2_normalize(g, n, a, f"{layer.name}/normalize{i}") for i, (n, a) in enumerate(((n1, a1), (n2, a2))))
    letters = iter("bcdefghijklmnopqrstuvwxy")
    s1 = ["a"] + ["z" if i == a1 else next(letters) for i in range(1, x1.rank)]
    s2 = ["a"] + ["z" if i == a2 else next(letters) for i in range(1, x2.rank)]
    out = ["a"] + [c for c in s1[1:] if c != "z"] + [c for c in s2[1:] if c != "z"]
    y = g.op("Einsum", [n1, n2], f"{layer.name}/einsum", equation=f"{''.join(s1)},{''.join(s2)}->{''.join(out)}")
    if len(out) == 1:
        y = g.unsqueeze(y, [1], f"{layer.name}/expand")
    return [out_value(y, outs[0])]


def _l2_normalize(g, x, axis, hint):
    # x * rsqrt(max(sum(x^2), 1e-12)), tw.nn.l2_normalize's formula
    sq = g.reduce("ReduceSum", g.op("Mul", [x, x], f"{hint}_sq"), [axis], True, f"{hint}_sum")
    sq = g.op("Max", [sq, g.const(np.asarray(1e-12, np.float32), "l2_eps")], f"{hint}_clip")
    return g.op("Div", [x, g.op("Sqrt", [sq], f"{hint}_norm")], hint)


# ---- registration ---------------------------------------------------------------------------------
def register_builtin():
    """Fills the registry (on first export, so that importing this module stays cheap)."""
    if _REGISTRY:
        return
    from tensorweave.keras.layers import conv, core, embedding, merge, normalization, pooling
    from tensorweave.onnx import _rnn
    converter(core.Dense)(_dense)
    converter(core.Activation)(_activation)
    converter(core.Dropout, core.Identity)(_identity)
    converter(core.Flatten)(_flatten)
    converter(core.Reshape)(_reshape)
    converter(core.Permute)(_permute)
    converter(conv.Conv1D, conv.Conv2D, conv.Conv3D)(_conv)
    converter(conv.Conv1DTranspose, conv.Conv2DTranspose, conv.Conv3DTranspose)(_conv_transpose)
    converter(conv.DepthwiseConv2D)(_depthwise)
    converter(conv.SeparableConv2D)(_separable)
    pools = [getattr(pooling, f"{kind}Pooling{r}D") for kind in ("Max", "Average") for r in (1, 2, 3)]
    converter(*pools)(_pool)
    converter(pooling.GlobalAveragePooling1D, mask_aware=True)(_global_pool)
    converter(*[getattr(pooling, f"Global{kind}Pooling{r}D") for kind in ("Max", "Average") for r in (1, 2, 3)
                if (kind, r) != ("Average", 1)])(_global_pool)
    converter(normalization.BatchNormalization, mask_aware=True)(_batch_norm)  # inference ignores the mask
    converter(normalization.LayerNormalization)(_layer_norm)
    converter(embedding.Embedding, mask_aware=True)(_embedding)
    converter(merge.Add, mask_aware=True)(_elementwise("Add", False))
    converter(merge.Subtract, mask_aware=True)(_elementwise("Sub", False))
    converter(merge.Multiply, mask_aware=True)(_elementwise("Mul", False))
    converter(merge.Maximum, mask_aware=True)(_elementwise("Max", True))
    converter(merge.Minimum, mask_aware=True)(_elementwise("Min", True))
    converter(merge.Average, mask_aware=True)(_average)
    converter(merge.Concatenate, mask_aware=True)(_concatenate)
    converter(merge.Dot)(_dot)
    _rnn.register(converter)


__all__ = ["UnsupportedLayerError", "converter", "lookup", "supported_layers", "register_builtin"]
