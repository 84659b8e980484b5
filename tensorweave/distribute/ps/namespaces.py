"""TF's module paths for the parameter-server API: ``tw.distribute.coordinator`` and
``tw.distribute.cluster_resolver`` (``tw.distribute.experimental`` has the strategy, the
partitioners and the coordinator too)."""
import types

from tensorweave.distribute.ps import coordinator as _c
from tensorweave.distribute.ps import strategy as _s

coordinator = types.SimpleNamespace(ClusterCoordinator=_c.ClusterCoordinator, RemoteValue=_c.RemoteValue,
                                    PerWorkerValues=_c.PerWorkerValues)
cluster_resolver = types.SimpleNamespace(SimpleClusterResolver=_s.SimpleClusterResolver)
