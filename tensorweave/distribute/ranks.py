"""In-process ranks: one executor thread and one :class:`~tensorweave.runtime.runtime.Runtime`
per rank, groups of ranks with their communicators, and running a function on all ranks
of a placement at once.

:meth:`World.run` calls ``fn(index)`` on each rank's own thread concurrently and returns
the results in order. When a rank raises, the groups it may block are aborted (so no rank
waits for a timeout), and the original exception is raised on the caller's thread with
``.rank`` set and a note naming the rank.

>>> world = World()
>>> world.run([0, 1, 2], lambda i: world.group([0, 1, 2]).communicator(i).all_gather([i]).tolist())
[[0, 1, 2], [0, 1, 2], [0, 1, 2]]
>>> try:
...     world.run([0, 1], lambda i: 1 // (i - 1))
... except ZeroDivisionError as e:
...     print("rank", e.rank)
rank 1
"""
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

from tensorweave.distribute.collective import CollectiveAbortedError, InProcessGroup
from tensorweave.runtime.runtime import Runtime

_local = threading.local()


def current_rank():
    """The :class:`Rank` whose thread this is, or None on other threads."""
    return getattr(_local, "rank", None)


class Rank:
    """One in-process rank: its id, its runtime and the thread that runs its work."""

    def __init__(self, rank):
        self.rank = int(rank)
        self.runtime = Runtime(f"rank{rank}", rank=rank, cpu_count=1)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"tw-rank{rank}",
                                          initializer=self._bind)

    def _bind(self):
        _local.rank = self

    def submit(self, fn, *args):
        return self._thread.submit(fn, *args)

    def shutdown(self):
        self._thread.shutdown(wait=True)
        self.runtime.shutdown()

    def __repr__(self):
        return f"<Rank {self.rank}>"


class World:
    """The in-process ranks of this process (made on first use) and their groups."""

    def __init__(self, timeout=None):
        self.timeout = timeout
        self._ranks = {}
        self._groups = {}
        self._lock = threading.Lock()
        self._run_lock = threading.Lock()

    def rank(self, r):
        with self._lock:
            obj = self._ranks.get(r)
            if obj is None:
                obj = self._ranks[r] = Rank(r)
            return obj

    def group(self, ranks):
        """The group of these rank ids (in this order), made once and reused."""
        key = tuple(int(r) for r in ranks)
        with self._lock:
            g = self._groups.get(key)
            if g is None:
                g = self._groups[key] = InProcessGroup(key, self.timeout)
            return g

    def set_timeout(self, seconds):
        """The timeout of collectives made from now on (None: the default)."""
        with self._lock:
            self.timeout = seconds
            self._groups.clear()

    def run(self, ranks, fn):
        """``[fn(0), fn(1), ...]`` with ``fn(i)`` run on rank ``ranks[i]``'s thread, all at once."""
        if current_rank() is not None:
            raise RuntimeError("World.run called from a rank thread: rank work must not start rank work "
                               "(it would wait for itself)")
        with self._run_lock:        # one controller at a time: calls on a group are matched by order
            futures = [self.rank(r).submit(fn, i) for i, r in enumerate(ranks)]
            first = None
            not_done = set(futures)
            while not_done:
                done, not_done = wait(not_done, return_when=FIRST_EXCEPTION)
                for fut in done:
                    e = fut.exception()
                    if e is None:
                        continue
                    r = ranks[futures.index(fut)]
                    if first is None or (isinstance(first[1], CollectiveAbortedError)
                                         and not isinstance(e, CollectiveAbortedError)):
                        first = (r, e)
                    self._abort(f"rank {r} raised {type(e).__name__}: {e}")
        if first is not None:
            rank, exc = first
            exc.rank = rank
            exc.add_note(f"(raised on rank {rank})")
            raise exc
        return [f.result() for f in futures]

    def _abort(self, reason):
        with self._lock:
            groups, self._groups = list(self._groups.values()), {}
        for g in groups:
            g.abort(reason)

    def shutdown(self):
        with self._lock:
            ranks, self._ranks = list(self._ranks.values()), {}
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
