"""Pruning: drops nodes whose outputs nobody needs any more.

``build_plan`` already runs only the ops the fetches and targets depend on; after the other
passes rewrite edges (a folded constant, a merged duplicate, a removed ``x * 1``, a transpose
folded into a MatMul) the nodes that fed the old edges can become dead. A node is kept when
it is stateful, pinned (a target, a control input, or has control inputs), or one of its
outputs is fetched or read by a kept node. Safe because a removed node is pure and its
values are read by no one. One reverse sweep, linear in the edges.
"""


def run(work):
    live_t = set(work.fetch_ids)
    keep = []
    ctl_live = set()
    for op in reversed(work.ops):
        if (op.opdef.stateful or id(op) in work.pinned or id(op) in ctl_live
                or any(id(t) in live_t for t in op.outputs)):
            keep.append(op)
            live_t.update(id(t) for t in op.inputs)
            ctl_live.update(id(c) for c in op.control_inputs if c is not None)
    removed = len(work.ops) - len(keep)
    if removed:
        keep.reverse()
        work.ops = keep
        work.refresh()
    return removed
