"""Fused layer normalization: ``LayerNorm`` and its gradient ``LayerNormGrad`` (PyTorch's
``native_layer_norm``/``native_layer_norm_backward``; oneDNN's layer-norm primitive).

``LayerNorm(x, gamma, beta)`` normalizes each row of ``x`` over its trailing axes (from
``begin_norm_axis`` on): ``y = (x - mean) * inv * gamma + beta`` with ``inv = (var + eps)^-1/2``
and the biased variance; it returns ``(y, mean, inv)``, the per-row statistics shaped like
``x.shape[:begin_norm_axis]``, saved for the gradient. ``rms=True`` is Keras 3's
``LayerNormalization(rms_scaling=True)`` (``keras/src/ops/nn.py``): ``inv`` as above (the
*centred* variance), but ``y = x * inv * gamma + beta`` (``x`` not centred). Despite the name it
is not a root mean square (Keras deprecates the argument for that reason; the real one is
``RMSNormalization``, ``mean(x^2)``, written with ordinary ops).
``gamma``/``beta`` are shaped like the normalized axes. The kernel makes one pass over a row
for each way (``kernels/cpu/layer_norm_kernels.py``); Keras' ``LayerNormalization`` wrote it as
``moments`` + ``batch_normalization``: ~6 passes forward and ~12 in the gradient.
float16/bfloat16 ``x`` is computed in float32; ``gamma``, ``beta`` and the statistics are then
float32.

``LayerNormGrad(dy, x, gamma, mean, inv, mean_grad, inv_grad)`` returns ``(dx, dgamma, dbeta)``;
``mean_grad``/``inv_grad`` are the gradients of the forward's statistics outputs (zeros when
unused): they only change two per-row coefficients of the ``dx`` pass. Its own gradient
(second order, rare) is written with ordinary ops.

>>> import tensorweave as tw
>>> from tensorweave.ops.layer_norm_ops import layer_norm
>>> y, mean, inv = layer_norm(tw.constant([[1.0, 3.0]]), [1.0, 1.0], [0.0, 0.0], epsilon=0.0)
>>> y.numpy().tolist(), mean.numpy().tolist(), inv.numpy().tolist()
([[-1.0, 1.0]], [2.0], [1.0])
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import get_op, register_op
from tensorweave.core.sbp import B, P, S
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.core.tensor import Tensor

__all__ = ["layer_norm"]

_FLOAT = (_dt.float16, _dt.bfloat16, _dt.float32, _dt.float64)


def _work(dtype):
    return _dt.float32 if dtype in (_dt.float16, _dt.bfloat16) else dtype


def begin_axis(attrs, rank):
    """``begin_norm_axis`` as a non-negative axis of a rank-``rank`` input."""
    b = int(attrs.get("begin_norm_axis", -1))
    return b + rank if b < 0 else b


def _check(op, x, attrs, params, stats):
    """Checks ``x`` (float, rank >= 1, a valid ``begin_norm_axis``), the ``params`` (shaped like
    the normalized axes) and the per-row ``stats`` (``x.shape[:begin]``), all ``[(name, t)]`` of
    x's work dtype; returns ``(normalized shape, row shape)`` (None for an unknown rank)."""
    if x.dtype not in _FLOAT:
        raise TypeError(f"{op} does not support dtype {x.dtype.name} for x; expected one of: "
                        f"{', '.join(d.name for d in _FLOAT)}")
    rank = x.shape.rank
    if rank is None:
        norm = rows = TensorShape(None)
    else:
        begin = begin_axis(attrs, rank)
        if not 0 <= begin < rank:
            raise ValueError(f"{op}: begin_norm_axis={attrs.get('begin_norm_axis')} is out of range for x of shape "
                             f"{fmt(x.shape)}; expected -{rank} <= begin_norm_axis < {rank}")
        dims = x.shape.as_list()
        norm, rows = TensorShape(dims[begin:]), TensorShape(dims[:begin])
    for group, want, what in ((params, norm, "the normalized axes"), (stats, rows, "the rows (x's leading axes)")):
        for name, v in group:
            if v.dtype is not _work(x.dtype):
                raise TypeError(f"{op}: {name} must be {_work(x.dtype).name} for x of dtype {x.dtype.name}, got "
                                f"{v.dtype.name}")
            if not v.shape.is_compatible_with(want):
                raise ValueError(f"{op}: {name} must be shaped like {what} {fmt(want)}, got {fmt(v.shape)}; x shape "
                                 f"{fmt(x.shape)}, begin_norm_axis={attrs.get('begin_norm_axis', -1)}")
    return norm, rows


def _infer(inputs, attrs):
    x, gamma, beta = inputs
    _, rows = _check("LayerNorm", x, attrs, [("gamma", gamma), ("beta", beta)], [])
    stat = (rows, _work(x.dtype))
    return [(x.shape, x.dtype), stat, stat]


def _infer_grad(inputs, attrs):
    dy, x, gamma = inputs[:3]
    names = ("mean", "inv", "mean_grad", "inv_grad")
    norm, _ = _check("LayerNormGrad", x, attrs, [("gamma", gamma)], list(zip(names, inputs[3:])))
    if dy.dtype is not x.dtype or not dy.shape.is_compatible_with(x.shape):
        raise ValueError(f"LayerNormGrad: dy must have x's shape and dtype, got {fmt(dy.shape)} {dy.dtype.name} for "
                         f"x {fmt(x.shape)} {x.dtype.name}")
    param = (norm, _work(x.dtype))
    return [(x.shape, x.dtype), param, param]


def _grad(op, gy, gmean, ginv):
    x, gamma, _ = op.inputs
    _, mean, inv = op.outputs
    dx, dgamma, dbeta = execute(get_op("LayerNormGrad"), [gy, x, gamma, mean, inv, gmean, ginv], op.attrs)
    return [dx, dgamma, dbeta]


def _grad_grad(op, u, p, q):
    """The gradient of ``LayerNormGrad`` from ordinary ops. Per row (``N`` values, ``r = inv``,
    ``xh = (x - mean) r`` (``x r`` with ``rms``: what ``y`` scales), ``z = (x - mean) r``,
    ``gy = dy gamma``) the op computes ``dx = r (gy - A' - z B')`` with
    ``A' = mean(gy) - mean_grad / (N r)`` (no ``mean(gy)`` with ``rms``) and
    ``B' = mean(gy xh) + inv_grad r / N``, ``dgamma = sum dy xh`` and ``dbeta = sum dy`` over the
    rows; this is the chain rule back through those lines for the cotangents ``u`` (of dx), ``p``
    (dgamma), ``q`` (dbeta). Without ``rms``, ``xh`` and ``z`` are one value."""
    from tensorweave.ops import array_ops as A
    from tensorweave.ops import math_ops as m
    from tensorweave.ops.reduce_ops import reduce_sum
    dy, x, gamma, mean, inv, gm, gi = op.inputs
    rms = bool(op.attrs.get("rms", False))
    low = x.dtype is not _work(x.dtype)
    if low:
        dy, x, u = (m.cast(t, _work(x.dtype)) for t in (dy, x, u))
    rank = x.shape.rank
    begin = begin_axis(op.attrs, rank)
    axes = list(range(begin, rank))
    lead = list(range(begin))

    def row(v):     # a per-row value broadcast against x
        for _ in range(rank - begin):
            v = A.expand_dims(v, -1)
        return v

    def total(t):   # per-row sum
        return reduce_sum(t, axis=axes)
    n = m.cast(A.size(x), x.dtype) / m.cast(A.size(mean), x.dtype)
    r = row(inv)
    xc = x - row(mean)
    xs = x if rms else xc                     # what xh scales
    z = xc * r
    xh = xs * r
    gy = dy * gamma
    a = (0.0 if rms else total(gy) / n) - gm / (n * inv)
    b = total(gy * xh) / n + gi * inv / n
    d_a = -inv * total(u)                     # dL/dA'
    d_b = -inv * total(u * z)                 # dL/dB'
    d_gy = u * r + row(d_b / n) * xh + (0.0 if rms else row(d_a / n))
    d_xh = row(d_b / n) * gy + p * dy         # through B' and dgamma
    d_z = -u * r * row(b)                     # through dx
    d_inv = (total(u * (gy - row(a) - z * row(b))) + total(d_xh * xs) + total(d_z * xc) + d_b * gi / n
             + d_a * gm / (n * inv * inv))
    d_dy = d_gy * gamma + p * xh + q
    d_gamma = reduce_sum(d_gy * dy, axis=lead)
    d_x = (d_xh + d_z) * r
    d_mean = -(total(d_z) if rms else total(d_xh + d_z)) * inv
    d_gm = -d_a / (n * inv)
    d_gi = d_b * inv / n
    if low:
        d_dy, d_x = m.cast(d_dy, op.inputs[0].dtype), m.cast(d_x, op.inputs[0].dtype)
    return [d_dy, d_x, d_gamma, d_mean, d_inv, d_gm, d_gi]


# SBP: rows are independent, so a split of any leading (row) axis runs each rank's rows, with
# gamma/beta whole (B); the gradient's dgamma/dbeta are then partial sums (P). A split of a
# normalized axis has no rule (the row's mean and variance need the whole row, and are not
# linear in its pieces): it is boxed to B.
def _rows_split(inputs, attrs):
    rank = inputs[0].rank
    for i in range(begin_axis(attrs, rank)):
        yield [S(i), B, B], [S(i), S(i), S(i)]


def _rows_split_grad(inputs, attrs):
    rank = inputs[1].rank
    for i in range(begin_axis(attrs, rank)):
        yield [S(i), S(i), B, S(i), S(i), S(i), S(i)], [S(i), P, P]


register_op("LayerNorm", infer=_infer, num_outputs=3, heavy=True, grad=_grad,
            sbp=sbp_rules.signatures(_rows_split, 3))
register_op("LayerNormGrad", infer=_infer_grad, num_outputs=3, heavy=True, grad=_grad_grad,
            sbp=sbp_rules.signatures(_rows_split_grad, 3))


def layer_norm(x, gamma, beta, epsilon=0.001, begin_norm_axis=-1, rms=False, name=None):
    """``(y, mean, inv)``: each row of ``x`` normalized over the axes from ``begin_norm_axis`` on,
    scaled by ``gamma`` and shifted by ``beta`` (both shaped like those axes); ``rms``: Keras 3's
    ``rms_scaling`` (``x``, not centred, times ``inv``). See the module docstring.

    >>> import tensorweave as tw
    >>> y, mean, inv = layer_norm(tw.constant([[1.0, 3.0]]), [1.0, 1.0], [0.0, 0.0], epsilon=0.0, rms=True)
    >>> y.numpy().tolist(), mean.numpy().tolist(), inv.numpy().tolist()
    ([[1.0, 3.0]], [2.0], [1.0])
    """
    x = x if isinstance(x, Tensor) else convert_to_tensor(x)
    wd = _work(x.dtype) if x.dtype in _FLOAT else _dt.float32
    gamma, beta = (v if isinstance(v, Tensor) else convert_to_tensor(v, dtype=wd) for v in (gamma, beta))
    attrs = {"epsilon": float(epsilon), "begin_norm_axis": int(begin_norm_axis), "rms": bool(rms)}
    return execute(get_op("LayerNorm"), [x, gamma, beta], attrs, name)
