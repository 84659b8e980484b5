"""``FusedHeadAttention``: self-attention's query/key/value projections (``FusedEinsumGroup``) and
the attention itself (``FusedAttention``) as one plan step, the plan node
``runtime/passes/head_attention.py`` makes (never a graph op).

Why: every head's scores, softmax and weighted sum read that head's columns of the three
projections and nothing else, so the step can be cut by heads once: each block of heads projects
its own columns (three one-thread GEMMs of the input against the stacked weight's column blocks,
their bias, ReLU and scale) and attends over them on one thread, the blocks shared with the
intra-op threads (``gemm.share_tasks``): **one hand-off** where the projection was one product
split on its own (or not) and the attention another (issue 18, enc29: PyTorch ran
``encoder2_predict`` on both cores for as much CPU as ours used on 1.1-1.3).

Which way a geometry takes is its class's timing (``head-attention:<the attention's class>,c<bits
of the input's width>,p<parts>`` in the GEMM tuner's file, on a quiet machine with the own-core
probe): ``"one"``, the group's kernel then the attention's (the plan without the pass: its bits;
the incumbent, and the way untimed under load), or ``"rows"``, by heads (:func:`_by_heads`; the
name the GEMM tuner's file knows for a split way). The heads way's bias, ReLU, scale and attention
are the same operations per element and per pair as the two kernels' fused ways; its products are
column blocks of the group's product (each output column from the same row and column of the
operands).

>>> import numpy as np
>>> x, w, b = np.ones((1, 2, 2), np.float32), np.ones((2, 1, 2), np.float32), np.zeros((1, 2), np.float32)
>>> head_attention(x, w, w, w, b, b, b, equation="abc,cfde->abfde", count=3, weight_axis=1, out_axis=2, bias=True,
...                relu=False, scales=(None, 0.5, None), dot="aecd,abcd->acbe", combine="acbe,aecd->abcd",
...                at=(0, 1, 2)).tolist()
[[[[2.0, 2.0]], [[2.0, 2.0]]]]
"""
import functools

import numpy as np

from tensorweave.core import derived
from tensorweave.kernels.cpu import (attention_kernels, einsum_bias_kernels, einsum_group_kernels, einsum_matmul, gemm,
                                    gemm_tuning)

#: this process's geometries -> "one" or "rows" (by heads; :func:`_way`), at most ``einsum_matmul.GEOMETRIES``
_chosen = {}
#: this process's geometries that ran by heads, with every operand's shape and dtype -> the layout
#: :func:`_layout` found on the first call (None: not by heads), at most ``einsum_matmul.GEOMETRIES``
_layouts = {}


def head_attention(a, *operands, equation, count, weight_axis, out_axis, bias, relu, scales, dot, combine, at):
    """``fused_attention(k, q, v)`` of ``(k, q, v) = [outs[i] for i in at]``, ``outs`` the
    ``FusedEinsumGroup``'s outputs (``einsum_group_kernels.fused_einsum_group``: ``a`` against the
    weights ``operands[:count]``, biases after them); ``dot``/``combine`` the attention's
    (``attention_kernels.fused_attention``)."""
    group = dict(equation=equation, count=count, weight_axis=weight_axis, out_axis=out_axis, bias=bias, relu=relu,
                 scales=scales)
    parts = gemm.split_parts()
    if parts > 1 and not gemm.inside_blocks_here():
        key = (a.shape, a.strides, operands[0].shape, a.dtype.char, equation, count, at, parts)
        way = _chosen.get(key)
        if way is None:
            way = einsum_matmul.remember(_chosen, key, _way(a, operands, group, dot, combine, at, parts))
        if way == "rows":
            got = _known_operands(key, a, operands, group, at, parts)
            if got is not None:
                return _by_heads(*got, group, parts)
    return _apart(a, operands, group, dot, combine, at)


def _apart(a, operands, group, dot, combine, at):
    """The two kernels the node stands for, one after the other (the plan without the pass)."""
    outs = einsum_group_kernels.fused_einsum_group(a, *operands, **group)
    k, q, v = (outs[i] for i in at)
    return attention_kernels.fused_attention(k, q, v, dot=dot, combine=combine)


def _operands(a, operands, group, at):
    """``(a2, w, b, y, (k, q, v), out, how)`` where the heads way can run: three float32/64
    projections with biases, ``a`` ``[B, T, C]`` against the stacked ``w`` ``[C, 3, H, D]`` as one
    2-D GEMM into ``y`` ``[B, T, 3, H, D]`` (``a2 [B*T, C]``), ``k``, ``q``, ``v`` its slices,
    fusable by ``attention_kernels`` (``how``: MKL's one-thread GEMM), at least two heads; else
    None (the two kernels then, whose checks raise for bad input)."""
    if group["count"] != 3 or not group["bias"] or len(operands) != 6 or group["out_axis"] != 2 \
            or a.ndim != 3 or a.dtype not in (np.float32, np.float64) \
            or any(x.dtype != a.dtype or x.shape != operands[0].shape for x in operands[:3]) \
            or any(x.dtype != a.dtype or x.shape != operands[3].shape for x in operands[3:]):
        return None
    w = derived.get_many(operands[:3], ("einsum-group", group["weight_axis"]),
                         einsum_group_kernels._stacked(group["weight_axis"]))
    b = derived.get_many(operands[3:], ("einsum-group", 0), einsum_group_kernels._stacked(0))
    sa, sb, so = einsum_bias_kernels._split(group["equation"])
    plan = einsum_matmul._plan(sa, sb, so, a.shape, w.shape)
    got = None if plan is None else einsum_matmul._in_order(a, w, sa, sb, so, plan)
    (bs, t, c), heads = a.shape, w.shape[2] if w.ndim == 4 else 0
    if got is None or w.ndim != 4 or w.shape[:2] != (c, 3) or heads < 2 or b.shape != w.shape[1:] \
            or got[2] != (bs, t) + w.shape[1:] or not w.flags.c_contiguous:
        return None
    y = np.empty(got[2], a.dtype)
    k, q, v = (y[:, :, i] for i in at)
    how = attention_kernels._fusable(k, q, v)
    if how is None:
        return None
    return got[0], w, b, y, (k, q, v), np.empty(q.shape, a.dtype), how


def _known_operands(key, a, operands, group, at, parts):
    """``(operands, runner)``: :func:`_operands` of a geometry (``key``: :func:`head_attention`'s)
    remade from the layout its first call found (:func:`_layout`): the stacked weight and bias
    (cached while the variables are unchanged), views and new arrays, without the checks
    :func:`_operands` makes on the calling thread while the helper waits for the hand-off (issue
    18, enc30); and the runner of a block's projections. None where the step cannot run by heads."""
    full = (key, tuple((x.shape, x.dtype.char) for x in operands), group["weight_axis"], group["out_axis"],
            group["bias"])
    layout = _layouts.get(full, False)
    if layout is False:
        layout = einsum_matmul.remember(_layouts, full, _layout(a, operands, group, at, parts))
    if layout is None:
        return None
    arr_a, shape, runner = layout
    w = derived.get_many(operands[:3], ("einsum-group", group["weight_axis"]),
                         einsum_group_kernels._stacked(group["weight_axis"]))
    b = derived.get_many(operands[3:], ("einsum-group", 0), einsum_group_kernels._stacked(0))
    y = np.empty(shape, a.dtype)
    k, q, v = (y[:, :, i] for i in at)
    how = attention_kernels._fusable(k, q, v)       # (asked each call, as `_operands` does: MKL's per-thread GEMM)
    if how is None:
        return None
    return (einsum_matmul.matrix(a, arr_a), w, b, y, (k, q, v), np.empty(q.shape, a.dtype), how), runner


def _layout(a, operands, group, at, parts):
    """``(arrangement of a, the group's output shape, runner)`` where :func:`_operands` runs the
    step by heads (``einsum_matmul.in_order_layout``'s; ``runner``: ``einsum_matmul.one_thread_runner``'s
    of a block's projection, made on the first block's first), else None."""
    got = _operands(a, operands, group, at)
    if got is None:
        return None
    a2, w, _, y = got[:4]
    sa, sb, so = einsum_bias_kernels._split(group["equation"])
    step, (bs, t, _, _, d) = _heads_step(y.shape[3], parts), y.shape
    runner = einsum_matmul.one_thread_runner(a2, w[:, 0, :step].reshape(w.shape[0], step * d),
                                             y.reshape(bs * t, 3, -1, d)[:, 0, :step].reshape(bs * t, step * d))
    return einsum_matmul.in_order_layout(sa, sb, so, a.shape, w.shape)[0], y.shape, runner


def _heads_step(heads, parts):
    """Heads a block of :func:`_by_heads` takes."""
    return -(-heads // parts)


def _by_heads(operands, runner, group, parts):
    """The step by blocks of heads, each block's three projections (its weight and output columns,
    ``gemm.matmul(one_thread=True)``; ``runner``, where given: the same call, made for blocks of
    the full step of heads), bias, ReLU and scale, then its (batch, head) pairs
    (``attention_kernels.pair_block``) on one thread; the blocks shared over ``parts`` threads."""
    a2, w, b, y, (k, q, v), out, (fn, set_local) = operands
    bs, t, _, heads, d = y.shape
    c = w.shape[0]
    y2 = y.reshape(bs * t, 3, heads, d)
    step = _heads_step(heads, parts)
    scales = group["scales"] or (None,) * 3

    def block(h0):
        h1 = min(heads, h0 + step)
        product = runner if runner is not None and h1 - h0 == step else einsum_matmul.matmul_one_thread
        for i in range(3):
            part = y2[:, i, h0:h1].reshape(bs * t, (h1 - h0) * d)
            product(a2, w[:, i, h0:h1].reshape(c, (h1 - h0) * d), part)
            np.add(part, b[i, h0:h1].reshape(-1), out=part)
            if group["relu"]:
                np.maximum(part, 0, out=part)
            if scales[i] is not None:
                np.multiply(part, y.dtype.type(scales[i]), out=part)
        for n in range(bs):
            attention_kernels.pair_block(k, q, v, fn, set_local, out, n * heads + h0, n * heads + h1)
    gemm.share_tasks([functools.partial(block, h0) for h0 in range(0, heads, step)], parts)
    return out


def _way(a, operands, group, dot, combine, at, parts):
    """``"one"`` or ``"rows"`` (by heads) for a new geometry: "one" where the heads way cannot run; else
    its class's way: the tuning file's, or timed now on a quiet machine, "one" otherwise."""
    got = _operands(a, operands, group, at)
    if got is None:
        return "one"
    bs, t, _, heads, d = got[3].shape
    cls = f"head-attention:{gemm_tuning.shape_class(t, t, d, a.dtype.name, False, True, bs * heads)}," \
          f"c{a.shape[2].bit_length()},p{parts}"
    can_time = gemm_tuning.quiet()
    chosen = gemm._cached_threaded(cls, can_time)
    if chosen is None and can_time:
        runners = {"one": functools.partial(_apart, a, operands, group, dot, combine, at),
                   "rows": functools.partial(_by_heads, got, None, group, parts)}
        chosen = gemm.timed_choice(cls, runners, "one", runners["one"])
    return chosen or "one"
