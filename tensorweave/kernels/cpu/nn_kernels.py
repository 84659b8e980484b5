"""CPU kernels for ``ops/nn_ops.py``: softmax and cross-entropies, bias_add, the ReLU gradient.
Convolution kernels live in ``conv_kernels.py``, pooling in ``pool_kernels.py``.

Half-precision inputs are computed in float32 and rounded once at the end (as TensorFlow
accumulates). Kernels raise ``ValueError``/``TypeError`` on inputs the op's shape rule
rejects; the dispatcher then asks that rule for the explanatory message, so checks here stay
terse.
"""
import numpy as np

from tensorweave.core import errors
from tensorweave.core.registry import register_kernel as k
from tensorweave.kernels.cpu import nn_loops, softmax_loops, split_passes
from tensorweave.kernels.cpu.nn_util import channels_first as _channels_first
from tensorweave.kernels.cpu.nn_util import floats as _floats
from tensorweave.kernels.cpu.nn_util import work as _work
from tensorweave.kernels.cpu.util import quiet
from tensorweave.kernels.cpu.tiles import over_tiles


# ---- softmax and cross-entropies ----------------------------------------------------------------
def _log_softmax_np(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, np.zeros((), x.dtype))  # all -inf slices: no shift
    shifted = x - m
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _softmax_np(x, axis, out=None):
    """Into ``out`` when given (else a new array): one buffer, exp taken in place (a second
    4 MB array a call for attention's [16, 4, 128, 128] scores cost its page faults).

    The shift is ``np.fmax``'s row maximum, not ``np.max``'s: on short rows (attention's 64
    keys) NumPy's NaN-propagating ``max`` reduction was half the kernel's time (4096 x 64
    float32: 0.60 ms of 1.3, ``fmax`` 0.33, one thread, issue 18 core19). Same bits: a maximum
    is exact, the shift only moves exponents' arguments (a -0.0 or +0.0 shift gives the same
    differences but for x = -0.0, whose exp is 1 either way), and a row with a NaN is NaN
    throughout either way (its sum is NaN)."""
    m = np.fmax.reduce(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, np.zeros((), x.dtype))
    e = np.subtract(x, m, out=out)
    np.exp(e, out=e)
    e /= np.sum(e, axis=axis, keepdims=True)
    return e


#: a last-axis softmax of at least this many bytes runs in blocks of rows on the intra-op
#: threads (each row's operations are those of the whole: the same bits); TILE_BYTES a block
SOFTMAX_SPLIT_BYTES, SOFTMAX_TILE_BYTES = 1 << 20, 1 << 19


@k("Softmax")
@quiet
def _softmax(x, axis):
    """Last-axis rows of a C-contiguous input by ``softmax_loops`` (one pass for the shift, NumPy's
    exp, one for the sum and division: ``_softmax_np``'s bits), in tiles of rows on the intra-op
    threads from ``SOFTMAX_SPLIT_BYTES`` where a pass that large is split (``split_passes.parts_for``,
    measured per machine); other axes by ``_softmax_np``."""
    dt = _floats(x)
    if x.size == 0:
        return x.copy()
    xw = _work(x)
    if axis % x.ndim != x.ndim - 1 or not xw.flags.c_contiguous:
        return _softmax_np(xw, axis).astype(dt, copy=False)
    c = xw.shape[-1]
    rows, out = xw.reshape(-1, c), np.empty(xw.shape, xw.dtype)
    flat = out.reshape(-1, c)
    if xw.nbytes < SOFTMAX_SPLIT_BYTES or split_passes.parts_for(xw.nbytes, rows.shape[0]) < 2:
        softmax_loops.softmax_rows(rows, flat)
        return out.astype(dt, copy=False)

    def block(r0, r1, _scratch):
        with np.errstate(all="ignore"):     # (per thread: the helpers' too; nan rows as TF's)
            softmax_loops.softmax_rows(rows[r0:r1], flat[r0:r1])
    over_tiles(rows.shape[0], c * xw.itemsize, SOFTMAX_TILE_BYTES, block)
    return out.astype(dt, copy=False)


@k("LogSoftmax")
@quiet
def _log_softmax(x, axis):
    dt = _floats(x)
    if x.size == 0:
        return x.copy()
    return _log_softmax_np(_work(x), axis).astype(dt, copy=False)


@k("SoftmaxCrossEntropyWithLogits")
@quiet
def _softmax_xent(logits, labels, axis):
    dt = _floats(logits, labels)
    if logits.shape != labels.shape:
        raise ValueError("logits and labels must have the same shape")
    if logits.size == 0:
        axis %= logits.ndim
        return np.zeros(logits.shape[:axis] + logits.shape[axis + 1:], dt)
    logp = _log_softmax_np(_work(logits), axis)
    lab = _work(labels)
    # 0 * log(0): a class masked with a -inf logit and label 0 adds nothing (not nan).
    terms = np.where(lab == 0, np.zeros((), lab.dtype), lab * logp)
    return (0 - np.sum(terms, axis=axis)).astype(dt, copy=False)


def _check_labels(labels, n):
    if labels.dtype.kind not in "iu":
        raise TypeError("labels must be integers")
    if labels.size and (labels.min() < 0 or labels.max() >= n):
        bad = labels[(labels < 0) | (labels >= n)].ravel()[0]
        raise errors.InvalidArgumentError(
            f"Received a label value of {bad} which is outside the valid range of [0, {n}). "
            f"Label values: {' '.join(map(str, labels.ravel()[:20]))}{' ...' if labels.size > 20 else ''}")


def _sparse_xent_rows(logits, labels, with_grad):
    """The sparse cross-entropy's ``(loss, gradient or None)`` (the gradient: softmax minus
    one-hot): two compiled row passes (``nn_loops.shift_rows``, ``nn_loops.xent_from_exps``)
    around NumPy's ``exp``. The loss's bits do not depend on ``with_grad``."""
    dt = _floats(logits)
    if logits.ndim != labels.ndim + 1 or logits.shape[:-1] != labels.shape:
        raise ValueError("labels must have the shape of logits without the last dimension")
    if labels.dtype.kind not in "iu" or not logits.size:
        _check_labels(labels, logits.shape[-1])  # raises on float labels, or on any label for C = 0
        return np.zeros(labels.shape, dt), (np.zeros(logits.shape, dt) if with_grad else None)
    x = np.ascontiguousarray(_work(logits)).reshape(-1, logits.shape[-1])
    flat_labels = np.ascontiguousarray(labels).reshape(-1)
    e, picked, loss = np.empty_like(x), np.empty(x.shape[0], x.dtype), np.empty(x.shape[0], x.dtype)
    if nn_loops.shift_rows(x, flat_labels, e, picked) >= 0:
        _check_labels(labels, x.shape[1])
    np.exp(e, out=e)
    nn_loops.xent_from_exps(e, flat_labels, picked, loss, with_grad)
    return (loss.reshape(labels.shape).astype(dt, copy=False),
            e.reshape(logits.shape).astype(dt, copy=False) if with_grad else None)


@k("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_xent(logits, labels):
    return _sparse_xent_rows(logits, labels, False)[0]


@k("SparseSoftmaxCrossEntropyGrad")
def _sparse_xent_grad(logits, labels):
    return _sparse_xent_rows(logits, labels, True)[1]


def sparse_xent_with_grad(logits, labels):
    """``(loss, gradient)`` in one pass: the kernel of the remapping pass's
    ``FusedSparseSoftmaxCrossEntropy`` (the loss and its gradient of one training step)."""
    return _sparse_xent_rows(logits, labels, True)


# ---- bias_add -----------------------------------------------------------------------------------
_COMPILED = (np.dtype(np.float32), np.dtype(np.float64))  # dtypes with a compiled path


def _bias_axis(ndim, data_format):
    return 1 if _channels_first(data_format) and ndim >= 2 else ndim - 1


@k("BiasAdd")
def _bias_add(value, bias, data_format):
    if value.dtype != bias.dtype or value.dtype == np.bool_:
        raise TypeError("value and bias must have the same dtype")
    if value.ndim < 2 or bias.ndim != 1:
        raise ValueError("bias_add needs value of rank >= 2 and a 1-D bias")
    axis = _bias_axis(value.ndim, data_format)
    if value.shape[axis] != bias.shape[0]:
        raise ValueError("bias size must equal the channel dimension")
    if value.dtype in _COMPILED and value.flags.c_contiguous and value.size:
        c = bias.shape[0]
        rows = value.size // c if axis == value.ndim - 1 else value.shape[0]
        out = np.empty_like(value)
        v3, b, o3 = value.reshape(rows, c, -1), np.ascontiguousarray(bias), out.reshape(rows, c, -1)
        parts = split_passes.parts_for(value.nbytes, rows)
        if parts < 2:
            nn_loops.bias_add(v3, b, o3)
        else:      # (large: rows split over the intra-op threads, same bits: split_passes.py)
            split_passes.over_rows(rows, parts, lambda r0, r1: nn_loops.bias_add(v3[r0:r1], b, o3[r0:r1]))
        return out
    shape = [1] * value.ndim
    shape[axis] = bias.shape[0]
    return np.add(value, bias.reshape(shape))


#: Rows per partial sum of :func:`column_sums`: fixed, so the order of the additions — and
#: the bits of the result — do not depend on how many threads share the chunks.
SUM_ROWS = 4096


def column_sums(g2, features=None, in_place=False):
    """Column sums of ``g2[M, C]`` (float32/float64, C-contiguous) in float64, rounded once:
    partial sums over chunks of :data:`SUM_ROWS` rows (compiled, row by row) on the intra-op
    threads, added in chunk order. With ``features``: first ``g2`` masked where
    ``features <= 0`` (ReluGrad), returning ``(masked, sums)`` — the same bits as ReluGrad then
    BiasAddGrad; ``in_place``: the mask written over ``g2`` itself (``nn_loops.relu_mask_column_sums``),
    not into a new array."""
    m, c = g2.shape
    masked = None if features is None else g2 if in_place else np.empty_like(g2)
    parts = {}

    def run(r0, r1, _scratch):
        acc = np.zeros(c)
        if masked is None:
            nn_loops.column_sums(g2[r0:r1], acc)
        elif masked is g2:
            nn_loops.relu_mask_column_sums(g2[r0:r1], features[r0:r1], acc)
        else:
            nn_loops.relu_grad_column_sums(g2[r0:r1], features[r0:r1], masked[r0:r1], acc)
        parts[r0] = acc
    if m <= SUM_ROWS:   # one chunk (a Dense layer's batch): no tiles, ~5 µs less per call
        run(0, m, None)
        total = parts[0]
    else:
        over_tiles(m, 1, SUM_ROWS, run)
        total = np.zeros(c)
        for r0 in sorted(parts):
            total += parts[r0]
    total = total.astype(g2.dtype)
    return total if masked is None else (masked, total)


@k("BiasAddGrad")
def _bias_add_grad(g, data_format):
    axis = _bias_axis(g.ndim, data_format)
    if g.dtype in _COMPILED and axis == g.ndim - 1 and g.flags.c_contiguous and g.shape[-1]:
        # Channels last: compiled row-by-row sums (NumPy's sum over the leading axes runs its
        # reduction machinery row by row, ~2.5x slower), the same as the fused ReluGrad +
        # BiasAddGrad of the graph passes, so both give the same bits.
        return column_sums(g.reshape(-1, g.shape[-1]))
    axes = tuple(i for i in range(g.ndim) if i != axis)
    return np.sum(_work(g), axis=axes).astype(g.dtype, copy=False)


# ---- ReLU gradient ------------------------------------------------------------------------------

@k("ReluGrad")
def _relu_grad(gradients, features):
    """``gradients`` where ``features > 0``, else 0 (a select, so an inf gradient at a dead unit
    gives 0, not nan). float32/float64 inputs with contiguous features take one compiled pass
    with no temporaries; anything else takes ``np.where``.

    Gradients laid out otherwise (the global average pool's gradient reaches the last ReLU as a
    broadcast view, zero strides over the positions) are first copied (``np.copyto``: 0.05 ms)
    into a contiguous temporary: ``np.where`` on that view took 1.9 ms for the ResNet's
    64x8x8x64, the compiled pass 0.17 ms (Intel Xeon, BENCHMARKS.md issue 18 session 15, net19).
    Not in place: with its output aliasing its input the pass is not vectorized, and its select
    branches (1.7 ms on random signs); nor ``np.array(view)`` (0.57 ms on a broadcast view).
    A large pass is split by rows over the intra-op threads (``split_passes.parts_for``; the
    ResNet's [64, 32, 32, 16] gradient ran on the calling thread alone: issue 18 session 19).
    The error-state context (silencing a NaN comparison's warning) around ``np.where`` only: the
    compiled pass raises none, and the context was ~2 µs of Python a call on a rank thread
    (issue 13 dp23)."""
    if gradients.dtype != features.dtype or gradients.shape != features.shape:
        what = "dtype" if gradients.dtype != features.dtype else "shape"
        raise (TypeError if what == "dtype" else ValueError)(
            f"ReluGrad: gradients {gradients.dtype}{list(gradients.shape)} and features "
            f"{features.dtype}{list(features.shape)} must have the same {what} (the ReLU's output gradient and input)")
    if gradients.dtype in _COMPILED and features.flags.c_contiguous:
        if not gradients.flags.c_contiguous:
            contiguous = np.empty(gradients.shape, gradients.dtype)
            np.copyto(contiguous, gradients)
            gradients = contiguous
        out = np.empty_like(gradients)
        split_passes.flat_by_rows(nn_loops.relu_grad, [a.reshape(-1) for a in (gradients, features, out)],
                                  gradients.shape, out.nbytes)
        return out
    with np.errstate(all="ignore"):
        return np.where(features > 0, gradients, np.zeros((), gradients.dtype))
