"""TF1's argument names and TF1-only spellings of functions that ``tw`` has under TF2 names.

TF1 functions took arguments TF2 renamed (``reduction_indices``/``keep_dims`` -> ``axis``/
``keepdims``, ``dimension``/``dim``/``squeeze_dims`` -> ``axis``, ``value``/``filter`` ->
``input``/``filters``...), sometimes in another order (``in_top_k``), and accepted a few that
no longer do anything (``use_cudnn_on_gpu``). :func:`tf1_signature` builds, from a ``tw``
function, one with TF1's parameter list: positional arguments bind in TF1's order, each TF1
name is passed on under the ``tw`` name, and giving both spellings of one argument is an error
(as in TF1's ``deprecated_argument_lookup``). The table below was derived by comparing
``inspect.signature`` of ``tf.compat.v1.X`` with ``tf.X`` in TensorFlow 2.21.

>>> import tensorweave.compat.v1 as tf
>>> x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
>>> tf.reduce_sum(x, reduction_indices=[1], keep_dims=True).numpy().tolist()
[[3.0], [7.0]]
>>> int(tf.arg_max(x, 1)[0]), tf.to_float(tf.constant(1)).dtype.name
(1, 'float32')
"""
import inspect

from tensorweave.core import signatures

_MISSING = object()


def tf1_signature(fn, params, renames=None, ignored=(), name=None, defaults=None):
    """``fn`` called with TF1's parameter list ``params`` (see the module doc).

    ``renames`` maps a TF1 name to ``fn``'s name for it; names in ``ignored`` are accepted and
    dropped (TF1 arguments with no effect here); ``defaults`` are TF1 defaults that differ.
    """
    renames = renames or {}
    public = name or fn.__name__
    try:
        tw_params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        tw_params = {}
    defaults = defaults or {}

    def call(*args, **kwargs):
        if len(args) > len(params):
            raise TypeError(f"{public}() takes at most {len(params)} positional arguments ({len(args)} given)")
        for p, a in zip(params, args):
            if p in kwargs:
                raise TypeError(f"{public}() got multiple values for argument '{p}'")
            kwargs[p] = a
        out, given_as = {}, {}
        for k, v in kwargs.items():
            if k not in params:
                raise TypeError(signatures.explain(public, call, TypeError(
                    f"{public}() got an unexpected keyword argument '{k}'")))
            if k in ignored:
                continue
            target = renames.get(k, k)
            if target in out and v is not None and out[target] is not None:
                raise ValueError(f"{public}: cannot specify both '{given_as[target]}' and '{k}'")
            if target not in out or v is not None:
                out[target], given_as[target] = v, k
        for k, v in defaults.items():
            out.setdefault(renames.get(k, k), v)
        return fn(**out)

    sig_params = []
    for p in params:
        tp = tw_params.get(renames.get(p, p))
        default = defaults.get(p, tp.default if tp is not None and tp.default is not tp.empty else None)
        if tp is not None and tp.default is tp.empty and p not in defaults and not renames.get(p) \
                and all(q.default is q.empty for q in sig_params):
            default = inspect.Parameter.empty
        sig_params.append(inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
    call.__signature__ = inspect.Signature(sig_params)
    call.__name__ = call.__qualname__ = public
    call.__doc__ = f"TF1's ``{public}`` (argument names as TF1): see ``tw`` 's ``{fn.__name__}``.\n\n" + \
        (fn.__doc__ or "")
    call._tw_checked = True
    return call


_REDUCE = ["input_tensor", "axis", "keepdims", "name", "reduction_indices", "keep_dims"]
_REDUCE_RENAMES = {"reduction_indices": "axis", "keep_dims": "keepdims"}


def _table():
    """{(namespace, name): tf1 function}; namespace "" is the top level."""
    import tensorweave as tw
    from tensorweave.ops import nn_ops
    t = {}
    for r in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_any",
              "reduce_all", "reduce_logsumexp"):
        t[("", r)] = t[("math", r)] = tf1_signature(getattr(tw, r), _REDUCE, _REDUCE_RENAMES)
    for a in ("argmax", "argmin"):
        t[("", a)] = t[("math", a)] = tf1_signature(
            getattr(tw, a), ["input", "axis", "name", "dimension", "output_type"], {"dimension": "axis"})
    t[("", "arg_max")] = tf1_signature(tw.argmax, ["input", "dimension", "output_type", "name"],
                                       {"dimension": "axis"}, name="arg_max")
    t[("", "arg_min")] = tf1_signature(tw.argmin, ["input", "dimension", "output_type", "name"],
                                       {"dimension": "axis"}, name="arg_min")
    t[("", "count_nonzero")] = t[("math", "count_nonzero")] = tf1_signature(
        tw.count_nonzero, ["input_tensor", "axis", "keepdims", "dtype", "name", "reduction_indices", "keep_dims",
                           "input"], dict(_REDUCE_RENAMES, input_tensor="input"))
    t[("", "expand_dims")] = tf1_signature(tw.expand_dims, ["input", "axis", "name", "dim"], {"dim": "axis"})
    t[("", "squeeze")] = tf1_signature(tw.squeeze, ["input", "axis", "name", "squeeze_dims"],
                                       {"squeeze_dims": "axis"})
    t[("", "norm")] = t[("linalg", "norm")] = tf1_signature(
        tw.linalg.norm, ["tensor", "ord", "axis", "keepdims", "name", "keep_dims"], {"keep_dims": "keepdims"},
        defaults={"ord": "euclidean"})
    for z in ("zeros_like", "ones_like"):
        t[("", z)] = tf1_signature(getattr(tw, z), ["tensor", "dtype", "name", "optimize"], {"tensor": "input"},
                                   ignored=("optimize",))
    t[("", "gradients")] = tf1_signature(
        tw.gradients, ["ys", "xs", "grad_ys", "name", "colocate_gradients_with_ops", "gate_gradients",
                       "aggregation_method", "stop_gradients", "unconnected_gradients"],
        ignored=("colocate_gradients_with_ops", "gate_gradients", "aggregation_method"),
        defaults={"name": "gradients"})
    t[("", "constant")] = tf1_signature(tw.constant, ["value", "dtype", "shape", "name", "verify_shape"],
                                        ignored=("verify_shape",), defaults={"name": "Const"})
    t[("", "convert_to_tensor")] = tf1_signature(
        tw.convert_to_tensor, ["value", "dtype", "name", "preferred_dtype", "dtype_hint"],
        {"preferred_dtype": "dtype_hint"})
    t[("", "cond")] = tf1_signature(tw.cond, ["pred", "true_fn", "false_fn", "strict", "name", "fn1", "fn2"],
                                    {"fn1": "true_fn", "fn2": "false_fn"}, ignored=("strict",))
    # nn
    for s in ("softmax", "log_softmax"):
        t[("nn", s)] = t[("math", s)] = tf1_signature(getattr(nn_ops, s), ["logits", "axis", "name", "dim"],
                                                      {"dim": "axis"})
    t[("nn", "moments")] = tf1_signature(tw.nn.moments, ["x", "axes", "shift", "name", "keep_dims", "keepdims"],
                                         {"keep_dims": "keepdims"})
    t[("nn", "conv1d")] = tf1_signature(
        nn_ops.conv1d, ["value", "filters", "stride", "padding", "use_cudnn_on_gpu", "data_format", "name", "input",
                        "dilations"], {"value": "input"}, ignored=("use_cudnn_on_gpu",))
    t[("nn", "conv2d")] = tf1_signature(
        nn_ops.conv2d, ["input", "filter", "strides", "padding", "use_cudnn_on_gpu", "data_format", "dilations",
                        "name", "filters"], {"filter": "filters"}, ignored=("use_cudnn_on_gpu",),
        defaults={"data_format": "NHWC"})
    t[("nn", "conv3d")] = tf1_signature(
        nn_ops.conv3d, ["input", "filter", "strides", "padding", "data_format", "dilations", "name", "filters"],
        {"filter": "filters"}, defaults={"data_format": "NDHWC"})
    for c, fmt_ in (("conv2d_transpose", "NHWC"), ("conv3d_transpose", "NDHWC")):
        t[("nn", c)] = tf1_signature(
            getattr(nn_ops, c), ["value", "filter", "output_shape", "strides", "padding", "data_format", "name",
                                 "input", "filters", "dilations"], {"value": "input", "filter": "filters"},
            defaults={"padding": "SAME", "data_format": fmt_})
    t[("nn", "convolution")] = tf1_signature(
        nn_ops.convolution, ["input", "filter", "padding", "strides", "dilation_rate", "name", "data_format",
                             "filters", "dilations"], {"filter": "filters", "dilation_rate": "dilations"})
    for p in ("max_pool", "avg_pool"):
        t[("nn", p)] = tf1_signature(
            getattr(nn_ops, p), ["value", "ksize", "strides", "padding", "data_format", "name", "input"],
            {"value": "input"}, defaults={"data_format": "NHWC"})
    t[("nn", "avg_pool2d")] = tf1_signature(
        nn_ops.avg_pool2d, ["value", "ksize", "strides", "padding", "data_format", "name", "input"],
        {"value": "input"}, defaults={"data_format": "NHWC"})
    for d in ("depthwise_conv2d",):
        t[("nn", d)] = tf1_signature(
            getattr(nn_ops, d), ["input", "filter", "strides", "padding", "rate", "name", "data_format", "dilations"],
            {"rate": "dilations"})
    t[("nn", "separable_conv2d")] = tf1_signature(
        nn_ops.separable_conv2d, ["input", "depthwise_filter", "pointwise_filter", "strides", "padding", "rate",
                                  "name", "data_format", "dilations"], {"rate": "dilations"})
    t[("nn", "pool")] = tf1_signature(
        nn_ops.pool, ["input", "window_shape", "pooling_type", "padding", "dilation_rate", "strides", "name",
                      "data_format", "dilations"], {"dilation_rate": "dilations"})
    t[("nn", "weighted_cross_entropy_with_logits")] = tf1_signature(
        nn_ops.weighted_cross_entropy_with_logits, ["labels", "logits", "pos_weight", "name", "targets"],
        {"targets": "labels"})
    t.update(_moved_table(tw))
    return t


def _moved_table(tw):
    """TF1 top-level spellings of functions TF2 moved into a namespace whose TF1 arguments differ."""
    t = {}
    for f in ("igamma", "igammac", "polygamma"):
        t[("", f)] = tf1_signature(getattr(tw.math, f), ["a", "x", "name"], {"a": "x", "x": "y"}, name=f)
    t[("", "zeta")] = tf1_signature(tw.math.zeta, ["x", "q", "name"], {"q": "y"}, name="zeta")
    for f in ("add", "sub"):
        t[("", f"tensor_scatter_{f}")] = tf1_signature(
            getattr(tw, f"tensor_scatter_nd_{f}"), ["tensor", "indices", "updates", "bad_indices_policy", "name"],
            ignored=("bad_indices_policy",), name=f"tensor_scatter_{f}")
    t[("", "bincount")] = tf1_signature(tw.math.bincount, ["arr", "weights", "minlength", "maxlength", "dtype"],
                                        name="bincount")
    t[("", "confusion_matrix")] = tf1_signature(
        tw.math.confusion_matrix, ["labels", "predictions", "num_classes", "dtype", "name", "weights"],
        name="confusion_matrix")
    t[("", "reduce_join")] = tf1_signature(
        tw.strings.reduce_join, ["inputs", "axis", "keep_dims", "separator", "name", "reduction_indices", "keepdims"],
        {"keep_dims": "keepdims", "reduction_indices": "axis"}, name="reduce_join")
    t[("", "substr")] = tf1_signature(tw.strings.substr, ["input", "pos", "len", "name", "unit"], name="substr")
    t[("", "string_to_number")] = tf1_signature(
        tw.strings.to_number, ["string_tensor", "out_type", "name", "input"], {"input": "string_tensor"},
        name="string_to_number")
    t[("", "sparse_add")] = tf1_signature(tw.sparse.add, ["a", "b", "threshold", "thresh"], {"thresh": "threshold"},
                                          name="sparse_add")
    t[("", "sparse_concat")] = tf1_signature(
        tw.sparse.concat, ["axis", "sp_inputs", "name", "expand_nonconcat_dim", "concat_dim", "expand_nonconcat_dims"],
        {"concat_dim": "axis", "expand_nonconcat_dim": "expand_nonconcat_dims"}, name="sparse_concat")
    for f in ("max", "sum"):
        for sparse_out in (False, True):
            n = f"sparse_reduce_{f}" + ("_sparse" if sparse_out else "")
            t[("", n)] = tf1_signature(
                getattr(tw.sparse, f"reduce_{f}"), ["sp_input", "axis", "keepdims", "reduction_axes", "keep_dims"],
                {"reduction_axes": "axis", "keep_dims": "keepdims"}, defaults={"output_is_sparse": sparse_out}, name=n)
    for f in ("mean", "sum", "sqrt_n"):
        t[("", f"sparse_segment_{f}")] = tf1_signature(
            getattr(tw.sparse, f"segment_{f}"), ["data", "indices", "segment_ids", "name", "num_segments",
                                                 "sparse_gradient"], ignored=("sparse_gradient",),
            name=f"sparse_segment_{f}")
    t[("", "sparse_split")] = tf1_signature(
        tw.sparse.split, ["keyword_required", "sp_input", "num_split", "axis", "name", "split_dim"],
        {"split_dim": "axis"}, name="sparse_split")
    return t


def io_table():
    """TF1 spellings over ``tw.io`` (a namespace loaded on first use, so compat.v1 builds these then)."""
    from tensorweave import io
    t = {"decode_csv": tf1_signature(io.decode_csv, ["records", "record_defaults", "field_delim", "use_quote_delim",
                                                     "name", "na_value", "select_cols"], name="decode_csv"),
         "decode_raw": tf1_signature(io.decode_raw, ["input_bytes", "out_type", "little_endian", "name", "bytes"],
                                     {"bytes": "input_bytes"}, name="decode_raw")}
    for f in ("parse_example", "parse_single_example"):
        t[f] = tf1_signature(getattr(io, f), ["serialized", "features", "name", "example_names"], name=f)
    for f in ("serialize_sparse", "serialize_many_sparse"):
        t[f] = tf1_signature(getattr(io, f), ["sp_input", "name", "out_type"], name=f)
    return t


IO_NAMES = ("decode_csv", "decode_raw", "parse_example", "parse_single_example", "serialize_sparse",
            "serialize_many_sparse")


def install(namespaces):
    """Puts the TF1 functions into ``namespaces`` ({"": module dict, "nn": ..., "math": ...})."""
    for (ns, name), fn in _table().items():
        if ns in namespaces:
            namespaces[ns][name] = fn


# ---- TF1-only spellings -------------------------------------------------------------------------
def _cast_to(dtype_name, default_name):
    def to(x, name=default_name):
        from tensorweave.ops.math_ops import cast
        return cast(x, dtype_name, name=name)
    to.__name__ = to.__qualname__ = "to_" + {"float32": "float", "float64": "double"}.get(dtype_name, dtype_name)
    to.__doc__ = f"``tw.cast(x, {dtype_name})`` (TF1's ``{to.__name__}``)."
    return to


to_float = _cast_to("float32", "ToFloat")
to_double = _cast_to("float64", "ToDouble")
to_int32 = _cast_to("int32", "ToInt32")
to_int64 = _cast_to("int64", "ToInt64")
to_bfloat16 = _cast_to("bfloat16", "ToBFloat16")
to_complex64 = _cast_to("complex64", "ToComplex64")
to_complex128 = _cast_to("complex128", "ToComplex128")
