"""CPU kernels for ``ops/reduce_ops.py``."""
import numpy as np

from tensorweave.core.registry import register_kernel as k


def _reducer(fn, keep_dtype=True):
    def kernel(x, axis, keepdims):
        out = fn(x, axis=axis, keepdims=keepdims)
        if keep_dtype and out.dtype != x.dtype:
            out = out.astype(x.dtype)
        return out
    return kernel


k("Sum")(_reducer(np.sum))
k("Prod")(_reducer(np.prod))
k("Any")(_reducer(np.any))
k("All")(_reducer(np.all))


@k("Mean")
def _mean(x, axis, keepdims):
    if x.dtype.kind in "iu":
        # TensorFlow's integer mean is the truncated integer quotient.
        s = np.sum(x, axis=axis, keepdims=keepdims, dtype=np.int64)
        n = x.size // max(s.size, 1) if x.size else 0
        return (np.trunc(s / n) if n else s).astype(x.dtype)
    if x.size == 0:
        # 0/0 = nan where a reduced slice is empty (np.mean would also warn).
        with np.errstate(all="ignore"):
            s = np.sum(x, axis=axis, keepdims=keepdims, dtype=np.float64)
            return (s / 0.0).astype(x.dtype)
    return np.mean(x, axis=axis, keepdims=keepdims, dtype=np.float32 if x.dtype.itemsize < 4 else None).astype(x.dtype, copy=False)


@k("Max")
def _max(x, axis, keepdims):
    if x.size == 0:
        init = np.iinfo(x.dtype).min if x.dtype.kind in "iu" else -np.inf  # bfloat16's kind is "V"
        return np.max(x, axis=axis, keepdims=keepdims, initial=init).astype(x.dtype)
    return np.max(x, axis=axis, keepdims=keepdims)


@k("Min")
def _min(x, axis, keepdims):
    if x.size == 0:
        init = np.iinfo(x.dtype).max if x.dtype.kind in "iu" else np.inf
        return np.min(x, axis=axis, keepdims=keepdims, initial=init).astype(x.dtype)
    return np.min(x, axis=axis, keepdims=keepdims)


@k("ArgMax")
def _argmax(x, axis, output_type):
    return np.argmax(x, axis=axis).astype(output_type.np_dtype)


@k("ArgMin")
def _argmin(x, axis, output_type):
    return np.argmin(x, axis=axis).astype(output_type.np_dtype)
