"""Global tensors over placements and SBP layouts (issue 13): see ``docs/design/distribute.md``.

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> x = tw.distribute.from_local([tw.constant([1.0, 2.0]), tw.constant([3.0, 4.0])], p, tw.sbp.partial_sum)
>>> x.numpy().tolist(), x.to_global(sbp=tw.sbp.broadcast).to_local()[1].numpy().tolist()
([4.0, 6.0], [4.0, 6.0])

A Ray rank's exception reaches the driver as its own type where that is one of tensorweave's errors,
the collectives' (``CollectiveAbortedError``, ``CollectiveTimeoutError`` with ``.missing``: the ranks
that did not arrive) or a common builtin, else as :class:`RemoteError` (a ``tw.errors.UnknownError``
whose ``remote_type`` names the original type); each with ``.rank``, ``.remote_op`` and ``.remote_line``.

>>> issubclass(RemoteError, tw.errors.UnknownError)
True
"""
from tensorweave.distribute.layout import Placement
from tensorweave.distribute.global_tensor import GlobalTensor, from_local, to_global
from tensorweave.distribute.boxing import BoxingPlan, BoxingStep, box, boxing_cost, plan_boxing
from tensorweave.distribute.collective import (CollectiveAbortedError, CollectiveTimeoutError, Communicator,
                                               InProcessGroup)
from tensorweave.distribute.ranks import World, default_world, set_collective_timeout
from tensorweave.distribute.variables import GlobalVariable
from tensorweave.distribute.distribution import MirroredStrategy
from tensorweave.distribute.explain import Explanation, explain
from tensorweave.distribute.pipeline import Pipeline, pipeline
from tensorweave.distribute.ray import connect, current, in_process, shutdown   # (Ray is imported by connect, not here)
from tensorweave.distribute.ray.step_frame import RemoteError   # a Ray rank's exception of a type not rebuilt
from tensorweave.distribute.ray.multi_worker import FailureConfig, MultiWorkerMirroredStrategy, RayClusterResolver
from tensorweave.distribute.ps import InputContext, ParameterServerStrategy, ShardedVariable
from tensorweave.distribute.ps.namespaces import cluster_resolver, coordinator
from tensorweave.distribute import experimental

placement = Placement

__all__ = ["Placement", "placement", "GlobalTensor", "from_local", "to_global", "BoxingPlan", "BoxingStep", "box",
           "boxing_cost", "plan_boxing", "CollectiveAbortedError", "CollectiveTimeoutError", "Communicator",
           "InProcessGroup", "World", "default_world", "set_collective_timeout", "GlobalVariable", "MirroredStrategy",
           "explain", "Explanation", "Pipeline", "pipeline", "connect", "current", "shutdown", "in_process",
           "RemoteError",
           "MultiWorkerMirroredStrategy", "RayClusterResolver", "FailureConfig", "ParameterServerStrategy",
           "ShardedVariable", "InputContext", "experimental", "coordinator", "cluster_resolver"]
