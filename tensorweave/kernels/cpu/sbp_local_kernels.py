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


# ---- random draws by counter offset (SbpRandomPiece) --------------------------------------------
# The uniform float and full-range integer samplers consume a fixed number of Philox words per
# value (float64/int64/uint64: one 64-bit word; float32/int32/uint32: half a word, NumPy keeping
# the other half for the next value), so value i of a draw is a function of the stream position
# and i: a rank can compute only its values, skipping the others' words by moving the counter
# (JAX's partitionable threefry does this per element; here a skip is one Philox.advance).
_WIDE = {np.dtype(d) for d in (np.float64, np.int64, np.uint64)}
_NARROW = {np.dtype(d) for d in (np.float32, np.int32, np.uint32)}


def _skip_words(bitgen, n):
    """Moves a Philox bit generator ``n`` 64-bit words on (its 4-word buffer first)."""
    state = bitgen.state
    buffered = 4 - state["buffer_pos"]
    if n <= buffered:
        bitgen.random_raw(n)
        return
    bitgen.random_raw(buffered)
    bitgen.advance((n - buffered) // 4)     # (empties the buffer; has_uint32 is kept below)
    bitgen.random_raw((n - buffered) % 4)


def _words_at(state, start, count):
    """64-bit words ``[start, start + count)`` of the Philox stream at ``state`` (a state dict)."""
    bitgen = np.random.Philox()
    bitgen.state = state
    _skip_words(bitgen, start)
    return bitgen.random_raw(count) if count else np.zeros(0, np.uint64)


def _bits_at(state, np_dtype, lo, hi):
    """The raw bits (uint64 or uint32) values ``[lo, hi)`` of a draw from ``state`` are made of."""
    if np_dtype in _WIDE:
        return _words_at(state, lo, hi - lo)
    pending = int(state["has_uint32"])       # a half word left by an earlier 32-bit draw
    out = np.zeros(hi - lo, np.uint32)
    if lo < pending:
        out[0] = state["uinteger"]
    a, b = max(lo, pending) - pending, hi - pending     # 32-bit halves [a, b) after the pending one
    if b > a:
        words = _words_at(state, a // 2, (b + 1) // 2 - a // 2)
        halves = np.stack([words & 0xFFFFFFFF, words >> 32], axis=1).reshape(-1).astype(np.uint32)
        out[max(lo, pending) - lo:] = halves[a % 2:a % 2 + (b - a)]
    return out


def _state_after(state, np_dtype, total):
    """The stream's state after a whole draw of ``total`` values from ``state``."""
    bitgen = np.random.Philox()
    bitgen.state = state
    pending, uinteger = int(state["has_uint32"]), int(state["uinteger"])
    if np_dtype in _WIDE:
        _skip_words(bitgen, total)
    elif total <= pending:
        pending = pending - total
    else:
        halves = total - pending
        _skip_words(bitgen, (halves - 1) // 2)
        if halves % 2:
            last = int(bitgen.random_raw())
            pending, uinteger = 1, last >> 32
        else:
            _skip_words(bitgen, 1)
            pending = 0
    new = bitgen.state
    new["has_uint32"], new["uinteger"] = pending, uinteger
    return new


def _values(bits, np_dtype):
    """NumPy's uniform [0, 1) floats and full-range integers from their raw bits."""
    if np_dtype == np.float64:
        return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
    if np_dtype == np.float32:
        return (bits >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)
    if np_dtype.kind == "u":
        return bits.astype(np_dtype)
    info = np.iinfo(np_dtype)      # off + bits, wrapping: min + bits
    return (bits.astype(np.uint64 if np_dtype.itemsize == 8 else np.uint32) + np.array(info.min).astype(
        bits.dtype)).astype(np_dtype)


def counter_draw(bitgen, np_dtype, shape, slices):
    """The values at ``slices`` (``(start, stop)`` per axis) of a uniform/full-range draw of
    ``shape`` from ``bitgen`` (a Philox bit generator), computing only the words from the
    slice's first to its last value (a leading-axis slice: its own), and moving ``bitgen`` to
    where the whole draw leaves it.

    >>> one, rank = np.random.Philox(7), np.random.Philox(7)
    >>> whole = np.random.Generator(one).random((5, 4), np.float32)
    >>> piece = counter_draw(rank, np.float32, (5, 4), ((3, 5), (0, 4)))
    >>> bool((piece == whole[3:5]).all()), rank.random_raw() == one.random_raw()
    (True, True)
    """
    np_dtype = np.dtype(np_dtype)
    state = bitgen.state
    grid = np.ix_(*[np.arange(a, b) for a, b in slices]) if slices else ()
    flat = np.ravel_multi_index(np.broadcast_arrays(*grid), shape) if len(shape) else np.zeros((), np.int64)
    flat = np.asarray(flat, np.int64).reshape([b - a for a, b in slices])
    if flat.size:
        lo, hi = int(flat.min()), int(flat.max()) + 1
        out = _values(_bits_at(state, np_dtype, lo, hi), np_dtype)[flat - lo]
    else:
        out = np.zeros(flat.shape, np_dtype)
    bitgen.state = _state_after(state, np_dtype, int(np.prod(shape, dtype=np.int64)))
    return out


@k("SbpRandomPiece")
def _random_piece(*inputs, sbp_op, sbp_slices, **attrs):
    from tensorweave.kernels.cpu.random_kernels import _dims, cpu_stream, stateless_stream
    shape = _dims(inputs[0])
    gen = cpu_stream(attrs["state"]) if "state" in attrs else stateless_stream(inputs[1])
    return counter_draw(gen.bit_generator, attrs["dtype"].np_dtype, shape, sbp_slices)
