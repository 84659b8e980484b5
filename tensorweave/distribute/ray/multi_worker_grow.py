"""Elastic growth of ``MultiWorkerMirroredStrategy`` beyond the placement group.

``connect`` reserves one placement group with a bundle per rank, so a fit could only shrink
and rejoin within it. With ``FailureConfig(elastic=True, max_workers=N)`` the driver grows the
fit at each epoch boundary while it has fewer than ``N`` ranks and Ray has room for one more
(``ray.available_resources()`` covers a worker's resources, e.g. after a node joined): the
cluster adds the rank (``Cluster.add_worker``: a placement group of one bundle of its own,
owned by the cluster and removed with the rank or at ``shutdown``), it rebuilds the model
from the fit's package and receives the state by boxing (``B`` on the active ranks -> ``B``
on the grown set, as a rejoining rank does); the global batch is then re-sharded over the
grown set, so the updates stay those of single-process ``fit``. The rank stays in the
cluster after the fit (``Cluster.run`` includes it) until ``Cluster.remove_worker``.

>>> room_for_worker({"CPU": 1e9})                                      # doctest: +SKIP
False
"""


def room_for_worker(resources):
    """Whether Ray has ``resources`` (one worker's) free now."""
    import ray
    free = ray.available_resources()
    return all(free.get(k, 0.0) >= v for k, v in resources.items())
