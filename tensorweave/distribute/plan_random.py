"""Random streams in planned graphs: each rank draws from its own copy of an op's stream.

A stateful random op (``RandomUniform``, ``RandomStandardNormal``, dropout's mask, ...) in a
planned ``tw.function`` is planned like any op with a rule (``ops/random_ops.py``: ``B`` ->
``S(j)``): the planner picks the output layout its consumers need, and each rank computes its
slice of the **single-device draw** (``SbpRandomPiece``: only its values, by Philox counter
offset, for uniform floats and full-range ints; ``SbpSliceOf``: the whole draw, its slice kept,
for normals, bounded ints and multinomials) or, for ``B``, the whole draw. For that every rank
gets, as the plan resource ``("random_stream", op name)``, its **own copy** of the op's stream
taken when the op is first planned (seed key and position; kept on the op, so every plan of
its graph continues it; an unseeded stream gets one key from OS entropy shared by all ranks):
every rank's copy advances by the whole draw each call, so the
copies stay equal and the logical value of call ``n`` is what call ``n`` of the single-device
function draws. A copy is data (key and position), so a Ray worker gets the same stream.

A draw has no global input, so in creation order it would be planned before its consumers'
other inputs have layouts, and the look-ahead could not see them (an uneven uniform drawn
``S(1)`` beside an ``S(0)`` batch, then an all-to-all): :func:`planning_order` plans such a draw
just before its first consumer instead (the rank plans still run it where it was created), and
:func:`draw_lookahead` takes its layout from its consumers: the boxing a consumer needs when its
inputs decided so far keep their layouts (a local pad of the batch to ``P`` moves no bytes, so the
general look-ahead would call ``S(1)`` free beside an ``S(0)`` batch: both padded to ``P``).

Per-shard normal draws stay whole-draw-and-slice: NumPy's normal sampler (ziggurat) consumes a
variable number of Philox words per value (it rejects), so where value ``i`` starts in the
stream depends on every earlier value; a counter-offset sampler (Box-Muller on two uniforms per
value) would need the single-device normal to change its bits too.
"""
import numpy as np

from tensorweave.core.plan_data import Resource

__all__ = ["draws_stream", "rank_stream", "planning_order", "draw_lookahead"]


def draws_stream(op):
    """Whether ``op`` is a random op whose only bound resources are random streams (remembered
    on the op: its bind hook is called once)."""
    bind = op.opdef.bind
    if bind is None or op.attrs.get("_state") is not None:
        return False        # a Generator's draw: its one stream object must advance (not planned)
    extra = op._extra if op._extra is not None else {}
    found = extra.get("plan_draws_stream")
    if found is None:
        values = list(bind(op).values())
        found = bool(values) and all(isinstance(v, Resource) and v.kind == "random_stream" for v in values)
        if op._extra is None:
            op._extra = {}
        op._extra["plan_draws_stream"] = found
    return found


def _stream_data(op):
    from tensorweave.ops.random_ops import stream_state
    (resource,) = op.opdef.bind(op).values()
    data = stream_state(resource.live)
    if data["key"] is None and not data["streams"]:
        # OS entropy: one key for every rank's copy, or their draws would differ
        data["key"] = [int(w) for w in np.random.SeedSequence().generate_state(4, np.uint64)]
    return data


def rank_stream(gp, op, index):
    """Rank ``index``'s copy of ``op``'s random stream on the placement of the plan ``gp``, made
    once per op, placement and rank (all ranks' copies from one snapshot of the op's stream) and
    kept on the op, so every plan of one graph on that placement (a TF1 graph's ``Session.run``
    signatures) continues the same copies, as every run of a single-device graph continues the
    op's one stream."""
    from tensorweave.ops.random_ops import stream_from_state
    if op._extra is None:
        op._extra = {}
    streams = op._extra.setdefault("plan_rank_streams", {})
    ranks = tuple(gp.placement.ranks)
    st = streams.get((ranks, index))
    if st is None:
        data = streams.get(ranks)
        if data is None:
            data = streams[ranks] = _stream_data(op)
        st = streams[(ranks, index)] = stream_from_state(data, f"random stream of '{op.name}'")
    return st


def _pure(op):
    """An op that may be planned late: no state, no bound resources, not a pin."""
    from tensorweave.distribute.plan_control import CONTROL_FLOW
    return not op.opdef.stateful and op.opdef.bind is None and op.type not in CONTROL_FLOW and op.type != "_ToGlobal"


def planning_order(ops, local, free):
    """``ops`` (topological order) in the order to plan them. *Free* ops — a draw whose inputs are
    all local, and pure ops whose inputs are local or free (``u * n`` of two draws) — are planned
    just before the first other op that reads them (their chain in creation order), when that
    consumer's other inputs have their layouts, so :func:`draw_lookahead` weighs those; ``free``
    receives their ids. ``local``: ids of tensors no global value reaches, filled in as the
    caller plans (a generator: the caller plans each op before asking for the next)."""
    consumed = {id(t.op) for op in ops for t in op.inputs}
    pending = {}

    def release(op):
        for t in op.inputs:
            held = pending.pop(id(t.op), None)
            if held is not None:
                yield from release(held)
        yield op
    for op in ops:
        if id(op) in consumed and op.inputs and all(id(x) in local or id(x.op) in free for x in op.inputs) and (
                draws_stream(op) if all(id(x) in local for x in op.inputs) else _pure(op)):
            free.add(id(op))
            pending[id(op)] = op
            continue
        yield from release(op)
    for op in list(pending.values()):
        if id(op) in pending:
            del pending[id(op)]
            yield from release(op)


def draw_lookahead(planner, op, out_nds, depth=4):
    """The boxing bytes the consumers of free op ``op`` (see :func:`planning_order`; a
    ``planner._Planner``'s op) would need if its outputs were laid out as ``out_nds``: for a
    consumer, its cheapest signature that keeps its inputs decided so far as they are (inputs
    not yet decided follow), plus — for a free consumer, ``depth`` levels down — that signature's
    outputs' own look-ahead; the consumer's general look-ahead where no signature keeps them."""
    from tensorweave.core import errors
    from tensorweave.distribute.interpreter import _known, candidates, Layout
    gp, total = planner.gp, 0
    for o, nd in zip(op.outputs, out_nds):
        shape = _known(o.shape)
        for c, k in planner.consumers.get(id(o), ()):
            best = None
            out_specs = [(_known(t.shape), t.dtype) for t in c.outputs]
            if shape is not None and c.opdef.bind is None and None not in (s for s, _ in out_specs):
                lays, fixed = [], []
                for j, x in enumerate(c.inputs):
                    lay = gp.layouts.get(id(x)) if j != k else Layout(shape, o.dtype, nd, planner.placement)
                    if lay is None or lay._shape is None:     # not decided yet: it will follow
                        xs = _known(x.shape)
                        if xs is None:
                            lays = None
                            break
                        lay = Layout(xs, x.dtype, planner.nd_b, planner.placement)
                    elif j != k:
                        fixed.append(j)
                    lays.append(lay)
                try:
                    combos = candidates(c.opdef, lays, dict(c.attrs), out_specs, planner.placement)[0] \
                        if lays is not None else ()
                except errors.OpError:
                    combos = ()
                for combo in combos:
                    if all(combo[1][j] == lays[j]._sbp for j in fixed):
                        cost = planner.cost(shape, o.dtype.np_dtype, planner.placement, nd, combo[1][k])
                        if depth and id(c) in planner.free and (best is None or cost < best):
                            cost += draw_lookahead(planner, c, combo[2], depth - 1)
                        best = cost if best is None else min(best, cost)
            total += planner.consumer_cost(c, k, o, nd) if best is None else best
    return total
