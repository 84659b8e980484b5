"""``tw.random``: random tensors with TensorFlow's global-seed/op-seed rules."""
from tensorweave.ops.random_ops import *  # noqa: F401,F403
