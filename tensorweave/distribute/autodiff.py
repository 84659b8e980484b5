"""Gradients through boxing and through the local/global boundary.

Boxing is the identity on logical values, so its gradient is the incoming gradient laid
out again. The layout chosen is the dual of the source's, per mesh axis: the gradient of a
``B`` tensor becomes ``P`` (each rank's contribution, summed when someone needs the value),
``S`` stays ``S``, ``P`` becomes ``B``. That dual costs no communication from the usual
producers (a sliced gradient pads locally to ``P``), and data-parallel training gets its
gradient all-reduce from the ``P -> B`` boxing that its first reader inserts, with no
special code. Ops on global tensors are recorded by the global interpreter like eager ops
(their gradient rules run on global tensors again).

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> w = tw.constant(np.ones((3, 2), np.float32)).to_global(placement=p, sbp=tw.sbp.broadcast)
>>> x = tw.constant(np.ones((4, 3), np.float32)).to_global(placement=p, sbp=tw.sbp.split(0))
>>> with tw.GradientTape() as tape:
...     tape.watch(w)
...     loss = tw.reduce_sum(tw.matmul(x, w))
>>> g = tape.gradient(loss, w)
>>> g.sbp, g.numpy().tolist()
((P,), [[4.0, 4.0], [4.0, 4.0], [4.0, 4.0]])
"""
from tensorweave.core.context import ctx
from tensorweave.core.dispatch import EagerOp, record_custom
from tensorweave.core.registry import get_op
from tensorweave.core.sbp import B, P, Broadcast, Partial

_IDENTITY = get_op("Identity")


def dual_sbp(nd_sbp):
    """The layout a gradient takes for a value laid out as ``nd_sbp``: B -> P, S -> S, P -> B."""
    return tuple(P if isinstance(s, Broadcast) else B if isinstance(s, Partial) else s for s in nd_sbp)


def _boxing_grad(src):
    placement, nd = src.placement, dual_sbp(src.sbp)

    def grad(op, dy):
        if dy is None:
            return [None]
        if not getattr(dy, "is_global", False):
            from tensorweave.distribute.global_tensor import to_global
            out = op.outputs[0]
            dy = to_global(dy, out.placement, (B,) * out.placement.ndim)
        return [dy.to_global(placement=placement, sbp=nd)]
    return grad


def record_boxing(src, out):
    """Records ``out = box(src)`` on active tapes with its gradient."""
    if ctx.tapes:
        record_custom(EagerOp(_IDENTITY, (src,), (out,), {}, grad_fn=_boxing_grad(src)))


def _to_local_grad(op, dy):
    from tensorweave.core.tensor import EagerTensor
    if dy is None:
        return [None]
    return [EagerTensor(dy.numpy(), dy.dtype) if getattr(dy, "is_global", False) else dy]


def record_local_to_global(local, out):
    """Records ``out = to_global(local)``: the local tensor's gradient is the logical value of
    the global one."""
    if ctx.tapes:
        record_custom(EagerOp(_IDENTITY, (local,), (out,), {}, grad_fn=_to_local_grad))
