"""CPU kernels for ``ops/array_ops.py``."""
import math

import numpy as np

from tensorweave.core import errors
from tensorweave.core.registry import register_kernel as k
from tensorweave.core.shape import fmt
from tensorweave.kernels.cpu import reduce_kernels
from tensorweave.ops.array_ops import reshape_target


@k("Const")
def _const(value, dtype):
    return value


@k("Placeholder")
def _placeholder(dtype, shape, node_name="Placeholder"):
    raise errors.InvalidArgumentError(
        f"You must feed a value for placeholder tensor '{node_name}' with dtype {dtype.name} and shape {fmt(shape)}. "
        "Hint: pass it in feed_dict.")


k("PlaceholderWithDefault")(lambda x, shape: x)
k("Identity")(lambda x: x)
k("StopGradient")(lambda x: x)
k("IdentityN")(lambda *xs, n: xs)
k("Shape")(lambda x, out_type: np.array(np.shape(x), dtype=out_type.np_dtype))
k("Size")(lambda x, out_type: np.array(np.size(x), dtype=out_type.np_dtype))
k("Rank")(lambda x: np.array(np.ndim(x), dtype=np.int32))


@k("Reshape")
def _reshape(x, shape):
    try:
        return np.reshape(x, tuple(int(d) for d in shape))
    except ValueError:
        dims = [int(d) for d in shape]
        if np.size(x) == 0 and dims.count(-1) == 1:   # TF's rule for the -1 of an empty tensor
            return np.reshape(x, reshape_target(list(np.shape(x)), dims))
        raise ValueError(f"Cannot reshape a tensor with {np.size(x)} elements to shape {shape.tolist()}") from None


k("BroadcastTo")(lambda x, shape: np.broadcast_to(x, tuple(int(d) for d in shape)))


#: the dtypes SumToLike sums with the compiled loop (tests switch it off: NumPy's np.sum, the same bits)
LOOP_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@k("SumToLike")
def _sum_to_like(g, like):
    target = np.shape(like)
    if g.shape == target:
        return g
    lead = g.ndim - len(target)
    axes = tuple(range(lead)) + tuple(i + lead for i, d in enumerate(target) if d == 1 and g.shape[i + lead] != 1)
    if not axes:
        return g.reshape(target)
    k = len(axes)
    if axes[-1] == k - 1 and g.dtype in LOOP_DTYPES and g.flags.c_contiguous and g.size:
        # a bias gradient (the leading axes summed): NumPy's sums (reduce_kernels._sum_middle, rows
        # of 8 or more as Sum takes it) in a loop that releases the GIL (a rank thread's, beside the
        # other rank's work), called directly: through _middle_sum's general checks it cost more
        # Python than np.sum did (60 vs 29 µs for 128 x 512, where the loop takes 11)
        rows = math.prod(g.shape[:k])
        cols = g.size // rows
        if cols >= 8:
            out = np.zeros((1, cols), g.dtype)
            reduce_kernels._sum_middle(g.reshape(1, rows, cols), out)
            return out.reshape(target)
    return np.sum(g, axis=axes, keepdims=True, dtype=g.dtype).reshape(target)


@k("Fill")
def _fill(dims, value):
    return np.full(tuple(int(d) for d in dims), value, dtype=np.asarray(value).dtype)


k("ZerosLike")(np.zeros_like)
k("OnesLike")(np.ones_like)
k("Pack")(lambda *xs, axis: np.stack(xs, axis=axis))
k("Unpack")(lambda x, axis, num: tuple(np.moveaxis(x, axis, 0)))
k("ConcatV2")(lambda *xs, axis: np.concatenate(xs, axis=axis))


@k("Split")
def _split(x, axis, sizes):
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


k("ExpandDims")(lambda x, axis: np.expand_dims(x, axis))


@k("Squeeze")
def _squeeze(x, axis):
    return np.squeeze(x, axis=axis if axis else None)


k("Transpose")(lambda x, perm: np.transpose(x, perm))
@k("StridedSlice")
def _strided_slice(x, spec):
    out = x[spec]
    if isinstance(out, (np.ndarray, np.generic)):
        return out
    # one element of a string (object) array: keep it a 0-d object array (np.asarray would make
    # fixed-width bytes and drop trailing NULs)
    arr = np.empty((), dtype=object)
    arr[()] = out
    return arr


@k("StridedSliceGrad")
def _slice_grad(g, x, spec):
    out = np.zeros(np.shape(x), dtype=g.dtype)
    out[spec] = g
    return out


def _check_indices(indices, limit, what="indices", allow_negative=False):
    """Raises naming the first bad entry and its position, e.g. ``indices[1,0] = 7 is not in [0, 3)``."""
    indices = np.asarray(indices)
    if not indices.size:
        return
    low = indices.min() < 0 and not allow_negative
    if low or indices.max() >= limit:
        bad = (indices >= limit) if allow_negative else ((indices < 0) | (indices >= limit))
        pos = np.unravel_index(int(np.argmax(bad)), indices.shape)
        raise errors.InvalidArgumentError(
            f"{what}[{','.join(str(int(p)) for p in pos)}] = {int(indices[pos])} is not in [0, {limit})")


@k("GatherV2")
def _gather(params, indices, axis, batch_dims):
    axis = axis % params.ndim
    _check_indices(indices, params.shape[axis])
    if batch_dims == 0:
        return np.take(params, indices, axis=axis)
    out_shape = params.shape[:axis] + indices.shape[batch_dims:] + params.shape[axis + 1:]
    return _batched(lambda p, i: np.take(p, i, axis=axis - batch_dims), params, indices, batch_dims, out_shape)


def _batched(fn, params, indices, batch_dims, out_shape):
    n = int(np.prod(params.shape[:batch_dims]))
    if n == 0:      # no batch to stack: an empty result of the full shape and the params' dtype
        return np.zeros(out_shape, params.dtype)
    p = params.reshape((n,) + params.shape[batch_dims:])
    i = indices.reshape((n,) + indices.shape[batch_dims:])
    return np.stack([fn(p[b], i[b]) for b in range(n)]).reshape(out_shape)


@k("GatherGrad")
def _gather_grad(g, indices, params, axis, batch_dims):
    axis = axis % params.ndim
    out = np.zeros(params.shape, dtype=g.dtype)
    if batch_dims == 0:
        moved = np.moveaxis(out, axis, 0)
        gm = np.moveaxis(g, list(range(axis, axis + indices.ndim)), list(range(indices.ndim)))
        np.add.at(moved, indices, gm)
        return out
    for b in np.ndindex(*params.shape[:batch_dims]):
        sub = _gather_grad(g[b], indices[b], params[b], axis - batch_dims, 0)
        out[b] = sub
    return out


@k("UnsortedSegmentSum")
def _useg(data, ids, num_segments):
    n = int(num_segments)
    data, ids = np.asarray(data), np.asarray(ids)
    _check_indices(ids, n, "segment_ids", allow_negative=True)
    out = np.zeros((n,) + data.shape[ids.ndim:], dtype=data.dtype)
    keep = ids >= 0  # TF drops entries with a negative segment id (NumPy would wrap them around)
    if keep.all():
        np.add.at(out, ids, data)
    else:
        np.add.at(out, ids[keep], data[keep])
    return out
