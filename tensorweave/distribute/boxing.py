"""Boxing: moving a global tensor from one SBP layout (and placement) to another.

:func:`plan_boxing` makes a :class:`BoxingPlan`, which is data: a list of
:class:`BoxingStep` (kind, mesh axis, the N-D SBP before and after, bytes moved), so a graph
plan or a Ray worker can carry it. :func:`run_boxing_on_rank` is what one rank does for a
plan, given a way to reach its groups (any :class:`~tensorweave.distribute.collective.Communicator`);
:func:`box` runs it on the in-process ranks.

One mesh axis at a time, within the group of ranks along that axis:

==============  =================================  ===========================
from -> to      step kind                          bytes (total over ranks)
==============  =================================  ===========================
P -> B          ``all_reduce``                     2(n-1)/n per piece
P -> S(i)       ``reduce_scatter``                 (n-1) x output piece
S(i) -> B       ``all_gather``                     output - own piece
S(i) -> S(j)    ``all_to_all``                     output - kept chunk
B -> S(i)       ``slice`` (local)                  0
B -> P          ``fill`` (local: rank 0 keeps)     0
S(i) -> P       ``pad`` (local: zeros around)      0
P(a) -> P(b)    ``all_reduce`` then ``fill``
==============  =================================  ===========================

On an N-D mesh an axis is changed directly when the inner mesh axes commute with the step
(they split other tensor axes, are ``B``, or are partial of the same kind); otherwise the
plan goes through ``B`` (inner axes to ``B`` first, then outer to inner to the target),
which is always valid. Between different placements (2 ranks -> 4, disjoint rank sets) the
source is made free of partial values, one ``transfer`` step sends each destination rank
exactly the region it needs (send/recv), and partial targets are made locally.

The bytes are OneFlow's cost model for choosing signatures (:func:`boxing_cost`).

>>> from tensorweave.core.sbp import S, B, P
>>> from tensorweave.distribute.layout import Placement
>>> plan = plan_boxing((4, 6), "float32", Placement("cpu", [0, 1]), (P,), (S(1),))
>>> plan
BoxingPlan((P,) -> (S(1),): reduce_scatter@0 96B)
>>> plan_boxing((4, 6), "float32", Placement("cpu", [0, 1]), (S(0),), (S(1),)).bytes
48
"""
import numpy as np

from tensorweave.core.sbp import B, Broadcast, Partial, S, Split
from tensorweave.distribute.layout import (Placement, balanced_bounds, local_shape, normalize_sbp,
                                           partial_identity, shard_slices)


class BoxingStep:
    """One step of a plan: ``kind`` on ``mesh_axis`` from N-D SBP ``before`` to ``after``,
    moving ``bytes`` between ranks (all ranks together). Data only."""

    __slots__ = ("kind", "mesh_axis", "before", "after", "bytes")

    def __init__(self, kind, mesh_axis, before, after, nbytes):
        self.kind, self.mesh_axis = kind, mesh_axis
        self.before, self.after, self.bytes = tuple(before), tuple(after), int(nbytes)

    def to_dict(self):
        return {"kind": self.kind, "mesh_axis": self.mesh_axis, "before": [repr(s) for s in self.before],
                "after": [repr(s) for s in self.after], "bytes": self.bytes}

    def __repr__(self):
        return f"{self.kind}@{self.mesh_axis} {self.bytes}B"


class BoxingPlan:
    """How a tensor of ``shape``/``dtype`` goes from ``(src_placement, src_sbp)`` to
    ``(dst_placement, dst_sbp)``: ``steps`` in order (empty: nothing to do)."""

    __slots__ = ("shape", "dtype", "src_placement", "src_sbp", "dst_placement", "dst_sbp", "steps")

    def __init__(self, shape, dtype, src_placement, src_sbp, dst_placement, dst_sbp, steps):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.src_placement, self.src_sbp = src_placement, tuple(src_sbp)
        self.dst_placement, self.dst_sbp = dst_placement, tuple(dst_sbp)
        self.steps = list(steps)

    @property
    def bytes(self):
        return sum(s.bytes for s in self.steps)

    @classmethod
    def from_dict(cls, d):
        """The plan :meth:`to_dict` wrote (what a worker receives)."""
        steps = [BoxingStep(s["kind"], s["mesh_axis"], map(parse_sbp, s["before"]), map(parse_sbp, s["after"]),
                            s["bytes"]) for s in d["steps"]]
        src, dst = d["src"], d["dst"]
        return cls(d["shape"], d["dtype"], Placement(src["type"], src["ranks"]), map(parse_sbp, src["sbp"]),
                   Placement(dst["type"], dst["ranks"]), map(parse_sbp, dst["sbp"]), steps)

    def to_dict(self):
        return {"shape": list(self.shape), "dtype": self.dtype.name,
                "src": {"type": self.src_placement.type, "ranks": self.src_placement.mesh.tolist(),
                        "sbp": [repr(s) for s in self.src_sbp]},
                "dst": {"type": self.dst_placement.type, "ranks": self.dst_placement.mesh.tolist(),
                        "sbp": [repr(s) for s in self.dst_sbp]},
                "steps": [s.to_dict() for s in self.steps], "bytes": self.bytes}

    def __repr__(self):
        fmt = lambda nd: "(" + ", ".join(map(repr, nd)) + ",)"  # noqa: E731
        where = "" if self.src_placement == self.dst_placement else f" {list(self.src_placement.ranks)}->{list(self.dst_placement.ranks)}"
        return f"BoxingPlan({fmt(self.src_sbp)} -> {fmt(self.dst_sbp)}{where}: {', '.join(map(repr, self.steps)) or 'nothing'})"


def parse_sbp(text):
    """The SBP a printed form names: ``"S(1)"``, ``"B"``, ``"P"``, ``"P(max)"``.

    >>> parse_sbp("S(1)"), parse_sbp("P(max)")
    (S(1), P(max))
    """
    text = text.strip()
    if text == "B":
        return B
    if text == "P":
        return Partial("sum")
    if text.startswith("S(") and text.endswith(")") and text[2:-1].isdigit():
        return Split(int(text[2:-1]))
    if text.startswith("P(") and text.endswith(")") and text[2:-1] in Partial.KINDS:
        return Partial(text[2:-1])
    raise ValueError(f"not an SBP: {text!r} (expected S(i), B, P or P(kind))")


# ---- planning -------------------------------------------------------------------------------
def _nbytes(shape, itemsize):
    return int(np.prod(shape, dtype=np.int64)) * itemsize


def _step_bytes(kind, shape, itemsize, placement, before, after, mesh_axis):
    if kind in ("slice", "fill", "pad"):
        return 0
    n = placement.mesh_shape[mesh_axis]
    total = 0
    for idx in range(placement.size):
        ins = local_shape(shape, placement, before, idx)
        outs = local_shape(shape, placement, after, idx)
        if kind == "all_reduce":
            total += 2 * _nbytes(ins, itemsize) * (n - 1) // n
        elif kind == "reduce_scatter":
            total += (n - 1) * _nbytes(outs, itemsize)
        elif kind == "all_gather":
            total += _nbytes(outs, itemsize) - _nbytes(ins, itemsize)
        elif kind == "all_to_all":
            j = after[mesh_axis].axis
            lo, hi = balanced_bounds(ins[j], n)[placement.coords(idx)[mesh_axis]]
            kept = list(ins)
            kept[j] = hi - lo
            total += _nbytes(outs, itemsize) - _nbytes(kept, itemsize)
    return total


def _one_axis(shape, itemsize, placement, cur, k, new):
    """The steps changing mesh axis ``k`` of ``cur`` to ``new`` (valid on its own)."""
    old = cur[k]
    if old == new:
        return []
    if isinstance(old, Partial):
        if isinstance(new, Split):
            kinds = ["reduce_scatter"]
        elif isinstance(new, Broadcast):
            kinds = ["all_reduce"]
        else:
            return _one_axis(shape, itemsize, placement, cur, k, B) + \
                _one_axis(shape, itemsize, placement, cur[:k] + (B,) + cur[k + 1:], k, new)
    elif isinstance(old, Split):
        kinds = ["all_gather" if isinstance(new, Broadcast) else "all_to_all" if isinstance(new, Split) else "pad"]
    else:
        kinds = ["slice" if isinstance(new, Split) else "fill"]
    after = cur[:k] + (new,) + cur[k + 1:]
    return [BoxingStep(kinds[0], k, cur, after,
                       _step_bytes(kinds[0], shape, itemsize, placement, cur, after, k))]


def _direct_ok(cur, k, new):
    """Whether mesh axis ``k`` can change to ``new`` with the inner axes as they are."""
    involved = {s.axis for s in (cur[k], new) if isinstance(s, Split)}
    kinds = {s.kind for s in (cur[k], new) if isinstance(s, Partial)}
    for inner in cur[k + 1:]:
        if isinstance(inner, Split) and inner.axis in involved:
            return False
        if isinstance(inner, Partial) and kinds - {inner.kind}:
            return False
    return True


def _same_placement_steps(shape, itemsize, placement, src, dst):
    diff = [k for k in range(len(src)) if src[k] != dst[k]]
    if not diff:
        return []
    best = None
    for order in (diff, diff[::-1]):
        cur, steps = tuple(src), []
        for k in order:
            if not _direct_ok(cur, k, dst[k]):
                break
            steps += _one_axis(shape, itemsize, placement, cur, k, dst[k])
            cur = cur[:k] + (dst[k],) + cur[k + 1:]
        else:
            if best is None or sum(s.bytes for s in steps) < sum(s.bytes for s in best):
                best = steps
    if best is not None:
        return best
    cur, steps = tuple(src), []
    for k in reversed(range(diff[0], len(src))):       # inner axes to B first ...
        steps += _one_axis(shape, itemsize, placement, cur, k, B)
        cur = cur[:k] + (B,) + cur[k + 1:]
    for k in range(diff[0], len(src)):                 # ... then outer to inner to the target
        steps += _one_axis(shape, itemsize, placement, cur, k, dst[k])
        cur = cur[:k] + (dst[k],) + cur[k + 1:]
    return steps


def _no_partial(nd):
    return tuple(B if isinstance(s, Partial) else s for s in nd)


def _owners(shape, placement, nd):
    """(index, region) of the ranks holding the canonical copy of each part of a P-free layout
    (coordinate 0 along every B mesh axis); their regions tile the logical value once."""
    regions = shard_slices(shape, placement, nd)
    out = []
    for idx, region in enumerate(regions):
        coords = placement.coords(idx)
        if all(c == 0 for c, s in zip(coords, nd) if not isinstance(s, Split)):
            out.append((idx, region))
    return out


def _intersect(a, b):
    out = []
    for x, y in zip(a, b):
        lo, hi = max(x.start, y.start), min(x.stop, y.stop)
        if hi <= lo:
            return None
        out.append(slice(lo, hi))
    return tuple(out)


def _transfers(shape, src_placement, src_nd, dst_placement, dst_nd):
    """[(src index, dst index, region)] of a transfer between P-free layouts."""
    dst_regions = shard_slices(shape, dst_placement, dst_nd)
    moves = []
    for s_idx, s_region in _owners(shape, src_placement, src_nd):
        for d_idx, d_region in enumerate(dst_regions):
            inter = _intersect(s_region, d_region) if shape else ()
            if inter is not None:
                moves.append((s_idx, d_idx, inter))
    return moves


def plan_boxing(shape, dtype, placement, src_sbp, dst_sbp, dst_placement=None):
    """The :class:`BoxingPlan` from ``(placement, src_sbp)`` to ``(dst_placement or
    placement, dst_sbp)`` for a logical tensor of ``shape`` and ``dtype``."""
    shape = tuple(int(d) for d in shape)
    dst_placement = placement if dst_placement is None else dst_placement
    src = normalize_sbp(src_sbp, placement, shape, "boxing")
    dst = normalize_sbp(dst_sbp, dst_placement, shape, "boxing")
    itemsize = np.dtype(dtype).itemsize
    if dst_placement == placement:
        steps = _same_placement_steps(shape, itemsize, placement, src, dst)
        return BoxingPlan(shape, dtype, placement, src, placement, dst, steps)
    if dst_placement.type != placement.type:
        raise ValueError(f"boxing: cannot move between device types {placement.type} and {dst_placement.type}")
    mid_dst = _no_partial(dst)
    best = None
    for mid_src in _partial_free(src, len(shape)):
        steps = _same_placement_steps(shape, itemsize, placement, src, mid_src)
        moved = sum(_nbytes([s.stop - s.start for s in region], itemsize)
                    for s_idx, d_idx, region in _transfers(shape, placement, mid_src, dst_placement, mid_dst)
                    if placement.ranks[s_idx] != dst_placement.ranks[d_idx])
        steps.append(BoxingStep("transfer", None, mid_src, mid_dst, moved))
        steps += _same_placement_steps(shape, itemsize, dst_placement, mid_dst, dst)
        if best is None or sum(s.bytes for s in steps) < sum(s.bytes for s in best):
            best = steps
    return BoxingPlan(shape, dtype, placement, src, dst_placement, dst, best)


def _partial_free(nd, rank):
    """Layouts without partial values to reduce ``nd`` to before a transfer: partial axes to
    B (all-reduce), or to S(a) (reduce-scatter: less to reduce and to send)."""
    yield _no_partial(nd)
    if any(isinstance(s, Partial) for s in nd):
        for a in range(rank):
            yield tuple(S(a) if isinstance(s, Partial) else s for s in nd)


def boxing_cost(shape, dtype, placement, src_sbp, dst_sbp, dst_placement=None):
    """Bytes moved between ranks to box a tensor (0 when the layouts agree)."""
    if dst_placement in (None, placement) and tuple(src_sbp) == tuple(dst_sbp):
        return 0
    return plan_boxing(shape, dtype, placement, src_sbp, dst_sbp, dst_placement).bytes


# ---- running ---------------------------------------------------------------------------------
def axis_group(placement, index, mesh_axis):
    """(rank ids along ``mesh_axis`` through rank ``index``, its position among them)."""
    coords = placement.coords(index)
    line = placement.mesh[coords[:mesh_axis] + (slice(None),) + coords[mesh_axis + 1:]]
    return tuple(int(r) for r in line), coords[mesh_axis]


def _axis_slice(ndim, axis, lo, hi):
    return (slice(None),) * axis + (slice(lo, hi),)


def _run_step(step, piece, plan, placement, index, comm, compression=None, key=None):
    k = step.mesh_axis
    old, new = step.before[k], step.after[k]
    n, pos = comm.size, comm.index
    if compression is not None and step.kind in ("all_reduce", "reduce_scatter") and old.kind == "sum" \
            and np.issubdtype(np.asarray(piece).dtype, np.floating):
        from tensorweave.distribute import compression as cz
        if step.kind == "all_reduce":
            return cz.all_reduce(comm, piece, compression, key=key)
        return cz.reduce_scatter(comm, piece, compression, new.axis, key=key)
    if step.kind == "all_reduce":
        return comm.all_reduce(piece, old.kind)
    if step.kind == "reduce_scatter":
        return comm.reduce_scatter(piece, old.kind, new.axis)
    if step.kind == "all_gather":
        return comm.all_gather(piece, old.axis)
    if step.kind == "all_to_all":
        i, j = old.axis, new.axis
        chunks = [piece[_axis_slice(piece.ndim, j, lo, hi)] for lo, hi in balanced_bounds(piece.shape[j], n)]
        return comm.all_to_all(chunks, axis=i)
    if step.kind == "slice":
        lo, hi = balanced_bounds(piece.shape[new.axis], n)[pos]
        return np.array(piece[_axis_slice(piece.ndim, new.axis, lo, hi)])
    if step.kind == "fill":
        return np.array(piece) if pos == 0 else np.full_like(piece, partial_identity(new.kind, piece.dtype))
    if step.kind == "pad":
        # the group's extent along the split axis: the axes before k laid out, the rest whole
        level = step.before[:k] + (B,) * (len(step.before) - k)
        region = shard_slices(plan.shape, placement, level)[index][old.axis]
        total = region.stop - region.start
        shape = list(piece.shape)
        shape[old.axis] = total
        out = np.full(shape, partial_identity(new.kind, piece.dtype), dtype=piece.dtype)
        lo, hi = balanced_bounds(total, n)[pos]
        out[_axis_slice(piece.ndim, old.axis, lo, hi)] = piece
        return out
    raise ValueError(f"boxing: unknown step kind {step.kind!r}")


def _run_transfer(step, plan, rank, piece, comm_for):
    src_p, dst_p = plan.src_placement, plan.dst_placement
    union = tuple(dict.fromkeys(src_p.ranks + dst_p.ranks))
    comm = comm_for(union)
    moves = _transfers(plan.shape, src_p, step.before, dst_p, step.after)
    src_idx = src_p.ranks.index(rank) if rank in src_p.ranks else None
    dst_idx = dst_p.ranks.index(rank) if rank in dst_p.ranks else None
    src_regions = shard_slices(plan.shape, src_p, step.before)
    kept = {}
    for s_idx, d_idx, region in moves:          # sends do not block: all first, then receive
        if s_idx != src_idx:
            continue
        offs = src_regions[s_idx]
        chunk = piece[tuple(slice(r.start - o.start, r.stop - o.start) for r, o in zip(region, offs))]
        if dst_p.ranks[d_idx] == rank:
            kept[s_idx] = np.array(chunk)
        else:
            comm.send(chunk, union.index(dst_p.ranks[d_idx]))
    if dst_idx is None:
        return None
    my_region = shard_slices(plan.shape, dst_p, step.after)[dst_idx]
    out = np.empty([r.stop - r.start for r in my_region], dtype=plan.dtype)
    for s_idx, d_idx, region in moves:
        if d_idx != dst_idx:
            continue
        src_rank = src_p.ranks[s_idx]
        chunk = kept.pop(s_idx) if src_rank == rank else comm.recv(union.index(src_rank))
        out[tuple(slice(r.start - o.start, r.stop - o.start) for r, o in zip(region, my_region))] = chunk
    return out


def run_boxing_on_rank(plan, rank, piece, comm_for, compression=None, key=None):
    """What rank id ``rank`` does for ``plan``: its source ``piece`` (None when it is not in
    the source placement) in, its destination piece out (None when not in the destination).
    ``comm_for(rank_ids)`` gives this rank's communicator in the group of those ranks.

    ``compression``: this rank's :class:`~tensorweave.distribute.compression.Compression`
    (its own object: it keeps this rank's error-feedback residuals, under ``key`` and the
    step's number); the sum-reducing steps (``P -> B``, ``P -> S``) of float pieces then send
    compressed contributions. None (the default) runs the plan exactly as without the option."""
    placement = plan.src_placement
    for number, step in enumerate(plan.steps):
        if step.kind == "transfer":
            piece = _run_transfer(step, plan, rank, piece, comm_for)
            placement = plan.dst_placement
            continue
        if piece is None:
            continue                             # not on this side of the transfer
        index = placement.ranks.index(rank)
        comm = None
        if step.kind not in ("slice", "fill", "pad"):
            comm = comm_for(axis_group(placement, index, step.mesh_axis)[0])
        else:
            comm = _Local(*axis_group(placement, index, step.mesh_axis))
        if compression is None:
            piece = _run_step(step, piece, plan, placement, index, comm)
        else:
            piece = _run_step(step, piece, plan, placement, index, comm, compression, (key, number))
    if rank not in plan.dst_placement.ranks:
        return None
    return piece


class _Local:
    """Size and position of a rank in its mesh-axis group (local steps talk to no one)."""

    def __init__(self, ranks, index):
        self.size, self.index = len(ranks), index


def participants(plan):
    """The rank ids that take part in ``plan`` (source and destination)."""
    return tuple(dict.fromkeys(plan.src_placement.ranks + plan.dst_placement.ranks))


def box(pieces, plan, world=None, compression=None):
    """Runs ``plan`` on the in-process ranks: source pieces (mesh order) in, destination pieces out.
    ``compression``: None, a name (``"fp16"``, ``"bf16"``, ``"int8"``) or a list of one
    :class:`~tensorweave.distribute.compression.Compression` per participating rank (kept
    across calls, for error feedback); see :func:`run_boxing_on_rank`."""
    if not plan.steps:
        return list(pieces)
    from tensorweave.distribute.ranks import default_world
    world = world or default_world()
    ranks = participants(plan)
    src = dict(zip(plan.src_placement.ranks, pieces))
    codecs = [None] * len(ranks)
    if compression is not None:
        from tensorweave.distribute import compression as cz
        codecs = list(compression) if isinstance(compression, (list, tuple)) else [
            cz.get(compression) for _ in ranks]

    def on_rank(i):
        r = ranks[i]
        return run_boxing_on_rank(plan, r, src.get(r),
                                  lambda group: world.group(group).communicator(group.index(r)), codecs[i])
    out = dict(zip(ranks, world.run(ranks, on_rank)))
    return [out[r] for r in plan.dst_placement.ranks]


__all__ = ["BoxingPlan", "BoxingStep", "Placement", "plan_boxing", "boxing_cost", "box", "run_boxing_on_rank"]
