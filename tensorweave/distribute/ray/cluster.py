"""``tw.distribute.connect``: ranks as Ray actors (one per rank), and running a function on all.

``connect()`` with no address starts a local Ray instance bound to loopback, with the
dashboard off and Ray's token authentication on; ``address="auto"`` or ``"ray://host:port"``
attaches to a running cluster (``ray start``). Each rank is a :class:`RankWorker` actor in
one placement group (``"PACK"``: fill a node first, ``"SPREAD"``: one rank per node where
possible) holding its rank id and its communicators. :meth:`Cluster.run` calls
``fn(worker, *args)`` on every rank at once (the single controller's one call per worker
and step); a rank that raises surfaces as the original exception type with ``.rank`` set
and a note naming the rank, after the other ranks' pending collectives are aborted (no hang).

>>> import tensorweave as tw                                          # doctest: +SKIP
>>> cluster = tw.distribute.connect(num_workers=2)                    # doctest: +SKIP
>>> cluster.run(lambda w: w.comm().all_gather([w.rank]).tolist())     # doctest: +SKIP
[[0, 1], [0, 1]]
>>> tw.distribute.shutdown()                                          # doctest: +SKIP
"""
import os
import threading
import uuid

from tensorweave.core import errors

_lock = threading.Lock()
_current = None


def _ray():
    try:
        import ray
    except ImportError as e:   # pragma: no cover - the ray extra is installed in CI
        raise ImportError("tw.distribute.connect needs Ray: pip install 'tensorweave[ray]'") from e
    return ray


class RankWorker:
    """The actor of one rank (its class is made remote in :func:`connect`): the rank id, the
    world's ranks, communicators per group (made on first use), and a dict of values the
    driver's steps may keep on the worker between calls."""

    def __init__(self, rank, ranks, cluster_id, timeout):
        self.rank = int(rank)
        self.ranks = tuple(ranks)
        self.store = {}
        self._cluster_id = cluster_id
        self._timeout = timeout
        self._comms = {}

    def comm(self, ranks=None):
        """This rank's communicator in the group ``ranks`` (default: all ranks)."""
        from tensorweave.distribute.ray.group import RayGroup
        ranks = self.ranks if ranks is None else tuple(int(r) for r in ranks)
        c = self._comms.get(ranks)
        if c is None:
            group = RayGroup(ranks, _rendezvous(self._cluster_id, ranks), self._timeout)
            c = self._comms[ranks] = group.communicator(ranks.index(self.rank))
        return c

    def call(self, fn, args):
        return fn(self, *args)

    def ping(self):
        return self.rank, os.getpid()


def _rendezvous(cluster_id, ranks):
    ray = _ray()
    from tensorweave.distribute.ray.group import Rendezvous
    name = f"tw-rdv-{cluster_id}-{'_'.join(map(str, ranks))}"
    actor = ray.remote(num_cpus=0, max_concurrency=1000)(Rendezvous)
    # detached: a group's first member creates it, but the others still need it after that member
    # has moved on (or failed); Cluster.shutdown kills the cluster's rendezvous actors by name
    return actor.options(name=name, get_if_exists=True, lifetime="detached").remote(ranks)


def _kill_rendezvous(cluster_id):
    """Stops the (detached) rendezvous actors of a cluster's groups."""
    ray = _ray()
    prefix = f"tw-rdv-{cluster_id}"
    for entry in ray.util.list_named_actors(all_namespaces=False):
        name = entry if isinstance(entry, str) else entry.get("name", "")
        if name.startswith(prefix):
            try:
                ray.kill(ray.get_actor(name))
            except ValueError:
                pass                      # gone meanwhile


class Cluster:
    """The ranks started by :func:`connect` (``num_workers`` actors)."""

    def __init__(self, workers, cluster_id, started_ray, placement_group):
        self.workers = workers
        self.cluster_id = cluster_id
        self._started_ray = started_ray
        self._pg = placement_group

    @property
    def num_workers(self):
        return len(self.workers)

    def run(self, fn, *args, ranks=None):
        """``[fn(worker, *args) for each rank]`` run concurrently, one call per worker, results
        in rank order. ``fn`` travels by Ray's own serialization (code from this driver)."""
        ray = _ray()
        ranks = range(len(self.workers)) if ranks is None else list(ranks)
        refs = [self.workers[r].call.remote(fn, args) for r in ranks]
        pending, first_error = list(refs), None
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except Exception as e:  # noqa: BLE001 - re-raised below as the rank's own exception
                if first_error is None:
                    first_error = (ranks[refs.index(done[0])], e)
                    _rendezvous(self.cluster_id, tuple(range(len(self.workers)))).abort.remote(
                        f"rank {first_error[0]} raised {type(e).__name__}")
        if first_error is not None:
            raise _original(*first_error)
        return ray.get(refs)

    def shutdown(self):
        ray = _ray()
        for w in self.workers:
            ray.kill(w)
        _kill_rendezvous(self.cluster_id)
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group
            remove_placement_group(self._pg)
        if self._started_ray:
            ray.shutdown()


def _original(rank, exc):
    """The exception a rank raised, as its own type, with ``.rank`` and a note."""
    cause = getattr(exc, "cause", None)
    if cause is None and hasattr(exc, "as_instanceof_cause"):
        cause = exc.as_instanceof_cause()
    out = cause if isinstance(cause, BaseException) else exc
    try:
        out.rank = rank
    except AttributeError:
        pass
    if hasattr(out, "add_note"):
        out.add_note(f"(raised on rank {rank} of the Ray cluster)")
    return out


def _loopback_only(ray):
    """Makes a local instance listen on 127.0.0.1 only. On Linux Ray resolves "127.0.0.1" to
    the node's routable address (for clusters) unless its single-node mode is on; that mode is
    read from the environment by the processes Ray starts, and from a constant by this one
    (already imported here). A test checks the addresses, so a Ray that changes this fails it."""
    if os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") is None:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        from ray._private import ray_constants
        ray_constants.ENABLE_RAY_CLUSTER = False


def connect(address=None, num_workers=2, resources_per_worker=None, strategy="PACK", timeout=None):
    """Starts (or attaches to) Ray and makes ``num_workers`` rank actors; returns the
    :class:`Cluster` (also kept as the current one: :func:`current`, :func:`shutdown`).

    ``address``: None starts a local instance (loopback only, dashboard off, token auth);
    ``"auto"`` or ``"ray://..."`` attaches. ``resources_per_worker``: Ray resources of each
    rank (default one CPU). ``timeout``: the collectives' (default 120 s)."""
    global _current
    ray = _ray()
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"connect: num_workers must be a positive int, got {num_workers!r}")
    if strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
        raise ValueError(f"connect: strategy must be PACK, SPREAD, STRICT_PACK or STRICT_SPREAD, got {strategy!r}")
    resources = dict(resources_per_worker or {"CPU": 1})
    with _lock:
        if _current is not None:
            raise errors.FailedPreconditionError(
                "connect: a cluster is already connected; call tw.distribute.shutdown() first")
        started = False
        if not ray.is_initialized():
            if address is None:
                _loopback_only(ray)
                # Ray (>= 2.59, the extra's pin) turns token authentication on for a new local
                # instance unless RAY_AUTH_MODE says otherwise.
                ray.init(num_cpus=max(num_workers * int(resources.get("CPU", 1)), os.cpu_count() or 1),
                         include_dashboard=False, _node_ip_address="127.0.0.1", logging_level="ERROR",
                         log_to_driver=False, configure_logging=False)
            else:
                ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            started = True
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        pg = placement_group([dict(resources) for _ in range(num_workers)], strategy=strategy)
        ray.get(pg.ready(), timeout=600)
        cluster_id = uuid.uuid4().hex[:12]
        cpus = resources.pop("CPU", 1)
        actor = ray.remote(RankWorker)
        workers = [actor.options(num_cpus=cpus, resources=resources or None,
                                 scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i))
                   .remote(i, tuple(range(num_workers)), cluster_id, timeout)
                   for i in range(num_workers)]
        ray.get([w.ping.remote() for w in workers])
        _current = Cluster(workers, cluster_id, started, pg)
        return _current


def current():
    """The connected :class:`Cluster`, or None."""
    return _current


def shutdown():
    """Stops the current cluster's actors (and Ray, when :func:`connect` started it)."""
    global _current
    with _lock:
        if _current is not None:
            cluster, _current = _current, None
            cluster.shutdown()
