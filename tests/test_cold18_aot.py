"""Kernels built ahead of time (``kernels/cpu/aot*.py``): they give the JIT's bits on every
signature they serve, a call with those types compiles nothing, and a build that does not check
out (module file changed or missing, manifest unreadable, another machine, a kernel source changed
since) is never loaded: the JIT path runs, with a warning that says why."""
import json
import os
import shutil
import warnings

import numba
import numpy as np
import pytest
from numba.core import sigutils

from rnn18_aot_cases import rnn_cases
from tensorweave.kernels.cpu import aot, aot_build, aot_kernels, batch_norm_loops, gemm, jit, layer_norm_loops, nn_loops
from tensorweave.kernels.cpu import attention_kernels, attention_train, reduce_kernels, softmax_loops
from tensorweave.kernels.cpu import spin_share, training_kernels
from tensorweave.kernels.cpu import conv_batch1, pool_tiled, winograd

RNG = np.random.default_rng(18)
NN = "tensorweave.kernels.cpu.nn_loops"
TINY = {NN: {"column_sums": aot_kernels.KERNELS[NN]["column_sums"]}}


def _floats(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _cases():
    """``(kernel, args, output positions)`` covering every signature of ``aot_kernels``."""
    blk = winograd._Blocks((3, 26, 26, 8), ((1, 1), (0, 2)))
    n, p, c, o = 3, 3 * blk.per_image(), 8, 9
    xp = np.zeros((n, blk.hp, blk.wp, c), np.float32)
    xp[:, blk.pt:blk.pt + blk.hh, blk.pl:blk.pl + blk.ww] = _floats(n, blk.hh, blk.ww, c)
    yield winograd._input_transform, (xp, 0, n, blk.th, blk.tw, np.empty((36, p, c), np.float32)), (5,)
    for has_bias, relu in ((False, False), (True, True)):
        yield (winograd._output_transform, (_floats(36, p, o), 0, n, blk.th, blk.tw,
               np.full((n, blk.ho, blk.wo, o), 7, np.float32), _floats(o), has_bias, relu), (5,))
    yield (winograd._output_grad_transform, (_floats(n, blk.ho, blk.wo, o), 0, n, blk.th, blk.tw,
           np.empty((36, p, o), np.float32)), (5,))
    yield (winograd._input_grad_transform, (_floats(36, p, c), 0, n, blk.th, blk.tw, blk.pt, blk.pl,
           np.zeros((n, 26, 26, c), np.float32)), (7,))
    for has_bias, relu in ((False, False), (True, True)):     # (rows 1:4 of 5, stride 2 across)
        yield (conv_batch1.direct_rows, (_floats(11, 9, 3), _floats(3, 2, 3, 6), _floats(6), has_bias, relu,
                                         2, 1, 1, 2, 1, 4, np.full((5, 7, 6), 7, np.float32)), (11,))
    g, y = _floats(37, 19, scale=100), _floats(37, 19)
    for relu in (False, True):
        yield nn_loops.bias_act, (y, _floats(19), relu), (0,)
    frozen = _floats(19)
    frozen.flags.writeable = False          # a read-only bias (the encoder's stacked q/k/v biases; cold28)
    yield nn_loops.bias_act, (y, frozen, True), (0,)
    yield nn_loops.column_sums, (g, RNG.standard_normal(19)), (1,)
    yield nn_loops.relu, (g.reshape(-1), np.empty(g.size, np.float32)), (1,)      # (the Relu kernel's loop)
    yield nn_loops.relu_grad_column_sums, (g, y, np.empty_like(g), np.zeros(19)), (2, 3)
    yield nn_loops.relu_mask_column_sums, (g.copy(), y, np.zeros(19)), (0, 2)
    x = _floats(50, 10, scale=5)
    x[3, 0], x[5], x[6, 2] = np.nan, -np.inf, np.inf
    labels = RNG.integers(0, 10, 50).astype(np.int32)
    yield nn_loops.shift_rows, (x, labels, np.zeros_like(x), np.zeros(50, np.float32)), (2, 3)
    bad = labels.copy()
    bad[20] = 10
    yield nn_loops.shift_rows, (x, bad, np.zeros_like(x), np.zeros(50, np.float32)), (2, 3)
    with np.errstate(all="ignore"):
        e = np.exp(x)
    for with_grad in (False, True):
        yield nn_loops.xent_from_exps, (e, labels, _floats(50), np.zeros(50, np.float32), with_grad), (0, 3)
    xs = (np.round(RNG.standard_normal((3, 1, 9, 7, 5)) * 2) / 2).astype(np.float32)
    xs.reshape(-1)[5] = np.nan
    res = np.zeros((3, 1, 5, 4, 5), np.float32)
    args = (xs, (1, 3, 3), (1, 2, 2), (0, 1, 1))
    yield nn_loops.max_windows, args + (res, res.copy(), False, False), (5,)
    yield nn_loops.max_windows, args + (_floats(*res.shape), np.zeros_like(xs), True, False), (5,)
    xt = _floats(3, 6, 8, 5)                         # MaxPool's tiled pass: a NaN, -0.0 against 0.0
    xt.reshape(-1)[[4, 0, 5]] = np.nan, -0.0, 0.0     # (0 and 5: one window's first two taps)
    yield pool_tiled.max_tiled, (xt, 2, 2, np.full((3, 3, 4, 5), 7, np.float32)), (3,)
    dcols = _floats(3, 1, 4, 5, 1, 3, 3, 6)          # col2im: a stride-2 3x3 tile's columns, padded edges
    yield nn_loops.col2im, (dcols, (1, 2, 2), (1, 1, 1), (0, 1, 0), np.full((3, 1, 8, 10, 6), 7, np.float32)), (4,)
    yield from _batch_norm_cases()
    w, m, g1, v = _floats(1000), _floats(1000, scale=0.1), _floats(1000), np.abs(_floats(1000, scale=0.01))
    coeffs = training_kernels._compute_coefficients(np.dtype(np.float32), 1e-3, 3, 0.9, 0.999) + (np.float32(1e-7),)
    yield training_kernels._adam_flat, (w, m, v, g1) + coeffs, (0, 1, 2)
    yield training_kernels._decay_flat, (_floats(1000), np.float32(0.3), np.float32(0.7)), (0,)
    yield from _bucket_cases()
    yield from _sparse_cases()
    for dtype in (np.float32, np.float64):      # leading-axes sums (Sum, SumToLike): -0.0 columns, odd sizes
        xs = _floats(3, 37, 19).astype(dtype)
        xs[:, :, 4] = -0.0
        yield reduce_kernels._sum_middle, (xs, np.full((3, 19), 7, dtype)), (1,)
    if gemm.load():
        import ctypes
        fn = ctypes.cast(gemm._lib.cblas_sgemm, ctypes.c_void_p).value
        a, b = _floats(64, 33), _floats(20, 33)
        yield gemm._call, (fn, gemm._NO_TRANS, gemm._TRANS, 64, 20, 33, a, 33, b, 33, np.zeros((64, 20), np.float32),
                           20), (10,)
        yield gemm._call, (fn, gemm._NO_TRANS, gemm._TRANS, 64, 20, 33, a, 33, np.asfortranarray(b.T), 33,
                           np.zeros((64, 20), np.float32), 20), (10,)
        yield gemm._call, (fn, gemm._TRANS, gemm._NO_TRANS, 64, 20, 33, np.asfortranarray(a), 64, b.T.copy(), 20,
                           np.zeros((64, 20), np.float32), 20), (10,)
        # the same on one MKL thread (pred19: the one-thread products' stub, timed against OpenBLAS)
        one = (ctypes.cast(gemm._lib.MKL_Set_Num_Threads_Local, ctypes.c_void_p).value, 1)
        for operands in _split_views():
            yield gemm._call_threads, one + (fn,) + operands, (12,)
        yield from _attention_cases(fn, one[0])
        yield from _attention_train_cases(fn, one[0])
        yield from _spin_cases(fn, one[0])
    stopped = np.zeros(len(spin_share.FIELDS), np.int64)
    stopped[spin_share.STOP] = 1
    yield spin_share._serve, (stopped, 0), (0,)        # (a helper told to stop: returns at once)
    yield from rnn_cases()                  # the recurrent step loops (rnn18's cases)
    yield from _layer_norm_cases()
    yield from _softmax_cases()
    yield from _nogil_cases()


def _nogil_cases():
    """The segments' interpreter (``nogil_ops.run_program``): a bias add and ReLU in place, then a
    cross-entropy row whose bad label it reports (its return value: the row's number + 1); the address reader."""
    from tensorweave.kernels.cpu import nogil_ops as N
    x, b, labels = _floats(6, 4), _floats(4), np.array([0, 1, 9, 2, 3, 0], np.int32)
    grad, loss = np.zeros((6, 4), np.float32), np.zeros(6, np.float32)
    addrs = np.array([x.ctypes.data, b.ctypes.data, labels.ctypes.data, grad.ctypes.data, loss.ctypes.data,
                      *(N.exp_loop() or (0, 0))], np.int64)
    prog = np.zeros((3, N.WIDTH), np.int64)
    prog[0, :6], prog[1, :5] = [N.ADD, 0, 1, 0, 6, 4], [N.RELU, 0, -1, 0, 24]
    prog[2, :11] = [N.XENT, 0, 2, 3, 6, 4, 32, 0, 0, 0, 4]
    prog[2, 12:] = [5, 6]
    yield N.run_program, (prog if N.exp_loop() else prog[:2], addrs), ()
    yield N.address, (x,), ()               # the address table's reader (built and JIT: the same address)


def _batch_norm_cases():
    """The fused batch norm's loops (``batch_norm_loops``), float32 rows and the vectors
    ``batch_norm_kernels`` passes; an odd row count (the four-row groups' tail), the sums added into
    what is there."""
    x, g, f = _floats(39, 7, scale=3) + 2, _floats(39, 7), _floats(39, 7)
    v64, acc = RNG.standard_normal(7), [RNG.standard_normal(7), RNG.standard_normal(7)]
    vec, out = [_floats(7) for _ in range(4)], np.full((39, 7), 7, np.float32)
    yield batch_norm_loops.moments, (x, v64) + tuple(acc), (2, 3)
    yield batch_norm_loops.grad_sums, (g, x, v64) + tuple(acc), (3, 4)
    yield batch_norm_loops.grad_sums_relu, (g, f, x, v64) + tuple(acc), (4, 5)
    yield batch_norm_loops.grad_sums_relu_select, (g, f, x, out.copy(), v64) + tuple(acc), (3, 5, 6)
    for kernel in (batch_norm_loops.scale_shift, batch_norm_loops.scale_shift_relu):
        yield kernel, (x, vec[0], vec[1], out), (3,)
    yield batch_norm_loops.scale_shift_add_relu, (x, g, vec[0], vec[1], out), (4,)
    yield batch_norm_loops.input_grad, (g, x) + tuple(vec) + (out,), (6,)
    yield batch_norm_loops.input_grad_relu, (g, f, x) + tuple(vec) + (out,), (7,)


def _bucket_cases():
    """The gradient bucket's Lion and Adamax loops (``fused_rules._sum2_*``): their factors from
    the rules, zero and NaN interpolations and a NaN on either side of Adamax's max."""
    from tensorweave.distribute import fused_rules
    w, m, a, b = _floats(1000), _floats(1000), _floats(1000), _floats(1000)
    a[:3], b[:3], m[:3] = [0.0, np.nan, 1.0], [-0.0, 0.0, -1.0], [0.0, 0.0, 0.0]
    lion = fused_rules.rule_for("ResourceApplyLion", {"beta_1": 0.9, "beta_2": 0.99})
    yield fused_rules._sum2_lion, (w, m, a, b) + lion.factors([0.01], np.dtype(np.float32)), (0, 1)
    u = np.abs(_floats(1000))
    u[0], a[1] = np.nan, np.nan
    adamax = fused_rules.rule_for("ResourceApplyAdamax", {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7})
    yield (fused_rules._sum2_adamax, (w, m, u, a, b) + adamax.factors([0.05, np.int64(3)], np.dtype(np.float32)),
           (0, 1, 2))


def _sparse_cases():
    """An embedding's sparse gradient: UniqueSegmentSum's loops (``sparse_ops``) on int32 and int64 ids
    with repeats, float32 rows, then the sparse Adam update of the unique rows."""
    from tensorweave.keras.optimizers import sparse_ops
    coeffs = training_kernels._compute_coefficients(np.dtype(np.float32), 1e-3, 3, 0.9, 0.999) + (np.float32(1e-7),)
    for dtype in (np.int32, np.int64):
        ids = RNG.integers(0, 30, 50).astype(dtype)
        yield (sparse_ops._unique_by_marking, (ids, 30, np.full(30, -1, dtype), np.full(50, -1, dtype)), (2, 3))
        yield sparse_ops._segment_sum_rows, (np.full((30, 3), 7, np.float32), ids, _floats(50, 3)), (0,)
        w, m, v = _floats(30, 3), _floats(30, 3, scale=0.1), np.abs(_floats(30, 3, scale=0.01))
        uniq = np.unique(ids)
        yield training_kernels._adam_rows, (w, m, v, v, uniq, _floats(uniq.size, 3)) + coeffs + (False,), (0, 1, 2)


def _layer_norm_cases():
    """The fused layer norm's loops (both ``rms``; the statistics' gradients non-zero) and the
    softmax gradient's, with the argument types ``layer_norm_kernels`` passes."""
    x, dy, gamma, beta = _floats(6, 21, scale=3) + 1, _floats(6, 21), _floats(21), _floats(21)
    for rms in (False, True):
        y, mean, inv = np.empty_like(x), np.empty(6, np.float32), np.empty(6, np.float32)
        layer_norm_loops.forward.twin(x, x, False, gamma, beta, np.float64(1e-3), rms, y, mean, inv)
        yield (layer_norm_loops.forward.dispatcher, (x, x, False, gamma, beta, np.float64(1e-3), rms, y, mean, inv),
               (7, 8, 9))
        yield (layer_norm_loops.backward.dispatcher, (dy, x, gamma, mean, inv, RNG.standard_normal(6),
               RNG.standard_normal(6), rms, np.empty_like(x), RNG.standard_normal(21), np.zeros(21)), (8, 9, 10))
        yield (layer_norm_loops.backward_tiles.dispatcher, (dy, x, gamma, mean, inv, RNG.standard_normal(6),
               RNG.standard_normal(6), rms, 4, np.empty_like(x), RNG.standard_normal(21), np.zeros(21)), (9, 10, 11))
    probs = np.exp(x) / np.exp(x).sum(-1, keepdims=True)
    yield layer_norm_loops.softmax_grad.dispatcher, (probs, dy, np.float32(0.125), np.empty_like(x)), (3,)


def _attention_cases(fn, set_local):
    """Attention's fused step (``attention_kernels``): pairs 1..5 of 2 x 3 heads, the query and key
    as slices of one array ("A" layout) and whole (C), the value likewise."""
    y = _floats(2, 5, 3, 3, 4)
    s = np.exp(_floats(4, 5, 5))
    for q, k, v in ((y[:, :, 0], y[:, :, 1], y[:, :, 2]), (y[:, :, 0].copy(), y[:, :, 1].copy(), y[:, :, 2].copy())):
        yield attention_kernels.scores_shift, (fn, set_local, q, k, np.zeros((4, 5, 5), np.float32), 1, 5), (4,)
        yield (attention_kernels.normalize_combine, (fn, set_local, s.copy(), v, np.zeros((2, 5, 3, 4), np.float32),
               1, 5), (2, 4))


def _attention_train_cases(fn, set_local):
    """Attention's fused training backward (``attention_train.grad_pairs``): pairs 1..5 of 2 x 3
    heads, a scale of 0.5 on the scores' gradient."""
    probs = np.exp(_floats(6, 5, 7))
    probs /= probs.sum(-1, keepdims=True)
    g, q, k, v = _floats(2, 5, 3, 4), _floats(2, 5, 3, 3), _floats(2, 7, 3, 3), _floats(2, 7, 3, 4)
    outs = [np.zeros(x.shape, np.float32) for x in (q, k, v)]
    yield attention_train.grad_pairs, (fn, set_local, probs, g, q, k, v, *outs, np.zeros((5, 7), np.float32),
                                       np.float32(0.5), 1, 5), (7, 8, 9, 10)


def _softmax_cases():
    """The last-axis softmax's row loops (``softmax_loops``): rows of NaN, -inf and +inf, lengths over
    NumPy's pairwise block (the row sum's explicit stack) and under 8."""
    x = _floats(5, 300, scale=4)
    x[1, 7], x[2], x[3, 0] = np.nan, -np.inf, np.inf
    yield softmax_loops.shift.dispatcher, (x, np.full_like(x, 7)), (1,)
    for n in (5, 64, 300):
        yield softmax_loops.normalize.dispatcher, (np.exp(_floats(4, n)),), (0,)
    e = _floats(1, 203, scale=60).ravel()      # the training attention's exponentials: a vector tail, the range's
    e[:5] = np.nan, -np.inf, np.inf, 88.7, -103.9   # ends and special values
    yield softmax_loops.exp_in_place, (e,), (0,)


#: operands whose addresses a spin_share case holds (alive for the whole session: the loop writes there)
_SPIN_OPERANDS = []


def _spin_cases(fn, set_local):
    """``spin_share._split`` with no helper (the caller takes both row blocks of a 40x24 @ 24x48
    product on MKL's one-thread call): its output is the mailbox (the product lands at an address)."""
    a, b, c = _floats(40, 24), _floats(24, 48), np.full((40, 48), 7, np.float32)
    _SPIN_OPERANDS.extend((a, b, c))
    yield spin_share._split, (np.zeros(len(spin_share.FIELDS), np.int64), fn, set_local, 0, gemm._NO_TRANS,
                              gemm._NO_TRANS, 40, 48, 24, a.ctypes.data, 24, b.ctypes.data, 48, c.ctypes.data, 48,
                              0, 32, 2, 4), (0,)


def _split_views(m=16, n=20, k=33):
    """``cblas_sgemm``'s operands (trans flags, sizes, arrays and leading dimensions) in every
    layout a product split over threads hands one part (``gemm._run_split``): A contiguous, a
    transposed operand (Fortran order) or a row block of one (strided); B contiguous, transposed
    or a column block; the output contiguous or a column block."""
    a_full = np.asfortranarray(_floats(m + 8, k))
    a_ways = [(gemm._NO_TRANS, _floats(m, k), k), (gemm._TRANS, np.asfortranarray(_floats(m, k)), m),
              (gemm._TRANS, a_full[4:4 + m], m + 8)]
    b_ways = [(gemm._NO_TRANS, _floats(k, n), n), (gemm._TRANS, np.asfortranarray(_floats(k, n)), k),
              (gemm._NO_TRANS, _floats(k, n + 12)[:, 4:4 + n], n + 12)]
    c_ways = [(np.zeros((m, n), np.float32), n), (np.zeros((m, n + 12), np.float32)[:, 4:4 + n], n + 12)]
    for c, ldc in c_ways:
        for trans_a, a, lda in a_ways:
            for trans_b, b, ldb in b_ways:
                yield trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc
                held = b.view()                 # a variable's weight read-only (encoder2_predict's)
                held.flags.writeable = False
                yield trans_a, trans_b, m, n, k, a, lda, held, ldb, c, ldc


def _copy_as_is(a):
    """A copy of ``a`` of the same layout (a strided view stays a strided view of a copy of its base)."""
    if a.flags.c_contiguous or a.flags.f_contiguous or a.base is None:
        return a.copy()
    base = a.base.copy(order="K")
    offset = a.__array_interface__["data"][0] - a.base.__array_interface__["data"][0]
    return np.ndarray(a.shape, a.dtype, base, offset, a.strides)


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _types(kernel, args):
    return tuple(kernel.typeof_pyval(a) for a in args)


def _built_loop(lib, kernel, args):
    fn = kernel.py_func
    for signature, loop in lib.loops.get((fn.__module__, fn.__qualname__), ()):
        if tuple(sigutils.normalize_signature(signature)[0]) == _types(kernel, args):
            return loop
    return None


def _run(fn, args, outs):
    copied = [_copy_as_is(a) if i in outs else a for i, a in enumerate(args)]
    return fn(*copied), [copied[i] for i in outs]


def _served():
    return {(m, k, tuple(sigutils.normalize_signature(s)[0]))
            for m, table in aot_kernels.KERNELS.items() for k, sigs in table.items() for s in sigs}


def _key(kernel, args):
    fn = kernel.py_func
    return fn.__module__, fn.__qualname__, _types(kernel, args)


def test_every_signature_the_package_build_serves_has_a_case():
    covered = {_key(kernel, args) for kernel, args, _ in _cases()}
    assert {m for m, _, _ in covered} <= set(aot_kernels.KERNELS)
    missing = _served() - covered
    if not gemm.load():
        missing = {s for s in missing if s[1] not in ("_call", "_call_threads", "_split")}
    assert not missing, f"signatures without a test case: {missing}"


def _compiled_by_jit(cases):
    """The signatures whose JIT twin the suite compiles (seconds each, a recurrent loop ~10 s at
    load): the first of each kernel, so each kernel's source, options, callees and the build's
    pipeline meet the JIT's once (40 of 53 signatures); the others (another dtype or layout of the
    same kernel) with ``TW_AOT_CHECK=all`` (``make aot-check``, after a build). Every signature is
    still looked up in the build, attached and run here; a stale build (a source changed since) is
    refused by the loader (the tiny-build tests below) and fails here as not attached."""
    if os.environ.get("TW_AOT_CHECK") == "all":
        return {_key(kernel, args) for kernel, args, _ in cases}
    first = {}
    for kernel, args, _ in cases:
        first.setdefault(kernel.py_func, _key(kernel, args))
    return set(first.values())


# one test per module: each signature is compiled by the JIT here (seconds each), so the modules
# spread over the suite's workers and each stays far under the per-test timeout
@pytest.mark.parametrize("module", sorted(aot_kernels.KERNELS))
def test_the_package_build_gives_the_jit_bits_on_every_signature_it_serves(module):
    lib = aot.library()
    if lib is None:
        pytest.skip("no ahead-of-time build in this checkout (`make aot`)")
    cases = [case for case in _cases() if case[0].py_func.__module__ == module]
    compiled = _compiled_by_jit(cases)
    for kernel, args, outs in cases:
        loop = _built_loop(lib, kernel, args)
        assert loop is not None, (kernel.py_func.__qualname__, _types(kernel, args))
        assert _types(kernel, args) in kernel.aot_signatures      # attached to the dispatcher
        r_aot, o_aot = _run(loop, args, outs)
        r_disp, o_disp = _run(kernel, args, outs)                 # the dispatcher's choice
        if _key(kernel, args) not in compiled:
            r_jit, o_jit = r_aot, o_aot                           # (`make aot-check` compiles it)
        else:
            r_jit, o_jit = _run(jit.compile_now(kernel, *args), args, outs)
        assert r_aot == r_jit == r_disp, kernel.py_func.__qualname__
        for a, b, c in zip(o_aot, o_jit, o_disp):
            assert _same(a, b) and _same(a, c), kernel.py_func.__qualname__


def _numba_callees(fn, seen):
    """Modules defining the numba functions ``fn`` calls, recursively (their code is built in)."""
    for name in fn.__code__.co_names:
        obj = fn.__globals__.get(name)
        if isinstance(obj, numba.core.dispatcher.Dispatcher) and obj.py_func not in seen:
            seen.add(obj.py_func)
            yield obj.py_func.__module__
            yield from _numba_callees(obj.py_func, seen)
        elif isinstance(obj, numba.core.extending._Intrinsic):
            yield obj._defn.__module__


@pytest.mark.parametrize("module", sorted(aot_kernels.KERNELS))
def test_every_listed_kernel_can_be_built_and_its_source_hash_covers_its_callees(module):
    for name, signatures in aot_kernels.KERNELS[module].items():
        kernel = aot_build._kernel(module, name)
        for s in signatures:
            sigutils.normalize_signature(s)
        # the build records (and the loader checks) the sources of every module it carries code of
        assert set(_numba_callees(kernel.py_func, set())) <= set(aot_build.built_modules(kernel)), name


def test_a_parallel_loop_is_refused_by_the_build():
    with pytest.raises(ValueError, match=r"_adam_chunks: cannot be built ahead of time with numba options .*parallel"):
        aot_build._kernel("tensorweave.kernels.cpu.training_kernels", "_adam_chunks")


@pytest.fixture(scope="module")
def tiny_build(tmp_path_factory):
    """A build of one small loop (column_sums), made here: ~6 s of CPU, mostly the C compiler."""
    pytest.importorskip("setuptools")
    directory = str(tmp_path_factory.mktemp("aot"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", aot.AOTWarning)
        try:
            manifest = aot_build.build(directory, TINY)
        except Exception as e:  # noqa: BLE001 - no C compiler or pycc here
            pytest.skip(f"cannot build ahead of time here: {e}")
    return directory, manifest


def _fresh_kernel():
    return numba.njit(nn_loops.column_sums.py_func, nogil=True, error_model="numpy")


def test_a_build_serves_its_signature_without_compiling_and_keeps_jit_bits(tiny_build):
    directory, manifest = tiny_build
    assert [e["kernel"] for e in manifest["exports"]] == ["column_sums"]
    assert sorted(os.listdir(directory))[0].startswith(manifest["module"]) and len(os.listdir(directory)) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", aot.AOTWarning)
        lib = aot.load(directory)
    kernel = _fresh_kernel()
    served = aot.attach(kernel, lib)
    g = _floats(37, 19, scale=100)
    acc = np.zeros(19)
    kernel(g, acc)
    assert served == (_types(kernel, (g, acc)),) and not kernel.overloads      # nothing compiled
    expected = np.zeros(19)
    jit.compile_now(kernel, g, expected)(g, expected)
    assert len(kernel.overloads) == 1 and _same(acc, expected)
    again = np.zeros(19)
    kernel(g, again)                               # a JIT compile of the same types keeps the built loop
    assert _same(again, expected)
    kernel(_floats(5, 3).astype(np.float64), np.zeros(3))     # other types: the JIT path
    assert len(kernel.overloads) == 2


def _copy(tiny_build, tmp_path, edit=None):
    directory, manifest = tiny_build
    for entry in os.listdir(directory):
        shutil.copy(os.path.join(directory, entry), tmp_path)
    if edit is not None:
        manifest = json.loads(json.dumps(manifest))
        edit(manifest)
        (tmp_path / aot.MANIFEST).write_text(json.dumps(manifest))
    return str(tmp_path), manifest


def _rejected(directory, monkeypatch, match):
    imported = []
    monkeypatch.setattr(aot.importlib.util, "module_from_spec", lambda spec: imported.append(spec) or 1 / 0)
    with pytest.warns(aot.AOTWarning, match=match):
        assert aot.load(directory) is None
    assert not imported                          # never loaded


def test_a_changed_module_file_is_never_loaded(tiny_build, tmp_path, monkeypatch):
    directory, manifest = _copy(tiny_build, tmp_path)
    file = next(p for p in tmp_path.iterdir() if p.name.startswith("_tw_aot_"))
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))
    _rejected(directory, monkeypatch, r"ahead-of-time kernels not used: .*_tw_aot_.* does not match the SHA-256 "
                                      r"its build recorded; kernels compile on first use instead \(rebuild: `make aot`")


def test_a_missing_module_file_falls_back(tiny_build, tmp_path, monkeypatch):
    directory, _ = _copy(tiny_build, tmp_path)
    next(p for p in tmp_path.iterdir() if p.name.startswith("_tw_aot_")).unlink()
    _rejected(directory, monkeypatch, r"_tw_aot_\w+\.\S+ could not be read \(No such file or directory\)")


def test_an_unreadable_manifest_falls_back(tiny_build, tmp_path, monkeypatch):
    directory, _ = _copy(tiny_build, tmp_path)
    (tmp_path / aot.MANIFEST).write_text("{not json")
    _rejected(directory, monkeypatch, r"manifest.json could not be read")
    (tmp_path / aot.MANIFEST).write_text(json.dumps({"format": 99}))
    _rejected(directory, monkeypatch, r"manifest.json is not a format-1 manifest")


def test_a_build_for_another_cpu_or_numba_falls_back(tiny_build, tmp_path, monkeypatch):
    def edit(m):
        m["machine"]["cpu"] = "some-other-cpu"
        m["machine"]["numba"] = "0.1"
    directory, _ = _copy(tiny_build, tmp_path, edit)
    _rejected(directory, monkeypatch, r"built for another cpu, numba than this process's")


def test_a_build_by_another_builder_falls_back(tiny_build, tmp_path, monkeypatch):
    directory, _ = _copy(tiny_build, tmp_path, lambda m: m["sources"].__setitem__(aot.BUILDER, "0" * 64))
    _rejected(directory, monkeypatch, r"was made by another version of tensorweave.kernels.cpu.aot_build")


def test_a_kernel_whose_source_changed_since_the_build_compiles_instead(tiny_build, tmp_path):
    directory, _ = _copy(tiny_build, tmp_path, lambda m: m["sources"].__setitem__(NN, "0" * 64))
    lib = aot.load(directory)
    assert lib is not None
    kernel = _fresh_kernel()
    with pytest.warns(aot.AOTWarning, match=r"kernels of tensorweave.kernels.cpu.nn_loops were built from another "
                                            r"version of its source; its kernels compile on first use instead"):
        assert aot.attach(kernel, lib) == ()
    assert not hasattr(kernel, "aot_signatures")


def test_stale_sources_names_exactly_the_modules_changed_since_the_build(tiny_build, tmp_path):
    directory, manifest = tiny_build
    assert aot.stale_sources(directory) == []
    edited, _ = _copy(tiny_build, tmp_path, lambda m: m["sources"].__setitem__(NN, "0" * 64))
    assert aot.stale_sources(edited) == [NN]
    assert aot.stale_sources(str(tmp_path / "nothing")) is None
    (tmp_path / aot.MANIFEST).write_text("{not json")
    assert aot.stale_sources(edited) is None


def test_nothing_built_means_no_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert aot.load(str(tmp_path)) is None


def test_the_parallel_loops_decision_waits_for_its_hundredth_ask_or_a_wait_for_compiles(monkeypatch):
    queued = []
    monkeypatch.setattr(jit, "_parallel", {"pid": None, "ok": False})
    monkeypatch.setattr(jit, "BACKGROUND", True)
    monkeypatch.setattr(jit._compiler, "submit", lambda job: queued.append(job) or True)
    for _ in range(jit.PARALLEL_AFTER):
        assert jit.parallel_loops(wait=False) is False
    assert not queued                                  # the one-thread loops answer meanwhile
    assert jit.parallel_loops(wait=False) is False
    assert queued == [jit.parallel_loops]
    jit.parallel_loops(wait=False)
    assert len(queued) == 1                            # queued once
    monkeypatch.setattr(jit, "_parallel", {"pid": None, "ok": False})
    jit.parallel_loops(wait=False)
    monkeypatch.setattr(jit._compiler, "thread_pid", None)
    jit.wait_for_compiles()                            # a benchmark reaching its steady state
    assert queued == [jit.parallel_loops] * 2
