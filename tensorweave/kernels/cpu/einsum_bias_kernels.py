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
from tensorweave.kernels.cpu import einsum_matmul, linalg_kernels, nn_loops, split_passes

#: dtypes whose bias (and ReLU) run as one compiled pass in place; others as NumPy's add/maximum
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def check_bias(bias, y, equation):
    """``bias`` must be the product's trailing axes (``y.shape[-bias.ndim:]``), of its dtype."""
    if not 1 <= bias.ndim <= y.ndim or bias.shape != y.shape[y.ndim - bias.ndim:] or bias.dtype != y.dtype:
        raise ValueError(f"FusedEinsum ({equation}): bias {bias.dtype}{list(bias.shape)} must have the trailing "
                         f"axes and dtype of the product {y.dtype}{list(y.shape)}")


def _trailing(a, b, bias, equation):
    """Whether ``bias`` has ``a``'s dtype and the trailing axes of ``einsum(equation, a, b)``
    (read from the operands' letters; False where the equation is not ``x,y->z`` of letters)."""
    lhs, _, so = equation.replace(" ", "").partition("->")
    sa, _, sb = lhs.partition(",")
    if not (sa + sb + so).isalpha() or len(sa) != a.ndim or len(sb) != b.ndim or not 1 <= bias.ndim <= len(so) \
            or bias.dtype != a.dtype:
        return False
    size = dict(zip(sb, b.shape))
    size.update(zip(sa, a.shape))
    return all(c in size for c in so) and bias.shape == tuple(size[c] for c in so[len(so) - bias.ndim:])


@register_kernel("FusedEinsum", "CPU")
def fused_einsum(a, b, bias, equation, relu):
    """``relu(einsum(equation, a, b) + bias)`` (without the ReLU when ``relu`` is false): the
    ``Einsum`` kernel's product, then the bias (broadcast over the leading axes) and the ReLU in
    one pass over it, in place: over each block of the product's rows right after the block where
    the product is one 2-D GEMM (``einsum_matmul.contract_then``: on the block's own thread where
    its class runs split by rows)."""
    channels = bias.size
    if channels and bias.dtype in DTYPES and _trailing(a, b, bias, equation):
        lhs, so = equation.replace(" ", "").split("->")
        flat = np.ascontiguousarray(bias).reshape(channels)

        def after(y2, i, j):
            # (rows of a whole number of biases: the bias's axes are the product's right operand's;
            # otherwise the pass after the product below)
            nn_loops.bias_act(y2[i:j].reshape(-1, channels), flat, relu)
        y = einsum_matmul.contract_then(a, b, *lhs.split(","), so, after, row_multiple=channels)
        if y is not None:
            return y
    y = linalg_kernels._einsum(a, b, equation=equation)
    check_bias(bias, y, equation)
    if (y.dtype in DTYPES and y.size and y.flags.c_contiguous and y.flags.writeable
            and not np.may_share_memory(y, a) and not np.may_share_memory(y, b)):
        nn_loops.bias_act(y.reshape(-1, channels), np.ascontiguousarray(bias).reshape(channels), relu)
        return y
    y = np.add(y, bias)
    return split_passes.relu(y) if relu else y
