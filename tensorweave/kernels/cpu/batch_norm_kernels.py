"""CPU kernels of the fused batch-norm training ops (``ops/batch_norm_ops.py``).

Forward: one pass for the batch's mean and variance (float64 sums of ``x - shift`` per chunk
of rows, the chunks on the intra-op threads), one pass for ``y = x * a + b`` (``a = scale /
sqrt(var + eps)``, ``b = offset - mean * a``). Backward: one pass for the two sums
(``sum dy``, ``sum dy * (x - mean)``), one for ``dx``. The unfused graph made ~9 passes over
the activations each way.

With the ReLU after it (``FusedBatchNormTrainingRelu``, ``FusedReluGradBatchNormTrainingGrad``:
``runtime/passes/remapping.py``) the forward's second pass writes ``max(y, 0)`` and the backward's
two passes read ``ReluGrad``'s select on the fly: two passes fewer over the activations per
block, and the ReLU's work split over the cores with the batch norm's (``Relu``/``ReluGrad``
ran on one thread). The same operations in the same order: the unfused plan's bits.
With a residual add between them (``FusedBatchNormTrainingAddRelu``, ``runtime/passes/bn_add_relu.py``)
the forward's second pass also reads the shortcut: ``max((x * a + b) + side, 0)``, the add's and the
ReLU's passes gone.

Channels-first inputs are moved to channels last (a copy) and back; float16/bfloat16 are
computed in float32 and rounded once. Partial sums are added in chunk order, so the bits do
not depend on the thread count.
"""
import numpy as np

from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu import batch_norm_loops as loops
from tensorweave.kernels.cpu.nn_kernels import SUM_ROWS
from tensorweave.kernels.cpu.nn_util import channels_first, floats, work
from tensorweave.kernels.cpu.tiles import over_tiles
from tensorweave.kernels.cpu.util import quiet
from tensorweave.ops import fused_norm_ops  # noqa: F401 - the fused ops, registered with tensorweave

#: rows per tile of the two elementwise passes (their bits do not depend on the tiling): 8 tiles
#: for the ResNet's 64x32x32 positions, so a helper thread starting late still takes its half
#: (with 16384 rows, 4 tiles, the calling thread did ~75 % of the passes' CPU time)
PASS_ROWS = 8192


def _rows(x, cf):
    """``x`` in its work dtype as C-contiguous ``[M, C]`` rows (channels last)."""
    xw = work(x)
    if cf:
        xw = np.moveaxis(xw, 1, -1)
    c = xw.shape[-1]
    return np.ascontiguousarray(xw).reshape(xw.size // c if c else 0, c)


def _unrows(y2, x, cf):
    """``[M, C]`` rows back to ``x``'s layout and dtype."""
    if cf:
        moved = x.shape[:1] + x.shape[2:] + x.shape[1:2]
        return np.ascontiguousarray(np.moveaxis(y2.reshape(moved), -1, 1)).astype(x.dtype, copy=False)
    return y2.reshape(x.shape).astype(x.dtype, copy=False)


def _sums(loop, rows, vectors):
    """Per-channel float64 ``(s1, s2)`` of ``loop(*rows, *vectors, s1, s2)`` over chunks of
    :data:`SUM_ROWS` rows of the ``[M, C]`` arrays ``rows``, added in chunk order."""
    m, c = rows[0].shape
    parts = {}

    def run(r0, r1, _scratch):
        s1, s2 = np.zeros(c), np.zeros(c)
        loop(*(a[r0:r1] for a in rows), *vectors, s1, s2)
        parts[r0] = (s1, s2)
    over_tiles(m, 1, SUM_ROWS, run, blas=False)      # (compiled loops: no BLAS in the tiles)
    s1, s2 = np.zeros(c), np.zeros(c)
    for r0 in sorted(parts):
        s1 += parts[r0][0]
        s2 += parts[r0][1]
    return s1, s2


def _elementwise(loop, out, rows, vectors):
    """``loop(*rows, *vectors, out)`` over tiles of :data:`PASS_ROWS` rows."""
    over_tiles(out.shape[0], 1, PASS_ROWS,
               lambda r0, r1, _s: loop(*(a[r0:r1] for a in rows), *vectors, out[r0:r1]), blas=False)


def _check(x, scale, what):
    floats(x)
    if x.ndim < 2:
        raise ValueError("x must have rank >= 2")
    for v in scale:
        if v.ndim != 1:
            raise ValueError(f"{what} must be 1-D")


def _inverse_std(variance, epsilon):
    return 1.0 / np.sqrt(variance + np.float64(epsilon))


@k("BatchNormTraining")
@quiet
def _batch_norm_training(x, scale, offset, epsilon, data_format, relu=False, side=None):
    """``(y, mean, variance)``; with ``relu``: ``(max(y, 0), mean, variance)``; with ``side``
    (and ``relu``): ``(max(y + side, 0), mean, variance)``."""
    _check(x, (scale, offset), "scale and offset")
    if side is not None and (side.shape != x.shape or side.dtype != x.dtype):
        raise ValueError(f"FusedBatchNormTrainingAddRelu: side {side.dtype}{list(side.shape)} must have "
                         f"x's shape and dtype {x.dtype}{list(x.shape)}")
    cf = channels_first(data_format)
    x2 = _rows(x, cf)
    m, c = x2.shape
    wd = x2.dtype
    if scale.shape[0] != c or offset.shape[0] != c:
        raise ValueError("scale and offset must have one value per channel")
    shift = x2[0].astype(np.float64) if m else np.zeros(c)
    s1, s2 = _sums(loops.moments, [x2], [shift]) if m else (np.zeros(c), np.zeros(c))
    n = np.float64(m)
    d1 = s1 / n
    mean = shift + d1
    var = np.maximum(s2 / n - d1 * d1, 0.0)   # sums of x - shift: no cancellation near the mean
    a = scale.astype(np.float64) * _inverse_std(var, epsilon)
    b = offset.astype(np.float64) - mean * a
    y2 = np.empty_like(x2)
    if m and side is not None:
        _elementwise(loops.scale_shift_add_relu, y2, [x2, _rows(side, cf)], [a.astype(wd), b.astype(wd)])
    elif m:
        _elementwise(loops.scale_shift_relu if relu else loops.scale_shift, y2, [x2], [a.astype(wd), b.astype(wd)])
    return _unrows(y2, x, cf), mean.astype(wd), var.astype(wd)


@k("FusedBatchNormTrainingAddRelu")
def _batch_norm_training_add_relu(x, scale, offset, side, epsilon, data_format):
    """``Relu(AddV2(BatchNormTraining(x)'s y, side))``: ``(relu(y + side), mean, variance)``."""
    return _batch_norm_training(x, scale, offset, epsilon, data_format, relu=True, side=side)


@k("BatchNormTrainingGrad")
@quiet
def _batch_norm_training_grad(dy, x, scale, mean, variance, mean_grad, variance_grad, epsilon, data_format,
                              features=None, select=False):
    """``(dx, dscale, doffset)``; ``mean_grad``/``variance_grad`` (the gradients of the forward's
    statistics outputs) add ``mean_grad / M + 2 * variance_grad * (x - mean) / M`` to ``dx``.
    With ``features``: of ``ReluGrad(dy, features)`` (``dy`` where ``features > 0``, else 0); with
    ``select`` too, that select is a fourth output (written by the sums' pass, read by the second)."""
    _check(x, (scale, mean, variance, mean_grad, variance_grad), "scale, mean, variance and their gradients")
    if dy.shape != x.shape or dy.dtype != x.dtype:
        raise ValueError("dy must have x's shape and dtype")
    if features is not None and (features.shape != x.shape or features.dtype != x.dtype):
        raise ValueError(f"FusedReluGradBatchNormTrainingGrad: features {features.dtype}{list(features.shape)} "
                         f"must have x's shape and dtype {x.dtype}{list(x.shape)}")
    cf = channels_first(data_format)
    x2, dy2 = _rows(x, cf), _rows(dy, cf)
    pre = [] if features is None else [dy2]
    if features is not None:
        dy2 = _rows(features, cf)       # (the loops take the gradient, then the features)
    m, c = x2.shape
    wd = x2.dtype
    mean64 = mean.astype(np.float64)
    if select:
        dz2 = np.empty_like(x2)
        s1, s2 = _sums(loops.grad_sums_relu_select, pre + [dy2, x2, dz2], [mean64]) if m \
            else (np.zeros(c), np.zeros(c))
        pre, dy2 = [], dz2          # (the second pass reads the select it wrote)
    else:
        s1, s2 = _sums(loops.grad_sums_relu if pre else loops.grad_sums, pre + [dy2, x2], [mean64]) if m \
            else (np.zeros(c), np.zeros(c))
    inv = _inverse_std(variance.astype(np.float64), epsilon)
    g = scale.astype(np.float64)
    n = np.float64(max(m, 1))
    a = g * inv
    b = (2.0 * variance_grad.astype(np.float64) - a * inv * inv * s2) / n
    kk = (mean_grad.astype(np.float64) - a * s1) / n
    dx2 = np.empty_like(x2)
    if m:
        _elementwise(loops.input_grad_relu if pre else loops.input_grad, dx2, pre + [dy2, x2],
                     [v.astype(wd) for v in (mean, a, b, kk)])
    out = _unrows(dx2, x, cf), (s2 * inv).astype(wd), s1.astype(wd)
    return out + (_unrows(dz2, x, cf),) if select else out


@k("FusedBatchNormTrainingRelu")
def _batch_norm_training_relu(x, scale, offset, epsilon, data_format):
    """``BatchNormTraining`` then ``Relu`` of its ``y``: ``(relu(y), mean, variance)``."""
    return _batch_norm_training(x, scale, offset, epsilon, data_format, relu=True)


@k("FusedReluGradBatchNormTrainingGrad")
def _relu_grad_batch_norm_training_grad(gradients, features, x, scale, mean, variance, mean_grad, variance_grad,
                                        epsilon, data_format):
    """``BatchNormTrainingGrad(ReluGrad(gradients, features), x, ...)``: ``(dx, dscale, doffset)``."""
    if gradients.shape != features.shape or gradients.dtype != features.dtype:
        raise ValueError(f"FusedReluGradBatchNormTrainingGrad: gradients {gradients.dtype}{list(gradients.shape)} "
                         f"and features {features.dtype}{list(features.shape)} must match")
    return _batch_norm_training_grad(gradients, x, scale, mean, variance, mean_grad, variance_grad, epsilon,
                                     data_format, features)


@k("FusedReluGradBatchNormTrainingGradSelect")
def _relu_grad_batch_norm_training_grad_select(gradients, features, x, scale, mean, variance, mean_grad,
                                               variance_grad, epsilon, data_format):
    """:func:`_relu_grad_batch_norm_training_grad` and the select ``ReluGrad(gradients, features)``
    itself (read elsewhere too: a residual block's shortcut): ``(dx, dscale, doffset, select)``."""
    if gradients.shape != features.shape or gradients.dtype != features.dtype:
        raise ValueError(f"FusedReluGradBatchNormTrainingGradSelect: gradients {gradients.dtype}"
                         f"{list(gradients.shape)} and features {features.dtype}{list(features.shape)} must match")
    return _batch_norm_training_grad(gradients, x, scale, mean, variance, mean_grad, variance_grad, epsilon,
                                     data_format, features, select=True)
