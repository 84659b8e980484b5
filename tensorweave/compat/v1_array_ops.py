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

from tensorweave.ops.indexed_slices import IndexedSlices
from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import constant_value
from tensorweave.ops import array_ops, indexing_ops, math_ops, reduce_ops
from tensorweave.ops import nn_extra_ops, segment_ops

__all__ = ["space_to_depth", "depth_to_space", "space_to_batch_nd", "space_to_batch", "batch_to_space_nd",
           "batch_to_space", "required_space_to_batch_paddings", "dynamic_partition", "dynamic_stitch", "setdiff1d",
           "batch_gather", "sparse_to_dense", "sparse_matmul", "histogram_fixed_width_bins", "clip_by_average_norm",
           "convert_to_tensor_or_indexed_slices", "convert_to_tensor_or_sparse_tensor", "guarantee_const", "approx_top_k",
           "sparse_merge", "bitcast", "string_split", "variable_axis_size_partitioner", "edit_distance"]


# The block rearrangements are TF2's (ops/nn_extra_ops.py); TF1 differs only in argument order and
# names (name before data_format; space_to_batch/batch_to_space with one square block_size).
def space_to_depth(input, block_size, name=None, data_format="NHWC"):  # noqa: A002 - TF's name
    """Moves ``block_size x block_size`` spatial blocks into the channels (TF1's argument order)."""
    return nn_extra_ops.space_to_depth(input, block_size, data_format=data_format, name=name)


def depth_to_space(input, block_size, name=None, data_format="NHWC"):  # noqa: A002
    """The inverse of :func:`space_to_depth` (TF1's argument order)."""
    return nn_extra_ops.depth_to_space(input, block_size, data_format=data_format, name=name)


space_to_batch_nd = nn_extra_ops.space_to_batch_nd


def batch_to_space_nd(input, block_shape, crops, name=None):  # noqa: A002
    """The inverse of :func:`space_to_batch_nd` (TF2's ``tf.batch_to_space``)."""
    return nn_extra_ops.batch_to_space(input, block_shape, crops, name=name)


def space_to_batch(input, paddings, block_size=None, name=None, block_shape=None):  # noqa: A002
    """TF1's 4-D ``space_to_batch``: :func:`space_to_batch_nd` with a square ``block_size``."""
    if (block_size is None) == (block_shape is None):
        raise ValueError("tf.space_to_batch: give exactly one of block_size and block_shape")
    size = int(block_size if block_size is not None else block_shape)
    return nn_extra_ops.space_to_batch_nd(input, [size, size], paddings, name=name)


def batch_to_space(input, crops, block_size, name=None, block_shape=None):  # noqa: A002
    """TF1's 4-D ``batch_to_space``: :func:`batch_to_space_nd` with a square ``block_size``."""
    size = int(block_size if block_shape is None else block_shape)
    return nn_extra_ops.batch_to_space(input, [size, size], crops, name=name)


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


# ---- more TF1 top-level functions ------------------------------------------------------------------
def approx_top_k(input, k, reduction_dimension=-1, recall_target=0.95, is_max_k=True,  # noqa: A002
                 reduction_input_size_override=-1, aggregate_to_topk=True, name=None):
    """``(values, indices)`` of the ``k`` largest (``is_max_k``) or smallest values along
    ``reduction_dimension``, computed exactly (recall 1)."""
    from tensorweave.compat.v1_nn_extra import approx_max_k, approx_min_k
    return (approx_max_k if is_max_k else approx_min_k)(input, k, reduction_dimension)


def sparse_merge(sp_ids, sp_values, vocab_size, name=None, already_sorted=False):
    """A SparseTensor whose last index is each entry's id (``sp_ids``' values) and whose values are
    ``sp_values``' (a float per id, e.g. a bag of weighted words), of last dimension ``vocab_size``."""
    from tensorweave.sparse import SparseTensor, reorder
    ids = math_ops.cast(sp_ids.values, _dt.int64)
    indices = array_ops.concat([math_ops.cast(sp_ids.indices[:, :-1], _dt.int64), array_ops.expand_dims(ids, 1)], 1)
    shape = array_ops.concat([math_ops.cast(sp_ids.dense_shape[:-1], _dt.int64),
                              array_ops.reshape(math_ops.cast(vocab_size, _dt.int64), [1])], 0)
    out = SparseTensor(indices, sp_values.values, shape)
    return out if already_sorted else reorder(out)


def bitcast(input, type, name=None):  # noqa: A002 - TF's names
    """The same bytes seen as ``type``: a larger element size removes the last dimension (its size
    must be the ratio), a smaller one adds a last dimension of the ratio."""
    from tensorweave.ops.script_ops import numpy_function
    x = convert_to_tensor(input)
    to = _dt.as_dtype(type)
    src, dst = np.dtype(x.dtype.np_dtype).itemsize, np.dtype(to.np_dtype).itemsize
    dims = x.shape.as_list() if x.shape.rank is not None else None
    if src < dst and dims is not None and (not dims or dims[-1] != dst // src):
        raise errors.InvalidArgumentError(f"tf.bitcast: cannot bitcast from {x.dtype.name} to {to.name}: the last "
                                          f"dimension of shape {dims} must be {dst // src}")

    def view(a):
        a = np.ascontiguousarray(a)
        if src > dst:
            return a.view(to.np_dtype).reshape(a.shape + (src // dst,))
        if src < dst:
            return a.view(to.np_dtype).reshape(a.shape[:-1])
        return a.view(to.np_dtype)
    if x.shape.rank is not None and hasattr(x, "numpy"):
        return convert_to_tensor(view(x.numpy()), dtype=to)
    return numpy_function(view, [x], to, stateful=False, name=name or "Bitcast")


def string_split(source, sep=None, skip_empty=True, delimiter=None, result_type="SparseTensor", name=None):
    """Splits each string of the 1-D ``source`` at every character of ``delimiter`` (TF1's rule;
    default " "; empty: into characters), dropping empty tokens with ``skip_empty``; a SparseTensor
    (``result_type="RaggedTensor"``: a RaggedTensor)."""
    import re
    from tensorweave.ops.script_ops import numpy_function
    from tensorweave.sparse import SparseTensor
    if sep is not None and delimiter is not None:
        raise ValueError("string_split: cannot specify both 'sep' and 'delimiter'")
    delim = sep if sep is not None else (delimiter if delimiter is not None else " ")
    delim = delim.decode() if isinstance(delim, bytes) else delim
    pattern = re.compile(b"[" + re.escape(delim.encode()) + b"]") if delim else None

    def split(values):
        rows = []
        for v in np.asarray(values, dtype=object).reshape(-1):
            b = v if isinstance(v, bytes) else str(v).encode()
            tokens = pattern.split(b) if pattern is not None else [b[i:i + 1] for i in range(len(b))]
            rows.append([t for t in tokens if t] if skip_empty else tokens)
        idx = [[i, j] for i, r in enumerate(rows) for j in range(len(r))]
        vals = [t for r in rows for t in r]
        width = max((len(r) for r in rows), default=0)
        return (np.asarray(idx, np.int64).reshape(-1, 2), np.asarray(vals, dtype=object).reshape(-1),
                np.asarray([len(rows), width], np.int64))
    src = convert_to_tensor(source, dtype=_dt.string)
    if src.shape.rank != 1:
        raise ValueError(f"string_split: source must be a vector, got shape {src.shape}")
    indices, values, shape = numpy_function(split, [src], [_dt.int64, _dt.string, _dt.int64], stateful=False,
                                            name=name or "StringSplit")
    out = SparseTensor(array_ops.reshape(indices, [-1, 2]), array_ops.reshape(values, [-1]), array_ops.reshape(shape, [2]))
    if result_type == "RaggedTensor":
        from tensorweave.ragged import RaggedTensor
        return RaggedTensor.from_sparse(out)
    if result_type != "SparseTensor":
        raise ValueError(f"result_type must be 'RaggedTensor' or 'SparseTensor', got {result_type!r}")
    return out


def variable_axis_size_partitioner(max_shard_bytes, axis=0, bytes_per_string_element=16, max_shards=None):
    """A partitioner splitting ``axis`` into shards of at most ``max_shard_bytes`` (at least one
    slice per shard; at most ``max_shards``), for ``get_variable(partitioner=...)``."""
    import math
    if max_shard_bytes < 1 or bytes_per_string_element < 1:
        raise ValueError("Both max_shard_bytes and bytes_per_string_element must be positive. "
                         f"Currently, max_shard_bytes is {max_shard_bytes} and bytes_per_string_element is "
                         f"{bytes_per_string_element}")
    if max_shards and max_shards < 1:
        raise ValueError(f"max_shards must be positive, got {max_shards}")

    def partitioner(shape, dtype):
        from tensorweave.core.shape import as_shape
        s = as_shape(shape)
        if not s.is_fully_defined():
            raise ValueError(f"shape {s} is not fully defined")
        dims = s.as_list()
        dt = _dt.as_dtype(dtype)
        size = bytes_per_string_element if dt is _dt.string else np.dtype(dt.np_dtype).itemsize
        per_slice = float(np.prod(dims)) / dims[axis] * size
        slices_per_shard = max(1, math.floor(max_shard_bytes / per_slice))
        shards = int(math.ceil(dims[axis] / slices_per_shard))
        if max_shards:
            shards = min(max_shards, shards)
        parts = [1] * len(dims)
        parts[axis] = shards
        return parts
    return partitioner


def edit_distance(hypothesis, truth, normalize=True, name="edit_distance"):
    """The Levenshtein distance between the sequences of two SparseTensors (the last dimension
    holds each sequence; the others index them), divided by the truth's length with ``normalize``;
    float32 of shape ``max(dense shapes)[:-1]``."""
    from tensorweave.ops.script_ops import numpy_function

    def sequences(indices, values, shape):
        seqs = {}
        order = np.lexsort(indices.T[::-1]) if len(indices) else []
        for i in order:
            seqs.setdefault(tuple(indices[i][:-1]), []).append(values[i])
        return seqs

    def levenshtein(a, b):
        prev = list(range(len(b) + 1))
        for i, x in enumerate(a, 1):
            cur = [i] + [0] * len(b)
            for j, y in enumerate(b, 1):
                cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
            prev = cur
        return prev[-1]

    def distance(hi, hv, hs, ti, tv, ts):
        out_shape = np.maximum(hs, ts)[:-1]
        hyp, tru = sequences(hi, hv, hs), sequences(ti, tv, ts)
        out = np.zeros(tuple(out_shape), np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            for loc in np.ndindex(*out_shape):
                h, t = hyp.get(loc, []), tru.get(loc, [])
                d = np.float32(levenshtein(h, t))
                if normalize:   # an empty truth: inf, or 0 when the hypothesis is empty too (TF's rule)
                    d = d / np.float32(len(t)) if t else (np.float32(np.inf) if d else np.float32(0))
                out[loc] = d
        return out
    if hypothesis.values.dtype is not truth.values.dtype:
        raise TypeError(f"edit_distance: hypothesis and truth must have the same dtype, got "
                        f"{hypothesis.values.dtype.name} and {truth.values.dtype.name}")
    return numpy_function(distance, [hypothesis.indices, hypothesis.values, hypothesis.dense_shape, truth.indices,
                                     truth.values, truth.dense_shape], _dt.float32, stateful=False, name=name)
