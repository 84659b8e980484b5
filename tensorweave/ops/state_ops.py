"""Variable ops: a handle node, reads, assignments, sparse reads (gather).

A variable's value lives in its ``Variable`` object; ``VarHandleOp`` yields that object
(dtype ``resource``) and the other ops read or replace its value. Assignments replace
the stored array; row updates (scatters, the optimizers' fused updates) write into it
through ``Variable._storage_for_update``, which copies first when a value already read
still refers to it — a value once read never changes.
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.registry import get_op, register_kernel, register_op
from tensorweave.core.sbp import B, P, Partial, S, Signature
from tensorweave.core.sbp_rules import signatures, through_wrappers
from tensorweave.core.shape import TensorShape, fmt


def _value_spec(attrs):
    return attrs["shape"], attrs["dtype"]


register_op("VarHandleOp", infer=lambda i, a: (TensorShape([]), _dt.resource), stateful=True)


def _read_infer(inputs, attrs):
    return attrs["shape"], attrs["dtype"]


register_op("ReadVariableOp", infer=_read_infer, stateful=True, grad=lambda op, g: [g])


def _assign_infer(inputs, attrs):
    h, v = inputs
    if v.dtype is not attrs["dtype"]:
        raise TypeError(f"Cannot assign a {v.dtype.name} value to a {attrs['dtype'].name} variable. "
                        f"Hint: tw.cast the value to {attrs['dtype'].name}")
    if not attrs["shape"].is_compatible_with(v.shape) and attrs.get("validate_shape", True):
        raise ValueError(f"Cannot assign a value of shape {fmt(v.shape)} to a variable of shape "
                         f"{fmt(attrs['shape'])}")
    return attrs["shape"], attrs["dtype"]


for _name in ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"):
    register_op(_name, infer=_assign_infer, stateful=True)


def _rgather_infer(inputs, attrs):
    h, i = inputs
    s = attrs["shape"]
    if s.rank is None or i.shape.rank is None:
        return TensorShape(None), attrs["dtype"]
    return TensorShape(i.shape.as_list() + s.as_list()[1:]), attrs["dtype"]


def _rgather_grad(op, g):
    from tensorweave.ops.indexed_slices import IndexedSlices
    from tensorweave.ops.array_ops import reshape
    indices = op.inputs[1]
    vshape = op.attrs["shape"]
    dense_shape = np.array(vshape.as_list(), dtype=np.int64)
    values = reshape(g, [-1] + vshape.as_list()[1:])
    return [IndexedSlices(values, reshape(indices, [-1]), dense_shape), None]


register_op("ResourceGather", infer=_rgather_infer, stateful=True, grad=_rgather_grad)


def _scatter_infer(inputs, attrs):
    return attrs["shape"], attrs["dtype"]


register_op("ResourceScatterAdd", infer=_scatter_infer, stateful=True)
register_op("ResourceScatterUpdate", infer=_scatter_infer, stateful=True)


# ---- CPU kernels (the storage is host memory on every CPU device) --------------------------
@register_kernel("VarHandleOp", "CPU")
def _handle(variable, shared_name, dtype, shape):
    return variable


@register_kernel("ReadVariableOp", "CPU")
def _read(var, dtype, shape):
    return var._read()


def _check_shape(var, value, shape):
    if np.shape(value) == shape.as_tuple():   # the common case, without building a TensorShape
        return
    if shape.rank is not None and not shape.is_compatible_with(np.shape(value)):
        raise errors.InvalidArgumentError(
            f"Cannot assign a value of shape {fmt(np.shape(value))} to variable '{var.name}' of shape {fmt(shape)}")


@register_kernel("AssignVariableOp", "CPU")
def _assign(var, value, dtype, shape, validate_shape=True):
    _check_shape(var, value, shape)
    var._write(np.asarray(value, dtype=dtype.np_dtype))
    return var._value


@register_kernel("AssignAddVariableOp", "CPU")
def _assign_add(var, delta, dtype, shape, validate_shape=True):
    _check_shape(var, delta, shape)
    var._write(np.add(var._read(), delta))
    return var._value


@register_kernel("AssignSubVariableOp", "CPU")
def _assign_sub(var, delta, dtype, shape, validate_shape=True):
    _check_shape(var, delta, shape)
    var._write(np.subtract(var._read(), delta))
    return var._value


@register_kernel("ResourceGather", "CPU")
def _rgather(var, indices, dtype, shape):
    value = var._read()
    if indices.size and (indices.min() < 0 or indices.max() >= value.shape[0]):
        raise errors.InvalidArgumentError(
            f"indices[...] = {indices.max() if indices.max() >= value.shape[0] else indices.min()} "
            f"is not in [0, {value.shape[0]}) for variable '{var.name}'")
    return np.take(value, indices, axis=0)


@register_kernel("ResourceScatterAdd", "CPU")
def _rscatter_add(var, indices, updates, dtype, shape):
    value = var._storage_for_update()
    np.add.at(value, indices, updates)
    return value


@register_kernel("ResourceScatterUpdate", "CPU")
def _rscatter_update(var, indices, updates, dtype, shape):
    value = var._storage_for_update()
    value[indices] = updates
    return value


# ---- SBP rules (core/sbp.py): a handle's SBP is its variable's (given at creation: it has no rule
# of its own). Reads and assignments keep the layout; the kernels check values against attr
# ``shape``, which a hook makes the rank's local shape. A row-split variable (an embedding table):
# a gather takes the rank's rows (zeros elsewhere: P), a scatter only the rank's rows. A handle's
# ShardInfo entry describes its variable (logical shape, the rank's slice).
def _local_shape(which, index):
    def local(op_type, attrs, shard):
        dims = shard.out_local_shape(index) if which == "out" else shard.in_local_shape(index)
        return op_type, {**attrs, "shape": TensorShape(list(dims))}
    return through_wrappers(local)


def _read_sbp(inputs, attrs):
    hook = _local_shape("out", 0)
    for i in range(attrs["shape"].rank or 0):
        yield Signature([S(i)], [S(i)], hook)
    yield from (Signature([Partial(k)], [Partial(k)], hook) for k in Partial.KINDS)


def _assign_sbp(inputs, attrs):
    hook = _local_shape("in", 1)
    for i in range(inputs[1].rank):
        yield Signature([S(i), S(i)], [S(i)], hook)
    yield Signature([P, P], [P], hook)       # each rank stores (or adds) its share


def _rgather_sbp(inputs, attrs):
    idx, rank = inputs[1], attrs["shape"].rank or 0
    for k in range(idx.rank):
        yield [B, S(k)], [S(k)]
    @through_wrappers
    def local(op_type, attrs, shard):       # the variable's rows, and the output's trailing dims
        return op_type, {**attrs, "shape": TensorShape(list(shard.in_local_shape(0)))}
    for a in range(1, rank):
        yield Signature([S(a), B], [S(idx.rank + a - 1)], local)
    if rank:
        yield Signature([S(0), B], [P], _masked_gather_hook)
    yield [P, B], [P]


def _masked_gather_hook(op_type, attrs, shard):
    # limit: the variable's logical rows (attr "shape" may already be the piece's: a column split
    # on an earlier mesh axis sets it; found by the exhaustive 2x2 checker)
    rows = shard.in_shapes[0][0] if shard.in_shapes[0] else attrs["shape"][0]
    return "SbpMaskedResourceGather", {"offset": shard.in_offsets(0)[0], "limit": rows,
                                       "dtype": attrs["dtype"], "shape": TensorShape(list(shard.in_local_shape(0)))}


def rows_only_hook(index_input, rows_input):
    """A ``local`` hook running a row update of a row-split variable (input 0) on the rank's rows
    only (``SbpRowsOnly``); attr ``shape``, where the op has it, becomes the piece's."""
    def local(op_type, attrs, shard):
        if op_type == "SbpRowsOnly":
            return op_type, attrs
        inner = {**attrs, "shape": TensorShape(list(shard.in_local_shape(0)))} if "shape" in attrs else attrs
        return "SbpRowsOnly", {"op_type": op_type, "op_attrs": inner, "index_input": index_input,
                               "rows_input": rows_input, "offset": shard.in_offsets(0)[0],
                               "rows": shard.in_local_shape(0)[0]}
    return local


def _rscatter_sbp(inputs, attrs):
    idx, rank = inputs[1], attrs["shape"].rank or 0
    for a in range(1, rank):
        yield Signature([S(a), B, S(idx.rank - 1 + a)], [S(a)], _local_shape("out", 0))
    if rank:
        yield Signature([S(0), B, B], [S(0)], rows_only_hook(1, 2))
    yield Signature([P, B, P], [P])


get_op("ReadVariableOp").sbp = signatures(_read_sbp)
for _name in ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"):
    get_op(_name).sbp = signatures(_assign_sbp)
get_op("ResourceGather").sbp = signatures(_rgather_sbp)
get_op("ResourceScatterAdd").sbp = get_op("ResourceScatterUpdate").sbp = signatures(_rscatter_sbp)
