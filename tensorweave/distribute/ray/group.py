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
"""
import asyncio

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

    def post(self, src, dst, tag, box):
        key = (src, dst, tag)
        self._mail.setdefault(key, []).append(box)
        self._mail_events.setdefault(key, asyncio.Event()).set()

    async def take(self, src, dst, tag, timeout):
        key = (src, dst, tag)
        box = self._mail.setdefault(key, [])
        ev = self._mail_events.setdefault(key, asyncio.Event())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not box:
            if self._failure is not None:
                return "aborted", self._failure
            ev.clear()
            try:
                await asyncio.wait_for(ev.wait(), max(deadline - loop.time(), 0))
            except asyncio.TimeoutError:
                return "timeout", [self.ranks[src]]
        return "ok", box.pop(0)


class RayGroup:
    """One member's view of a group of Ray workers: the ``exchange``/``post``/``take``
    primitives :class:`InProcessCommunicator` is written against, over the object store."""

    def __init__(self, ranks, rendezvous, timeout=None):
        self.ranks = tuple(int(r) for r in ranks)
        self.timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        self._rdv = rendezvous
        self._seq = 0

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

    def post(self, src, dst, tag, value):
        import ray
        self._rdv.post.remote(src, dst, tag, [ray.put(value)])

    def take(self, src, dst, tag, timeout=None):
        import ray
        limit = self.timeout if timeout is None else timeout
        status, payload = ray.get(self._rdv.take.remote(src, dst, tag, limit))
        return ray.get(self._result(status, payload, f"recv (tag {tag}) on rank {self.ranks[dst]}")[0])
