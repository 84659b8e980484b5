"""Fused batch normalization for training: ``BatchNormTraining`` and its gradient
``BatchNormTrainingGrad`` (TensorFlow's ``FusedBatchNormV3``/``FusedBatchNormGradV3`` with
``is_training=True``, without the running averages, which callers blend themselves).

``BatchNormTraining(x, scale, offset)`` normalises ``x`` over every axis but the channels
(the last, or axis 1 with a ``data_format`` starting ``"NC"``) with the batch's statistics and
returns ``(y, mean, variance)``: ``y = scale * (x - mean) / sqrt(variance + epsilon) + offset``
and the biased variance. Its kernel makes two passes over ``x`` (statistics, then normalise)
and its gradient two over ``dy`` and ``x``, where the same graph of elementwise ops and
reductions made ~9 each way. float16/bfloat16 ``x`` is computed in float32; ``scale``,
``offset`` and the statistics are then float32 (as TensorFlow's).

The gradient op also takes the gradients of the ``mean`` and ``variance`` outputs (zeros when
unused): they only change the per-channel coefficients of the ``dx`` pass.

>>> import tensorweave as tw
>>> from tensorweave.ops.batch_norm_ops import batch_norm_training
>>> y, mean, var = batch_norm_training(tw.constant([[1.0], [3.0]]), [1.0], [0.0], epsilon=0.0)
>>> y.numpy().ravel().tolist(), mean.numpy().tolist(), var.numpy().tolist()
([-1.0, 1.0], [2.0], [1.0])
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import get_op, register_op
from tensorweave.core.sbp import S
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.core.tensor import Tensor

__all__ = ["batch_norm_training"]

_FLOAT = (_dt.float16, _dt.bfloat16, _dt.float32, _dt.float64)


def _work(dtype):
    return _dt.float32 if dtype in (_dt.float16, _dt.bfloat16) else dtype


def _channel_axis(x, attrs):
    return 1 if str(attrs.get("data_format", "NHWC")).upper().startswith("NC") else x.shape.rank - 1


def _check(op, x, vectors, attrs):
    """Checks ``x`` (rank >= 2, float) and the per-channel ``vectors`` (``[(name, tensor)]``:
    1-D, one value per channel, x's work dtype); returns the channel count (or None)."""
    if x.dtype not in _FLOAT:
        raise TypeError(f"{op} does not support dtype {x.dtype.name} for x; expected one of: "
                        f"{', '.join(d.name for d in _FLOAT)}")
    if x.shape.rank is not None and x.shape.rank < 2:
        raise ValueError(f"{op}: x must have rank >= 2 (a batch and channels), got shape {fmt(x.shape)}")
    c = None if x.shape.rank is None else x.shape[_channel_axis(x, attrs)]
    for name, v in vectors:
        if v.dtype is not _work(x.dtype):
            raise TypeError(f"{op}: {name} must be {_work(x.dtype).name} for x of dtype {x.dtype.name}, got "
                            f"{v.dtype.name}")
        if v.shape.rank not in (None, 1) or (v.shape.rank == 1 and None not in (c, v.shape[0]) and v.shape[0] != c):
            raise ValueError(f"{op}: {name} must be 1-D with one value per channel ({c}), got shape "
                             f"{fmt(v.shape)}; x shape {fmt(x.shape)} ({attrs.get('data_format', 'NHWC')})")
    return c


def _infer(inputs, attrs):
    x, scale, offset = inputs
    c = _check("BatchNormTraining", x, [("scale", scale), ("offset", offset)], attrs)
    stat = (TensorShape([c]), _work(x.dtype))
    return [(x.shape, x.dtype), stat, stat]


def _infer_grad(inputs, attrs):
    dy, x = inputs[:2]
    names = ("scale", "mean", "variance", "mean_grad", "variance_grad")
    c = _check("BatchNormTrainingGrad", x, list(zip(names, inputs[2:])), attrs)
    if dy.dtype is not x.dtype or not dy.shape.is_compatible_with(x.shape):
        raise ValueError(f"BatchNormTrainingGrad: dy must have x's shape and dtype, got {fmt(dy.shape)} "
                         f"{dy.dtype.name} for x {fmt(x.shape)} {x.dtype.name}")
    stat = (TensorShape([c]), _work(x.dtype))
    return [(x.shape, x.dtype), stat, stat]


def _grad(op, gy, gmean, gvar):
    x, scale, _ = op.inputs
    _, mean, var = op.outputs
    dx, dscale, doffset = execute(get_op("BatchNormTrainingGrad"), [gy, x, scale, mean, var, gmean, gvar],
                                  op.attrs)
    return [dx, dscale, doffset]


def _grad_grad(op, gdx, gscale, goffset):
    """The gradient of ``BatchNormTrainingGrad`` from ordinary ops (second order is rare; these
    passes are not fused). With ``xc = x - mean``, ``inv = (variance + eps)^-1/2``, ``s1 = sum dy``,
    ``s2 = sum dy * xc``, the op computes ``dx = a dy + b xc + k`` (``a = scale inv``,
    ``b = (2 variance_grad - a inv^2 s2) / M``, ``k = (mean_grad - a s1) / M``), ``dscale = s2 inv``,
    ``doffset = s1``; this is the chain rule back through those lines."""
    from tensorweave.ops import array_ops as A
    from tensorweave.ops import math_ops as m
    from tensorweave.ops.reduce_ops import reduce_sum
    dy, x, scale, mean, var, gm, gv = op.inputs
    low = x.dtype is not _work(x.dtype)
    if low:
        dy, x, gdx = (m.cast(t, _work(x.dtype)) for t in (dy, x, gdx))
    axis = _channel_axis(x, op.attrs)
    rank = x.shape.rank
    axes = [i for i in range(rank) if i != axis]

    def pc(v):   # a [C] vector broadcast against x
        return v if axis == rank - 1 else A.reshape(v, [-1] + [1] * (rank - 2))

    def total(t):
        return reduce_sum(t, axis=axes)
    n = m.cast(A.size(x), var.dtype) / m.cast(A.shape(x)[axis], var.dtype)
    inv = m.rsqrt(var + op.attrs["epsilon"])
    xc = x - pc(mean)
    s1, s2 = total(dy), total(dy * xc)
    a = scale * inv
    b = (2.0 * gv - a * inv * inv * s2) / n
    d_a, d_b, d_k = total(gdx * dy), total(gdx * xc), total(gdx)
    d_s1 = goffset - a * d_k / n
    d_s2 = gscale * inv - a * inv * inv * d_b / n
    d_scale = inv * d_a - inv * inv * inv * s2 * d_b / n - inv * s1 * d_k / n
    d_inv = gscale * s2 + scale * d_a - 3.0 * a * inv * s2 * d_b / n - scale * s1 * d_k / n
    d_dy = gdx * pc(a) + pc(d_s1) + pc(d_s2) * xc
    d_xc = gdx * pc(b) + pc(d_s2) * dy
    d_mean = -total(d_xc)
    d_var = -0.5 * inv * inv * inv * d_inv
    if low:
        d_dy, d_xc = m.cast(d_dy, op.inputs[0].dtype), m.cast(d_xc, op.inputs[0].dtype)
    return [d_dy, d_xc, d_scale, d_mean, d_var, d_k / n, 2.0 * d_b / n]


# SBP: channels are independent, so a split of the channel axis (x, y, dy and dx on it; the
# per-channel vectors S(0)) runs each rank's channels; a batch split would need the global
# statistics (not linear): boxed to B.
def _channel_split(n_vectors, n_rows):
    def fn(inputs, attrs):
        rank = inputs[0].rank
        axis = 1 if str(attrs.get("data_format", "NHWC")).upper().startswith("NC") else rank - 1
        yield [S(axis)] * n_rows + [S(0)] * n_vectors, [S(axis), S(0), S(0)]
    return sbp_rules.signatures(fn, 3)


register_op("BatchNormTraining", infer=_infer, num_outputs=3, heavy=True, grad=_grad, sbp=_channel_split(2, 1))
register_op("BatchNormTrainingGrad", infer=_infer_grad, num_outputs=3, heavy=True, grad=_grad_grad,
            sbp=_channel_split(5, 2))


def batch_norm_training(x, scale, offset, epsilon=0.001, data_format="NHWC", name=None):
    """``(y, mean, variance)``: ``x`` normalised with its batch statistics over every axis but
    the channels (the last; axis 1 when ``data_format`` starts with ``"NC"``), scaled and
    shifted; ``variance`` is the biased one. See the module docstring."""
    x = x if isinstance(x, Tensor) else convert_to_tensor(x)
    wd = _work(x.dtype) if x.dtype in _FLOAT else _dt.float32
    scale, offset = (v if isinstance(v, Tensor) else convert_to_tensor(v, dtype=wd) for v in (scale, offset))
    df = str(data_format).upper()
    return execute(get_op("BatchNormTraining"), [x, scale, offset],
                   {"epsilon": float(epsilon), "data_format": df}, name)
