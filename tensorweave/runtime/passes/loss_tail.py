"""The scalar tail of a training step's cross-entropy, taken into its fused node (issue 18, mlp22).

A Keras loss with the default reduction (``sum_over_batch_size``) leaves, after the remapping
pass's ``FusedSparseSoftmaxCrossEntropy`` (per-sample losses and their gradient), three small
nodes: ``Sum`` of the losses, ``DivNoNan`` of that by the batch size (a constant), and the
gradient's ``Mul`` by the constant ``1 / batch`` column the mean's gradient makes. Each costs
a few µs alone but 30-90 µs of the calling thread in the step (the products before them leave
the interpreter's and NumPy's code out of cache), ~0.19 ms a step of the mlp at load 6. Here
they become attributes of the fused node (``mean``: the ``Sum`` and ``DivNoNan``; ``scaled``: the
``Mul``), their constants extra inputs; the kernel (``fused_kernels.sparse_xent_tail``) calls
the same stock kernels on the same values, so the bits are the unfused plan's.

Either part is taken alone where only it matches: the ``Sum`` over all axes (``axis=None``,
no ``keepdims``) read by a ``DivNoNan`` alone, whose divisor is a constant scalar of the loss's
dtype, finite and at least 1 in size (a batch size: the division then cannot hit ``DivNoNan``'s
zero branch or raise a floating-point warning, so the kernel divides without either); the ``Mul`` of the gradient (read by it alone) by a constant of the gradient's dtype whose
broadcast leaves the gradient's shape. No intermediate fed or fetched, no ordering edges, stock
kernels, one device. ``TW_REMAP_LOSS_TAIL=0`` switches it off (for comparisons).

>>> from tensorweave.runtime.passes import loss_tail
>>> loss_tail.ENABLED in (True, False)
True
"""
import os

import numpy as np

from tensorweave.runtime.passes.ir import const_value, runs_stock_kernel, static_dims

#: read when a plan is built; ``TW_REMAP_LOSS_TAIL=0``: the cross-entropy node keeps its two outputs as before
ENABLED = os.environ.get("TW_REMAP_LOSS_TAIL", "1") != "0"


def _sole_reader(t, work):
    """The one live op reading ``t`` (once), when ``t`` is neither fed nor fetched; else None.
    Dead readers (the gradient's ``Shape`` of the losses, folded to a constant before this pass
    and pruned after it) do not count."""
    readers = [op for op in work.consumers.get(id(t), []) if not _dead(op, work)]
    return readers[0] if len(readers) == 1 and not work.protected(t) else None


def _dead(op, work):
    """Nothing reads ``op``'s outputs and nothing orders on it: the pruning pass drops it."""
    return not work.frozen(op) and all(work.n_uses(o) == 0 for o in op.outputs)


def _constant(t, like, work):
    """The value of ``t`` when it is a constant the fused node at ``like``'s place can read: made
    before it, or movable there (no ordering edges); else None."""
    c = const_value(t, work)
    op = t.op
    if c is None or (work.ops.index(op) > work.ops.index(like) and (id(op) in work.pinned or op.control_inputs)):
        return None
    return c


def _plain(op, like, work):
    """An op the tail may absorb: no ordering edges, not pinned, one output not fed, ``like``'s device."""
    return (id(op) not in work.pinned and not op.control_inputs and len(op.outputs) == 1
            and id(op.outputs[0]) not in work.feed_ids and op.device == like.device)


def _mean(loss_out, like, work):
    """``(Sum, DivNoNan, divisor tensor)`` of the mean of ``loss_out``, or None."""
    s = _sole_reader(loss_out, work)
    if s is None or not runs_stock_kernel(s, "Sum") or not _plain(s, like, work) \
            or s.attrs.get("axis") is not None or s.attrs.get("keepdims"):
        return None
    div = _sole_reader(s.outputs[0], work)
    if div is None or not runs_stock_kernel(div, "DivNoNan") or not _plain(div, like, work) \
            or div.inputs[0] is not s.outputs[0]:
        return None
    d = _constant(div.inputs[1], like, work)
    if d is None or np.ndim(d) != 0 or np.asarray(d).dtype != loss_out.dtype.np_dtype \
            or div.outputs[0].dtype is not loss_out.dtype or not (np.isfinite(d) and abs(d) >= 1):
        return None
    return s, div, div.inputs[1]


def _scale(grad_out, like, work):
    """``(Mul, constant tensor, its input position)`` of the gradient's scaling, or None."""
    mul = _sole_reader(grad_out, work)
    if mul is None or not runs_stock_kernel(mul, "Mul") or not _plain(mul, like, work) or len(mul.inputs) != 2:
        return None
    at = 1 if mul.inputs[0] is grad_out else 0
    if mul.inputs[1 - at] is not grad_out or mul.inputs[at] is grad_out:
        return None
    c = _constant(mul.inputs[at], like, work)
    dims = static_dims(grad_out)
    if c is None or dims is None or np.asarray(c).dtype != grad_out.dtype.np_dtype \
            or mul.outputs[0].dtype is not grad_out.dtype:
        return None
    try:
        if np.broadcast_shapes(np.shape(c), dims) != dims:
            return None
    except ValueError:
        return None
    return mul, mul.inputs[at], at


def tail(loss, loss_out, grad_out, work):
    """What the fused cross-entropy node at ``loss``'s place takes over: ``(extra inputs, attrs,
    [loss output, gradient output], absorbed ops)``; the outputs are the tensors whose values the
    node's two outputs now give (the mean instead of the per-sample losses, the scaled gradient)."""
    if not ENABLED:
        return [], {}, [loss_out, grad_out], []
    inputs, attrs, outs, ops = [], {}, [loss_out, grad_out], []
    scale = _scale(grad_out, loss, work)
    if scale is not None:
        mul, c, at = scale
        inputs.append(c)
        attrs.update(scaled=True, scale_first=at == 0)
        outs[1] = mul.outputs[0]
        ops.append(mul)
    mean = _mean(loss_out, loss, work)
    if mean is not None:
        s, div, d = mean
        inputs.append(d)
        attrs["mean"] = True
        outs[0] = div.outputs[0]
        ops += [s, div]
    _before(inputs, loss, work)
    return inputs, attrs, outs, ops


def _before(consts, loss, work):
    """The constants' nodes moved to just before ``loss`` where they come later in the list (a
    constant is made where the code that reads it ran: after the loss), so the fused node at the
    loss's place finds their values; a constant has no inputs, so it may run anywhere earlier."""
    at = work.ops.index(loss)
    moved = set()
    for t in consts:
        op = t.op
        if id(op) not in moved and work.ops.index(op) > at:
            moved.add(id(op))
            work.insert_before(loss, op)
            work.node_rep[id(op)] = None
