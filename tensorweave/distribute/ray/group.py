"""Collectives between Ray actors: the rendezvous of :class:`~tensorweave.distribute.collective.InProcessGroup`
over Ray's object store, so the same communicator (and every boxing step built on it) runs
on worker processes and machines.

Each member puts its buffer in its own node's object store and hands the *reference* to
the group's rendezvous actor (a small async actor, one per group, no CPU reserved); when
all members have arrived each gets every member's reference and reads what it needs. On
one node the reads are zero-copy views of shared memory; across nodes Ray moves the
bytes worker to worker — never through the driver. Calls match by their order on each
member (SPMD), a member calling a different collective than the others is an error naming
both, and every wait has a timeout whose error names the ranks that did not arrive.

Point-to-point messages (``post``/``take``) carry a sequence number per ``(src, dst, tag)``:
the rendezvous is an async actor whose calls Ray does not run in submission order, so two
posts of one sender with one tag can reach it swapped; ``take`` returns message number ``n``
for its ``n``-th call, whatever order they arrived in.

>>> async def demo():
...     rdv = Rendezvous((0, 1))
...     rdv.post(0, 1, "t", 1, ["second"])     # arrives first
...     rdv.post(0, 1, "t", 0, ["first"])
...     return [await rdv.take(0, 1, "t", n, 1.0) for n in (0, 1)]
>>> asyncio.run(demo())
[('ok', ['first']), ('ok', ['second'])]
"""
import asyncio
import threading

from tensorweave.core import errors
from tensorweave.distribute.collective import (DEFAULT_TIMEOUT, CollectiveAbortedError, CollectiveTimeoutError,
                                               InProcessCommunicator)


class _Round:
    __slots__ = ("kind", "values", "arrived", "left", "done")

    def __init__(self, size, kind):
        self.kind = kind
        self.values = [None] * size
        self.arrived = [False] * size
        self.left = size
        self.done = asyncio.Event()


class Rendezvous:
    """The meeting point of one group (run as an async Ray actor; plain class for tests)."""

    def __init__(self, ranks):
        self.ranks = tuple(ranks)
        self._rounds = {}
        self._mail = {}
        self._mail_events = {}
        self._failure = None
        self._failed = asyncio.Event()

    def _fail(self, reason):
        if self._failure is None:
            self._failure = reason
        self._failed.set()
        for rnd in self._rounds.values():
            rnd.done.set()
        for ev in self._mail_events.values():
            ev.set()

    def abort(self, reason):
        self._fail(reason)

    def failure(self):
        """Why the group failed, or None (polled by the shared-memory transport's long waits)."""
        return self._failure

    async def exchange(self, seq, index, kind, box, timeout):
        """``box`` (a one-element list, so Ray passes the reference through unresolved) for
        member ``index``'s call number ``seq``; returns ``("ok", boxes)``, or ``("timeout",
        missing ranks)``, ``("mismatch", message)``, ``("aborted", reason)``."""
        if self._failure is not None:
            return "aborted", self._failure
        rnd = self._rounds.get(seq)
        if rnd is None:
            rnd = self._rounds[seq] = _Round(len(self.ranks), kind)
        if kind != rnd.kind:
            other = rnd.arrived.index(True)
            msg = (f"collective mismatch on ranks {list(self.ranks)} (call #{seq}): rank {self.ranks[index]} "
                   f"called {kind} while rank {self.ranks[other]} called {rnd.kind}")
            self._fail(msg)
            return "mismatch", msg
        rnd.values[index] = box
        rnd.arrived[index] = True
        if all(rnd.arrived):
            rnd.done.set()
        try:
            await asyncio.wait_for(rnd.done.wait(), timeout)
        except asyncio.TimeoutError:
            missing = [self.ranks[i] for i, a in enumerate(rnd.arrived) if not a]
            self._fail(f"a timeout ({kind}, call #{seq}; ranks {missing} did not arrive)")
            return "timeout", missing
        if self._failure is not None and not all(rnd.arrived):
            return "aborted", self._failure
        values = list(rnd.values)
        rnd.left -= 1
        if rnd.left == 0:
            del self._rounds[seq]
        return "ok", values

    def post(self, src, dst, tag, seq, box):
        """Message number ``seq`` (counted per ``(src, dst, tag)`` by the sender) from member
        ``src`` to ``dst``; kept by its number, as posts may arrive out of order."""
        key = (src, dst, tag)
        self._mail.setdefault(key, {})[seq] = box
        self._mail_events.setdefault(key, asyncio.Event()).set()

    async def take(self, src, dst, tag, seq, timeout):
        """Message number ``seq`` from ``src`` to ``dst`` with ``tag`` (waits until it is posted)."""
        key = (src, dst, tag)
        box = self._mail.setdefault(key, {})
        ev = self._mail_events.setdefault(key, asyncio.Event())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while seq not in box:
            if self._failure is not None:
                return "aborted", self._failure
            ev.clear()
            try:
                await asyncio.wait_for(ev.wait(), max(deadline - loop.time(), 0))
            except asyncio.TimeoutError:
                return "timeout", [self.ranks[src]]
        value = box.pop(seq)
        if not box:
            del self._mail[key]           # a tag used once leaves nothing behind
        return "ok", value


class RayGroup:
    """One member's view of a group of Ray workers: the ``exchange``/``post``/``take``
    primitives :class:`InProcessCommunicator` is written against, over the object store."""

    def __init__(self, ranks, rendezvous, timeout=None):
        self.ranks = tuple(int(r) for r in ranks)
        self.timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        self._rdv = rendezvous
        self._seq = 0
        # per (src, dst, tag): messages posted by this process, and taken by it (the numbers the
        # rendezvous orders them by); a lock as a member's threads may send at once
        self._posted, self._taken = {}, {}
        self._count_lock = threading.Lock()

    @property
    def size(self):
        return len(self.ranks)

    def communicator(self, index):
        """Member ``index``'s end of the group (one per worker process: ``exchange`` counts
        this member's calls)."""
        return InProcessCommunicator(self, index)

    def abort(self, reason):
        self._rdv.abort.remote(reason)

    def _result(self, status, payload, what):
        if status == "ok":
            return payload
        if status == "timeout":
            raise CollectiveTimeoutError(
                f"{what} on ranks {list(self.ranks)}: ranks {payload} did not arrive within {self.timeout:g} s. "
                "Hint: every rank of a group must make the same collective calls in the same order", payload)
        if status == "mismatch":
            raise errors.InternalError(payload)
        raise CollectiveAbortedError(f"collective on ranks {list(self.ranks)} abandoned: {payload}")

    def shm_group(self, index, prefix):
        """Member ``index``'s :class:`~tensorweave.distribute.shm.ShmGroup` of the same ranks:
        segment names follow ``prefix``; this rendezvous orders the setup (no one attaches a
        segment before it exists), checks that every member is on this node, and its failure
        (an abort from the driver) ends the shared-memory waits too."""
        import ray
        from tensorweave.distribute.shm import ShmGroup
        node = ray.get_runtime_context().get_node_id()

        def share(pid):
            nodes = [n for n, _ in self.exchange(index, "shm_setup", (node, pid))]
            if len(set(nodes)) > 1:
                raise errors.FailedPreconditionError(
                    f"the shared-memory transport needs every rank of {list(self.ranks)} on one node; they are on "
                    f"{len(set(nodes))} nodes. Hint: use TW_RAY_TRANSPORT=object_store (or let connect choose)")

        def check_abort():
            import ray
            return ray.get(self._rdv.failure.remote())
        group = ShmGroup(self.ranks, index, prefix, self.timeout, check_abort)
        try:
            return group.connect(share)
        except BaseException:
            group.close()
            raise

    def exchange(self, index, kind, value, timeout=None):
        import ray
        limit = self.timeout if timeout is None else timeout
        seq, self._seq = self._seq, self._seq + 1
        ref = ray.put(value)
        status, payload = ray.get(self._rdv.exchange.remote(seq, index, kind, [ref], limit))
        boxes = self._result(status, payload, f"{kind} (call #{seq})")
        return ray.get([b[0] for b in boxes])

    def _next(self, counts, key):
        with self._count_lock:
            n = counts[key] = counts.get(key, -1) + 1
        return n

    def post(self, src, dst, tag, value):
        import ray
        ref = ray.put(value)
        self._rdv.post.remote(src, dst, tag, self._next(self._posted, (src, dst, tag)), [ref])

    def take(self, src, dst, tag, timeout=None):
        import ray
        limit = self.timeout if timeout is None else timeout
        seq = self._next(self._taken, (src, dst, tag))
        status, payload = ray.get(self._rdv.take.remote(src, dst, tag, seq, limit))
        return ray.get(self._result(status, payload, f"recv (tag {tag}, message #{seq}) on rank {self.ranks[dst]}")[0])
