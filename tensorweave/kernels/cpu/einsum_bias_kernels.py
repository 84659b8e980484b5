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
import functools

import numpy as np

from tensorweave.core.registry import register_kernel
from tensorweave.kernels.cpu import einsum_matmul, gemm, gemm_tuning, linalg_kernels, nn_loops, split_passes

#: dtypes whose bias (and ReLU) run as one compiled pass in place; others as NumPy's add/maximum
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def check_bias(bias, y, equation):
    """``bias`` must be the product's trailing axes (``y.shape[-bias.ndim:]``), of its dtype."""
    if not 1 <= bias.ndim <= y.ndim or bias.shape != y.shape[y.ndim - bias.ndim:] or bias.dtype != y.dtype:
        raise ValueError(f"FusedEinsum ({equation}): bias {bias.dtype}{list(bias.shape)} must have the trailing "
                         f"axes and dtype of the product {y.dtype}{list(y.shape)}")


def _split(equation):
    """``(sa, sb, so)`` of ``"sa,sb->so"`` (spaces dropped; empty strings where a part is missing)."""
    lhs, _, so = equation.replace(" ", "").partition("->")
    sa, _, sb = lhs.partition(",")
    return sa, sb, so


def _trailing(a, b, bias, equation):
    """Whether ``bias`` has ``a``'s dtype and the trailing axes of ``einsum(equation, a, b)``
    (read from the operands' letters; False where the equation is not ``x,y->z`` of letters)."""
    sa, sb, so = _split(equation)
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


#: this process's ``FusedEinsumPair`` geometries -> "one" or "rows" (:func:`_pair_way`), at most
#: ``einsum_matmul.GEOMETRIES`` of them
_pair_chosen = {}


def fused_einsum_pair(a, w1, b1, w2, b2, first, second, relu1, relu2):
    """``fused_einsum(fused_einsum(a, w1, b1, first, relu1), w2, b2, second, relu2)``: two ``Dense``
    layers in a row on a sequence (a transformer block's feed-forward half), the plan node
    ``runtime/passes/einsum_pair.py`` makes (``FusedEinsumPair``, never a graph op).

    Why: each row of the output depends on the same row of the input alone, so the pair can be cut
    by rows once: each block of rows runs both products with their biases and ReLUs on one thread,
    its hidden rows in that core's cache, the blocks shared with the intra-op threads
    (``gemm.share_tasks``): one hand-off for the two products, where a split of each product
    (``einsum_matmul.one_or_rows``, gemm's threaded classes) pays two and reads on one core the
    hidden rows the other wrote (issue 18, enc28). Which way a geometry takes is its class's timing
    (``einsum-pair:<the first product's class>,n<bits of the second's width>,p<parts>`` in the GEMM
    tuner's file, on a quiet machine with the own-core probe, as ``einsum-rows:``): ``"one"``, the
    two calls as before (the incumbent, and the way untimed under load), or ``"rows"``
    (:func:`_pair_rows`).

    >>> import numpy as np
    >>> x, w1, w2 = np.ones((1, 2, 3), np.float32), np.ones((3, 2), np.float32), np.ones((2, 1), np.float32)
    >>> fused_einsum_pair(x, w1, np.array([-4.0, 1.0], np.float32), w2, np.zeros(1, np.float32),
    ...                   "abc,cd->abd", "abd,de->abe", True, False).tolist()
    [[[4.0], [4.0]]]
    """
    parts = gemm.split_parts()
    if parts > 1 and not gemm.inside_blocks_here():
        key = (a.shape, a.strides, w1.shape, w1.strides, w2.shape, w2.strides, a.dtype.char, first, second, parts)
        way = _pair_chosen.get(key)
        if way is None:
            way = einsum_matmul.remember(_pair_chosen, key,
                                         _pair_way(a, w1, b1, w2, b2, first, second, relu1, relu2, parts))
        if way == "rows":
            operands = _pair_operands(a, w1, b1, w2, b2, first, second)
            if operands is not None:
                return _pair_rows(operands, relu1, relu2, parts)
    return fused_einsum(fused_einsum(a, w1, b1, first, relu1), w2, b2, second, relu2)


def _pair_operands(a, w1, b1, w2, b2, first, second):
    """``(a2, w1m, bias1, h2, w2m, bias2, y)`` where the pair runs by rows: both products one 2-D
    GEMM in the output's order (``einsum_matmul._in_order``; ``a2 [M, K] @ w1m -> h2 [M, N1]``,
    ``h2 @ w2m -> y``'s ``[M, N2]`` rows), the second reading the first's rows as they are, each
    bias the trailing axes of its product, exactly its width, one float dtype throughout; None
    otherwise (the two calls then)."""
    if a.dtype not in DTYPES or any(x.dtype != a.dtype for x in (w1, b1, w2, b2)) \
            or not _trailing(a, w1, b1, first):
        return None
    sa, sb, so = _split(first)
    plan = einsum_matmul._plan(sa, sb, so, a.shape, w1.shape)
    got = None if plan is None else einsum_matmul._in_order(a, w1, sa, sb, so, plan)
    if got is None or b1.size != got[1].shape[1]:
        return None
    a2, w1m, shape = got
    h = np.empty(shape, a.dtype)
    h2 = h.reshape(a2.shape[0], w1m.shape[1])
    sa, sb, so = _split(second)
    plan = einsum_matmul._plan(sa, sb, so, h.shape, w2.shape) if _trailing(h, w2, b2, second) else None
    got = None if plan is None else einsum_matmul._in_order(h, w2, sa, sb, so, plan)
    if got is None or got[0].shape != h2.shape or got[0].strides != h2.strides or b2.size != got[1].shape[1]:
        return None
    flat = [np.ascontiguousarray(b).reshape(b.size) for b in (b1, b2)]
    return a2, w1m, flat[0], h2, got[1], flat[1], np.empty(got[2], a.dtype)


def _pair_rows(operands, relu1, relu2, parts):
    """The pair by blocks of rows (``gemm.block_size``), each block's two products on one thread
    (``gemm.matmul(one_thread=True)``: the library measured faster on one thread for the block's
    class) with its bias and ReLU right after each, the blocks shared over ``parts`` threads."""
    a2, w1m, bias1, h2, w2m, bias2, y = operands
    m = a2.shape[0]
    y2 = y.reshape(m, w2m.shape[1])
    step = gemm.block_size(m, parts)

    def block(i):
        j = min(m, i + step)
        gemm.matmul(a2[i:j], w1m, out=h2[i:j], one_thread=True)
        nn_loops.bias_act(h2[i:j], bias1, relu1)
        gemm.matmul(h2[i:j], w2m, out=y2[i:j], one_thread=True)
        nn_loops.bias_act(y2[i:j], bias2, relu2)
    gemm.share_tasks([functools.partial(block, i) for i in range(0, m, step)], parts)
    return y


def _transposed(x):
    """Whether BLAS reads the 2-D ``x`` transposed (``gemm._operand``; False where it cannot read it in place)."""
    op = gemm._operand(x)
    return op is not None and op[0] == gemm._TRANS


def _pair_way(a, w1, b1, w2, b2, first, second, relu1, relu2, parts):
    """``"one"`` or ``"rows"`` for a new geometry: "one" where the pair cannot run by rows or has
    fewer than two blocks of ``gemm.MIN_PART`` rows; else its class's way, the tuning file's, or
    timed now on a quiet machine, "one" otherwise (see :func:`fused_einsum_pair`)."""
    operands = _pair_operands(a, w1, b1, w2, b2, first, second)
    if operands is None or operands[0].shape[0] < 2 * gemm.MIN_PART:
        return "one"
    (m, k), n1, n2 = operands[0].shape, operands[1].shape[1], operands[4].shape[1]
    trans = (_transposed(operands[0]), _transposed(operands[1]))
    cls = f"einsum-pair:{gemm_tuning.shape_class(m, n1, k, a.dtype.name, *trans)},n{n2.bit_length()},p{parts}"
    can_time = gemm_tuning.quiet()
    got = gemm._cached_threaded(cls, can_time)
    if got is None and can_time:
        def one():
            fused_einsum(fused_einsum(a, w1, b1, first, relu1), w2, b2, second, relu2)
        runners = {"one": one, "rows": functools.partial(_pair_rows, operands, relu1, relu2, parts)}
        got = gemm.timed_choice(cls, runners, "one", one)
    return got or "one"
