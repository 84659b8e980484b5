"""A split product's blocks shared with one helper thread in compiled code, the helper spinning a
bounded time between products (issue 18, mlp28).

Why: ``gemm._run_split`` hands its blocks to the runtime's Python thread pool (``gemm.share_tasks``):
a queue put, a futex wake of a sleeping worker, the GIL taken by the worker and given back, and an
``Event`` the caller sleeps on at the end — tens of µs each way on a VM, paid by every product of a
training step. Here the caller writes the product into a shared ``int64`` mailbox (:data:`FIELDS`)
and both threads take blocks from one atomic counter, each block a one-thread BLAS call on raw
addresses, all without the GIL. Between products the helper spins on the mailbox for
:func:`spin_us` µs (then sleeps on an ``Event``), as OpenMP runtimes and XLA's pool spin before
sleeping, so consecutive products of one step pay no wake.

Same bits as ``gemm._run_split`` with the same blocks: each block is the same one-thread call
(MKL's with its per-thread count at 1, or NumPy's OpenBLAS held at one thread by the caller),
whichever thread runs it. A helper that is asleep or has no core takes nothing: the caller takes
every block left (the counter), so it never waits for a block nobody started.

Opt-in (``TW_SPIN_SHARE=1``; ``TW_SPIN_US`` sets the spin, µs): measured only under load so far
(BENCHMARKS.md, session 24 mlp28), where it cost the mlp step ~5 % more process CPU than the pool (the
caller spin-waits for a helper that has no core) for a hand-off of ~21 µs of the caller's CPU instead of
~52; whether it wins the wall on a quiet host is for a quiet A/B (``bench_gemm_split.py --other spin``).

>>> from tensorweave.kernels.cpu import spin_share
>>> ticket = (3 << spin_share.SHIFT) + 1           # product 3, one block taken
>>> ticket >> spin_share.SHIFT, ticket & ((1 << spin_share.SHIFT) - 1)
(3, 1)
"""
import ctypes
import os
import platform
import threading

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from tensorweave.kernels.cpu import jit

#: the mailbox's fields (an int64 array): ``TICKET`` holds the product's number (high bits) and
#: the next block to take (low :data:`SHIFT` bits), so a helper late from the last product can
#: never take a block of the next one
FIELDS = ("ticket", "done", "awake", "stop", "blocks", "fn", "set_local", "ilp64", "trans_a", "trans_b",
          "m", "n", "k", "a", "lda", "b", "ldb", "c", "ldc", "axis", "step", "item", "spin_ns")
(TICKET, DONE, AWAKE, STOP, BLOCKS, FN, SET_LOCAL, ILP64, TRANS_A, TRANS_B, M, N, K, A, LDA, B, LDB, C, LDC,
 AXIS, STEP, ITEM, SPIN_NS) = range(len(FIELDS))
SHIFT = 20
_ROW_MAJOR, _NO_TRANS = 101, 111
#: µs the helper spins after its last block before sleeping, where not set (``TW_SPIN_US``)
SPIN_US = 100


def _i64(builder, context, value, kind):
    return context.cast(builder, value, kind, types.int64)


def _slot(context, builder, signature, args):
    """The address of ``box[i]`` (``box`` an int64 array, ``i`` an integer)."""
    box = context.make_array(signature.args[0])(context, builder, args[0])
    return builder.gep(box.data, [_i64(builder, context, args[1], signature.args[1])])


@intrinsic
def _fetch_add(typingctx, box, i, value):
    """``box[i] += value`` atomically (sequentially consistent); returns the value before."""
    def codegen(context, builder, signature, args):
        return builder.atomic_rmw("add", _slot(context, builder, signature, args),
                                  _i64(builder, context, args[2], signature.args[2]), "seq_cst")
    return types.int64(box, i, value), codegen


@intrinsic
def _compare_swap(typingctx, box, i, expected, value):
    """``box[i] = value`` if it holds ``expected`` (atomically); returns whether it did."""
    def codegen(context, builder, signature, args):
        got = builder.cmpxchg(_slot(context, builder, signature, args),
                              _i64(builder, context, args[2], signature.args[2]),
                              _i64(builder, context, args[3], signature.args[3]), "seq_cst", "seq_cst")
        return builder.extract_value(got, 1)
    return types.boolean(box, i, expected, value), codegen


@intrinsic
def _load(typingctx, box, i):
    """``box[i]``, an atomic (sequentially consistent) read."""
    def codegen(context, builder, signature, args):
        return builder.load_atomic(_slot(context, builder, signature, args), "seq_cst", 8)
    return types.int64(box, i), codegen


@intrinsic
def _store(typingctx, box, i, value):
    """``box[i] = value``, an atomic (sequentially consistent) write."""
    def codegen(context, builder, signature, args):
        builder.store_atomic(_i64(builder, context, args[2], signature.args[2]),
                             _slot(context, builder, signature, args), "seq_cst", 8)
        return context.get_dummy_value()
    return types.void(box, i, value), codegen


#: the CPU's spin-wait hint as an LLVM intrinsic (inline assembly cannot be emitted by numba's JIT)
_PAUSE = "llvm.x86.sse2.pause" if platform.machine().lower() in ("x86_64", "amd64") else None


@intrinsic
def _pause(typingctx):
    """The CPU's spin-wait hint (``pause`` on x86; nothing elsewhere)."""
    def codegen(context, builder, signature, args):
        if _PAUSE is not None:
            builder.call(cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), _PAUSE), [])
        return context.get_dummy_value()
    return types.void(), codegen


@intrinsic
def _now_ns(typingctx):
    """``CLOCK_MONOTONIC`` in ns (``clock_gettime``: the vDSO, tens of ns)."""
    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        spec = ir.LiteralStructType([i64, i64])
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), spec.as_pointer()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "clock_gettime")
        slot = cgutils.alloca_once(builder, spec)
        builder.call(fn, [ir.Constant(ir.IntType(32), 1), slot])
        sec = builder.load(builder.gep(slot, [ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), 0)]))
        nsec = builder.load(builder.gep(slot, [ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), 1)]))
        return builder.add(builder.mul(sec, ir.Constant(i64, 1_000_000_000)), nsec)
    return types.int64(), codegen


@intrinsic
def _yield_core(typingctx):
    """``sched_yield()``: the caller waiting long for the helper's block gives its core away."""
    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []), "sched_yield")
        builder.call(fn, [])
        return context.get_dummy_value()
    return types.void(), codegen


@intrinsic
def _gemm_at(typingctx, fn, wide, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, real):
    """``c = a @ b`` by the ``cblas_?gemm`` at address ``fn`` on raw addresses ``a``, ``b``, ``c``
    (row-major, alpha 1, beta 0), ``real``'s type the element type; ``wide`` (a literal-free flag
    decided at run time): the ILP64 interface (64-bit sizes, NumPy's OpenBLAS) or LP64 (MKL)."""
    if real not in (types.float32, types.float64):
        return None
    sig = types.void(fn, wide, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, real)

    def codegen(context, builder, signature, args):
        kinds = signature.args
        i32, i64 = ir.IntType(32), ir.IntType(64)
        flt = context.get_value_type(kinds[13])
        ptr = flt.as_pointer()

        def as_int(i, width):
            return context.cast(builder, args[i], kinds[i], types.int64 if width is i64 else types.int32)

        def address(i):
            return builder.inttoptr(as_int(i, i64), ptr)
        target = as_int(0, i64)
        with builder.if_else(builder.icmp_signed("!=", as_int(1, i64), ir.Constant(i64, 0))) as (ilp, lp):
            for branch, width in ((ilp, i64), (lp, i32)):
                with branch:
                    fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, width, width, width, flt, ptr, width,
                                                           ptr, width, flt, ptr, width])
                    builder.call(builder.inttoptr(target, fnty.as_pointer()),
                                 [ir.Constant(i32, _ROW_MAJOR), as_int(2, i32), as_int(3, i32), as_int(4, width),
                                  as_int(5, width), as_int(6, width), ir.Constant(flt, 1.0), address(7),
                                  as_int(8, width), address(9), as_int(10, width), ir.Constant(flt, 0.0),
                                  address(11), as_int(12, width)])
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _set_local(typingctx, fn, n):
    """``MKL_Set_Num_Threads_Local(n)`` at address ``fn``; returns the previous setting."""
    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        target = builder.inttoptr(args[0], ir.FunctionType(i32, [i32]).as_pointer())
        return builder.call(target, [context.cast(builder, args[1], signature.args[1], types.int32)])
    return types.int32(fn, n), codegen


@jit.njit
def _block(box, i):
    """Block ``i`` of the product in ``box``: rows (``axis`` 0) or columns ``i*step`` on."""
    item, step, lo = box[ITEM], box[STEP], i * box[STEP]
    a, b, c, m, n = box[A], box[B], box[C], box[M], box[N]
    if box[AXIS] == 0:
        a += lo * (box[LDA] if box[TRANS_A] == _NO_TRANS else 1) * item
        c += lo * box[LDC] * item
        m = min(m, lo + step) - lo
    else:
        b += lo * (1 if box[TRANS_B] == _NO_TRANS else box[LDB]) * item
        c += lo * item
        n = min(n, lo + step) - lo
    if item == 4:
        _gemm_at(box[FN], box[ILP64], box[TRANS_A], box[TRANS_B], m, n, box[K], a, box[LDA], b, box[LDB], c,
                 box[LDC], np.float32(0))
    else:
        _gemm_at(box[FN], box[ILP64], box[TRANS_A], box[TRANS_B], m, n, box[K], a, box[LDA], b, box[LDB], c,
                 box[LDC], np.float64(0))


@jit.njit
def _work(box, number):
    """Takes blocks of product ``number`` until none is left (or another product is posted)."""
    blocks = box[BLOCKS]
    while True:
        ticket = _load(box, TICKET)
        i = ticket & ((1 << SHIFT) - 1)
        if ticket >> SHIFT != number or i >= blocks:
            return
        if _compare_swap(box, TICKET, ticket, ticket + 1):
            _block(box, i)
            _fetch_add(box, DONE, 1)


@jit.njit
def _serve(box, last):
    """The helper's loop: runs the blocks it takes of every product posted after ``last``,
    spinning ``box[SPIN_NS]`` ns after each; returns the last product's number when it is about
    to sleep, -1 when told to stop. A product posted while it decides to sleep is seen (the
    caller reads ``AWAKE`` after posting, this reads the ticket after clearing ``AWAKE``)."""
    _store(box, AWAKE, 1)
    deadline = _now_ns() + box[SPIN_NS]
    while True:
        if _load(box, STOP) != 0:
            _store(box, AWAKE, 0)
            return -1
        number = _load(box, TICKET) >> SHIFT
        if number != last:
            last = number
            _work(box, number)
            deadline = _now_ns() + box[SPIN_NS]
            continue
        if _now_ns() > deadline:
            _store(box, AWAKE, 0)
            if _load(box, TICKET) >> SHIFT == last:
                return last
            _store(box, AWAKE, 1)
            continue
        _pause()


#: ns the caller waits for the helper's blocks before it yields its core between looks
YIELD_AFTER_NS = 200_000


@jit.njit
def _split(box, fn, set_local, ilp64, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, axis, step, blocks, item):
    """Posts ``c = a @ b`` (``a``, ``b``, ``c`` addresses of ``item``-byte reals) in ``blocks`` blocks
    of ``step`` rows (``axis`` 0) or columns, takes blocks until none is left, waits for the
    helper's; returns 1 where the helper was awake (spinning) when the product was posted, else 0."""
    box[FN], box[SET_LOCAL], box[ILP64], box[TRANS_A], box[TRANS_B] = fn, set_local, ilp64, trans_a, trans_b
    box[M], box[N], box[K], box[LDA], box[LDB], box[LDC] = m, n, k, lda, ldb, ldc
    box[A], box[B], box[C] = a, b, c
    box[AXIS], box[STEP], box[BLOCKS], box[ITEM] = axis, step, blocks, item
    _store(box, DONE, 0)
    number = (_load(box, TICKET) >> SHIFT) + 1
    _store(box, TICKET, number << SHIFT)            # posted: every field above is written
    awake = _load(box, AWAKE)
    before = _set_local(set_local, 1) if set_local != 0 else 0
    _work(box, number)
    if set_local != 0:
        _set_local(set_local, before)
    start = _now_ns()
    while _load(box, DONE) < blocks:
        if _now_ns() - start > YIELD_AFTER_NS:
            _yield_core()
        else:
            _pause()
    return awake


def spin_us():
    """µs the helper spins between products: ``TW_SPIN_US`` where set, else :data:`SPIN_US`."""
    return float(os.environ.get("TW_SPIN_US", SPIN_US))


def enabled():
    """Whether splits take this path (``TW_SPIN_SHARE=1``, read per call; off by default)."""
    return os.environ.get("TW_SPIN_SHARE", "0") == "1"


class Helper:
    """One helper thread and its mailbox. :meth:`run` shares a product's blocks with it."""

    def __init__(self, set_local=0, spin_ns=None):
        self.box = np.zeros(len(FIELDS), np.int64)
        self.box[SPIN_NS] = int(spin_us() * 1000) if spin_ns is None else spin_ns
        self.wake = threading.Event()
        self.lock = threading.Lock()
        self._set_local = set_local
        self.thread = threading.Thread(target=self._loop, name="tw-spin-helper", daemon=True)
        self.thread.start()

    def _loop(self):
        if self._set_local:
            _set_local_once(self._set_local)
        last = 0
        while True:
            last = _serve(self.box, last)
            if last < 0:
                return
            self.wake.wait()
            self.wake.clear()

    def run(self, fn, set_local, ilp64, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, axis, step, blocks):
        """``c = a @ b`` in blocks shared with the helper; False (nothing done) where another
        thread is using it."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            if not self.box[AWAKE]:
                self.wake.set()
            if not _split(self.box, fn, set_local, ilp64, trans_a, trans_b, m, n, k, a.ctypes.data, lda,
                          b.ctypes.data, ldb, c.ctypes.data, ldc, axis, step, blocks, c.itemsize):
                self.wake.set()
        finally:
            self.lock.release()
        return True

    def close(self):
        """Stops the helper thread and waits for it."""
        self.box[STOP] = 1
        self.wake.set()
        self.thread.join()


def _set_local_once(address):
    """The calling thread's MKL count at 1 for good (``MKL_Set_Num_Threads_Local`` at ``address``)."""
    ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(address)(1)


_SERVE_SIG = "int64(int64[::1], int64)"
_SPLIT_SIG = f"int64(int64[::1], {', '.join(['int64'] * 18)})"
_shared = {}                     # "pid": the process whose helper "helper" is; "queued": whose compile is queued
_shared_lock = threading.Lock()


def _compile():
    _serve.compile(_SERVE_SIG)
    _split.compile(_SPLIT_SIG)


def compiled():
    """Whether both loops are compiled (each has one signature, every argument an int64: built
    ahead of time, ``aot_kernels``, or by the JIT)."""
    return all(kernel.overloads or getattr(kernel, "aot_signatures", ()) for kernel in (_serve, _split))


def shared(set_local):
    """This process's :class:`Helper` (made on first use, its MKL per-thread count at 1 through
    ``set_local``'s address), or None where splits take the Python pool: ``TW_SPIN_SHARE`` not ``1``, or
    the loops not compiled yet (their compile queued on the background thread, ``jit.py``: never
    on the caller's; ``TW_JIT_BACKGROUND=0`` compiles them here)."""
    if not enabled():
        return None
    pid = os.getpid()
    if _shared.get("pid") == pid:
        return _shared["helper"]
    if not compiled():
        if jit.BACKGROUND:
            if _shared.get("queued") != pid:
                _shared["queued"] = pid
                jit._compiler.submit(_compile)
            return None
        _compile()
    with _shared_lock:
        if _shared.get("pid") != pid:          # a fork's child makes its own (its parent's thread is not there)
            _shared["helper"], _shared["pid"] = Helper(set_local), pid
    return _shared["helper"]
