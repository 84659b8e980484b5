"""Remapping: a contraction and the bias and ReLU after it become one node, and a ReLU
gradient and the bias gradient of its result become one node (TensorFlow's "remapper").

- ``Conv{1,2,3}D | MatMul -> BiasAdd [-> Relu]`` becomes ``FusedConv{n}D`` / ``FusedMatMul``
  (``kernels/cpu/fused_kernels.py``): the bias and ReLU are applied to each output tile while
  it is in cache. The contraction's and the BiasAdd's outputs must have no other reader and
  not be fed or fetched (the last node's output may be fetched: the fused node computes it).
- ``Einsum -> BiasAdd | AddV2 [-> Relu]`` (a ``Dense`` on a sequence, an attention projection)
  becomes ``FusedEinsum`` (``runtime/passes/einsum_bias.py``, issue 18 session 18).
- ``ReluGrad -> BiasAddGrad`` becomes ``FusedReluGradBiasAddGrad`` with both outputs: the
  masked gradient (still read by the other gradient ops) and its column sums (either may be
  fetched, neither fed). Where the gradient is a ``MatMul`` only the ``ReluGrad`` reads (a dense
  layer's input gradient), the product joins too: ``FusedMatMulReluGradBiasAddGrad``, the mask
  and sums made in place on the product (``matmul_relu_grad.py``, issue 18 session 19).
- ``SparseSoftmaxCrossEntropyWithLogits`` and ``SparseSoftmaxCrossEntropyGrad`` of the same
  logits and labels (a training step's loss and its gradient) become one
  ``FusedSparseSoftmaxCrossEntropy`` node at the loss's place, with both outputs: the
  softmax is computed once (TensorFlow's op returns both the same way). The mean over the batch
  (``Sum``, ``DivNoNan`` by a constant) and the gradient's constant scale (``Mul``) after it join
  the node too (``loss_tail.py``, issue 18 mlp22: three scalar-sized steps fewer).

- ``Conv{n}DBackpropInput`` and ``Conv{n}DBackpropFilter`` of the same output gradient and
  attributes (a convolution's two gradients in a training step) become one
  ``FusedConv{n}DBackprop`` node with both outputs, at the later one's place
  (``kernels/cpu/conv_pair_kernels.py`` runs the two side by side, one per core); neither output
  fed, and the earlier one's readers all after that place.

- ``BatchNormTraining -> Relu`` (the Relu the only reader of ``y``) becomes
  ``FusedBatchNormTrainingRelu`` at the batch norm's place, and ``ReluGrad -> BatchNormTrainingGrad``
  (the gradient the only reader of the select) becomes ``FusedReluGradBatchNormTrainingGrad`` at
  the gradient's place (``kernels/cpu/batch_norm_kernels.py``: the ReLU in the batch norm's passes).

- ``y * (g - Sum(g * y, axis, keepdims))`` with ``y = Softmax(x, axis)`` (``Softmax``'s composite
  gradient) becomes one ``SoftmaxGrad(y, g)`` at the outer ``Mul``'s place (within a rounding of
  the row sum: see :func:`_fuse_softmax_grad`).
- ``Mul(SoftmaxGrad(y, g), c)`` with ``c`` a constant scalar (the gradient of ``softmax(x * c)``)
  becomes one ``SoftmaxGrad`` with ``scale=c`` at the ``Mul``'s place (``ops/softmax_grad_ops.py``).

- ``ResourceGroupApplyAdam`` one of whose gradients is a ``MatMul`` read by nothing else (the
  last weight gradient's product of the backward pass, the latest in the plan) becomes
  ``FusedMatMulGroupApplyAdam`` at the update's place: the product's row blocks are applied to
  the variable as each comes out of the GEMM, on its thread, while in cache.

Only stock kernels, float32/float64, channels-last layouts and nodes without ordering edges
qualify (the update keeps its own ordering edges: the fused node takes its place). The fused kernels do the same arithmetic in the same order, so results are bit for
bit those of the unfused plan (tests/test_remapping.py), but for the composite softmax gradient's
(its row sum rounded once, tests/test_tx21_softmax_grad_remap.py).
"""
import os

import numpy as np

from tensorweave.core.registry import get_op
from tensorweave.ops import fused_conv_ops, fused_norm_ops, fused_ops  # noqa: F401 - registers the fused ops
from tensorweave.runtime.passes import einsum_bias, loss_tail, matmul_relu_grad
from tensorweave.runtime.passes.ir import Node, const_value, runs_stock_kernel, static_dims

_DTYPES = ("float32", "float64")
#: the convolution blocks' fusions of issue 18 session 13 (a convolution's two gradients, batch norm
#: with its ReLU both ways); read when a plan is built. ``TW_REMAP_CONV_BLOCKS=0``: off, for comparisons.
CONV_BLOCKS = os.environ.get("TW_REMAP_CONV_BLOCKS", "1") != "0"
#: issue 18 session 14 (ln18): a constant scale after a softmax gradient folded into it (``SoftmaxGrad``'s
#: ``scale``); ``TW_REMAP_SOFTMAX_SCALE=0``: off, for comparisons
SOFTMAX_SCALE = os.environ.get("TW_REMAP_SOFTMAX_SCALE", "1") != "0"
#: issue 18 session 17 (tx21): ``Softmax``'s composite gradient as one ``SoftmaxGrad`` (the op itself stays
#: off in the gradient, ``softmax_grad_ops.FUSED``: the planner reads it); ``TW_REMAP_SOFTMAX_GRAD=0``: off
SOFTMAX_GRAD = os.environ.get("TW_REMAP_SOFTMAX_GRAD", "1") != "0"
_CONTRACTIONS = {"Conv1D": "FusedConv1D", "Conv2D": "FusedConv2D", "Conv3D": "FusedConv3D",
                 "MatMul": "FusedMatMul"}
def _free(op, work):
    """Not an ordering point, one float output of a supported dtype."""
    return (id(op) not in work.pinned and not op.control_inputs and len(op.outputs) == 1
            and op.outputs[0].dtype.name in _DTYPES)


def _only_reader(t, op, work):
    """``t`` is read by ``op`` alone (once) and is neither fed nor fetched."""
    return not work.protected(t) and work.consumers.get(id(t), []) == [op]


def _channels_last(op):
    return not str(op.attrs.get("data_format", "NHWC")).startswith("NC")


def _fuse_contraction(bias_add, work):
    x = bias_add.inputs[0]
    c = x.op
    if not (_free(bias_add, work) and c.type in _CONTRACTIONS and runs_stock_kernel(c) and _free(c, work)
            and _only_reader(x, bias_add, work) and c.device == bias_add.device):
        return None
    if not (_channels_last(c) and (_channels_last(bias_add) or x.shape.rank == 2)):
        return None
    if any(t.dtype is not x.dtype for t in list(c.inputs) + [bias_add.inputs[1]]):
        return None
    last, fused = bias_add, [c, bias_add]
    readers = work.consumers.get(id(bias_add.outputs[0]), [])
    if len(readers) == 1 and runs_stock_kernel(readers[0], "Relu") and _free(readers[0], work) \
            and _only_reader(bias_add.outputs[0], readers[0], work) and readers[0].device == c.device:
        last = readers[0]
        fused.append(last)
    kind = _CONTRACTIONS[c.type]
    d = get_op(kind)
    if work.device_type(c) not in d.kernels:
        return None
    y = last.outputs[0]
    attrs = {**{k: v for k, v in c.attrs.items() if k[0] != "_"}, "relu": last is not bias_add}
    node = Node(last, d, (c.inputs[0], c.inputs[1], bias_add.inputs[1]), attrs, [(y.shape, y.dtype)],
                type_=kind, control_inputs=(), fused=[o.name for o in fused])
    work.fuse(node, fused)
    return fused


def _fuse_gradients(bias_grad, work):
    g = bias_grad.inputs[0]
    rg = g.op
    if not (_free(bias_grad, work) and runs_stock_kernel(rg, "ReluGrad") and _free(rg, work)
            and id(bias_grad.outputs[0]) not in work.feed_ids and id(g) not in work.feed_ids
            and rg.device == bias_grad.device):
        return None
    if not (_channels_last(bias_grad) or g.shape.rank == 2) or g.shape.rank is None or g.shape.rank < 2:
        return None
    d = get_op("FusedReluGradBiasAddGrad")
    if work.device_type(rg) not in d.kernels:
        return None
    with_product = matmul_relu_grad.fuse(rg, bias_grad, work, _free, _only_reader)
    if with_product:
        return with_product
    db = bias_grad.outputs[0]
    node = Node(rg, d, rg.inputs, {"data_format": bias_grad.attrs.get("data_format", "NHWC")},
                [(g.shape, g.dtype), (db.shape, db.dtype)], type_="FusedReluGradBiasAddGrad",
                control_inputs=(), fused=[rg.name, bias_grad.name])
    work.node_rep[id(rg)] = node
    work.node_rep[id(bias_grad)] = None
    work.rep[id(db)] = node.outputs[1]     # a fetch of the bias gradient reads the fused node
    return [rg, bias_grad]


def _fuse_cross_entropy(loss, work):
    x = [work.resolve(t) for t in loss.inputs]
    grad = next((op for op in work.consumers.get(id(x[0]), []) if runs_stock_kernel(op, "SparseSoftmaxCrossEntropyGrad")
                 and [work.resolve(t) for t in op.inputs] == x and op.device == loss.device), None)
    if grad is None or not (_free(loss, work) and _free(grad, work)) \
            or any(id(o.outputs[0]) in work.feed_ids for o in (loss, grad)) \
            or work.ops.index(grad) < work.ops.index(loss):    # the node computes both at the loss's place
        return None
    d = get_op("FusedSparseSoftmaxCrossEntropy")
    if work.device_type(loss) not in d.kernels:
        return None
    extra, attrs, (y, dy), tail = loss_tail.tail(loss, loss.outputs[0], grad.outputs[0], work)
    node = Node(loss, d, x + extra, attrs, [(y.shape, y.dtype), (dy.shape, dy.dtype)],
                type_="FusedSparseSoftmaxCrossEntropy", control_inputs=(), fused=[o.name for o in [loss, grad] + tail])
    work.node_rep[id(loss)] = node
    for op in [grad] + tail:
        work.node_rep[id(op)] = None
    work.rep[id(y)] = node.outputs[0]     # (the per-sample losses when no mean was taken: commit maps them too)
    work.rep[id(dy)] = node.outputs[1]
    return [loss, grad] + tail


def _fuse_update(group, work):
    """The latest-computed gradient of a grouped Adam update that is a product only it reads."""
    if group.attrs.get("amsgrad"):
        return None
    n, k = group.attrs["num_variables"], 3
    grads = group.inputs[n * k + 2:]
    order = {id(op): i for i, op in enumerate(work.ops)}
    best = None
    for index, g in enumerate(grads):
        mm = g.op
        if not (id(mm) in order and runs_stock_kernel(mm, "MatMul") and _free(mm, work)
                and _only_reader(g, group, work) and mm.device == group.device and g.shape.rank == 2
                and all(t.dtype is g.dtype for t in mm.inputs)):
            continue
        if best is None or order[id(mm)] > order[id(best[1])]:
            best = (index, mm)
    d = get_op("FusedMatMulGroupApplyAdam")
    if best is None or work.device_type(group) not in d.kernels:
        return None
    index, mm = best
    inputs = list(group.inputs[:n * k + 2]) + [t for i, t in enumerate(grads) if i != index] + list(mm.inputs)
    attrs = {**{a: v for a, v in group.attrs.items() if a[0] != "_"}, "index": index,
             "transpose_a": bool(mm.attrs.get("transpose_a", False)),
             "transpose_b": bool(mm.attrs.get("transpose_b", False))}
    node = Node(group, d, inputs, attrs, [], type_="FusedMatMulGroupApplyAdam", fused=[mm.name, group.name])
    work.node_rep[id(group)] = node
    work.node_rep[id(mm)] = None
    return [mm, group]


_CONV_BACKPROPS = {f"Conv{nd}DBackpropInput": (f"Conv{nd}DBackpropFilter", f"FusedConv{nd}DBackprop")
                   for nd in (1, 2, 3)}


def _attrs(op):
    return {k: v for k, v in op.attrs.items() if k[0] != "_"}


def _fuse_conv_backprops(bpi, work):
    """``bpi`` and its filter-gradient twin (same output gradient, attributes and device) as one
    node at the later one's place; the first twin that qualifies."""
    twin_type, kind = _CONV_BACKPROPS[bpi.type]
    d = get_op(kind)
    dy = work.resolve(bpi.inputs[2])
    attrs = _attrs(bpi)
    if not _free(bpi, work) or id(bpi.outputs[0]) in work.feed_ids or work.device_type(bpi) not in d.kernels:
        return None
    order = None
    for bpf in work.consumers.get(id(dy), []):
        # a twin already fused with another (two pairs can share one output gradient: a ConvLSTM's
        # input and recurrent convolutions both read the gates' gradient) is not fused twice
        if id(bpf) in work.node_rep:
            continue
        if not (runs_stock_kernel(bpf, twin_type) and work.resolve(bpf.inputs[2]) is dy and bpf.device == bpi.device
                and _attrs(bpf) == attrs and _free(bpf, work) and id(bpf.outputs[0]) not in work.feed_ids):
            continue
        order = order or {id(op): i for i, op in enumerate(work.ops)}
        first, last = sorted((bpi, bpf), key=lambda op: order[id(op)])
        # the node computes the earlier one's output at the later one's place: nothing reads it before
        if all(order.get(id(c), -1) > order[id(last)] for c in work.consumers.get(id(first.outputs[0]), [])):
            break
    else:
        return None
    filter_first = last is bpf
    outs = [(t.shape, t.dtype) for t in (bpi.outputs[0], bpf.outputs[0])]
    node = Node(last, d, (bpi.inputs[0], bpi.inputs[1], bpf.inputs[0], bpf.inputs[1], dy),
                {**attrs, "filter_first": filter_first}, outs[::-1] if filter_first else outs, type_=kind,
                control_inputs=(), fused=[bpi.name, bpf.name])
    work.node_rep[id(last)] = node          # (commit maps the later one's output to the node's first)
    work.node_rep[id(first)] = None
    work.rep[id(first.outputs[0])] = node.outputs[1]
    return [bpi, bpf]


def _plain(op, work, dtype):
    """Not an ordering point, no output fed, its first output of ``dtype``, one of the fused
    kernels' float types (for nodes with several outputs, where ``_free`` asks for one)."""
    return (id(op) not in work.pinned and not op.control_inputs and dtype.name in _DTYPES
            and op.outputs[0].dtype is dtype and not any(id(t) in work.feed_ids for t in op.outputs))


def _fuse_batch_norm_relu(bn, work):
    """``BatchNormTraining`` whose ``y`` only a ``Relu`` reads: one node at the batch norm's place."""
    y = bn.outputs[0]
    readers = work.consumers.get(id(y), [])
    d = get_op("FusedBatchNormTrainingRelu")
    if len(readers) != 1 or work.protected(y) or work.device_type(bn) not in d.kernels:
        return None
    relu = readers[0]
    if not (runs_stock_kernel(relu, "Relu") and _free(relu, work) and relu.device == bn.device
            and id(relu.outputs[0]) not in work.feed_ids
            and _plain(bn, work, y.dtype) and relu.outputs[0].dtype is y.dtype):
        return None
    node = Node(bn, d, bn.inputs, _attrs(bn), [(relu.outputs[0].shape, y.dtype)] + [(t.shape, t.dtype) for t in bn.outputs[1:]],
                type_="FusedBatchNormTrainingRelu", control_inputs=(), fused=[bn.name, relu.name])
    work.node_rep[id(bn)] = node     # (commit maps y, read by nobody else, to the node's first output)
    work.node_rep[id(relu)] = None
    work.rep[id(relu.outputs[0])] = node.outputs[0]
    return [bn, relu]


def _fuse_relu_grad_batch_norm_grad(bng, work):
    """``BatchNormTrainingGrad`` of a ``ReluGrad`` only it reads: one node at the gradient's place."""
    dy = bng.inputs[0]
    rg = dy.op
    d = get_op("FusedReluGradBatchNormTrainingGrad")
    if not (runs_stock_kernel(rg, "ReluGrad") and _free(rg, work) and _only_reader(dy, bng, work)
            and rg.device == bng.device and _plain(bng, work, dy.dtype) and work.device_type(bng) in d.kernels
            and all(t.dtype is dy.dtype for t in rg.inputs)):
        return None
    node = Node(bng, d, tuple(rg.inputs) + tuple(bng.inputs[1:]), _attrs(bng), [(t.shape, t.dtype) for t in bng.outputs],
                type_="FusedReluGradBatchNormTrainingGrad", control_inputs=(), fused=[rg.name, bng.name])
    work.node_rep[id(bng)] = node
    work.node_rep[id(rg)] = None
    return [rg, bng]


def _fold_softmax_grad_scale(mul, work):
    """``Mul(SoftmaxGrad(y, g), c)`` (either order) with ``c`` a constant scalar, the gradient
    only that ``Mul`` reads: one ``SoftmaxGrad`` with ``scale=c`` at the ``Mul``'s place (the
    gradient of ``softmax(x * c)``: the scale's own pass over the scores goes). Only from
    ``scale=1``: the kernel then multiplies by ``c`` last, the unfused ``Mul``'s bits."""
    for i in (0, 1):
        t, c = mul.inputs[i], const_value(mul.inputs[1 - i], work)
        sg = t.op
        if c is None or not runs_stock_kernel(sg, "SoftmaxGrad") or sg.attrs.get("scale", 1.0) != 1.0:
            continue
        c = np.asarray(c)
        out = mul.outputs[0]
        if not (c.ndim == 0 and c.dtype == t.dtype.np_dtype and _free(mul, work) and _plain(sg, work, t.dtype)
                and _only_reader(t, mul, work) and mul.device == sg.device and out.dtype is t.dtype
                and id(out) not in work.feed_ids and out.shape.is_compatible_with(t.shape)
                and t.shape.is_fully_defined() == out.shape.is_fully_defined()):
            continue
        node = Node(mul, sg.opdef, sg.inputs, {**_attrs(sg), "scale": float(c)}, [(out.shape, out.dtype)],
                    type_="SoftmaxGrad", control_inputs=(), fused=[sg.name, mul.name])
        work.node_rep[id(mul)] = node
        work.node_rep[id(sg)] = None
        return [sg, mul]
    return None


def _softmax_axis(y):
    """``(y's Softmax node, its normalized axis)`` when ``y`` is a stock ``Softmax``'s output, else None."""
    sm = y.op
    rank = y.shape.rank
    if not runs_stock_kernel(sm, "Softmax") or rank is None or rank == 0:
        return None
    return sm, int(sm.attrs["axis"]) % rank


def _sum_axis(s, rank):
    """The one axis (normalized) a keep-dims ``Sum`` reduces, else None."""
    axis = s.op.attrs.get("axis")
    axis = None if axis is None else np.asarray(axis).ravel()
    if axis is None or axis.size != 1 or axis.dtype.kind not in "iu" or not s.op.attrs.get("keepdims") or not rank:
        return None
    return int(axis[0]) % rank


def _fuse_softmax_grad(mul, work):
    """``y * (g - Sum(g * y, axis, keepdims))`` with ``y = Softmax(x, axis)`` (``Softmax``'s
    composite gradient, ``ops/nn_ops.py``; products either order), each intermediate read by the
    next alone: one ``SoftmaxGrad(y, g)`` at the outer ``Mul``'s place, one pass per row instead
    of three (the fused product-and-sum, the broadcast subtraction, the product) and two
    full-size temporaries fewer. Not the composite's bits: the kernel sums the exact products in
    float64 and rounds once (the composite rounds each product to the dtype first), so it differs
    by a rounding of the row sum, as ``FusedReduction`` does (issue 18 session 17, tx21)."""
    d = get_op("SoftmaxGrad")
    out = mul.outputs[0]
    if work.device_type(mul) not in d.kernels or not _free(mul, work) or id(out) in work.feed_ids:
        return None
    for i in (0, 1):
        y, diff = mul.inputs[i], mul.inputs[1 - i]
        found = _softmax_axis(y)
        sub = diff.op
        if found is None or not (runs_stock_kernel(sub, "Sub") and _free(sub, work)
                                 and _only_reader(diff, mul, work)):
            continue
        g, s = sub.inputs
        if not (runs_stock_kernel(s.op, "Sum") and _free(s.op, work) and _only_reader(s, sub, work)
                and _sum_axis(s, y.shape.rank) == found[1]):
            continue
        prod = s.op.inputs[0]
        pm = prod.op
        if not (runs_stock_kernel(pm, "Mul") and _free(pm, work) and _only_reader(prod, s.op, work)
                and len(pm.inputs) == 2 and {id(t) for t in pm.inputs} == {id(g), id(y)}):
            continue
        shape = static_dims(y)
        if shape is None or static_dims(g) != shape or static_dims(out) != shape or not (
                y.dtype is g.dtype is out.dtype and y.dtype.name in _DTYPES) or \
                len({op.device for op in (mul, sub, s.op, pm)}) != 1:
            continue
        node = Node(mul, d, (y, g), {"axis": found[1], "scale": 1.0}, [(out.shape, out.dtype)], type_="SoftmaxGrad",
                    control_inputs=(), fused=[pm.name, s.op.name, sub.name, mul.name])
        work.node_rep[id(mul)] = node
        for op in (pm, s.op, sub):
            work.node_rep[id(op)] = None
        return [pm, s.op, sub, mul]
    return None


def _fuse_einsum_bias(add, work, taken):
    """``Einsum -> BiasAdd | AddV2 [-> Relu]`` as one ``FusedEinsum`` (``einsum_bias.fuse``)."""
    if any(id(t.op) in taken for t in add.inputs):
        return None
    return einsum_bias.fuse(add, work, _free, _only_reader, _channels_last)


def run(work):
    n = 0
    taken = set()
    for op in list(work.ops):
        if id(op) in taken:
            continue
        if runs_stock_kernel(op, "BiasAdd") and id(op.inputs[0].op) not in taken:
            fused = _fuse_contraction(op, work) or _fuse_einsum_bias(op, work, taken)
        elif runs_stock_kernel(op, "AddV2"):
            fused = _fuse_einsum_bias(op, work, taken)
        elif runs_stock_kernel(op, "BiasAddGrad") and id(op.inputs[0].op) not in taken:
            fused = _fuse_gradients(op, work)
        elif runs_stock_kernel(op, "SparseSoftmaxCrossEntropyWithLogits"):
            fused = _fuse_cross_entropy(op, work)
        elif runs_stock_kernel(op, "ResourceGroupApplyAdam"):
            fused = _fuse_update(op, work)
        elif runs_stock_kernel(op, "Mul") and SOFTMAX_SCALE:
            fused = (SOFTMAX_GRAD and _fuse_softmax_grad(op, work)) or _fold_softmax_grad_scale(op, work)
        elif not CONV_BLOCKS:
            continue
        elif op.type in _CONV_BACKPROPS and runs_stock_kernel(op) and id(op) not in taken:
            fused = _fuse_conv_backprops(op, work)
        elif runs_stock_kernel(op, "BatchNormTraining"):
            fused = _fuse_batch_norm_relu(op, work)
        elif runs_stock_kernel(op, "BatchNormTrainingGrad") and id(op.inputs[0].op) not in taken:
            fused = _fuse_relu_grad_batch_norm_grad(op, work)
        else:
            continue
        if fused:
            n += 1
            taken.update(id(o) for o in fused)
    return n
