"""In-process ranks: one executor thread and one :class:`~tensorweave.runtime.runtime.Runtime`
per rank, groups of ranks with their communicators, and running a function on all ranks
of a placement at once.

:meth:`World.run` calls ``fn(index)`` on each rank's own thread concurrently and returns
the results in order. When a rank raises, the groups it may block are aborted (so no rank
waits for a timeout), and the original exception is raised on the caller's thread with
``.rank`` set and a note naming the rank.

Several controllers may drive the world at once (a pipeline's stages, one controller thread
each): a run holds a lock per rank it uses (taken in rank order, so two runs never wait for
each other in a cycle), so runs on disjoint rank sets overlap and runs sharing a rank take
turns. Every group's members therefore see the same runs in the same order, which keeps calls
on a group matched; a failure aborts only the groups of the failing run's ranks.

>>> world = World()
>>> world.run([0, 1, 2], lambda i: world.group([0, 1, 2]).communicator(i).all_gather([i]).tolist())
[[0, 1, 2], [0, 1, 2], [0, 1, 2]]
>>> try:
...     world.run([0, 1], lambda i: 1 // (i - 1))
... except ZeroDivisionError as e:
...     print("rank", e.rank)
rank 1
"""
import itertools
import queue
import threading

from tensorweave.core import context
from tensorweave.distribute import meet_spin
from tensorweave.distribute.collective import CollectiveAbortedError, InProcessGroup
from tensorweave.runtime.runtime import Runtime

_local = threading.local()


def current_rank():
    """The :class:`Rank` whose thread this is, or None on other threads."""
    return getattr(_local, "rank", None)


class RankComms:
    """``comm_for(rank_ids)``: rank ``rank``'s communicator in the world's group of those ranks.
    It is the rank runtime's ``("communicator", "world")`` resource, which planned graphs' boxing
    nodes use. A group's communicator is kept per rank tuple while the world's groups stay the same
    (``World.generation``: a failed run or a new timeout replaces them) and no rank has failed: a
    planned step's collectives ask for it every step, and looking the group up (the world's lock)
    and making a communicator each time was most of a bucket start's own work."""

    __slots__ = ("world", "rank", "_kept")

    def __init__(self, world, rank):
        self.world, self.rank = world, rank
        self._kept = {}         # rank tuple -> (world generation, communicator)

    def __call__(self, ranks):
        world = self.world
        key = ranks if type(ranks) is tuple else tuple(ranks)
        kept = self._kept.get(key)
        if kept is not None and kept[0] == world.generation and not world._failure:
            return kept[1]
        generation = world.generation       # read first: a replacement meanwhile makes the entry stale
        key = tuple(int(r) for r in key)
        comm = world.group(key).communicator(key.index(self.rank))
        if not world._failure:              # a failed rank's groups start aborted: never kept
            self._kept[key] = (generation, comm)
        return comm


class Rank:
    """One in-process rank: its id, its runtime and the thread that runs its work (a queue of
    jobs; lighter than a thread pool, so an eager global op costs fewer hand-offs)."""

    def __init__(self, rank, world=None):
        self.rank = int(rank)
        self.runtime = Runtime(f"rank{rank}", rank=rank, cpu_count=1)
        if world is not None:
            self.runtime.add_resource("communicator", "world", RankComms(world, self.rank))
        self._inbox = queue.SimpleQueue()
        self._bell = meet_spin.Bell()       # rung by post: a spinning loop takes the job without a wake-up
        self._thread = threading.Thread(target=self._loop, name=f"tw-rank{rank}", daemon=True)
        self._thread.start()

    def _loop(self):
        _local.rank = self
        self.runtime.bind_thread()     # eager work here draws from this rank's seeds, tiles use its pool
        while True:
            seen, ns = self._bell.seen(), meet_spin.spin_ns()
            if ns and self._inbox.empty():
                meet_spin.spin(self._bell, seen, ns)
            job = self._inbox.get()
            if job is None:
                return
            fn, index, latch = job
            try:
                result = fn(index)
            except BaseException as e:  # noqa: BLE001 - handed to the caller with its rank
                latch.finish(index, None, e)
            else:
                latch.finish(index, result, None)

    def post(self, fn, index, latch):
        self._inbox.put((fn, index, latch))
        self._bell.ring()                   # (after the put: a spin that sees it finds the job)

    def run_here(self, fn, index, latch):
        """Runs ``fn(index)`` on the calling thread as this rank (its runtime, ``current_rank()``)
        and finishes ``latch`` like the rank's own thread would (``World.run(..., inline=True)``)."""
        saved = getattr(_local, "rank", None)
        _local.rank = self
        # Runtime.as_default's body without its generator (~2 µs a step on the controller)
        saved_runtime, context.ctx.runtime = context.ctx.runtime, self.runtime
        result = error = None
        try:
            result = fn(index)
        except BaseException as e:  # noqa: BLE001 - handed to the caller with its rank
            error = e
        finally:
            context.ctx.runtime = saved_runtime
            _local.rank = saved
        latch.finish(index, result, error)

    def shutdown(self):
        self._inbox.put(None)
        self._thread.join()
        self.runtime.shutdown()

    def __repr__(self):
        return f"<Rank {self.rank}>"


class _Latch:
    """Results of one :meth:`World.run`, reused run after run by its :class:`_Meeting`: each rank
    fills its slot; the last to finish releases ``done`` (a lock the waiting caller holds between
    runs: one wake-up, where a condition allocated a lock per wait and took its own lock per
    finish); the first failure aborts the groups at once (from the failing rank's thread), so no
    rank waits for a timeout. ``next()`` of an ``itertools.count`` is one C call (atomic under the
    GIL): the finishing ranks count without a lock."""

    __slots__ = ("results", "errors", "n", "count", "done", "failed", "on_error")

    def __init__(self, n, on_error):
        self.n, self.on_error = n, on_error
        self.done = threading.Lock()
        self.done.acquire()
        self.reset()

    def reset(self):
        self.results, self.errors = [None] * self.n, [None] * self.n
        self.count = itertools.count(1)
        self.failed = False

    def finish(self, index, result, error):
        if error is not None:
            self.failed = True
            self.on_error(index, error)
        self.results[index], self.errors[index] = result, error
        if next(self.count) == self.n:
            self.done.release()

    def wait(self):
        self.done.acquire()             # held again: ready for the next run


class _Meeting:
    """One rank list's :meth:`World.run` prepared once: its ranks, the locks of the ranks it uses
    (rank order), and a latch reused every run (a run holds those locks, so no two runs share it)."""

    __slots__ = ("world", "ranks", "used", "rank_objs", "locks", "latch", "clean")

    def __init__(self, world, ranks):
        self.world, self.ranks = world, ranks
        self.used = sorted(set(ranks))
        self.rank_objs = [world.rank(r) for r in ranks]
        self.locks = world._locks_of(self.used)
        self.latch = _Latch(len(ranks), self.on_error)
        self.clean = True       # False from posting until every rank finished: then not reused

    def on_error(self, index, error):
        self.world._abort(self.used, f"rank {self.ranks[index]} raised {type(error).__name__}: {error}")

    def run(self, fn, inline):
        """The ranks' results (the caller holds :attr:`locks`); raises the first rank's error."""
        latch, objs = self.latch, self.rank_objs
        if not objs:
            return []
        latch.reset()
        self.clean = False
        for i in range(1 if inline else 0, len(objs)):
            objs[i].post(fn, i, latch)
        if inline:
            objs[0].run_here(fn, 0, latch)
        latch.wait()
        self.clean = True
        if latch.failed:
            _raise_first(self.ranks, latch.errors)
        return latch.results


def _raise_first(ranks, errors):
    """Raises the first rank's error that is not a :class:`CollectiveAbortedError` (those follow
    from another rank's failure), else the first one, with ``.rank`` and a note naming the rank."""
    first = None
    for r, e in zip(ranks, errors):
        if e is not None and (first is None or (isinstance(first[1], CollectiveAbortedError)
                                                and not isinstance(e, CollectiveAbortedError))):
            first = (r, e)
    rank, exc = first
    exc.rank = rank
    exc.add_note(f"(raised on rank {rank})")
    raise exc


class World:
    """The in-process ranks of this process (made on first use) and their groups."""

    def __init__(self, timeout=None):
        self.timeout = timeout
        self._ranks = {}
        self._groups = {}
        self._failure = {}         # rank -> why its current run failed: groups with it start aborted
        self._lock = threading.Lock()
        self._rank_locks = {}      # rank -> the lock a run holds while it uses that rank
        self._meetings = {}        # tuple of rank ids -> its _Meeting (World.run)
        self.generation = 0        # raised whenever groups are replaced (RankComms keeps communicators)

    def rank(self, r):
        with self._lock:
            obj = self._ranks.get(r)
            if obj is None:
                obj = self._ranks[r] = Rank(r, self)
            return obj

    def group(self, ranks):
        """The group of these rank ids (in this order), made once and reused."""
        key = tuple(int(r) for r in ranks)
        with self._lock:
            failed = next((self._failure[r] for r in key if r in self._failure), None)
            if failed is not None:
                # a rank of this run already failed: a group asked for now must not wait for it
                g = InProcessGroup(key, self.timeout)
                g.abort(failed)
                return g
            g = self._groups.get(key)
            if g is None:
                g = self._groups[key] = InProcessGroup(key, self.timeout)
            return g

    def set_timeout(self, seconds):
        """The timeout of collectives made from now on (None: the default)."""
        with self._lock:
            self.timeout = seconds
            self._groups.clear()
            self.generation += 1

    def run(self, ranks, fn, inline=False):
        """``[fn(0), fn(1), ...]`` with ``fn(i)`` run on rank ``ranks[i]``'s thread, all at once.
        ``inline``: the calling thread runs ``fn(0)`` itself, as rank ``ranks[0]`` (under its
        runtime; ``current_rank()`` is that rank meanwhile), after handing the others to their
        threads: one thread hand-off and wake-up less per run, and no third thread on the cores
        while the ranks work (a planned step's run, ``plan_function.RankPlans``). ``fn`` must not
        depend on which thread runs it beyond that (per-thread library settings: set and restore
        them, ``rank_threads.held``). A rank list's ranks, locks and latch are looked up once
        (:class:`_Meeting`): a planned step meets its ranks every step."""
        if current_rank() is not None:
            raise RuntimeError("World.run called from a rank thread: rank work must not start rank work "
                               "(it would wait for itself)")
        key = ranks if type(ranks) is tuple else tuple(ranks)
        meeting = self._meetings.get(key)
        if meeting is None:
            key = tuple(int(r) for r in key)
            meeting = _Meeting(self, key)
        locks = meeting.locks
        for lock in locks:          # in rank order: runs sharing ranks never wait in a cycle
            lock.acquire()
        try:
            if self._failure:
                with self._lock:
                    for r in meeting.used:
                        self._failure.pop(r, None)
            return meeting.run(fn, inline)
        finally:
            if meeting.clean:
                self._meetings[key] = meeting
            else:                   # interrupted while ranks ran: their latch may be finished late
                self._meetings.pop(key, None)
            for lock in reversed(locks):
                lock.release()

    def _locks_of(self, ranks):
        with self._lock:
            return [self._rank_locks.setdefault(r, threading.Lock()) for r in ranks]

    def _abort(self, ranks, reason):
        """Aborts the groups that contain any of ``ranks`` (the failing run's; no other run uses
        them now) and makes groups asked for by those ranks start aborted until their next run."""
        ranks = set(ranks)
        with self._lock:
            for r in ranks:
                self._failure[r] = reason
            self.generation += 1
            groups = [g for key, g in self._groups.items() if ranks.intersection(key)]
            self._groups = {key: g for key, g in self._groups.items() if not ranks.intersection(key)}
        for g in groups:
            g.abort(reason)

    def shutdown(self):
        with self._lock:
            ranks, self._ranks = list(self._ranks.values()), {}
            self._meetings = {}
        for r in ranks:
            r.shutdown()


_WORLD = World()


def default_world():
    """The process's in-process ranks."""
    return _WORLD


def set_collective_timeout(seconds):
    """Seconds a collective on in-process ranks waits for the others before it fails naming
    the ranks that did not arrive (None: the default, 120 s)."""
    _WORLD.set_timeout(seconds)
