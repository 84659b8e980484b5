"""CPU kernels for ``ops/segment_ops.py`` and ``ops/misc_ops.py`` (searchsorted, histograms)."""
import numpy as np

from tensorweave.core.registry import register_kernel as k


def _segment_reduce(ufunc, empty):
    def kernel(data, ids, num_segments):
        n = int(num_segments)
        data, ids = np.asarray(data), np.asarray(ids)
        if ids.size and ids.max() >= n:
            raise ValueError(f"segment_ids must be < num_segments = {n}, got {int(ids.max())}")
        info = np.finfo(data.dtype) if data.dtype.kind == "f" else np.iinfo(data.dtype)
        fill = {"lowest": info.min, "highest": info.max, "one": 1}[empty]
        out = np.full((n,) + data.shape[ids.ndim:], fill, dtype=data.dtype)
        keep = ids >= 0  # entries with a negative id are dropped, as in TF
        ufunc.at(out, ids[keep], data[keep])
        return out
    return kernel


k("UnsortedSegmentMax")(_segment_reduce(np.maximum, "lowest"))
k("UnsortedSegmentMin")(_segment_reduce(np.minimum, "highest"))
k("UnsortedSegmentProd")(_segment_reduce(np.multiply, "one"))


@k("Bincount")
def _bincount(arr, weights=None, minlength=-1, maxlength=-1, dtype=None):
    arr = np.asarray(arr).reshape(-1)
    if arr.size and arr.min() < 0:
        raise ValueError(f"bincount: arr must be non-negative, got {int(arr.min())}")
    w = None if weights is None else np.asarray(weights).reshape(-1)
    # TF's length: max(arr) + 1, at least minlength, then at most maxlength (values past it are dropped)
    length = max(int(arr.max()) + 1 if arr.size else 0, minlength, 0)
    if maxlength >= 0:
        length = min(length, maxlength)
    keep = arr < length
    arr, w = arr[keep], (None if w is None else w[keep])
    out = np.bincount(arr, weights=w, minlength=length)
    return out.astype(weights.dtype if weights is not None else dtype.np_dtype, copy=False)


@k("UniqueV2")
def _unique(x, out_idx):
    x = np.asarray(x)
    values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    order = np.argsort(first, kind="stable")         # first-appearance order, as TF
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    idx_type = out_idx.np_dtype
    return values[order], rank[inverse.reshape(-1)].astype(idx_type), counts[order].astype(idx_type)


@k("SearchSorted")
def _searchsorted(sorted_sequence, values, side, out_type):
    s, v = np.asarray(sorted_sequence), np.asarray(values)
    if s.ndim == 1 and v.ndim == 1:
        return np.searchsorted(s, v, side=side).astype(out_type.np_dtype)
    if s.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"searchsorted: leading dimensions must match, got {list(s.shape)} and {list(v.shape)}")
    rows_s, rows_v = s.reshape(-1, s.shape[-1]), v.reshape(-1, v.shape[-1])
    out = np.stack([np.searchsorted(a, b, side=side) for a, b in zip(rows_s, rows_v)]) if rows_s.size else \
        np.zeros(rows_v.shape, np.int64)
    return out.reshape(v.shape).astype(out_type.np_dtype)


@k("HistogramFixedWidth")
def _histogram_fixed_width(values, value_range, nbins, dtype):
    v = np.asarray(values, np.float64).reshape(-1)
    lo, hi = float(value_range[0]), float(value_range[1])
    if not hi > lo:
        raise ValueError(f"histogram_fixed_width: value_range must be increasing, got [{lo}, {hi}]")
    idx = np.clip(np.floor((v - lo) / (hi - lo) * nbins), 0, nbins - 1).astype(np.int64)
    return np.bincount(idx, minlength=nbins).astype(dtype.np_dtype)
