"""A compiled interpreter that runs a segment of a plan's steps in one GIL-free call.

A *program* is an ``int64[n, WIDTH]`` instruction table: per row an opcode, up to three
operand indexes into an ``int64`` *address table* (the data pointers of float32 buffers, and for
:data:`GEMM` MKL's ``cblas_sgemm`` and ``MKL_Set_Num_Threads_Local``) and shape integers.
:func:`run_program` walks the table once, turning addresses into array views
(:func:`_f32`) and calling the loops the ops' kernels call themselves, so each opcode gives the
bits of its op's kernel (``runtime/nogil_segments.py`` builds programs from a steady plan;
``docs/design/nogil-steps.md``):

- :data:`GEMM` ``c = op(a) @ op(b)``: MKL's ``cblas_sgemm`` on one thread, the call
  ``gemm.matmul`` makes for a product whose route is ``"one"`` and whose class chose ``"mkl1"``;
- :data:`GEMM_OPENBLAS` the same product by NumPy's own OpenBLAS (the ILP64 ``cblas_sgemm`` of the
  ``scipy-openblas64`` NumPy loads, ``rnn_gemm.openblas_gemm``), the call ``np.matmul`` makes for a
  class whose one-thread library is ``"numpy1"`` (``gemm._numpy_serial``; the caller holds
  OpenBLAS's count at one, ``gemm._hold_one_thread``); operands at one address with opposite
  transposes (NumPy's ``syrk`` case) are reported as bad input;
- :data:`ADD` ``out = x + y`` with ``y`` a row broadcast over ``x``'s rows (or ``x``'s shape as one
  row): ``np.add``'s elementwise sums (``AddV2``, its in-place variant) by ``nn_loops.bias_act``
  (in place on ``out``, ``x`` copied there first unless it is ``x``; 15 µs against ``np.add``'s 26
  for 128x512, thread CPU at load 11);
- :data:`RELU` ``np.maximum(x, 0)`` (``-0.0`` gives ``0.0``, NaN stays NaN) by ``nn_loops.relu``;
- :data:`RELU_GRAD` ``nn_loops.relu_grad`` (the ``ReluGrad`` kernel's loop);
- :data:`COLSUM` column sums into zeros by ``reduce_kernels._sum_middle`` (``SumToLike``'s bias
  gradient);
- :data:`XENT` the sparse softmax cross-entropy's per-row losses and gradient
  (``nn_kernels.sparse_xent_with_grad``: ``nn_loops.shift_rows``, NumPy's own ``exp`` loop through
  ``ufunc_loops``, ``nn_loops.xent_from_exps``), the gradient then times a scale of one value or
  one per row (``fused_kernels.sparse_xent_tail``'s ``scaled``); a label out of range returns
  the row's number + 1 (the caller runs the step the Python way, which raises the kernel's error);
- :data:`MEAN` a 1-D mean as ``reduce_kernels._mean`` takes it: NumPy's pairwise sum
  (``softmax_loops.pairwise_sum``, its ``add.reduce``), then over the count in float64, rounded to float32
  (``reduce_kernels._mean``'s ``total / np.intp(n)`` promotes to float64);
- :data:`APPLY` one variable's SGD update in place, ``w -= g * lr`` (``training_kernels._sgd_flat``),
  or with momentum ``training_kernels._momentum_flat`` (``ResourceApplyKerasMomentum``'s loops, on
  the storages the caller resolved, ``Variable._storage_for_update``);
- :data:`PAD` a piece copied into zeros at an offset (a data-parallel rank's ``S(0) -> P(sum)``
  boxing, ``plan_ops._local_boxing``: the losses before their mean).

While the interpreter compiles (on a background thread, ``jit.njit_twin``) its twin answers
:data:`NOT_READY` and the caller runs the steps as before.

>>> import numpy as np
>>> x, y, out = np.arange(6, dtype=np.float32), np.ones(3, np.float32), np.empty(6, np.float32)
>>> addrs = np.array([x.ctypes.data, y.ctypes.data, out.ctypes.data], np.int64)
>>> prog = np.zeros((1, WIDTH), np.int64); prog[0, :6] = [ADD, 0, 1, 2, 2, 3]
>>> jit.compile_now(run_program, prog, addrs)(prog, addrs), out.tolist()
(0, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
"""
import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from tensorweave.kernels.cpu import (gemm, jit, nn_loops, reduce_kernels, rnn_gemm, softmax_loops, training_kernels,
                                     ufunc_loops)

#: columns of a program row: opcode, three operand indexes, eight integers (a row of more
#: operands puts the others in its last integers), and the address-table indexes of the library
#: functions it calls (:data:`GEMM`: ``cblas_sgemm`` and ``MKL_Set_Num_Threads_Local``;
#: :data:`GEMM_OPENBLAS`: OpenBLAS's ``cblas_sgemm``; :data:`XENT`: NumPy's float32 ``exp`` loop
#: and its data)
WIDTH = 14
GEMM, ADD, RELU, RELU_GRAD, COLSUM, MEAN, XENT, GEMM_OPENBLAS, APPLY, PAD = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
#: what the twin returns while the interpreter compiles: run the steps the Python way
NOT_READY = -1


@intrinsic
def _f32_ptr(typingctx, addr):
    """The float32 pointer at integer address ``addr`` (a buffer's data, from the address table)."""
    sig = types.CPointer(types.float32)(types.int64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], ir.PointerType(ir.FloatType()))
    return sig, codegen


def _int_pointer(width):
    @intrinsic
    def pointer(typingctx, addr):
        sig = types.CPointer(types.int32 if width == 32 else types.int64)(types.int64)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], ir.PointerType(ir.IntType(width)))
        return sig, codegen
    return pointer


#: the int32 and int64 pointers at an integer address (labels)
_i32_ptr, _i64_ptr = _int_pointer(32), _int_pointer(64)


@intrinsic
def _gemm_ilp64(typingctx, fn, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc):
    """``c = op(a) @ op(b)`` by the ILP64 ``cblas_sgemm`` at address ``fn`` (row-major, alpha 1,
    beta 0; sizes as 64-bit integers), every operand an integer address or size."""
    sig = types.void(*[types.int64] * 12)

    def codegen(context, builder, signature, args):
        i32, i64, real = ir.IntType(32), ir.IntType(64), ir.FloatType()
        ptr = real.as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, real, ptr, i64, ptr, i64, real, ptr, i64])
        _, ta, tb, m, n, k, a, lda, b, ldb, c, ldc = args
        builder.call(builder.inttoptr(args[0], fnty.as_pointer()),
                     [ir.Constant(i32, _ROW_MAJOR), builder.trunc(ta, i32), builder.trunc(tb, i32), m, n, k,
                      ir.Constant(real, 1.0), builder.inttoptr(a, ptr), lda, builder.inttoptr(b, ptr), ldb,
                      ir.Constant(real, 0.0), builder.inttoptr(c, ptr), ldc])
        return context.get_dummy_value()
    return sig, codegen


_ROW_MAJOR = 101


def openblas_sgemm():
    """The address of NumPy's OpenBLAS ILP64 ``cblas_sgemm`` (:data:`GEMM_OPENBLAS`'s), or None
    (no OpenBLAS found, or an LP64 one)."""
    found = rnn_gemm.openblas_gemm(np.float32)
    return found[0] if found is not None and found[1] == rnn_gemm.ILP64 else None


@jit.njit
def _f32(addr, n):
    """A 1-D float32 view of ``n`` elements at address ``addr``."""
    return numba.carray(_f32_ptr(addr), (n,))


@jit.njit
def xent(x, labels, loss, grad, scale, exp_fn, exp_data):
    """``nn_kernels._sparse_xent_rows(x, labels, True)`` into ``loss`` and ``grad`` (its steps,
    ``loss`` standing for ``picked``: each row reads it before writing it), then ``grad`` times
    ``scale`` (one value, or one per row; empty: none). The first bad label's row, or -1."""
    bad = nn_loops.shift_rows(x, labels, grad, loss)
    if bad >= 0:
        return bad
    flat = grad.reshape(grad.size)
    ufunc_loops.call_unary(exp_fn, exp_data, flat, flat)
    nn_loops.xent_from_exps(grad, labels, loss, loss, True)
    rows, cols = grad.shape
    if scale.size == 1:
        c = scale[0]
        for i in range(flat.size):
            flat[i] = c * flat[i]
    elif scale.size == rows:
        for i in range(rows):
            for j in range(cols):
                grad[i, j] = scale[i] * grad[i, j]
    return -1


@jit.njit
def mean_1d(x, n):
    """``np.add.reduce(x)`` (its pairwise sum over all ``n``) over ``n`` as float64, rounded to
    float32: ``reduce_kernels._mean``'s bits."""
    total = softmax_loops.pairwise_sum(x, 0, n)
    return np.float32(np.float64(total) / np.float64(n))


@jit.njit
def relu_mask(g, y):
    """:data:`RELU_GRAD` where its output is its gradient's buffer (``nogil_segments`` writes an
    elementwise row in place where its first input dies there): ``g = g where y > 0 else 0``, the
    select of ``nn_loops.relu_grad``. That loop with ``out`` = ``g`` fails LLVM's runtime overlap
    check and runs scalar, its select a branch on random signs: 383 µs for 65,536 float32 against
    9 here (thread CPU, AMD EPYC Zen 4)."""
    for i in range(g.size):
        g[i] = g[i] if y[i] > 0 else 0


def exp_loop():
    """``(address, data)`` of NumPy's float32 ``exp`` loop (:data:`XENT`'s), or None."""
    return ufunc_loops.unary_loop(np.exp, np.float32)


def _ctypes_address(a):
    return a.ctypes.data


@jit.njit_twin(_ctypes_address)
def address(a):
    """``a``'s data address, for a segment's address table: ~0.5 µs a call against ``a.ctypes.data``'s
    ~2.3 (thread CPU, load 12; a 27-step segment fills 15 a call)."""
    return a.ctypes.data


def _not_ready(program, addrs):
    return NOT_READY


@jit.njit_twin(_not_ready)
def run_program(program, addrs):
    """Runs the rows of ``program`` over the buffers at ``addrs`` in order; 0 when done, the
    number + 1 of a row that found bad input (its step then runs the Python way and raises)."""
    for row in range(program.shape[0]):
        op, i0, i1, i2 = program[row, 0], program[row, 1], program[row, 2], program[row, 3]
        d = program[row, 4:]
        if op == GEMM:
            # d: trans_a, trans_b, m, n, k, lda, ldb, ldc (the views' sizes only bound them)
            m, n, k = d[2], d[3], d[4]
            a, b, c = _f32(addrs[i0], m * k), _f32(addrs[i1], k * n), _f32(addrs[i2], m * n)
            gemm._call_threads(addrs[program[row, 13]], 1, addrs[program[row, 12]], d[0], d[1], m, n, k,
                               a, d[5], b, d[6], c, d[7])
        elif op == GEMM_OPENBLAS:
            if addrs[i0] == addrs[i1] and d[0] != d[1]:
                return row + 1          # (NumPy would call syrk: not this call's bits)
            _gemm_ilp64(addrs[program[row, 12]], d[0], d[1], d[2], d[3], d[4], addrs[i0], d[5], addrs[i1], d[6],
                        addrs[i2], d[7])
        elif op == APPLY:
            # d: size, the momentum slot's index (-1: plain SGD), the momentum's (a float32 of its own), nesterov
            n = d[0]
            w, g, lr = _f32(addrs[i2], n), _f32(addrs[i0], n), _f32(addrs[i1], 1)[0]
            if d[1] < 0:
                training_kernels._sgd_flat(w, g, lr)
            else:
                training_kernels._momentum_flat(w, _f32(addrs[d[1]], n), g, lr, _f32(addrs[d[2]], 1)[0], d[3] != 0)
        elif op == ADD:
            rows, cols = d[0], d[1]
            out = _f32(addrs[i2], rows * cols)
            if addrs[i2] != addrs[i0]:
                out[:] = _f32(addrs[i0], rows * cols)
            nn_loops.bias_act(out.reshape((rows, cols)), _f32(addrs[i1], cols), False)
        elif op == RELU:
            # (in place too: nn_loops.relu's one-array loop, 6.6 µs for 65,536 float32 where this row's own
            # two-view loop ran scalar, 24: session 25, AMD EPYC Zen 4)
            nn_loops.relu(_f32(addrs[i0], d[0]), _f32(addrs[i2], d[0]))
        elif op == RELU_GRAD:
            if addrs[i2] == addrs[i0]:
                relu_mask(_f32(addrs[i0], d[0]), _f32(addrs[i1], d[0]))
            else:
                nn_loops.relu_grad(_f32(addrs[i0], d[0]), _f32(addrs[i1], d[0]), _f32(addrs[i2], d[0]))
        elif op == COLSUM:
            rows, cols = d[0], d[1]
            out = _f32(addrs[i2], cols)
            out[:] = 0
            reduce_kernels._sum_middle(_f32(addrs[i0], rows * cols).reshape((1, rows, cols)), out.reshape((1, cols)))
        elif op == PAD:
            # d: the piece's size, the padded size, the piece's offset (elements; zeros: a sum's identity)
            out = _f32(addrs[i2], d[1])
            out[:] = 0
            out[d[2]:d[2] + d[0]] = _f32(addrs[i0], d[0])
        elif op == MEAN:
            _f32(addrs[i2], 1)[0] = mean_1d(_f32(addrs[i0], d[0]), d[0])
        elif op == XENT:
            # d: rows, cols, label bits, scale size (0: none); d[5]: the scale's index, d[6]: the loss's
            rows, cols = d[0], d[1]
            x = _f32(addrs[i0], rows * cols).reshape((rows, cols))
            grad = _f32(addrs[i2], rows * cols).reshape((rows, cols))
            loss, scale = _f32(addrs[d[6]], rows), _f32(addrs[d[5]], d[3])
            fn, data = addrs[program[row, 12]], addrs[program[row, 13]]
            if d[2] == 32:
                bad = xent(x, numba.carray(_i32_ptr(addrs[i1]), (rows,)), loss, grad, scale, fn, data)
            else:
                bad = xent(x, numba.carray(_i64_ptr(addrs[i1]), (rows,)), loss, grad, scale, fn, data)
            if bad >= 0:
                return row + 1
    return 0
