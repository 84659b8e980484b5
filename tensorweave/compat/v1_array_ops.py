"""TF1 top-level array functions that are compositions of tensorweave ops: block rearrangements
(``space_to_depth``, ``depth_to_space``, ``space_to_batch(_nd)``, ``batch_to_space(_nd)``),
``dynamic_partition``/``dynamic_stitch``, ``setdiff1d``, ``batch_gather``, ``sparse_to_dense``,
``histogram_fixed_width_bins``, ``clip_by_average_norm`` and small conversions. Each is
differentiable where TF's is (they are built from differentiable ops).

>>> import tensorweave.compat.v1 as tf
>>> x = tf.reshape(tf.range(16), [1, 4, 4, 1])
>>> tf.space_to_depth(x, 2)[0, 0, 0].numpy().tolist()
[0, 1, 4, 5]
>>> [p.numpy().tolist() for p in tf.dynamic_partition([10, 20, 30, 40], [1, 0, 1, 1], 2)]
[[20], [10, 30, 40]]
"""
import collections

import numpy as np

from tensorweave.autodiff.indexed_slices import IndexedSlices
from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import constant_value
from tensorweave.ops import array_ops, indexing_ops, math_ops, reduce_ops
from tensorweave.ops import segment_ops

__all__ = ["space_to_depth", "depth_to_space", "space_to_batch_nd", "space_to_batch", "batch_to_space_nd",
           "batch_to_space", "required_space_to_batch_paddings", "dynamic_partition", "dynamic_stitch", "setdiff1d",
           "batch_gather", "sparse_to_dense", "sparse_matmul", "histogram_fixed_width_bins", "clip_by_average_norm",
           "convert_to_tensor_or_indexed_slices", "convert_to_tensor_or_sparse_tensor", "guarantee_const"]


def _static_dims(x, what, first):
    dims = x.shape.as_list() if x.shape.rank is not None else None
    if dims is None or None in dims[first:]:
        raise ValueError(f"tf.{what}: needs static dimensions after the batch; got shape {x.shape}")
    return dims


def _nhwc(x, data_format, what):
    if data_format not in ("NHWC", "NCHW"):
        raise ValueError(f"tf.{what}: data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
    return array_ops.transpose(x, [0, 2, 3, 1]) if data_format == "NCHW" else x


def space_to_depth(input, block_size, name=None, data_format="NHWC"):  # noqa: A002 - TF's name
    """Moves ``block_size x block_size`` spatial blocks into the channels (TF1's order: the
    block's row, then column, then the input channel)."""
    x = _nhwc(convert_to_tensor(input), data_format, "space_to_depth")
    b = int(block_size)
    _, h, w, c = _static_dims(x, "space_to_depth", 1)
    if h % b or w % b:
        raise ValueError(f"tf.space_to_depth: height {h} and width {w} must be multiples of block_size {b}")
    y = array_ops.reshape(x, [-1, h // b, b, w // b, b, c])
    y = array_ops.transpose(y, [0, 1, 3, 2, 4, 5])
    y = array_ops.reshape(y, [-1, h // b, w // b, b * b * c])
    return array_ops.transpose(y, [0, 3, 1, 2], name=name) if data_format == "NCHW" else array_ops.identity(y, name)


def depth_to_space(input, block_size, name=None, data_format="NHWC"):  # noqa: A002
    """The inverse of :func:`space_to_depth`."""
    x = _nhwc(convert_to_tensor(input), data_format, "depth_to_space")
    b = int(block_size)
    _, h, w, c = _static_dims(x, "depth_to_space", 1)
    if c % (b * b):
        raise ValueError(f"tf.depth_to_space: depth {c} must be a multiple of block_size**2 = {b * b}")
    y = array_ops.reshape(x, [-1, h, w, b, b, c // (b * b)])
    y = array_ops.transpose(y, [0, 1, 3, 2, 4, 5])
    y = array_ops.reshape(y, [-1, h * b, w * b, c // (b * b)])
    return array_ops.transpose(y, [0, 3, 1, 2], name=name) if data_format == "NCHW" else array_ops.identity(y, name)


def _ints(v, what, arg):
    value = constant_value(convert_to_tensor(v))
    if value is None:
        raise ValueError(f"tf.{what}: {arg} must be known when the graph is built")
    return np.asarray(value, np.int64)


def space_to_batch_nd(input, block_shape, paddings, name=None):  # noqa: A002
    """Zero-pads the ``M`` spatial dimensions by ``paddings``, then moves ``block_shape`` blocks of
    them into the batch (batch index ``(b_0 * B_1 + b_1 ...) * N + n``, as TF)."""
    x = convert_to_tensor(input)
    block = _ints(block_shape, "space_to_batch_nd", "block_shape").reshape(-1)
    pads = _ints(paddings, "space_to_batch_nd", "paddings").reshape(-1, 2)
    m = len(block)
    dims = _static_dims(x, "space_to_batch_nd", 1)
    rest = dims[1 + m:]
    full = [[0, 0]] + pads.tolist() + [[0, 0]] * len(rest)
    padded = indexing_ops.pad(x, full)
    sizes = [dims[1 + i] + int(pads[i].sum()) for i in range(m)]
    for i, (s, b) in enumerate(zip(sizes, block)):
        if s % b:
            raise ValueError(f"tf.space_to_batch_nd: padded dimension {i + 1} ({s}) is not a multiple of "
                             f"block_shape[{i}] = {b}")
    shape1 = [-1] + [v for s, b in zip(sizes, block) for v in (s // int(b), int(b))] + rest
    y = array_ops.reshape(padded, shape1)
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + list(range(1 + 2 * m, 1 + 2 * m + len(rest)))
    y = array_ops.transpose(y, perm)
    return array_ops.reshape(y, [-1] + [s // int(b) for s, b in zip(sizes, block)] + rest, name=name)


def batch_to_space_nd(input, block_shape, crops, name=None):  # noqa: A002
    """The inverse of :func:`space_to_batch_nd`: batch blocks back into space, then ``crops``."""
    x = convert_to_tensor(input)
    block = _ints(block_shape, "batch_to_space_nd", "block_shape").reshape(-1)
    crop = _ints(crops, "batch_to_space_nd", "crops").reshape(-1, 2)
    m = len(block)
    dims = _static_dims(x, "batch_to_space_nd", 1)
    spatial, rest = dims[1:1 + m], dims[1 + m:]
    y = array_ops.reshape(x, [int(b) for b in block] + [-1] + spatial + rest)
    perm = [m] + [v for i in range(m) for v in (m + 1 + i, i)] + list(range(2 * m + 1, 2 * m + 1 + len(rest)))
    y = array_ops.transpose(y, perm)
    full = [s * int(b) for s, b in zip(spatial, block)]
    y = array_ops.reshape(y, [-1] + full + rest)
    begin = [0] + [int(c[0]) for c in crop] + [0] * len(rest)
    size = [-1] + [f - int(c[0]) - int(c[1]) for f, c in zip(full, crop)] + [-1] * len(rest)
    return indexing_ops.slice(y, begin, size, name=name)


def space_to_batch(input, paddings, block_size=None, name=None, block_shape=None):  # noqa: A002
    """TF1's 4-D ``space_to_batch``: :func:`space_to_batch_nd` with a square ``block_size``."""
    if (block_size is None) == (block_shape is None):
        raise ValueError("tf.space_to_batch: give exactly one of block_size and block_shape")
    size = int(block_size if block_size is not None else block_shape)
    return space_to_batch_nd(input, [size, size], paddings, name=name)


def batch_to_space(input, crops, block_size, name=None, block_shape=None):  # noqa: A002
    """TF1's 4-D ``batch_to_space``: :func:`batch_to_space_nd` with a square ``block_size``."""
    size = int(block_size if block_shape is None else block_shape)
    return batch_to_space_nd(input, [size, size], crops, name=name)


def required_space_to_batch_paddings(input_shape, block_shape, base_paddings=None, name=None):
    """``(paddings, crops)`` making ``input_shape`` plus ``base_paddings`` divisible by ``block_shape``."""
    shape = math_ops.cast(convert_to_tensor(input_shape), _dt.int32)
    block = math_ops.cast(convert_to_tensor(block_shape), _dt.int32)
    base = (math_ops.cast(convert_to_tensor(base_paddings), _dt.int32) if base_paddings is not None
            else array_ops.zeros(array_ops.stack([array_ops.shape(block)[0], 2]), _dt.int32))
    start, orig_end = base[:, 0], base[:, 1]
    full = shape + start + orig_end
    extra = math_ops.floormod(block - math_ops.floormod(full, block), block)
    end = orig_end + extra
    return array_ops.stack([start, end], 1), array_ops.stack([array_ops.zeros_like(extra), extra], 1)


def dynamic_partition(data, partitions, num_partitions, name=None):
    """``num_partitions`` tensors: partition ``i`` holds the slices of ``data`` whose entry in
    ``partitions`` (a prefix of ``data``'s shape) is ``i``, in order."""
    d = convert_to_tensor(data)
    p = convert_to_tensor(partitions)
    return [indexing_ops.boolean_mask(d, math_ops.equal(p, math_ops.cast(i, p.dtype)))
            for i in range(int(num_partitions))]


def dynamic_stitch(indices, data, name=None):
    """``merged[indices[m][i]] = data[m][i]``: the slices of ``data`` placed at ``indices`` (a later
    occurrence of an index wins, as TF's); ``max(indices) + 1`` rows."""
    idx_parts = [convert_to_tensor(i) for i in indices]
    data_parts = [convert_to_tensor(d) for d in data]
    item = data_parts[0].shape.as_list()[idx_parts[0].shape.rank:]
    flat_idx = array_ops.concat([array_ops.reshape(math_ops.cast(i, _dt.int32), [-1]) for i in idx_parts], 0)
    flat_data = array_ops.concat([array_ops.reshape(d, [-1] + item) for d in data_parts], 0)
    n = reduce_ops.reduce_max(flat_idx) + 1
    position = indexing_ops.range(array_ops.shape(flat_idx)[0])
    winner = segment_ops.unsorted_segment_max(position, flat_idx, n)      # the last writer of each row
    filled = math_ops.greater_equal(winner, 0)
    rows = array_ops.gather(flat_data, math_ops.maximum(winner, 0))
    mask = array_ops.reshape(math_ops.cast(filled, rows.dtype), array_ops.concat([[-1], [1] * len(item)], 0))
    return math_ops.multiply(rows, mask, name=name)


SetDiff1D = collections.namedtuple("ListDiff", ["out", "idx"])


def setdiff1d(x, y, index_dtype=_dt.int32, name=None):
    """``(out, idx)``: the values of ``x`` that are not in ``y``, in order, and their positions."""
    x = convert_to_tensor(x)
    y = convert_to_tensor(y, dtype=x.dtype)
    found = reduce_ops.reduce_any(math_ops.equal(array_ops.expand_dims(x, 1), array_ops.expand_dims(y, 0)), 1)
    keep = math_ops.logical_not(found)
    idx = indexing_ops.boolean_mask(indexing_ops.range(array_ops.shape(x, out_type=index_dtype)[0]), keep)
    return SetDiff1D(indexing_ops.boolean_mask(x, keep), idx)


def batch_gather(params, indices, name=None):
    """``params[b..., indices[b..., i]]``: a gather per batch position (``gather`` with
    ``batch_dims = rank(indices) - 1``)."""
    ind = convert_to_tensor(indices)
    if ind.shape.rank is None:
        raise ValueError("tf.batch_gather: indices need a known rank")
    return array_ops.gather(params, ind, axis=ind.shape.rank - 1, batch_dims=ind.shape.rank - 1, name=name)


def sparse_to_dense(sparse_indices, output_shape, sparse_values, default_value=0, validate_indices=True, name=None):
    """A dense tensor of ``output_shape`` with ``sparse_values`` (a vector or a scalar for all) at
    ``sparse_indices`` (a scalar, a vector of rows, or ``[N, rank]`` coordinates) and
    ``default_value`` elsewhere; ``validate_indices`` refuses unsorted or repeated indices."""
    ind = convert_to_tensor(sparse_indices)
    ind = array_ops.reshape(ind, [-1, 1]) if ind.shape.rank in (0, 1) else ind
    values = convert_to_tensor(sparse_values)
    default = convert_to_tensor(default_value, dtype=values.dtype)
    shape = math_ops.cast(convert_to_tensor(output_shape), ind.dtype)
    if validate_indices:
        static = constant_value(ind)
        if static is not None and len(static) > 1:
            dims = constant_value(shape)
            lin = (np.ravel_multi_index(tuple(np.asarray(static).T), tuple(np.asarray(dims).reshape(-1)), mode="clip")
                   if dims is not None else None)
            if lin is not None and np.any(np.diff(lin) <= 0):
                raise errors.InvalidArgumentError(
                    "tf.sparse_to_dense: indices are not in lexicographic order or repeat; "
                    "Hint: sort them or pass validate_indices=False")
    values = array_ops.broadcast_to(values, array_ops.shape(ind)[:1])
    dense = array_ops.fill(shape, default)
    return indexing_ops.tensor_scatter_nd_update(dense, ind, values, name=name)


def sparse_matmul(a, b, transpose_a=False, transpose_b=False, a_is_sparse=False, b_is_sparse=False, name=None):
    """``matmul(a, b)``; ``a_is_sparse``/``b_is_sparse`` were hints for TF's kernel choice."""
    return math_ops.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b, name=name)


def histogram_fixed_width_bins(values, value_range, nbins=100, dtype=_dt.int32, name=None):
    """The bin of each value among ``nbins`` equal bins over ``value_range`` (values outside go
    to the first or last bin)."""
    v = convert_to_tensor(values)
    rng = math_ops.cast(convert_to_tensor(value_range), v.dtype)
    scaled = (v - rng[0]) / (rng[1] - rng[0])
    bins = math_ops.floor(scaled * math_ops.cast(nbins, v.dtype))
    bins = math_ops.minimum(math_ops.maximum(math_ops.cast(bins, _dt.int64), 0), nbins - 1)
    return math_ops.cast(bins, dtype, name=name)


def clip_by_average_norm(t, clip_norm, name=None):
    """``t * clip_norm / max(l2norm(t) / size(t), clip_norm)``: clipped so that its L2 norm
    averaged over its elements is at most ``clip_norm``."""
    t = convert_to_tensor(t)
    n = math_ops.cast(array_ops.size(t), t.dtype)
    inv_norm = math_ops.rsqrt(reduce_ops.reduce_sum(t * t))
    clip = math_ops.cast(clip_norm, t.dtype)
    return math_ops.multiply(t * clip, math_ops.minimum(inv_norm * n, 1.0 / clip), name=name)


def convert_to_tensor_or_indexed_slices(value, dtype=None, name=None):
    """``value`` itself when it is an ``IndexedSlices``, else ``convert_to_tensor(value)``."""
    if isinstance(value, IndexedSlices):
        if dtype is not None and _dt.as_dtype(dtype) is not value.values.dtype:
            raise ValueError(f"Tensor conversion requested dtype {_dt.as_dtype(dtype).name} for IndexedSlices "
                             f"of dtype {value.values.dtype.name}")
        return value
    return convert_to_tensor(value, dtype=dtype, name=name)


def convert_to_tensor_or_sparse_tensor(value, dtype=None, name=None):
    """``value`` as a ``SparseTensor`` when it is one (or a ``SparseTensorValue``), else a tensor."""
    from tensorweave.sparse import SparseTensor, SparseTensorValue
    if isinstance(value, SparseTensorValue):
        value = SparseTensor.from_value(value)
    if isinstance(value, SparseTensor):
        if dtype is not None and _dt.as_dtype(dtype) is not value.dtype:
            raise ValueError(f"Sparse dtype mismatch: requested {_dt.as_dtype(dtype).name}, got {value.dtype.name}")
        return value
    return convert_to_tensor(value, dtype=dtype, name=name)


def guarantee_const(input, name=None):  # noqa: A002
    """``input`` (TF's promise to its runtime that the value never changes; an identity here)."""
    return array_ops.identity(input, name=name)
