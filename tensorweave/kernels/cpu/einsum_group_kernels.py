"""A group of two-operand ``Einsum`` products of one input against weights of one shape (with
their biases, and a ReLU), run as one product against the weights stacked side by side; the plan
node ``runtime/passes/einsum_group.py`` makes (``FusedEinsumGroup``, never a graph op).

Why: multi-head self-attention projects its input three times (query, key, value:
``abc,cde->abde``, each 128x256 @ 256x256 at ``encoder2_predict``'s batch 1). Three GEMMs of 8.4 M
multiply-adds each pay a library call, a thread hand-off and a pass over the input apiece; one
128x256 @ 256x768 GEMM pays them once and runs at a larger GEMM's speed (PyTorch's encoder layer
at inference makes the same single in-projection). The stacked weight (and bias) is made once per
weight version (``core/derived.get_many``: kept while none of the weights changes, a new one after
any assignment or update), so a request pays no copy. Each output is a view of the stacked
product, the same values per output column as the products apart would give up to the BLAS
library's blocking of the wider product (the last bits may differ, as between any two GEMM
shapes).

>>> import numpy as np
>>> from tensorweave.kernels.cpu import einsum_group_kernels as g
>>> x = np.ones((1, 2, 3), np.float32)
>>> q, k = g.fused_einsum_group(x, np.ones((3, 2), np.float32), 2 * np.ones((3, 2), np.float32),
...                             np.zeros(2, np.float32), np.ones(2, np.float32),
...                             equation="abc,cfd->abfd", count=2, weight_axis=1, out_axis=2, bias=True, relu=False)
>>> q.tolist(), k.tolist()
([[[3.0, 3.0], [3.0, 3.0]]], [[[7.0, 7.0], [7.0, 7.0]]])
"""
import numpy as np

from tensorweave.core import derived
from tensorweave.kernels.cpu import einsum_bias_kernels, linalg_kernels


def _stacked(axis):
    """``stack(*xs)``: the arrays side by side along a new ``axis``, read-only (shared by every
    call until a weight changes)."""
    def stack(*xs):
        out = np.stack(xs, axis=axis)
        out.flags.writeable = False
        return out
    return stack


def fused_einsum_group(a, *operands, equation, count, weight_axis, out_axis, bias, relu, scales=None):
    """``count`` outputs: ``relu(einsum(e, a, w_i) + b_i)`` for the weights ``operands[:count]``
    (biases ``operands[count:]`` where ``bias``; the ReLU where ``relu``), computed as
    ``einsum(equation, a, stack(w, weight_axis))`` (``equation``: the products' own with the
    stacking letter added) and sliced along ``out_axis``. The biases have exactly the weights'
    output axes, so stacked (along a new first axis) they are the stacked product's trailing axes.
    ``scales[i]``, where not None: output ``i`` multiplied by it, in place (a ``Mul`` after it)."""
    if len(operands) != count * (2 if bias else 1):
        raise ValueError(f"FusedEinsumGroup ({equation}): {count} weights{' and biases' if bias else ''} expected, "
                         f"got {len(operands)} operands")
    w = derived.get_many(operands[:count], ("einsum-group", weight_axis), _stacked(weight_axis))
    if bias:
        b = derived.get_many(operands[count:], ("einsum-group", 0), _stacked(0))
        y = einsum_bias_kernels.fused_einsum(a, w, b, equation, relu)
    else:
        y = linalg_kernels._einsum(a, w, equation=equation)
    lead = (slice(None),) * out_axis
    outs = tuple(y[lead + (i,)] for i in range(count))
    for out, scale in zip(outs, scales or ()):
        if scale is not None:
            np.multiply(out, y.dtype.type(scale), out=out)
    return outs
