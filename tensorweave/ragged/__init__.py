"""``tw.ragged``: building and transforming :class:`~tensorweave.RaggedTensor` s.

>>> import tensorweave as tw
>>> rt = tw.ragged.constant([[[1, 2], [3]], [[4, 5, 6]]])
>>> rt.ragged_rank, rt.row_splits.numpy().tolist(), rt.values.row_splits.numpy().tolist()
(2, [0, 2, 3], [0, 2, 3, 6])
>>> tw.ragged.range([3, 1]).to_list()
[[0, 1, 2], [0]]
"""
import builtins

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.ops import array_ops as A
from tensorweave.ragged.ragged_tensor import RaggedTensor, _np

__all__ = ["RaggedTensor", "constant", "range", "boolean_mask", "map_flat_values", "row_splits_to_segment_ids",
           "segment_ids_to_row_splits", "stack"]


def _depth(x):
    d = 0
    while isinstance(x, (list, tuple)):
        x = next((e for e in x if isinstance(e, (list, tuple)) and len(e)), x[0] if len(x) else None)
        d += 1
    return d


def constant(pylist, dtype=None, ragged_rank=None, inner_shape=None, name=None, row_splits_dtype=_dt.int64):
    """A RaggedTensor from nested Python lists (ragged in every dimension but ``inner_shape``)."""
    depth = max(_depth(pylist), 1)
    inner = 0 if inner_shape is None else len(inner_shape)
    rank = depth - 1 - inner if ragged_rank is None else int(ragged_rank)
    if rank < 1:
        raise ValueError(f"tw.ragged.constant: ragged_rank must be >= 1, got {rank} for a value of depth {depth}")
    splits = []
    level = list(pylist)
    for _ in builtins.range(rank):
        lengths = [len(r) for r in level]
        splits.append(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        level = [v for r in level for v in r]
    flat = convert_to_tensor(level, dtype=dtype) if level else \
        A.zeros([0] + list(inner_shape or []), _dt.as_dtype(dtype) if dtype is not None else _dt.float32)
    return RaggedTensor.from_nested_row_splits(flat, [A.constant(s) for s in splits])


def range(starts, limits=None, deltas=1, dtype=None, name=None, row_splits_dtype=_dt.int64):  # noqa: A001
    """Row ``i`` is ``range(starts[i], limits[i], deltas[i])`` (``starts`` alone means limits)."""
    if limits is None:
        starts, limits = 0, starts
    s, l, d = (np.asarray(_np(convert_to_tensor(v))) for v in (starts, limits, deltas))
    s, l, d = np.broadcast_arrays(s, l, d)
    rows = [np.arange(a, b, c) for a, b, c in zip(s.ravel(), l.ravel(), d.ravel())]
    dt = _dt.as_dtype(dtype) if dtype is not None else _dt.from_numpy(np.result_type(s, l, d))
    flat = np.concatenate(rows).astype(dt.np_dtype) if rows else np.zeros(0, dt.np_dtype)
    return RaggedTensor.from_row_lengths(A.constant(flat), np.array([len(r) for r in rows], np.int64))


def map_flat_values(op, *args, **kwargs):
    """Applies ``op`` to the flat values of the RaggedTensor arguments (same row partitions)."""
    rts = [a for a in list(args) + list(kwargs.values()) if isinstance(a, RaggedTensor)]
    if not rts:
        return op(*args, **kwargs)
    unwrap = lambda a: a.flat_values if isinstance(a, RaggedTensor) else a  # noqa: E731
    return rts[0].with_flat_values(op(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in kwargs.items()}))


def boolean_mask(data, mask, name=None):
    """Keeps the entries of ``data`` where ``mask`` is True; with a 2-D (or ragged) mask the result is ragged."""
    from tensorweave.ops.indexing_ops import boolean_mask as dense_mask
    if isinstance(mask, RaggedTensor):
        keep = _np(mask.flat_values)
        lengths = [int(keep[a:b].sum()) for a, b in zip(_np(mask.row_splits)[:-1], _np(mask.row_splits)[1:])]
        flat = data.flat_values if isinstance(data, RaggedTensor) else data
        return RaggedTensor.from_row_lengths(dense_mask(flat, A.constant(keep)), np.asarray(lengths, np.int64))
    m = _np(convert_to_tensor(mask))
    if m.ndim == 1:
        if isinstance(data, RaggedTensor):
            rows = [data[i] for i in np.nonzero(m)[0]]
            return stack_rows(rows, data)
        return dense_mask(data, m)
    d = convert_to_tensor(data)
    return RaggedTensor.from_row_lengths(dense_mask(d, A.constant(m)), m.sum(axis=1).astype(np.int64))


def stack_rows(rows, like):
    lengths = np.array([r.shape[0] for r in rows], np.int64)
    return RaggedTensor.from_row_lengths(A.concat(rows, 0) if rows else like.values[0:0], lengths)


def stack(values, axis=0, name=None):
    """Stacks tensors/RaggedTensors of rank >= 1 into a RaggedTensor (axis 0)."""
    if axis != 0:
        raise NotImplementedError("tw.ragged.stack supports axis=0")
    rows = []
    for v in values:
        rows.append(v if isinstance(v, RaggedTensor) else convert_to_tensor(v))
    if any(isinstance(r, RaggedTensor) for r in rows):
        splits, flats, off = [0], [], 0
        inner_lengths = []
        for r in rows:
            r = r if isinstance(r, RaggedTensor) else RaggedTensor.from_tensor(r)
            n = len(r)
            splits.append(splits[-1] + n)
            inner_lengths.extend(_np(r.row_lengths()).tolist())
            flats.append(r.values)
        inner = RaggedTensor.from_row_lengths(A.concat(flats, 0), np.asarray(inner_lengths, np.int64))
        return RaggedTensor(inner, np.asarray(splits, np.int64))
    return stack_rows(rows, rows[0])


def row_splits_to_segment_ids(splits, name=None, out_type=None):
    """The row id of each value: ``[0, 2, 3] -> [0, 0, 1]``."""
    s = _np(convert_to_tensor(splits))
    out = np.repeat(np.arange(len(s) - 1), np.diff(s))
    return A.constant(out.astype(np.int64 if out_type is None else _dt.as_dtype(out_type).np_dtype))


def segment_ids_to_row_splits(segment_ids, num_segments=None, out_type=None, name=None):
    """Row splits from sorted segment ids: ``[0, 0, 1] -> [0, 2, 3]``."""
    ids = _np(convert_to_tensor(segment_ids))
    n = int(num_segments) if num_segments is not None else (int(ids.max()) + 1 if ids.size else 0)
    counts = np.bincount(ids, minlength=n)[:n] if ids.size else np.zeros(n, np.int64)
    out = np.concatenate([[0], np.cumsum(counts)])
    return A.constant(out.astype(np.int64 if out_type is None else _dt.as_dtype(out_type).np_dtype))
