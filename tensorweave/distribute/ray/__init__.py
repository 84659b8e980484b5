"""tensorweave's ranks on Ray (issue 14): :func:`connect`, :func:`shutdown`, the Ray group.

Importing this package does not import Ray; :func:`connect` does."""
from tensorweave.distribute.ray.cluster import Cluster, RankWorker, connect, current, shutdown
from tensorweave.distribute.ray.pieces import in_process

__all__ = ["Cluster", "RankWorker", "connect", "current", "shutdown", "in_process"]
