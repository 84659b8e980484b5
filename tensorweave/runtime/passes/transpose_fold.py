"""Transposes folded into BLAS calls: ``MatMul(Transpose(x), b)`` becomes
``MatMul(x, b, transpose_a=True)`` (and likewise for ``b`` / ``transpose_b``).

The MatMul kernel hands NumPy's BLAS a swapped-axes view either way, so the product is
computed from the same numbers in the same order; the Transpose node disappears from the
plan when nothing else reads it (pruning). Only a transpose that swaps the last two axes
and keeps the batch axes qualifies (``perm=None`` on a matrix, or ``(0, .., r-1, r-2)``).
Safe because the MatMul's output shape and values are unchanged, the MatMul is pure, and
fed transposes are left alone (a feed overrides the Transpose's value).
"""
from tensorweave.runtime.passes.algebraic import _perm


def _swaps_last_two(t, work):
    op = t.op
    if op.type != "Transpose" or id(t) in work.feed_ids or id(op) in work.pinned:
        return None
    r = t.shape.rank
    if r is None or r < 2:
        return None
    want = tuple(range(r - 2)) + (r -1, r - 2)
    if _perm(op, r) != want:
        return None
    return work.resolve(op.inputs[0])


def run(work):
    n = 0
    for op in work.ops:
        if op.type != "MatMul" or id(op) in work.pinned or len(op.inputs) != 2:
            continue
        a, b = (work.resolve(t) for t in op.inputs)
        attrs = dict(op.attrs)
        changed = False
        for i, key in ((0, "transpose_a"), (1, "transpose_b")):
            t = (a, b)[i]
            src = _swaps_last_two(t, work)
            if src is None or key not in attrs:
                continue
            if i == 0:
                a = src
            else:
                b = src
            attrs[key] = not attrs[key]
            changed = True
        if changed:
            from tensorweave.runtime.passes.ir import clone
            work.node_rep[id(op)] = clone(op, inputs=(a, b), attrs=attrs)
            n += 1
    return n
