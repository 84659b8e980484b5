"""``tw.RaggedTensor``: rows of different lengths, as TensorFlow stores them.

A RaggedTensor is ``values`` (a tensor, or another RaggedTensor for more ragged dimensions)
partitioned into rows by ``row_splits`` (int64, ``[nrows + 1]``, starting at 0, non-decreasing):
row ``i`` is ``values[row_splits[i]:row_splits[i + 1]]``. The other encodings (``row_lengths``,
``value_rowids``) are computed from the splits. Elementwise arithmetic applies to the flat values
(so gradients flow to them), reductions over the ragged axis are segment sums.

>>> import tensorweave as tw
>>> rt = tw.ragged.constant([[1, 2, 3], [], [4]])
>>> rt.row_lengths().numpy().tolist(), rt.to_list()
([3, 0, 1], [[1, 2, 3], [], [4]])
>>> (rt * 10).to_tensor().numpy().tolist()
[[10, 20, 30], [0, 0, 0], [40, 0, 0]]
>>> rt.reduce_sum(axis=1).numpy().tolist()
[6, 0, 4]
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.shape import TensorShape
from tensorweave.core.tensor import EagerTensor, Tensor
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as Rd


def _int64(x):
    t = convert_to_tensor(x, dtype_hint=_dt.int64)
    return t if t.dtype is _dt.int64 else M.cast(t, _dt.int64)


def _np(t):
    if isinstance(t, EagerTensor):
        return t.numpy()
    if isinstance(t, Tensor):
        raise TypeError("RaggedTensor: this operation needs concrete row partitions and runs eagerly only")
    return np.asarray(t)


class RaggedTensor:
    """A tensor with one or more ragged dimensions (see the module docstring)."""

    _tw_composite_ = "ragged"   # generic ops map over the flat values (ops/composite_dispatch.py)

    def __init__(self, values, row_splits, validate=True):
        self._values = values if isinstance(values, RaggedTensor) else convert_to_tensor(values)
        self._row_splits = _int64(row_splits)
        if validate and isinstance(self._row_splits, EagerTensor):
            s = self._row_splits.numpy()
            n = _nvals(self._values)
            if s.ndim != 1 or len(s) == 0 or s[0] != 0 or np.any(np.diff(s) < 0) or (n is not None and s[-1] != n):
                raise ValueError(f"RaggedTensor: row_splits must be a non-decreasing vector starting at 0 and ending "
                                 f"at the number of values ({n}), got {s.tolist()}")

    # ---- constructors -------------------------------------------------------------------
    @classmethod
    def from_row_splits(cls, values, row_splits, name=None, validate=True):
        """Rows ``values[row_splits[i]:row_splits[i + 1]]``."""
        return cls(values, row_splits, validate)

    @classmethod
    def from_row_lengths(cls, values, row_lengths, name=None, validate=True):
        """Consecutive rows of the given lengths."""
        lengths = _int64(row_lengths)
        return cls(values, A.concat([A.zeros([1], _dt.int64), _cumsum(lengths)], 0), validate)

    @classmethod
    def from_row_starts(cls, values, row_starts, name=None, validate=True):
        starts = _int64(row_starts)
        n = A.reshape(M.cast(_nrows_of(values), _dt.int64), [1])
        return cls(values, A.concat([starts, n], 0), validate)

    @classmethod
    def from_row_limits(cls, values, row_limits, name=None, validate=True):
        return cls(values, A.concat([A.zeros([1], _dt.int64), _int64(row_limits)], 0), validate)

    @classmethod
    def from_value_rowids(cls, values, value_rowids, nrows=None, name=None, validate=True):
        """Rows given by each value's row id (sorted ascending); ``nrows`` adds empty trailing rows."""
        ids = _np(_int64(value_rowids))
        if np.any(np.diff(ids) < 0):
            raise ValueError("RaggedTensor.from_value_rowids: value_rowids must be sorted ascending")
        n = int(nrows) if nrows is not None else (int(ids[-1]) + 1 if len(ids) else 0)
        counts = np.bincount(ids, minlength=n)[:n] if len(ids) else np.zeros(n, np.int64)
        return cls(values, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), validate)

    @classmethod
    def from_nested_row_splits(cls, flat_values, nested_row_splits, name=None, validate=True):
        out = flat_values
        for splits in reversed(list(nested_row_splits)):
            out = cls(out, splits, validate)
        return out

    @classmethod
    def from_nested_row_lengths(cls, flat_values, nested_row_lengths, name=None, validate=True):
        out = flat_values
        for lengths in reversed(list(nested_row_lengths)):
            out = cls.from_row_lengths(out, lengths, validate=validate)
        return out

    @classmethod
    def from_tensor(cls, tensor, lengths=None, padding=None, ragged_rank=1, name=None):
        """Rows of a dense tensor, cut to ``lengths`` or where trailing ``padding`` starts."""
        x = convert_to_tensor(tensor)
        arr = _np(x)
        if lengths is None and padding is not None:
            pad = np.asarray(padding, arr.dtype)
            keep = ~(arr == pad) if arr.ndim == 2 else ~np.all(arr == pad, axis=tuple(range(2, arr.ndim)))
            lengths = np.array([int(np.max(np.nonzero(r)[0]) + 1) if r.any() else 0 for r in keep], np.int64)
        if lengths is None:
            lengths = np.full(arr.shape[0], arr.shape[1], np.int64)
        lengths = _np(_int64(lengths))
        mask = np.arange(arr.shape[1])[None, :] < lengths[:, None]
        from tensorweave.ops.indexing_ops import boolean_mask
        return cls.from_row_lengths(boolean_mask(x, A.constant(mask)), lengths)

    # ---- structure ----------------------------------------------------------------------
    values = property(lambda self: self._values)
    row_splits = property(lambda self: self._row_splits)

    @property
    def flat_values(self):
        v = self._values
        while isinstance(v, RaggedTensor):
            v = v._values
        return v

    @property
    def nested_row_splits(self):
        out, rt = [], self
        while isinstance(rt, RaggedTensor):
            out.append(rt._row_splits)
            rt = rt._values
        return tuple(out)

    @property
    def ragged_rank(self):
        return 1 + (self._values.ragged_rank if isinstance(self._values, RaggedTensor) else 0)

    @property
    def dtype(self):
        return self.flat_values.dtype

    @property
    def shape(self):
        n = self._row_splits.shape[0]
        inner = self._values.shape.as_list()[1:] if self._values.shape.rank is not None else None
        if inner is None:
            return TensorShape(None)
        return TensorShape([None if n is None else n - 1, None] + inner)

    def get_shape(self):
        return self.shape

    @property
    def ndim(self):
        return self.shape.rank

    def row_lengths(self, axis=1, name=None):
        if axis != 1:
            return self._values.row_lengths(axis - 1)
        return self._row_splits[1:] - self._row_splits[:-1]

    def nrows(self, out_type=_dt.int64, name=None):
        return M.cast(A.shape(self._row_splits)[0] - 1, out_type)

    def row_starts(self, name=None):
        return self._row_splits[:-1]

    def row_limits(self, name=None):
        return self._row_splits[1:]

    def value_rowids(self, name=None):
        lengths = _np(self.row_lengths())
        return A.constant(np.repeat(np.arange(len(lengths), dtype=np.int64), lengths))

    def nested_row_lengths(self, name=None):
        out, rt = [], self
        while isinstance(rt, RaggedTensor):
            out.append(rt.row_lengths())
            rt = rt._values
        return tuple(out)

    def bounding_shape(self, axis=None, name=None, out_type=_dt.int64):
        lengths = _np(self.row_lengths())
        if isinstance(self._values, RaggedTensor):
            inner = _np(self._values.bounding_shape())[1:]
        else:
            inner = np.asarray(self._values.shape.as_list()[1:], np.int64)
        shape = np.concatenate([[len(lengths), lengths.max() if len(lengths) else 0], inner]).astype(np.int64)
        out = A.constant(shape)
        return M.cast(out if axis is None else out[axis], out_type)

    def with_values(self, new_values):
        return RaggedTensor(new_values, self._row_splits, validate=False)

    def with_flat_values(self, new_values):
        if isinstance(self._values, RaggedTensor):
            return self.with_values(self._values.with_flat_values(new_values))
        return self.with_values(new_values)

    def with_row_splits_dtype(self, dtype):
        return self

    # ---- conversion ---------------------------------------------------------------------
    def to_tensor(self, default_value=None, name=None, shape=None):
        """A dense tensor padded with ``default_value`` (0 / b"") to the bounding shape (or ``shape``)."""
        if not isinstance(self._row_splits, EagerTensor) and self.ragged_rank == 1 and shape is None:
            return self._to_tensor_graph(default_value)
        bound = _np(self.bounding_shape())
        if shape is not None:
            want = [None if d is None or d == -1 else int(d) for d in
                    (shape.as_list() if hasattr(shape, "as_list") else list(shape))]
            bound = np.array([b if w is None else w for b, w in zip(bound, want)], np.int64)
        coords = self._coords()
        keep = np.all(coords < bound[None, :coords.shape[1]], axis=1) if len(coords) else np.zeros(0, bool)
        flat = self.flat_values
        from tensorweave.ops.indexing_ops import boolean_mask, scatter_nd, tensor_scatter_nd_update
        vals = boolean_mask(flat, A.constant(keep)) if not keep.all() else flat
        idx = A.constant(coords[keep].astype(np.int64).reshape(-1, coords.shape[1] if coords.ndim == 2 else 2))
        shape_t = A.constant(bound)
        if default_value is None and self.dtype is not _dt.string and not self.dtype.is_bool:
            return scatter_nd(idx, vals, shape_t)
        dv = default_value if default_value is not None else ("" if self.dtype is _dt.string else False)
        base = A.fill(shape_t, convert_to_tensor(dv, dtype=self.dtype))
        return tensor_scatter_nd_update(base, idx, vals)

    def _to_tensor_graph(self, default_value):
        """``to_tensor`` with symbolic row splits (inside ``tw.function`` or a graph), ragged rank 1: each
        value's row from a search of the splits, its column from the row start."""
        from tensorweave.ops.indexing_ops import range as _range
        from tensorweave.ops.indexing_ops import scatter_nd, tensor_scatter_nd_update
        from tensorweave.ops.misc_ops import searchsorted
        splits = self._row_splits
        n = A.shape(self._values, out_type=_dt.int64)[0]
        rows = M.cast(searchsorted(splits[1:], _range(n, dtype=_dt.int64), side="right"), _dt.int64)
        cols = _range(n, dtype=_dt.int64) - A.gather(splits, rows)
        lengths = splits[1:] - splits[:-1]
        width = Rd.reduce_max(A.concat([lengths, A.zeros([1], _dt.int64)], 0))
        inner = A.shape(self._values, out_type=_dt.int64)[1:]
        shape_t = A.concat([A.stack([A.shape(splits, out_type=_dt.int64)[0] - 1, width]), inner], 0)
        idx = A.stack([rows, cols], 1)
        if default_value is None and self.dtype is not _dt.string and not self.dtype.is_bool:
            return scatter_nd(idx, self._values, shape_t)
        dv = default_value if default_value is not None else ("" if self.dtype is _dt.string else False)
        return tensor_scatter_nd_update(A.fill(shape_t, convert_to_tensor(dv, dtype=self.dtype)), idx, self._values)

    def _coords(self):
        """[n_flat_rows, ragged_rank + 1] coordinates of the flat values' rows in the dense tensor."""
        splits = [_np(s) for s in self.nested_row_splits]
        n = int(splits[-1][-1]) if len(splits[-1]) else 0
        rows = [np.arange(n)]
        for s in reversed(splits):
            lengths = np.diff(s)
            owner = np.repeat(np.arange(len(lengths)), lengths)
            pos = np.arange(int(s[-1])) - np.repeat(s[:-1], lengths)
            rows = [owner[rows[0]], pos[rows[0]]] + rows[1:]
        return np.stack(rows, axis=1).astype(np.int64) if n else np.zeros((0, len(splits) + 1), np.int64)

    def to_list(self):
        """Nested Python lists of the values."""
        flat = _np(self.flat_values)
        rows = [flat[i].tolist() if flat.ndim > 1 else flat[i].item() if hasattr(flat[i], "item") else flat[i]
                for i in range(len(flat))]
        for s in reversed([_np(s) for s in self.nested_row_splits]):
            rows = [rows[s[i]:s[i + 1]] for i in range(len(s) - 1)]
        return rows

    def numpy(self):
        """An object array of per-row NumPy arrays (TF's ``RaggedTensor.numpy``)."""
        rows = self.to_list()
        out = np.empty(len(rows), dtype=object)
        for i, r in enumerate(rows):
            out[i] = np.asarray(r, dtype=self.dtype.np_dtype) if self.ragged_rank == 1 else r
        return out

    def to_sparse(self, name=None):
        from tensorweave.sparse.sparse_tensor import SparseTensor
        coords = self._coords()
        return SparseTensor(A.constant(coords), self.flat_values, self.bounding_shape())

    @classmethod
    def from_sparse(cls, st_input, name=None):
        ind = _np(st_input.indices)
        shape = _np(st_input.dense_shape)
        counts = np.bincount(ind[:, 0], minlength=int(shape[0])) if len(ind) else np.zeros(int(shape[0]), np.int64)
        return cls.from_row_lengths(st_input.values, counts)

    # ---- indexing -----------------------------------------------------------------------
    def __getitem__(self, key):
        if isinstance(key, tuple):
            if len(key) == 0:
                return self
            head, rest = key[0], key[1:]
            sub = self[head]
            if not rest:
                return sub
            if isinstance(head, slice):
                if all(isinstance(k, slice) and k == slice(None) for k in rest):
                    return sub
                raise NotImplementedError("RaggedTensor: indexing inner dimensions of a row slice is not supported")
            return sub[rest]
        s = _np(self._row_splits)
        n = len(s) - 1
        if isinstance(key, (int, np.integer)) or (isinstance(key, Tensor) and key.shape.rank == 0):
            i = int(key)
            if not -n <= i < n:
                raise IndexError(f"RaggedTensor: row {i} is out of range for {n} rows")
            i %= n
            return self._values[int(s[i]):int(s[i + 1])]
        if isinstance(key, slice):
            idx = range(n)[key]
            if idx.step != 1:
                rows = list(idx)
                lengths = np.diff(s)[rows]
                parts = [self._values[int(s[r]):int(s[r + 1])] for r in rows]
                vals = _concat_values(parts, self._values)
                return RaggedTensor.from_row_lengths(vals, lengths.astype(np.int64))
            lo, hi = idx.start, idx.stop
            vals = self._values[int(s[lo]):int(s[hi])] if hi > lo else self._values[0:0]
            return RaggedTensor(vals, (s[lo:hi + 1] - s[lo]).astype(np.int64) if hi > lo else np.zeros(1, np.int64))
        raise TypeError(f"RaggedTensor indices must be ints or slices, got {type(key).__name__}")

    def __len__(self):
        return int(_np(self._row_splits).shape[0]) - 1

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    # ---- elementwise arithmetic on the flat values -----------------------------------------
    def _binary(self, other, fn):
        if isinstance(other, RaggedTensor):
            for a, b in zip(self.nested_row_splits, other.nested_row_splits):
                if not np.array_equal(_np(a), _np(b)):
                    raise ValueError("RaggedTensor: elementwise ops need the same row partitions on both sides")
            return self.with_flat_values(fn(self.flat_values, other.flat_values))
        o = convert_to_tensor(other) if not isinstance(other, Tensor) else other
        if o.shape.rank not in (0, None) and o.shape.rank > 0:
            raise ValueError("RaggedTensor: elementwise ops with a dense tensor need a scalar (or a RaggedTensor "
                             "with the same rows)")
        return self.with_flat_values(fn(self.flat_values, other))

    def __add__(self, o):
        return self._binary(o, lambda a, b: a + b)

    def __radd__(self, o):
        return self._binary(o, lambda a, b: b + a)

    def __sub__(self, o):
        return self._binary(o, lambda a, b: a - b)

    def __rsub__(self, o):
        return self._binary(o, lambda a, b: b - a)

    def __mul__(self, o):
        return self._binary(o, lambda a, b: a * b)

    def __rmul__(self, o):
        return self._binary(o, lambda a, b: b * a)

    def __truediv__(self, o):
        return self._binary(o, lambda a, b: a / b)

    def __pow__(self, o):
        return self._binary(o, lambda a, b: a ** b)

    def __neg__(self):
        return self.with_flat_values(-self.flat_values)

    def __abs__(self):
        return self.with_flat_values(M.abs(self.flat_values))

    def __eq__(self, o):
        return self._binary(o, M.equal)

    def __ne__(self, o):
        return self._binary(o, M.not_equal)

    def __lt__(self, o):
        return self._binary(o, M.less)

    def __le__(self, o):
        return self._binary(o, M.less_equal)

    def __gt__(self, o):
        return self._binary(o, M.greater)

    def __ge__(self, o):
        return self._binary(o, M.greater_equal)

    __hash__ = object.__hash__

    # ---- reductions ------------------------------------------------------------------------
    def _reduce(self, kind, axis, keepdims=False):
        if axis is None:
            return {"sum": Rd.reduce_sum, "mean": Rd.reduce_mean, "max": Rd.reduce_max,
                    "min": Rd.reduce_min, "prod": Rd.reduce_prod}[kind](self.flat_values)
        axis = int(axis) % (self.shape.rank or 2)
        if axis == 0:
            return _ragged_axis0(self, kind)
        if axis == 1 and self.ragged_rank == 1:
            return _segment_reduce(self._values, _np(self.row_lengths()), kind)
        if axis >= 2 and self.ragged_rank == 1:
            fn = {"sum": Rd.reduce_sum, "mean": Rd.reduce_mean, "max": Rd.reduce_max, "min": Rd.reduce_min,
                  "prod": Rd.reduce_prod}[kind]
            return self.with_values(fn(self._values, axis=axis - 1))
        if axis >= 2:
            return self.with_values(self._values._reduce(kind, axis - 1))
        raise NotImplementedError(f"RaggedTensor: reducing axis {axis} of ragged rank {self.ragged_rank}")

    def reduce_sum(self, axis=None, keepdims=False):
        return self._reduce("sum", axis, keepdims)

    def reduce_mean(self, axis=None, keepdims=False):
        return self._reduce("mean", axis, keepdims)

    def reduce_max(self, axis=None, keepdims=False):
        return self._reduce("max", axis, keepdims)

    def reduce_min(self, axis=None, keepdims=False):
        return self._reduce("min", axis, keepdims)

    def reduce_prod(self, axis=None, keepdims=False):
        return self._reduce("prod", axis, keepdims)

    def __repr__(self):
        try:
            return f"<tw.RaggedTensor {self.to_list()!r}>"
        except TypeError:
            return f"tw.RaggedTensor(values={self._values!r}, row_splits={self._row_splits!r})"


def _cumsum(x):
    from tensorweave.ops.sort_ops import cumsum
    return cumsum(x)


def _nvals(values):
    if isinstance(values, RaggedTensor):
        s = values._row_splits
        return int(s.numpy().shape[0]) - 1 if isinstance(s, EagerTensor) else None
    return values.shape[0] if values.shape.rank else None


def _nrows_of(values):
    return values.nrows() if isinstance(values, RaggedTensor) else A.shape(values)[0]


def _concat_values(parts, like):
    if isinstance(like, RaggedTensor):
        raise NotImplementedError("RaggedTensor: strided row slices of ragged rank > 1 are not supported")
    return A.concat(parts, 0) if parts else like[0:0]


_IDENTITY = {"sum": 0, "prod": 1}


def _segment_reduce(values, lengths, kind):
    """Reduces each row (a run of ``lengths[i]`` values along axis 0) of a dense ``values``."""
    n = len(lengths)
    ids = A.constant(np.repeat(np.arange(n, dtype=np.int32), lengths))
    if kind in ("sum", "mean"):
        total = A.unsorted_segment_sum(values, ids, n)
        if kind == "sum":
            return total
        c = A.constant(np.maximum(lengths, 1).astype(values.dtype.np_dtype).reshape([-1] + [1] * (values.shape.rank - 1)))
        return M.where(A.constant(lengths.reshape([-1] + [1] * (values.shape.rank - 1)) > 0), total / c,
                       A.fill(A.shape(total), convert_to_tensor(np.nan, dtype=values.dtype)))
    # max/min/prod: pad to a dense [n, max_len, ...] with the identity, reduce axis 1
    width = int(lengths.max()) if n else 0
    dt = values.dtype
    ident = {"max": dt.min, "min": dt.max, "prod": 1}[kind]
    mask = np.arange(width)[None, :] < lengths[:, None]
    coords = np.argwhere(mask).astype(np.int64)
    from tensorweave.ops.indexing_ops import tensor_scatter_nd_update
    base = A.fill(A.constant(np.asarray([n, width] + values.shape.as_list()[1:], np.int64)),
                  convert_to_tensor(ident, dtype=dt))
    dense = tensor_scatter_nd_update(base, A.constant(coords), values)
    fn = {"max": Rd.reduce_max, "min": Rd.reduce_min, "prod": Rd.reduce_prod}[kind]
    return fn(dense, axis=1)


def _ragged_axis0(rt, kind):
    """Reduces over rows: position j of the result combines the rows that have a j-th element."""
    lengths = _np(rt.row_lengths())
    if rt.ragged_rank != 1:
        raise NotImplementedError("RaggedTensor: reducing axis 0 needs ragged rank 1")
    pos = np.concatenate([np.arange(k) for k in lengths]).astype(np.int32) if len(lengths) else np.zeros(0, np.int32)
    width = int(lengths.max()) if len(lengths) else 0
    counts = np.bincount(pos, minlength=width)
    order = np.argsort(pos, kind="stable")
    sorted_vals = A.gather(rt.values, order.astype(np.int32))
    return _segment_reduce(sorted_vals, counts, kind)
