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

Per-shard normal draws stay whole-draw-and-slice: NumPy's normal sampler (ziggurat) consumes a
variable number of Philox words per value (it rejects), so where value ``i`` starts in the
stream depends on every earlier value; a counter-offset sampler (Box-Muller on two uniforms per
value) would need the single-device normal to change its bits too.
"""
import numpy as np

from tensorweave.core.plan_data import Resource

__all__ = ["draws_stream", "rank_stream"]


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
