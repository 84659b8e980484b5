"""CPU kernels for ``ops/bitwise_ops.py``."""
import numpy as np

from tensorweave.core.registry import register_kernel as k

k("BitwiseAnd")(np.bitwise_and)
k("BitwiseOr")(np.bitwise_or)
k("BitwiseXor")(np.bitwise_xor)
k("Invert")(np.invert)


def _clamped(y, x):
    return np.clip(y, 0, x.dtype.itemsize * 8 - 1).astype(x.dtype, copy=False)


@k("LeftShift")
def _left_shift(x, y):
    return np.left_shift(x, _clamped(y, x))


@k("RightShift")
def _right_shift(x, y):
    return np.right_shift(x, _clamped(y, x))
