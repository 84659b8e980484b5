"""``tw.sparse``: operations on :class:`~tensorweave.SparseTensor`.

Ops that only compute values (``to_dense``, ``sparse_dense_matmul``, ``reduce_sum``, ``retain``,
``slice``, ``map_values``, ``segment_sum``...) are built from dense ops and work in graphs too,
differentiably in ``values`` and in dense operands. Ops that rearrange the sparsity pattern
itself (``reorder``, sparse + sparse ``add``, ``reshape``, ``transpose``, ``concat``,
``maximum``, ``softmax``, ``fill_empty_rows``...) compute the new indices with NumPy and so run
eagerly; the values still go through ``gather``/``unsorted_segment_sum``, keeping gradients.

>>> import tensorweave as tw
>>> st = tw.sparse.from_dense(tw.constant([[0.0, 2.0], [3.0, 0.0]]))
>>> st.indices.numpy().tolist(), st.values.numpy().tolist()
([[0, 1], [1, 0]], [2.0, 3.0])
>>> tw.sparse.sparse_dense_matmul(st, tw.constant([[1.0], [10.0]])).numpy().tolist()
[[20.0], [3.0]]
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import get_static_value
from tensorweave.core.tensor import EagerTensor, Tensor
from tensorweave.ops import array_ops as A
from tensorweave.ops import indexing_ops as I
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as Rd
from tensorweave.sparse.sparse_tensor import SparseTensor, as_sparse

__all__ = ["from_dense", "to_dense", "sparse_dense_matmul", "reduce_sum", "reduce_max", "add", "reorder", "retain",
           "slice", "reshape", "transpose", "concat", "expand_dims", "maximum", "minimum", "eye", "fill_empty_rows",
           "map_values", "reset_shape", "softmax", "split", "to_indicator", "segment_sum", "segment_mean",
           "segment_sqrt_n", "bincount", "mask", "sampled_addmm"]


def _np(t, what):
    """The value of a component as NumPy (pattern-changing ops run eagerly)."""
    if isinstance(t, EagerTensor):
        return t.numpy()
    if isinstance(t, Tensor):
        raise TypeError(f"tw.sparse.{what} computes a new sparsity pattern and runs eagerly only; it got the "
                        f"symbolic tensor {t.name}. Hint: call it outside tw.function/graphs, or use to_dense")
    return np.asarray(t)


def _make(indices, values, shape):
    return SparseTensor(A.constant(np.asarray(indices, np.int64).reshape(-1, len(shape))), values,
                        A.constant(np.asarray(shape, np.int64)))


# ---- dense <-> sparse ----------------------------------------------------------------------
def from_dense(tensor, name=None):
    """The non-zero (non-empty for strings) entries of ``tensor`` as a SparseTensor."""
    x = convert_to_tensor(tensor)
    zero = "" if x.dtype is _dt.string else 0
    idx = M.where(M.not_equal(x, A.constant(np.asarray(zero, dtype=x.dtype.np_dtype), dtype=x.dtype)))
    return SparseTensor(idx, I.gather_nd(x, idx), M.cast(A.shape(x), _dt.int64))


def to_dense(sp_input, default_value=None, validate_indices=True, name=None):
    """The dense tensor: ``values`` at ``indices``, ``default_value`` (0) elsewhere."""
    sp = as_sparse(sp_input, "to_dense")
    shape = sp.dense_shape
    if default_value is None or (not isinstance(default_value, Tensor) and np.all(np.asarray(default_value) == 0)
                                 and sp.dtype is not _dt.string):
        if sp.dtype is _dt.string or sp.dtype.is_bool:
            base = A.fill(shape, A.constant(np.asarray("" if sp.dtype is _dt.string else False, sp.dtype.np_dtype),
                                            dtype=sp.dtype))
            return I.tensor_scatter_nd_update(base, sp.indices, sp.values)
        return I.scatter_nd(sp.indices, sp.values, shape)
    base = A.fill(shape, convert_to_tensor(default_value, dtype=sp.dtype))
    return I.tensor_scatter_nd_update(base, sp.indices, sp.values)


def to_indicator(sp_input, vocab_size, name=None):
    """A dense bool ``[..., vocab_size]``: True at ``[..., v]`` for every value ``v`` of each row."""
    sp = as_sparse(sp_input, "to_indicator")
    ind, vals = _np(sp.indices, "to_indicator"), _np(sp.values, "to_indicator")
    shape = list(_np(sp.dense_shape, "to_indicator")[:-1]) + [int(vocab_size)]
    out = np.zeros(shape, bool)
    keep = (vals >= 0) & (vals < vocab_size)
    out[tuple(ind[keep, :-1].T) + (vals[keep].astype(np.int64),)] = True
    return A.constant(out)


# ---- products and reductions ---------------------------------------------------------------
def sparse_dense_matmul(sp_a, b, adjoint_a=False, adjoint_b=False, name=None):
    """``sp_a @ b`` for a rank-2 SparseTensor and a dense matrix (either may be the sparse one)."""
    from tensorweave.ops.complex_ops import conj
    if not isinstance(sp_a, SparseTensor) and isinstance(b, SparseTensor):
        # a @ B = (B^T a^T)^T
        at = A.transpose(conj(convert_to_tensor(sp_a)) if adjoint_a else convert_to_tensor(sp_a))
        return A.transpose(sparse_dense_matmul(b, at, adjoint_a=not adjoint_b, adjoint_b=False))
    sp = as_sparse(sp_a, "sparse_dense_matmul")
    b = convert_to_tensor(b)
    if b.dtype is not sp.dtype:
        raise TypeError(f"sparse_dense_matmul: sparse values are {sp.dtype.name} but the dense matrix is "
                        f"{b.dtype.name}. Hint: tw.cast one of them")
    if sp.shape.rank != 2 or b.shape.rank != 2:
        raise ValueError(f"sparse_dense_matmul needs rank-2 operands, got shapes {sp.shape.as_list()} and "
                         f"{b.shape.as_list()}")
    if adjoint_b:
        b = A.transpose(conj(b))
    rows, cols = sp.indices[:, 0], sp.indices[:, 1]
    vals = sp.values
    n_out = sp.shape[0]
    if adjoint_a:
        rows, cols, vals, n_out = cols, rows, conj(vals), sp.shape[1]
    inner = sp.shape[0] if adjoint_a else sp.shape[1]
    if inner is not None and b.shape[0] is not None and inner != b.shape[0]:
        raise ValueError(f"sparse_dense_matmul: inner dimensions differ: {inner} vs {b.shape[0]} (shapes "
                         f"{sp.shape.as_list()}{'^T' if adjoint_a else ''} and {b.shape.as_list()})")
    contrib = A.expand_dims(vals, 1) * A.gather(b, cols)
    if n_out is None:
        n_out = M.cast(sp.dense_shape[1 if adjoint_a else 0], _dt.int32)
    return A.unsorted_segment_sum(contrib, M.cast(rows, _dt.int32), n_out)


def reduce_sum(sp_input, axis=None, keepdims=False, output_is_sparse=False, name=None):
    """The sum over ``axis`` (all by default); a SparseTensor when ``output_is_sparse``."""
    out = Rd.reduce_sum(to_dense(as_sparse(sp_input, "reduce_sum")), axis=axis, keepdims=keepdims)
    return from_dense(out) if output_is_sparse else out


def reduce_max(sp_input, axis=None, keepdims=False, output_is_sparse=False, name=None):
    """The maximum over ``axis`` of the stored values (missing entries do not take part; a
    reduction with no stored value gives 0, as in TF)."""
    sp = as_sparse(sp_input, "reduce_max")
    low = sp.dtype.min
    out = Rd.reduce_max(to_dense(sp, default_value=low), axis=axis, keepdims=keepdims)
    out = M.where(M.equal(out, low), A.zeros_like(out), out)
    return from_dense(out) if output_is_sparse else out


# ---- pattern-preserving ops ----------------------------------------------------------------
def retain(sp_input, to_retain):
    """The entries whose flag in the bool vector ``to_retain`` is True."""
    sp = as_sparse(sp_input, "retain")
    keep = convert_to_tensor(to_retain)
    return SparseTensor(I.boolean_mask(sp.indices, keep), I.boolean_mask(sp.values, keep), sp.dense_shape)


def slice(sp_input, start, size, name=None):  # noqa: A001 - TF's name
    """The entries inside the box ``[start, start + size)``, re-indexed from ``start``."""
    sp = as_sparse(sp_input, "slice")
    start = M.cast(convert_to_tensor(start), _dt.int64)
    size = M.cast(convert_to_tensor(size), _dt.int64)
    inside = Rd.reduce_all(M.logical_and(sp.indices >= start, sp.indices < start + size), axis=1)
    shape = M.maximum(M.minimum(size, sp.dense_shape - start), A.zeros_like(size))
    return SparseTensor(I.boolean_mask(sp.indices, inside) - start, I.boolean_mask(sp.values, inside), shape)


def map_values(op, *args, **kwargs):
    """Applies ``op`` to the values of the SparseTensor arguments (which share one pattern)."""
    sparse = [a for a in list(args) + list(kwargs.values()) if isinstance(a, SparseTensor)]
    if not sparse:
        raise ValueError("map_values: no SparseTensor among the arguments")
    ref = sparse[0]
    unwrap = lambda a: a.values if isinstance(a, SparseTensor) else a  # noqa: E731
    vals = op(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in kwargs.items()})
    return SparseTensor(ref.indices, vals, ref.dense_shape)


def expand_dims(sp_input, axis=None, name=None):
    """Inserts a dimension of size 1 at ``axis``."""
    sp = as_sparse(sp_input, "expand_dims")
    rank = sp.shape.rank
    axis = 0 if axis is None else int(axis)
    axis = axis + rank + 1 if axis < 0 else axis
    n = A.shape(sp.indices)[0:1]
    zeros = A.zeros(A.concat([n, [1]], 0), _dt.int64)
    ind = A.concat([sp.indices[:, :axis], zeros, sp.indices[:, axis:]], 1)
    shape = A.concat([sp.dense_shape[:axis], A.constant([1], _dt.int64), sp.dense_shape[axis:]], 0)
    return SparseTensor(ind, sp.values, shape)


def reset_shape(sp_input, new_shape=None):
    """The same entries with ``new_shape`` (default: the tightest shape holding them)."""
    sp = as_sparse(sp_input, "reset_shape")
    if new_shape is None:
        ind = _np(sp.indices, "reset_shape")
        shape = ind.max(axis=0) + 1 if len(ind) else np.zeros(ind.shape[1], np.int64)
        return SparseTensor(sp.indices, sp.values, A.constant(shape.astype(np.int64)))
    return SparseTensor(sp.indices, sp.values, M.cast(convert_to_tensor(new_shape), _dt.int64))


# ---- pattern-changing ops (eager) ----------------------------------------------------------
def _linear(ind, shape):
    return np.ravel_multi_index(tuple(ind.T), tuple(shape)) if len(ind) else np.zeros(0, np.int64)


def reorder(sp_input, name=None):
    """The same tensor with entries in row-major (canonical) order."""
    sp = as_sparse(sp_input, "reorder")
    ind = _np(sp.indices, "reorder")
    perm = np.lexsort(ind.T[::-1]) if len(ind) else np.zeros(0, np.int64)
    return SparseTensor(A.constant(ind[perm]), A.gather(sp.values, perm.astype(np.int32)), sp.dense_shape)


def _merge(parts, shape):
    """Sums entries of several SparseTensors with one shape; returns (indices, values) in order."""
    ind = np.concatenate([_np(p.indices, "add") for p in parts]) if parts else np.zeros((0, len(shape)), np.int64)
    lin = _linear(ind, shape)
    uniq, inv = np.unique(lin, return_inverse=True)
    vals = A.unsorted_segment_sum(A.concat([p.values for p in parts], 0), inv.astype(np.int32), len(uniq))
    new_ind = np.stack(np.unravel_index(uniq, tuple(shape)), axis=1) if len(uniq) else np.zeros((0, len(shape)))
    return new_ind, vals


def add(a, b, threshold=0, name=None):
    """``a + b``: dense when either is dense; for two SparseTensors, a SparseTensor of the union
    (sums of entries present in both whose magnitude is below ``threshold`` are dropped)."""
    if isinstance(a, SparseTensor) and isinstance(b, SparseTensor):
        shape = _np(a.dense_shape, "add")
        if not np.array_equal(shape, _np(b.dense_shape, "add")):
            raise ValueError(f"tw.sparse.add: shapes differ: {shape.tolist()} vs {_np(b.dense_shape, 'add').tolist()}")
        ind, vals = _merge([a, b], shape)
        out = _make(ind, vals, shape)
        if threshold:
            # as TF's SparseAdd: only sums of entries present in both operands are thresholded
            both = np.isin(_linear(ind, shape), np.intersect1d(_linear(_np(a.indices, "add"), shape),
                                                               _linear(_np(b.indices, "add"), shape)))
            out = retain(out, M.logical_or(A.constant(~both), M.abs(vals) >= threshold))
        return out
    sp, dense = (a, b) if isinstance(a, SparseTensor) else (b, a)
    if not isinstance(sp, SparseTensor):
        raise TypeError("tw.sparse.add needs at least one SparseTensor")
    return I.tensor_scatter_nd_add(convert_to_tensor(dense), sp.indices, sp.values)


def _elementwise_dense(sp, other, fn):
    """``sp * dense`` / ``sp / dense``: the dense operand read at the sparse positions (broadcasting)."""
    d = convert_to_tensor(other)
    full = A.broadcast_to(d, M.cast(sp.dense_shape, _dt.int32)) if d.shape.rank else d
    picked = I.gather_nd(full, sp.indices) if d.shape.rank else d
    return sp.with_values(fn(sp.values, picked))


def reshape(sp_input, shape, name=None):
    """The same entries in a tensor of ``shape`` (one dimension may be -1)."""
    sp = as_sparse(sp_input, "reshape")
    old = _np(sp.dense_shape, "reshape")
    new = np.asarray(_np(convert_to_tensor(shape), "reshape"), np.int64).copy()
    total = int(np.prod(old))
    if (new == -1).sum() == 1:
        new[new == -1] = total // max(int(np.prod(new[new != -1])), 1)
    if int(np.prod(new)) != total:
        raise ValueError(f"tw.sparse.reshape: cannot reshape a tensor of shape {old.tolist()} ({total} elements) "
                         f"into {new.tolist()}")
    lin = _linear(_np(sp.indices, "reshape"), old)
    ind = np.stack(np.unravel_index(lin, tuple(new)), axis=1) if len(lin) else np.zeros((0, len(new)))
    return _make(ind, sp.values, new)


def transpose(sp_input, perm=None, name=None):
    """Permutes the dimensions (reverses them by default); entries come back in canonical order."""
    sp = as_sparse(sp_input, "transpose")
    rank = sp.shape.rank
    perm = list(range(rank))[::-1] if perm is None else [int(p) for p in np.ravel(perm)]
    ind = _np(sp.indices, "transpose")[:, perm]
    shape = _np(sp.dense_shape, "transpose")[perm]
    return reorder(_make(ind, sp.values, shape))


def concat(axis, sp_inputs, expand_nonconcat_dims=False, name=None):
    """Joins SparseTensors along ``axis`` (other dimensions must match unless ``expand_nonconcat_dims``)."""
    sps = [as_sparse(s, "concat") for s in sp_inputs]
    shapes = [_np(s.dense_shape, "concat") for s in sps]
    rank = len(shapes[0])
    axis = int(axis) % rank
    out_shape = np.max(shapes, axis=0) if expand_nonconcat_dims else shapes[0].copy()
    for s in shapes[1:]:
        other = np.delete(s, axis)
        if not expand_nonconcat_dims and not np.array_equal(other, np.delete(shapes[0], axis)):
            raise ValueError(f"tw.sparse.concat: shapes {shapes[0].tolist()} and {s.tolist()} differ outside "
                             f"axis {axis}")
    out_shape[axis] = sum(int(s[axis]) for s in shapes)
    offset, inds = 0, []
    for s, shp in zip(sps, shapes):
        ind = _np(s.indices, "concat").copy()
        ind[:, axis] += offset
        inds.append(ind)
        offset += int(shp[axis])
    return reorder(_make(np.concatenate(inds), A.concat([s.values for s in sps], 0), out_shape))


def split(sp_input=None, num_split=None, axis=None, name=None, keyword_required=None):
    """Splits into ``num_split`` SparseTensors along ``axis`` (the first ones one larger when uneven)."""
    sp = as_sparse(sp_input, "split")
    shape = _np(sp.dense_shape, "split")
    axis = int(axis) % len(shape)
    n, k = int(shape[axis]), int(num_split)
    sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
    out, start = [], 0
    for s in sizes:
        lo, sz = np.zeros(len(shape), np.int64), shape.copy()
        lo[axis], sz[axis] = start, s
        out.append(slice(sp, lo, sz))
        start += s
    return out


def _union_op(a, b, fn, what):
    a, b = as_sparse(a, what), as_sparse(b, what)
    shape = _np(a.dense_shape, what)
    ind, _ = _merge([a, b], shape)
    dense = fn(to_dense(a), to_dense(b))
    return _make(ind, I.gather_nd(dense, A.constant(ind.astype(np.int64))), shape)


def maximum(sp_a, sp_b, name=None):
    """The elementwise maximum over the union of the two patterns (missing entries count as 0)."""
    return _union_op(sp_a, sp_b, M.maximum, "maximum")


def minimum(sp_a, sp_b, name=None):
    """The elementwise minimum over the union of the two patterns (missing entries count as 0)."""
    return _union_op(sp_a, sp_b, M.minimum, "minimum")


def eye(num_rows, num_columns=None, dtype=_dt.float32, name=None):
    """The sparse identity matrix."""
    r = int(num_rows)
    c = r if num_columns is None else int(num_columns)
    n = min(r, c)
    d = np.arange(n, dtype=np.int64)
    return _make(np.stack([d, d], axis=1), A.ones([n], _dt.as_dtype(dtype)), [r, c])


def fill_empty_rows(sp_input, default_value, name=None):
    """Adds ``default_value`` at ``[row, 0, ...]`` for each empty row; returns (tensor, empty-row flags).
    Entries come out ordered by row, keeping their order within a row (as in TF)."""
    sp = as_sparse(sp_input, "fill_empty_rows")
    ind = _np(sp.indices, "fill_empty_rows")
    shape = _np(sp.dense_shape, "fill_empty_rows")
    empty = np.ones(int(shape[0]), bool)
    empty[ind[:, 0]] = False
    extra = np.zeros((int(empty.sum()), len(shape)), np.int64)
    extra[:, 0] = np.nonzero(empty)[0]
    fill = A.fill([len(extra)], convert_to_tensor(default_value, dtype=sp.dtype))
    all_ind = np.concatenate([ind, extra])
    perm = np.argsort(all_ind[:, 0], kind="stable")
    vals = A.gather(A.concat([sp.values, fill], 0), perm.astype(np.int32))
    return _make(all_ind[perm], vals, shape), A.constant(empty)


def softmax(sp_input, name=None):
    """Softmax over the stored entries of each innermost row (missing entries do not take part)."""
    sp = reorder(as_sparse(sp_input, "softmax"))
    ind = _np(sp.indices, "softmax")
    shape = _np(sp.dense_shape, "softmax")
    _, seg = np.unique(_linear(ind[:, :-1], shape[:-1]), return_inverse=True)
    seg = seg.astype(np.int32)
    n = int(seg.max()) + 1 if len(seg) else 0
    v = sp.values
    # Shifting by each row's maximum keeps exp finite; the shift cancels, so no gradient through it.
    row_max = A.stop_gradient(A.gather(_segment_max(v, seg, n), seg))
    e = M.exp(v - row_max)
    return sp.with_values(e / A.gather(A.unsorted_segment_sum(e, seg, n), seg))


def _segment_max(v, seg, n):
    vals = _np(v, "softmax")
    out = np.full(n, -np.inf, vals.dtype)
    np.maximum.at(out, seg, vals)
    return A.constant(out)


def mask(a, mask_indices, name=None):
    """An IndexedSlices without the slices whose index is in ``mask_indices``."""
    from tensorweave.ops.indexed_slices import IndexedSlices
    idx = _np(a.indices, "mask")
    keep = ~np.isin(idx, _np(convert_to_tensor(mask_indices), "mask"))
    return IndexedSlices(I.boolean_mask(a.values, keep), A.constant(idx[keep]), a.dense_shape)


# ---- segment reductions over gathered rows -------------------------------------------------
def _segment(data, indices, segment_ids, num_segments, what):
    d = convert_to_tensor(data)
    rows = A.gather(d, convert_to_tensor(indices))
    ids = convert_to_tensor(segment_ids)
    if num_segments is None:
        known = get_static_value(ids)
        if known is None:
            raise ValueError(f"tw.sparse.{what}: pass num_segments when segment_ids are not constant")
        known = np.asarray(known)
        num_segments = int(known.max()) + 1 if known.size else 0
    return rows, ids, num_segments


def segment_sum(data, indices, segment_ids, num_segments=None, name=None):
    """``out[s] = sum of data[indices[i]] over i with segment_ids[i] == s``."""
    rows, ids, n = _segment(data, indices, segment_ids, num_segments, "segment_sum")
    return A.unsorted_segment_sum(rows, ids, n)


def _counts(ids, n, dtype):
    return A.unsorted_segment_sum(A.ones(A.shape(ids), dtype), ids, n)


def segment_mean(data, indices, segment_ids, num_segments=None, name=None):
    """The mean of the gathered rows per segment (0 for empty segments)."""
    rows, ids, n = _segment(data, indices, segment_ids, num_segments, "segment_mean")
    total = A.unsorted_segment_sum(rows, ids, n)
    c = _counts(ids, n, rows.dtype)
    return M.div_no_nan(total, A.reshape(c, [-1] + [1] * (rows.shape.rank - 1)))


def segment_sqrt_n(data, indices, segment_ids, num_segments=None, name=None):
    """The sum of the gathered rows per segment divided by the square root of its size."""
    rows, ids, n = _segment(data, indices, segment_ids, num_segments, "segment_sqrt_n")
    total = A.unsorted_segment_sum(rows, ids, n)
    c = _counts(ids, n, rows.dtype)
    return M.div_no_nan(total, A.reshape(M.sqrt(c), [-1] + [1] * (rows.shape.rank - 1)))


def bincount(values, weights=None, axis=0, minlength=None, maxlength=None, binary_output=False, name=None):
    """Counts of each value as a SparseTensor (per row for ``axis=-1`` on a matrix)."""
    v = _np(convert_to_tensor(values), "bincount") if not isinstance(values, SparseTensor) else \
        _np(values.values, "bincount")
    w = None if weights is None else _np(convert_to_tensor(weights), "bincount")
    size = int(v.max()) + 1 if v.size else 0
    if minlength is not None:
        size = max(size, int(minlength))
    if maxlength is not None:
        size = min(size, int(maxlength))
    dtype = w.dtype if w is not None else np.int64
    if v.ndim == 2 and axis in (-1, 1):
        counts = np.zeros((v.shape[0], size), dtype)
        for r in range(v.shape[0]):
            ok = v[r] < size
            np.add.at(counts[r], v[r][ok], 1 if w is None else w[r][ok])
    else:
        counts = np.zeros(size, dtype)
        flat, fw = v.reshape(-1), None if w is None else w.reshape(-1)
        ok = flat < size
        np.add.at(counts, flat[ok], 1 if fw is None else fw[ok])
    if binary_output:
        counts = (counts > 0).astype(dtype)
    return from_dense(A.constant(counts))


def sampled_addmm(indices, values, dense_shape, mat1, mat2, beta=1.0, alpha=1.0, output_type=_dt.float32):
    """``alpha * (mat1 @ mat2)`` read at ``indices`` plus ``beta * values``: returns
    ``(indices, values, dense_shape)`` (rank-2 products; differentiable in values, mat1 and mat2)."""
    ind = convert_to_tensor(indices)
    a, b = convert_to_tensor(mat1), convert_to_tensor(mat2)
    if a.shape.rank != 2 or b.shape.rank != 2:
        raise NotImplementedError("sampled_addmm: batched (rank > 2) matrices are not supported")
    rows = A.gather(a, ind[:, 0])                       # [n, k]
    cols = A.gather(A.transpose(b), ind[:, 1])          # [n, k]
    prod = Rd.reduce_sum(rows * cols, axis=1)
    return ind, prod * alpha + convert_to_tensor(values) * beta, convert_to_tensor(dense_shape)
