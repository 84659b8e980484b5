"""The collective interface a rank uses to talk to the other ranks of a group, and its
in-process implementation (ranks are threads of this process).

A :class:`Communicator` is one rank's end of a group: ``all_reduce`` (sum/max/min/prod),
``reduce_scatter``, ``all_gather``, ``all_to_all``, ``broadcast``, ``send``/``recv``,
``barrier``, and ``all_reduce_start`` (a bucket of arrays reduced without waiting at the call;
``.wait()`` on its handle gives the sums — how a planned data-parallel step issues its gradient
all-reduce as soon as the gradients are ready and waits only before the optimizer). Pieces may differ in size between ranks (uneven splits follow the balanced
splitter of ``layout.py``). Every call waits at most ``timeout`` seconds; the error names
the ranks that did not arrive. The interface takes and returns NumPy arrays only, so a
Ray-actor implementation (issue 14) provides the same methods over its own transport.

:class:`InProcessGroup` is a rendezvous: each rank deposits its own buffer for a call and
reads the others' deposited buffers to build a fresh result of its own; nothing is a
shared global array. Calls are matched by their order on each rank (SPMD: every member
makes the same calls in the same order); a rank calling a different collective than the
others is an error naming both.

>>> import numpy as np
>>> from concurrent.futures import ThreadPoolExecutor
>>> group = InProcessGroup([0, 1])
>>> def on_rank(i):
...     comm = group.communicator(i)
...     return comm.all_reduce(np.array([1.0, 2.0]) * (i + 1)).tolist()
>>> with ThreadPoolExecutor(2) as pool:
...     list(pool.map(on_rank, range(2)))
[[3.0, 6.0], [3.0, 6.0]]
"""
import itertools
import threading
import time
from collections import deque

import numpy as np

from tensorweave.core import errors
from tensorweave.distribute import meet_spin
from tensorweave.distribute.layout import balanced_bounds

DEFAULT_TIMEOUT = 120.0
SMALL_BYTES = 1 << 16        # all-reduces up to this size take one rendezvous instead of two
REDUCE_CHUNK = 1 << 16       # elements of a bucket one member reduces at a time (all_reduce_start)
WHOLE_BELOW = 1 << 12        # a bucket array's sum of at most this many elements (and REDUCE_CHUNK), applied to no weight, is one chunk
_REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


class CollectiveTimeoutError(errors.OpError, TimeoutError):
    """A collective waited longer than its timeout; ``missing`` are the ranks that did not arrive."""

    def __init__(self, message, missing=(), **kwargs):
        # kwargs: OpError's (``op=``): a plan's runner re-raises a step's error naming its node
        # (executor.node_error), which a timeout inside a planned step's collective reaches
        super().__init__(message, **kwargs)
        self.missing = tuple(missing)


class CollectiveAbortedError(errors.OpError, RuntimeError):
    """A collective was abandoned because another rank of its group failed."""


class Communicator:
    """One rank's end of a group of ``size`` ranks (global ids ``ranks``; this one is ``index``).

    Every method is a collective call unless noted: all members call it, in the same order.
    A transport must provide ``send``/``recv``; the collectives here are correct defaults
    written with them (each call's messages tagged by its sequence number, reductions in rank
    order so every member gets the same bits), which a transport overrides with faster ones.
    Implementations: :class:`InProcessCommunicator` (threads); the Ray runtime's actors."""

    index = 0
    ranks = ()
    _calls = 0

    @property
    def size(self):
        return len(self.ranks)

    @property
    def rank(self):
        """This rank's global id."""
        return self.ranks[self.index]

    # ---- point to point: what a transport provides ------------------------------------------
    def send(self, x, dst, tag=0):
        """Point to point, not collective: queues ``x`` for member ``dst`` (does not block)."""
        raise NotImplementedError

    def recv(self, src, tag=0):
        """Point to point: the next array member ``src`` sent here with ``tag``."""
        raise NotImplementedError

    # ---- collectives (defaults over send/recv) ---------------------------------------------
    def _tag(self):
        self._calls += 1
        return ("collective", self._calls)

    def _exchange(self, outgoing):
        """``outgoing[j]`` to member ``j``; returns what each member sent here (own: kept)."""
        tag = self._tag()
        for j, x in enumerate(outgoing):
            if j != self.index:
                self.send(x, j, tag)
        return [np.asarray(outgoing[j]) if j == self.index else self.recv(j, tag) for j in range(self.size)]

    def all_reduce(self, x, op="sum"):
        """The elementwise reduction (``op``: sum, max, min, prod) of every rank's ``x``."""
        x = np.asarray(x)
        values = self._exchange([x] * self.size)
        out = np.array(values[0])
        for v in values[1:]:
            _REDUCE[op](out, v, out=out)
        return out

    def reduce_scatter(self, x, op="sum", axis=0):
        """This rank's balanced slice along ``axis`` of the reduction of every rank's ``x``."""
        x = np.asarray(x)
        chunks = [x[(slice(None),) * axis + (slice(lo, hi),)] for lo, hi in balanced_bounds(x.shape[axis], self.size)]
        values = self._exchange(chunks)
        out = np.array(values[0])
        for v in values[1:]:
            _REDUCE[op](out, v, out=out)
        return out

    def all_gather(self, x, axis=0):
        """Every rank's ``x`` concatenated along ``axis`` in rank order (sizes may differ)."""
        x = np.asarray(x)
        return np.concatenate(self._exchange([x] * self.size), axis=axis)

    def all_to_all(self, chunks, axis=None):
        """``chunks[j]`` goes to member ``j``; returns the chunks the members sent here, in
        order, or with ``axis`` given, those chunks concatenated along it."""
        if len(chunks) != self.size:
            raise ValueError(f"all_to_all: {len(chunks)} chunks for a group of {self.size} ranks")
        got = self._exchange([np.asarray(c) for c in chunks])
        return np.concatenate(got, axis=axis) if axis is not None else [np.array(g) for g in got]

    def broadcast(self, x, root=0):
        """Member ``root``'s ``x`` (the others pass anything, e.g. None)."""
        tag = self._tag()
        if self.index == root:
            x = np.asarray(x)
            for j in range(self.size):
                if j != root:
                    self.send(x, j, tag)
            return np.array(x)
        return np.array(self.recv(root, tag))

    def barrier(self):
        self.all_gather(np.zeros(1, np.int8))

    def all_gather_rows(self, arrays):
        """Each array of ``arrays`` is this rank's full-size buffer whose own balanced rows (axis
        0) are current; fills every other member's rows into it, in place (ZeRO-1's gather of
        the updated weights). Collective; the arrays' shapes agree across members."""
        for a in arrays:
            lo, hi = balanced_bounds(a.shape[0], self.size)[self.index]
            a[...] = self.all_gather(a[lo:hi], 0)

    def all_reduce_start(self, arrays, op="sum", apply=None):
        """Starts the reduction (``op``) of each array of ``arrays`` over the group; returns a
        handle whose ``wait()`` gives the reduced arrays (read-only: they may be shared between
        ranks), in order. Collective: every member starts the same bucket at the same point of
        its call order. This default reduces at once (the call blocks, nothing overlaps); a
        transport overrides it to return before the others arrive. ``apply`` (in-process
        groups; others ignore it and give every sum): see :meth:`InProcessGroup.reduce_start`."""
        return _Ready([_read_only(self.all_reduce(a, op)) for a in arrays])


def _read_only(a):
    a = np.asarray(a)
    a.flags.writeable = False
    return a


class _Ready:
    """A started reduction whose values are known already (``extra``: values a folded ``_Once``
    broadcast beside it, see ``plan_ops._OnceInto``)."""

    __slots__ = ("values", "extra")

    def __init__(self, values):
        self.values = values
        self.extra = None

    def wait(self):
        return self.values

    def extras(self, count):
        return self.extra[:count]


class _Round:
    __slots__ = ("kind", "values", "kinds", "left", "result", "chunks", "orders", "claim", "finished", "done",
                 "extra", "applies", "targets", "longest", "layout", "prepared", "mismatch")

    def __init__(self, size, kind):
        self.kind = kind
        self.values = [None] * size
        self.kinds = [None] * size
        self.left = size
        self.result = None      # all_reduce_start: the sums being filled in, chunk by chunk
        self.chunks = self.orders = None
        self.longest = 0        # the longest chunk's elements (a fused update's scratch)
        # per chunk a counter (``next() == 0``: taken by this member) / the chunks reduced: ``next()``
        # of an itertools.count is one C call (atomic under the GIL), so members take chunks
        # without the group's lock
        self.claim = self.finished = None
        self.done = False       # every chunk reduced (set under the lock)
        self.extra = None       # values the first member attached (a folded _Once read)
        self.applies = [None] * size    # each member's ``apply`` (reduce_start)
        self.targets = None     # per array: None (its sum goes to ``result``) or the flat buffer updated in place
        # all_reduce_start: the first member's ((shape, dtype) per array), what it prepared from it
        # (InProcessGroup._prepare) and whether a later member's layout differed
        self.layout = self.prepared = None
        self.mismatch = False


def _check_bucket(ranks, values):
    first = values[0]
    for r, v in enumerate(values):
        if len(v) != len(first) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(v, first)):
            raise errors.InvalidArgumentError(
                f"all_reduce_start: rank {ranks[r]} gave {[(list(a.shape), str(a.dtype)) for a in v]} but rank "
                f"{ranks[0]} gave {[(list(a.shape), str(a.dtype)) for a in first]}")


def _chunks(arrays, members=1, whole=()):
    """``(array index, lo, hi, owner)`` over the flattened arrays: each array cut at the members'
    balanced row bounds (``layout.balanced_bounds`` of its first axis: ``owner`` is the member
    whose rows the chunk holds, the member a reduce-scatter hands them to), then into pieces of
    :data:`REDUCE_CHUNK` elements at most. A 0-d array is one chunk of member 0. The arrays whose
    index is in ``whole`` (small sums no update is applied to, :data:`WHOLE_BELOW`) are one chunk
    each, of member ``index % members``: cut at the rows they were a chunk per member of a few
    hundred elements, each costing its member the per-chunk Python of a large one (a bias)."""
    out = []
    for k, a in enumerate(arrays):
        if a.ndim == 0 or a.size == 0 or k in whole:
            parts = [(0, a.size, k % members if k in whole else 0)]
        else:
            cols = a.size // a.shape[0]
            parts = [(lo * cols, hi * cols, j) for j, (lo, hi) in enumerate(balanced_bounds(a.shape[0], members))]
        for lo, hi, j in parts:
            out += [(k, c, min(c + REDUCE_CHUNK, hi), j) for c in range(lo, hi, REDUCE_CHUNK)]
    return out


def _orders(chunks, members):
    """Per member, the order it takes chunks in: its own rows' chunks first (the sums of the rows
    a ZeRO-1 update reads are then fresh in the cache of the core that updates them), then the
    next members' in turn (so two members helping each other start at different places)."""
    return [[c for j in range(members) for c, chunk in enumerate(chunks) if chunk[3] == (i + j) % members]
            for i in range(members)]


def _reduce_chunk(values, out, chunk, op):
    """``out[k].flat[lo:hi]`` = the members' values there, reduced in rank order (``all_reduce``'s bits).
    The first two members' values go straight into ``out`` (one pass over the chunk where a copy
    of the first and then the sum took two: the same additions in the same order, the same bits)."""
    k, lo, hi = chunk[:3]
    dst = out[k].reshape(-1)[lo:hi]
    fn = _REDUCE[op]
    first = values[0][k].reshape(-1)[lo:hi]
    if len(values) == 1:
        np.copyto(dst, first)
        return
    fn(first, values[1][k].reshape(-1)[lo:hi], out=dst)
    for v in values[2:]:
        fn(dst, v[k].reshape(-1)[lo:hi], out=dst)


def _targets(applies, arrays, op):
    """(Lock held, every member deposited.) Per array of the bucket the target its sum is
    applied to, or None: only where every member gave the same ``apply`` object, the reduction is a
    sum and the target has the array's size and dtype (else every sum goes to the result)."""
    spec = applies[0]
    if spec is None or op != "sum" or any(a is not spec for a in applies):
        return None
    got = list(spec.targets())
    got += [None] * (len(arrays) - len(got))
    return [t if t is not None and t.size == a.size and t.dtype == a.dtype else None for t, a in zip(got, arrays)]


def _finish(rnd):
    """(Lock held.) Every chunk of ``rnd`` is reduced: its sums become read-only and final."""
    for a in rnd.result:
        if a is not None:       # None: an array applied in place (_apply_chunk), no sum kept
            a.flags.writeable = False
    rnd.values = None
    rnd.done = True


class _Pending:
    """One member's handle on a reduction started with :meth:`InProcessGroup.reduce_start`."""

    __slots__ = ("group", "index", "seq", "rnd", "timeout", "op")

    def __init__(self, group, index, seq, rnd, timeout, op):
        self.group, self.index, self.seq, self.rnd, self.timeout, self.op = group, index, seq, rnd, timeout, op

    def wait(self):
        return self.group.reduce_wait(self)

    def attach(self, values):
        """The first member's extra values (a folded ``_Once`` read) for every member's wait."""
        self.group.attach(self, values)

    def extras(self, count):
        """The ``count`` values the first member attached, in order (waits for them)."""
        return self.group.extras(self, count)


class InProcessGroup:
    """A group of in-process ranks (threads): the rendezvous all members' communicators share."""

    def __init__(self, ranks, timeout=None):
        self.ranks = tuple(int(r) for r in ranks)
        self.timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        self._cond = threading.Condition()
        self._rounds = {}
        self._seq = [0] * len(self.ranks)
        self._mail = {}
        self._failure = None
        self._chunk_lists = {}      # bucket layout -> its chunks (all_reduce_start)
        self._kept = {}             # bucket layout -> which sums its last round kept (_prepare)
        self._bell = meet_spin.Bell()   # rung when a round's chunks are handed out (a waiter's spin)

    @property
    def size(self):
        return len(self.ranks)

    def communicator(self, index):
        """Member ``index``'s end of the group."""
        return InProcessCommunicator(self, index)

    def abort(self, reason):
        """Wakes every waiting member with :class:`CollectiveAbortedError` (``reason``: text);
        the group stays unusable (its owner replaces it)."""
        with self._cond:
            if self._failure is None:
                self._failure = reason
            self._cond.notify_all()

    def _check_failed(self):
        if self._failure is not None:
            raise CollectiveAbortedError(f"collective on ranks {list(self.ranks)} abandoned: {self._failure}")

    def _wait(self, done, what, missing, timeout):
        """Waits (lock held) until ``done()``; on timeout aborts the group and raises, naming
        ``missing()``."""
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while not done():
            self._check_failed()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                gone = missing()
                msg = (f"{what} on ranks {list(self.ranks)}: ranks {gone} did not arrive within {limit:g} s. "
                       "Hint: every rank of a group must make the same collective calls in the same order")
                self._failure = f"a timeout ({what}; ranks {gone} did not arrive)"
                self._cond.notify_all()
                raise CollectiveTimeoutError(msg, gone)
            self._cond.wait(remaining)

    def _deposit(self, index, kind, value):
        """(Lock held.) Member ``index``'s ``value`` for its next call ``kind``: ``(seq, round)``."""
        self._check_failed()
        seq = self._seq[index]
        self._seq[index] = seq + 1
        rnd = self._rounds.get(seq)
        if rnd is None:
            rnd = self._rounds[seq] = _Round(len(self.ranks), kind)
        self._check_kind(rnd, index, seq, kind)
        rnd.values[index] = value
        rnd.kinds[index] = kind
        return seq, rnd

    def exchange(self, index, kind, value, timeout=None):
        """Deposits member ``index``'s ``value`` for its next call ``kind``; returns every
        member's value once all arrived (read-only: build a fresh result from them)."""
        with self._cond:
            seq, rnd = self._deposit(index, kind, value)
            self._cond.notify_all()
            self._wait(lambda: all(k is not None for k in rnd.kinds), f"{kind} (call #{seq})",
                       lambda: [self.ranks[i] for i, k in enumerate(rnd.kinds) if k is None], timeout)
            values = list(rnd.values)
            rnd.left -= 1
            if rnd.left == 0:
                del self._rounds[seq]
        return values

    def reduce_start(self, index, arrays, op="sum", timeout=None, apply=None):
        """Deposits member ``index``'s bucket (a list of contiguous arrays) for its next call and
        returns at once with a handle (matched by call order with the other collectives, like
        :meth:`exchange`). The sums are computed at the members' waits: each member waiting
        takes chunks of at most :data:`REDUCE_CHUNK` elements not yet taken, its own rows'
        first (the rows a reduce-scatter hands it, :func:`_chunks`), and reduces each over every
        member's arrays in rank order (so all get ``all_reduce``'s bits): the work is shared by
        whoever is there, a member ahead of the others keeps working until its wait, and a
        ZeRO-1 update reads sums its own core wrote where its member was there in time.

        ``apply``: where every member passes the same object, its ``targets()`` (asked once, when
        the last member deposits) names per array a target (or None: an object with the array's
        ``size`` and ``dtype``) and ``scale(pending, dtype)`` the factors: a member reducing a
        chunk of such an array calls ``apply_chunk(values, target, chunk, factors, scratch)``
        instead of keeping the sum (``fused_sgd.BucketUpdate``: an optimizer step on a weight the
        members share, e.g. ``w -= sum * lr`` there); the wait gives None for that array."""
        kind = f"all_reduce_start({op})"
        with self._cond:
            seq, rnd = self._deposit(index, kind, arrays)
            rnd.applies[index] = apply
            layout = tuple((a.shape, a.dtype) for a in arrays)
            if rnd.layout is None:
                # the first member, ahead of the others (it waits for them next): it prepares the
                # round from its own layout, keeping the sums the last round of that layout kept
                rnd.layout = layout
                self._prepare(rnd, arrays, self._kept.get(layout))
            elif layout != rnd.layout:
                rnd.mismatch = True     # (named by the last member, every member's layout at hand)
            if all(k is not None for k in rnd.kinds):
                self._publish(rnd, seq, op)
        return _Pending(self, index, seq, rnd, timeout, op)

    def _prepare(self, rnd, arrays, kept):
        """(Lock held.) What a round of ``rnd.layout`` (a member's ``arrays``) needs where ``kept`` are
        its sums kept (per array True, False for one applied to a target; None: every one): the
        sums' arrays, the chunk list (made once per layout and kept sums: the same every step), each
        member's order, the longest chunk and the chunks' counters. Made by the first member to start
        the bucket, while the others still compute, not by the last one, which every member then
        waits for: it only checks and hands out the round (:meth:`_publish`; a steady MLP step's last
        member took ~140 µs of thread CPU, 40 of them this, on the AMD EPYC of session 24)."""
        key = (REDUCE_CHUNK, rnd.layout, kept)
        got = self._chunk_lists.get(key)
        if got is None:
            small = min(WHOLE_BELOW, REDUCE_CHUNK)
            whole = {k for k, a in enumerate(arrays) if a.size <= small and (kept is None or kept[k])}
            chunks = _chunks(arrays, len(self.ranks), whole) if whole else _chunks(arrays, len(self.ranks))
            got = self._chunk_lists[key] = (chunks, _orders(chunks, len(self.ranks)),
                                            max((c[2] - c[1] for c in chunks), default=0))
        result = [np.empty(a.shape, a.dtype) if kept is None or kept[k] else None for k, a in enumerate(arrays)]
        rnd.prepared = (kept, result, got, [itertools.count() for _ in got[0]])

    def _publish(self, rnd, seq, op):
        """(Lock held, every member deposited.) Checks the members' layouts, asks for the targets
        (:func:`_targets`: only now, every member's reads of the weights being done), prepares the
        round again where they apply other arrays than the prepared ones, and hands the chunks out."""
        if rnd.mismatch:
            try:
                _check_bucket(self.ranks, rnd.values)
            except errors.OpError as e:
                self._failure = f"a failed all_reduce_start (call #{seq}): {e.message}"
                self._cond.notify_all()
                raise
        rnd.targets = targets = _targets(rnd.applies, rnd.values[0], op)
        kept = None if targets is None else tuple(t is None for t in targets)
        if kept != rnd.prepared[0]:
            self._kept[rnd.layout] = kept
            self._prepare(rnd, rnd.values[0], kept)
        _, rnd.result, (rnd.chunks, rnd.orders, rnd.longest), rnd.claim = rnd.prepared
        rnd.finished = itertools.count(1)
        if not rnd.chunks:       # nothing to reduce (empty arrays)
            _finish(rnd)
        self._cond.notify_all()
        self._bell.ring()

    def reduce_wait(self, pending):
        """The reduced bucket of ``pending``: waits for every member's deposit, reduces chunks
        until none is left, waits for the chunks others took; read-only arrays shared by all.
        Taking a chunk and counting it done take no lock (``_Round.claim``/``finished``): two
        ranks reducing side by side met on the group's lock twice a chunk (a futex wait and
        wake each time they collided); the lock is taken to wait and, by the member finishing
        the last chunk, to wake the others."""
        rnd, seq, op = pending.rnd, pending.seq, pending.op
        missing = lambda: [self.ranks[i] for i, k in enumerate(rnd.kinds) if k is None]  # noqa: E731
        what = f"{rnd.kind} (call #{seq})"
        if rnd.chunks is None:
            seen, ns = self._bell.seen(), meet_spin.spin_ns()
            if ns and rnd.chunks is None:   # (the last member's _publish rings after handing the chunks out)
                meet_spin.spin(self._bell, seen, ns)
            with self._cond:
                self._wait(lambda: rnd.chunks is not None, what, missing, pending.timeout)
        chunks, values, n = rnd.chunks, rnd.values, len(rnd.chunks)
        claim, finished, targets = rnd.claim, rnd.finished, rnd.targets
        spec = None if targets is None else rnd.applies[0]
        flat = outs = None
        per_dtype = {}
        for i in rnd.orders[pending.index]:
            if self._failure is not None:
                self._check_failed()
            if next(claim[i]):
                continue        # another member took it
            if flat is None:    # the bucket's arrays flat, once a wait (not two reshapes a chunk)
                flat = [[a.reshape(-1) for a in v] for v in values]
                outs = [None if a is None else a.reshape(-1) for a in rnd.result]
            chunk = chunks[i]
            target = None if spec is None else targets[chunk[0]]
            if target is None:
                _reduce_chunk(flat, outs, chunk, op)
            else:
                got = per_dtype.get(target.dtype)
                if got is None:         # once per wait and dtype: the factors (from values the first member
                    # attached: a learning rate, a step), as the update kernel makes them, and a scratch chunk
                    got = per_dtype[target.dtype] = (spec.scale(pending, target.dtype),
                                                     np.empty(min(REDUCE_CHUNK, rnd.longest), target.dtype))
                spec.apply_chunk(flat, target, chunk, *got)
            if next(finished) == n:
                with self._cond:
                    _finish(rnd)
                    self._cond.notify_all()
        with self._cond:
            if not rnd.done:
                self._wait(lambda: rnd.done, what, lambda: [], pending.timeout)
            rnd.left -= 1
            if rnd.left == 0:
                del self._rounds[seq]
            return rnd.result

    def attach(self, pending, values):
        """Member ``pending.index``'s ``values`` ride on the round of ``pending`` (no rendezvous of
        their own): every member's :meth:`extras` returns them."""
        with self._cond:
            pending.rnd.extra = (pending.rnd.extra or []) + list(values)
            self._cond.notify_all()

    def extras(self, pending, count):
        rnd = pending.rnd
        with self._cond:
            self._wait(lambda: len(rnd.extra or ()) >= count, f"{rnd.kind} (call #{pending.seq}), its attached values",
                       lambda: [self.ranks[0]], pending.timeout)
            return rnd.extra[:count]

    def _check_kind(self, rnd, index, seq, kind):
        if kind != rnd.kind:
            other = rnd.kinds.index(rnd.kind)
            msg = (f"collective mismatch on ranks {list(self.ranks)} (call #{seq}): rank {self.ranks[index]} "
                   f"called {kind} while rank {self.ranks[other]} called {rnd.kind}")
            self._failure = msg
            self._cond.notify_all()
            raise errors.InternalError(msg)

    def post(self, src, dst, tag, value):
        with self._cond:
            self._check_failed()
            self._mail.setdefault((src, dst, tag), deque()).append(value)
            self._cond.notify_all()

    def take(self, src, dst, tag, timeout=None):
        with self._cond:
            box = self._mail.setdefault((src, dst, tag), deque())
            self._wait(lambda: bool(box), f"recv (tag {tag}) on rank {self.ranks[dst]}",
                       lambda: [self.ranks[src]], timeout)
            return box.popleft()


class InProcessCommunicator(Communicator):
    """Member ``index`` of an :class:`InProcessGroup`."""

    def __init__(self, group, index, timeout=None):
        self.group = group
        self.index = int(index)
        self.ranks = group.ranks
        self.timeout = timeout

    def _x(self, kind, value):
        return self.group.exchange(self.index, kind, value, self.timeout)

    def all_reduce(self, x, op="sum"):
        x = np.asarray(x)
        if self.size == 1:
            return np.array(x)
        if x.nbytes <= SMALL_BYTES:
            # one rendezvous: every rank reduces all values, in rank order (so all get the same bits)
            values = self._x("all_reduce", (x.shape, x.dtype, op, x))
            for r, (shape, dtype, o, _) in enumerate(values):
                if (shape, dtype, o) != (x.shape, x.dtype, op):
                    raise errors.InvalidArgumentError(
                        f"all_reduce: rank {self.ranks[r]} gave shape {list(shape)} {dtype} ({o}) but rank "
                        f"{self.rank} gave {list(x.shape)} {x.dtype} ({op})")
            out = np.array(values[0][3])
            for v in values[1:]:
                _REDUCE[op](out, v[3], out=out)
            return out
        # reduce-scatter then all-gather of the flat value: each rank reduces one chunk
        flat = x.reshape(-1)
        mine = self.reduce_scatter(flat, op, 0)
        return self.all_gather(mine, 0).reshape(x.shape)

    def reduce_scatter(self, x, op="sum", axis=0):
        x = np.asarray(x)
        fn = _REDUCE[op]
        shapes = self._x("reduce_scatter", (x.shape, x.dtype, op, axis, x))
        for r, (shape, dtype, o, a, _) in enumerate(shapes):
            if (shape, dtype, o, a) != (x.shape, x.dtype, op, axis):
                raise errors.InvalidArgumentError(
                    f"reduce_scatter: rank {self.ranks[r]} gave shape {list(shape)} {dtype} ({o}, axis {a}) but "
                    f"rank {self.rank} gave {list(x.shape)} {x.dtype} ({op}, axis {axis})")
        lo, hi = balanced_bounds(x.shape[axis], self.size)[self.index]
        index = (slice(None),) * axis + (slice(lo, hi),)
        out = np.array(shapes[0][4][index])
        for v in shapes[1:]:
            fn(out, v[4][index], out=out)
        return out

    def all_gather(self, x, axis=0):
        x = np.asarray(x)
        values = self._x("all_gather", x)
        for r, v in enumerate(values):
            if v.ndim != x.ndim or v.dtype != x.dtype or any(
                    a != b for d, (a, b) in enumerate(zip(v.shape, x.shape)) if d != axis):
                raise errors.InvalidArgumentError(
                    f"all_gather along axis {axis}: rank {self.ranks[r]} gave shape {list(v.shape)} {v.dtype}, "
                    f"rank {self.rank} gave {list(x.shape)} {x.dtype}")
        return np.concatenate(values, axis=axis)

    def all_to_all(self, chunks, axis=None):
        if len(chunks) != self.size:
            raise ValueError(f"all_to_all: {len(chunks)} chunks for a group of {self.size} ranks")
        values = self._x("all_to_all", [np.asarray(c) for c in chunks])
        if axis is not None:
            return np.concatenate([v[self.index] for v in values], axis=axis)
        return [np.array(v[self.index]) for v in values]

    def broadcast(self, x, root=0):
        values = self._x("broadcast", np.asarray(x) if self.index == root else None)
        return np.array(values[root])

    def send(self, x, dst, tag=0):
        self.group.post(self.index, dst, tag, np.array(x))

    def recv(self, src, tag=0):
        return self.group.take(src, self.index, tag, self.timeout)

    def barrier(self):
        self._x("barrier", None)

    def all_gather_rows(self, arrays):
        # one rendezvous; each member copies the others' rows straight from their buffers (no
        # member writes its own rows again before every member passed a later collective)
        values = self._x("all_gather_rows", [(a.shape, a.dtype, a) for a in arrays])
        for r, v in enumerate(values):
            if [(s, d) for s, d, _ in v] != [(a.shape, a.dtype) for a in arrays]:
                raise errors.InvalidArgumentError(
                    f"all_gather_rows: rank {self.ranks[r]} gave {[(list(s), str(d)) for s, d, _ in v]} but rank "
                    f"{self.rank} gave {[(list(a.shape), str(a.dtype)) for a in arrays]}")
        for k, a in enumerate(arrays):
            for j, (lo, hi) in enumerate(balanced_bounds(a.shape[0], self.size)):
                # a member whose buffer is this one (ranks sharing a replicated weight's storage,
                # plan_ops._shared_storage) wrote its rows here already
                if j != self.index and hi > lo and values[j][k][2] is not a:
                    a[lo:hi] = values[j][k][2][lo:hi]

    def all_reduce_start(self, arrays, op="sum", apply=None):
        arrays = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in map(np.asarray, arrays)]
        if self.size == 1:
            return _Ready([_read_only(np.array(a)) for a in arrays])
        start = getattr(self.group, "reduce_start", None)
        if start is None:       # a group giving only the rendezvous primitives (shm, Ray): reduce now
            return Communicator.all_reduce_start(self, arrays, op)
        if apply is None:
            return start(self.index, arrays, op, self.timeout)
        return start(self.index, arrays, op, self.timeout, apply=apply)

    def __repr__(self):
        return f"<InProcessCommunicator rank {self.rank} ({self.index} of {list(self.ranks)})>"
