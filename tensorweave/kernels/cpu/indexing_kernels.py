"""CPU kernels for ``ops/indexing_ops.py``.

Index checks raise :class:`InvalidArgumentError` naming the offending position and value,
as TensorFlow's CPU kernels do (negative indices are errors, not Python-style wrap-around).
"""
import numpy as np

from tensorweave.core import errors
from tensorweave.core.registry import register_kernel as k
from tensorweave.core.shape import fmt
from tensorweave.kernels.cpu.util import low_precision


def _require_int(a, what):
    if np.asarray(a).dtype.kind not in "iu":
        # A TypeError lets the dispatcher ask the op's shape rule for the explanation.
        raise TypeError(f"{what} must be an integer tensor, got {np.asarray(a).dtype}")


def _ints(v):
    return [int(d) for d in np.asarray(v).reshape(-1)]


def _pos(flat_i, lead_shape):
    return ",".join(str(int(p)) for p in np.unravel_index(flat_i, lead_shape)) if lead_shape else ""


def _check_nd(idx, lead_shape, limits, what="indices", target="param shape"):
    """``idx`` is (N, M): raise naming the first row that is out of range for ``limits``."""
    if not idx.size:
        return
    bad = np.any((idx < 0) | (idx >= np.asarray(limits, dtype=np.int64)), axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        raise errors.InvalidArgumentError(
            f"{what}[{_pos(i, lead_shape)}] = {idx[i].tolist()} does not index into {target} "
            f"{fmt(list(limits))}")


def _with_batch_coords(indices, batch_dims):
    """Prepends each index vector with the flat number of its batch (to treat batch_dims as 0)."""
    bshape = indices.shape[:batch_dims]
    nb = int(np.prod(bshape, dtype=np.int64))
    inner = indices.reshape((nb,) + indices.shape[batch_dims:])
    b = np.broadcast_to(np.arange(nb, dtype=inner.dtype).reshape((nb,) + (1,) * (inner.ndim - 1)),
                        inner.shape[:-1] + (1,))
    return np.concatenate([b, inner], axis=-1)


@k("GatherNd")
def _gather_nd(params, indices, batch_dims):
    params, indices = np.asarray(params), np.asarray(indices)
    _require_int(indices, "indices")
    if batch_dims:
        flat_p = params.reshape((-1,) + params.shape[batch_dims:])
        out = _gather_nd(flat_p, _with_batch_coords(indices, batch_dims), 0)
        return out.reshape(indices.shape[:-1] + out.shape[indices.ndim - batch_dims:])
    m = indices.shape[-1]
    if m > params.ndim:
        raise ValueError(f"index depth {m} is larger than the rank {params.ndim} of params")
    lead = indices.shape[:-1]
    idx = indices.reshape(int(np.prod(lead, dtype=np.int64)), m).astype(np.int64, copy=False)
    _check_nd(idx, lead, params.shape[:m])
    if m == 0:
        out = np.broadcast_to(params, (idx.shape[0],) + params.shape).copy()
    else:
        out = params[tuple(idx.T)]
    return out.reshape(lead + params.shape[m:])


def _scatter_into(out, indices, updates, ufunc, batch_dims=0):
    """Adds/subtracts/assigns ``updates`` into ``out`` (in place) at the index vectors."""
    _require_int(indices, "indices")
    if batch_dims:
        flat = out.reshape((-1,) + out.shape[batch_dims:])
        _scatter_into(flat, _with_batch_coords(indices, batch_dims), updates, ufunc)
        return
    m = indices.shape[-1]
    lead = indices.shape[:-1]
    if m > out.ndim:
        raise ValueError(f"index depth {m} is larger than the rank {out.ndim} of the output")
    want = lead + out.shape[m:]
    if updates.shape != want:
        raise ValueError(f"updates must have shape indices.shape[:-1] + shape[{m}:] = {fmt(list(want))}, "
                         f"got {fmt(list(updates.shape))}")
    idx = indices.reshape(int(np.prod(lead, dtype=np.int64)), m).astype(np.int64, copy=False)
    _check_nd(idx, lead, out.shape[:m], target="shape")
    upd = updates.reshape((idx.shape[0],) + out.shape[m:])
    if m == 0:
        for u in upd:
            if ufunc is None:
                out[...] = u
            else:
                ufunc(out, u, out=out)
        return
    key = tuple(idx.T)
    if ufunc is None:
        out[key] = upd  # duplicates: the last update wins
    else:
        ufunc.at(out, key, upd)


@k("ScatterNd")
def _scatter_nd(indices, updates, shape, batch_dims):
    updates = np.asarray(updates)
    dims = tuple(_ints(shape))
    if any(d < 0 for d in dims):
        raise ValueError(f"shape must be non-negative, got {list(dims)}")
    out = np.zeros(dims, dtype=updates.dtype)
    _scatter_into(out, np.asarray(indices), updates, np.add, batch_dims)
    return out


def _tensor_scatter(ufunc):
    def kernel(tensor, indices, updates):
        out = np.array(tensor, copy=True)
        _scatter_into(out, np.asarray(indices), np.asarray(updates), ufunc)
        return out
    return kernel


k("TensorScatterAdd")(_tensor_scatter(np.add))
k("TensorScatterSub")(_tensor_scatter(np.subtract))
k("TensorScatterUpdate")(_tensor_scatter(None))
k("TensorScatterMax")(_tensor_scatter(np.maximum))
k("TensorScatterMin")(_tensor_scatter(np.minimum))


@k("OneHot")
def _one_hot(indices, depth, on_value, off_value, axis):
    indices = np.asarray(indices)
    _require_int(indices, "indices")
    depth = int(depth)
    if depth < 0:
        raise ValueError(f"depth must be non-negative, got {depth}")
    axis = indices.ndim if axis == -1 else axis
    cls = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
    hit = np.expand_dims(indices, axis) == cls
    # Out-of-range and negative indices give an all-off vector (TensorFlow's rule).
    return np.where(hit, np.asarray(on_value), np.asarray(off_value)).astype(np.asarray(on_value).dtype)


def _check_paddings(x, paddings, mode):
    p = np.asarray(paddings)
    _require_int(p, "paddings")
    if p.shape != (np.ndim(x), 2):
        raise ValueError(f"paddings must have shape [{np.ndim(x)}, 2] for an input of rank {np.ndim(x)}, "
                         f"got {fmt(list(p.shape))}")
    if p.size and p.min() < 0:
        raise ValueError(f"paddings must be non-negative, got {p.tolist()}")
    if mode != "CONSTANT":
        off = 1 if mode == "REFLECT" else 0
        for ax, (d, (a, b)) in enumerate(zip(np.shape(x), p.tolist())):
            if max(a, b) > d - off:
                raise ValueError(f"{mode} paddings of dimension {ax} must be at most {d - off} "
                                 f"(its size{' - 1' if off else ''}), got {[a, b]}")
    return [tuple(r) for r in p.tolist()]


@k("PadV2")
def _pad(x, paddings, constant_values):
    x = np.asarray(x)
    pw = _check_paddings(x, paddings, "CONSTANT")
    out = np.full(tuple(d + a + b for d, (a, b) in zip(x.shape, pw)), constant_values, dtype=x.dtype)
    out[tuple(slice(a, a + d) for d, (a, _) in zip(x.shape, pw))] = x
    return out


@k("MirrorPad")
def _mirror_pad(x, paddings, mode):
    x = np.asarray(x)
    pw = _check_paddings(x, paddings, mode)
    if x.dtype in low_precision():
        return np.pad(x.astype(np.float32), pw, mode=mode.lower()).astype(x.dtype)
    return np.pad(x, pw, mode=mode.lower())


@k("MirrorPadGrad")
def _mirror_pad_grad(g, paddings, mode):
    g = np.asarray(g)
    pw = [tuple(r) for r in np.asarray(paddings).tolist()]
    off = 1 if mode == "REFLECT" else 0
    for ax, (a, b) in enumerate(pw):
        moved = np.moveaxis(g, ax, 0)
        n = moved.shape[0] - a - b
        core = moved[a:a + n].copy()
        # Each padded entry is a copy of one interior entry: add its gradient back there.
        if a:
            core[off:off + a] += moved[:a][::-1]
        if b:
            core[n - off - b:n - off] += moved[a + n:][::-1]
        g = np.moveaxis(core, 0, ax)
    return g


@k("Tile")
def _tile(x, multiples):
    x = np.asarray(x)
    m = np.asarray(multiples)
    _require_int(m, "multiples")
    if m.shape != (x.ndim,):
        raise ValueError(f"multiples must have length {x.ndim} (the input's rank), got shape {fmt(list(m.shape))}")
    if m.size and m.min() < 0:
        raise ValueError(f"multiples must be non-negative, got {m.tolist()}")
    return np.tile(x, tuple(m.tolist()))


@k("ReverseV2")
def _reverse(x, axis):
    return np.flip(x, axis=axis) if axis else np.asarray(x)


@k("Range")
def _range(start, limit, delta, dtype):
    s, l, d = (np.asarray(v).item() for v in (start, limit, delta))
    if d == 0:
        raise errors.InvalidArgumentError(f"Requires delta != 0: {d}")
    if (d > 0 and s > l) or (d < 0 and s < l):
        raise errors.InvalidArgumentError(
            f"Requires start {'<=' if d > 0 else '>='} limit when delta {'>' if d > 0 else '<'} 0: {s}/{l}")
    if dtype.is_integer:
        n = (abs(l - s) + abs(d) - 1) // abs(d)
        return (s + np.arange(n, dtype=np.int64) * d).astype(dtype.np_dtype)
    n = int(np.ceil(abs((l - s) / d)))
    return (s + np.arange(n, dtype=np.float64) * d).astype(dtype.np_dtype)


@k("Slice")
def _slice(x, begin, size):
    x = np.asarray(x)
    b, s = _ints(begin), _ints(size)
    if len(b) != x.ndim or len(s) != x.ndim:
        raise ValueError(f"begin and size must each have {x.ndim} elements (the input's rank), "
                         f"got {len(b)} and {len(s)}")
    key = []
    for ax, (d, bb, ss) in enumerate(zip(x.shape, b, s)):
        e = d if ss == -1 else bb + ss
        if bb < 0 or ss < -1 or e > d:
            raise errors.InvalidArgumentError(
                f"Expected begin[{ax}] = {bb} and size[{ax}] = {ss} to satisfy 0 <= begin <= begin + size "
                f"<= {d} (dimension {ax} of the input)")
        key.append(slice(bb, e))
    return x[tuple(key)]


@k("Repeat")
def _repeat(x, repeats, axis):
    x = np.asarray(x)
    r = _check_repeats(repeats, x.shape[axis], axis)
    return np.repeat(x, r, axis=axis)


def _check_repeats(repeats, n, axis):
    r = np.asarray(repeats)
    _require_int(r, "repeats")
    if r.ndim > 1 or (r.size not in (1, n)):
        raise ValueError(f"repeats must be a scalar or have {n} elements (dimension {axis} of the input), "
                         f"got shape {fmt(list(r.shape))}")
    if r.size and r.min() < 0:
        raise ValueError(f"repeats must be non-negative, got {r.tolist()}")
    return np.broadcast_to(r.reshape(-1), (n,))


@k("RepeatGrad")
def _repeat_grad(g, repeats, x, axis):
    g = np.asarray(g)
    n = np.shape(x)[axis]
    r = _check_repeats(repeats, n, axis)
    out = np.zeros(np.shape(x), dtype=g.dtype)
    np.add.at(np.moveaxis(out, axis, 0), np.repeat(np.arange(n), r), np.moveaxis(g, axis, 0))
    return out


@k("Roll")
def _roll(x, shift, axis):
    x = np.asarray(x)
    s = np.asarray(shift)
    _require_int(s, "shift")
    if s.ndim > 1 or (s.ndim == 1 and s.size not in (1, len(axis))):
        raise ValueError(f"shift must be a scalar or have one entry per axis ({len(axis)}), got {s.tolist()}")
    if not axis:
        return x
    return np.roll(x, np.broadcast_to(s.reshape(-1), (len(axis),)).tolist(), axis=axis)


@k("UnravelIndex")
def _unravel_index(indices, dims):
    indices = np.asarray(indices)
    d = _ints(dims)
    _require_int(indices, "indices")
    n = int(np.prod(d, dtype=np.int64))
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        flat = indices.reshape(-1)
        i = int(np.argmax((flat < 0) | (flat >= n)))
        raise errors.InvalidArgumentError(
            f"indices[{_pos(i, indices.shape)}] = {int(flat[i])} is out of range for dims {d} "
            f"(must be in [0, {n}))")
    if not d:
        return np.zeros((0,) + indices.shape, dtype=indices.dtype)
    return np.stack(np.unravel_index(indices, d)).astype(indices.dtype).reshape((len(d),) + indices.shape)
