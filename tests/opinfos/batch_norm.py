"""OpInfos for the fused batch-norm training op (ops/batch_norm_ops.py) and its gradient.

The reference is the textbook float64 formula over every axis but the channels; the gradient
checks (first and second order) exercise ``BatchNormTrainingGrad`` and its composite gradient,
with random cotangents on all three outputs (so the statistics outputs' gradients too).
"""
import numpy as np

import tensorweave as tw
from opinfo import FLOATS, OpInfo, Sample, arr, noncontig
from tensorweave.ops.batch_norm_ops import batch_norm_training


def ref_batch_norm_training(x, scale, offset, epsilon=0.001, data_format="NHWC"):
    x64 = np.asarray(x).astype(np.float64)
    cf = data_format.upper().startswith("NC")
    xl = np.moveaxis(x64, 1, -1) if cf else x64
    rows = xl.reshape(-1, xl.shape[-1])
    mean, var = rows.mean(0), rows.var(0)
    y = (xl - mean) / np.sqrt(var + epsilon) * np.asarray(scale, np.float64) + np.asarray(offset, np.float64)
    y = np.moveaxis(y, -1, 1) if cf else y
    stat = np.asarray(scale).dtype
    return y.astype(np.asarray(x).dtype), mean.astype(stat), var.astype(stat)


def _samples(dtype, rng):
    stat = np.float32 if dtype in (np.float16, tw.bfloat16.np_dtype) else dtype
    a = lambda *s: arr(rng, s, dtype, -2, 2)  # noqa: E731
    v = lambda *s: arr(rng, s, stat, 0.5, 2)  # noqa: E731
    offset_mean = (a(3, 2, 2, 3).astype(np.float64) + 40.0).astype(dtype)   # mean >> std: no cancellation
    return [Sample((a(2, 3, 3, 2), v(2), v(2)), {"epsilon": 1e-3}, name="nhwc"),
            Sample((a(2, 3, 2, 3), v(3), v(3)), {"data_format": "NCHW", "epsilon": 1e-2}, name="nchw"),
            Sample((a(5, 3), v(3), v(3)), name="dense_rows"),
            Sample((a(9, 2), v(2), v(2)), name="rows_not_multiple_of_4"),
            Sample((noncontig(a(2, 2, 3)), v(3), v(3)), name="noncontig"),
            Sample((offset_mean, v(3), v(3)), name="large_mean"),
            Sample((a(2, 2, 2, 2, 2), v(2), v(2)), {"data_format": "NCDHW"}, name="ncdhw")]


OPS = [
    OpInfo("batch_norm_training", batch_norm_training, ref_batch_norm_training, FLOATS, _samples, grad_order=2,
           grad_args=(0, 1, 2), grad_tol=1e-5),
]
