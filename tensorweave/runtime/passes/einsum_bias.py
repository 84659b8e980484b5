"""Remapping of an ``Einsum`` and the bias add after it (and a ReLU after that) into one
``FusedEinsum`` node (``kernels/cpu/einsum_bias_kernels.py``), called from ``remapping.run``.

Matches ``Einsum(a, b) -> BiasAdd(., bias)`` (channels last) or ``-> AddV2(., bias)`` (either
order) where ``bias`` has exactly the product's trailing static axes (a ``Dense`` on a sequence:
``[width]``; an attention projection: ``[heads, size]``), optionally ``-> Relu``; the product and
the add read by the next node alone, nothing fed or fetched but the last node's output, float32
or float64, one device, no ordering edges (as ``remapping._fuse_contraction`` asks of
``MatMul -> BiasAdd``). The fused kernel makes the same additions and maxima, so the plan's bits
do not change. ``TW_REMAP_EINSUM_BIAS=0`` (read when a plan is built) leaves them apart.

>>> import numpy as np, tensorweave as tw
>>> w = tw.constant(np.ones((3, 2), np.float32))
>>> f = tw.function(lambda x: tw.nn.relu(tw.nn.bias_add(tw.einsum("abc,cd->abd", x, w), tw.constant([-4.0, 1.0]))))
>>> f(tw.ones([1, 2, 3])).numpy().tolist()
[[[0.0, 4.0], [0.0, 4.0]]]
"""
import os

from tensorweave.core.registry import get_op
from tensorweave.runtime.passes.ir import Node, runs_stock_kernel

#: read when a plan is built; ``TW_REMAP_EINSUM_BIAS=0``: off, for comparisons
ENABLED = os.environ.get("TW_REMAP_EINSUM_BIAS", "1") != "0"


def _trailing(x, bias):
    """Whether ``bias``'s static shape is ``x``'s last axes (so the add does not grow ``x``)."""
    want, dims = bias.shape.as_tuple(), x.shape.as_tuple()
    if want is None or dims is None or not 1 <= len(want) <= len(dims) or any(d is None for d in want):
        return False
    return tuple(dims[len(dims) - len(want):]) == tuple(want)


def fuse(add, work, free, only_reader, channels_last):
    """The ``FusedEinsum`` standing for the ``Einsum`` feeding ``add`` (a ``BiasAdd`` or ``AddV2``)
    and a ``Relu`` after it: the list of fused ops, or None. ``free``, ``only_reader`` and
    ``channels_last``: the remapping pass's own checks (``remapping._free`` etc.)."""
    d = get_op("FusedEinsum")
    if not ENABLED or work.device_type(add) not in d.kernels or not free(add, work):
        return None
    if add.type == "BiasAdd" and not channels_last(add):
        return None
    for i in ((0,) if add.type == "BiasAdd" else (0, 1)):
        x, bias = add.inputs[i], add.inputs[1 - i]
        e = x.op
        if not (runs_stock_kernel(e, "Einsum") and len(e.inputs) == 2 and free(e, work)
                and only_reader(x, add, work) and e.device == add.device and _trailing(x, bias)
                and all(t.dtype is x.dtype for t in list(e.inputs) + [bias, add.outputs[0]])):
            continue
        last, fused = add, [e, add]
        readers = work.consumers.get(id(add.outputs[0]), [])
        if len(readers) == 1 and runs_stock_kernel(readers[0], "Relu") and free(readers[0], work) \
                and only_reader(add.outputs[0], readers[0], work) and readers[0].device == e.device:
            last = readers[0]
            fused.append(last)
        y = last.outputs[0]
        attrs = {**{k: v for k, v in e.attrs.items() if k[0] != "_"}, "relu": last is not add}
        node = Node(last, d, (e.inputs[0], e.inputs[1], bias), attrs, [(y.shape, y.dtype)], type_="FusedEinsum",
                    control_inputs=(), fused=[o.name for o in fused])
        work.fuse(node, fused)
        return fused
    return None
