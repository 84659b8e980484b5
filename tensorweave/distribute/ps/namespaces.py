"""TF's module paths for the parameter-server API: ``tw.distribute.experimental``
(``ParameterServerStrategy``, ``partitioners``, ``coordinator``), ``tw.distribute.coordinator``
and ``tw.distribute.cluster_resolver``."""
import types

from tensorweave.distribute.ps import coordinator as _c
from tensorweave.distribute.ps import partitioners
from tensorweave.distribute.ps import strategy as _s

coordinator = types.SimpleNamespace(ClusterCoordinator=_c.ClusterCoordinator, RemoteValue=_c.RemoteValue,
                                    PerWorkerValues=_c.PerWorkerValues)
experimental = types.SimpleNamespace(ParameterServerStrategy=_s.ParameterServerStrategy, partitioners=partitioners,
                                     coordinator=coordinator)
cluster_resolver = types.SimpleNamespace(SimpleClusterResolver=_s.SimpleClusterResolver)
