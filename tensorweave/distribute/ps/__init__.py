"""Parameter-server training on Ray (issue 14): TF2's ``ParameterServerStrategy``,
partitioners, ``ClusterCoordinator``, and sharded variables with sparse pull/push.

Importing this package does not import Ray; creating a strategy's scope or a coordinator does."""
from tensorweave.distribute.ps import partitioners
from tensorweave.distribute.ps.coordinator import (ClusterCoordinator, PerWorkerDataset, PerWorkerIterator,
                                                   PerWorkerValues, RemoteValue)
from tensorweave.distribute.ps.strategy import InputContext, ParameterServerStrategy, SimpleClusterResolver
from tensorweave.distribute.ps.variable import ShardedVariable

__all__ = ["partitioners", "ClusterCoordinator", "PerWorkerDataset", "PerWorkerIterator", "PerWorkerValues",
           "RemoteValue", "InputContext", "ParameterServerStrategy", "SimpleClusterResolver", "ShardedVariable"]
