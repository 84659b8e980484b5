"""The ops a planned graph adds: what a rank's plan spec holds besides the program's own ops.

* ``_ToGlobal`` — in a traced graph, ``x.to_global(placement=, sbp=)`` of a symbolic tensor: the
  identity on the logical value whose output layout the user pinned (attrs ``placement_type``,
  ``ranks`` (the mesh as nested lists) and ``sbp`` (printed forms)). The planner turns it into
  a ``_Boxing`` node or nothing; its gradient is the identity (the planner lays it out).
* ``_Boxing`` — one rank's part of a boxing plan: attrs ``plan`` (``BoxingPlan.to_dict()``),
  ``rank`` (this rank's id) and ``comm`` (a reference to the rank's communicator resource).
  Its kernel is made once per bound plan (the plan parsed once), then each run boxes a piece.
* ``_Once`` — op ``op_type`` with ``op_attrs`` run on the group's first rank only, its outputs
  broadcast to the others (attrs ``ranks``, ``rank``, ``comm``; ``broadcast`` False when no
  node reads them: no collective then): a stateful op whose outputs are ``B`` (a local
  variable's update, a print) runs once, as on one device.

* ``_AllReduceStart`` / ``_AllReduceWait`` — a bucket of partial-sum tensors all-reduced
  (``P -> B``) in two halves: the start (attrs ``ranks``, ``comm``, ``op``) hands the bucket to
  ``Communicator.all_reduce_start`` as soon as its inputs are computed and outputs a handle;
  the wait (attr ``n``) sits where the boxings were, before the first reader, and outputs the
  ``n`` sums (read-only arrays). ``rank_graph.bucket_all_reduces`` makes them from ``_Boxing``
  nodes.

A rank's communicator is a resource of kind ``"communicator"`` named ``"world"`` on its
runtime: an object ``comm_for(rank_ids) -> Communicator`` (the rank's end of the group of those
ranks). In-process ranks register one per rank (``ranks.Rank``); a Ray worker registers its
own, so the same spec runs on either.

>>> import numpy as np
>>> from tensorweave.core.sbp import S, B
>>> from tensorweave.distribute.boxing import plan_boxing
>>> from tensorweave.distribute.layout import Placement
>>> from tensorweave.distribute.ranks import default_world
>>> plan = plan_boxing((4,), "float32", Placement("cpu", [0, 1]), (S(0),), (B,)).to_dict()
>>> world = default_world()
>>> def on_rank(i):
...     comm = world.rank(i).runtime.resource("communicator", "world")
...     step = _boxing_kernel(plan=plan, rank=i, comm=comm)
...     return step(np.arange(2.0, dtype=np.float32) + 2 * i).tolist()
>>> world.run([0, 1], on_rank)
[[0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]]
"""
import numpy as np

from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_kernel, register_op
from tensorweave.core.sbp import BOXES_TO_B
from tensorweave.core.shape import TensorShape


def _boxing_infer(inputs, attrs):
    from tensorweave.core import dtypes as _dt
    return TensorShape(attrs["plan"]["shape"]), _dt.as_dtype(attrs["plan"]["dtype"])


# No SBP rules: the planner lays out _ToGlobal itself (its pin) and makes _Boxing and _Once on pieces.
register_op("_ToGlobal", infer=lambda i, a: (i[0].shape, i[0].dtype), grad=lambda op, g: [g], sbp=BOXES_TO_B)
register_op("_Boxing", infer=_boxing_infer, grad=NOT_DIFFERENTIABLE, sbp=BOXES_TO_B)
register_op("_Once", infer=lambda i, a: get_op(a["op_type"]).infer(i, a["op_attrs"]), grad=NOT_DIFFERENTIABLE,
            stateful=True, num_outputs=lambda a: get_op(a["op_type"]).n_outputs(a["op_attrs"]), sbp=BOXES_TO_B)


register_op("_AllReduceStart", infer=lambda i, a: (TensorShape([]), _variant()), grad=NOT_DIFFERENTIABLE,
            stateful=True, sbp=BOXES_TO_B)
register_op("_AllReduceWait", infer=lambda i, a: [(TensorShape(s), _dtype(d)) for s, d in a["outputs"]],
            grad=NOT_DIFFERENTIABLE, stateful=True, num_outputs=lambda a: a["n"], sbp=BOXES_TO_B)


def _variant():
    from tensorweave.core import dtypes as _dt
    return _dt.variant


def _dtype(d):
    from tensorweave.core import dtypes as _dt
    return _dt.as_dtype(d)


@register_kernel("_AllReduceStart")
def _all_reduce_start_kernel(ranks, comm, op="sum"):
    group = tuple(ranks)

    def step(*pieces):
        return comm(group).all_reduce_start(pieces, op)
    return step


_all_reduce_start_kernel._tw_factory = True


@register_kernel("_AllReduceWait")
def _all_reduce_wait_kernel(handle, n=1, outputs=()):
    values = handle.wait()
    return values[0] if n == 1 else tuple(values)     # one output: a single-output node


@register_kernel("_ToGlobal")
def _to_global_kernel(x, placement_type=None, ranks=None, sbp=None):
    return x


@register_kernel("_Boxing")
def _boxing_kernel(plan, rank, comm):
    from tensorweave.distribute.boxing import BoxingPlan, run_boxing_on_rank
    parsed = BoxingPlan.from_dict(plan)

    def step(piece):
        return run_boxing_on_rank(parsed, rank, piece, comm)
    return step


_boxing_kernel._tw_factory = True


@register_kernel("_Once")
def _once_kernel(op_type, op_attrs, ranks, rank, comm, broadcast=True):
    opdef = get_op(op_type)
    kernel = opdef.kernel("CPU")
    n_out = opdef.n_outputs(op_attrs)
    root = rank == ranks[0]
    group = tuple(ranks)

    def step(*args):
        out = kernel(*args, **op_attrs) if root else None
        if n_out == 0:
            return ()
        if not broadcast:       # nobody reads the outputs: the other ranks need not wait for them
            return out if root else (None if n_out == 1 else (None,) * n_out)
        c = comm(group)
        if n_out == 1:
            return c.broadcast(np.asarray(out) if root else None, root=0)
        outs = list(out) if root else [None] * n_out
        return tuple(c.broadcast(None if o is None else np.asarray(o), root=0) for o in outs)
    return step


_once_kernel._tw_factory = True
