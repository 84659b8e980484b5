"""Kernel of ``FusedEinsum``, the node the remapping pass makes of an ``Einsum`` and the bias add
(and ReLU) after it (``runtime/passes/remapping.py`` ``_fuse_einsum_bias``, issue 18 session 18).

Keras ``Dense`` on a sequence (``tensordot``: an ``Einsum``, then ``BiasAdd``, then the
activation) and ``MultiHeadAttention``'s projections (``EinsumDense``: an ``Einsum``, then
``y + bias`` as ``AddV2`` of a ``[heads, key]`` bias) ran the bias as one more op: a kernel
call and one more pass over the product's output, in a new array. Here the bias (and the ReLU)
go into the product's own output, in place, in the same pass as ``FusedMatMul``'s epilogue
(``nn_loops.bias_act``): the same arithmetic (``y + b``, then ``max(., 0)``), so the bits of
the unfused ops.

>>> import numpy as np
>>> from tensorweave.kernels.cpu.einsum_bias_kernels import fused_einsum
>>> x, w = np.ones((2, 3, 4), np.float32), np.ones((4, 2, 2), np.float32)
>>> b = np.array([[-5.0, 1.0], [0.0, -4.0]], np.float32)
>>> fused_einsum(x, w, b, "abc,cde->abde", True)[0, 0].tolist()
[[0.0, 5.0], [4.0, 0.0]]
"""
import numpy as np

from tensorweave.core.registry import register_kernel
from tensorweave.kernels.cpu import linalg_kernels, math_kernels, nn_loops

#: dtypes whose epilogue runs in place (the pass fuses nothing else)
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def fused_einsum(a, b, bias, equation, relu):
    """``relu(einsum(equation, a, b) + bias)`` (or without the ReLU); ``bias`` shaped like the
    output's trailing axes."""
    y = linalg_kernels._einsum(a, b, equation=equation)
    nb = bias.ndim
    if bias.dtype != y.dtype or nb == 0 or nb > y.ndim or y.shape[y.ndim - nb:] != bias.shape:
        raise ValueError(f"FusedEinsum: bias {bias.dtype}{list(bias.shape)} must be shaped like the trailing axes "
                         f"of the output {y.dtype}{list(y.shape)} ({equation!r})")
    if y.dtype in DTYPES and y.flags.c_contiguous and y.flags.writeable and bias.size:
        # (the Einsum kernel's output is a new array: the epilogue may write into it)
        nn_loops.bias_act(y.reshape(-1, bias.size), np.ascontiguousarray(bias).reshape(-1), bool(relu))
        return y
    y = np.add(y, bias)
    return math_kernels._relu(y) if relu else y


register_kernel("FusedEinsum", "CPU")(fused_einsum)
