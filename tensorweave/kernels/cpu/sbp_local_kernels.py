"""CPU kernels for ``ops/sbp_local_ops.py`` (rank-local lowerings of SBP signatures)."""
import numpy as np

from tensorweave.core.registry import get_op
from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu.array_kernels import _check_indices


@k("SbpLocalShape")
def _local_shape(x, *ignored, shape, broadcast=False):
    x = np.asarray(x)
    return np.broadcast_to(x, tuple(shape)) if broadcast else np.reshape(x, tuple(shape))


@k("SbpLocalConst")
def _local_const(*inputs, value, dtype, like=0):
    return np.array(value, dtype=dtype.np_dtype if dtype is not None else np.asarray(inputs[like]).dtype)


@k("SbpReplaceInput")
def _replace_input(*inputs, op_type, op_attrs, index, value):
    inputs = list(inputs)
    inputs[index] = np.asarray(value)
    return get_op(op_type).kernel("CPU")(*inputs, **op_attrs)


@k("SbpSliceOf")
def _slice_of(*inputs, sbp_op, sbp_slices, **attrs):
    out = np.asarray(get_op(sbp_op).kernel("CPU")(*inputs, **attrs))
    return out[tuple(slice(start, stop) for start, stop in sbp_slices)]


def _local_rows(indices, offset, rows):
    local = np.asarray(indices).astype(np.int64) - offset
    inside = (local >= 0) & (local < rows)
    return np.where(inside, local, 0), inside


@k("SbpMaskedGather")
def _masked_gather(params, indices, axis, batch_dims, offset, limit):
    axis = axis % params.ndim
    _check_indices(indices, limit)
    local, inside = _local_rows(indices, offset, params.shape[axis])
    if params.shape[axis] == 0:
        shape = params.shape[:axis] + np.shape(indices) + params.shape[axis + 1:]
        return np.zeros(shape, dtype=params.dtype)
    out = np.take(params, local, axis=axis)
    mask = inside.reshape((1,) * axis + inside.shape + (1,) * (params.ndim - axis - 1))
    return np.where(mask, out, np.zeros((), params.dtype))


@k("SbpMaskedGatherGrad")
def _masked_gather_grad(g, indices, params, axis, batch_dims, offset):
    axis = axis % params.ndim
    out = np.zeros(params.shape, dtype=g.dtype)
    local, inside = _local_rows(indices, offset, params.shape[axis])
    moved = np.moveaxis(out, axis, 0)
    gm = np.moveaxis(g, list(range(axis, axis + local.ndim)), list(range(local.ndim)))
    np.add.at(moved, local[inside], gm[inside])
    return out


@k("SbpMaskedResourceGather")
def _masked_resource_gather(var, indices, offset, limit, dtype, shape):
    return _masked_gather(var._read(), indices, 0, 0, offset, limit)


@k("SbpRowsOnly")
def _rows_only(*inputs, op_type, op_attrs, index_input, rows_input, offset, rows):
    inputs = list(inputs)
    ids = np.asarray(inputs[index_input])
    local, inside = _local_rows(ids, offset, rows)
    if not inside.any() and not get_op(op_type).n_outputs(op_attrs):
        return ()       # no row of this rank's (the sparse update kernels reject zero rows)
    inputs[index_input] = local[inside].astype(ids.dtype)
    inputs[rows_input] = np.asarray(inputs[rows_input])[inside]
    return get_op(op_type).kernel("CPU")(*inputs, **op_attrs)


@k("SbpEmbedded")
def _embedded(*inputs, op_type, op_attrs, index, embeds, zeroed):
    inputs = list(inputs)
    x = np.asarray(inputs[index])
    shape, where = list(x.shape), [slice(None)] * x.ndim
    for axis, start, full in embeds:
        shape[axis], where[axis] = full, slice(start, start + x.shape[axis])
    whole = np.zeros(shape, dtype=x.dtype)
    whole[tuple(where)] = x
    inputs[index] = whole
    for i in zeroed:
        inputs[i] = np.zeros_like(np.asarray(inputs[i]))
    return get_op(op_type).kernel("CPU")(*inputs, **op_attrs)
