"""TF1's candidate samplers and sampled losses: the ops of ``tensorweave.ops.sampling_ops`` (shared
with ``tw.nn`` and ``tw.random``), here under their ``compat.v1`` module path."""
from tensorweave.ops.sampling_ops import *  # noqa: F401,F403
from tensorweave.ops.sampling_ops import __all__  # noqa: F401
