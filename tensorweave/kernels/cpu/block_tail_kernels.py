"""``FusedBlockTail``: a post-norm transformer block after its attention as one plan step (the
plan node ``runtime/passes/block_tail.py`` makes; never a graph op): the output projection
(``FusedEinsum``), the residual add + layer norm (``AddLayerNorm``), the feed-forward pair
(``FusedEinsumPair``) and the second residual add + layer norm.

Why: every step of that chain reads and writes whole rows (one position's values) and nothing
else, so it can be cut by rows once: each block of rows goes through all four steps on one
thread, its rows in that core's cache, the blocks shared with the intra-op threads
(``gemm.share_tasks``): **one hand-off for the block's tail** where each product split on its own
paid one per product and the layer norms ran on the calling thread alone. On the 2-vCPU AMD EPYC
PyTorch ran ``encoder2_predict`` on both cores (CPU/wall 1.8-2.0) for as much CPU as ours, which
used 1.1-1.3 of them (issue 18, enc28/enc29).

Which way a geometry takes is its class's timing (``block-tail:<the projection's class>,h<bits
of the hidden width>,p<parts>`` in the GEMM tuner's file, on a quiet machine with the own-core
probe, as ``einsum-pair:``): ``"one"``, the four kernels one after another (the plan without the
pass: its bits; the incumbent, and the way untimed under load), or ``"rows"`` (:func:`_by_rows`).
The rows way runs the same layer-norm and bias loops on each row; its products are the blocks'
one-thread GEMMs (the pair's rows way's), so its bits are those of the plan where the library
gives a block of rows the bits it gives them in the whole product.

>>> import numpy as np
>>> h, x = np.ones((1, 2, 1, 2), np.float32), np.array([[[0, 1], [2, 5]]], np.float32)
>>> eye, one, zero = np.eye(2, dtype=np.float32), np.ones(2, np.float32), np.zeros(2, np.float32)
>>> block_tail(h, eye[None], zero, x, one, zero, eye, zero, eye, zero, one, zero, proj="abcd,cde->abe",
...            first="abc,cd->abd", second="abd,de->abe", relu0=False, relu1=True, relu2=False, eps1=0.0,
...            eps2=0.0, rms1=False, rms2=False).tolist()
[[[-1.0, 1.0], [-1.0, 1.0]]]
"""
import functools

import numpy as np

from tensorweave.kernels.cpu import einsum_bias_kernels, einsum_matmul, gemm, gemm_tuning, layer_norm_kernels
from tensorweave.kernels.cpu import layer_norm_loops, nn_loops

#: this process's geometries -> "one" or "rows" (:func:`_way`), at most ``einsum_matmul.GEOMETRIES``
_chosen = {}
#: this process's geometries that ran by rows, with their vectors' shapes and every dtype -> the
#: layout :func:`_layout` found on the first call (None: not by rows), at most ``einsum_matmul.GEOMETRIES``
_layouts = {}


def block_tail(h, wo, bo, x, g1, be1, w1, b1, w2, b2, g2, be2, *, proj, first, second, relu0, relu1, relu2,
               eps1, eps2, rms1, rms2):
    """``y2`` of ``y1 = LayerNorm(x + p)`` (``gamma g1``, ``beta be1``), ``p = FusedEinsum(h, wo,
    bo, proj, relu0)``, then ``y2 = LayerNorm(y1 + FusedEinsumPair(y1, w1, b1, w2, b2, first,
    second, relu1, relu2))`` (``g2``, ``be2``); both layer norms over the last axis (``epsN``,
    ``rmsN`` their attributes). ``h`` is the attention's ``[B, T, H, D]`` output, ``x`` the
    block's input ``[B, T, N]``."""
    args = (h, wo, bo, x, g1, be1, w1, b1, w2, b2, g2, be2)
    attrs = (proj, first, second, relu0, relu1, relu2, eps1, eps2, rms1, rms2)
    parts = gemm.split_parts()
    if parts > 1 and not gemm.inside_blocks_here():
        key = (h.shape, h.strides, x.shape, x.strides, wo.shape, wo.strides, w1.shape, w1.strides, w2.shape,
               w2.strides, h.dtype.char, proj, first, second, parts)
        way = _chosen.get(key)
        if way is None:
            way = einsum_matmul.remember(_chosen, key, _way(args, attrs, parts))
        if way == "rows":
            got = _known_operands(key, args, attrs, parts)
            if got is not None:
                return _by_rows(*got, attrs, parts)
    return _apart(args, attrs)


def _apart(args, attrs):
    """The four kernels the node stands for, one after another (the plan without the pass)."""
    h, wo, bo, x, g1, be1, w1, b1, w2, b2, g2, be2 = args
    proj, first, second, relu0, relu1, relu2, eps1, eps2, rms1, rms2 = attrs
    p = einsum_bias_kernels.fused_einsum(h, wo, bo, proj, relu0)
    y1 = layer_norm_kernels.add_layer_norm(x, p, g1, be1, eps1, -1, rms1)[0]
    f = einsum_bias_kernels.fused_einsum_pair(y1, w1, b1, w2, b2, first, second, relu1, relu2)
    return layer_norm_kernels.add_layer_norm(y1, f, g2, be2, eps2, -1, rms2)[0]


def _operands(args, attrs):
    """What :func:`_by_rows` reads and writes, the ``[M, ...]`` row matrices of every step (views
    of new arrays), or None where the chain cannot run by rows (a product that is not one 2-D
    GEMM in the output's order, a bias or a norm's parameters not of the row's width, mixed
    dtypes): the four kernels then, whose checks raise for bad input."""
    h, wo, bo, x, g1, be1, w1, b1, w2, b2, g2, be2 = args
    proj = attrs[0]
    dt = x.dtype
    if dt not in einsum_bias_kernels.DTYPES or any(t.dtype != dt for t in args) \
            or not einsum_bias_kernels._trailing(h, wo, bo, proj):
        return None
    sa, sb, so = einsum_bias_kernels._split(proj)
    plan = einsum_matmul._plan(sa, sb, so, h.shape, wo.shape)
    got = None if plan is None else einsum_matmul._in_order(h, wo, sa, sb, so, plan)
    if got is None or got[2] != x.shape:
        return None
    a2, wom, _ = got
    m, n = a2.shape[0], wom.shape[1]
    if any(t.shape != (n,) for t in (bo, g1, be1, g2, be2)):
        return None
    y1 = np.empty(x.shape, dt)
    pair = einsum_bias_kernels._pair_operands(y1, w1, b1, w2, b2, *attrs[1:3])
    if pair is None or pair[6].shape != x.shape or pair[0].shape != (m, n) \
            or pair[0].__array_interface__["data"][0] != y1.__array_interface__["data"][0]:
        return None
    _, w1m, bias1, hidden, w2m, bias2, y2 = pair
    return (a2, wom, bo, np.ascontiguousarray(x).reshape(m, n), g1, be1, pair[0], w1m, bias1, hidden, w2m,
            bias2, np.empty((m, n), dt), g2, be2, y2)


def _known_operands(key, args, attrs, parts):
    """``(operands, runners)``: :func:`_operands` of a geometry (``key``: :func:`block_tail`'s)
    remade from the layout its first call found (:func:`_layout`): views and new arrays, without
    the ~30-90 µs of checks :func:`_operands` makes on the calling thread while the helper waits for
    the hand-off (issue 18, enc30); and the blocks' three products' runners. The vectors' shapes
    and every dtype are part of the layout's key: the checks that read them hold for every call of
    the key. None where the chain cannot run by rows."""
    vectors = (args[2].shape, args[4].shape, args[5].shape, args[7].shape, args[9].shape, args[10].shape,
               args[11].shape)
    full = (key, vectors, tuple(t.dtype.char for t in args))
    layout = _layouts.get(full, False)
    if layout is False:
        layout = einsum_matmul.remember(_layouts, full, _layout(args, attrs, parts))
    if layout is None:
        return None
    h, wo, bo, x, g1, be1, w1, b1, w2, b2, g2, be2 = args
    arr_h, arr_wo, arr_w1, arr_w2, m, n, hidden, runners = layout
    dt = x.dtype
    return (einsum_matmul.matrix(h, arr_h), einsum_matmul.matrix(wo, arr_wo), bo,
            np.ascontiguousarray(x).reshape(m, n), g1, be1, np.empty((m, n), dt), einsum_matmul.matrix(w1, arr_w1),
            np.ascontiguousarray(b1).reshape(hidden), np.empty((m, hidden), dt), einsum_matmul.matrix(w2, arr_w2),
            np.ascontiguousarray(b2).reshape(n), np.empty((m, n), dt), g2, be2, np.empty(x.shape, dt)), runners


def _layout(args, attrs, parts):
    """``(arrangements of h, wo, w1, w2, rows, width, hidden width, runners)`` where
    :func:`_operands` runs the chain by rows (``einsum_matmul.in_order_layout``'s arrangements, the
    ones its matrices were made by; ``runners``: ``einsum_matmul.one_thread_runner``'s of a
    block's three products, made on the first block), else None."""
    operands = _operands(args, attrs)
    if operands is None:
        return None
    a2, wom, _, _, _, _, y1, w1m, _, hid, w2m, _, f = operands[:13]
    step = gemm.block_size(a2.shape[0], parts)
    runners = tuple(einsum_matmul.one_thread_runner(a[:step], b, out[:step])
                    for a, b, out in ((a2, wom, f), (y1, w1m, hid), (hid, w2m, f)))
    h, wo, _, x, _, _, w1, _, w2 = args[:9]
    proj, first, second = attrs[:3]
    arr_h, arr_wo, _ = einsum_matmul.in_order_layout(*einsum_bias_kernels._split(proj), h.shape, wo.shape)
    _, arr_w1, shape = einsum_matmul.in_order_layout(*einsum_bias_kernels._split(first), x.shape, w1.shape)
    arr_w2 = einsum_matmul.in_order_layout(*einsum_bias_kernels._split(second), shape, w2.shape)[1]
    return arr_h, arr_wo, arr_w1, arr_w2, *operands[3].shape, operands[9].shape[1], runners


def _by_rows(operands, runners, attrs, parts):
    """The chain by blocks of rows (``gemm.block_size``), each block's steps on one thread: its
    products ``gemm.matmul(one_thread=True)`` (``runners``, where given: the same calls, made for
    blocks of ``gemm.block_size`` rows) with the bias (and ReLU) right after each
    (``nn_loops.bias_act``), its layer norms ``layer_norm_loops.forward`` with the residual added
    in the row loop, as ``AddLayerNorm`` runs them; the blocks shared over ``parts`` threads."""
    a2, wom, bo, x2, g1, be1, y1, w1m, bias1, hidden, w2m, bias2, f, g2, be2, y2 = operands
    relu0, relu1, relu2, eps1, eps2, rms1, rms2 = attrs[3:]
    m, n = x2.shape
    out = y2.reshape(m, n)
    eps1, eps2, rms1, rms2 = np.float64(eps1), np.float64(eps2), bool(rms1), bool(rms2)
    stats = np.empty((4, m), x2.dtype)      # the layer norms' means and inverse deviations (not read)
    step = gemm.block_size(m, parts)

    def block(i):
        j = min(m, i + step)
        whole = runners is not None and j - i == step        # (a shorter last block: its own class)
        proj, first, second = runners if whole else (einsum_matmul.matmul_one_thread,) * 3
        p = out[i:j]        # (the projection in the output's rows: the last norm overwrites it)
        proj(a2[i:j], wom, p)
        nn_loops.bias_act(p, bo, relu0)
        layer_norm_loops.forward(x2[i:j], p, True, g1, be1, eps1, rms1, y1[i:j], stats[0, i:j], stats[1, i:j])
        first(y1[i:j], w1m, hidden[i:j])
        nn_loops.bias_act(hidden[i:j], bias1, relu1)
        second(hidden[i:j], w2m, f[i:j])
        nn_loops.bias_act(f[i:j], bias2, relu2)
        layer_norm_loops.forward(y1[i:j], f[i:j], True, g2, be2, eps2, rms2, out[i:j], stats[2, i:j],
                                 stats[3, i:j])
    gemm.share_tasks([functools.partial(block, i) for i in range(0, m, step)], parts)
    return y2


def _way(args, attrs, parts):
    """``"one"`` or ``"rows"`` for a new geometry: "one" where the chain cannot run by rows or has
    fewer than two blocks of ``gemm.MIN_PART`` rows; else its class's way: the tuning file's, or
    timed now on a quiet machine, "one" otherwise (see the module docstring)."""
    operands = _operands(args, attrs)
    if operands is None or operands[0].shape[0] < 2 * gemm.MIN_PART:
        return "one"
    (m, k), n, hidden = operands[0].shape, operands[1].shape[1], operands[7].shape[1]
    trans = (einsum_bias_kernels._transposed(operands[0]), einsum_bias_kernels._transposed(operands[1]))
    cls = f"block-tail:{gemm_tuning.shape_class(m, n, k, operands[0].dtype.name, *trans)}," \
          f"h{hidden.bit_length()},p{parts}"
    can_time = gemm_tuning.quiet()
    got = gemm._cached_threaded(cls, can_time)
    if got is None and can_time:
        runners = {"one": functools.partial(_apart, args, attrs),
                   "rows": functools.partial(_by_rows, operands, None, attrs, parts)}
        got = gemm.timed_choice(cls, runners, "one", runners["one"])
    return got or "one"
