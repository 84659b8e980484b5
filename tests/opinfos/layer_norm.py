"""OpInfos for the fused layer norm (ops/layer_norm_ops.py) and the one-op softmax gradient
(ops/softmax_grad_ops.py).

References are the textbook float64 formulas; the gradient checks (first and second order,
float64 finite differences) exercise ``LayerNormGrad`` and its composite gradient with random
cotangents on all three outputs (so the statistics' gradients too), and ``SoftmaxGrad``'s.
"""
import numpy as np

import tensorweave as tw
from opinfo import FLOATS, OpInfo, Sample, arr, noncontig
from tensorweave.ops.layer_norm_ops import layer_norm
from tensorweave.ops.softmax_grad_ops import softmax_grad


def ref_layer_norm(x, gamma, beta, epsilon=0.001, begin_norm_axis=-1, rms=False):
    x = np.asarray(x)
    x64 = x.astype(np.float64)
    begin = begin_norm_axis % x.ndim
    axes = tuple(range(begin, x.ndim))
    mean = x64.mean(axis=axes)
    c = x64 - mean.reshape(mean.shape + (1,) * len(axes))
    inv = 1.0 / np.sqrt((c * c).mean(axis=axes) + epsilon)
    # rms (Keras 3's rms_scaling): the centred variance, but x itself scaled
    y = (x64 if rms else c) * inv.reshape(inv.shape + (1,) * len(axes)) * np.asarray(gamma, np.float64) \
        + np.asarray(beta, np.float64)
    stat = np.asarray(gamma).dtype
    return y.astype(x.dtype), mean.astype(stat), inv.astype(stat)


def ref_softmax_grad(y, g, axis=-1, scale=1.0):
    y64, g64 = np.asarray(y, np.float64), np.asarray(g, np.float64)
    return (scale * y64 * (g64 - (g64 * y64).sum(axis=axis, keepdims=True))).astype(np.asarray(y).dtype)


def _ln_samples(dtype, rng):
    stat = np.float32 if dtype in (np.float16, tw.bfloat16.np_dtype) else dtype
    a = lambda *s: arr(rng, s, dtype, -2, 2)  # noqa: E731
    v = lambda *s: arr(rng, s, stat, 0.5, 2)  # noqa: E731
    offset_mean = (a(3, 9).astype(np.float64) + 40.0).astype(dtype)   # mean >> std: no cancellation
    return [Sample((a(2, 3, 10), v(10), v(10)), {"epsilon": 1e-3}, name="last_axis_tail"),
            Sample((a(3, 16), v(16), v(16)), {"epsilon": 1e-2}, name="lanes_only"),
            Sample((a(2, 3, 4), v(3, 4), v(3, 4)), {"begin_norm_axis": 1}, name="two_axes"),
            Sample((a(4, 5), v(5), v(5)), {"rms": True}, name="rms"),
            Sample(((a(2, 3, 4).astype(np.float64) + 1.5).astype(dtype), v(3, 4), v(3, 4)),   # mean != 0
                   {"rms": True, "begin_norm_axis": 1}, name="rms_offset_two_axes"),
            Sample((noncontig(a(2, 2, 9)), v(9), v(9)), name="noncontig"),
            Sample((offset_mean, v(9), v(9)), name="large_mean")]


def _sm_samples(dtype, rng):
    def probs(*s):
        e = np.exp(rng.uniform(-2, 2, s))
        return (e / e.sum(-1, keepdims=True)).astype(dtype)
    a = lambda *s: arr(rng, s, dtype, -2, 2)  # noqa: E731
    return [Sample((probs(3, 11), a(3, 11)), name="rows_tail"),
            Sample((probs(2, 2, 8), a(2, 2, 8)), {"scale": 0.125}, name="scaled"),
            Sample((np.moveaxis(probs(4, 3), 1, 0).copy(), a(3, 4)), {"axis": 0}, name="axis0"),
            Sample((noncontig(probs(2, 9)), a(2, 9)), name="noncontig")]


OPS = [
    OpInfo("layer_norm", layer_norm, ref_layer_norm, FLOATS, _ln_samples, grad_order=2, grad_args=(0, 1, 2),
           grad_tol=1e-5),
    OpInfo("softmax_grad", softmax_grad, ref_softmax_grad, FLOATS, _sm_samples, grad_order=2, grad_args=(0, 1)),
]
