"""A cluster's membership: the rank actors' places, adding a rank and removing one.

Every rank's actor runs in a *slot*: a bundle of a placement group and the resources it was
reserved with (``Cluster._slots[rank]``). :func:`connect` reserves one group with a bundle
per rank; :func:`add_worker` puts a new rank (the next number) in a bundle of that group that
no rank uses (one :func:`remove_worker` freed), else in a placement group of one bundle of its
own (the cluster's is full), which the cluster owns: it is removed with the rank, or at
``Cluster.shutdown`` — no group outlives the cluster. A restart of a rank
(``Cluster.restart_worker``) goes to the same slot.

Membership changes reach every actor: the world's ranks (``RankWorker.ranks``, the default
group of ``worker.comm()``) and, after a removal, the ranks above the removed one move down
by one (``RankWorker.renumber``); the cluster's groups are made anew (a new generation), the
compiled step graphs are dropped, and a cluster on shared memory whose new rank runs on
another node switches every rank to ``hier`` (shared memory inside each node, ``hier.py``) or,
where no two ranks share a node, to the object store.

>>> import tensorweave as tw                                          # doctest: +SKIP
>>> cluster = tw.distribute.connect(num_workers=1)                    # doctest: +SKIP
>>> cluster.add_worker()                                              # doctest: +SKIP
1
>>> cluster.run(lambda w: w.comm().all_gather([w.rank]).tolist())     # doctest: +SKIP
[[0, 1], [0, 1]]
>>> cluster.remove_worker(0)            # the rank that was 1 is rank 0 now  # doctest: +SKIP
>>> tw.distribute.shutdown()            # both placement groups removed      # doctest: +SKIP
"""
import threading

from tensorweave.core import errors

_lock = threading.Lock()


def spawn(cluster, rank, ranks=None):
    """A fresh ``RankWorker`` actor for ``rank`` in its slot (``ranks``: the world, default
    ``0..num_workers-1``)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from tensorweave.distribute.ray.cluster import RankWorker, _ray
    ray = _ray()    # through the cluster module's accessor, as connect is (tests fake Ray there)
    pg, bundle, resources = cluster._slots[rank]
    resources = dict(resources)
    cpus = resources.pop("CPU", 1)
    ranks = tuple(range(len(cluster._slots))) if ranks is None else tuple(ranks)
    return ray.remote(RankWorker).options(
        num_cpus=cpus, resources=resources or None,
        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, bundle)).remote(
        rank, ranks, cluster.cluster_id, cluster._timeout)


def _free_bundle(cluster, resources):
    """A bundle of the cluster's own placement group with ``resources`` that no rank uses."""
    if cluster._pg is None:
        return None
    if dict(cluster._resources) != resources:
        return None
    used = {b for pg, b, _ in cluster._slots if pg is cluster._pg}
    return next((b for b in range(cluster._pg.bundle_count) if b not in used), None)


def add_worker(cluster, resources=None, timeout_s=120):
    """Adds rank ``cluster.num_workers`` (see the module); returns it. ``resources``: the new
    rank's Ray resources (default the cluster's per-worker ones). Waits up to ``timeout_s`` for
    the room; the group made for it is removed again when it does not come."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    resources = dict(resources or cluster._resources)
    cluster.drain()              # a step posted ahead ends before the world changes under it
    with _lock:
        rank = cluster.num_workers
        bundle = _free_bundle(cluster, resources)
        own = None
        if bundle is None:
            own = placement_group([dict(resources)], strategy="PACK")
            try:
                ray.get(own.ready(), timeout=timeout_s)
            except Exception:
                remove_placement_group(own)
                raise
        cluster._slots.append((cluster._pg, bundle, resources) if own is None else (own, 0, resources))
        if own is not None:
            cluster._own_groups.append(own)
        try:
            worker = spawn(cluster, rank)
            ray.get(worker.set_transport.remote(cluster.transport))
        except Exception:
            cluster._slots.pop()
            if own is not None:
                cluster._own_groups.remove(own)
                remove_placement_group(own)
            raise
        cluster.workers.append(worker)
        _membership_changed(cluster)
    return rank


def remove_worker(cluster, rank=None):
    """Stops rank ``rank`` (default: the last) and frees its slot (its own placement group is
    removed; a bundle of the cluster's group stays reserved for a later :func:`add_worker`).
    The ranks above it move down by one; global tensors the cluster's ranks held are gone then
    (their ranks changed). The last remaining rank cannot be removed (``shutdown`` it)."""
    import ray
    from ray.util.placement_group import remove_placement_group

    from tensorweave.distribute.ray.cluster import _sweep_rank
    n = cluster.num_workers
    rank = n - 1 if rank is None else rank
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < n:
        raise ValueError(f"remove_worker: rank must be an int in [0, {n}), got {rank!r}")
    if n == 1:
        raise errors.FailedPreconditionError(
            "remove_worker: the cluster's last rank cannot be removed. Hint: tw.distribute.shutdown()")
    with _lock:
        cluster._drop_graphs()
        worker = cluster.workers[rank]
        try:
            ray.get(worker.close.remote(), timeout=60)
        except Exception:  # noqa: BLE001 - a dead or stuck worker; its segments are swept below
            pass
        ray.kill(worker)
        _sweep_rank(cluster.cluster_id, rank)
        del cluster.workers[rank]
        pg, _, _ = cluster._slots.pop(rank)
        if pg is not cluster._pg:
            cluster._own_groups.remove(pg)
            remove_placement_group(pg)
        if rank != n - 1 and cluster.heap is not None:
            cluster.heap.alive = False           # pieces named by rank: the numbers moved
            cluster.heap = None
        _membership_changed(cluster)


def _membership_changed(cluster):
    """Every actor learns the world (and, after a removal, its number); groups are made anew."""
    import ray

    from tensorweave.distribute.ray.cluster import candidates
    world = tuple(range(cluster.num_workers))
    ray.get([w.renumber.remote(i, world) for i, w in enumerate(cluster.workers)], timeout=120)
    nodes = [node for _, _, node in ray.get([w.ping.remote() for w in cluster.workers], timeout=120)]
    if cluster.transport == "shm" and len(set(nodes)) > 1:
        cluster.transport = candidates(nodes)[0]     # hier where some ranks share a node, else the object store
        ray.get([w.set_transport.remote(cluster.transport) for w in cluster.workers], timeout=120)
    cluster._generation += 1
    cluster._contender = (None, 0)
