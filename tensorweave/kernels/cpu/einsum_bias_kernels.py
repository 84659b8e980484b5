"""``FusedEinsum``: a two-operand ``Einsum`` with the bias add after it (and a ReLU after that),
one node of a plan (``runtime/passes/einsum_bias.py`` makes it; it is never a graph op).

Why: a Keras ``Dense`` on a sequence is ``Einsum`` (``tensordot``) + ``BiasAdd`` (+ ``Relu``), and
``MultiHeadAttention``'s Q/K/V/output projections are ``Einsum`` + ``AddV2`` of a ``[heads, size]``
or ``[width]`` bias. At batch-1 inference (``encoder2_predict``: twelve of them a request, 32-64 K
elements each) every bias add was a plan step of its own, a Python kernel call with its
broadcast checks and a new output array, for a pass that costs a few µs in cache. Here the bias
(and ReLU) go over the product's output in place, right after the product, as ``FusedMatMul``
does for ``MatMul`` (``nn_loops.bias_act``: the same additions and maxima, so the same bits as the
unfused plan).

>>> import numpy as np
>>> from tensorweave.kernels.cpu import einsum_bias_kernels
>>> x, w = np.ones((1, 2, 3), np.float32), np.ones((3, 2), np.float32)
>>> einsum_bias_kernels.fused_einsum(x, w, np.array([-4.0, 1.0], np.float32), "abc,cd->abd", True).tolist()
[[[0.0, 4.0], [0.0, 4.0]]]
"""
import numpy as np

from tensorweave.core.registry import register_kernel
from tensorweave.kernels.cpu import linalg_kernels, nn_loops, split_passes

#: dtypes whose bias (and ReLU) run as one compiled pass in place; others as NumPy's add/maximum
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def check_bias(bias, y, equation):
    """``bias`` must be the product's trailing axes (``y.shape[-bias.ndim:]``), of its dtype."""
    if not 1 <= bias.ndim <= y.ndim or bias.shape != y.shape[y.ndim - bias.ndim:] or bias.dtype != y.dtype:
        raise ValueError(f"FusedEinsum ({equation}): bias {bias.dtype}{list(bias.shape)} must have the trailing "
                         f"axes and dtype of the product {y.dtype}{list(y.shape)}")


@register_kernel("FusedEinsum", "CPU")
def fused_einsum(a, b, bias, equation, relu):
    """``relu(einsum(equation, a, b) + bias)`` (without the ReLU when ``relu`` is false): the
    ``Einsum`` kernel's product, then the bias (broadcast over the leading axes) and the ReLU in
    one pass over it, in place."""
    y = linalg_kernels._einsum(a, b, equation=equation)
    check_bias(bias, y, equation)
    channels = bias.size
    if (y.dtype in DTYPES and y.size and y.flags.c_contiguous and y.flags.writeable
            and not np.may_share_memory(y, a) and not np.may_share_memory(y, b)):
        nn_loops.bias_act(y.reshape(-1, channels), np.ascontiguousarray(bias).reshape(channels), relu)
        return y
    y = np.add(y, bias)
    return split_passes.relu(y) if relu else y
