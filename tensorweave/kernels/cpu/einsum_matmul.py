"""A two-operand Einsum as one (batched) GEMM, and a stack of them split over the cores.

:func:`contract` runs ``einsum(f"{sa},{sb}->{so}", a, b)`` as one product: the operands transposed
to ``[batch, free, contracted]`` and ``[batch, contracted, free]``, multiplied by
``gemm.matmul``, the result transposed to the output's order. ``np.einsum``, even with
``optimize``, copies through slower paths: a multi-head attention block's projections and their
gradients took 55 ms a call instead of ~1 (a transformer step was 25x TensorFlow's).

A *stack* of products (batch subscripts: attention's ``[batch, heads]``) runs either as one
batched call on the library's threads (``"mkl"``: each call a fork-join over every core, and the
operand transposes around it on the calling thread alone) or split (``"rows"``): blocks of the
largest batch subscript, one per intra-op thread, each block transposed, multiplied on one thread
(``gemm.matmul(one_thread=True)``: the library measured faster on one thread for its class) and
written to its slice of the output on its own thread. Which one a stack's class takes is measured
(``gemm.tuner()``, the GEMM family's cache and timing rules: ``einsum:<layout>:<class>,p<parts>``,
timed on a quiet machine only, the split kept otherwise, as ``gemm._threaded_choice`` does).
A stack under the split threshold (attention's per-head products at inference) takes MKL's threads
(its OpenMP workers sent to sleep after the call), one thread or the split by its own class's
timing (:func:`_small_stack`, ``einsum-stack:<layout>:<class>,p<parts>``; MKL's threads untimed
under load, as before). A single product that ``gemm`` runs on one thread for its size (a
``Dense`` on one sequence at ``predict``) may still be split by rows where its class measured that
faster (:func:`one_or_rows`), with ``FusedEinsum``'s bias after each block (:func:`contract_then`).

>>> import numpy as np
>>> from tensorweave.kernels.cpu import einsum_matmul
>>> a = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
>>> got = einsum_matmul.contract(a, a, "bij", "bkj", "bik")
>>> bool(np.allclose(got, np.einsum("bij,bkj->bik", a, a)))
True
"""
import functools
import types

import numpy as np

from tensorweave.kernels.cpu import gemm
from tensorweave.kernels.cpu import gemm_tuning

#: stacks under :func:`min_split_work` multiply-adds in all stay one call: a split's hand-off
#: costs ~50 µs quiet and a scheduler slice under load. The threshold is measured per machine: a
#: stack of :data:`LADDER_COUNT` products ``side``-cubed per rung of :data:`SPLIT_LADDER`, one
#: call against the split, timed from the largest rung down (``gemm_tuning.serial_threshold``,
#: the one-call way the incumbent), repeated until two measurements agree (at most
#: :data:`MEASUREMENTS`). It was a constant, 16.8 M, from encoder2's predict on one sequence at
#: load 30 (one noisy pair), which kept the transformer step's attention stacks (64 products of
#: 64x64x32, 8.4 M) on one call: 5 ms of its caller's CPU (issue 18 session 16, tx20)
SPLIT_LADDER = (32, 48, 64, 96, 128)
#: the threshold until two quiet processes' measurements agree (``gemm_tuning.Tuner.threshold``):
#: the old constant
DEFAULT_SPLIT_WORK = 1 << 24
LADDER_COUNT = 8
MEASUREMENTS = 3
#: dtype -> the measured threshold (multiply-adds) of this process; tests set entries
_min_split = {}


def min_split_work(dtype=np.float32):
    """Stacks of ``dtype`` under this many multiply-adds stay one call (see :data:`SPLIT_LADDER`);
    measured once per machine, cached with the GEMM tuner's thresholds (``einsum-split:<dtype>``,
    kept on disk when settled on a quiet machine only)."""
    dtype = np.dtype(dtype)
    got = _min_split.get(dtype)
    if got is None:
        got = _min_split[dtype] = gemm.tuner().threshold(f"einsum-split:{dtype.name}",
                                                          lambda: _measure_threshold(dtype), DEFAULT_SPLIT_WORK)
    return got


def _worth_splitting(work, dtype):
    """Whether a stack of ``work`` multiply-adds is split: from :func:`min_split_work` on; a stack
    under the smallest rung never is, and does not start the measurement."""
    limit = _min_split.get(dtype)
    if limit is None:
        if work < LADDER_COUNT * SPLIT_LADDER[0] ** 3:
            return False
        limit = min_split_work(dtype)
    return work >= limit


def _measure_threshold(dtype, measurements=MEASUREMENTS):
    """``(work, settled)``: ``gemm_tuning.serial_threshold`` of :func:`_ladder_runners` repeated
    until two measurements in a row agree; settled when they agree and the last was settled
    (a timing that does not repeat is the other processes', not this machine's)."""
    parts = max(2, gemm.split_parts())
    last = None
    for _ in range(measurements):
        work, settled = gemm_tuning.serial_threshold(functools.partial(_ladder_runners, dtype, parts),
                                                     SPLIT_LADDER, lambda side: LADDER_COUNT * side ** 3)
        if work == last:
            return work, settled
        last = work
    return last, False


def _ladder_runners(dtype, parts, side):
    """``{"serial": one call, "threaded": the split}`` of a stack of :data:`LADDER_COUNT`
    ``side``-cubed products (``bij,bjk->bik``), each written into the same output."""
    rng = np.random.default_rng(side)
    a, b = rng.standard_normal((2, LADDER_COUNT, side, side)).astype(dtype)
    out = np.empty((LADDER_COUNT, side, side), dtype)
    size, batch, left, right, inner = _plan("bij", "bjk", "bik", a.shape, b.shape)[:5]
    args = (a, b, "bij", "bjk", "bik", size, batch, left, right, inner)
    return {"serial": functools.partial(_product, *args, out=out),
            "threaded": functools.partial(_split, *args, parts, out)}


#: this process's stack classes (tuples) -> "mkl" or "rows"
_chosen = {}


#: layouts (equation and operand shapes) whose :func:`_plan` and :func:`_arrangement` are kept:
#: at batch-1 inference their string and list work was ~30 µs of every product's caller CPU
#: (load 5.6), for products of 150-450 µs (issue 18 session 18, enc22)
LAYOUTS = 1024


@functools.lru_cache(maxsize=LAYOUTS)
def _plan(sa, sb, so, shape_a, shape_b):
    """``(size, batch, left, right, inner, only_a, only_b)`` of a contraction GEMM can run, or None
    (repeated or ``...`` subscripts, sizes that differ, output letters from nowhere). Computed once
    per layout (shapes as tuples), so shared by every call: ``size`` is read-only, the subscript
    lists are tuples."""
    if "." in sa + sb + so or any(len(set(t)) != len(t) for t in (sa, sb, so)) or len(shape_a) != len(sa) \
            or len(shape_b) != len(sb) or not set(so) <= set(sa + sb):
        return None
    size = dict(zip(sa, shape_a))
    for letter, n in zip(sb, shape_b):
        if size.setdefault(letter, n) != n:
            return None
    only_a = tuple(i for i, c in enumerate(sa) if c not in sb and c not in so)
    only_b = tuple(i for i, c in enumerate(sb) if c not in sa and c not in so)
    sa = "".join(c for c in sa if c in sb or c in so)
    sb = "".join(c for c in sb if c in sa or c in so)
    batch = tuple(c for c in so if c in sa and c in sb)
    left = tuple(c for c in so if c in sa and c not in sb)
    right = tuple(c for c in so if c in sb and c not in sa)
    inner = tuple(c for c in sa if c in sb and c not in so)
    return types.MappingProxyType(size), batch, left, right, inner, only_a, only_b


def _prod(size, letters):
    n = 1
    for c in letters:
        n *= size[c]
    return n


def contract(a, b, sa, sb, so):
    """``np.einsum(f"{sa},{sb}->{so}", a, b)`` as GEMM (a new C-contiguous array), or None where
    the equation is not one product (see :func:`_plan`) or the dtypes differ or are bool."""
    if a.dtype != b.dtype or a.dtype == np.bool_:
        return None
    plan = _plan(sa, sb, so, a.shape, b.shape)
    if plan is None:
        return None
    size, batch, left, right, inner, only_a, only_b = plan
    if only_a:                                  # summed away in one operand alone: sum it first
        a, sa = a.sum(axis=only_a), "".join(c for c in sa if c in sb or c in so)
    if only_b:
        b, sb = b.sum(axis=only_b), "".join(c for c in sb if c in sa or c in so)
    nb = _prod(size, batch)
    work = nb * _prod(size, left) * _prod(size, right) * _prod(size, inner)
    if nb > 1 and size[_split_letter(batch, size)] >= 2:
        parts = min(gemm.split_parts(), size[_split_letter(batch, size)])
        if parts > 1 and _worth_splitting(work, a.dtype):
            return _stack(a, b, sa, sb, so, size, batch, left, right, inner, parts)
        if parts > 1 and work >= gemm.MIN_WORK:
            return _small_stack(a, b, sa, sb, so, size, batch, left, right, inner, parts)
    got = _in_order(a, b, sa, sb, so, plan)
    if got is not None:
        return one_or_rows(*got[:2]).reshape(got[2])
    return _product(a, b, sa, sb, so, size, batch, left, right, inner)


def contract_then(a, b, sa, sb, so, after, row_multiple=1):
    """:func:`contract`'s result with ``after(y2, i, j)`` run over blocks ``i:j`` of the rows of its
    ``[M, N]`` matrix ``y2`` (an epilogue in place that reads and writes its rows alone:
    ``FusedEinsum``'s bias and ReLU), where the product is one 2-D GEMM written straight into the
    output (:func:`_in_order`) with rows of a multiple of ``row_multiple`` values; None otherwise
    (the caller runs :func:`contract`, then its pass).
    Where the product's class runs split (:func:`one_or_rows`), each block's epilogue follows its
    own product on its own thread, while the block is in that core's cache."""
    if a.dtype != b.dtype or a.dtype == np.bool_:
        return None
    plan = _plan(sa, sb, so, a.shape, b.shape)
    got = None if plan is None else _in_order(a, b, sa, sb, so, plan)
    if got is None or got[1].shape[1] % row_multiple:
        return None
    return one_or_rows(*got[:2], after).reshape(got[2])


def _in_order(a, b, sa, sb, so, plan):
    """``(a2, b2, shape)`` where ``einsum(sa,sb->so)`` is one 2-D product ``a2 @ b2`` whose ``[M, N]``
    result, C-contiguous, is the output of ``shape`` (no batch subscript, nothing summed in one
    operand alone, the output's letters the left operand's free ones then the right's: a ``Dense``
    on a sequence, the Q/K/V group, their gradients); None otherwise."""
    got = in_order_layout(sa, sb, so, a.shape, b.shape)
    if got is None:
        return None
    return matrix(a, got[0]), matrix(b, got[1]), got[2]


@functools.lru_cache(maxsize=LAYOUTS)
def in_order_layout(sa, sb, so, shape_a, shape_b):
    """``(arrangement of a, arrangement of b, output shape)`` of :func:`_in_order` for operands of
    these shapes (:func:`matrix` makes each 2-D matrix from its arrangement), or None where it
    gives None. A kernel that keeps it per geometry remakes its matrices without the checks
    (``block_tail_kernels``, ``head_attention_kernels``; issue 18, enc30).

    >>> in_order_layout("abc", "cd", "abd", (1, 4, 3), (3, 2))
    (((0, 1, 2), (1, 4, 3), False), ((0, 1), (1, 3, 2), False), (1, 4, 2))
    """
    plan = _plan(sa, sb, so, shape_a, shape_b)
    if plan is None:
        return None
    size, batch, left, right, inner, only_a, only_b = plan
    if batch or only_a or only_b or not left or not right or tuple(so) != left + right:
        return None
    return (_arrangement(sa, shape_a, (), left, inner), _arrangement(sb, shape_b, (), inner, right),
            tuple(size[c] for c in so))


def one_thread_runner(a, b, out):
    """``run(a, b, out)`` for products of this one's geometry (the rows of a block of a split
    product: the same shapes and strides, other data): the call ``gemm.matmul(a, b, out=out,
    one_thread=True)`` makes, MKL's one-thread GEMM, without its ~10 µs of checks a call, where
    that call takes that route for this class (chosen now, timed on these operands where the class
    is new: ``gemm._part_runner``, the split products' blocks' runner); else that ``gemm.matmul``
    call. A block of ``FusedBlockTail`` and of ``FusedHeadAttention`` makes three products (issue
    18, enc30). The same call either way, so the same bits.

    >>> import numpy as np
    >>> a, b = np.ones((64, 32), np.float32), np.ones((32, 64), np.float32)
    >>> out = np.empty((64, 64), np.float32)
    >>> one_thread_runner(a, b, out)(a, b, out) is None, float(out[0, 0])
    (True, 32.0)
    """
    (m, k), n = a.shape, b.shape[1]
    ops = gemm._operand(a), gemm._operand(b), gemm._operand(out)
    if a.dtype == b.dtype == out.dtype and b.shape[0] == k and out.shape == (m, n) and None not in ops \
            and ops[2][0] == gemm._NO_TRANS and m * n * k >= gemm.MIN_WORK and not np.may_share_memory(out, a) \
            and not np.may_share_memory(out, b) and gemm.route(a.dtype, m, n, k, one_thread=True) == "one":
        run = gemm._part_runner((a, b, out), *ops, k)
        if getattr(run, "library", None) == "mkl1":
            return run
    return matmul_one_thread


def matmul_one_thread(a, b, out):
    """``gemm.matmul(a, b, out=out, one_thread=True)`` (:func:`one_thread_runner`'s other way)."""
    gemm.matmul(a, b, out=out, one_thread=True)


def matrix(x, arrangement):
    """The 2-D matrix :func:`_matrices` makes of ``x`` (no batch) by ``arrangement``
    (:func:`_arrangement`'s, :func:`in_order_layout`'s)."""
    axes, shape, flip = arrangement
    m = x.transpose(axes).reshape(shape)
    return (m.transpose(0, 2, 1) if flip else m)[0]


#: this process's 2-D products by geometry (operands' shapes, strides, dtype; split parts) -> ``(way,
#: gemm._product's geometry)``: way "one" or "rows" (:func:`one_or_rows`), or "route" (not a
#: product with the choice): one dict lookup a call once known (the checks cost ~10 µs a product);
#: at most :data:`GEOMETRIES` of them (:func:`remember`)
_rows_chosen = {}
#: geometries a per-geometry cache keeps, the oldest dropped first: a serving process fed
#: sequences of many lengths made one entry per length, never dropped (issue 18, session 23's reread)
GEOMETRIES = 1024


def remember(cache, key, value, limit=None):
    """``cache[key] = value`` (returned), first dropping the oldest entry where ``cache`` holds
    ``limit`` (:data:`GEOMETRIES`) already: a dropped geometry is worked out again on its next call.

    >>> c = {}
    >>> [remember(c, n, n * n, limit=2) for n in (1, 2, 3)], c
    ([1, 4, 9], {2: 4, 3: 9})
    """
    if len(cache) >= (GEOMETRIES if limit is None else limit):
        try:    # (another thread may change the cache meanwhile: then it drops nothing this time)
            cache.pop(next(iter(cache)), None)
        except (StopIteration, RuntimeError):
            pass
    cache[key] = value
    return value


def one_or_rows(a2, b2, after=None):
    """``y2 = a2 @ b2``, a new C-contiguous array (then ``after(y2, i, j)`` over blocks of its
    rows, when given) on the way its class measured faster: ``"one"``, ``gemm.matmul``'s own
    route, or ``"rows"``, blocks of rows each a one-thread product shared with the intra-op threads
    (``gemm._run_split``), each block's ``after`` on its thread. Only a product ``gemm.route`` sends
    to one thread for its size (under ``gemm.serial_work``, at least ``2 * gemm.MIN_PART`` rows,
    with a second thread to be had) has the choice; the rest take their route, ``after`` over every
    row after it.

    Why: ``gemm.serial_work`` is one threshold for every shape, walked on square products against
    MKL's threads; on the AMD EPYC it settled at its ladder's top (33.5 M multiply-adds), so
    ``encoder2_predict``'s products (8-25 M: the Q/K/V group, the output projection, the FFN) and
    the transformer step's ran on one core, the other idle (issue 18, enc26). Whether the split
    pays for a class is its own timing's to say (``einsum-rows:<class>,p<parts>`` in the GEMM
    tuner's file: on a quiet machine, with the own-core probe, as ``gemm._threaded_choice``'s),
    "one" untimed under load. Inside ``gemm.blocks_here`` (a product deferred beside another,
    ``runtime/overlap.py``) a class that chose the split runs its blocks on this thread: the bits
    of a class do not depend on where it runs."""
    m = a2.shape[0]
    parts = gemm.split_parts()
    if parts > 1:
        key = (a2.shape, a2.strides, b2.shape, b2.strides, a2.dtype.char, parts)
        known = _rows_chosen.get(key)
        if known is None:
            known = remember(_rows_chosen, key, _first_way(a2, b2, parts, after))
        if known[0] == "rows":
            y2 = np.empty((m, b2.shape[1]), a2.dtype)
            _rows(a2, b2, y2, known[1], parts, after)
            return y2
    y2 = gemm.matmul(a2, b2)
    if after is not None:
        after(y2, 0, m)
    return y2


def _rows(a2, b2, y2, geometry, parts, after):
    """``y2 = a2 @ b2`` split by rows (``gemm._run_split``), ``after`` on each block's thread."""
    op_a, op_b, _, n, k, _ = geometry
    gemm._run_split("rows", a2, b2, y2, op_a, op_b, (gemm._NO_TRANS, n), k, parts,
                    None if after is None else (lambda i, j: after(y2, i, j)))


def _first_way(a2, b2, parts, after):
    """:func:`one_or_rows`' ``(way, geometry)`` for a new geometry: "route" where the product has no
    choice; else its class's way: the tuning file's, or timed now (a quiet machine, not inside
    ``gemm.blocks_here``), "one" otherwise."""
    (m, k), n = a2.shape, b2.shape[1]
    geometry = gemm._product(a2, b2) if m >= 2 * gemm.MIN_PART and a2.flags.aligned and b2.flags.aligned \
        else False
    if geometry is False or gemm.route(a2.dtype, m, n, k) != "one":
        return "route", None
    op_a, op_b = geometry[:2]
    cls = "einsum-rows:" + gemm_tuning.shape_class(m, n, k, a2.dtype.name, op_a[0] == gemm._TRANS,
                                                   op_b[0] == gemm._TRANS) + f",p{parts}"
    can_time = not gemm.inside_blocks_here() and gemm_tuning.quiet()
    got = gemm._cached_threaded(cls, can_time)
    if got is None and can_time:
        y2 = np.empty((m, n), a2.dtype)

        def one():
            gemm.matmul(a2, b2, out=y2)
            if after is not None:
                after(y2, 0, m)
        runners = {"one": one, "rows": lambda: _rows(a2, b2, y2, geometry, parts, after)}
        got = gemm.timed_choice(cls, runners, "one", one)
    return got or "one", geometry


def _matrices(x, sx, batch, rows, cols, size):
    """``x`` as a stack ``[batch, rows, cols]`` for GEMM: a copy only where the batch subscripts do
    not merge into one axis, made in ``x``'s own order of ``rows`` and ``cols`` (its innermost axis
    stays innermost) and handed over transposed as a view where that order is ``cols, rows``:
    copying attention's ``[B, T, N, H]`` query to ``[B, N, H, T]`` cost 0.9 ms against 0.2 for
    ``[B, N, T, H]`` (AMD EPYC), and BLAS reads either order. (``size`` is not read: the sizes
    come from ``x``'s shape, a split stack's block's own included.)"""
    axes, shape, flip = _arrangement(sx, x.shape, tuple(batch), tuple(rows), tuple(cols))
    m = x.transpose(axes).reshape(shape)
    return m.transpose(0, 2, 1) if flip else m


@functools.lru_cache(maxsize=LAYOUTS)
def _arrangement(sx, shape, batch, rows, cols):
    """``(axes, shape, flip)``: :func:`_matrices` of an array of ``shape`` is its transpose to
    ``axes`` reshaped to ``shape``, then its last two axes swapped where ``flip``."""
    size = dict(zip(sx, shape))
    nb, nr, nc = _prod(size, batch), _prod(size, rows), _prod(size, cols)
    pos = [sx.index(c) for c in rows + cols]
    if rows and cols and max(pos) in [sx.index(c) for c in rows]:   # a row letter is innermost
        return tuple(sx.index(c) for c in batch + cols + rows), (nb, nc, nr), True
    return tuple(sx.index(c) for c in batch + rows + cols), (nb, nr, nc), False


def _split_letter(batch, size):
    """The batch subscript a stack is split along: the largest (the first of equals), so that a
    batch of one (``predict`` on one sequence) still splits its heads."""
    return max(batch, key=size.get)


def _product(a, b, sa, sb, so, size, batch, left, right, inner, one_thread=False, out=None):
    """The product in one ``gemm.matmul`` call; into ``out`` (C-contiguous, the output's shape)
    when given, else a new array. Where the output lists ``b``'s free subscripts before ``a``'s,
    the product runs as ``b^T a^T`` (both views), so the result comes out in the output's order:
    transposing attention's ``[B, N, S, T]`` scores afterwards cost 2.2 ms a call (AMD EPYC)."""
    if right and left and tuple(c for c in so if c not in batch) == tuple(right) + tuple(left):
        a, b, sa, sb, left, right = b, a, sb, sa, right, left
    nb, nl, nr = (_prod(size, x) for x in (batch, left, right))
    am = _matrices(a, sa, batch, left, inner, size)
    bm = _matrices(b, sb, batch, inner, right, size)
    order = list(batch) + list(left) + list(right)
    direct = out is not None and order == list(so)
    if nb == 1:
        got = gemm.matmul(am[0], bm[0], out=out.reshape(nl, nr) if direct else None, one_thread=one_thread)
    else:   # a stack: one batched call
        got = gemm.matmul(am, bm, out=out.reshape(nb, nl, nr) if direct else None, one_thread=one_thread)
    if direct:
        return out
    got = got.reshape([size[c] for c in order]).transpose([order.index(c) for c in so])
    if out is not None:
        np.copyto(out, got)
        return out
    return got if got.flags.c_contiguous else got.copy()


def layout_key(sa, sb, so):
    """The equation with its letters renamed in order of first appearance (``"aecd,abcd->acbe"``
    and ``"xzyw,xvyw->xyvz"`` share a key): a stack class's timing holds for any spelling."""
    names = {}
    for c in sa + "," + sb + "->" + so:
        if c.isalpha() and c not in names:
            names[c] = chr(ord("a") + len(names))
    return "".join(names.get(c, c) for c in sa + "," + sb + "->" + so)


def _class_name(kind, sa, sb, so, dtype, nb, nl, nr, nk, parts):
    """A stack's class in the GEMM tuner's file: ``<kind>:<layout>:<shape class>,p<parts>``.

    >>> _class_name("einsum", "aecd", "abcd", "acbe", np.dtype(np.float32), 4, 128, 128, 64, 2)
    'einsum:abcd,aecd->aceb:float32:NN:8,8,7,b3,p2'
    """
    return f"{kind}:{layout_key(sa, sb, so)}:{gemm_tuning.shape_class(nl, nr, nk, dtype.name, False, False, nb)},p{parts}"


def _known(chosen, kind, dtype, sa, sb, so, size, batch, left, right, inner, parts):
    """``(key, class, way)`` of a stack: its key in ``chosen`` (this process's choices) and, where
    that has none (``class`` None otherwise), its class in the tuner's file (:func:`_class_name`)
    and the way cached there (None where untimed)."""
    nb, nl, nr, nk = (_prod(size, x) for x in (batch, left, right, inner))
    key = (sa, sb, so, dtype.char, nb.bit_length(), nl.bit_length(), nr.bit_length(), nk.bit_length(), parts)
    got = chosen.get(key)
    if got is not None:
        return key, None, got
    cls = _class_name(kind, sa, sb, so, dtype, nb, nl, nr, nk, parts)
    return key, cls, gemm.tuner().backend(cls)


def _stack(a, b, sa, sb, so, size, batch, left, right, inner, parts):
    """A stack of products on the way its class measured faster: one call on the library's
    threads (``"mkl"``) or split over ``parts`` threads (``"rows"``, :func:`_split`)."""
    key, cls, got = _known(_chosen, "einsum", a.dtype, sa, sb, so, size, batch, left, right, inner, parts)
    if cls is not None:
        if got is None:
            out = np.empty([size[c] for c in so], a.dtype)
            runners = {"rows": functools.partial(_split, a, b, sa, sb, so, size, batch, left, right, inner, parts, out),
                       "mkl": functools.partial(_product, a, b, sa, sb, so, size, batch, left, right, inner, out=out)}
            # timings under load measure the other processes (see gemm._threaded_choice): the split,
            # which keeps no pool spinning, is kept without timing there
            one = functools.partial(_product, a, b, sa, sb, so, size, batch, left, right, inner, one_thread=True,
                                    out=out)
            got = gemm.timed_choice(cls, runners, "rows", one) if gemm_tuning.quiet() else "rows"
        _chosen[key] = got
    if got == "mkl":
        return _product(a, b, sa, sb, so, size, batch, left, right, inner)
    return _split(a, b, sa, sb, so, size, batch, left, right, inner, parts)


def _split(a, b, sa, sb, so, size, batch, left, right, inner, parts, out=None):
    """The stack as ``parts`` blocks of its largest batch subscript, each transposing its
    operands' block, multiplying it on one thread and writing its slice of ``out`` (a new array
    when None), taken in turn by this thread and the runtime's intra-op threads
    (``gemm.share_tasks``). Why not one block per thread, handed out up front: a helper that
    starts late (its core busy) held the calling thread, done with its own block, waiting for
    the other; from a shared counter the caller takes that block itself. Which thread runs a
    block does not change its bits; inside ``gemm.blocks_here`` (a product deferred beside
    another, ``runtime/overlap.py``) every block runs on this thread."""
    letter = _split_letter(batch, size)
    n = size[letter]
    out = np.empty([size[c] for c in so], a.dtype) if out is None else out
    step = -(-n // parts)
    ia, ib, io = sa.index(letter), sb.index(letter), so.index(letter)

    def run(i):
        j = min(n, i + step)
        sub_size = dict(size)
        sub_size[letter] = j - i
        block = [slice(None)] * len(so)
        block[io] = slice(i, j)
        target = out[tuple(block)]
        pa = a[(slice(None),) * ia + (slice(i, j),)]
        pb = b[(slice(None),) * ib + (slice(i, j),)]
        # (a leading block is C-contiguous and the product goes straight into it when it comes
        # out in the output's order; otherwise _product copies it into the block)
        _product(pa, pb, sa, sb, so, sub_size, batch, left, right, inner, one_thread=True, out=target)
    gemm.share_tasks([functools.partial(run, i) for i in range(0, n, step)], parts)
    return out


#: this process's small stack classes (tuples) -> "mkl", "one" or "rows"
_small_chosen = {}


def _small_stack(a, b, sa, sb, so, size, batch, left, right, inner, parts):
    """A stack under the split threshold (attention's per-head products at inference, 4-32
    products of 128x128x64 at batch 1-8) on the way its class measured fastest (wall, a quiet
    machine, ``einsum-stack:<layout>:<class>,p<parts>`` in the GEMM tuner's file): ``"mkl"``,
    ``gemm.matmul``'s own route (the batched call on MKL's threads above ``stack_route``'s size:
    what every such stack took before, the incumbent and the choice under load), ``"one"``, the
    batched call on this thread alone, or ``"rows"``, blocks of heads split over the intra-op
    threads (:func:`_split`). Why measured per class: in ``encoder2_predict`` the scores' stack (4
    x 128x128x64, lda 256) took 485 µs of the caller's CPU and 761 of the process's on MKL's
    threads at load 3.5, against 175 alone on one thread (issue 18 session 19, enc23), while the
    threads' wall on a quiet machine is what ``stack_route``'s square-stack walk, not this
    layout, measured. Inside ``gemm.blocks_here`` (beside a product on the other core) it runs
    on this thread."""
    if gemm.inside_blocks_here():
        return _product(a, b, sa, sb, so, size, batch, left, right, inner, one_thread=True)
    key, cls, got = _known(_small_chosen, "einsum-stack", a.dtype, sa, sb, so, size, batch, left, right, inner, parts)
    if cls is not None:
        if got is None and gemm_tuning.quiet():
            out = np.empty([size[c] for c in so], a.dtype)
            args = (a, b, sa, sb, so, size, batch, left, right, inner)
            # MKL's OpenMP workers sent to sleep as soon as a stack ends, not spinning 1 ms on the
            # other core: what follows is the caller's softmax and the next product's split (at
            # load 7 the spinning took 4.5 ms of CPU an encoder2_predict request; issue 18, enc23)
            runners = {"mkl": gemm._sleeping_after(functools.partial(_product, *args, out=out)),
                       "one": functools.partial(_product, *args, one_thread=True, out=out),
                       "rows": functools.partial(_split, *args, parts, out)}
            got = gemm.timed_choice(cls, runners, "mkl", runners["one"])
        _small_chosen[key] = got = got or "mkl"     # (under load: the incumbent, untimed)
    if got == "one":
        return _product(a, b, sa, sb, so, size, batch, left, right, inner, one_thread=True)
    if got == "rows":
        return _split(a, b, sa, sb, so, size, batch, left, right, inner, parts)
    out = np.empty([size[c] for c in so], a.dtype)
    gemm._sleeping_after(functools.partial(_product, a, b, sa, sb, so, size, batch, left, right, inner, out=out))()
    return out
