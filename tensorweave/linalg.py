"""``tw.linalg``: matrix products, einsum, tensordot, norms."""
from tensorweave.ops.linalg_ops import *  # noqa: F401,F403
from tensorweave.ops.math_ops import matmul  # noqa: F401
