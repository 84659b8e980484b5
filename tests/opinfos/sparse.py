"""OpInfos for tw.sparse: the values (and dense operands) of SparseTensors are the differentiable inputs;
the sparsity pattern is fixed per sample (unsorted, with a repeated row and an empty row)."""
import numpy as np

import tensorweave as tw
from opinfo import NUMERIC, OpInfo, Sample, arr
from tensorweave.keras.optimizers.sparse_ops import unique_segment_sum

F = (tw.float32, tw.float64)
IDX = np.array([[2, 1], [0, 3], [2, 0], [0, 0], [3, 3]], np.int64)
SHAPE = (5, 4)


def _dense(values):
    d = np.zeros(SHAPE, values.dtype)
    np.add.at(d, tuple(IDX.T), values)
    return d


def _st(values):
    return tw.SparseTensor(IDX, values, SHAPE)


def _mm_samples(dtype, rng):
    return [Sample((arr(rng, (5,), dtype), arr(rng, (4, 3), dtype)), name="ab"),
            Sample((arr(rng, (5,), dtype), arr(rng, (2, 4), dtype)), {"adjoint_b": True}, name="ab_t"),
            Sample((arr(rng, (5,), dtype), arr(rng, (5, 2), dtype)), {"adjoint_a": True}, name="at_b")]


def _mm_ref(values, b, adjoint_a=False, adjoint_b=False):
    a = _dense(values)
    return (a.T if adjoint_a else a) @ (b.T if adjoint_b else b)


def _values(dtype, rng):
    return [Sample((arr(rng, (5,), dtype),), name="values")]


def _unique_segment_sum_ref(indices, values):
    uniq, inverse = np.unique(indices, return_inverse=True)
    out = np.zeros((len(uniq),) + values.shape[1:], values.dtype)
    np.add.at(out, inverse.reshape(-1), values)
    return uniq.astype(indices.dtype), out


def _unique_segment_sum_samples(dtype, rng):
    # repeated ids out of order (the embedding-gradient case), and ids far apart (the np.unique path)
    return [Sample((np.array([3, 1, 3, 0, 1], np.int32), arr(rng, (5, 2), dtype)), name="repeats"),
            Sample((np.array([90000, 2, 90000], np.int64), arr(rng, (3,), dtype)), name="sparse_ids")]


OPS = [
    OpInfo("unique_segment_sum", lambda i, v: unique_segment_sum(i, v), _unique_segment_sum_ref,
           NUMERIC, _unique_segment_sum_samples),
    OpInfo("sparse.sparse_dense_matmul", lambda v, b, **kw: tw.sparse.sparse_dense_matmul(_st(v), b, **kw), _mm_ref,
           F, _mm_samples, tol={tw.float32: (1e-5, 1e-5)}),
    OpInfo("sparse.dense_sparse_matmul", lambda v, b: tw.sparse.sparse_dense_matmul(b, _st(v)),
           lambda v, b: b @ _dense(v), F,
           lambda d, rng: [Sample((arr(rng, (5,), d), arr(rng, (3, 5), d)))], tol={tw.float32: (1e-5, 1e-5)}),
    OpInfo("sparse.to_dense", lambda v: tw.sparse.to_dense(_st(v)), _dense, F + (tw.int32,), _values),
    OpInfo("sparse.reduce_sum", lambda v, **kw: tw.sparse.reduce_sum(_st(v), **kw),
           lambda v, axis=None, keepdims=False: _dense(v).sum(axis=axis, keepdims=keepdims), F,
           lambda d, rng: [Sample((arr(rng, (5,), d),), {"axis": 1}), Sample((arr(rng, (5,), d),), {}),
                           Sample((arr(rng, (5,), d),), {"axis": 0, "keepdims": True})]),
    OpInfo("sparse.add_dense", lambda v, b: tw.sparse.add(_st(v), b), lambda v, b: _dense(v) + b, F,
           lambda d, rng: [Sample((arr(rng, (5,), d), arr(rng, SHAPE, d)))]),
    OpInfo("sparse.segment_sum", lambda x: tw.sparse.segment_sum(x, [0, 2, 2, 1], [0, 0, 1, 1]),
           lambda x: np.stack([x[0] + x[2], x[2] + x[1]]), F, lambda d, rng: [Sample((arr(rng, (3, 2), d),))]),
]
