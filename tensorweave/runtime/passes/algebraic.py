"""Algebraic simplification: nodes that provably return their input are bypassed.

Rewrites (``y`` is then read as ``x``):

- ``Identity(x)``, ``StopGradient(x)`` (gradients are built on the graph, not the plan);
- ``x * 1``, ``1 * x``, ``x / 1``, ``x + 0``, ``0 + x``, ``x - 0`` where the constant is
  all ones/zeros;
- ``Neg(Neg(x))``; ``Transpose(Transpose(x, p), q)`` when ``q`` undoes ``p``;
- ``Reshape(x, s)``, ``Cast(x, T)``, ``BroadcastTo(x, s)`` when the result has exactly the
  static shape and dtype of ``x``;
- ``Sum``/``Mean``/``Max``/``Min``/``Prod`` whose result has the static shape of ``x`` (a
  scalar, or only size-1 dimensions reduced): each output element is one input element;
- ``SelectV2(c, a, b)`` with ``c`` a constant that is all true (-> ``a``) or all false
  (-> ``b``), as Keras' loss reduction leaves it once the batch size is folded.

Safe because every rewrite requires that ``x`` and ``y`` have the same fully known static
shape and the same dtype (so broadcasting against the constant cannot change the output
shape or type), the node is pure and unpinned, and ``y`` is neither fed nor fetched. The
only value-level difference is the sign of a zero: ``-0.0 + 0.0`` is ``+0.0`` while the
rewrite keeps ``-0.0`` (TensorFlow's arithmetic optimizer does the same); the two compare
equal.
"""
import numpy as np

from tensorweave.runtime.passes.ir import const_value, is_pure, static_dims

_PASS_THROUGH = ("Identity", "StopGradient", "Snapshot")


def _all(v, x):
    a = np.asarray(v)
    return a.size > 0 and a.dtype != object and bool(np.all(a == x))


def _perm(op, rank):
    p = op.attrs.get("perm")
    return tuple(range(rank - 1, -1, -1)) if p is None else tuple(int(i) % rank for i in p)


def _simplify(op, work):
    """The tensor ``op``'s output equals, or None."""
    y = op.outputs[0]
    ins = [work.resolve(t) for t in op.inputs]
    t = op.type
    if t in _PASS_THROUGH:
        return ins[0]
    if t in ("Mul", "AddV2", "Sub", "RealDiv") and len(ins) == 2:
        a, b = ins
        unit = 1 if t in ("Mul", "RealDiv") else 0
        cb = const_value(b, work)
        if cb is not None and _all(cb, unit):
            return a
        if t in ("Mul", "AddV2"):
            ca = const_value(a, work)
            if ca is not None and _all(ca, unit):
                return b
        return None
    if t == "Neg":
        x = ins[0]
        if x.op.type == "Neg" and is_pure(x.op) and id(x) not in work.feed_ids:
            return work.resolve(x.op.inputs[0])
        return None
    if t == "Transpose":
        x = ins[0]
        r = y.shape.rank
        if r is None or x.op.type != "Transpose" or id(x) in work.feed_ids:
            return None
        p, q = _perm(x.op, r), _perm(op, r)
        if tuple(p[i] for i in q) == tuple(range(r)):
            return work.resolve(x.op.inputs[0])
        return None
    if t in ("Reshape", "Cast", "BroadcastTo", "ExpandDims", "Squeeze", "Sum", "Mean", "Max", "Min", "Prod"):
        return ins[0]
    if t == "SelectV2":
        c = const_value(ins[0], work)
        if c is not None and _all(c, True):
            return ins[1]
        if c is not None and _all(c, False):
            return ins[2]
    return None


def run(work):
    n = 0
    for op in work.ops:
        if len(op.outputs) != 1 or work.frozen(op) or not is_pure(op):
            continue
        y = op.outputs[0]
        x = _simplify(op, work)
        if x is None or x is y:
            continue
        dy = static_dims(y)
        if dy is None or static_dims(x) != dy or x.dtype is not y.dtype:
            continue
        if work.replace(y, x):
            n += 1
    return n
