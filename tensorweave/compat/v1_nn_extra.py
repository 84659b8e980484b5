"""More of TF1's ``tf.nn``, composed from tensorweave ops: ``crelu``, ``relu_layer``,
``local_response_normalization``/``lrn``, moments from sufficient statistics, weighted moments,
``batch_norm_with_global_normalization``, the loss scalers, ``approx_max_k``/``approx_min_k`` (exact
top-k: recall 1), sparse embedding lookups, ``depthwise_conv2d_native`` and the explicit
convolution back-propagation functions (vector-Jacobian products of the forward ops).

>>> import tensorweave.compat.v1 as tf
>>> tf.nn.crelu(tf.constant([[1.0, -2.0]])).numpy().tolist()
[[1.0, 0.0, 0.0, 2.0]]
>>> [round(v, 4) for v in tf.nn.lrn(tf.ones([1, 1, 1, 3]), depth_radius=1, bias=1.0, alpha=1.0, beta=1.0).numpy().ravel().tolist()]
[0.3333, 0.25, 0.3333]
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.context import executing_eagerly
from tensorweave.core.convert import convert_to_tensor
from tensorweave.ops import array_ops, indexing_ops, math_ops, nn_ops, reduce_ops, sort_ops

__all__ = ["crelu", "relu_layer", "local_response_normalization", "lrn", "sufficient_statistics", "normalize_moments",
           "weighted_moments", "batch_norm_with_global_normalization", "scale_regularization_loss",
           "compute_average_loss", "approx_max_k", "approx_min_k", "embedding_lookup_sparse",
           "safe_embedding_lookup_sparse", "depthwise_conv2d_native", "depthwise_conv2d_native_backprop_input",
           "depthwise_conv2d_native_backprop_filter", "depthwise_conv2d_backprop_input",
           "depthwise_conv2d_backprop_filter", "conv3d_backprop_filter", "conv3d_backprop_filter_v2",
           "atrous_conv2d_transpose", "space_to_depth", "depth_to_space", "space_to_batch"]

from tensorweave.compat.v1_array_ops import depth_to_space, space_to_batch, space_to_depth  # noqa: E402,F401
# TF2's where TF1 has the same signature and meaning; below, those whose TF1 arguments differ
from tensorweave.ops.nn_extra_ops import (approx_max_k, approx_min_k, atrous_conv2d_transpose,  # noqa: E402,F401
                                          compute_average_loss, crelu, local_response_normalization, lrn,
                                          normalize_moments)


def sufficient_statistics(x, axes, shift=None, keep_dims=None, name=None, keepdims=None):
    """``(count, sum(x - shift), sum((x - shift)**2), shift)`` over ``axes``."""
    x = convert_to_tensor(x)
    keep = _axes_keep(keep_dims, keepdims)
    dims = x.shape.as_list()
    if None in [dims[a] for a in axes]:
        shape = array_ops.shape(x)
        count = math_ops.cast(reduce_ops.reduce_prod(array_ops.stack([shape[a] for a in axes])), x.dtype)
    else:
        count = convert_to_tensor(float(np.prod([dims[a] for a in axes])), dtype=x.dtype)
    centred = x if shift is None else math_ops.subtract(x, shift)
    m_ss = reduce_ops.reduce_sum(centred, axes, keepdims=keep)
    v_ss = reduce_ops.reduce_sum(math_ops.square(centred), axes, keepdims=keep)
    return count, m_ss, v_ss, (None if shift is None else convert_to_tensor(shift, dtype=x.dtype))


def weighted_moments(x, axes, frequency_weights, name=None, keep_dims=None, keepdims=None):
    """``(mean, variance)`` over ``axes`` with each element counted ``frequency_weights`` times
    (broadcast against ``x``; 0 where all weights are 0)."""
    x = convert_to_tensor(x)
    keep = _axes_keep(keep_dims, keepdims)
    w = math_ops.cast(convert_to_tensor(frequency_weights), x.dtype)
    total = reduce_ops.reduce_sum(math_ops.multiply(w, array_ops.ones_like(x)), axes, keepdims=True)
    mean = math_ops.div_no_nan(reduce_ops.reduce_sum(math_ops.multiply(w, x), axes, keepdims=True), total)
    var = math_ops.div_no_nan(reduce_ops.reduce_sum(math_ops.multiply(w, math_ops.squared_difference(x, mean)),
                                                       axes, keepdims=True), total)
    if not keep:
        mean, var = array_ops.squeeze(mean, axes), array_ops.squeeze(var, axes)
    return mean, var


def batch_norm_with_global_normalization(t=None, m=None, v=None, beta=None, gamma=None, variance_epsilon=None,
                                         scale_after_normalization=None, name=None, input=None, mean=None,  # noqa: A002
                                         variance=None):
    """TF1's oldest batch normalization: ``(t - m) / sqrt(v + eps) * gamma + beta`` (``gamma``
    only with ``scale_after_normalization``)."""
    t = t if t is not None else input
    m = m if m is not None else mean
    v = v if v is not None else variance
    return nn_ops.batch_normalization(t, m, v, beta, gamma if scale_after_normalization else None,
                                      variance_epsilon, name=name)


def scale_regularization_loss(regularization_loss):
    """The summed regularization loss divided by the number of replicas (one here)."""
    return reduce_ops.reduce_sum(convert_to_tensor(regularization_loss))




def relu_layer(x, weights, biases, name=None):
    """``relu(x @ weights + biases)``."""
    return math_ops.relu(nn_ops.xw_plus_b(x, weights, biases), name=name)




def _axes_keep(keep_dims, keepdims):
    if keep_dims is not None and keepdims is not None:
        raise ValueError("cannot specify both 'keep_dims' and 'keepdims'")
    return bool(keepdims if keepdims is not None else keep_dims)


def _top_k_along(x, k, axis, largest):
    x = convert_to_tensor(x)
    rank = x.shape.rank
    axis = axis % rank
    perm = [i for i in range(rank) if i != axis] + [axis]
    moved = array_ops.transpose(x, perm) if axis != rank - 1 else x
    values, idx = sort_ops.top_k(moved if largest else math_ops.negative(moved), k)
    if not largest:
        values = math_ops.negative(values)
    if axis != rank - 1:
        inv = list(np.argsort(perm))
        values, idx = array_ops.transpose(values, inv), array_ops.transpose(idx, inv)
    return values, idx


def _combine(params, ids, weights, segments, num_rows, combiner, partition_strategy, max_norm):
    rows = nn_ops.embedding_lookup(params, ids, max_norm=max_norm, partition_strategy=partition_strategy)
    if weights is not None:
        w = math_ops.cast(weights, rows.dtype)
        rows = math_ops.multiply(rows, array_ops.expand_dims(w, -1))
    else:
        w = array_ops.ones_like(math_ops.cast(ids, rows.dtype))
    summed = array_ops.unsorted_segment_sum(rows, segments, num_rows)
    if combiner == "sum":
        return summed
    denom = array_ops.unsorted_segment_sum(w if combiner == "mean" else math_ops.square(w), segments, num_rows)
    if combiner == "sqrtn":
        denom = math_ops.sqrt(denom)
    return math_ops.div_no_nan(summed, array_ops.expand_dims(denom, -1))


def _check_combiner(combiner):
    if combiner not in ("sum", "mean", "sqrtn"):
        raise ValueError(f"combiner must be one of 'mean', 'sqrtn' or 'sum', got {combiner!r}")


def embedding_lookup_sparse(params, sp_ids, sp_weights, partition_strategy="mod", name=None, combiner=None,
                            max_norm=None, allow_fast_lookup=False):
    """The embeddings of each row's ids (``sp_ids``, a SparseTensor), combined per row by
    ``combiner`` (``"mean"`` by default, ``"sum"``, ``"sqrtn"``), weighted by ``sp_weights``;
    one result row per row up to the last one with ids."""
    combiner = combiner or "mean"
    _check_combiner(combiner)
    segments = math_ops.cast(sp_ids.indices[:, 0], _dt.int32)
    num_rows = reduce_ops.reduce_max(segments) + 1
    weights = sp_weights.values if sp_weights is not None else None
    return _combine(params, sp_ids.values, weights, segments, num_rows, combiner, partition_strategy, max_norm)


def safe_embedding_lookup_sparse(embedding_weights, sparse_ids, sparse_weights=None, combiner="mean",
                                 default_id=None, name=None, partition_strategy="div", max_norm=None,
                                 allow_fast_lookup=False):
    """Like :func:`embedding_lookup_sparse`, but ids < 0 (and weights <= 0) are dropped and rows with
    no ids give ``default_id``'s embedding (or zeros); the result has shape
    ``dense_shape[:-1] + [dim]``."""
    _check_combiner(combiner)
    ids = sparse_ids.values
    keep = math_ops.greater_equal(ids, 0)
    weights = sparse_weights.values if sparse_weights is not None else None
    if weights is not None:
        keep = math_ops.logical_and(keep, math_ops.greater(weights, 0))
    dense_shape = math_ops.cast(sparse_ids.dense_shape, _dt.int32)
    rank = sparse_ids.indices.shape.as_list()[-1]
    # the leading dims flattened into one row index
    strides = [1] * (rank - 1)
    for i in range(rank - 3, -1, -1):
        strides[i] = strides[i + 1] * dense_shape[i + 1]
    idx = math_ops.cast(sparse_ids.indices, _dt.int32)
    row = math_ops.add_n([idx[:, i] * strides[i] for i in range(rank - 1)]) if rank > 1 else idx[:, 0] * 0
    num_rows = reduce_ops.reduce_prod(dense_shape[:-1])
    kept_rows = indexing_ops.boolean_mask(row, keep)
    kept_ids = indexing_ops.boolean_mask(ids, keep)
    kept_w = indexing_ops.boolean_mask(weights, keep) if weights is not None else None
    out = _combine(embedding_weights, kept_ids, kept_w, kept_rows, num_rows, combiner, partition_strategy, max_norm)
    present = math_ops.greater(array_ops.unsorted_segment_sum(array_ops.ones_like(kept_rows), kept_rows, num_rows), 0)
    if default_id is not None:
        default = nn_ops.embedding_lookup(embedding_weights, [default_id], max_norm=max_norm,
                                          partition_strategy=partition_strategy)
        out = math_ops.where(array_ops.expand_dims(present, -1), out, array_ops.broadcast_to(default, array_ops.shape(out)))
    else:
        out = math_ops.multiply(out, array_ops.expand_dims(math_ops.cast(present, out.dtype), -1))
    dim = array_ops.shape(out)[-1:]
    return array_ops.reshape(out, array_ops.concat([dense_shape[:-1], dim], 0), name=name)


# ---- convolutions -----------------------------------------------------------------------------------
def depthwise_conv2d_native(input, filter, strides, padding, data_format="NHWC", dilations=(1, 1, 1, 1),  # noqa: A002
                            name=None):
    """The depthwise convolution with 4-element ``strides``/``dilations`` (TF's raw op)."""
    hw = (1, 2) if data_format == "NHWC" else (2, 3)
    return nn_ops.depthwise_conv2d(input, filter, list(strides), padding, data_format=data_format,
                                   dilations=[dilations[i] for i in hw], name=name)


def _vjp(forward, wrt, out_backprop):
    """d(sum(forward(wrt) * out_backprop)) / d(wrt): eagerly with a tape, else ``tw.gradients``."""
    wrt = convert_to_tensor(wrt)
    dy = convert_to_tensor(out_backprop)
    if executing_eagerly():
        from tensorweave.autodiff.tape import GradientTape
        with GradientTape() as tape:
            tape.watch(wrt)
            y = forward(wrt)
        return tape.gradient(y, wrt, output_gradients=dy)
    from tensorweave.autodiff.gradients import gradients
    return gradients(forward(wrt), [wrt], grad_ys=[dy])[0]


def _zeros_of(sizes, dtype):
    return array_ops.zeros(math_ops.cast(convert_to_tensor(sizes), _dt.int32), dtype)


def depthwise_conv2d_native_backprop_input(input_sizes, filter, out_backprop, strides, padding,  # noqa: A002
                                           data_format="NHWC", dilations=(1, 1, 1, 1), name=None):
    """The gradient of the depthwise convolution with respect to its input of shape ``input_sizes``."""
    f = convert_to_tensor(filter)
    return _vjp(lambda x: depthwise_conv2d_native(x, f, strides, padding, data_format, dilations),
                _zeros_of(input_sizes, f.dtype), out_backprop)


def depthwise_conv2d_native_backprop_filter(input, filter_sizes, out_backprop, strides, padding,  # noqa: A002
                                            data_format="NHWC", dilations=(1, 1, 1, 1), name=None):
    """The gradient of the depthwise convolution with respect to its filter of shape ``filter_sizes``."""
    x = convert_to_tensor(input)
    return _vjp(lambda f: depthwise_conv2d_native(x, f, strides, padding, data_format, dilations),
                _zeros_of(filter_sizes, x.dtype), out_backprop)


depthwise_conv2d_backprop_input = depthwise_conv2d_native_backprop_input
depthwise_conv2d_backprop_filter = depthwise_conv2d_native_backprop_filter


def conv3d_backprop_filter(input, filter_sizes, out_backprop, strides, padding, data_format="NDHWC",  # noqa: A002
                           dilations=(1, 1, 1, 1, 1), name=None):
    """The gradient of ``conv3d`` with respect to its filter of shape ``filter_sizes``."""
    x = convert_to_tensor(input)
    spatial = (1, 2, 3) if data_format == "NDHWC" else (2, 3, 4)
    return _vjp(lambda f: nn_ops.conv3d(x, f, list(strides), padding, data_format=data_format,
                                        dilations=[dilations[i] for i in spatial]),
                _zeros_of(filter_sizes, x.dtype), out_backprop)


conv3d_backprop_filter_v2 = conv3d_backprop_filter


def conv2d_backprop_filter_v2(input, filter, out_backprop, strides, padding, use_cudnn_on_gpu=True,  # noqa: A002
                              explicit_paddings=(), data_format="NHWC", dilations=(1, 1, 1, 1), name=None):
    """``conv2d_backprop_filter`` taking the filter itself (its shape is what counts)."""
    return nn_ops.conv2d_backprop_filter(input, array_ops.shape(filter), out_backprop, strides, padding,
                                         data_format=data_format, dilations=list(dilations), name=name)


def conv2d_backprop_input_v2(input, filter, out_backprop, strides, padding, use_cudnn_on_gpu=True,  # noqa: A002
                             explicit_paddings=(), data_format="NHWC", dilations=(1, 1, 1, 1), name=None):
    """``conv2d_backprop_input`` taking the input itself (its shape is what counts)."""
    return nn_ops.conv2d_backprop_input(array_ops.shape(input), filter, out_backprop, strides, padding,
                                        data_format=data_format, dilations=list(dilations), name=name)
