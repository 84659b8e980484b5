"""Decompositions the global interpreter may run instead of an op: ``DECOMPOSITIONS[op_type]``
is a function of the op's inputs (tensors) and attrs (keywords) written with public
tensorweave ops, giving the op's outputs.

An op's SBP rule lists the layouts it can run in without moving data (``core/sbp.py``).
Some layouts need communication inside the op: a mean over a split axis needs the global
count, a softmax over a split class axis needs the global max and sum. Rather than boxing
the input to ``B`` (moving it whole), the interpreter may run the decomposition: its
primitives have rules of their own (a max over the split axis gives ``P(max)``, the sum
``P``), and boxing their small partial results (an all-reduce of one value per row) is
the communication — a stable, partial log-sum-exp over the ranks.

Each decomposition equals its op on one device (``tests/test_sbp_checker.py``), and every
primitive it uses has an SBP rule.

>>> import numpy as np, tensorweave as tw
>>> x = tw.constant(np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 9.0]]))
>>> bool(np.allclose(DECOMPOSITIONS["Softmax"](x, axis=-1).numpy(), tw.nn.softmax(x).numpy()))
True
"""
import threading

import numpy as np

from tensorweave.ops import array_ops, indexing_ops, math_ops
from tensorweave.core.sbp import B as _B
from tensorweave.ops import reduce_ops as R

# The placement a graph planner traces a decomposition for (plan_decompose.py): there the row
# statistics are pinned to B with a ``_ToGlobal`` op, as an eager run boxes them.
_tracing = threading.local()

# The ops the graph planner decomposes (plan_decompose.py) when their class axis is split: the
# class axis is attr ``axis`` (default -1) of input 0.
CLASS_AXIS_OPS = frozenset({"Softmax", "LogSoftmax", "SoftmaxCrossEntropyWithLogits",
                            "SparseSoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyGrad",
                            "SoftmaxGrad"})


def _replicated(t):
    """Row statistics (one value per row: a partial max or sum over a split class axis) boxed to
    ``B`` — an all-reduce of the rows only. Left to choice, a reader like ``z - log(s)`` with
    ``z`` split takes ``log(s)`` split too and pads both to a full-size partial on every rank."""
    if getattr(t, "is_global", False):
        nd = (_B,) * t.placement.ndim
        return t if t.sbp == nd else t.to_global(sbp=nd)
    placement = getattr(_tracing, "placement", None)
    if placement is None:
        return t          # a local value (tests on one device)
    from tensorweave.core.dispatch import execute
    from tensorweave.core.registry import get_op
    return execute(get_op("_ToGlobal"), [t], {"placement_type": placement.type, "ranks": placement.mesh.tolist(),
                                             "sbp": ["B"] * placement.ndim})


def _reduced_count(x, axis):
    dims = x.shape.as_list()
    axes = range(len(dims)) if axis is None else [a % len(dims) for a in np.atleast_1d(axis)]
    return int(np.prod([dims[a] for a in set(axes)], dtype=np.int64))


def _mean(x, *axis_input, axis=None, keepdims=False):
    """The sum over the axes (a split axis gives a partial sum) over their global element count."""
    total = R.reduce_sum(x, axis=axis, keepdims=keepdims)
    n = _reduced_count(x, axis)
    if x.dtype.is_integer:
        return math_ops.truncatediv(total, math_ops.cast(n, x.dtype)) if n else total
    return total / math_ops.cast(n, x.dtype)


def _shifted(logits, axis):
    """logits - max (the max of a split axis is a partial max: one value per row moves)."""
    top = array_ops.stop_gradient(_replicated(R.reduce_max(logits, axis=axis, keepdims=True)))
    return logits - top


def _log_softmax(logits, axis=-1):
    z = _shifted(logits, axis)
    return z - math_ops.log(_replicated(R.reduce_sum(math_ops.exp(z), axis=axis, keepdims=True)))


def _softmax(logits, axis=-1):
    e = math_ops.exp(_shifted(logits, axis))
    return e / _replicated(R.reduce_sum(e, axis=axis, keepdims=True))


def _xent(logits, labels, axis=-1):
    return -R.reduce_sum(math_ops.multiply_no_nan(_log_softmax(logits, axis), labels), axis=axis)


def _one_hot(labels, depth, dtype):
    """``one_hot(labels, depth)`` as ``labels[..., None] == range(depth)``: elementwise, so on a
    split class axis each rank builds its own classes' piece (``OneHot``'s rule splits the
    labels' axes only: every rank would build the whole one-hot and keep a slice). Labels out
    of ``[0, depth)`` give a zero row, as ``one_hot``'s."""
    # a constant, not a Range op (whose rule boxes to B): ranks slice it free
    classes = array_ops.constant(np.arange(depth, dtype=labels.dtype.np_dtype))
    return math_ops.cast(math_ops.equal(array_ops.expand_dims(labels, -1), classes), dtype)


def _sparse_xent(logits, labels):
    # the log-softmax first: a planner then lays the one-hot out beside it (split classes), not rows
    z = _log_softmax(logits, -1)
    picked = _one_hot(labels, logits.shape.as_list()[-1], logits.dtype)
    return -R.reduce_sum(z * picked, axis=-1)


def _sparse_xent_grad(logits, labels):
    """softmax(logits) - one_hot(labels): the sparse cross-entropy's gradient op."""
    depth = logits.shape.as_list()[-1]
    return _softmax(logits, -1) - _one_hot(labels, depth, logits.dtype)


def _softmax_grad(y, g, axis=-1, scale=1.0):
    """``SoftmaxGrad``'s ``scale * y * (g - sum(g * y))`` with only the row sum moved (``B``): on a
    split class axis the fused op's rule would gather the scores whole."""
    out = y * (g - _replicated(R.reduce_sum(g * y, axis=axis, keepdims=True)))
    return out if scale == 1.0 else out * scale


DECOMPOSITIONS = {
    "Mean": _mean,
    "Softmax": _softmax,
    "LogSoftmax": _log_softmax,
    "SoftmaxCrossEntropyWithLogits": _xent,
    "SparseSoftmaxCrossEntropyWithLogits": _sparse_xent,
    "SparseSoftmaxCrossEntropyGrad": _sparse_xent_grad,
    "SoftmaxGrad": _softmax_grad,
}
