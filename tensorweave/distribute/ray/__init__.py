"""tensorweave's ranks on Ray (issue 14): :func:`connect`, :func:`shutdown`, the Ray group.

Importing this package does not import Ray; :func:`connect` does."""
from tensorweave.distribute.ray.cluster import Cluster, RankWorker, connect, current, shutdown

__all__ = ["Cluster", "RankWorker", "connect", "current", "shutdown"]
