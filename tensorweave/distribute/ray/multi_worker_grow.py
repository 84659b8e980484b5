"""Elastic growth of ``MultiWorkerMirroredStrategy`` beyond the placement group.

``connect`` reserves one placement group with a bundle per rank, so a fit could only shrink
and rejoin within it. With ``FailureConfig(elastic=True, max_workers=N)`` the driver grows the
fit at each epoch boundary while it has fewer than ``N`` ranks and Ray has room for one more
(``ray.available_resources()`` covers a worker's resources, e.g. after a node joined): the new
rank gets a placement group of one bundle of its own (the cluster's is full), its actor is
the same ``RankWorker`` (rank ``cluster.num_workers``, the cluster's id, timeout and
transport), it rebuilds the model from the fit's package and receives the state by boxing
(``B`` on the active ranks -> ``B`` on the grown set, as a rejoining rank does); the global
batch is then re-sharded over the grown set, so the updates stay those of single-process
``fit``. The rank stays in the cluster after the fit (``Cluster.run`` includes it).

What it relies on of ``cluster.py`` (ray14's) — to become a ``Cluster.add_worker`` there:
the workers list, ``_spawn`` (a restart of a grown rank must use its own group), the
cluster's id/transport, and the rank actors' timeout; the extra groups are removed when Ray
stops (a local instance) or when the driver's job ends (an attached cluster), not at
``Cluster.shutdown``.
"""
import threading

_lock = threading.Lock()


def room_for_worker(resources):
    """Whether Ray has ``resources`` (one worker's) free now."""
    import ray
    free = ray.available_resources()
    return all(free.get(k, 0.0) >= v for k, v in resources.items())


def add_worker(cluster, resources=None, timeout_s=120):
    """Adds one rank to ``cluster`` in a placement group of its own; returns its rank."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from tensorweave.distribute.ray.cluster import RankWorker
    resources = dict(resources or {"CPU": 1})
    with _lock:
        rank = cluster.num_workers
        pg = placement_group([dict(resources)], strategy="PACK")
        try:
            ray.get(pg.ready(), timeout=timeout_s)
        except Exception:
            remove_placement_group(pg)
            raise
        collective_timeout = cluster.run(_collective_timeout, ranks=[0])[0]
        cpus = resources.pop("CPU", 1)
        actor = ray.remote(RankWorker)

        def spawn_own(i):
            return actor.options(num_cpus=cpus, resources=resources or None,
                                 scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)).remote(
                i, tuple(range(i + 1)), cluster.cluster_id, collective_timeout)
        worker = spawn_own(rank)
        ray.get(worker.set_transport.remote(cluster.transport))
        cluster.workers.append(worker)
        previous = cluster._spawn
        # a restart of this rank goes to its own group, the others' to their bundles
        cluster._spawn = lambda i: spawn_own(i) if i == rank else previous(i)
        cluster._generation += 1           # groups are made anew with the grown membership
    return rank


def _collective_timeout(worker):
    return worker._timeout
