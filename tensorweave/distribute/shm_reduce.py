"""A bucket of all-reduces (a planned step's gradients) over the shared-memory transport with the
copies cut: the arrays go into the segment as they are (no flat concatenation first), a member
sums its chunk straight into its result buffer, which lives in shared memory, and the peers copy
that chunk from there into theirs; the result buffers are reused from step to step while no one
holds them.

``ShmCommunicator.all_reduce_start`` (``shm.py``) reduces a bucket per dtype as one flat value of
the arrays one after another. Before (session 16) that value was first made by
``np.concatenate`` (a copy of every gradient, a fresh buffer each step), reduced by
``ShmGroup.all_reduce_large`` (each member's sum of its chunk written in its data segment) into
another fresh buffer (every chunk copied there), then sliced. Here:

* *one round* (up to ``shm.ONE_ROUND_BYTES``): each member writes its arrays into its data
  segment (one copy), then sums every member's arrays, array by array, into its result;
* *two rounds* (reduce-scatter + all-gather): the flat value's balanced chunks (``layout``), each
  written by its spans of the arrays (a chunk may cross arrays); a member writes only its peers'
  chunks, sums its own chunk from its own arrays and the peers' chunks in their segments into
  its result buffer, and after one more counter round copies the peers' summed chunks out of
  their result buffers (named in the first round) into its own.

Every element is reduced in rank order (``collective._reduce_chunk``), so the bits are those of
the concatenated path and of in-process ranks. Result buffers (:class:`_Results`): per (dtype,
size) up to :data:`POOL` shared-memory segments per member, one taken again only when no view of
it is alive (its reference count: sums a plan still holds are never overwritten); a peer reads a
member's buffer only between that member's rounds, so no member writes one a peer still reads.

>>> import numpy as np, uuid
>>> from concurrent.futures import ThreadPoolExecutor
>>> from tensorweave.distribute.shm import ShmGroup, sweep
>>> prefix = "tw-doc-" + uuid.uuid4().hex[:8]
>>> groups = [ShmGroup((0, 1), i, prefix) for i in range(2)]
>>> def on_rank(i):
...     groups[i].connect()
...     arrays = [np.arange(3.0) * (i + 1), np.full((2, 2), 10.0 * (i + 1))]
...     sums, _ = reduce_bucket(groups[i], arrays, "sum", None)
...     return [s.tolist() for s in sums]
>>> with ThreadPoolExecutor(2) as pool:
...     list(pool.map(on_rank, range(2)))[1]
[[0.0, 3.0, 6.0], [[30.0, 30.0], [30.0, 30.0]]]
>>> for g in groups: g.close()
>>> sweep(prefix)
0
"""
import itertools
import sys

import numpy as np

from tensorweave.core import errors
from tensorweave.distribute.collective import _read_only, _reduce_chunk
from tensorweave.distribute.layout import balanced_bounds

POOL = 3        # result buffers kept per (dtype, size): the plan's slots may hold the last steps' sums


def _refs(entry):
    return sys.getrefcount(entry[0])


#: a pooled array's reference count when only its pool entry holds it (asked as :meth:`_Results.take` asks)
_FREE_REFS = _refs([np.empty(1)])


def reduce_bucket(group, arrays, op, ride):
    """``(sums, ridden)``: the reduction ``op`` over ``group`` (a connected
    :class:`~tensorweave.distribute.shm.ShmGroup` of two or more members) of each array of
    ``arrays`` (read-only, in order) and the values the first member's ``ride`` carried (see
    ``shm._ridden``)."""
    if group._results is None:
        group._results = _Results(group)

    def reduce(flats, ride):
        result, name = group._results.take(flats[0].dtype, sum(f.size for f in flats))
        return result, _reduce_flats(group, flats, op, ride, result, name)
    return per_dtype(arrays, ride, reduce)


def per_dtype(arrays, ride, reduce):
    """``(sums, ridden)`` of a bucket reduced per dtype: ``reduce(flats, ride) -> (flat sums, ridden)``
    on each dtype's arrays flattened (``ride``: with the first dtype only; its ridden values are the
    bucket's), the sums sliced back into the arrays' shapes, read-only."""
    out, extra = [None] * len(arrays), None
    for dtype in dict.fromkeys(a.dtype for a in arrays):
        idx = [i for i, a in enumerate(arrays) if a.dtype == dtype]
        flat, got = reduce([arrays[i].reshape(-1) for i in idx], ride if extra is None else None)
        extra = got if extra is None else extra
        at = 0
        for i in idx:
            out[i] = _read_only(flat[at:at + arrays[i].size].reshape(arrays[i].shape))
            at += arrays[i].size
    return out, extra or []


def _spans(sizes, lo, hi):
    """``(array, start, stop)`` of the arrays (``sizes``, one after another) covering ``[lo, hi)``."""
    out, at = [], 0
    for k, n in enumerate(sizes):
        a, b = max(lo, at), min(hi, at + n)
        if a < b:
            out.append((k, a - at, b - at))
        at += n
    return out


def _reduce_flats(group, flats, op, ride, result, name):
    from tensorweave.distribute.shm import ONE_ROUND_BYTES, _ridden
    sizes = tuple(f.size for f in flats)
    total, me = sum(sizes), group.index
    if total * flats[0].dtype.itemsize <= ONE_ROUND_BYTES:
        values = _exchange(group, flats, op, list(flats), ride, name)
        members, outs = [v[3] for v in values], [result[a:a + n] for a, n in zip(_starts(sizes), sizes)]
        for k, n in enumerate(sizes):
            _reduce_chunk(members, outs, (k, 0, n), op)
        return _ridden(values)
    bounds = balanced_bounds(total, group.size)
    spans = [_spans(sizes, a, b) for a, b in bounds]
    chunks = [[] if j == me else [flats[k][s:t] for k, s, t in spans[j]] for j in range(group.size)]
    values = _exchange(group, flats, op, chunks, ride, name)
    lo = bounds[me][0]
    pieces, at = [], lo
    for _, s, t in spans[me]:
        pieces.append(result[at:at + t - s])
        at += t - s
    members = [[flats[k][s:t] for k, s, t in spans[me]] if j == me else v[3][me] for j, v in enumerate(values)]
    for p, piece in enumerate(pieces):
        _reduce_chunk(members, pieces, (p, 0, piece.size), op)
    ridden = _ridden(values)                        # (copied out of the first member's segment before it may reuse it)
    group.exchange(me, "bucket_gather", None)       # every member's chunk summed (no data: a counter round)
    for j, (a, b) in enumerate(bounds):
        if j != me:
            np.copyto(result[a:b], group._results.peer(j, values[j][5], flats[0].dtype, total)[a:b])
    return ridden


def _starts(sizes):
    return [0] + list(itertools.accumulate(sizes))[:-1]


def _exchange(group, flats, op, payload, ride, name):
    sizes, dtype = tuple(f.size for f in flats), flats[0].dtype
    values = group.exchange(group.index, "bucket", (sizes, dtype, op, payload, list(ride or ()), name))
    for r, (s, d, o, _, _, _) in enumerate(values):
        if (tuple(s), d, o) != (sizes, dtype, op):
            raise errors.InvalidArgumentError(
                f"all_reduce_start: rank {group.ranks[r]} gave a bucket of {list(s)} {d} ({o}) but rank "
                f"{group.ranks[group.index]} gave {list(sizes)} {dtype} ({op})")
    return values


class _Results:
    """One member's result buffers: per (dtype, size) a pool of entries ``[array, segment name,
    segment]`` (segments ``<prefix>-r<rank>-o<pool>s<slot>g<generation>``), and the peers'
    buffers it read, by peer and name."""

    def __init__(self, group):
        self.group = group
        self.pools = {}             # (dtype, size) -> [pool id, entries, replacements made]
        self.peers = {}             # (peer, name without generation) -> (name, segment, array)

    def take(self, dtype, n):
        """``(array, name)``: a pooled buffer of ``n`` elements no view of which is alive; where
        all :data:`POOL` are held, a new segment in the place of one of them (its segment unlinked:
        the views keep their mapping; the peers read it no more)."""
        from tensorweave.distribute.shm import _Segment
        pool = self.pools.setdefault((dtype, n), [len(self.pools), [], 0])
        entries = pool[1]
        for e in entries:
            if _refs(e) == _FREE_REFS:
                return e[0], e[1]
        slot = len(entries) if len(entries) < POOL else pool[2] % POOL
        gen = 0 if slot == len(entries) else pool[2] // POOL + 1
        name = self.group._name(f"o{pool[0]}s{slot}g{gen}")
        seg = _Segment(name, max(n * dtype.itemsize, 64))
        entry = [np.frombuffer(seg.mm, dtype, n), name, seg]     # (holds the mapping while a view lives)
        if slot == len(entries):
            entries.append(entry)
        else:
            entries[slot][2].unlink()
            entries[slot] = entry
            pool[2] += 1
        return entry[0], name

    def peer(self, j, name, dtype, n):
        """Peer ``j``'s result buffer ``name`` (mapped once; a slot's older generation let go)."""
        key = (j, name.rsplit("g", 1)[0])
        got = self.peers.get(key)
        if got is None or got[0] != name:
            from tensorweave.distribute.shm import _Segment
            if got is not None:
                got[1].close()
            seg = _Segment(name)
            got = self.peers[key] = (name, seg, np.frombuffer(seg.mm, dtype, n))
        return got[2]

    def close(self):
        """Unlinks this member's segments; unmaps what no view holds."""
        for _, entries, _ in self.pools.values():
            for e in entries:
                e[2].unlink()
        segs = [e[2] for _, entries, _ in self.pools.values() for e in entries] + [p[1] for p in self.peers.values()]
        self.pools.clear()
        self.peers.clear()
        for seg in segs:
            seg.close()
